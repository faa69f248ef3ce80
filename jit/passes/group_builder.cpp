#include "jit/passes/group_builder.h"

#include <algorithm>

#include "jit/passes/dead_code.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::jit {
namespace {

bool same_view(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.impl()->storage().get() == b.impl()->storage().get() &&
         a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

StorageImpl* storage_of(const Tensor& t) {
  return t.impl()->storage().get();
}

}  // namespace

// Note [View folding]: how the elements of a view of a group value map onto
// the group's iteration space. View dim d walks group dim dim[d] (or none, -1)
// in steps of step[d]; the view's element 0 is at group index base.
struct ViewIndexMap {
  DimVector sizes, dim, step, base;

  // `t` (broadcastable to `shape`) seen through the same view: its elements
  // at the group indices the view selects.
  Tensor apply(const Tensor& t, IntArrayRef shape) const {
    const int64_t nd = static_cast<int64_t>(shape.size());
    const int64_t off = nd - t.dim();
    DimVector ts(nd, 0);  // t's stride per group dim, 0 where it broadcasts
    for (int64_t d = 0; d < t.dim(); ++d) ts[off + d] = t.sizes()[d] == 1 ? 0 : t.strides()[d];
    int64_t offset = t.storage_offset();
    for (int64_t e = 0; e < nd; ++e) offset += base[e] * ts[e];
    DimVector strides(sizes.size(), 0);
    for (size_t d = 0; d < sizes.size(); ++d) strides[d] = dim[d] < 0 ? 0 : step[d] * ts[dim[d]];
    return make_view(t, sizes, strides, offset);
  }
};

namespace {

// Fills `m` when `v` (a view over `p`'s storage) selects elements of `p`, a
// dense tensor of the group's `shape`, by an affine map of indices: no view
// dim may carry from one dim of `p` into the next.
bool view_index_map(const Tensor& v, const Tensor& p, IntArrayRef shape, ViewIndexMap* m) {
  if (v.dtype() != p.dtype() || !(p.sizes() == shape) || p.numel() == 0) return false;
  const int64_t nd = p.dim();
  std::vector<int64_t> order;  // p's dims of size > 1, outermost (largest stride) first
  for (int64_t e = 0; e < nd; ++e) {
    if (p.sizes()[e] > 1) order.push_back(e);
  }
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return p.strides()[a] > p.strides()[b]; });
  int64_t expected = 1;
  for (size_t i = order.size(); i-- > 0;) {
    if (p.strides()[order[i]] != expected) return false;  // not dense
    expected *= p.sizes()[order[i]];
  }
  int64_t rel = v.storage_offset() - p.storage_offset();
  if (rel < 0) return false;
  m->sizes = v.sizes();
  m->base = DimVector(nd, 0);
  for (int64_t e : order) {
    m->base[e] = rel / p.strides()[e];
    rel %= p.strides()[e];
  }
  if (rel != 0) return false;
  DimVector reach = m->base;  // the largest index reached per dim of p
  m->dim = DimVector(v.dim(), -1);
  m->step = DimVector(v.dim(), 0);
  for (int64_t d = 0; d < v.dim(); ++d) {
    int64_t s = v.strides()[d];
    if (v.sizes()[d] == 1 || s == 0) continue;
    if (s < 0) return false;
    for (int64_t e : order) {
      if (s % p.strides()[e] == 0) {
        m->dim[d] = e;
        m->step[d] = s / p.strides()[e];
        reach[e] += m->step[d] * (v.sizes()[d] - 1);
        break;
      }
    }
    if (m->dim[d] < 0) return false;
  }
  for (int64_t e = 0; e < nd; ++e) {
    if (reach[e] >= p.sizes()[e]) return false;
  }
  return true;
}

}  // namespace

bool GroupBuilder::neighbour_conflict(const Tensor& t, bool write) const {
  if (!neighbour_) return false;
  const StorageImpl* s = storage_of(t);
  bool touched = neighbour_->writes_.count(s) > 0;
  if (write) {
    for (const Tensor& l : neighbour_->loads_)
      touched = touched || (l.defined() && storage_of(l) == s);
  }
  if (!touched) return false;
  for (const Produced& p : neighbour_->produced_) {
    if (same_view(p.view, t)) return false;
  }
  for (const Tensor& l : neighbour_->loads_) {
    if (same_view(l, t)) return false;
  }
  return true;
}

bool GroupBuilder::try_add(size_t idx, Decomposition d, std::string* why) {
  const Node& n = nodes_[idx];
  const Tensor& out = n.outputs[0];
  if (has_shape_ && !(out.sizes() == shape_.ref())) {
    *why = "its shape differs from the group's";
    return false;
  }
  if (members_.size() >= options_.max_nodes) {
    *why = "the group is full";
    return false;
  }
  // Arguments this node writes may not be loaded elsewhere in the group with another layout.
  for (int w : n.written) {
    const Tensor& t = n.args[w].to_tensor();
    for (const Tensor& l : loads_) {
      if (l.defined() && storage_of(l) == storage_of(t) && !same_view(l, t)) {
        *why = "it writes memory the group reads through another view";
        return false;
      }
    }
    if (neighbour_conflict(t, true)) {
      *why = "it writes memory the reduction's prologue uses through another view";
      return false;
    }
  }
  PointwiseKernel saved = builder_.kernel();
  std::vector<Tensor> saved_loads = loads_;
  const size_t saved_numbers = numbers_.size();
  auto restore = [&] {
    builder_.kernel() = saved;
    loads_ = saved_loads;
    numbers_.resize(saved_numbers);
    return false;
  };
  std::vector<int32_t> values;
  for (const IValue& a : n.args) {
    if (!a.is_tensor() || !a.to_tensor().defined()) continue;
    int32_t v = resolve(a.to_tensor(), why);
    if (v < 0) return restore();
    values.push_back(v);
  }
  if (loads_.size() > options_.max_operands) {
    *why = "the group has too many operands";
    return restore();
  }
  int32_t r = d(builder_, n, values);
  if (r >= 0) r = builder_.round_to(r, out.dtype());
  if (r < 0) {
    *why = "its arguments are not covered by its decomposition";
    return restore();
  }
  if (neighbour_ && divides_integers(builder_.kernel())) {
    *why = "it divides integers, which no reduction kernel reports (Note [Fusion groups])";
    return restore();
  }
  const Tensor& target = n.written.empty() ? out : n.args[n.written[0]].to_tensor();
  add_member(idx, target, r, d);
  return true;
}

void GroupBuilder::add_member(size_t idx, const Tensor& target, int32_t value, Decomposition d) {
  if (!has_shape_) set_shape(nodes_[idx].outputs[0].sizes());
  members_.push_back(idx);
  decomps_.push_back(d);
  // Later reads of what this node wrote see its value.
  produced_.push_back({target, value});
  writes_.insert(storage_of(target));
}

int32_t GroupBuilder::placeholder_input(DType memory_dtype) {
  loads_.push_back(Tensor());
  builder_.kernel().inputs.push_back(memory_dtype);
  return builder_.load(static_cast<int32_t>(loads_.size() - 1), memory_dtype);
}

int32_t GroupBuilder::resolve(const Tensor& t, std::string* why) {
  for (size_t i = produced_.size(); i-- > 0;) {
    if (same_view(produced_[i].view, t)) return produced_[i].value;
  }
  if (writes_.count(storage_of(t))) {
    int32_t v = fold_view(t);
    if (v >= 0) return v;
    *why = "it reads memory the group writes, through another view";
    return -1;
  }
  if (neighbour_conflict(t, false)) {
    *why = "it reads memory the reduction's prologue writes, through another view";
    return -1;
  }
  if (t.impl()->is_wrapped_number() && !t.is_pending()) return number(t);
  return load(t);
}

// Note [View folding]: `t` reads a value the group computes, through a view of
// it; the value is recomputed at the viewed elements. Returns -1 where that is
// not exact, leaving the group as it was.
int32_t GroupBuilder::fold_view(const Tensor& t) {
  size_t k = produced_.size();
  for (size_t i = 0; i < produced_.size(); ++i) {
    if (storage_of(produced_[i].view) != storage_of(t)) continue;
    if (k != produced_.size()) return -1;  // written twice in the group
    k = i;
  }
  if (k == produced_.size()) return -1;
  ViewIndexMap map;
  if (!view_index_map(t, produced_[k].view, shape_, &map)) return -1;
  PointwiseKernel saved = builder_.kernel();
  std::vector<Tensor> saved_loads = loads_;
  const size_t saved_numbers = numbers_.size();
  int32_t v = emit_at(k, map);
  if (v < 0 || loads_.size() > options_.max_operands) {
    builder_.kernel() = std::move(saved);
    loads_ = std::move(saved_loads);
    numbers_.resize(saved_numbers);
    return -1;
  }
  return v;
}

// Member `k`'s value at the elements `map` selects.
int32_t GroupBuilder::emit_at(size_t k, const ViewIndexMap& map) {
  const Node& n = nodes_[members_[k]];
  // An in-place result depends on memory; a member without a decomposition
  // (a reduction in its epilogue) has its value per row, not per element.
  if (!n.written.empty() || !decomps_[k]) return -1;
  std::vector<int32_t> values;
  for (const IValue& a : n.args) {
    if (!a.is_tensor() || !a.to_tensor().defined()) continue;
    const Tensor& t = a.to_tensor();
    int32_t v = -1;
    size_t j = k;
    while (j-- > 0 && !same_view(produced_[j].view, t)) {
    }
    if (j < k) {
      for (size_t i = j + 1; i < k; ++i) {
        if (storage_of(produced_[i].view) == storage_of(t)) return -1;  // rewritten since
      }
      v = emit_at(j, map);
    } else if (writes_.count(storage_of(t))) {
      return -1;  // the kernel writes it: reading other elements would race
    } else if (t.impl()->is_wrapped_number() && !t.is_pending()) {
      v = number(t);
    } else {
      Tensor viewed = map.apply(t, shape_);
      // The CPU generator wants every operand dense in the innermost dim
      // (else the group runs node by node): keep such views a cut there.
      int64_t last = viewed.dim() - 1;
      if (n.device.is_cpu() && last >= 0 && viewed.sizes()[last] > 1 &&
          viewed.strides()[last] > 1) {
        return -1;
      }
      if (neighbour_conflict(viewed, false)) return -1;
      v = load(viewed);
    }
    if (v < 0) return -1;
    values.push_back(v);
  }
  int32_t r = decomps_[k](builder_, n, values);
  return r < 0 ? -1 : builder_.round_to(r, n.outputs[0].dtype());
}

// A number the program passed (Note [Numbers as kernel arguments]): one
// kernel argument per wrapped number, however often the group reads it.
int32_t GroupBuilder::number(const Tensor& t) {
  const DType type = compute_dtype(t.dtype());
  const PointwiseKernel& k = builder_.kernel();
  for (const auto& [impl, v] : numbers_) {
    if (impl == t.impl() && k.body[v].dtype == type) return v;
  }
  const int32_t v = builder_.param(t.item().to_double(), type);
  numbers_.emplace_back(t.impl(), v);
  return v;
}

int32_t GroupBuilder::load(const Tensor& t) {
  for (size_t i = 0; i < loads_.size(); ++i) {
    if (same_view(loads_[i], t)) return builder_.load(static_cast<int32_t>(i), t.dtype());
  }
  loads_.push_back(t);
  builder_.kernel().inputs.push_back(t.dtype());
  return builder_.load(static_cast<int32_t>(loads_.size() - 1), t.dtype());
}

LaterReads::LaterReads(const std::vector<Node>& nodes, const std::vector<size_t>& live) {
  readers_.reserve(live.size() * 2);
  for (size_t k = 0; k < live.size(); ++k) {
    for_each_input(nodes[live[k]], [&](const Tensor& t) {
      if (!t.defined()) return;
      std::vector<size_t>& r = readers_[storage_of(t)];
      if (r.empty() || r.back() != k) r.push_back(k);
    });
  }
}

bool LaterReads::any(const StorageImpl* s, size_t pos) const {
  auto it = readers_.find(s);
  return it != readers_.end() && it->second.back() >= pos;
}

bool GroupBuilder::loads_from(const StorageImpl* s) const {
  for (const Tensor& l : loads_) {
    if (l.defined() && storage_of(l) == s) return true;
  }
  return false;
}

FusedGroup GroupBuilder::finish(size_t next_live_pos, const LaterReads& reads,
                                const std::unordered_set<const StorageImpl*>& external,
                                int32_t first_store, const GroupBuilder* reader) {
  FusedGroup g;
  g.shape = shape_;
  g.members = members_;
  g.inputs = loads_;
  if (first_store >= 0) {
    g.outputs.push_back(Tensor());
    builder_.kernel().outputs.push_back(kFloat32);
    builder_.kernel().stores.push_back(first_store);
  }
  // The last write of each view wins.
  for (size_t i = produced_.size(); i-- > 0;) {
    const Tensor& t = produced_[i].view;
    const Node& n = nodes_[members_[i]];
    bool needed = !n.written.empty() || external.count(storage_of(t)) ||
                  reads.any(storage_of(t), next_live_pos) ||
                  (reader != nullptr && reader->loads_from(storage_of(t)));
    if (!needed) continue;
    bool dup = false;
    for (const Tensor& o : g.outputs) dup = dup || same_view(o, t);
    if (dup) continue;
    g.outputs.push_back(t);
    builder_.kernel().outputs.push_back(t.dtype());
    builder_.kernel().stores.push_back(produced_[i].value);
  }
  g.kernel = std::move(builder_.kernel());
  g.kernel.compact();
  return g;
}

}  // namespace kiln::jit
