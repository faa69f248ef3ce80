#include "jit/passes/merged_heads.h"

#include <unordered_set>

#include "jit/passes/dead_code.h"
#include "kiln/logging.h"

namespace kiln::jit {
namespace {

const StorageImpl* storage_of(const Tensor& t) {
  return t.defined() && t.impl()->storage() ? t.impl()->storage().get() : nullptr;
}

// `t` owns all of its storage in row-major order.
bool whole_and_contiguous(const Tensor& t) {
  const StorageImpl* s = storage_of(t);
  return s && t.is_contiguous() && t.storage_offset() == 0 &&
         s->nbytes() == static_cast<size_t>(t.numel()) * itemsize(t.dtype());
}

// `v` is `o.transpose(-3, -2)`: o's memory, dims -3 and -2 swapped.
bool is_heads_transpose(const Tensor& v, const Tensor& o) {
  const int64_t n = o.dim();
  if (v.dim() != n || n < 3 || v.dtype() != o.dtype() || v.storage_offset() != o.storage_offset()) {
    return false;
  }
  for (int64_t d = 0; d < n; ++d) {
    const int64_t from = d == n - 3 ? n - 2 : d == n - 2 ? n - 3 : d;
    if (v.size(d) != o.size(from) || (o.size(from) > 1 && v.stride(d) != o.stride(from))) {
      return false;
    }
  }
  return true;
}

class MergedHeadsFolder {
 public:
  explicit MergedHeadsFolder(std::vector<Node>& nodes) : nodes_(nodes) {}

  size_t run() {
    static const OperatorEntry* sdpa = &find_op("scaled_dot_product_attention").entry();
    bool any = false;
    for (const Node& n : nodes_) any = any || (n.op == sdpa && n.device.is_cuda());
    if (!any) return 0;  // most traces hold no attention
    external_ = external_storages(nodes_);
    erased_.assign(nodes_.size(), false);
    size_t removed = 0;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].op == sdpa && nodes_[i].device.is_cuda()) removed += fold(i);
    }
    if (removed > 0) drop_erased(nodes_, erased_);
    return removed;
  }

 private:
  // The one live node after `from` touching `s`, or nodes_.size().
  size_t only_toucher_after(size_t from, const StorageImpl* s) const {
    size_t found = nodes_.size();
    for (size_t j = from + 1; j < nodes_.size(); ++j) {
      if (erased_[j] || !touches(nodes_[j], s)) continue;
      if (found != nodes_.size()) return nodes_.size();
      found = j;
    }
    return found;
  }

  size_t fold(size_t a) {
    static const OperatorEntry* copy = &find_op("copy_").entry();
    static const OperatorEntry* merged = &find_op("attention_merged_heads").entry();
    Node& attn = nodes_[a];
    if (attn.outputs.size() != 1 || !attn.written.empty()) return 0;
    const Tensor& o = attn.outputs[0];
    const StorageImpl* os = storage_of(o);
    if (!os || o.dim() < 3 || !whole_and_contiguous(o) || external_.count(os)) return 0;
    // The copy: the only node reading o, writing e from o's transposed view.
    const size_t c = only_toucher_after(a, os);
    if (c == nodes_.size()) return 0;
    const Node& cp = nodes_[c];
    if (cp.op != copy || cp.written.size() != 1 || cp.written[0] != 0 || cp.args.size() < 2 ||
        !cp.args[0].is_tensor() || !cp.args[1].is_tensor()) {
      return 0;
    }
    const Tensor& e = cp.args[0].to_tensor();
    const Tensor& src = cp.args[1].to_tensor();
    const StorageImpl* es = storage_of(e);
    if (storage_of(src) != os || !es || es == os || !is_heads_transpose(src, o) ||
        e.dtype() != o.dtype() || !(e.sizes() == src.sizes()) || !whole_and_contiguous(e) ||
        !(e.device() == o.device())) {
      return 0;
    }
    // e's allocation: the one node before the copy touching e.
    size_t alloc = nodes_.size();
    for (size_t j = 0; j < c; ++j) {
      if (erased_[j] || !touches(nodes_[j], es)) continue;
      if (alloc != nodes_.size()) return 0;
      alloc = j;
    }
    if (alloc == nodes_.size()) return 0;
    const Node& em = nodes_[alloc];
    const FunctionSchema& s = em.op->schema();
    if (s.ns != "kiln" || s.name != "empty" || em.outputs.size() != 1 || !em.written.empty() ||
        storage_of(em.outputs[0]) != es || !(em.outputs[0].sizes() == e.sizes()) ||
        !whole_and_contiguous(em.outputs[0])) {
      return 0;
    }
    KILN_LOG(Fusion, "merged heads: attention writes [..., L, H, Ev], no copy");
    Tensor out = em.outputs[0];
    attn.op = merged;
    attn.outputs[0] = std::move(out);
    erased_[alloc] = erased_[c] = true;
    return 2;
  }

  std::vector<Node>& nodes_;
  std::unordered_set<const StorageImpl*> external_;
  std::vector<bool> erased_;
};

}  // namespace

size_t fold_merged_heads(std::vector<Node>& nodes) {
  return MergedHeadsFolder(nodes).run();
}

}  // namespace kiln::jit
