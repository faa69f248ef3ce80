#include <cfloat>
#include <cmath>
#include <string>
#include <unordered_map>

#include "jit/record/decompose_internal.h"

namespace kiln::jit::decomp {

// Floor division of 16-bit floats, as the eager kernel's formula (PyTorch's)
// with every step rounded to the 16-bit grid; computed in float32, where
// a / b cannot overflow, so copysign(0, a / b) is (a / b) * 0.
int32_t floor_div_reduced(KernelBuilder& b, DType od, int32_t x, int32_t y) {
  const DType t = kFloat32;
  auto r = [&](int32_t v) { return b.round_to(v, od); };
  int32_t zero = b.constant(0, t), one = b.constant(1, t);
  int32_t q = b.op(Prim::Div, t, x, y);
  int32_t mod = b.op(Prim::Fmod, t, x, y);
  int32_t div = r(b.op(Prim::Div, t, r(b.op(Prim::Sub, t, x, mod)), y));
  int32_t adjust =
      b.op(Prim::LogicalAnd, kBool, b.op(Prim::Ne, kBool, mod, zero),
           b.op(Prim::Ne, kBool, b.op(Prim::Lt, kBool, y, zero), b.op(Prim::Lt, kBool, mod, zero)));
  div = b.op(Prim::Where, t, adjust, r(b.op(Prim::Sub, t, div, one)), div);
  int32_t fl = b.op(Prim::Floor, t, div);
  int32_t up = b.op(Prim::Gt, kBool, r(b.op(Prim::Sub, t, div, fl)), b.constant(0.5, t));
  fl = b.op(Prim::Where, t, up, r(b.op(Prim::Add, t, fl, one)), fl);
  fl = b.op(Prim::Where, t, b.op(Prim::Eq, kBool, div, zero), b.op(Prim::Mul, t, q, zero), fl);
  return b.op(Prim::Where, t, b.op(Prim::Eq, kBool, y, zero), q, fl);
}

// floor_divide on CUDA: 16-bit floats too (floor_div_reduced).
int32_t d_floor_divide(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  if (!is_reduced_float(out_dtype(n))) return d_divmod<Prim::FloorDiv>(b, n, v);
  return floor_div_reduced(b, out_dtype(n), b.cast(v[0], kFloat32), b.cast(v[1], kFloat32));
}

// div with a rounding mode: none is true division; "trunc" and "floor" keep
// integers integral. A 16-bit quotient is rounded before it is truncated, as
// the eager kernel's 16-bit arithmetic does.
int32_t d_div_mode(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (t == kBool) return -1;
  int32_t x = b.cast(v[0], t), y = b.cast(v[1], t);
  if (arg(n, 2).is_none()) {
    if (!is_floating(t)) return -1;
    return b.op(Prim::Div, t, x, y);
  }
  const std::string& mode = arg(n, 2).to_string();
  if (mode == "trunc") {
    if (!is_floating(t)) return b.op(Prim::Div, t, x, y);
    return b.op(Prim::Trunc, t, b.round_to(b.op(Prim::Div, t, x, y), out_dtype(n)));
  }
  if (mode != "floor") return -1;
  if (is_reduced_float(out_dtype(n))) return floor_div_reduced(b, out_dtype(n), x, y);
  return b.op(Prim::FloorDiv, t, x, y);
}

// clamp with tensor bounds, as the eager kernel: with both, a NaN bound gives
// NaN and x propagates NaN; with one, maximum / minimum.
int32_t d_clamp_tensor(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  const bool lo = arg(n, 1).is_tensor() && arg(n, 1).to_tensor().defined();
  const bool hi = arg(n, 2).is_tensor() && arg(n, 2).to_tensor().defined();
  int32_t x = b.cast(v[0], t);
  if (lo && hi) {
    if (t == kBool) return -1;
    int32_t l = b.cast(v[1], t), h = b.cast(v[2], t);
    x = b.op(Prim::Where, t, b.op(Prim::Lt, kBool, x, l), l, x);
    x = b.op(Prim::Where, t, b.op(Prim::Lt, kBool, h, x), h, x);
    if (!is_floating(t)) return x;
    int32_t bad =
        b.op(Prim::LogicalOr, kBool, b.op(Prim::IsNan, kBool, l), b.op(Prim::IsNan, kBool, h));
    return b.op(Prim::Where, t, bad, b.constant(NAN, t), x);
  }
  if (lo) return b.op(Prim::Max, t, x, b.cast(v[1], t));
  if (hi) return b.op(Prim::Min, t, x, b.cast(v[1], t));
  return -1;
}

// True when every value of dtype `from` converts to `to` without the overflow
// that PyTorch's checked Scalar conversion rejects.
bool never_overflows(DType from, DType to) {
  if (from == to || from == kBool || to == kBool || to == kFloat64) return true;
  if (to == kFloat32) return from != kFloat64;
  if (to == kBFloat16) return is_integral(from, false);
  if (is_floating(from) || is_floating(to)) return false;  // into float16 or an integer
  return itemsize(from) < itemsize(to) && (is_signed(to) || !is_signed(from));
}

// masked_fill: the value converted to self's dtype where the mask is set. A
// value tensor that might not fit self's dtype is left to the op's CUDA kernel
// (Note [CUDA masked_fill value]), which reads it and checks, as the CPU does.
int32_t d_masked_fill(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  int32_t value;
  if (arg(n, 2).is_tensor()) {
    if (!never_overflows(arg(n, 2).to_tensor().dtype(), out_dtype(n))) return -1;
    value = b.cast(v[2], t);
  } else {
    double x = number(n, 2);
    if (!is_floating(t) && !std::isfinite(x)) return -1;
    value = b.round_to(b.param(x, t), out_dtype(n));
  }
  return b.op(Prim::Where, t, b.cast(v[1], kBool), value, b.cast(v[0], t));
}

double finite_max(DType t) {
  switch (t) {
    case kFloat16:
      return 65504.0;
    case kBFloat16:
      return 3.3895313892515355e38;
    case kFloat32:
      return FLT_MAX;
    default:
      return DBL_MAX;
  }
}

int32_t d_nan_to_num(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n), od = out_dtype(n);
  int32_t x = b.cast(v[0], t);
  if (!is_floating(t)) return x;
  auto value = [&](int i, double otherwise) {
    if (arg(n, i).is_none()) return b.round_to(b.constant(otherwise, t), od);
    double c = arg(n, i).to_double();
    if (t == kFloat32) c = static_cast<float>(c);
    return b.round_to(b.param(c, t), od);
  };
  int32_t inf = b.constant(HUGE_VAL, t), ninf = b.constant(-HUGE_VAL, t);
  int32_t r = b.op(Prim::Where, t, b.op(Prim::Eq, kBool, x, ninf), value(3, -finite_max(od)), x);
  r = b.op(Prim::Where, t, b.op(Prim::Eq, kBool, x, inf), value(2, finite_max(od)), r);
  return b.op(Prim::Where, t, b.op(Prim::IsNan, kBool, x), value(1, 0.0), r);
}

// round(x * 10^d) / 10^d (x / 10^-d ... for d < 0), each step on the dtype's grid.
int32_t d_round_decimals(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n), od = out_dtype(n);
  if (!is_floating(t)) return -1;
  const int64_t d = arg(n, 1).to_int();
  double power = std::pow(10.0, static_cast<double>(d < 0 ? -d : d));
  if (t == kFloat32) power = static_cast<float>(power);
  int32_t ten = b.round_to(b.constant(power, t), od);
  int32_t x = b.cast(v[0], t);
  int32_t scaled = b.round_to(b.op(d < 0 ? Prim::Div : Prim::Mul, t, x, ten), od);
  int32_t r = b.round_to(b.op(Prim::Round, t, scaled), od);
  return b.op(d < 0 ? Prim::Mul : Prim::Div, t, r, ten);
}

// x if x * beta > threshold, else log1p(exp(x * beta)) / beta, in the compute type.
int32_t d_softplus(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (!is_floating(t)) return -1;
  int32_t x = b.cast(v[0], t);
  int32_t beta = b.param(number(n, 1), t), th = b.param(number(n, 2), t);
  int32_t xb = b.op(Prim::Mul, t, x, beta);
  int32_t soft = b.op(Prim::Div, t, b.op(Prim::Log1p, t, b.op(Prim::Exp, t, xb)), beta);
  return b.op(Prim::Where, t, b.op(Prim::Gt, kBool, xb, th), x, soft);
}

// Integer addcmul: self + value * t1 * t2, wrapping as the eager kernel does.
int32_t d_addcmul_int(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (is_floating(t)) return d_addc<Prim::Mul>(b, n, v);
  if (t == kBool) return -1;
  // The value converts to the integer type as the eager kernel's does (0.5 ->
  // 0); out of the type's range it raises there, so the node stays extern.
  const double value = std::trunc(number(n, 3));
  const int bits = static_cast<int>(itemsize(t)) * 8;
  const double hi = std::ldexp(1.0, t == kUInt8 ? bits : bits - 1);
  const double lo = t == kUInt8 ? 0.0 : -hi;
  if (!(value >= lo && value < hi)) return -1;
  int32_t x = b.op(Prim::Mul, t, b.param(value, t), b.cast(v[1], t));
  x = b.op(Prim::Mul, t, x, b.cast(v[2], t));
  return b.op(Prim::Add, t, b.cast(v[0], t), x);
}

// Note [CUDA-only decompositions]
// Ops that only CUDA nodes decompose: on CUDA they have no eager kernel of
// their own (Note [Eager CUDA ops]), on the CPU their eager kernels stay the
// reference that lazy CPU results are held to, unchanged.
const std::unordered_map<std::string, Decomposition>& cuda_table() {
  static const std::unordered_map<std::string, Decomposition> t = {
      {"div.Tensor_mode", d_div_mode},
      {"floor_divide", d_floor_divide},
      {"floor_divide_.Tensor", d_floor_divide},
      {"div_.Tensor_mode", d_div_mode},
      {"clamp.Tensor", d_clamp_tensor},
      {"clamp_.Tensor", d_clamp_tensor},
      {"masked_fill.Scalar", d_masked_fill},
      {"masked_fill.Tensor", d_masked_fill},
      {"masked_fill_.Scalar", d_masked_fill},
      {"masked_fill_.Tensor", d_masked_fill},
      {"nan_to_num", d_nan_to_num},
      {"nan_to_num_", d_nan_to_num},
      {"round.decimals", d_round_decimals},
      {"round_.decimals", d_round_decimals},
      {"erfc", d_erfc},
      {"erfc_", d_erfc},
      {"softplus", d_softplus},
      {"pow_.Scalar", d_pow_scalar},
      {"pow_.Tensor", d_binary<Prim::Pow>},
      {"addcmul", d_addcmul_int},
      {"addcmul_", d_addcmul_int},
      {"addcdiv_", d_addc<Prim::Div>},
      {"maximum_", d_binary<Prim::Max>},
      {"minimum_", d_binary<Prim::Min>},
  };
  return t;
}

}  // namespace kiln::jit::decomp
