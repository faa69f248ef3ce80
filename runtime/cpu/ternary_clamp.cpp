// clamp on the CPU, with number bounds (clamp, clamp_, clamp.out) and tensor
// bounds (clamp.Tensor, clamp_.Tensor, clamp.Tensor_out), PyTorch's rules:
//   - at least one bound must be given;
//   - number bounds promote an integer or bool tensor (clamp(int, 0.5) is
//     float32) but never a floating one, and are converted to the result
//     dtype with PyTorch's overflow check; two number bounds with a NaN fill
//     the result with NaN; out= must have the result dtype;
//   - tensor bounds promote with self like a binary op (out= takes a safe
//     cast); with both bounds a NaN bound gives NaN, with one bound clamp is
//     maximum / minimum, which propagate NaN;
//   - min > max gives max; a NaN in self stays NaN.

#include <cmath>
#include <limits>
#include <optional>

#include "kiln/dispatch.h"
#include "runtime/core/type_promotion.h"
#include "runtime/cpu/loops.h"

namespace kiln::cpu {
namespace {

constexpr const char* kNeedBound = "] expected at least one of 'min' and 'max', got neither";

bool is_nan(const Scalar& s) {
  return s.is_floating_point() && std::isnan(s.to_double());
}

Tensor clamp_scalar_impl(const char* op, Form form, const Tensor& self,
                         const std::optional<Scalar>& min, const std::optional<Scalar>& max,
                         const Tensor* out) {
  check_defined(self, op, "self");
  KILN_CHECK(min || max, "[", op, kNeedBound);
  DType result = self.dtype();
  if (!is_floating(result)) {
    ResultType rt;
    rt.add(self);
    if (min) rt.add(*min);
    if (max) rt.add(*max);
    result = rt.result(op);
    KILN_CHECK(form != Form::InPlace || result == self.dtype(), "[", op, "] result type ", result,
               " can't be cast to the desired output type ", self.dtype());
  }
  return pointwise(
      op, form, self, out, kNoBoolMask,
      [&](TensorIter& it) { it.input(self).compute_dtype(result).out_cast(OutCast::Same); },
      [&](TensorIter& it) {
        visit_allowed<kNoBoolMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          if (min && max) {
            if (is_nan(*min) || is_nan(*max)) {
              KILN_CHECK(!std::is_integral_v<T>, "[", op, "] expected bounds that fit in ",
                         dtype_of<T>, ", got NaN");
              cpu_kernel<T>(it, [](M) { return std::numeric_limits<M>::quiet_NaN(); });
              return;
            }
            const M lo = scalar_to<T>(*min, op, "min");
            const M hi = scalar_to<T>(*max, op, "max");
            cpu_kernel<T>(it, [lo, hi](M a) {
              const M x = a < lo ? lo : a;
              return hi < x ? hi : x;
            });
          } else if (max) {
            const M hi = scalar_to<T>(*max, op, "max");
            cpu_kernel<T>(it, [hi](M a) { return hi < a ? hi : a; });
          } else {
            const M lo = scalar_to<T>(*min, op, "min");
            cpu_kernel<T>(it, [lo](M a) { return a < lo ? lo : a; });
          }
        });
      });
}

// NaN in any operand gives NaN.
template <class M>
M max_nan(M a, M b) {
  if constexpr (std::is_floating_point_v<M>) {
    if (a != a || b != b) return std::numeric_limits<M>::quiet_NaN();
  }
  return a < b ? b : a;
}
template <class M>
M min_nan(M a, M b) {
  if constexpr (std::is_floating_point_v<M>) {
    if (a != a || b != b) return std::numeric_limits<M>::quiet_NaN();
  }
  return b < a ? b : a;
}

Tensor clamp_tensor_impl(const char* op, Form form, const Tensor& self,
                         const std::optional<Tensor>& min, const std::optional<Tensor>& max,
                         const Tensor* out) {
  check_defined(self, op, "self");
  const bool has_min = min && min->defined(), has_max = max && max->defined();
  KILN_CHECK(has_min || has_max, "[", op, kNeedBound);
  // With both bounds bool is refused; one bound is maximum / minimum, which take it.
  const uint32_t allowed = has_min && has_max ? kNoBoolMask : kAllMask;
  return pointwise(
      op, form, self, out, allowed,
      [&](TensorIter& it) {
        it.input(self);
        if (has_min) it.input(*min);
        if (has_max) it.input(*max);
      },
      [&](TensorIter& it) {
        visit_allowed<kAllMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          if (has_min && has_max) {
            if constexpr (!std::is_same_v<T, bool>) {
              cpu_kernel<T>(it, [](M a, M lo, M hi) {
                if constexpr (std::is_floating_point_v<M>) {
                  if (lo != lo || hi != hi) return std::numeric_limits<M>::quiet_NaN();
                }
                const M x = a < lo ? lo : a;
                return hi < x ? hi : x;
              });
            }
          } else if (has_min) {
            cpu_kernel<T>(it, [](M a, M lo) { return max_nan(a, lo); });
          } else {
            cpu_kernel<T>(it, [](M a, M hi) { return min_nan(a, hi); });
          }
        });
      });
}

Tensor clamp(const Tensor& s, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  return clamp_scalar_impl("clamp", Form::Functional, s, lo, hi, nullptr);
}
Tensor clamp_(const Tensor& s, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  return clamp_scalar_impl("clamp_", Form::InPlace, s, lo, hi, nullptr);
}
Tensor clamp_out(const Tensor& s, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi,
                 const Tensor& out) {
  return clamp_scalar_impl("clamp.out", Form::Out, s, lo, hi, &out);
}
Tensor clamp_t(const Tensor& s, const std::optional<Tensor>& lo, const std::optional<Tensor>& hi) {
  return clamp_tensor_impl("clamp.Tensor", Form::Functional, s, lo, hi, nullptr);
}
Tensor clamp_t_(const Tensor& s, const std::optional<Tensor>& lo, const std::optional<Tensor>& hi) {
  return clamp_tensor_impl("clamp_.Tensor", Form::InPlace, s, lo, hi, nullptr);
}
Tensor clamp_t_out(const Tensor& s, const std::optional<Tensor>& lo,
                   const std::optional<Tensor>& hi, const Tensor& out) {
  return clamp_tensor_impl("clamp.Tensor_out", Form::Out, s, lo, hi, &out);
}

void register_kernels(Library& m) {
  m.impl("clamp", &clamp);
  m.impl("clamp_", &clamp_);
  m.impl("clamp.out", &clamp_out);
  m.impl("clamp.Tensor", &clamp_t);
  m.impl("clamp_.Tensor", &clamp_t_);
  m.impl("clamp.Tensor_out", &clamp_t_out);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
