#include "jit/decompose.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

#include "jit/lazy_kernel.h"
#include "runtime/core/type_promotion.h"

namespace kiln::jit {

int32_t KernelBuilder::load(int32_t operand, DType memory_dtype) {
  for (size_t i = 0; i < kernel_.body.size(); ++i) {
    const Instr& in = kernel_.body[i];
    if (in.op == Prim::Load && in.operand == operand) return static_cast<int32_t>(i);
  }
  Instr in{Prim::Load, compute_dtype(memory_dtype)};
  in.operand = operand;
  kernel_.body.push_back(in);
  return static_cast<int32_t>(kernel_.body.size() - 1);
}

int32_t KernelBuilder::constant(double v, DType t) {
  for (size_t i = 0; i < kernel_.body.size(); ++i) {
    const Instr& in = kernel_.body[i];
    if (in.op == Prim::Const && in.dtype == t && std::memcmp(&in.imm, &v, sizeof v) == 0) {
      return static_cast<int32_t>(i);
    }
  }
  Instr in{Prim::Const, t};
  in.imm = v;
  kernel_.body.push_back(in);
  return static_cast<int32_t>(kernel_.body.size() - 1);
}

int32_t KernelBuilder::op(Prim p, DType t, int32_t a, int32_t b, int32_t c) {
  Instr in{p, t, a, b, c};
  kernel_.body.push_back(in);
  return static_cast<int32_t>(kernel_.body.size() - 1);
}

int32_t KernelBuilder::cast(int32_t v, DType t) {
  if (dtype(v) == t) return v;
  const Instr& in = kernel_.body[v];
  if (in.op == Prim::Const) {
    double x = in.imm;
    if (t == kBool) x = x != 0.0;
    if (t == kFloat32) x = static_cast<float>(x);
    return constant(x, t);  // folded: no conversion at run time
  }
  return op(Prim::Cast, t, v);
}

int32_t KernelBuilder::round_to(int32_t v, DType t) {
  if (!is_reduced_float(t) || dtype(v) != kFloat32) return v;
  const Instr& in = kernel_.body[v];
  if (in.op == Prim::Load && kernel_.inputs[in.operand] == t) return v;  // already on the grid
  if (in.op == Prim::Const) {
    float f = static_cast<float>(in.imm);
    return constant(t == kFloat16 ? static_cast<float>(Half(f)) : static_cast<float>(BFloat16(f)),
                    kFloat32);
  }
  return op(t == kFloat16 ? Prim::RoundF16 : Prim::RoundBF16, kFloat32, v);
}

namespace {

// The tensor and number arguments of a node, by schema position.
const IValue& arg(const Node& n, int i) {
  return n.args[i];
}
double number(const Node& n, int i) {
  return arg(n, i).to_scalar().to_double();
}
DType out_dtype(const Node& n) {
  return n.outputs.at(0).dtype();
}
DType out_compute(const Node& n) {
  return compute_dtype(out_dtype(n));
}

// The dtype the eager kernel computes a comparison or `where` in.
DType promoted(const Node& n) {
  ResultType rt;
  for (const IValue& v : n.args) {
    if (v.is_tensor() && v.to_tensor().defined()) rt.add(v.to_tensor());
  }
  return compute_dtype(rt.result("fusion"));
}

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

// isnan/isinf/isfinite test the input in its own compute dtype.
template <Prim P>
int32_t d_predicate(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  return b.cast(b.op(P, kBool, v[0]), out_compute(n));
}

int32_t d_logical_not(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  return b.cast(b.op(Prim::LogicalNot, kBool, b.cast(v[0], kBool)), out_compute(n));
}

// logical_xor is `!=` of the operands' truth values.
template <Prim P>
int32_t d_logical(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  return b.cast(b.op(P, kBool, b.cast(v[0], kBool), b.cast(v[1], kBool)), out_compute(n));
}

// Bit ops exist for integers and bool only (eager rejects floating operands).
int32_t d_bitwise_not(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (is_floating(t)) return -1;
  return b.op(Prim::BitNot, t, b.cast(v[0], t));
}

template <Prim P>
int32_t d_bitwise(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (is_floating(t)) return -1;
  return b.op(P, t, b.cast(v[0], t), b.cast(v[1], t));
}

// floor_divide/remainder/fmod: integers exactly (Note on FloorDiv in
// kernel_ir.h); floats in float32/float64 only, since the eager kernel rounds
// every step of floor_divide to a 16-bit grid (and remainder/fmod round
// once: those fuse for 16-bit floats too, computed in float32).
template <Prim P>
int32_t d_divmod(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (t == kBool) return -1;
  if (P == Prim::FloorDiv && is_reduced_float(out_dtype(n))) return -1;
  return b.op(P, t, b.cast(v[0], t), b.cast(v[1], t));
}

// self + value * t1 * t2 (or / t2), in that order, as the eager kernel.
// Integers (wrapping through uint64) stay eager.
template <Prim P>
int32_t d_addc(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (!is_floating(t)) return -1;
  int32_t x = b.op(Prim::Mul, t, b.constant(number(n, 3), t), b.cast(v[1], t));
  x = b.op(P, t, x, b.cast(v[2], t));
  return b.op(Prim::Add, t, b.cast(v[0], t), x);
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
  return lerp_value(b, t, b.cast(v[0], t), b.cast(v[1], t), b.constant(w, t),
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

// add/sub with alpha: a + alpha * b.
template <bool kSub>
int32_t d_add(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  const Scalar& a = arg(n, 2).to_scalar();
  // The eager kernels' checks (they run after the Meta kernel, which cannot see them).
  KILN_CHECK(is_floating(t) || a.is_integral() || a.is_bool(), "[", n.op->name(),
             "] expected an integral alpha for integral inputs, got ", a);
  KILN_CHECK(t != kBool || a.is_bool() || a.to_int() == 1 || a.to_int() == 0, "[", n.op->name(),
             "] expected a bool alpha for bool inputs, got ", a);
  double alpha = a.to_double();
  int32_t x = b.cast(v[0], t), y = b.cast(v[1], t);
  if (alpha != 1.0) y = b.op(Prim::Mul, t, y, b.constant(alpha, t));
  return b.op(kSub ? Prim::Sub : Prim::Add, t, x, y);
}

template <Prim P>
int32_t d_binary(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  // Integer pow is exact repeated multiplication: only the CUDA generator
  // has it (the CPU one refuses integer kernels); bool is refused eagerly.
  if (P == Prim::Pow && t == kBool) return -1;
  return b.op(P, t, b.cast(v[0], t), b.cast(v[1], t));
}

template <Prim P>
int32_t d_compare(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = promoted(n);
  return b.op(P, kBool, b.cast(v[0], t), b.cast(v[1], t));
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
int32_t pow_scalar_cpu(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (!is_floating(t)) return -1;
  double e = number(n, 1);
  int32_t x = b.cast(v[0], t);
  if (e == 2.0) return b.op(Prim::Mul, t, x, x);
  if (e == 1.0) return x;
  // The eager kernel (as PyTorch) takes sqrt/rsqrt for +-0.5 except for float16,
  // which goes through C pow: -inf ** 0.5 is NaN in one, +inf in the other.
  if (out_dtype(n) != kFloat16) {
    if (e == 0.5) return b.op(Prim::Sqrt, t, x);
    if (e == -0.5) return b.op(Prim::Rsqrt, t, x);
  }
  return b.op(Prim::Pow, t, x, b.constant(e, t));
}

// On CUDA, as the eager kernel (and PyTorch): integers by exact repeated
// multiplication (a negative exponent raises there); float16 takes the
// exponent as float16 and calls pow; the others special-case 0.5, -0.5, -1,
// 2, 3 and -2, rounding the products step by step as the eager kernel does.
int32_t d_pow_scalar(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  if (!n.device.is_cuda()) return pow_scalar_cpu(b, n, v);
  DType t = out_compute(n);
  double e = number(n, 1);
  int32_t x = b.cast(v[0], t);
  if (!is_floating(t)) {
    if (t == kBool || e < 0 || e != std::trunc(e)) return -1;
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
    x = b.op(Prim::Max, t, x, b.constant(number(n, 1), t));
  if (hi && (both || !std::isnan(number(n, 2))))
    x = b.op(Prim::Min, t, x, b.constant(number(n, 2), t));
  return x;
}

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
    value = b.round_to(b.constant(x, t), out_dtype(n));
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
    double c = arg(n, i).is_none() ? otherwise : arg(n, i).to_double();
    if (t == kFloat32) c = static_cast<float>(c);
    return b.round_to(b.constant(c, t), od);
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
  int32_t beta = b.constant(number(n, 1), t), th = b.constant(number(n, 2), t);
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
  int32_t x = b.op(Prim::Mul, t, b.constant(value, t), b.cast(v[1], t));
  x = b.op(Prim::Mul, t, x, b.cast(v[2], t));
  return b.op(Prim::Add, t, b.cast(v[0], t), x);
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

// Every kiln dtype has a compute type in the CUDA generator; what a
// decomposition cannot express in one it refuses itself (pow, bit ops on
// floats), and the CPU generator refuses non-float kernels (cpu_supports).
bool fusible_dtype(DType t) {
  return is_floating(t) || is_integral(t, true);
}

// The decompositions whose result may be bool (others would compute in bool).
bool bool_result_ok(Decomposition d) {
  static const Decomposition ok[] = {
      d_compare<Prim::Eq>, d_compare<Prim::Ne>, d_compare<Prim::Lt>, d_compare<Prim::Le>,
      d_compare<Prim::Gt>, d_compare<Prim::Ge>, d_identity, d_to_copy, d_where,
      d_predicate<Prim::IsNan>, d_predicate<Prim::IsInf>, d_predicate<Prim::IsFinite>,
      d_logical_not, d_logical<Prim::LogicalAnd>, d_logical<Prim::LogicalOr>, d_logical<Prim::Ne>,
      d_bitwise_not, d_bitwise<Prim::BitAnd>, d_bitwise<Prim::BitOr>, d_bitwise<Prim::BitXor>,
      d_masked_fill, d_clamp_tensor, d_nan_to_num,
      // bool arithmetic: or, and, or, and, identity
      d_add<false>, d_binary<Prim::Mul>, d_binary<Prim::Max>, d_binary<Prim::Min>, d_sign};
  for (Decomposition o : ok) {
    if (o == d) return true;
  }
  return false;
}

// Note [Out forms]
// An out= form ("exp.out", "lt.Tensor_out", "div.out_mode") and an in-place
// comparison ("lt_.Tensor") compute what their functional op computes, in
// that op's dtype (from the inputs alone), and convert it to the target's
// dtype on the store, as the eager TensorIter does.
std::string functional_name(const std::string& name) {
  const size_t dot = name.find('.');
  if (dot == std::string::npos) return "";
  std::string base = name.substr(0, dot), overload = name.substr(dot + 1);
  if (overload == "out") return base;
  if (overload == "out_mode") return base + ".Tensor_mode";
  if (overload.size() > 4 && overload.compare(overload.size() - 4, 4, "_out") == 0) {
    return base + "." + overload.substr(0, overload.size() - 4);
  }
  if (base.size() > 1 && base.back() == '_')
    return base.substr(0, base.size() - 1) + "." + overload;
  return "";
}

// CUDA nodes look in cuda_table() first: its entries may widen a shared one
// (integer addcmul).
Decomposition lookup(const std::string& name, bool cuda) {
  if (cuda) {
    auto named = cuda_table().find(name);
    if (named != cuda_table().end()) return named->second;
  }
  auto named = table().find(name);
  return named == table().end() ? nullptr : named->second;
}

struct OutForm {
  Decomposition functional = nullptr;
  bool to_float = false;  // integer inputs give a float32 result
};

// The functional ops whose integer inputs give float results.
bool promotes_to_float(const std::string& name) {
  static const char* const kFloatOps[] = {
      "exp",  "log",  "sqrt", "rsqrt", "reciprocal", "sin",   "cos",   "tanh",       "sigmoid",
      "erf",  "erfc", "silu", "gelu",  "expm1",      "log1p", "asin",  "acos",       "atan",
      "sinh", "cosh", "tan",  "exp2",  "log2",       "log10", "atan2", "div.Tensor", "softplus"};
  for (const char* f : kFloatOps) {
    if (name == f) return true;
  }
  return false;
}

const OutForm& out_form(const OperatorEntry* op) {
  thread_local std::unordered_map<const OperatorEntry*, OutForm> forms;
  auto it = forms.find(op);
  if (it != forms.end()) return it->second;
  OutForm f;
  std::string name = functional_name(op->name());
  if (!name.empty()) {
    f.functional = lookup(name, true);
    if (!f.functional && name.find('.') == std::string::npos) {
      name += ".Tensor";  // "add.out" is add.Tensor's
      f.functional = lookup(name, true);
    }
    f.to_float = promotes_to_float(name);
  }
  return forms.emplace(op, f).first->second;
}

bool is_bool_op(Decomposition d) {
  static const Decomposition ops[] = {d_compare<Prim::Eq>,         d_compare<Prim::Ne>,
                                      d_compare<Prim::Lt>,         d_compare<Prim::Le>,
                                      d_compare<Prim::Gt>,         d_compare<Prim::Ge>,
                                      d_predicate<Prim::IsNan>,    d_predicate<Prim::IsInf>,
                                      d_predicate<Prim::IsFinite>, d_logical_not,
                                      d_logical<Prim::LogicalAnd>, d_logical<Prim::LogicalOr>,
                                      d_logical<Prim::Ne>};
  for (Decomposition o : ops) {
    if (o == d) return true;
  }
  return false;
}

// The functional op's dtype for an out= or in-place node (Note [Out forms]).
DType functional_dtype(const Node& n, const OutForm& f) {
  if (is_bool_op(f.functional)) return kBool;
  ResultType rt;
  for (size_t i = 0; i < n.args.size(); ++i) {
    const IValue& v = n.args[i];
    // An out= target (the last argument) takes no part; an in-place self does.
    const bool target =
        !n.written.empty() && n.written[0] != 0 && static_cast<size_t>(n.written[0]) == i;
    if (v.is_tensor() && v.to_tensor().defined() && !target) rt.add(v.to_tensor());
    // clamp's bounds promote as tensors would.
    if (v.is_scalar() && f.functional == d_clamp) rt.add(v.to_scalar());
  }
  DType t = rt.result("fusion");
  if (f.to_float && !is_floating(t)) t = kFloat32;
  // True division (no rounding mode) of integers gives the default float
  // dtype; square is pow(x, 2), whose bool base gives int64.
  if (f.functional == d_div_mode && arg(n, 2).is_none() && !is_floating(t)) t = kFloat32;
  if (f.functional == d_square && t == kBool) t = kInt64;
  return t;
}

int32_t d_out_form(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  const OutForm& f = out_form(n.op);
  Node fn = n;
  const DType t = functional_dtype(n, f);
  const Tensor& target = n.outputs[0];
  fn.outputs[0] = fresh_output(target.sizes(), target.strides(), 0, t, target.device());
  if (n.written[0] != 0) fn.args[n.written[0]] = IValue();  // the out= target
  fn.written.clear();
  int32_t r = f.functional(b, fn, v);
  if (r < 0) return -1;
  return b.cast(b.round_to(r, t), out_compute(n));
}

}  // namespace

Decomposition find_decomposition(const Node& node) {
  if (node.outputs.size() != 1 || node.written.size() > 1) return nullptr;
  const bool cuda = node.device.is_cuda();
  // Looked up by name once per op and thread: hashing the name per node per
  // flush showed in the per-call cost of lazy mode.
  thread_local std::unordered_map<const OperatorEntry*, Decomposition> by_op[2];
  auto& cache = by_op[cuda ? 1 : 0];
  auto cached = cache.find(node.op);
  if (cached == cache.end()) {
    Decomposition d = lookup(node.op->name(), cuda);
    if (!d && cuda && !node.written.empty() && out_form(node.op).functional) d = d_out_form;
    cached = cache.emplace(node.op, d).first;
  }
  if (!cached->second) return nullptr;
  const Decomposition found = cached->second;
  if (!fusible_dtype(node.outputs[0].dtype())) return nullptr;
  for (const IValue& v : node.args) {
    if (v.is_tensor() && v.to_tensor().defined() && !fusible_dtype(v.to_tensor().dtype()) &&
        !v.to_tensor().impl()->is_wrapped_number()) {
      return nullptr;
    }
    if (v.is_tensor_list()) return nullptr;
  }
  if (found == d_out_form) {
    const OutForm& f = out_form(node.op);
    if (functional_dtype(node, f) == kBool && !bool_result_ok(f.functional)) return nullptr;
    return found;
  }
  if (node.outputs[0].dtype() == kBool && !bool_result_ok(found)) return nullptr;
  return found;
}

}  // namespace kiln::jit
