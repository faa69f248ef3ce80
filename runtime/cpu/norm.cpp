// layer_norm and rms_norm over the trailing `normalized_shape` dims. Each row
// is normalized in float32 (float64 for float64 inputs) with sums accumulated
// in double, and rounded once to the input's dtype.

#include <cmath>
#include <limits>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

// Checks normalized_shape against the input and an affine parameter; returns
// the row length (the product of normalized_shape).
int64_t check_normalized(const char* op, const Tensor& input, IntArrayRef shape) {
  check_defined(input, op, "input");
  KILN_CHECK(!shape.empty(), "[", op,
             "] expected normalized_shape with at least one dim, got normalized_shape = []");
  const int64_t nd = static_cast<int64_t>(shape.size());
  KILN_CHECK(input.dim() >= nd && input.sizes().slice(input.dim() - nd) == shape, "[", op,
             "] expected an input whose trailing dims are normalized_shape = ", shape,
             ", got input of shape ", input.sizes());
  KILN_CHECK(is_floating(input.dtype()), "[", op, "] expected a floating input, got ",
             input.dtype());
  if (!input.is_meta()) check_cpu(input, op, "input");
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

void check_param(const char* op, const std::optional<Tensor>& p, const char* name,
                 IntArrayRef shape, std::optional<DType> dtype) {
  if (!p || !p->defined()) return;
  KILN_CHECK(p->sizes() == shape, "[", op, "] expected ", name,
             " of the same shape as normalized_shape ", shape, ", got shape ", p->sizes());
  KILN_CHECK(!dtype || p->dtype() == *dtype, "[", op, "] expected ", name, " of dtype ", *dtype,
             " like input, got ", p->dtype());
  if (!p->is_meta()) check_cpu(*p, op, name);
}

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

template <class T>
void layer_norm_rows(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t n,
                     double eps) {
  using M = opmath_t<T>;
  parallel_range(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const T* xr = x + r * n;
          T* yr = y + r * n;
          double sum = 0;
          for (int64_t j = 0; j < n; ++j) sum += static_cast<M>(xr[j]);
          const double mean = sum / static_cast<double>(n);
          double sq = 0;
          for (int64_t j = 0; j < n; ++j) {
            double dev = static_cast<M>(xr[j]) - mean;
            sq += dev * dev;
          }
          // x * rstd - mean * rstd, the form PyTorch evaluates, so rows whose
          // values cancel round alike.
          const M rstd = static_cast<M>(1.0 / std::sqrt(sq / static_cast<double>(n) + eps));
          const M shift = -(rstd * static_cast<M>(mean));
          for (int64_t j = 0; j < n; ++j) {
            M v = static_cast<M>(xr[j]) * rstd + shift;
            if (w) v *= static_cast<M>(w[j]);
            if (b) v += static_cast<M>(b[j]);
            yr[j] = static_cast<T>(v);
          }
        }
      },
      std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(n, 1)));
}

Tensor layer_norm(const Tensor& input, IntArrayRef shape, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, double eps, bool cudnn_enable) {
  const char* op = "layer_norm";
  const int64_t n = check_normalized(op, input, shape);
  check_param(op, weight, "weight", shape, input.dtype());
  check_param(op, bias, "bias", shape, input.dtype());
  Tensor out = empty_tensor(input.sizes(), input.dtype(), input.device());
  if (input.is_meta() || out.numel() == 0) return out;
  Tensor x = input.contiguous();
  Tensor w = weight && weight->defined() ? weight->contiguous() : Tensor();
  Tensor b = bias && bias->defined() ? bias->contiguous() : Tensor();
  visit_allowed<kFloatingMask>(input.dtype(), op, [&]<class T>() {
    layer_norm_rows<T>(x.data_ptr<T>(), data_or_null<T>(w), data_or_null<T>(b), out.data_ptr<T>(),
                       out.numel() / n, n, eps);
  });
  return out;
}

template <class T>
void rms_norm_rows(const T* x, T* y, int64_t rows, int64_t n, double eps) {
  using M = opmath_t<T>;
  parallel_range(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const T* xr = x + r * n;
          T* yr = y + r * n;
          double sq = 0;
          for (int64_t j = 0; j < n; ++j) {
            double v = static_cast<M>(xr[j]);
            sq += v * v;
          }
          const M scale = static_cast<M>(1.0 / std::sqrt(sq / static_cast<double>(n) + eps));
          for (int64_t j = 0; j < n; ++j) yr[j] = static_cast<T>(static_cast<M>(xr[j]) * scale);
        }
      },
      std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(n, 1)));
}

// PyTorch 2.4's semantics: x * rsqrt(mean(x^2) + eps), rounded to x's dtype,
// then times weight with the usual type promotion (a float32 weight makes a
// bfloat16 input's result float32).
Tensor rms_norm(const Tensor& input, IntArrayRef shape, const std::optional<Tensor>& weight,
                std::optional<double> eps) {
  const char* op = "rms_norm";
  const int64_t n = check_normalized(op, input, shape);
  check_param(op, weight, "weight", shape, std::nullopt);
  Tensor normed = empty_tensor(input.sizes(), input.dtype(), input.device());
  if (!input.is_meta() && normed.numel() > 0) {
    Tensor x = input.contiguous();
    const double e = eps.value_or(machine_epsilon(input.dtype()));
    visit_allowed<kFloatingMask>(input.dtype(), op, [&]<class T>() {
      rms_norm_rows<T>(x.data_ptr<T>(), normed.data_ptr<T>(), normed.numel() / n, n, e);
    });
  }
  if (weight && weight->defined()) return kiln::mul(normed, *weight);
  return normed;
}

void register_kernels(Library& m) {
  m.impl("layer_norm", &layer_norm);
  m.impl("rms_norm", &rms_norm);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
