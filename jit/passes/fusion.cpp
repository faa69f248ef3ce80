#include "jit/passes/fusion.h"

#include <algorithm>
#include <memory>
#include <sstream>
#include <string_view>
#include <unordered_set>

#include "jit/passes/dead_code.h"
#include "jit/passes/group_builder.h"
#include "jit/record/decompose.h"
#include "jit/record/decompose_reduce.h"
#include "kiln/logging.h"

namespace kiln::jit {

ReductionKernel ReductionGroup::kernel() const {
  ReductionKernel k;
  k.op = op;
  k.correction = correction;
  k.sqrt_result = sqrt_result;
  k.eps = eps;
  k.prologue = prologue.kernel;
  k.epilogue = epilogue.kernel;
  return k;
}

namespace {

// The open reduction group: its prologue is finished when the group closes,
// its epilogue is the builder pointwise nodes join meanwhile.
struct OpenReduction {
  std::unique_ptr<GroupBuilder> prologue;
  ReductionSpec spec;
  int32_t reduced_value = -1;  // in the prologue
  size_t pos = 0;              // of the reduction node in `live`
  size_t node = 0;
};

bool touches_float64(const Node& n) {
  for (const Tensor& t : n.outputs) {
    if (t.dtype() == kFloat64) return true;
  }
  for (const IValue& v : n.args) {
    if (v.is_tensor() && v.to_tensor().defined() && v.to_tensor().dtype() == kFloat64 &&
        !v.to_tensor().impl()->is_wrapped_number()) {
      return true;
    }
  }
  return false;
}

class Fuser {
 public:
  Fuser(const std::vector<Node>& nodes, const std::vector<size_t>& live,
        const std::unordered_set<const StorageImpl*>& external, const FusionOptions& options)
      : nodes_(nodes), live_(live), options_(options), external_(external), reads_(nodes, live) {
    group_ = fresh();
  }

  std::vector<Step> run() {
    // A Step carries three groups' vectors: growing the vector would move them all.
    steps_.reserve(live_.size());
    for (size_t pos = 0; pos < live_.size(); ++pos) {
      size_t idx = live_[pos];
      ReductionSpec spec;
      if (match_reduction(nodes_[idx], &spec)) {
        start_reduction(pos, idx, spec);
        continue;
      }
      Decomposition d = find_decomposition(nodes_[idx]);
      if (!d) {
        close(pos, "the next node is not fusible");
        steps_.push_back(Step{Step::Kind::Extern, idx});
        continue;
      }
      std::string why;
      if (red_ && touches_float64(nodes_[idx])) {
        // Epilogues compute in float32 (Note [Reduction kernels]).
        close(pos, "the next node has float64 data");
      } else if (group_->try_add(idx, d, &why)) {
        continue;
      } else {
        close(pos, why);
      }
      if (!group_->try_add(idx, d, &why)) {
        // Not even alone (its own arguments conflict): run it as an extern.
        KILN_LOG(Fusion, nodes_[idx].op->name(), " runs unfused: ", why);
        steps_.push_back(Step{Step::Kind::Extern, idx});
      }
    }
    close(live_.size(), "the trace ends");
    return std::move(steps_);
  }

 private:
  std::unique_ptr<GroupBuilder> fresh() const {
    return std::make_unique<GroupBuilder>(nodes_, options_);
  }

  std::string next_name(size_t next_pos) const {
    return next_pos < live_.size() ? nodes_[live_[next_pos]].op->name() : std::string("the end");
  }

  // `why` is only logged: callers pass literals, not strings built per node.
  void close(size_t next_pos, std::string_view why) {
    if (red_) {
      KILN_LOG(Fusion, row_op_name(red_->spec.op), " group closed before ", next_name(next_pos),
               ": ", why);
      Step s{Step::Kind::Reduction};
      ReductionGroup& r = s.reduction;
      r.op = red_->spec.op;
      r.correction = red_->spec.correction;
      r.sqrt_result = red_->spec.sqrt_result;
      r.eps = red_->spec.eps;
      r.node = red_->node;
      r.in_shape = nodes_[red_->node].args[0].to_tensor().sizes();
      r.reduced = red_->spec.reduced;
      // The epilogue is complete: the prologue stores what it loads (Note [Fusion groups]).
      r.prologue = red_->prologue->finish(red_->pos + 1, reads_, external_, red_->reduced_value,
                                          group_.get());
      r.epilogue = group_->finish(next_pos, reads_, external_);
      r.members = r.prologue.members;  // the epilogue's include the reduction
      r.members.insert(r.members.end(), r.epilogue.members.begin(), r.epilogue.members.end());
      std::sort(r.members.begin(), r.members.end());
      steps_.push_back(std::move(s));
      red_.reset();
      group_ = fresh();
      return;
    }
    if (group_->empty()) return;
    KILN_LOG(Fusion, "group of ", group_->size(), " node(s) closed before ", next_name(next_pos),
             ": ", why);
    Step s{Step::Kind::Fused};
    s.group = group_->finish(next_pos, reads_, external_);
    steps_.push_back(std::move(s));
    group_ = fresh();
  }

  void start_reduction(size_t pos, size_t idx, const ReductionSpec& spec) {
    const Node& n = nodes_[idx];
    const Tensor& x = n.args[0].to_tensor();
    if (red_) close(pos, "another reduction starts");
    if (!group_->empty() && !(group_->shape().ref() == x.sizes())) {
      close(pos, "the reduction's input has another shape");
    }
    if (divides_integers(group_->builder().kernel())) {
      close(pos, "the group divides integers (Note [Fusion groups])");
    }
    std::string why;
    int32_t xv = group_->resolve(x, &why);
    if (xv < 0 && !group_->empty()) {
      close(pos, why);
      xv = group_->resolve(x, &why);
    }
    if (xv < 0) {
      KILN_LOG(Fusion, n.op->name(), " runs unfused: ", why);
      steps_.push_back(Step{Step::Kind::Extern, idx});
      return;
    }
    auto prologue = std::move(group_);
    prologue->set_shape(x.sizes());
    int32_t reduced = emit_reduction_prologue(prologue->builder(), spec, xv);
    auto epilogue = fresh();
    epilogue->set_neighbour(prologue.get());
    epilogue->set_shape(n.outputs[0].sizes());
    int32_t core = epilogue->placeholder_input(kFloat32);
    int32_t result =
        emit_reduction_epilogue(epilogue->builder(), n, spec, core,
                                [&](const Tensor& t) { return epilogue->resolve(t, &why); });
    if (result < 0) {
      KILN_LOG(Fusion, n.op->name(), " runs unfused: ", why);
      group_ = std::move(prologue);
      close(pos, "the next node is not fusible");
      steps_.push_back(Step{Step::Kind::Extern, idx});
      return;
    }
    epilogue->add_member(idx, n.outputs[0], result);
    red_ = std::make_unique<OpenReduction>();
    red_->prologue = std::move(prologue);
    red_->spec = spec;
    red_->reduced_value = reduced;
    red_->pos = pos;
    red_->node = idx;
    group_ = std::move(epilogue);
  }

  const std::vector<Node>& nodes_;
  const std::vector<size_t>& live_;
  const FusionOptions& options_;
  const std::unordered_set<const StorageImpl*>& external_;
  const LaterReads reads_;
  std::vector<Step> steps_;
  std::unique_ptr<GroupBuilder> group_;  // the pointwise group, or the open reduction's epilogue
  std::unique_ptr<OpenReduction> red_;
};

void describe_members(std::ostream& os, const std::vector<Node>& nodes,
                      const std::vector<size_t>& members) {
  for (size_t k = 0; k < members.size(); ++k) {
    os << (k ? " " : "") << nodes[members[k]].op->name();
  }
}

}  // namespace

std::vector<Step> fuse(const std::vector<Node>& nodes, const std::vector<size_t>& live,
                       const FusionOptions& options) {
  const std::unordered_set<const StorageImpl*> external = external_storages(nodes);
  return Fuser(nodes, live, external, options).run();
}

std::vector<Step> fuse(const std::vector<Node>& nodes, const std::vector<size_t>& live,
                       const std::unordered_set<const StorageImpl*>& external,
                       const FusionOptions& options) {
  return Fuser(nodes, live, external, options).run();
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
    if (s.kind == Step::Kind::Reduction) {
      // reduce[prologue > reduction > epilogue -> stored outputs]
      const ReductionGroup& r = s.reduction;
      os << "reduce[";
      if (!r.prologue.members.empty()) {
        describe_members(os, nodes, r.prologue.members);
        os << " > ";
      }
      os << nodes[r.node].op->name();
      std::vector<size_t> epi;
      for (size_t m : r.epilogue.members) {
        if (m != r.node) epi.push_back(m);
      }
      if (!epi.empty()) {
        os << " > ";
        describe_members(os, nodes, epi);
      }
      os << " -> " << r.prologue.outputs.size() - 1 + r.epilogue.outputs.size() << " out]";
      continue;
    }
    os << "fused[";
    describe_members(os, nodes, s.group.members);
    os << " -> " << s.group.outputs.size() << " out]";
  }
  return os.str();
}

void OperandGeometry::record(const FusedGroup& g) {
  sizes.clear();
  strides.clear();
  for (const std::vector<Tensor>* side : {&g.outputs, &g.inputs}) {
    for (const Tensor& t : *side) {
      sizes.emplace_back(t.sizes());
      strides.emplace_back(t.strides());
    }
  }
}

bool OperandGeometry::matches(const FusedGroup& g) const {
  if (sizes.size() != g.outputs.size() + g.inputs.size()) return false;
  size_t o = 0;
  for (const std::vector<Tensor>* side : {&g.outputs, &g.inputs}) {
    for (const Tensor& t : *side) {
      if (!(t.sizes() == IntArrayRef(sizes[o])) || !(t.strides() == IntArrayRef(strides[o]))) {
        return false;
      }
      ++o;
    }
  }
  return true;
}

}  // namespace kiln::jit
