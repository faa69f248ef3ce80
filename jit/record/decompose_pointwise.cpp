#include <cmath>
#include <string>
#include <unordered_map>

#include "jit/record/decompose_internal.h"

namespace kiln::jit::decomp {

int32_t unary(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v, Prim p) {
  DType t = out_compute(n);
  return b.op(p, t, b.cast(v[0], t));
}

#define KILN_UNARY(name, prim)                                                   \
  int32_t name(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) { \
    return unary(b, n, v, Prim::prim);                                           \
  }
KILN_UNARY(d_neg, Neg)
KILN_UNARY(d_abs, Abs)
KILN_UNARY(d_exp, Exp)
KILN_UNARY(d_log, Log)
KILN_UNARY(d_sqrt, Sqrt)
KILN_UNARY(d_rsqrt, Rsqrt)
KILN_UNARY(d_reciprocal, Reciprocal)
KILN_UNARY(d_sin, Sin)
KILN_UNARY(d_cos, Cos)
KILN_UNARY(d_tanh, Tanh)
KILN_UNARY(d_sigmoid, Sigmoid)
KILN_UNARY(d_relu, Relu)
KILN_UNARY(d_erf, Erf)
KILN_UNARY(d_floor, Floor)
KILN_UNARY(d_ceil, Ceil)
KILN_UNARY(d_trunc, Trunc)
KILN_UNARY(d_round, Round)
KILN_UNARY(d_silu, Silu)
KILN_UNARY(d_expm1, Expm1)
KILN_UNARY(d_log1p, Log1p)
KILN_UNARY(d_asin, Asin)
KILN_UNARY(d_acos, Acos)
KILN_UNARY(d_atan, Atan)
KILN_UNARY(d_sinh, Sinh)
KILN_UNARY(d_cosh, Cosh)
KILN_UNARY(d_tan, Tan)
KILN_UNARY(d_exp2, Exp2)
KILN_UNARY(d_log2, Log2)
KILN_UNARY(d_log10, Log10)
KILN_UNARY(d_sign, Sign)
KILN_UNARY(d_frac, Frac)
KILN_UNARY(d_erfc, Erfc)
#undef KILN_UNARY

int32_t d_square(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  int32_t x = b.cast(v[0], t);
  return b.op(Prim::Mul, t, x, x);
}

int32_t d_logical_not(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  return b.cast(b.op(Prim::LogicalNot, kBool, b.cast(v[0], kBool)), out_compute(n));
}

// Bit ops exist for integers and bool only (eager rejects floating operands).
int32_t d_bitwise_not(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (is_floating(t)) return -1;
  return b.op(Prim::BitNot, t, b.cast(v[0], t));
}

// self + w (end - self) for |w| < 0.5, else end - (end - self)(1 - w).
int32_t lerp_value(KernelBuilder& b, DType t, int32_t s, int32_t e, int32_t w, int which) {
  int32_t d = b.op(Prim::Sub, t, e, s);
  int32_t lo = b.op(Prim::Add, t, s, b.op(Prim::Mul, t, w, d));
  int32_t hi =
      b.op(Prim::Sub, t, e, b.op(Prim::Mul, t, d, b.op(Prim::Sub, t, b.constant(1, t), w)));
  if (which == 0) return lo;
  if (which == 1) return hi;
  int32_t small = b.op(Prim::Lt, kBool, b.op(Prim::Abs, t, w), b.constant(0.5, t));
  return b.op(Prim::Where, t, small, lo, hi);
}

int32_t d_lerp_scalar(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (!is_floating(t)) return -1;
  double w = number(n, 2);
  // A NaN weight takes the eager kernel's second formula (|w| < 0.5 fails);
  // the CPU generator leaves it to the eager kernel.
  if (std::isnan(w) && !n.device.is_cuda()) return -1;
  return lerp_value(b, t, b.cast(v[0], t), b.cast(v[1], t), b.param(w, t),
                    (t == kFloat64 ? std::abs(w) : std::abs(static_cast<float>(w))) < 0.5 ? 0 : 1);
}

int32_t d_lerp_tensor(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (!is_floating(t)) return -1;
  return lerp_value(b, t, b.cast(v[0], t), b.cast(v[1], t), b.cast(v[2], t), 2);
}

int32_t d_gelu(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  const std::string& mode = arg(n, 1).to_string();
  if (mode != "none" && mode != "tanh") return -1;
  return unary(b, n, v, mode == "tanh" ? Prim::GeluTanh : Prim::GeluErf);
}

// The activations of runtime/cpu/unary_activation*.cpp, formula for formula
// (floating only: the eager kernels refuse other dtypes at the call).
int32_t d_leaky_relu(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (!is_floating(t)) return -1;
  int32_t x = b.cast(v[0], t);
  int32_t neg = b.op(Prim::Mul, t, x, b.param(number(n, 1), t));
  return b.op(Prim::Where, t, b.op(Prim::Gt, kBool, x, b.constant(0, t)), x, neg);
}

int32_t d_elu(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (!is_floating(t)) return -1;
  int32_t x = b.cast(v[0], t);
  double scale = number(n, 2), alpha_scale = number(n, 1);
  // alpha * scale in the compute type, as the eager kernel multiplies them.
  alpha_scale =
      t == kFloat32
          ? static_cast<double>(static_cast<float>(alpha_scale) * static_cast<float>(scale))
          : alpha_scale * scale;
  int32_t pos = b.op(Prim::Mul, t, x, b.param(scale, t));
  int32_t e = b.op(Prim::Expm1, t, b.op(Prim::Mul, t, x, b.param(number(n, 3), t)));
  e = b.op(Prim::Add, t, e, b.constant(0, t));  // +0 for -0, as the eager kernel
  int32_t neg = b.op(Prim::Mul, t, e, b.param(alpha_scale, t));
  return b.op(Prim::Where, t, b.op(Prim::Gt, kBool, x, b.constant(0, t)), pos, neg);
}

// min(max(x + 3, 0), 6): max and min propagate NaN.
int32_t relu6_shifted(KernelBuilder& b, DType t, int32_t x) {
  int32_t r = b.op(Prim::Add, t, x, b.constant(3, t));
  r = b.op(Prim::Max, t, r, b.constant(0, t));
  return b.op(Prim::Min, t, r, b.constant(6, t));
}

int32_t d_hardsigmoid(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (!is_floating(t)) return -1;
  return b.op(Prim::Div, t, relu6_shifted(b, t, b.cast(v[0], t)), b.constant(6, t));
}

int32_t d_hardswish(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (!is_floating(t)) return -1;
  int32_t x = b.cast(v[0], t);
  return b.op(Prim::Div, t, b.op(Prim::Mul, t, x, relu6_shifted(b, t, x)), b.constant(6, t));
}

int32_t d_mish(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (!is_floating(t)) return -1;
  int32_t x = b.cast(v[0], t);
  int32_t sp = b.op(Prim::Log1p, t, b.op(Prim::Exp, t, x));
  return b.op(Prim::Mul, t, x, b.op(Prim::Tanh, t, sp));
}

// min(x, 0) - log1p(exp(-|x|)).
int32_t d_log_sigmoid(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (!is_floating(t)) return -1;
  int32_t x = b.cast(v[0], t);
  int32_t low = b.op(Prim::Min, t, x, b.constant(0, t));
  int32_t e = b.op(Prim::Exp, t, b.op(Prim::Neg, t, b.op(Prim::Abs, t, x)));
  return b.op(Prim::Sub, t, low, b.op(Prim::Log1p, t, e));
}

int32_t d_where(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  return b.op(Prim::Where, t, b.cast(v[0], kBool), b.cast(v[1], t), b.cast(v[2], t));
}

// As the eager kernel (and PyTorch): integers by exact repeated multiplication
// (a negative exponent raises there); float16 takes the exponent as float16
// and calls pow; the others special-case 0.5, -0.5, -1, 2, 3 and -2, the
// products rounded step by step as the eager kernel's are.
// The CPU generator's forms (it has no integer kernels).
// As the eager kernels of both devices (and PyTorch): integers by exact
// repeated multiplication (a negative exponent raises there; CUDA only: the
// CPU generator has no integer kernels); float16 takes the exponent as
// float16 and calls pow; the others special-case 0.5, -0.5, -1, 2, 3 and -2,
// bfloat16 taking the exponent as bfloat16, rounding the products step by
// step as the eager kernel does.
int32_t d_pow_scalar(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  double e = number(n, 1);
  int32_t x = b.cast(v[0], t);
  if (!is_floating(t)) {
    if (!n.device.is_cuda() || t == kBool || e < 0 || e != std::trunc(e)) return -1;
    return b.op(Prim::Pow, t, x, b.constant(e, t));
  }
  const DType od = out_dtype(n);
  if (od == kFloat16) return b.op(Prim::Pow, t, x, b.constant(static_cast<float>(Half(e)), t));
  if (e == 0.5) return b.op(Prim::Sqrt, t, x);
  if (e == -0.5) return b.op(Prim::Rsqrt, t, x);
  if (od == kBFloat16) e = static_cast<float>(BFloat16(static_cast<float>(e)));
  if (t == kFloat32) e = static_cast<float>(e);
  if (e == 1.0) return x;
  if (e == 2.0) return b.op(Prim::Mul, t, x, x);
  if (e == -1.0) return b.op(Prim::Reciprocal, t, x);
  if (e == 3.0) return b.op(Prim::Mul, t, b.round_to(b.op(Prim::Mul, t, x, x), od), x);
  if (e == -2.0) return b.op(Prim::Reciprocal, t, b.round_to(b.op(Prim::Mul, t, x, x), od));
  return b.op(Prim::Pow, t, x, b.constant(e, t));
}

int32_t d_clamp(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  int32_t x = b.cast(v[0], t);
  // As PyTorch: min first, then max, NaN in x propagating. With both bounds a
  // NaN bound makes the result NaN; a lone NaN bound is ignored.
  bool lo = !arg(n, 1).is_none(), hi = !arg(n, 2).is_none();
  bool both = lo && hi;
  if (lo && (both || !std::isnan(number(n, 1))))
    x = b.op(Prim::Max, t, x, b.param(number(n, 1), t));
  if (hi && (both || !std::isnan(number(n, 2))))
    x = b.op(Prim::Min, t, x, b.param(number(n, 2), t));
  return x;
}

// Casts and copies: the value itself, converted by the store.
int32_t d_identity(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  return b.cast(v[0], out_compute(n));
}

int32_t d_to_copy(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  // Only conversions on one device fuse; device moves stay extern copies.
  if (!(n.outputs[0].device() == n.args[0].to_tensor().device())) return -1;
  return d_identity(b, n, v);
}

const std::unordered_map<std::string, Decomposition>& table() {
  static const std::unordered_map<std::string, Decomposition> t = {
      {"neg", d_neg},
      {"abs", d_abs},
      {"exp", d_exp},
      {"log", d_log},
      {"sqrt", d_sqrt},
      {"rsqrt", d_rsqrt},
      {"reciprocal", d_reciprocal},
      {"sin", d_sin},
      {"cos", d_cos},
      {"tanh", d_tanh},
      {"sigmoid", d_sigmoid},
      {"relu", d_relu},
      {"erf", d_erf},
      {"floor", d_floor},
      {"ceil", d_ceil},
      {"trunc", d_trunc},
      {"round", d_round},
      {"silu", d_silu},
      {"expm1", d_expm1},
      {"log1p", d_log1p},
      {"gelu", d_gelu},
      {"leaky_relu", d_leaky_relu},
      {"elu", d_elu},
      {"hardsigmoid", d_hardsigmoid},
      {"hardswish", d_hardswish},
      {"mish", d_mish},
      {"log_sigmoid", d_log_sigmoid},
      {"asin", d_asin},
      {"acos", d_acos},
      {"atan", d_atan},
      {"sinh", d_sinh},
      {"cosh", d_cosh},
      {"tan", d_tan},
      {"exp2", d_exp2},
      {"log2", d_log2},
      {"log10", d_log10},
      {"sign", d_sign},
      {"frac", d_frac},
      {"square", d_square},
      {"isnan", d_predicate<Prim::IsNan>},
      {"isinf", d_predicate<Prim::IsInf>},
      {"isfinite", d_predicate<Prim::IsFinite>},
      {"logical_not", d_logical_not},
      {"bitwise_not", d_bitwise_not},
      {"atan2", d_binary<Prim::Atan2>},
      {"logical_and", d_logical<Prim::LogicalAnd>},
      {"logical_or", d_logical<Prim::LogicalOr>},
      {"logical_xor", d_logical<Prim::Ne>},
      {"bitwise_and.Tensor", d_bitwise<Prim::BitAnd>},
      {"bitwise_or.Tensor", d_bitwise<Prim::BitOr>},
      {"bitwise_xor.Tensor", d_bitwise<Prim::BitXor>},
      {"bitwise_and_.Tensor", d_bitwise<Prim::BitAnd>},
      {"bitwise_or_.Tensor", d_bitwise<Prim::BitOr>},
      {"bitwise_xor_.Tensor", d_bitwise<Prim::BitXor>},
      {"addcmul", d_addc<Prim::Mul>},
      {"addcdiv", d_addc<Prim::Div>},
      {"lerp.Scalar", d_lerp_scalar},
      {"lerp_.Scalar", d_lerp_scalar},
      {"lerp.Tensor", d_lerp_tensor},
      {"lerp_.Tensor", d_lerp_tensor},
      {"floor_divide", d_divmod<Prim::FloorDiv>},
      {"floor_divide_.Tensor", d_divmod<Prim::FloorDiv>},
      {"remainder.Tensor", d_divmod<Prim::Remainder>},
      {"remainder_.Tensor", d_divmod<Prim::Remainder>},
      {"fmod.Tensor", d_divmod<Prim::Fmod>},
      {"fmod_.Tensor", d_divmod<Prim::Fmod>},
      {"add.Tensor", d_add<false>},
      {"sub.Tensor", d_add<true>},
      {"add_.Tensor", d_add<false>},
      {"sub_.Tensor", d_add<true>},
      {"mul.Tensor", d_binary<Prim::Mul>},
      {"mul_.Tensor", d_binary<Prim::Mul>},
      {"div.Tensor", d_binary<Prim::Div>},
      {"div_.Tensor", d_binary<Prim::Div>},
      {"maximum", d_binary<Prim::Max>},
      {"minimum", d_binary<Prim::Min>},
      {"pow.Tensor_Tensor", d_binary<Prim::Pow>},
      {"pow.Tensor_Scalar", d_pow_scalar},
      {"eq.Tensor", d_compare<Prim::Eq>},
      {"ne.Tensor", d_compare<Prim::Ne>},
      {"lt.Tensor", d_compare<Prim::Lt>},
      {"le.Tensor", d_compare<Prim::Le>},
      {"gt.Tensor", d_compare<Prim::Gt>},
      {"ge.Tensor", d_compare<Prim::Ge>},
      {"where.self", d_where},
      {"clamp", d_clamp},
      {"_to_copy", d_to_copy},
      {"clone", d_identity},
  };
  // The in-place forms of the unary ops ("relu_") read and write `self`;
  // fusion stores in-place members into their target (Note [Fusion groups]).
  static const std::unordered_map<std::string, Decomposition> with_inplace = [] {
    std::unordered_map<std::string, Decomposition> all = t;
    for (const auto& [name, d] : t) {
      if (name.find('.') == std::string::npos && name.front() != '_' && name != "clone") {
        all.emplace(name + "_", d);
      }
    }
    return all;
  }();
  return with_inplace;
}

}  // namespace kiln::jit::decomp
