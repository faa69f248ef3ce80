#include "jit/passes/matmul_epilogue.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

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
  // Most traces hold no product: leave them before any bookkeeping.
  if (std::none_of(nodes.begin(), nodes.end(),
                   [](const Node& n) { return n.op == addmm || n.op == linear; })) {
    return 0;
  }
  const std::unordered_set<const StorageImpl*> external = external_storages(nodes);
  // Who touches each storage: readers (by node) and writers.
  std::unordered_map<const StorageImpl*, std::vector<size_t>> readers;
  std::unordered_map<const StorageImpl*, int> writers;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for_each_input(nodes[i], [&](const Tensor& t) {
      if (t.defined() && t.impl()->storage()) readers[t.impl()->storage().get()].push_back(i);
    });
    for (int w : nodes[i].written) {
      if (nodes[i].args[w].is_tensor())
        writers[nodes[i].args[w].to_tensor().impl()->storage().get()]++;
    }
  }
  std::vector<bool> erased(nodes.size(), false);
  size_t rewrites = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Tensor bias, a, b;
    if (erased[i] || !product_operands(nodes[i], &bias, &a, &b)) continue;
    const Tensor& y = nodes[i].outputs[0];
    const StorageImpl* s = y.impl()->storage().get();
    if (!s || external.count(s) || writers.count(s)) continue;
    const std::vector<size_t>& users = readers[s];
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
