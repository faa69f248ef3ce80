#pragma once

#include <unordered_set>
#include <vector>

#include "jit/record/trace_buffer.h"

namespace kiln::jit {

// Storages that a tensor outside the trace references (a user's handle or view).
std::unordered_set<const StorageImpl*> external_storages(const std::vector<Node>& nodes);

// Keeps the nodes whose results someone can still observe: a node is live when
// it writes a storage that a tensor outside the trace references, or one that a
// live node reads. Returns the live nodes' indices in record order.
std::vector<size_t> live_nodes(const std::vector<Node>& nodes);
// The same, also handing back external_storages(nodes), computed on the way.
std::vector<size_t> live_nodes(const std::vector<Node>& nodes,
                               std::unordered_set<const StorageImpl*>* external);

// Whether node `n` reads, writes or produces storage `s` (the folding passes).
bool touches(const Node& n, const StorageImpl* s);
// Removes the nodes marked in `erased` (one flag per node), keeping the order.
void drop_erased(std::vector<Node>& nodes, const std::vector<bool>& erased);

// Calls f(const Tensor&) for every tensor argument of `node` (lists included).
template <class F>
void for_each_input(const Node& node, F&& f) {
  for (const IValue& v : node.args) {
    if (v.is_tensor()) {
      f(v.to_tensor());
    } else if (v.is_tensor_list()) {
      for (const Tensor& t : v.to_tensor_list()) f(t);
    }
  }
}

}  // namespace kiln::jit
