#include "jit/passes/dead_code.h"

#include <unordered_map>
#include <unordered_set>

namespace kiln::jit {

std::unordered_set<const StorageImpl*> external_storages(const std::vector<Node>& nodes) {
  // Handles the trace itself holds, per TensorImpl; what is left of a use count
  // belongs to someone outside.
  std::unordered_map<const TensorImpl*, int> handles;
  auto count = [&](const Tensor& t) {
    if (t.defined()) handles[t.impl()]++;
  };
  for (const Node& n : nodes) {
    for_each_input(n, count);
    for (const Tensor& t : n.outputs) count(t);
  }
  std::unordered_map<const StorageImpl*, int> impls_on_storage;
  std::unordered_set<const StorageImpl*> live;
  for (const auto& [impl, n] : handles) {
    const StorageImpl* s = impl->storage().get();
    if (!s) continue;
    impls_on_storage[s]++;
    if (impl->use_count() > n) live.insert(s);
  }
  for (const auto& [s, n] : impls_on_storage) {
    if (s->use_count() > n) live.insert(s);  // a view made outside the trace
  }
  return live;
}

std::vector<size_t> live_nodes(const std::vector<Node>& nodes) {
  return live_nodes(nodes, nullptr);
}

std::vector<size_t> live_nodes(const std::vector<Node>& nodes,
                               std::unordered_set<const StorageImpl*>* external) {
  std::unordered_set<const StorageImpl*> live = external_storages(nodes);
  if (external) *external = live;

  std::vector<size_t> keep;
  for (size_t i = nodes.size(); i-- > 0;) {
    const Node& n = nodes[i];
    bool is_live = false;
    for (const Tensor& t : n.outputs) {
      if (t.defined() && live.count(t.impl()->storage().get())) is_live = true;
    }
    for (int w : n.written) {
      const IValue& a = n.args[w];
      if (a.is_tensor() && live.count(a.to_tensor().impl()->storage().get())) is_live = true;
    }
    if (!is_live) continue;
    keep.push_back(i);
    for_each_input(n, [&](const Tensor& t) {
      if (t.defined() && t.impl()->storage()) live.insert(t.impl()->storage().get());
    });
  }
  return std::vector<size_t>(keep.rbegin(), keep.rend());
}

}  // namespace kiln::jit
