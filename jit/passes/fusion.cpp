#include "jit/passes/fusion.h"

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
      *why = "it reads memory the group writes, through another view";
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

  struct Produced {
    Tensor view;
    int32_t value;
  };

  const std::vector<Node>& nodes_;
  const FusionOptions& options_;
  KernelBuilder builder_;
  DimVector shape_;
  std::vector<size_t> members_;
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
