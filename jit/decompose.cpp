#include "jit/decompose.h"

#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>

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
  if (std::isnan(w)) return -1;
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
  double alpha = number(n, 2);
  int32_t x = b.cast(v[0], t), y = b.cast(v[1], t);
  if (alpha != 1.0) y = b.op(Prim::Mul, t, y, b.constant(alpha, t));
  return b.op(kSub ? Prim::Sub : Prim::Add, t, x, y);
}

template <Prim P>
int32_t d_binary(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  // Integer pow is exact repeated multiplication eagerly; the Prim is C pow.
  if (P == Prim::Pow && !is_floating(t)) return -1;
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

int32_t d_pow_scalar(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
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

// Every kiln dtype has a compute type in the CUDA generator; what a
// decomposition cannot express in one it refuses itself (pow, bit ops on
// floats), and the CPU generator refuses non-float kernels (cpu_supports).
bool fusible_dtype(DType t) {
  return is_floating(t) || is_integral(t, true);
}

// The decompositions whose result may be bool (others would compute in bool).
bool bool_result_ok(Decomposition d) {
  static const Decomposition ok[] = {d_compare<Prim::Eq>,
                                     d_compare<Prim::Ne>,
                                     d_compare<Prim::Lt>,
                                     d_compare<Prim::Le>,
                                     d_compare<Prim::Gt>,
                                     d_compare<Prim::Ge>,
                                     d_identity,
                                     d_to_copy,
                                     d_where,
                                     d_predicate<Prim::IsNan>,
                                     d_predicate<Prim::IsInf>,
                                     d_predicate<Prim::IsFinite>,
                                     d_logical_not,
                                     d_logical<Prim::LogicalAnd>,
                                     d_logical<Prim::LogicalOr>,
                                     d_logical<Prim::Ne>,
                                     d_bitwise_not,
                                     d_bitwise<Prim::BitAnd>,
                                     d_bitwise<Prim::BitOr>,
                                     d_bitwise<Prim::BitXor>};
  for (Decomposition o : ok) {
    if (o == d) return true;
  }
  return false;
}

}  // namespace

Decomposition find_decomposition(const Node& node) {
  if (node.outputs.size() != 1 || node.written.size() > 1) return nullptr;
  // Looked up by name once per op and thread: hashing the name per node per
  // flush showed in the per-call cost of lazy mode.
  thread_local std::unordered_map<const OperatorEntry*, Decomposition> by_op;
  auto cached = by_op.find(node.op);
  if (cached == by_op.end()) {
    auto named = table().find(node.op->name());
    cached = by_op.emplace(node.op, named == table().end() ? nullptr : named->second).first;
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
  if (node.outputs[0].dtype() == kBool && !bool_result_ok(found)) return nullptr;
  return found;
}

}  // namespace kiln::jit
