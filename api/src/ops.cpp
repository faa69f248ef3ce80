// The functions of kiln/ops.h: each finds its op once (checking the C++
// signature against the schema) and dispatches.

#include "kiln/ops.h"

#include "kiln/dispatch.h"
#include "runtime/core/composite_errors.h"
#include "runtime/core/preserved_layout.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/core/type_promotion.h"

namespace kiln {

// Declares a static typed handle for `name` and calls it.
#define KILN_CALL(name, Sig, ...)                     \
  do {                                                \
    static const ::kiln::TypedOp<Sig> kiln_op_(name); \
    return kiln_op_(__VA_ARGS__);                     \
  } while (0)
// The same for in-place and out= forms, which return their first argument.
#define KILN_CALL_INPLACE(target, name, Sig, ...)     \
  do {                                                \
    static const ::kiln::TypedOp<Sig> kiln_op_(name); \
    kiln_op_(__VA_ARGS__);                            \
    return target;                                    \
  } while (0)

using T = const Tensor&;
using OptT = const std::optional<Tensor>&;
using S = const Scalar&;
using OptS = const std::optional<Scalar>&;
using OptD = std::optional<DType>;
using OptDev = std::optional<Device>;
using OptI = std::optional<int64_t>;
using OptF = std::optional<double>;
using OptIL = std::optional<IntArrayRef>;
using OptStr = std::optional<std::string_view>;

// --- Factories -------------------------------------------------------------------

Tensor empty(IntArrayRef size, TensorOptions o) {
  KILN_CALL("empty", Tensor(IntArrayRef, OptD, OptDev), size, o.dtype_, o.device_);
}
Tensor empty_strided(IntArrayRef size, IntArrayRef stride, TensorOptions o) {
  KILN_CALL("empty_strided", Tensor(IntArrayRef, IntArrayRef, OptD, OptDev), size, stride, o.dtype_,
            o.device_);
}
Tensor zeros(IntArrayRef size, TensorOptions o) {
  KILN_CALL("zeros", Tensor(IntArrayRef, OptD, OptDev), size, o.dtype_, o.device_);
}
Tensor ones(IntArrayRef size, TensorOptions o) {
  KILN_CALL("ones", Tensor(IntArrayRef, OptD, OptDev), size, o.dtype_, o.device_);
}
Tensor full(IntArrayRef size, const Scalar& v, TensorOptions o) {
  KILN_CALL("full", Tensor(IntArrayRef, S, OptD, OptDev), size, v, o.dtype_, o.device_);
}
Tensor scalar_tensor(const Scalar& v, TensorOptions o) {
  KILN_CALL("scalar_tensor", Tensor(S, OptD, OptDev), v, o.dtype_, o.device_);
}
// The *_like functions check self themselves: its sizes() would name Tensor::sizes.
// They keep self's layout (Note [Preserved layout]): a contiguous self takes
// the plain factory, any other an empty_strided filled in place.
Tensor empty_like(const Tensor& self, std::optional<DType> dtype) {
  check_defined(self, "empty_like", "self");
  const TensorOptions o = TensorOptions(dtype.value_or(self.dtype())).device(self.device());
  if (self.is_contiguous()) return empty(self.sizes(), o);
  return empty_strided(self.sizes(), preserved_strides(self), o);
}
namespace {
// `value` already checked against the dtype, as full does before it allocates.
Tensor filled_like(const Tensor& self, const Scalar& value, std::optional<DType> dtype) {
  Tensor out = empty_like(self, dtype);
  out.fill_(value);
  return out;
}
}  // namespace
Tensor zeros_like(const Tensor& self, std::optional<DType> dtype) {
  check_defined(self, "zeros_like", "self");
  if (!self.is_contiguous()) return filled_like(self, 0, dtype);
  return zeros(self.sizes(), TensorOptions(dtype.value_or(self.dtype())).device(self.device()));
}
Tensor ones_like(const Tensor& self, std::optional<DType> dtype) {
  check_defined(self, "ones_like", "self");
  if (!self.is_contiguous()) return filled_like(self, 1, dtype);
  return ones(self.sizes(), TensorOptions(dtype.value_or(self.dtype())).device(self.device()));
}
Tensor full_like(const Tensor& self, const Scalar& v, std::optional<DType> dtype) {
  check_defined(self, "full_like", "self");
  if (!self.is_contiguous()) {
    check_convertible(v, dtype.value_or(self.dtype()), "full_like");
    return filled_like(self, v, dtype);
  }
  return rename_errors("full_like", "full", [&] {
    return full(self.sizes(), v, TensorOptions(dtype.value_or(self.dtype())).device(self.device()));
  });
}
Tensor arange(const Scalar& end, TensorOptions o) {
  KILN_CALL("arange", Tensor(S, OptD, OptDev), end, o.dtype_, o.device_);
}
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions o) {
  KILN_CALL("arange.start_step", Tensor(S, S, S, OptD, OptDev), start, end, step, o.dtype_,
            o.device_);
}
Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, TensorOptions o) {
  KILN_CALL("linspace", Tensor(S, S, int64_t, OptD, OptDev), start, end, steps, o.dtype_,
            o.device_);
}
Tensor eye(int64_t n, TensorOptions o) {
  KILN_CALL("eye", Tensor(int64_t, OptD, OptDev), n, o.dtype_, o.device_);
}
Tensor eye(int64_t n, int64_t m, TensorOptions o) {
  KILN_CALL("eye.m", Tensor(int64_t, int64_t, OptD, OptDev), n, m, o.dtype_, o.device_);
}
Tensor rand(IntArrayRef size, TensorOptions o) {
  KILN_CALL("rand", Tensor(IntArrayRef, OptD, OptDev), size, o.dtype_, o.device_);
}
Tensor randn(IntArrayRef size, TensorOptions o) {
  KILN_CALL("randn", Tensor(IntArrayRef, OptD, OptDev), size, o.dtype_, o.device_);
}
Tensor randint(int64_t low, int64_t high, IntArrayRef size, TensorOptions o) {
  KILN_CALL("randint.low", Tensor(int64_t, int64_t, IntArrayRef, OptD, OptDev), low, high, size,
            o.dtype_, o.device_);
}
Tensor randint(int64_t high, IntArrayRef size, TensorOptions o) {
  KILN_CALL("randint", Tensor(int64_t, IntArrayRef, OptD, OptDev), high, size, o.dtype_, o.device_);
}
Tensor multinomial(const Tensor& self, int64_t num_samples, bool replacement) {
  KILN_CALL("multinomial", Tensor(T, int64_t, bool), self, num_samples, replacement);
}

// --- Unary -----------------------------------------------------------------------

#define KILN_DEFINE_UNARY(name)                                    \
  Tensor name(const Tensor& self) {                                \
    KILN_CALL(#name, Tensor(T), self);                             \
  }                                                                \
  Tensor& name##_(Tensor& self) {                                  \
    KILN_CALL_INPLACE(self, #name "_", Tensor(T), self);           \
  }                                                                \
  Tensor& name##_out(Tensor& out, const Tensor& self) {            \
    KILN_CALL_INPLACE(out, #name ".out", Tensor(T, T), self, out); \
  }
KILN_DEFINE_UNARY(neg)
KILN_DEFINE_UNARY(abs)
KILN_DEFINE_UNARY(sign)
KILN_DEFINE_UNARY(exp)
KILN_DEFINE_UNARY(exp2)
KILN_DEFINE_UNARY(expm1)
KILN_DEFINE_UNARY(log)
KILN_DEFINE_UNARY(log2)
KILN_DEFINE_UNARY(log10)
KILN_DEFINE_UNARY(log1p)
KILN_DEFINE_UNARY(sqrt)
KILN_DEFINE_UNARY(rsqrt)
KILN_DEFINE_UNARY(reciprocal)
KILN_DEFINE_UNARY(square)
KILN_DEFINE_UNARY(sin)
KILN_DEFINE_UNARY(cos)
KILN_DEFINE_UNARY(tan)
KILN_DEFINE_UNARY(asin)
KILN_DEFINE_UNARY(acos)
KILN_DEFINE_UNARY(atan)
KILN_DEFINE_UNARY(sinh)
KILN_DEFINE_UNARY(cosh)
KILN_DEFINE_UNARY(tanh)
KILN_DEFINE_UNARY(sigmoid)
KILN_DEFINE_UNARY(relu)
KILN_DEFINE_UNARY(silu)
KILN_DEFINE_UNARY(erf)
KILN_DEFINE_UNARY(erfc)
KILN_DEFINE_UNARY(floor)
KILN_DEFINE_UNARY(ceil)
KILN_DEFINE_UNARY(round)
KILN_DEFINE_UNARY(trunc)
KILN_DEFINE_UNARY(frac)
KILN_DEFINE_UNARY(logical_not)
KILN_DEFINE_UNARY(bitwise_not)
#undef KILN_DEFINE_UNARY

Tensor round(const Tensor& self, int64_t decimals) {
  KILN_CALL("round.decimals", Tensor(T, int64_t), self, decimals);
}
Tensor isnan(const Tensor& self) {
  KILN_CALL("isnan", Tensor(T), self);
}
Tensor isinf(const Tensor& self) {
  KILN_CALL("isinf", Tensor(T), self);
}
Tensor isfinite(const Tensor& self) {
  KILN_CALL("isfinite", Tensor(T), self);
}
Tensor gelu(const Tensor& self, std::string_view approximate) {
  KILN_CALL("gelu", Tensor(T, std::string_view), self, approximate);
}
Tensor& gelu_(Tensor& self, std::string_view approximate) {
  KILN_CALL_INPLACE(self, "gelu_", Tensor(T, std::string_view), self, approximate);
}
Tensor softplus(const Tensor& self, const Scalar& beta, const Scalar& threshold) {
  KILN_CALL("softplus", Tensor(T, S, S), self, beta, threshold);
}
Tensor leaky_relu(const Tensor& self, const Scalar& negative_slope) {
  KILN_CALL("leaky_relu", Tensor(T, S), self, negative_slope);
}
Tensor& leaky_relu_(Tensor& self, const Scalar& negative_slope) {
  KILN_CALL_INPLACE(self, "leaky_relu_", Tensor(T, S), self, negative_slope);
}
Tensor elu(const Tensor& self, const Scalar& alpha, const Scalar& scale,
           const Scalar& input_scale) {
  KILN_CALL("elu", Tensor(T, S, S, S), self, alpha, scale, input_scale);
}
Tensor& elu_(Tensor& self, const Scalar& alpha, const Scalar& scale, const Scalar& input_scale) {
  KILN_CALL_INPLACE(self, "elu_", Tensor(T, S, S, S), self, alpha, scale, input_scale);
}
Tensor hardtanh(const Tensor& self, const Scalar& min_val, const Scalar& max_val) {
  KILN_CALL("hardtanh", Tensor(T, S, S), self, min_val, max_val);
}
Tensor& hardtanh_(Tensor& self, const Scalar& min_val, const Scalar& max_val) {
  KILN_CALL_INPLACE(self, "hardtanh_", Tensor(T, S, S), self, min_val, max_val);
}
Tensor hardsigmoid(const Tensor& self) {
  KILN_CALL("hardsigmoid", Tensor(T), self);
}
Tensor& hardsigmoid_(Tensor& self) {
  KILN_CALL_INPLACE(self, "hardsigmoid_", Tensor(T), self);
}
Tensor hardswish(const Tensor& self) {
  KILN_CALL("hardswish", Tensor(T), self);
}
Tensor& hardswish_(Tensor& self) {
  KILN_CALL_INPLACE(self, "hardswish_", Tensor(T), self);
}
Tensor mish(const Tensor& self) {
  KILN_CALL("mish", Tensor(T), self);
}
Tensor& mish_(Tensor& self) {
  KILN_CALL_INPLACE(self, "mish_", Tensor(T), self);
}
Tensor log_sigmoid(const Tensor& self) {
  KILN_CALL("log_sigmoid", Tensor(T), self);
}
Tensor logsigmoid(const Tensor& self) {
  return log_sigmoid(self);
}
Tensor dropout(const Tensor& input, double p, bool train) {
  KILN_CALL("dropout", Tensor(T, double, bool), input, p, train);
}
Tensor nan_to_num(const Tensor& self, OptF nan, OptF posinf, OptF neginf) {
  KILN_CALL("nan_to_num", Tensor(T, OptF, OptF, OptF), self, nan, posinf, neginf);
}
Tensor& nan_to_num_(Tensor& self, OptF nan, OptF posinf, OptF neginf) {
  KILN_CALL_INPLACE(self, "nan_to_num_", Tensor(T, OptF, OptF, OptF), self, nan, posinf, neginf);
}
Tensor clamp(const Tensor& self, const std::optional<Scalar>& min,
             const std::optional<Scalar>& max) {
  KILN_CALL("clamp", Tensor(T, OptS, OptS), self, min, max);
}
Tensor clamp(const Tensor& self, const std::optional<Tensor>& min,
             const std::optional<Tensor>& max) {
  KILN_CALL("clamp.Tensor", Tensor(T, OptT, OptT), self, min, max);
}
Tensor& clamp_(Tensor& self, const std::optional<Scalar>& min, const std::optional<Scalar>& max) {
  KILN_CALL_INPLACE(self, "clamp_", Tensor(T, OptS, OptS), self, min, max);
}
Tensor& clamp_out(Tensor& out, const Tensor& self, const std::optional<Scalar>& min,
                  const std::optional<Scalar>& max) {
  KILN_CALL_INPLACE(out, "clamp.out", Tensor(T, OptS, OptS, T), self, min, max, out);
}

// --- Binary ----------------------------------------------------------------------

Tensor add(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  KILN_CALL("add.Tensor", Tensor(T, T, S), self, other, alpha);
}
Tensor add(const Tensor& self, const Scalar& other, const Scalar& alpha) {
  KILN_CALL("add.Scalar", Tensor(T, S, S), self, other, alpha);
}
Tensor& add_(Tensor& self, const Tensor& other, const Scalar& alpha) {
  KILN_CALL_INPLACE(self, "add_.Tensor", Tensor(T, T, S), self, other, alpha);
}
Tensor& add_out(Tensor& out, const Tensor& self, const Tensor& other, const Scalar& alpha) {
  KILN_CALL_INPLACE(out, "add.out", Tensor(T, T, S, T), self, other, alpha, out);
}
Tensor sub(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  KILN_CALL("sub.Tensor", Tensor(T, T, S), self, other, alpha);
}
Tensor sub(const Tensor& self, const Scalar& other, const Scalar& alpha) {
  KILN_CALL("sub.Scalar", Tensor(T, S, S), self, other, alpha);
}
Tensor& sub_(Tensor& self, const Tensor& other, const Scalar& alpha) {
  KILN_CALL_INPLACE(self, "sub_.Tensor", Tensor(T, T, S), self, other, alpha);
}
Tensor& sub_out(Tensor& out, const Tensor& self, const Tensor& other, const Scalar& alpha) {
  KILN_CALL_INPLACE(out, "sub.out", Tensor(T, T, S, T), self, other, alpha, out);
}
Tensor div(const Tensor& self, const Tensor& other, OptStr mode) {
  if (!mode) KILN_CALL("div.Tensor", Tensor(T, T), self, other);
  KILN_CALL("div.Tensor_mode", Tensor(T, T, OptStr), self, other, mode);
}
Tensor div(const Tensor& self, const Scalar& other, OptStr mode) {
  if (!mode) KILN_CALL("div.Scalar", Tensor(T, S), self, other);
  KILN_CALL("div.Scalar_mode", Tensor(T, S, OptStr), self, other, mode);
}
Tensor& div_(Tensor& self, const Tensor& other, OptStr mode) {
  if (!mode) KILN_CALL_INPLACE(self, "div_.Tensor", Tensor(T, T), self, other);
  KILN_CALL_INPLACE(self, "div_.Tensor_mode", Tensor(T, T, OptStr), self, other, mode);
}
Tensor& div_out(Tensor& out, const Tensor& self, const Tensor& other, OptStr mode) {
  if (!mode) KILN_CALL_INPLACE(out, "div.out", Tensor(T, T, T), self, other, out);
  KILN_CALL_INPLACE(out, "div.out_mode", Tensor(T, T, OptStr, T), self, other, mode, out);
}

#define KILN_DEFINE_BINARY(name, out_overload)                                         \
  Tensor name(const Tensor& self, const Tensor& other) {                               \
    KILN_CALL(#name ".Tensor", Tensor(T, T), self, other);                             \
  }                                                                                    \
  Tensor name(const Tensor& self, const Scalar& other) {                               \
    KILN_CALL(#name ".Scalar", Tensor(T, S), self, other);                             \
  }                                                                                    \
  Tensor& name##_(Tensor& self, const Tensor& other) {                                 \
    KILN_CALL_INPLACE(self, #name "_.Tensor", Tensor(T, T), self, other);              \
  }                                                                                    \
  Tensor& name##_out(Tensor& out, const Tensor& self, const Tensor& other) {           \
    KILN_CALL_INPLACE(out, #name "." out_overload, Tensor(T, T, T), self, other, out); \
  }
KILN_DEFINE_BINARY(mul, "out")
KILN_DEFINE_BINARY(remainder, "Tensor_out")
KILN_DEFINE_BINARY(fmod, "Tensor_out")
KILN_DEFINE_BINARY(bitwise_and, "Tensor_out")
KILN_DEFINE_BINARY(bitwise_or, "Tensor_out")
KILN_DEFINE_BINARY(bitwise_xor, "Tensor_out")
KILN_DEFINE_BINARY(eq, "Tensor_out")
KILN_DEFINE_BINARY(ne, "Tensor_out")
KILN_DEFINE_BINARY(lt, "Tensor_out")
KILN_DEFINE_BINARY(le, "Tensor_out")
KILN_DEFINE_BINARY(gt, "Tensor_out")
KILN_DEFINE_BINARY(ge, "Tensor_out")
#undef KILN_DEFINE_BINARY

Tensor floor_divide(const Tensor& self, const Tensor& other) {
  KILN_CALL("floor_divide", Tensor(T, T), self, other);
}
Tensor floor_divide(const Tensor& self, const Scalar& other) {
  KILN_CALL("floor_divide.Scalar", Tensor(T, S), self, other);
}
Tensor& floor_divide_(Tensor& self, const Tensor& other) {
  KILN_CALL_INPLACE(self, "floor_divide_.Tensor", Tensor(T, T), self, other);
}
Tensor& floor_divide_out(Tensor& out, const Tensor& self, const Tensor& other) {
  KILN_CALL_INPLACE(out, "floor_divide.out", Tensor(T, T, T), self, other, out);
}
Tensor pow(const Tensor& self, const Tensor& exponent) {
  KILN_CALL("pow.Tensor_Tensor", Tensor(T, T), self, exponent);
}
Tensor pow(const Tensor& self, const Scalar& exponent) {
  KILN_CALL("pow.Tensor_Scalar", Tensor(T, S), self, exponent);
}
Tensor pow(const Scalar& self, const Tensor& exponent) {
  KILN_CALL("pow.Scalar", Tensor(S, T), self, exponent);
}
Tensor& pow_(Tensor& self, const Tensor& exponent) {
  KILN_CALL_INPLACE(self, "pow_.Tensor", Tensor(T, T), self, exponent);
}
Tensor& pow_out(Tensor& out, const Tensor& self, const Tensor& exponent) {
  KILN_CALL_INPLACE(out, "pow.Tensor_Tensor_out", Tensor(T, T, T), self, exponent, out);
}

#define KILN_DEFINE_BINARY_TENSOR(name)                                      \
  Tensor name(const Tensor& self, const Tensor& other) {                     \
    KILN_CALL(#name, Tensor(T, T), self, other);                             \
  }                                                                          \
  Tensor& name##_(Tensor& self, const Tensor& other) {                       \
    KILN_CALL_INPLACE(self, #name "_", Tensor(T, T), self, other);           \
  }                                                                          \
  Tensor& name##_out(Tensor& out, const Tensor& self, const Tensor& other) { \
    KILN_CALL_INPLACE(out, #name ".out", Tensor(T, T, T), self, other, out); \
  }
KILN_DEFINE_BINARY_TENSOR(atan2)
KILN_DEFINE_BINARY_TENSOR(maximum)
KILN_DEFINE_BINARY_TENSOR(minimum)
KILN_DEFINE_BINARY_TENSOR(logical_and)
KILN_DEFINE_BINARY_TENSOR(logical_or)
KILN_DEFINE_BINARY_TENSOR(logical_xor)
#undef KILN_DEFINE_BINARY_TENSOR

// --- Ternary ---------------------------------------------------------------------

Tensor where(const Tensor& condition, const Tensor& self, const Tensor& other) {
  KILN_CALL("where.self", Tensor(T, T, T), condition, self, other);
}
namespace {

// A Python-style number operand: a CPU 0-dim tensor made here, not recorded
// (a wrapped number is a constant the fusion passes fold into the kernel;
// recorded lazily it would be a pending CPU operand of a CUDA group).
Tensor wrapped_number(const Scalar& v) {
  Tensor t = kiln::scalar_tensor(v, v.dtype());  // a double stays one, as PyTorch's
  t.impl()->set_wrapped_number(true);
  return t;
}

// where's number operand, refused as PyTorch's where.ScalarSelf/ScalarOther
// refuse it when it overflows the result's dtype (300 beside int8, 1e10
// beside float16; inf, and negatives into unsigned types, pass).
Tensor where_number(const Scalar& v, const Tensor& beside) {
  if (beside.defined()) check_convertible(v, result_type(beside, v), "where");
  return wrapped_number(v);
}

}  // namespace

Tensor where(const Tensor& condition, const Scalar& self, const Tensor& other) {
  return where(condition, where_number(self, other), other);
}
Tensor where(const Tensor& condition, const Tensor& self, const Scalar& other) {
  return where(condition, self, where_number(other, self));
}
Tensor lerp(const Tensor& self, const Tensor& end, const Scalar& weight) {
  KILN_CALL("lerp.Scalar", Tensor(T, T, S), self, end, weight);
}
Tensor lerp(const Tensor& self, const Tensor& end, const Tensor& weight) {
  KILN_CALL("lerp.Tensor", Tensor(T, T, T), self, end, weight);
}
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  KILN_CALL("addcmul", Tensor(T, T, T, S), self, t1, t2, value);
}
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  KILN_CALL("addcdiv", Tensor(T, T, T, S), self, t1, t2, value);
}

// --- Reductions ------------------------------------------------------------------

Tensor sum(const Tensor& self, OptD dtype) {
  KILN_CALL("sum", Tensor(T, OptD), self, dtype);
}
Tensor sum(const Tensor& self, IntArrayRef dim, bool keepdim, OptD dtype) {
  KILN_CALL("sum.dim_IntList", Tensor(T, OptIL, bool, OptD), self, OptIL(dim), keepdim, dtype);
}
Tensor mean(const Tensor& self, OptD dtype) {
  KILN_CALL("mean", Tensor(T, OptD), self, dtype);
}
Tensor mean(const Tensor& self, IntArrayRef dim, bool keepdim, OptD dtype) {
  KILN_CALL("mean.dim", Tensor(T, OptIL, bool, OptD), self, OptIL(dim), keepdim, dtype);
}
Tensor prod(const Tensor& self, OptD dtype) {
  KILN_CALL("prod", Tensor(T, OptD), self, dtype);
}
Tensor prod(const Tensor& self, int64_t dim, bool keepdim, OptD dtype) {
  KILN_CALL("prod.dim_int", Tensor(T, int64_t, bool, OptD), self, dim, keepdim, dtype);
}
Tensor amax(const Tensor& self, IntArrayRef dim, bool keepdim) {
  KILN_CALL("amax", Tensor(T, IntArrayRef, bool), self, dim, keepdim);
}
Tensor amin(const Tensor& self, IntArrayRef dim, bool keepdim) {
  KILN_CALL("amin", Tensor(T, IntArrayRef, bool), self, dim, keepdim);
}
Tensor max(const Tensor& self, const Tensor& other) {
  KILN_CALL("max.other", Tensor(T, T), self, other);
}
Tensor min(const Tensor& self, const Tensor& other) {
  KILN_CALL("min.other", Tensor(T, T), self, other);
}
Tensor max(const Tensor& self) {
  KILN_CALL("max", Tensor(T), self);
}
Tensor min(const Tensor& self) {
  KILN_CALL("min", Tensor(T), self);
}
TensorPair max(const Tensor& self, int64_t dim, bool keepdim) {
  KILN_CALL("max.dim", TensorPair(T, int64_t, bool), self, dim, keepdim);
}
TensorPair min(const Tensor& self, int64_t dim, bool keepdim) {
  KILN_CALL("min.dim", TensorPair(T, int64_t, bool), self, dim, keepdim);
}
Tensor argmax(const Tensor& self, OptI dim, bool keepdim) {
  KILN_CALL("argmax", Tensor(T, OptI, bool), self, dim, keepdim);
}
Tensor argmin(const Tensor& self, OptI dim, bool keepdim) {
  KILN_CALL("argmin", Tensor(T, OptI, bool), self, dim, keepdim);
}
Tensor var_unbiased(const Tensor& self, OptIL dim, bool unbiased, bool keepdim) {
  KILN_CALL("var.dim", Tensor(T, OptIL, bool, bool), self, dim, unbiased, keepdim);
}
Tensor std_unbiased(const Tensor& self, OptIL dim, bool unbiased, bool keepdim) {
  KILN_CALL("std.dim", Tensor(T, OptIL, bool, bool), self, dim, unbiased, keepdim);
}
Tensor var(const Tensor& self, IntArrayRef dim, OptI correction, bool keepdim) {
  KILN_CALL("var.correction", Tensor(T, OptIL, OptI, bool), self, OptIL(dim), correction, keepdim);
}
Tensor std(const Tensor& self, IntArrayRef dim, OptI correction, bool keepdim) {
  KILN_CALL("std.correction", Tensor(T, OptIL, OptI, bool), self, OptIL(dim), correction, keepdim);
}
Tensor logsumexp(const Tensor& self, IntArrayRef dim, bool keepdim) {
  KILN_CALL("logsumexp", Tensor(T, IntArrayRef, bool), self, dim, keepdim);
}
Tensor all(const Tensor& self) {
  KILN_CALL("all", Tensor(T), self);
}
Tensor all(const Tensor& self, int64_t dim, bool keepdim) {
  KILN_CALL("all.dim", Tensor(T, int64_t, bool), self, dim, keepdim);
}
Tensor any(const Tensor& self) {
  KILN_CALL("any", Tensor(T), self);
}
Tensor any(const Tensor& self, int64_t dim, bool keepdim) {
  KILN_CALL("any.dim", Tensor(T, int64_t, bool), self, dim, keepdim);
}
Tensor norm(const Tensor& self, const Scalar& p) {
  KILN_CALL("norm.Scalar", Tensor(T, S), self, p);
}
Tensor norm(const Tensor& self, const std::optional<Scalar>& p, IntArrayRef dim, bool keepdim) {
  KILN_CALL("norm.ScalarOpt_dim", Tensor(T, OptS, IntArrayRef, bool), self, p, dim, keepdim);
}
Tensor cumsum(const Tensor& self, int64_t dim, OptD dtype) {
  KILN_CALL("cumsum", Tensor(T, int64_t, OptD), self, dim, dtype);
}
Tensor cumprod(const Tensor& self, int64_t dim, OptD dtype) {
  KILN_CALL("cumprod", Tensor(T, int64_t, OptD), self, dim, dtype);
}

// --- Neural-network functions --------------------------------------------------------

Tensor softmax(const Tensor& self, int64_t dim, OptD dtype) {
  KILN_CALL("softmax.int", Tensor(T, int64_t, OptD), self, dim, dtype);
}
Tensor log_softmax(const Tensor& self, int64_t dim, OptD dtype) {
  KILN_CALL("log_softmax.int", Tensor(T, int64_t, OptD), self, dim, dtype);
}
Tensor layer_norm(const Tensor& input, IntArrayRef shape, OptT weight, OptT bias, double eps) {
  KILN_CALL("layer_norm", Tensor(T, IntArrayRef, OptT, OptT, double, bool), input, shape, weight,
            bias, eps, true);
}
Tensor rms_norm(const Tensor& input, IntArrayRef shape, OptT weight, OptF eps) {
  KILN_CALL("rms_norm", Tensor(T, IntArrayRef, OptT, OptF), input, shape, weight, eps);
}
Tensor& embedding_renorm_(Tensor& self, const Tensor& indices, double max_norm, double norm_type) {
  KILN_CALL_INPLACE(self, "embedding_renorm_", Tensor(T, T, double, double), self, indices,
                    max_norm, norm_type);
}
// With max_norm the rows are rescaled first (Note [Embedding max_norm], in
// runtime/cpu/embedding.cpp), but the call is still embedding: the
// arguments are checked as embedding checks them, and before any row is
// rescaled, as PyTorch 1.13 does. The indices' values are data, checked only
// when the work runs (later, in lazy mode): embedding checks them, reading
// row v of [0, rows) for index v, and embedding_renorm_ reads what that
// returns, so a bad index fails as embedding's error and the rescale never
// runs. That costs a gather of one int64 per index and an arange of the rows.
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx, OptF max_norm,
                 double norm_type, bool scale_grad_by_freq, bool sparse) {
  if (max_norm) {
    const char* op = "embedding";
    check_defined(weight, op, "weight");
    check_defined(indices, op, "indices");
    embedding(meta_twin(weight), meta_twin(indices), padding_idx);  // shapes, dtypes, padding_idx
    KILN_CHECK(is_floating(weight.dtype()),
               "[embedding] expected a floating-point weight when max_norm is given (its rows' "
               "norms are taken), got ",
               weight.dtype());
    const Tensor rows = arange(weight.size(0), TensorOptions(kInt64).device(weight.device()));
    const Tensor checked = embedding(rows.unsqueeze(1), indices).squeeze(-1);
    Tensor w = weight;
    embedding_renorm_(w, checked, *max_norm, norm_type);
  }
  KILN_CALL("embedding", Tensor(T, T, int64_t, bool, bool), weight, indices, padding_idx,
            scale_grad_by_freq, sparse);
}
Tensor linear(const Tensor& input, const Tensor& weight, OptT bias) {
  KILN_CALL("linear", Tensor(T, T, OptT), input, weight, bias);
}
Tensor conv1d(const Tensor& input, const Tensor& weight, OptT bias, IntArrayRef stride,
              IntArrayRef padding, IntArrayRef dilation, int64_t groups) {
  KILN_CALL("conv1d", Tensor(T, T, OptT, IntArrayRef, IntArrayRef, IntArrayRef, int64_t), input,
            weight, bias, stride, padding, dilation, groups);
}
Tensor conv2d(const Tensor& input, const Tensor& weight, OptT bias, IntArrayRef stride,
              IntArrayRef padding, IntArrayRef dilation, int64_t groups) {
  KILN_CALL("conv2d", Tensor(T, T, OptT, IntArrayRef, IntArrayRef, IntArrayRef, int64_t), input,
            weight, bias, stride, padding, dilation, groups);
}
Tensor conv1d_padding(const Tensor& input, const Tensor& weight, OptT bias, IntArrayRef stride,
                      std::string_view padding, IntArrayRef dilation, int64_t groups) {
  KILN_CALL("conv1d.padding",
            Tensor(T, T, OptT, IntArrayRef, std::string_view, IntArrayRef, int64_t), input, weight,
            bias, stride, padding, dilation, groups);
}
Tensor conv2d_padding(const Tensor& input, const Tensor& weight, OptT bias, IntArrayRef stride,
                      std::string_view padding, IntArrayRef dilation, int64_t groups) {
  KILN_CALL("conv2d.padding",
            Tensor(T, T, OptT, IntArrayRef, std::string_view, IntArrayRef, int64_t), input, weight,
            bias, stride, padding, dilation, groups);
}
#define KILN_POOL_WINDOW IntArrayRef, IntArrayRef, IntArrayRef, IntArrayRef, bool
Tensor max_pool1d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                  IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  KILN_CALL("max_pool1d", Tensor(T, KILN_POOL_WINDOW), input, kernel_size, stride, padding,
            dilation, ceil_mode);
}
Tensor max_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                  IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  KILN_CALL("max_pool2d", Tensor(T, KILN_POOL_WINDOW), input, kernel_size, stride, padding,
            dilation, ceil_mode);
}
TensorPair max_pool1d_with_indices(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                                   IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  KILN_CALL("max_pool1d_with_indices", TensorPair(T, KILN_POOL_WINDOW), input, kernel_size, stride,
            padding, dilation, ceil_mode);
}
TensorPair max_pool2d_with_indices(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                                   IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  KILN_CALL("max_pool2d_with_indices", TensorPair(T, KILN_POOL_WINDOW), input, kernel_size, stride,
            padding, dilation, ceil_mode);
}
#undef KILN_POOL_WINDOW
Tensor avg_pool1d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                  IntArrayRef padding, bool ceil_mode, bool count_include_pad) {
  KILN_CALL("avg_pool1d", Tensor(T, IntArrayRef, IntArrayRef, IntArrayRef, bool, bool), input,
            kernel_size, stride, padding, ceil_mode, count_include_pad);
}
Tensor avg_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                  IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                  OptI divisor_override) {
  KILN_CALL("avg_pool2d", Tensor(T, IntArrayRef, IntArrayRef, IntArrayRef, bool, bool, OptI), input,
            kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
}
Tensor adaptive_avg_pool1d(const Tensor& input, IntArrayRef output_size) {
  KILN_CALL("adaptive_avg_pool1d", Tensor(T, IntArrayRef), input, output_size);
}
Tensor adaptive_avg_pool2d(const Tensor& input, IntArrayRef output_size) {
  KILN_CALL("adaptive_avg_pool2d", Tensor(T, IntArrayRef), input, output_size);
}
TensorPair adaptive_max_pool1d(const Tensor& input, IntArrayRef output_size) {
  KILN_CALL("adaptive_max_pool1d", TensorPair(T, IntArrayRef), input, output_size);
}
TensorPair adaptive_max_pool2d(const Tensor& input, IntArrayRef output_size) {
  KILN_CALL("adaptive_max_pool2d", TensorPair(T, IntArrayRef), input, output_size);
}
Tensor interpolate(const Tensor& input, OptIL size, std::optional<ArrayRef<double>> scale_factor,
                   std::string_view mode, std::optional<bool> align_corners,
                   std::optional<bool> recompute_scale_factor, bool antialias) {
  KILN_CALL("interpolate",
            Tensor(T, OptIL, std::optional<ArrayRef<double>>, std::string_view, std::optional<bool>,
                   std::optional<bool>, bool),
            input, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias);
}
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    OptT attn_mask, bool is_causal, OptF scale, bool enable_gqa) {
  KILN_CALL("scaled_dot_product_attention", Tensor(T, T, T, OptT, double, bool, OptF, bool), q, k,
            v, attn_mask, 0.0, is_causal, scale, enable_gqa);
}
Tensor kv_cache_attention(const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                          const Tensor& cache_position, OptF scale) {
  KILN_CALL("kv_cache_attention", Tensor(T, T, T, T, OptF), query, key_cache, value_cache,
            cache_position, scale);
}

// --- Matrix products -----------------------------------------------------------------

Tensor matmul(const Tensor& self, const Tensor& other) {
  KILN_CALL("matmul", Tensor(T, T), self, other);
}
Tensor& matmul_out(Tensor& out, const Tensor& self, const Tensor& other) {
  KILN_CALL_INPLACE(out, "matmul.out", Tensor(T, T, T), self, other, out);
}
Tensor mm(const Tensor& self, const Tensor& mat2) {
  KILN_CALL("mm", Tensor(T, T), self, mat2);
}
Tensor bmm(const Tensor& self, const Tensor& mat2) {
  KILN_CALL("bmm", Tensor(T, T), self, mat2);
}
Tensor mv(const Tensor& self, const Tensor& vec) {
  KILN_CALL("mv", Tensor(T, T), self, vec);
}
Tensor addmm(const Tensor& self, const Tensor& m1, const Tensor& m2, const Scalar& beta,
             const Scalar& alpha) {
  KILN_CALL("addmm", Tensor(T, T, T, S, S), self, m1, m2, beta, alpha);
}
Tensor baddbmm(const Tensor& self, const Tensor& b1, const Tensor& b2, const Scalar& beta,
               const Scalar& alpha) {
  KILN_CALL("baddbmm", Tensor(T, T, T, S, S), self, b1, b2, beta, alpha);
}
Tensor addmm_act(const Tensor& bias, const Tensor& m1, const Tensor& m2, std::string_view act) {
  KILN_CALL("addmm_act", Tensor(T, T, T, std::string_view), bias, m1, m2, act);
}
Tensor outer(const Tensor& self, const Tensor& vec2) {
  KILN_CALL("outer", Tensor(T, T), self, vec2);
}

// --- Shape and indexing ------------------------------------------------------------

Tensor cat(TensorList tensors, int64_t dim) {
  KILN_CALL("cat", Tensor(TensorList, int64_t), tensors, dim);
}
Tensor stack(TensorList tensors, int64_t dim) {
  KILN_CALL("stack", Tensor(TensorList, int64_t), tensors, dim);
}
Tensor einsum(std::string_view equation, TensorList tensors) {
  KILN_CALL("einsum", Tensor(std::string_view, TensorList), equation, tensors);
}
std::vector<Tensor> split(const Tensor& self, int64_t split_size, int64_t dim) {
  KILN_CALL("split.Tensor", std::vector<Tensor>(T, int64_t, int64_t), self, split_size, dim);
}
std::vector<Tensor> split(const Tensor& self, IntArrayRef sizes, int64_t dim) {
  KILN_CALL("split_with_sizes", std::vector<Tensor>(T, IntArrayRef, int64_t), self, sizes, dim);
}
std::vector<Tensor> chunk(const Tensor& self, int64_t chunks, int64_t dim) {
  KILN_CALL("chunk", std::vector<Tensor>(T, int64_t, int64_t), self, chunks, dim);
}
Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index) {
  KILN_CALL("index_select", Tensor(T, int64_t, T), self, dim, index);
}
std::vector<Tensor> unbind(const Tensor& self, int64_t dim) {
  KILN_CALL("unbind.int", std::vector<Tensor>(T, int64_t), self, dim);
}
Tensor repeat_interleave(const Tensor& self, int64_t repeats, std::optional<int64_t> dim) {
  KILN_CALL("repeat_interleave.self_int", Tensor(T, int64_t, OptI, OptI), self, repeats, dim,
            std::nullopt);
}
Tensor gather(const Tensor& self, int64_t dim, const Tensor& index) {
  KILN_CALL("gather", Tensor(T, int64_t, T, bool), self, dim, index, false);
}
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  KILN_CALL("scatter.src", Tensor(T, int64_t, T, T), self, dim, index, src);
}
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value) {
  KILN_CALL("scatter.value", Tensor(T, int64_t, T, S), self, dim, index, value);
}
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  KILN_CALL_INPLACE(self, "scatter_.src", Tensor(T, int64_t, T, T), self, dim, index, src);
}
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  KILN_CALL("scatter_add", Tensor(T, int64_t, T, T), self, dim, index, src);
}
Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  KILN_CALL_INPLACE(self, "scatter_add_", Tensor(T, int64_t, T, T), self, dim, index, src);
}
using Str = std::string_view;
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
               std::string_view reduce) {
  KILN_CALL("scatter.reduce", Tensor(T, int64_t, T, T, Str), self, dim, index, src, reduce);
}
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value,
               std::string_view reduce) {
  KILN_CALL("scatter.value_reduce", Tensor(T, int64_t, T, S, Str), self, dim, index, value, reduce);
}
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                 std::string_view reduce) {
  KILN_CALL_INPLACE(self, "scatter_.reduce", Tensor(T, int64_t, T, T, Str), self, dim, index, src,
                    reduce);
}
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Scalar& value,
                 std::string_view reduce) {
  KILN_CALL_INPLACE(self, "scatter_.value_reduce", Tensor(T, int64_t, T, S, Str), self, dim, index,
                    value, reduce);
}
Tensor scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                      std::string_view reduce, bool include_self) {
  KILN_CALL("scatter_reduce.two", Tensor(T, int64_t, T, T, Str, bool), self, dim, index, src,
            reduce, include_self);
}
Tensor& scatter_reduce_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                        std::string_view reduce, bool include_self) {
  KILN_CALL_INPLACE(self, "scatter_reduce_.two", Tensor(T, int64_t, T, T, Str, bool), self, dim,
                    index, src, reduce, include_self);
}
Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  KILN_CALL("index_copy", Tensor(T, int64_t, T, T), self, dim, index, source);
}
Tensor& index_copy_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  KILN_CALL_INPLACE(self, "index_copy_", Tensor(T, int64_t, T, T), self, dim, index, source);
}
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                 const Scalar& alpha) {
  KILN_CALL("index_add", Tensor(T, int64_t, T, T, S), self, dim, index, source, alpha);
}
Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                   const Scalar& alpha) {
  KILN_CALL_INPLACE(self, "index_add_", Tensor(T, int64_t, T, T, S), self, dim, index, source,
                    alpha);
}
Tensor one_hot(const Tensor& self, int64_t num_classes) {
  KILN_CALL("one_hot", Tensor(T, int64_t), self, num_classes);
}
Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& self, bool out_int32, bool right,
                    OptStr side) {
  KILN_CALL("searchsorted.Tensor", Tensor(T, T, bool, bool, OptStr), sorted_sequence, self,
            out_int32, right, side);
}
Tensor searchsorted(const Tensor& sorted_sequence, const Scalar& self, bool out_int32, bool right,
                    OptStr side) {
  KILN_CALL("searchsorted.Scalar", Tensor(T, S, bool, bool, OptStr), sorted_sequence, self,
            out_int32, right, side);
}
Tensor bucketize(const Tensor& self, const Tensor& boundaries, bool out_int32, bool right) {
  KILN_CALL("bucketize.Tensor", Tensor(T, T, bool, bool), self, boundaries, out_int32, right);
}
Tensor bucketize(const Scalar& self, const Tensor& boundaries, bool out_int32, bool right) {
  KILN_CALL("bucketize.Scalar", Tensor(S, T, bool, bool), self, boundaries, out_int32, right);
}
Tensor masked_select(const Tensor& self, const Tensor& mask) {
  KILN_CALL("masked_select", Tensor(T, T), self, mask);
}
Tensor nonzero(const Tensor& self) {
  KILN_CALL("nonzero", Tensor(T), self);
}
Tensor argwhere(const Tensor& self) {
  KILN_CALL("argwhere", Tensor(T), self);
}
Tensor index_put(const Tensor& self, TensorList indices, const Tensor& values, bool accumulate) {
  KILN_CALL("index_put", Tensor(T, TensorList, T, bool), self, indices, values, accumulate);
}
Tensor& index_put_(Tensor& self, TensorList indices, const Tensor& values, bool accumulate) {
  KILN_CALL_INPLACE(self, "index_put_", Tensor(T, TensorList, T, bool), self, indices, values,
                    accumulate);
}
Tensor masked_fill(const Tensor& self, const Tensor& mask, const Scalar& value) {
  KILN_CALL("masked_fill.Scalar", Tensor(T, T, S), self, mask, value);
}
Tensor masked_fill(const Tensor& self, const Tensor& mask, const Tensor& value) {
  KILN_CALL("masked_fill.Tensor", Tensor(T, T, T), self, mask, value);
}
Tensor& masked_fill_(Tensor& self, const Tensor& mask, const Scalar& value) {
  KILN_CALL_INPLACE(self, "masked_fill_.Scalar", Tensor(T, T, S), self, mask, value);
}
Tensor& masked_fill_(Tensor& self, const Tensor& mask, const Tensor& value) {
  KILN_CALL_INPLACE(self, "masked_fill_.Tensor", Tensor(T, T, T), self, mask, value);
}
Tensor tril(const Tensor& self, int64_t diagonal) {
  KILN_CALL("tril", Tensor(T, int64_t), self, diagonal);
}
Tensor triu(const Tensor& self, int64_t diagonal) {
  KILN_CALL("triu", Tensor(T, int64_t), self, diagonal);
}
TensorPair topk(const Tensor& self, int64_t k, int64_t dim, bool largest, bool sorted) {
  KILN_CALL("topk", TensorPair(T, int64_t, int64_t, bool, bool), self, k, dim, largest, sorted);
}
TensorPair sort(const Tensor& self, int64_t dim, bool descending, bool stable) {
  KILN_CALL("sort.stable", TensorPair(T, std::optional<bool>, int64_t, bool), self,
            std::optional<bool>(stable), dim, descending);
}
Tensor argsort(const Tensor& self, int64_t dim, bool descending) {
  KILN_CALL("argsort", Tensor(T, int64_t, bool), self, dim, descending);
}
Tensor repeat(const Tensor& self, IntArrayRef repeats) {
  KILN_CALL("repeat", Tensor(T, IntArrayRef), self, repeats);
}
Tensor roll(const Tensor& self, IntArrayRef shifts, IntArrayRef dims) {
  KILN_CALL("roll", Tensor(T, IntArrayRef, IntArrayRef), self, shifts, dims);
}
Tensor flip(const Tensor& self, IntArrayRef dims) {
  KILN_CALL("flip", Tensor(T, IntArrayRef), self, dims);
}
Tensor pad(const Tensor& self, IntArrayRef pad, std::string_view mode, OptF value) {
  KILN_CALL("pad", Tensor(T, IntArrayRef, std::string_view, OptF), self, pad, mode, value);
}

// --- Copies ----------------------------------------------------------------------------

Tensor clone(const Tensor& self) {
  KILN_CALL("clone", Tensor(T), self);
}
Tensor& copy_(Tensor& self, const Tensor& src, bool non_blocking) {
  KILN_CALL_INPLACE(self, "copy_", Tensor(T, T, bool), self, src, non_blocking);
}
Tensor& fill_(Tensor& self, const Scalar& value) {
  KILN_CALL_INPLACE(self, "fill_.Scalar", Tensor(T, S), self, value);
}
Tensor& zero_(Tensor& self) {
  KILN_CALL_INPLACE(self, "zero_", Tensor(T), self);
}

}  // namespace kiln
