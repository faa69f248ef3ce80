#include "jit/passes/matmul_epilogue.h"

#include <algorithm>
#include <unordered_map>

#include "jit/passes/dead_code.h"
#include "kiln/logging.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::jit {
namespace {

bool is_one(const IValue& v) {
  return v.is_number() && v.to_scalar().to<double>() == 1.0;
}

// The activation `n` applies to its first argument, or null when it is none
// the epilogue can take.
const char* activation_of(const Node& n) {
  const std::string& name = n.op->name();
  if (name == "relu") return "relu";
  if (name == "gelu" && n.args.size() >= 2 && n.args[1].is_string() &&
      n.args[1].to_string() == "tanh") {
    return "gelu_tanh";
  }
  return nullptr;
}

// addmm_act's (bias, mat1, mat2) for a product node that qualifies.
bool product_operands(const Node& n, Tensor* bias, Tensor* a, Tensor* b) {
  const std::string& name = n.op->name();
  if (n.outputs.size() != 1 || !n.written.empty()) return false;
  if (name == "addmm" && n.args.size() == 5 && n.args[0].is_tensor() &&
      n.args[0].to_tensor().defined() && is_one(n.args[3]) && is_one(n.args[4])) {
    *bias = n.args[0].to_tensor();
    *a = n.args[1].to_tensor();
    *b = n.args[2].to_tensor();
    return true;
  }
  if (name == "linear" && n.args.size() == 3 && n.args[2].is_tensor() &&
      n.args[2].to_tensor().defined()) {
    const Tensor& x = n.args[0].to_tensor();
    const Tensor& w = n.args[1].to_tensor();
    if (x.dim() != 2 || w.dim() != 2) return false;
    *bias = n.args[2].to_tensor();
    *a = x;
    *b = make_view(w, {w.size(1), w.size(0)}, {w.stride(1), w.stride(0)}, w.storage_offset());
    return true;
  }
  return false;
}

}  // namespace

size_t fuse_matmul_epilogues(std::vector<Node>& nodes) {
  static const OperatorEntry* addmm_act = &find_op("addmm_act").entry();
  static const OperatorEntry* addmm = &find_op("addmm").entry();
  static const OperatorEntry* linear = &find_op("linear").entry();
  // Only the products' outputs matter: count who touches those storages alone
  // (the rule of external_storages() restricted to them), rather than indexing
  // every storage of the trace on every flush. Most traces hold no product.
  std::unordered_map<const StorageImpl*, size_t> candidate;  // storage -> index in uses
  struct Uses {
    std::vector<size_t> readers;  // nodes reading it, one entry per argument
    int writers = 0;
    // Trace handles per TensorImpl on the storage (few: the product's output and its views).
    std::vector<std::pair<const TensorImpl*, int>> handles;
  };
  std::vector<Uses> uses;
  for (const Node& n : nodes) {
    if ((n.op != addmm && n.op != linear) || n.outputs.size() != 1 || !n.written.empty()) continue;
    const Tensor& y = n.outputs[0];
    if (!y.defined() || !y.impl()->storage()) continue;
    if (candidate.emplace(y.impl()->storage().get(), uses.size()).second) uses.emplace_back();
  }
  if (candidate.empty()) return 0;
  auto uses_of = [&](const Tensor& t) -> Uses* {
    if (!t.defined() || !t.impl()->storage()) return nullptr;
    auto it = candidate.find(t.impl()->storage().get());
    return it == candidate.end() ? nullptr : &uses[it->second];
  };
  auto count_handle = [](Uses* u, const TensorImpl* impl) {
    for (auto& [i, c] : u->handles) {
      if (i == impl) {
        ++c;
        return;
      }
    }
    u->handles.emplace_back(impl, 1);
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    for_each_input(nodes[i], [&](const Tensor& t) {
      if (Uses* u = uses_of(t)) {
        u->readers.push_back(i);
        count_handle(u, t.impl());
      }
    });
    for (const Tensor& t : nodes[i].outputs) {
      if (Uses* u = uses_of(t)) count_handle(u, t.impl());
    }
    for (int w : nodes[i].written) {
      if (!nodes[i].args[w].is_tensor()) continue;
      if (Uses* u = uses_of(nodes[i].args[w].to_tensor())) u->writers++;
    }
  }
  // Held outside the trace: a handle the trace does not own, or a view made outside.
  auto external = [](const StorageImpl* s, const Uses& u) {
    for (const auto& [impl, c] : u.handles) {
      if (impl->use_count() > c) return true;
    }
    return s->use_count() > static_cast<int32_t>(u.handles.size());
  };
  std::vector<bool> erased(nodes.size(), false);
  size_t rewrites = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Tensor bias, a, b;
    if (erased[i] || !product_operands(nodes[i], &bias, &a, &b)) continue;
    const Tensor& y = nodes[i].outputs[0];
    const StorageImpl* s = y.impl()->storage().get();
    auto c = s ? candidate.find(s) : candidate.end();
    if (c == candidate.end()) continue;
    const Uses& u = uses[c->second];
    if (u.writers > 0 || external(s, u)) continue;
    const std::vector<size_t>& users = u.readers;
    if (users.size() != 1) continue;
    Node& act_node = nodes[users[0]];
    const char* act = activation_of(act_node);
    if (!act || act_node.outputs.size() != 1 || !act_node.args[0].is_tensor() ||
        !act_node.args[0].to_tensor().is_same(y)) {
      continue;
    }
    KILN_LOG(Fusion, "matmul epilogue: ", nodes[i].op->name(), " + ", act_node.op->name(),
             " -> addmm_act(", act, ")");
    // The fused node takes the product's place, so its operands are read when
    // they were before (a write between the two nodes cannot slip in), and
    // produces the activation's output, which no node reads before it.
    Node& fused = nodes[i];
    fused.op = addmm_act;
    fused.args = {IValue(bias), IValue(a), IValue(b), IValue(std::string(act))};
    fused.outputs = std::move(act_node.outputs);
    fused.device = act_node.device;
    erased[users[0]] = true;
    ++rewrites;
  }
  if (rewrites == 0) return 0;
  std::vector<Node> kept;
  kept.reserve(nodes.size() - rewrites);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!erased[i]) kept.push_back(std::move(nodes[i]));
  }
  nodes = std::move(kept);
  return rewrites;
}

}  // namespace kiln::jit
