#include "jit/passes/group_builder.h"

#include "jit/passes/dead_code.h"

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
  auto restore = [&] {
    builder_.kernel() = saved;
    loads_ = saved_loads;
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
  const Tensor& target = n.written.empty() ? out : n.args[n.written[0]].to_tensor();
  add_member(idx, target, r);
  return true;
}

void GroupBuilder::add_member(size_t idx, const Tensor& target, int32_t value) {
  if (!has_shape_) set_shape(nodes_[idx].outputs[0].sizes());
  members_.push_back(idx);
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
    *why = "it reads memory the group writes, through another view";
    return -1;
  }
  if (neighbour_conflict(t, false)) {
    *why = "it reads memory the reduction's prologue writes, through another view";
    return -1;
  }
  if (t.impl()->is_wrapped_number() && !t.is_pending()) {
    return builder_.constant(t.item().to_double(), compute_dtype(t.dtype()));
  }
  for (size_t i = 0; i < loads_.size(); ++i) {
    if (same_view(loads_[i], t)) return builder_.load(static_cast<int32_t>(i), t.dtype());
  }
  loads_.push_back(t);
  builder_.kernel().inputs.push_back(t.dtype());
  return builder_.load(static_cast<int32_t>(loads_.size() - 1), t.dtype());
}

FusedGroup GroupBuilder::finish(size_t next_live_pos, const std::vector<size_t>& live,
                                const std::unordered_set<const StorageImpl*>& external,
                                int32_t first_store, size_t skip) {
  std::unordered_set<const StorageImpl*> read_later;
  for (size_t k = next_live_pos; k < live.size(); ++k) {
    if (live[k] == skip) continue;
    for_each_input(nodes_[live[k]], [&](const Tensor& t) {
      if (t.defined()) read_later.insert(storage_of(t));
    });
  }
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
    bool needed =
        !n.written.empty() || external.count(storage_of(t)) || read_later.count(storage_of(t));
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
