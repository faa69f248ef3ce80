#include "jit/ir/kernel_ir.h"

#include <sstream>

namespace kiln::jit {

const char* prim_name(Prim p) {
  static const char* const names[] = {
      "load",   "const",    "neg",       "abs",        "exp",       "log",  "sqrt",   "rsqrt",
      "recip",  "sin",      "cos",       "tanh",       "sigmoid",   "relu", "erf",    "floor",
      "ceil",   "trunc",    "round",     "gelu_erf",   "gelu_tanh", "silu", "expm1",  "log1p",
      "not",    "cast",     "round_f16", "round_bf16", "asin",      "acos", "atan",   "sinh",
      "cosh",   "tan",      "exp2",      "log2",       "log10",     "sign", "frac",   "isnan",
      "isinf",  "isfinite", "bitnot",    "add",        "sub",       "mul",  "div",    "max",
      "min",    "pow",      "atan2",     "floordiv",   "remainder", "fmod", "bitand", "bitor",
      "bitxor", "eq",       "ne",        "lt",         "le",        "gt",   "ge",     "and",
      "or",     "where",    "erfc",      "param"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(Prim::Param) + 1);
  return names[static_cast<int>(p)];
}

bool is_integer_division(const Instr& in) {
  return (in.op == Prim::Div || in.op == Prim::FloorDiv || in.op == Prim::Remainder ||
          in.op == Prim::Fmod) &&
         is_integral(in.dtype, false);
}

bool divides_integers(const PointwiseKernel& k) {
  for (const Instr& in : k.body) {
    if (is_integer_division(in)) return true;
  }
  return false;
}

int prim_arity(Prim p) {
  if (p == Prim::Load || p == Prim::Const || p == Prim::Param) return 0;
  if (p == Prim::Where) return 3;
  if (p == Prim::Erfc) return 1;
  if (p >= Prim::Add) return 2;
  return 1;
}

void PointwiseKernel::compact() {
  std::vector<char> used(body.size(), 0);
  for (int32_t s : stores) used[s] = 1;
  for (size_t i = body.size(); i-- > 0;) {
    if (!used[i]) continue;
    for (int32_t o : {body[i].a, body[i].b, body[i].c}) {
      if (o >= 0) used[o] = 1;
    }
  }
  std::vector<int32_t> remap(body.size(), -1);
  std::vector<Instr> kept;
  int32_t params = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    if (!used[i]) continue;
    Instr in = body[i];
    if (in.op == Prim::Param) in.operand = params++;  // kept ones numbered in order
    for (int32_t* o : {&in.a, &in.b, &in.c}) {
      if (*o >= 0) *o = remap[*o];
    }
    remap[i] = static_cast<int32_t>(kept.size());
    kept.push_back(in);
  }
  for (int32_t& s : stores) s = remap[s];
  body = std::move(kept);
}

uint64_t PointwiseKernel::hash() const {
  // FNV-1a over the structure.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(inputs.size());
  for (DType t : inputs) mix(static_cast<uint64_t>(t));
  mix(outputs.size());
  for (DType t : outputs) mix(static_cast<uint64_t>(t));
  for (int32_t s : stores) mix(static_cast<uint64_t>(s));
  for (const Instr& i : body) {
    mix(static_cast<uint64_t>(i.op) | (static_cast<uint64_t>(i.dtype) << 8));
    mix(static_cast<uint64_t>(static_cast<uint32_t>(i.a)) |
        (static_cast<uint64_t>(static_cast<uint32_t>(i.b)) << 32));
    mix(static_cast<uint64_t>(static_cast<uint32_t>(i.c)) |
        (static_cast<uint64_t>(static_cast<uint32_t>(i.operand)) << 32));
    uint64_t bits = 0;
    static_assert(sizeof(bits) == sizeof(i.imm));
    if (i.op != Prim::Param) __builtin_memcpy(&bits, &i.imm, 8);
    mix(bits);
  }
  return h;
}

int PointwiseKernel::param_count() const {
  int n = 0;
  for (const Instr& i : body) n += i.op == Prim::Param;
  return n;
}

std::string PointwiseKernel::str() const {
  std::ostringstream os;
  os << "kernel(";
  for (size_t i = 0; i < inputs.size(); ++i) os << (i ? ", " : "") << "in" << i << ":" << inputs[i];
  os << ") -> (";
  for (size_t i = 0; i < outputs.size(); ++i) {
    os << (i ? ", " : "") << "out" << i << ":" << outputs[i] << "=%" << stores[i];
  }
  os << ")\n";
  for (size_t k = 0; k < body.size(); ++k) {
    const Instr& i = body[k];
    os << "  %" << k << " = " << prim_name(i.op) << ' ' << i.dtype;
    if (i.op == Prim::Load) os << " in" << i.operand;
    if (i.op == Prim::Const) os << ' ' << i.imm;
    if (i.op == Prim::Param) os << " arg" << i.operand << " (" << i.imm << ")";
    if (i.a >= 0) os << " %" << i.a;
    if (i.b >= 0) os << ", %" << i.b;
    if (i.c >= 0) os << ", %" << i.c;
    os << '\n';
  }
  return os.str();
}

std::string PointwiseKernel::key() const {
  std::string key;
  key.reserve(8 + inputs.size() + outputs.size() * 5 + body.size() * 24);
  auto put = [&key](const auto& v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(static_cast<uint32_t>(inputs.size()));
  put(static_cast<uint32_t>(outputs.size()));
  for (DType d : inputs) put(d);
  for (size_t i = 0; i < outputs.size(); ++i) {
    put(outputs[i]);
    put(stores[i]);
  }
  for (const Instr& i : body) {
    put(i.op);
    put(i.dtype);
    put(i.a);
    put(i.b);
    put(i.c);
    if (i.op == Prim::Load || i.op == Prim::Param) put(i.operand);
    if (i.op == Prim::Const) put(i.imm);
  }
  return key;
}

}  // namespace kiln::jit
