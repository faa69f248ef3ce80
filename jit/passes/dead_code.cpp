#include "jit/passes/dead_code.h"

#include <algorithm>
#include <unordered_set>

namespace kiln::jit {

std::unordered_set<const StorageImpl*> external_storages(const std::vector<Node>& nodes) {
  // Handles the trace itself holds, per TensorImpl; what is left of a use count
  // belongs to someone outside. Counted by sorting the handles rather than in
  // a hash map: this runs on every flush.
  std::vector<const TensorImpl*> handles;
  handles.reserve(nodes.size() * 4);
  auto add = [&](const Tensor& t) {
    if (t.defined()) handles.push_back(t.impl());
  };
  for (const Node& n : nodes) {
    for_each_input(n, add);
    for (const Tensor& t : n.outputs) add(t);
  }
  std::sort(handles.begin(), handles.end());
  std::vector<const StorageImpl*> impls_on_storage;  // one entry per distinct TensorImpl
  std::unordered_set<const StorageImpl*> live;
  for (size_t i = 0, j = 0; i < handles.size(); i = j) {
    while (j < handles.size() && handles[j] == handles[i]) ++j;
    const StorageImpl* s = handles[i]->storage().get();
    if (!s) continue;
    impls_on_storage.push_back(s);
    // Memory the caller owns sees every write (a result copied into a
    // from_blob buffer, its tensor dropped at once).
    if (s->wraps_caller_memory()) live.insert(s);
    if (handles[i]->use_count() > static_cast<int32_t>(j - i)) live.insert(s);
  }
  std::sort(impls_on_storage.begin(), impls_on_storage.end());
  for (size_t i = 0, j = 0; i < impls_on_storage.size(); i = j) {
    while (j < impls_on_storage.size() && impls_on_storage[j] == impls_on_storage[i]) ++j;
    const StorageImpl* s = impls_on_storage[i];
    if (s->use_count() > static_cast<int32_t>(j - i)) live.insert(s);  // a view made outside
  }
  return live;
}

bool touches(const Node& n, const StorageImpl* s) {
  auto of = [](const Tensor& t) {
    return t.defined() && t.impl()->storage() ? t.impl()->storage().get() : nullptr;
  };
  bool hit = false;
  for_each_input(n, [&](const Tensor& t) { hit = hit || of(t) == s; });
  for (const Tensor& t : n.outputs) hit = hit || of(t) == s;
  return hit;
}

void drop_erased(std::vector<Node>& nodes, const std::vector<bool>& erased) {
  std::vector<Node> kept;
  kept.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!erased[i]) kept.push_back(std::move(nodes[i]));
  }
  nodes = std::move(kept);
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
