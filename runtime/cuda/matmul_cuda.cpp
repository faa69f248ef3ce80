// Matrix products on CUDA through cuBLASLt: mm, bmm, mv, addmm, baddbmm,
// matmul, linear and kiln's addmm_act and linear_act. Each kernel first runs the op's Meta
// kernel on meta twins of its arguments, so shapes, dtypes and the error text
// of every user mistake are the CPU kernels' own; then it checks devices and
// dtypes CUDA admits, makes its output and calls lt_matmul (Note [cuBLASLt
// layouts], Note [Matmul epilogues]); integer operands take a generated
// kernel instead (Note [Integer matmuls on CUDA]).
//
// Note [Integer matmuls on CUDA]
// cuBLASLt has no integer GEMM that wraps around, and PyTorch's CPU kernels
// (which kiln's follow) accumulate integer products in the result dtype and
// wrap. uint8/int8/int16/int32/int64 operands of mm, bmm, mv, addmm, baddbmm,
// matmul and linear therefore go to one generated shared-memory tiled kernel
// per dtype instead. It computes in the unsigned type of the operands' width
// (32 bits for the narrower ones): unsigned arithmetic is exact modulo 2^w, so
// the truncated result is the wrapped one whatever the order of the sum, and
// no signed overflow (undefined) happens. alpha and beta are truncated to
// integers as the CPU kernel does. bool stays refused by the Meta kernel.
// addmm_act (made by the matmul epilogue pass in lazy mode) runs unfused for
// integers: addmm, then the activation. The kernel is generated code, so it
// lives in jit/codegen_cuda/op_kernels/int_matmul.cpp and is reached through
// its slot in runtime/core/hooks.h (Note [Runtime hooks]).

#include <limits>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/hooks.h"
#include "runtime/core/matrix_view.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/blas.h"
#include "runtime/cuda/blas_lt.h"
#include "runtime/cuda/cuda_runtime.h"

namespace kiln::cuda {
namespace {

using T = const Tensor&;
using S = const Scalar&;

Tensor meta(const Tensor& t) {
  if (!t.defined()) return t;
  return Tensor(IntrusivePtr<TensorImpl>::make(t.dtype(), Device::meta(), t.sizes(), t.strides(),
                                               t.storage_offset()));
}

struct Arg {
  const Tensor* t;
  const char* name;
};

// Every defined argument on the first one's CUDA device, of a dtype cuBLASLt or
// the integer kernel takes (Note [Integer matmuls on CUDA]).
Device check_operands(const char* op, std::initializer_list<Arg> args) {
  Device dev = Device::cuda();
  bool found = false;
  for (const Arg& a : args) {
    if (a.t->defined() && a.t->is_cuda()) {
      dev = a.t->device();
      found = true;
      break;
    }
  }
  KILN_INTERNAL_ASSERT(found, "[", op, "] CUDA kernel called without a CUDA tensor");
  check_device(dev, op);
  for (const Arg& a : args) {
    if (!a.t->defined()) continue;
    KILN_CHECK(a.t->device() == dev, "[", op, "] expected all tensors on ", dev, ", got ", a.name,
               " on ", a.t->device());
  }
  const DType dt = args.begin()->t->dtype();
  if (is_integral(dt, false)) return dev;
  KILN_CHECK(dt == kFloat32 || dt == kFloat16 || dt == kBFloat16 || dt == kFloat64, "[", op,
             "] expected float32, float16, bfloat16 or float64 operands on CUDA, got ", dt);
  return dev;
}

// [n] -> [n, 1]
Tensor as_column(const Tensor& v) {
  return make_view(v, {v.size(0), 1}, {v.stride(0), 1}, v.storage_offset());
}

// A bias whose leading dims are all 1, as the [n] vector the epilogue takes.
Tensor as_row_vector(const Tensor& bias) {
  if (bias.dim() <= 1) return bias;
  for (int64_t d = 0; d + 1 < bias.dim(); ++d) {
    if (bias.size(d) != 1) return bias;
  }
  return make_view(bias, {bias.size(-1)}, {bias.stride(-1)}, bias.storage_offset());
}

IntMatmulKernel int_matmul() {
  IntMatmulKernel k = int_matmul_kernel();
  KILN_INTERNAL_ASSERT(k != nullptr, "no integer matmul kernel registered");
  return k;
}

// lt_matmul's contract, integer dtypes included (a bias only with a zero beta).
void product_into(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& beta = 0,
                  const Scalar& alpha = 1, const Tensor* bias = nullptr) {
  if (is_floating(out.dtype())) {
    lt_matmul(out, a, b, beta, alpha, Activation::None, bias);
    return;
  }
  const bool beta_zero = cpu::scalar_is_zero(beta, out.dtype());
  if (bias) {
    KILN_INTERNAL_ASSERT(beta_zero, "product_into: a bias and a nonzero beta");
    int_matmul()(out, *bias, a, b, 1, alpha);
  } else {
    int_matmul()(out, beta_zero ? Tensor() : out, a, b, beta, alpha);
  }
}

// --- mm / bmm / mv ----------------------------------------------------------------------

template <const char* kName>
Tensor product(T a, T b) {
  static const TypedOp<Tensor(T, T)> op(kName);
  Tensor shape = op(meta(a), meta(b));
  Device dev = check_operands(kName, {{&a, "self"}, {&b, "mat2"}});
  Tensor r = empty_tensor(shape.sizes(), a.dtype(), dev);
  product_into(r, a, b);
  return r;
}

template <const char* kOut>
Tensor product_out(T a, T b, T out) {
  static const TypedOp<Tensor(T, T, T)> op(kOut);
  Tensor shape = op(meta(a), meta(b), meta(out));
  check_operands(kOut, {{&a, "self"}, {&b, "mat2"}, {&out, "out"}});
  resize_out(out, shape.sizes());
  product_into(out, a, b);
  out.impl()->bump_version();
  return out;
}

constexpr char kMm[] = "mm";
constexpr char kMmOut[] = "mm.out";
constexpr char kBmm[] = "bmm";
constexpr char kBmmOut[] = "bmm.out";

Tensor mv(T a, T v) {
  static const TypedOp<Tensor(T, T)> op("mv");
  op(meta(a), meta(v));
  Device dev = check_operands("mv", {{&a, "self"}, {&v, "vec"}});
  Tensor r = empty_tensor({a.size(0)}, a.dtype(), dev);
  product_into(as_column(r), a, as_column(v));
  return r;
}

// --- addmm / baddbmm --------------------------------------------------------------------

// r = beta * self + alpha * (m1 @ m2), r fresh, `out` or self (in place).
void add_product(const Tensor& r, const Tensor& self_in, const Tensor& m1, const Tensor& m2, S beta,
                 S alpha) {
  if (r.numel() == 0) return;
  const DType dtype = r.dtype();
  Tensor self = self_in.dtype() == dtype ? self_in : self_in.to(dtype);
  if (!is_floating(dtype)) {  // the kernel broadcasts self itself
    int_matmul()(r, cpu::scalar_is_zero(beta, dtype) ? Tensor() : self, m1, m2, beta, alpha);
  } else if (cpu::scalar_is_zero(beta, dtype)) {
    product_into(r, m1, m2, 0, alpha);
  } else if (r.is_same(self)) {
    product_into(r, m1, m2, beta, alpha);  // C: the output's values
  } else if (self.sizes() == r.sizes()) {
    Tensor dst = r;
    dst.copy_(self);
    product_into(r, m1, m2, beta, alpha);
  } else if (Tensor bias = as_row_vector(self);
             beta.to<double>() == 1.0 && bias.dim() == 1 && bias.size(0) == r.size(-1)) {
    product_into(r, m1, m2, 0, alpha, &bias);
  } else {
    // Any other self that broadcasts (a bias per batch, a column): C, read
    // by the product with beta, so the sum is rounded once.
    Tensor dst = r;
    dst.copy_(self.expand(r.sizes()));
    product_into(r, m1, m2, beta, alpha);
  }
}

Tensor addmm(T self, T m1, T m2, S beta, S alpha) {
  static const TypedOp<Tensor(T, T, T, S, S)> op("addmm");
  Tensor shape = op(meta(self), meta(m1), meta(m2), beta, alpha);
  Device dev = check_operands("addmm", {{&m1, "mat1"}, {&m2, "mat2"}, {&self, "self"}});
  Tensor r = empty_tensor(shape.sizes(), m1.dtype(), dev);
  add_product(r, self, m1, m2, beta, alpha);
  return r;
}

Tensor addmm_(T self, T m1, T m2, S beta, S alpha) {
  static const TypedOp<Tensor(T, T, T, S, S)> op("addmm_");
  op(meta(self), meta(m1), meta(m2), beta, alpha);
  check_operands("addmm_", {{&m1, "mat1"}, {&m2, "mat2"}, {&self, "self"}});
  add_product(self, self, m1, m2, beta, alpha);
  self.impl()->bump_version();
  return self;
}

Tensor addmm_out(T self, T m1, T m2, S beta, S alpha, T out) {
  static const TypedOp<Tensor(T, T, T, S, S, T)> op("addmm.out");
  Tensor shape = op(meta(self), meta(m1), meta(m2), beta, alpha, meta(out));
  check_operands("addmm.out", {{&m1, "mat1"}, {&m2, "mat2"}, {&self, "self"}, {&out, "out"}});
  resize_out(out, shape.sizes());
  add_product(out, self, m1, m2, beta, alpha);
  out.impl()->bump_version();
  return out;
}

Tensor baddbmm(T self, T b1, T b2, S beta, S alpha) {
  static const TypedOp<Tensor(T, T, T, S, S)> op("baddbmm");
  Tensor shape = op(meta(self), meta(b1), meta(b2), beta, alpha);
  Device dev = check_operands("baddbmm", {{&b1, "batch1"}, {&b2, "batch2"}, {&self, "self"}});
  Tensor r = empty_tensor(shape.sizes(), b1.dtype(), dev);
  add_product(r, self, b1, b2, beta, alpha);
  return r;
}

// --- matmul -----------------------------------------------------------------------------

// The product into `r` (of matmul's result shape), as the CPU kernel lays it out.
void matmul_into_result(const Tensor& r, const Tensor& a, const Tensor& b) {
  const int64_t da = a.dim(), db = b.dim();
  const int64_t k = a.size(-1);
  const int64_t n = da >= 2 ? a.size(-2) : 1, p = db >= 2 ? b.size(-1) : 1;
  const int64_t nb = r.dim() - (da >= 2 ? 1 : 0) - (db >= 2 ? 1 : 0);
  DimVector batch(r.sizes().slice(0, static_cast<size_t>(nb)));
  DimVector full_sizes = batch, full_strides;
  for (int64_t i = 0; i < nb; ++i) full_strides.push_back(r.stride(i));
  full_sizes.push_back(n);
  full_sizes.push_back(p);
  full_strides.push_back(da >= 2 ? r.stride(nb) : 0);
  full_strides.push_back(db >= 2 ? r.stride(-1) : 0);
  Tensor full = make_view(r, full_sizes, full_strides, r.storage_offset());
  Tensor a2 = da == 1 ? make_view(a, {1, k}, {0, a.stride(0)}, a.storage_offset()) : a;
  Tensor b2 = db == 1 ? as_column(b) : b;
  product_into(full, expand_batch(a2, batch, 2), expand_batch(b2, batch, 2));
}

Tensor matmul(T a, T b) {
  static const TypedOp<Tensor(T, T)> op("matmul");
  Tensor shape = op(meta(a), meta(b));
  Device dev = check_operands("matmul", {{&a, "self"}, {&b, "other"}});
  Tensor r = empty_tensor(shape.sizes(), a.dtype(), dev);
  if (r.numel() > 0) matmul_into_result(r, a, b);
  return r;
}

Tensor matmul_out(T a, T b, T out) {
  static const TypedOp<Tensor(T, T, T)> op("matmul.out");
  Tensor shape = op(meta(a), meta(b), meta(out));
  check_operands("matmul.out", {{&a, "self"}, {&b, "other"}, {&out, "out"}});
  resize_out(out, shape.sizes());
  if (out.numel() > 0) matmul_into_result(out, a, b);
  out.impl()->bump_version();
  return out;
}

// --- linear / addmm_act -----------------------------------------------------------------

Tensor linear(T input, T weight, const std::optional<Tensor>& bias) {
  static const TypedOp<Tensor(T, T, const std::optional<Tensor>&)> op("linear");
  const bool has_bias = bias && bias->defined();
  Tensor shape =
      op(meta(input), meta(weight), has_bias ? std::optional<Tensor>(meta(*bias)) : bias);
  const Tensor none;
  Device dev = check_operands(
      "linear", {{&input, "input"}, {&weight, "weight"}, {has_bias ? &*bias : &none, "bias"}});
  Tensor out = empty_tensor(shape.sizes(), input.dtype(), dev);
  if (out.numel() == 0) return out;
  const auto [out2, in2, w2] = linear_matrices(out, input, weight);
  if (!has_bias) {
    product_into(out2, in2, w2);
    return out;
  }
  Tensor vec = as_row_vector(*bias);
  if (vec.dim() <= 1) {
    product_into(out2, in2, w2, 0, 1, &vec);
  } else if (bias->sizes() == out.sizes() || !is_floating(out.dtype())) {
    out.copy_(*bias);  // broadcasts; integers then wrap in the one kernel
    product_into(out2, in2, w2, 1, 1);
  } else {
    product_into(out2, in2, w2);
    out.add_(*bias);
  }
  return out;
}

Tensor addmm_act(T bias, T a, T b, std::string_view act) {
  static const TypedOp<Tensor(T, T, T, std::string_view)> op("addmm_act");
  Tensor shape = op(meta(bias), meta(a), meta(b), act);
  const Activation activation = parse_activation(act, "addmm_act");
  Device dev = check_operands("addmm_act", {{&a, "mat1"}, {&b, "mat2"}, {&bias, "bias"}});
  if (!is_floating(a.dtype())) {  // no epilogue to fuse into: the unfused form, as on the CPU
    Tensor r = kiln::addmm(bias, a, b);
    if (activation == Activation::Relu) kiln::relu_(r);
    if (activation == Activation::GeluTanh) kiln::gelu_(r, "tanh");
    return r;
  }
  Tensor r = empty_tensor(shape.sizes(), a.dtype(), dev);
  if (r.numel() == 0) return r;
  Tensor vec = as_row_vector(bias);
  lt_matmul(r, a, b, 0, 1, activation, &vec);
  return r;
}

// The input after linear_act's norm, as its own kernel (the CPU op's rule).
Tensor normalize(const Tensor& input, std::string_view norm, const std::optional<Tensor>& w,
                 const std::optional<Tensor>& b, double eps) {
  if (norm == "none") return input;
  const int64_t k = input.size(-1);
  if (norm == "layer_norm") return kiln::layer_norm(input, {k}, w, b, eps);
  return kiln::rms_norm(input, {k}, w, eps);
}

const Tensor* defined_or_null(const std::optional<Tensor>& t) {
  return t && t->defined() ? &*t : nullptr;
}

// `residual` (of out's sizes) as out2's matrix where its rows fold; else undefined.
Tensor residual_matrix(const Tensor& residual, const Tensor& out, const Tensor& out2) {
  if (residual.sizes() != out.sizes() || residual.dim() < 1) return Tensor();
  std::optional<int64_t> rs = folded_row_stride(residual);
  if (!rs) return Tensor();
  return make_view(residual, out2.sizes(), {*rs, residual.stride(-1)}, residual.storage_offset());
}

// act(norm(input) @ weight^T + bias) + residual (Note [Matmul epilogues],
// Note [Norm prologues]).
Tensor linear_act(T input, T weight, const std::optional<Tensor>& bias, std::string_view act,
                  const std::optional<Tensor>& residual, std::string_view norm,
                  const std::optional<Tensor>& norm_weight, const std::optional<Tensor>& norm_bias,
                  double norm_eps) {
  using Opt = const std::optional<Tensor>&;
  static const TypedOp<Tensor(T, T, Opt, std::string_view, Opt, std::string_view, Opt, Opt, double)>
      op("linear_act");
  const bool has_bias = bias && bias->defined();
  const bool has_res = residual && residual->defined();
  auto meta_opt = [](const std::optional<Tensor>& t) {
    return t && t->defined() ? std::optional<Tensor>(meta(*t)) : t;
  };
  Tensor shape = op(meta(input), meta(weight), meta_opt(bias), act, meta_opt(residual), norm,
                    meta_opt(norm_weight), meta_opt(norm_bias), norm_eps);
  const Activation activation = parse_activation(act, "linear_act");
  const Tensor none;
  auto or_none = [&](const std::optional<Tensor>& t) { return t && t->defined() ? &*t : &none; };
  Device dev = check_operands("linear_act", {{&input, "input"},
                                             {&weight, "weight"},
                                             {or_none(bias), "bias"},
                                             {or_none(residual), "residual"},
                                             {or_none(norm_weight), "norm_weight"},
                                             {or_none(norm_bias), "norm_bias"}});
  if (!is_floating(input.dtype())) {  // no epilogue to fuse into: the unfused form, as on the CPU
    Tensor r = kiln::linear(normalize(input, norm, norm_weight, norm_bias, norm_eps), weight, bias);
    if (activation == Activation::Relu) kiln::relu_(r);
    if (activation == Activation::GeluTanh) kiln::gelu_(r, "tanh");
    if (has_res) kiln::add_(r, *residual);
    return r;
  }
  Tensor out = empty_tensor(shape.sizes(), input.dtype(), dev);
  if (out.numel() == 0) return out;
  Tensor vec = has_bias ? as_row_vector(*bias) : Tensor();
  // The product of x (the input after its norm) through lt_matmul.
  auto product = [&](const Tensor& x) {
    const auto [out2, in2, w2] = linear_matrices(out, x, weight);
    // The residual as out2's matrix where its rows fold, else added after.
    const Tensor res2 = has_res ? residual_matrix(*residual, out, out2) : Tensor();
    const Tensor* res_ptr = res2.defined() ? &res2 : nullptr;
    if (!has_bias || vec.dim() <= 1) {
      lt_matmul(out2, in2, w2, 0, 1, activation, has_bias ? &vec : nullptr, res_ptr);
    } else {
      out.copy_(*bias);  // a full bias broadcasts through C
      lt_matmul(out2, in2, w2, 1, 1, activation);
      res_ptr = nullptr;
    }
    if (has_res && !res_ptr) kiln::add_(out, *residual);
  };
  if (norm != "none" && input.size(-1) > 0 && (!has_bias || vec.dim() == 1)) {
    // Few rows: the skinny kernel normalizes as it reads (Note [Norm prologues]).
    const auto [out2, in2, w2] = linear_matrices(out, input, weight);
    const Tensor res2 = has_res ? residual_matrix(*residual, out, out2) : Tensor();
    if ((!has_res || res2.defined()) &&
        skinny_matmul_with_norm(
            out2, in2, w2, activation, has_bias ? &vec : nullptr, has_res ? &res2 : nullptr,
            norm == "layer_norm" ? 1 : 2, defined_or_null(norm_weight), defined_or_null(norm_bias),
            norm_eps, [&] { product(normalize(input, norm, norm_weight, norm_bias, norm_eps)); })) {
      return out;
    }
  }
  product(normalize(input, norm, norm_weight, norm_bias, norm_eps));
  return out;
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("mm", &product<kMm>);
  m.impl("mm.out", &product_out<kMmOut>);
  m.impl("bmm", &product<kBmm>);
  m.impl("bmm.out", &product_out<kBmmOut>);
  m.impl("mv", &mv);
  m.impl("addmm", &addmm);
  m.impl("addmm_", &addmm_);
  m.impl("addmm.out", &addmm_out);
  m.impl("baddbmm", &baddbmm);
  m.impl("matmul", &matmul);
  m.impl("matmul.out", &matmul_out);
  m.impl("linear", &linear);
  m.impl("addmm_act", &addmm_act);
  m.impl("linear_act", &linear_act);
}

}  // namespace kiln::cuda
