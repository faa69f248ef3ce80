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
#undef KILN_UNARY

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
  return b.op(P, t, b.cast(v[0], t), b.cast(v[1], t));
}

template <Prim P>
int32_t d_compare(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = promoted(n);
  if (!is_floating(t)) return -1;
  return b.op(P, kBool, b.cast(v[0], t), b.cast(v[1], t));
}

int32_t d_where(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  return b.op(Prim::Where, t, b.cast(v[0], kBool), b.cast(v[1], t), b.cast(v[2], t));
}

int32_t d_pow_scalar(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
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

bool fusible_dtype(DType t) {
  return is_floating(t) || t == kBool;
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
  // Generators handle floating arithmetic and bool results; integer math
  // (wrapping, integer division) stays with the eager kernels.
  if (!fusible_dtype(node.outputs[0].dtype())) return nullptr;
  for (const IValue& v : node.args) {
    if (v.is_tensor() && v.to_tensor().defined() && !fusible_dtype(v.to_tensor().dtype()) &&
        !v.to_tensor().impl()->is_wrapped_number()) {
      return nullptr;
    }
    if (v.is_tensor_list()) return nullptr;
  }
  DType out = node.outputs[0].dtype();
  if (out == kBool && found != d_compare<Prim::Eq> && found != d_compare<Prim::Ne> &&
      found != d_compare<Prim::Lt> && found != d_compare<Prim::Le> &&
      found != d_compare<Prim::Gt> && found != d_compare<Prim::Ge> && found != d_identity &&
      found != d_to_copy && found != d_where) {
    return nullptr;
  }
  return found;
}

}  // namespace kiln::jit
