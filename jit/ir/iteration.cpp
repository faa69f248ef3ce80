#include "jit/ir/iteration.h"

#include <algorithm>

namespace kiln::jit {

void ensure_memory(const Tensor& t) {
  StorageImpl* s = t.impl()->storage().get();
  if (s->data() == nullptr && s->nbytes() > 0) {
    auto fresh = StorageImpl::allocate(s->nbytes(), s->device());
    s->adopt_data(*fresh);
  }
}

Iteration coalesce(IntArrayRef shape, const std::vector<Tensor>& ops, int num_outputs) {
  const int nops = static_cast<int>(ops.size());
  const int64_t nd = static_cast<int64_t>(shape.size());
  Iteration it;
  for (int64_t s : shape) it.numel *= s;
  // Element strides over the shape; 0 where an operand broadcasts.
  std::vector<DimVector> st(nops, DimVector(nd, 0));
  for (int k = 0; k < nops; ++k) {
    IntArrayRef s = ops[k].sizes(), t = ops[k].strides();
    int64_t off = nd - static_cast<int64_t>(s.size());
    for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
      st[k][off + d] = s[d] == 1 && shape[off + d] != 1 ? 0 : t[d];
    }
  }
  std::vector<int64_t> order(nd);
  for (int64_t d = 0; d < nd; ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return st[0][a] > st[0][b]; });
  it.strides.resize(nops);
  for (int64_t d : order) {
    if (shape[d] == 1) continue;
    bool merge = !it.sizes.empty();
    for (int k = 0; k < nops && merge; ++k) merge = it.strides[k].back() == st[k][d] * shape[d];
    if (merge) {
      it.sizes.back() *= shape[d];
      for (int k = 0; k < nops; ++k) it.strides[k].back() = st[k][d];
    } else {
      it.sizes.push_back(shape[d]);
      for (int k = 0; k < nops; ++k) it.strides[k].push_back(st[k][d]);
    }
  }
  if (it.sizes.empty()) {  // 0-dim, or only size-1 dims: one element
    it.sizes.push_back(1);
    for (int k = 0; k < nops; ++k) it.strides[k].push_back(k < num_outputs ? 1 : 0);
  }
  return it;
}

}  // namespace kiln::jit
