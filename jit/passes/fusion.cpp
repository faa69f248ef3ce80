#include "jit/passes/fusion.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>

#include "jit/decompose.h"
#include "jit/passes/dead_code.h"
#include "kiln/logging.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::jit {
namespace {

bool same_view(const Tensor& a, const Tensor& b) {
  return a.impl()->storage().get() == b.impl()->storage().get() &&
         a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

StorageImpl* storage_of(const Tensor& t) {
  return t.impl()->storage().get();
}

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

class GroupBuilder {
 public:
  GroupBuilder(const std::vector<Node>& nodes, const FusionOptions& options)
      : nodes_(nodes), options_(options) {}

  bool empty() const { return members_.empty(); }
  size_t size() const { return members_.size(); }

  // Adds node `idx` or explains why not (the group is left unchanged then).
  bool try_add(size_t idx, Decomposition d, std::string* why) {
    const Node& n = nodes_[idx];
    const Tensor& out = n.outputs[0];
    if (!members_.empty() && !(out.sizes() == shape_.ref())) {
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
        if (storage_of(l) == storage_of(t) && !same_view(l, t)) {
          *why = "it writes memory the group reads through another view";
          return false;
        }
      }
    }
    PointwiseKernel saved = builder_.kernel();
    std::vector<Tensor> saved_loads = loads_;
    std::vector<int32_t> values;
    for (const IValue& a : n.args) {
      if (!a.is_tensor() || !a.to_tensor().defined()) continue;
      const Tensor& t = a.to_tensor();
      int32_t v = resolve(t, why);
      if (v < 0) {
        builder_.kernel() = saved;
        loads_ = saved_loads;
        return false;
      }
      values.push_back(v);
    }
    if (loads_.size() > options_.max_operands) {
      *why = "the group has too many operands";
      builder_.kernel() = saved;
      loads_ = saved_loads;
      return false;
    }
    int32_t r = d(builder_, n, values);
    if (r >= 0) r = builder_.round_to(r, out.dtype());
    if (r < 0) {
      *why = "its arguments are not covered by its decomposition";
      builder_.kernel() = saved;
      loads_ = saved_loads;
      return false;
    }
    if (members_.empty()) shape_ = out.sizes();
    members_.push_back(idx);
    decomps_.push_back(d);
    results_.push_back(r);
    // Later reads of what this node wrote see its value.
    const Tensor& target = n.written.empty() ? out : n.args[n.written[0]].to_tensor();
    produced_.push_back({target, r});
    writes_.insert(storage_of(target));
    return true;
  }

  // Finishes the group: stores what later nodes or outside tensors need.
  FusedGroup finish(size_t next_live_pos, const std::vector<size_t>& live,
                    const std::unordered_set<const StorageImpl*>& external) {
    std::unordered_set<const StorageImpl*> read_later;
    for (size_t k = next_live_pos; k < live.size(); ++k) {
      for_each_input(nodes_[live[k]], [&](const Tensor& t) {
        if (t.defined()) read_later.insert(storage_of(t));
      });
    }
    FusedGroup g;
    g.shape = shape_;
    g.members = members_;
    g.inputs = loads_;
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

 private:
  // The value of tensor `t` inside the group: a member's result, a folded
  // constant (wrapped numbers), or a load.
  int32_t resolve(const Tensor& t, std::string* why) {
    for (size_t i = produced_.size(); i-- > 0;) {
      if (same_view(produced_[i].view, t)) return produced_[i].value;
    }
    if (writes_.count(storage_of(t))) {
      int32_t v = fold_view(t);
      if (v >= 0) return v;
      *why = "it reads memory the group writes, through another view";
      return -1;
    }
    if (t.impl()->is_wrapped_number() && !t.is_pending()) {
      return builder_.constant(t.item().to_double(), compute_dtype(t.dtype()));
    }
    return load(t);
  }

  // Note [View folding]: `t` reads a value the group computes, through a view
  // of it; the value is recomputed at the viewed elements. Returns -1 where
  // that is not exact.
  int32_t fold_view(const Tensor& t) {
    size_t k = produced_.size();
    for (size_t i = 0; i < produced_.size(); ++i) {
      if (storage_of(produced_[i].view) != storage_of(t)) continue;
      if (k != produced_.size()) return -1;  // written twice in the group
      k = i;
    }
    if (k == produced_.size()) return -1;
    ViewIndexMap map;
    if (!view_index_map(t, produced_[k].view, shape_, &map)) return -1;
    return emit_at(k, map);
  }

  // Member `k`'s value at the elements `map` selects.
  int32_t emit_at(size_t k, const ViewIndexMap& map) {
    const Node& n = nodes_[members_[k]];
    if (!n.written.empty()) return -1;  // an in-place result depends on memory
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
        v = builder_.constant(t.item().to_double(), compute_dtype(t.dtype()));
      } else {
        Tensor viewed = map.apply(t, shape_);
        // The CPU generator wants every operand dense in the innermost dim
        // (else the group runs node by node): keep such views a cut there.
        int64_t last = viewed.dim() - 1;
        if (n.device.is_cpu() && last >= 0 && viewed.sizes()[last] > 1 &&
            viewed.strides()[last] > 1) {
          return -1;
        }
        v = load(viewed);
      }
      if (v < 0) return -1;
      values.push_back(v);
    }
    int32_t r = decomps_[k](builder_, n, values);
    return r < 0 ? -1 : builder_.round_to(r, n.outputs[0].dtype());
  }

  int32_t load(const Tensor& t) {
    for (size_t i = 0; i < loads_.size(); ++i) {
      if (same_view(loads_[i], t)) return builder_.load(static_cast<int32_t>(i), t.dtype());
    }
    loads_.push_back(t);
    builder_.kernel().inputs.push_back(t.dtype());
    return builder_.load(static_cast<int32_t>(loads_.size() - 1), t.dtype());
  }

  struct Produced {
    Tensor view;
    int32_t value;
  };

  const std::vector<Node>& nodes_;
  const FusionOptions& options_;
  KernelBuilder builder_;
  DimVector shape_;
  std::vector<size_t> members_;
  std::vector<Decomposition> decomps_;
  std::vector<int32_t> results_;
  std::vector<Tensor> loads_;
  std::vector<Produced> produced_;
  std::unordered_set<const StorageImpl*> writes_;
};

}  // namespace

std::vector<Step> fuse(const std::vector<Node>& nodes, const std::vector<size_t>& live,
                       const FusionOptions& options) {
  std::unordered_set<const StorageImpl*> external = external_storages(nodes);
  std::vector<Step> steps;
  auto group = std::make_unique<GroupBuilder>(nodes, options);
  auto close = [&](size_t next_pos, const std::string& why) {
    if (group->empty()) return;
    KILN_LOG(Fusion, "group of ", group->size(), " node(s) closed before ",
             next_pos < live.size() ? nodes[live[next_pos]].op->name() : std::string("the end"),
             ": ", why);
    Step s{Step::Kind::Fused};
    s.group = group->finish(next_pos, live, external);
    steps.push_back(std::move(s));
    group = std::make_unique<GroupBuilder>(nodes, options);
  };
  for (size_t pos = 0; pos < live.size(); ++pos) {
    size_t idx = live[pos];
    Decomposition d = find_decomposition(nodes[idx]);
    if (!d) {
      close(pos, "the next node is not fusible");
      steps.push_back(Step{Step::Kind::Extern, idx});
      continue;
    }
    std::string why;
    if (group->try_add(idx, d, &why)) continue;
    close(pos, why);
    if (!group->try_add(idx, d, &why)) {
      // Not even alone (its own arguments conflict): run it as an extern.
      KILN_LOG(Fusion, nodes[idx].op->name(), " runs unfused: ", why);
      steps.push_back(Step{Step::Kind::Extern, idx});
    }
  }
  close(live.size(), "the trace ends");
  return steps;
}

std::string describe(const std::vector<Node>& nodes, const std::vector<Step>& steps) {
  std::ostringstream os;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i) os << ' ';
    const Step& s = steps[i];
    if (s.kind == Step::Kind::Extern) {
      os << "extern[" << nodes[s.node].op->name() << ']';
      continue;
    }
    os << "fused[";
    for (size_t k = 0; k < s.group.members.size(); ++k) {
      os << (k ? " " : "") << nodes[s.group.members[k]].op->name();
    }
    os << " -> " << s.group.outputs.size() << " out]";
  }
  return os.str();
}

}  // namespace kiln::jit
