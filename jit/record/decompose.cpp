#include "jit/record/decompose.h"

#include <array>
#include <cstring>
#include <string>
#include <unordered_map>

#include "jit/record/decompose_internal.h"
#include "runtime/core/thread_cache.h"

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

int32_t KernelBuilder::param(double v, DType t) {
  if (kernel_.param_count() >= kMaxParams) return constant(v, t);
  Instr in{Prim::Param, t};
  in.imm = v;
  in.operand = kernel_.param_count();
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
  if (in.op == Prim::Const || in.op == Prim::Param) {
    double x = in.imm;
    if (t == kBool) x = x != 0.0;
    if (t == kFloat32) x = static_cast<float>(x);
    // folded: no conversion at run time
    return in.op == Prim::Const ? constant(x, t) : param(x, t);
  }
  return op(Prim::Cast, t, v);
}

int32_t KernelBuilder::round_to(int32_t v, DType t) {
  if (!is_reduced_float(t) || dtype(v) != kFloat32) return v;
  const Instr& in = kernel_.body[v];
  if (in.op == Prim::Load && kernel_.inputs[in.operand] == t) return v;  // already on the grid
  if (in.op == Prim::Const || in.op == Prim::Param) {
    float f = static_cast<float>(in.imm);
    const double x = t == kFloat16 ? static_cast<float>(Half(f)) : static_cast<float>(BFloat16(f));
    return in.op == Prim::Const ? constant(x, kFloat32) : param(x, kFloat32);
  }
  return op(t == kFloat16 ? Prim::RoundF16 : Prim::RoundBF16, kFloat32, v);
}

namespace decomp {
namespace {

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

}  // namespace

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

}  // namespace decomp

bool is_pointwise_op(const OperatorEntry* op) {
  using namespace decomp;
  // Note [Thread caches at thread exit]
  using Known = ThreadCache<std::unordered_map<const OperatorEntry*, bool>, struct KnownTag>;
  std::unordered_map<const OperatorEntry*, bool>* known = Known::get();
  if (known) {
    auto it = known->find(op);
    if (it != known->end()) return it->second;
  }
  const bool pointwise =
      lookup(op->name(), false) || lookup(op->name(), true) || out_form(op).functional != nullptr;
  if (known) known->emplace(op, pointwise);
  return pointwise;
}

Decomposition find_decomposition(const Node& node) {
  using namespace decomp;
  if (node.outputs.size() != 1 || node.written.size() > 1) return nullptr;
  const bool cuda = node.device.is_cuda();
  // Looked up by name once per op and thread: hashing the name per node per
  // flush showed in the per-call cost of lazy mode. The cache may be gone at
  // thread exit (Note [Thread caches at thread exit]).
  using ByOp = std::array<std::unordered_map<const OperatorEntry*, Decomposition>, 2>;
  ByOp* by_op = ThreadCache<ByOp, struct ByOpTag>::get();
  auto look_up = [&] {
    Decomposition d = lookup(node.op->name(), cuda);
    if (!d && cuda && !node.written.empty() && out_form(node.op).functional) d = d_out_form;
    return d;
  };
  Decomposition found = nullptr;
  if (by_op) {
    auto& cache = (*by_op)[cuda ? 1 : 0];
    auto cached = cache.find(node.op);
    if (cached == cache.end()) cached = cache.emplace(node.op, look_up()).first;
    found = cached->second;
  } else {
    found = look_up();
  }
  if (!found) return nullptr;
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
