#include "jit/plan/pipeline.h"

#include <atomic>

#include "jit/codegen_cpu/launch_cpu.h"
#include "jit/codegen_cpu/reduce_cpu.h"
#include "jit/codegen_cuda/launch_cuda.h"
#include "jit/ir/iteration.h"
#include "jit/passes/cse.h"
#include "jit/passes/dead_code.h"
#include "jit/passes/matmul_epilogue.h"
#include "jit/passes/merged_heads.h"
#include "jit/plan/executor.h"
#include "jit/plan/flush_profile.h"
#include "kiln/jit.h"
#include "kiln/logging.h"

namespace kiln::jit {
namespace {

std::atomic<int64_t> g_recorded{0}, g_flushes{0}, g_executed{0}, g_dead{0}, g_fallbacks{0},
    g_cse{0}, g_planned{0}, g_naive{0};

// A group runs as one generated kernel where the device's generator takes it;
// otherwise its members run one by one through their eager kernels.
void run_fused(const std::vector<Node>& nodes, const FusedGroup& group, size_t* done) {
  if (!group.outputs.empty()) {
    const Device d = group.outputs[0].device();
    bool ran =
        d.is_cpu() ? cpu::run_pointwise_cpu(group) : d.is_cuda() && cuda::run_pointwise_cuda(group);
    if (ran) {
      *done += group.members.size();
      return;
    }
  }
  for (size_t m : group.members) {
    execute_node(nodes[m]);
    ++*done;
  }
}

// The same for a reduction group.
void run_reduction(const std::vector<Node>& nodes, const ReductionGroup& group, size_t* done) {
  const Device d = nodes[group.node].outputs[0].device();
  bool ran =
      d.is_cpu() ? cpu::run_reduction_cpu(group) : d.is_cuda() && cuda::run_reduction_cuda(group);
  if (ran) {
    *done += group.members.size();
    return;
  }
  for (size_t m : group.members) {
    execute_node(nodes[m]);
    ++*done;
  }
}

void run_extern(const Plan& plan, const Node& n, size_t index) {
  // A copy standing in for a merged node (Note [Common subexpressions])
  // writes a fresh storage in place: give it memory first.
  for (int w : n.written) {
    if (n.args[w].is_tensor()) ensure_memory(n.args[w].to_tensor());
  }
  PhaseTimer t(Phase::kExtern);
  auto out = plan.memory.out_variants.find(index);
  if (out != plan.memory.out_variants.end()) {
    if (out->second) execute_node_into(n, *out->second);  // else: its slice is its result
  } else {
    execute_node(n);
  }
  if (t.on()) profile_extern(*n.op, t.elapsed_ns());
}

// Marks every storage the live nodes from the `done`-th on write as failed with `message`.
void poison_rest(const Plan& plan, size_t done, const char* message) {
  auto poison = IntrusivePtr<FailedStorage>::make(message);
  auto mark = [&](const Tensor& t) {
    if (t.defined() && t.impl()->storage()) t.impl()->storage()->set_pending(poison);
  };
  for (size_t k = done; k < plan.live.size(); ++k) {
    const Node& n = plan.nodes[plan.live[k]];
    for (const Tensor& t : n.outputs) mark(t);
    for (int w : n.written) {
      if (n.args[w].is_tensor()) mark(n.args[w].to_tensor());
    }
  }
}

}  // namespace

std::string describe_plan(std::vector<Node>& nodes) {
  fold_merged_heads(nodes);
  fuse_matmul_epilogues(nodes);
  std::vector<size_t> live = live_nodes(nodes);
  return describe(nodes, fuse(nodes, live));
}

void count_recorded() {
  g_recorded.fetch_add(1, std::memory_order_relaxed);
}
void count_eager_fallback() {
  g_fallbacks.fetch_add(1, std::memory_order_relaxed);
}

TraceStats trace_stats() {
  TraceStats s;
  s.recorded_ops = g_recorded.load();
  s.flushes = g_flushes.load();
  s.executed_nodes = g_executed.load();
  s.dead_nodes = g_dead.load();
  s.eager_fallbacks = g_fallbacks.load();
  s.cse_merged = g_cse.load();
  s.planned_bytes = g_planned.load();
  s.naive_bytes = g_naive.load();
  return s;
}

Plan build_plan(std::vector<Node> nodes) {
  Plan p;
  p.nodes = std::move(nodes);
  timed(Phase::kEpilogue,
        [&] { return fold_merged_heads(p.nodes) + fuse_matmul_epilogues(p.nodes); });
  // Held outside the trace: CSE rewrites only handles inside it, and fusion
  // (whose steps hold handles of their own) is not run yet.
  p.live = timed(Phase::kDead, [&] { return live_nodes(p.nodes, &p.external); });
  KILN_LOG(Fusion, "trace: ", p.nodes.size(), " nodes, ", p.live.size(),
           " live after dead-code elimination");
  g_dead.fetch_add(static_cast<int64_t>(p.nodes.size() - p.live.size()), std::memory_order_relaxed);
  CseResult cse = timed(
      Phase::kCse, [&] { return eliminate_common_subexpressions(p.nodes, p.live, p.external); });
  if (cse.merged > 0) {
    g_cse.fetch_add(static_cast<int64_t>(cse.merged), std::memory_order_relaxed);
    p.live = live_nodes(p.nodes);
    KILN_LOG(Fusion, "cse: ", cse.merged, " node(s) merged (", cse.copies, " as copies), ",
             p.live.size(), " live");
  }
  p.steps = timed(Phase::kFuse, [&] { return fuse(p.nodes, p.live, p.external); });
  KILN_LOG(Fusion, "plan: ", describe(p.nodes, p.steps));
  return p;
}

void place_memory(Plan& plan) {
  plan.memory =
      timed(Phase::kPlan, [&] { return plan_memory(plan.nodes, plan.steps, plan.external); });
  g_planned.store(static_cast<int64_t>(plan.memory.planned_bytes), std::memory_order_relaxed);
  g_naive.store(static_cast<int64_t>(plan.memory.naive_bytes), std::memory_order_relaxed);
}

void clear_markers(const std::vector<Node>& nodes) {
  PhaseTimer t(Phase::kMarkers);
  auto clear = [](const Tensor& t) {
    if (t.defined() && t.impl()->storage()) t.impl()->storage()->set_pending(nullptr);
  };
  for (const Node& n : nodes) {
    for (const Tensor& t : n.outputs) clear(t);
    for (int w : n.written) {
      if (n.args[w].is_tensor()) clear(n.args[w].to_tensor());
    }
  }
}

void run_plan(const Plan& plan) {
  size_t done = 0;  // live nodes run so far
  try {
    for (const Step& step : plan.steps) {
      switch (step.kind) {
        case Step::Kind::Extern:
          run_extern(plan, plan.nodes[step.node], step.node);
          ++done;
          break;
        case Step::Kind::Fused: {
          PhaseTimer t(Phase::kFused);
          run_fused(plan.nodes, step.group, &done);
          break;
        }
        case Step::Kind::Reduction: {
          PhaseTimer t(Phase::kReduce);
          run_reduction(plan.nodes, step.reduction, &done);
          break;
        }
      }
    }
  } catch (const Error& e) {
    // What did not run stays unreadable, carrying the error, rather than garbage.
    g_executed.fetch_add(static_cast<int64_t>(done), std::memory_order_relaxed);
    poison_rest(plan, done, e.what());
    throw;
  }
  g_executed.fetch_add(static_cast<int64_t>(done), std::memory_order_relaxed);
}

void run_trace(std::vector<Node> nodes) {
  g_flushes.fetch_add(1, std::memory_order_relaxed);
  profile_flush(nodes.size());
  Plan plan = build_plan(std::move(nodes));
  // Storages are computed from here on; eager kernels below must see plain memory.
  clear_markers(plan.nodes);
  try {
    place_memory(plan);
  } catch (const Error& e) {
    poison_rest(plan, 0, e.what());
    throw;
  }
  run_plan(plan);
}

}  // namespace kiln::jit
