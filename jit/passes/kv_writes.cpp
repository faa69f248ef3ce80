#include "jit/passes/kv_writes.h"

#include "jit/passes/dead_code.h"
#include "kiln/logging.h"

namespace kiln::jit {
namespace {

const StorageImpl* storage_of(const Tensor& t) {
  return t.defined() && t.impl()->storage() ? t.impl()->storage().get() : nullptr;
}

bool writes(const Node& n, const StorageImpl* s) {
  for (int w : n.written) {
    if (n.args[w].is_tensor() && storage_of(n.args[w].to_tensor()) == s) return true;
  }
  for (const Tensor& t : n.outputs) {
    if (storage_of(t) == s) return true;
  }
  return false;
}

bool same_view(const Tensor& a, const Tensor& b) {
  return storage_of(a) == storage_of(b) && a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.storage_offset() == b.storage_offset() && a.dtype() == b.dtype();
}

class KvWriteFolder {
 public:
  explicit KvWriteFolder(std::vector<Node>& nodes) : nodes_(nodes) {}

  size_t run() {
    static const OperatorEntry* attention = &find_op("kv_cache_attention").entry();
    bool any = false;
    for (const Node& n : nodes_) any = any || (n.op == attention && n.device.is_cuda());
    if (!any) return 0;  // most traces hold no cache attention
    erased_.assign(nodes_.size(), false);
    size_t removed = 0;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].op == attention && nodes_[i].device.is_cuda()) removed += fold(i);
    }
    if (removed > 0) drop_erased(nodes_, erased_);
    return removed;
  }

 private:
  // The write of one slot into `cache` at `pos` that node `a` reads: the last
  // live node before `a` touching the cache's storage, when it is such an
  // index_copy_ and nothing after it (before `a`) writes its source or the
  // position. nodes_.size() when there is none.
  size_t write_before(size_t a, const Tensor& cache, const Tensor& pos) const {
    static const OperatorEntry* index_copy = &find_op("index_copy_").entry();
    const StorageImpl* cs = storage_of(cache);
    size_t w = nodes_.size();
    for (size_t j = a; j-- > 0;) {
      if (erased_[j] || !touches(nodes_[j], cs)) continue;
      w = j;
      break;
    }
    if (w == nodes_.size()) return w;
    const Node& n = nodes_[w];
    if (n.op != index_copy || n.written.size() != 1 || n.written[0] != 0 || n.args.size() < 4 ||
        !n.args[0].is_tensor() || !n.args[1].is_int() || !n.args[2].is_tensor() ||
        !n.args[3].is_tensor() || !(n.device == nodes_[a].device)) {
      return nodes_.size();
    }
    const Tensor& self = n.args[0].to_tensor();
    const Tensor& index = n.args[2].to_tensor();
    const Tensor& src = n.args[3].to_tensor();
    const int64_t dim = n.args[1].to_int();
    if (!same_view(self, cache) || self.dim() != 4 || (dim != 2 && dim != -2) ||
        index.numel() != 1 || index.dtype() != kInt64 || storage_of(index) != storage_of(pos) ||
        index.storage_offset() != pos.storage_offset() || src.dim() != 4 || src.size(2) != 1 ||
        storage_of(src) == storage_of(cache)) {
      return nodes_.size();
    }
    for (size_t j = w + 1; j < a; ++j) {
      if (erased_[j]) continue;
      if (writes(nodes_[j], storage_of(src)) || writes(nodes_[j], storage_of(pos))) {
        return nodes_.size();
      }
    }
    return w;
  }

  size_t fold(size_t a) {
    static const OperatorEntry* fused = &find_op("kv_cache_attention_write").entry();
    Node& attn = nodes_[a];
    if (attn.outputs.size() != 1 || !attn.written.empty() || attn.args.size() < 5 ||
        !attn.args[0].is_tensor() || !attn.args[1].is_tensor() || !attn.args[2].is_tensor() ||
        !attn.args[3].is_tensor()) {
      return 0;
    }
    const Tensor& q = attn.args[0].to_tensor();
    const Tensor& kc = attn.args[1].to_tensor();
    const Tensor& vc = attn.args[2].to_tensor();
    const Tensor& pos = attn.args[3].to_tensor();
    if (q.dim() != 4 || q.size(2) != 1 || pos.numel() != 1 || storage_of(kc) == storage_of(vc)) {
      return 0;
    }
    const size_t wk = write_before(a, kc, pos), wv = write_before(a, vc, pos);
    if (wk == nodes_.size() || wv == nodes_.size() || wk == wv) return 0;
    KILN_LOG(Fusion, "kv cache: the key and value writes run inside the decode attention");
    Tensor k = nodes_[wk].args[3].to_tensor(), v = nodes_[wv].args[3].to_tensor();
    IValue scale = attn.args[4];
    attn.op = fused;
    attn.args = {attn.args[0],         attn.args[1],         attn.args[2],    attn.args[3],
                 IValue(std::move(k)), IValue(std::move(v)), std::move(scale)};
    attn.written = {1, 2};
    // The writes' errors keep their callers' names (write_kv's).
    for (size_t w : {wk, wv}) {
      attn.renames.insert(attn.renames.end(), nodes_[w].renames.begin(), nodes_[w].renames.end());
    }
    erased_[wk] = erased_[wv] = true;
    return 2;
  }

  std::vector<Node>& nodes_;
  std::vector<bool> erased_;
};

}  // namespace

size_t fold_kv_writes(std::vector<Node>& nodes) {
  return KvWriteFolder(nodes).run();
}

}  // namespace kiln::jit
