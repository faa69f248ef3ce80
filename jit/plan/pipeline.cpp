#include "jit/plan/pipeline.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_set>

#include "jit/codegen_cpu/launch_cpu.h"
#include "jit/codegen_cpu/reduce_cpu.h"
#include "jit/codegen_cuda/launch_cuda.h"
#include "jit/ir/iteration.h"
#include "jit/passes/cse.h"
#include "jit/passes/dead_code.h"
#include "jit/passes/fusion.h"
#include "jit/passes/matmul_epilogue.h"
#include "jit/passes/memory_plan.h"
#include "jit/plan/executor.h"
#include "kiln/jit.h"
#include "kiln/logging.h"

namespace kiln::jit {
namespace {

std::atomic<int64_t> g_recorded{0}, g_flushes{0}, g_executed{0}, g_dead{0}, g_fallbacks{0},
    g_cse{0}, g_planned{0}, g_naive{0};

// Note [Flush profile]
// KILN_FLUSH_PROFILE=1 times each phase of run_trace and each step kind on
// the calling thread (steady_clock, ns) and prints the totals per flush at
// exit: where a lazy call's host time goes, next to the steps it runs.
enum Phase { kEpilogue, kDead, kCse, kFuse, kMarkers, kPlan, kExtern, kFused, kReduce, kPhases };
constexpr const char* kPhaseNames[kPhases] = {
    "matmul_epilogue", "dead_code",   "cse",        "fuse",          "markers",
    "memory_plan",     "step extern", "step fused", "step reduction"};

struct FlushProfile {
  // Unset, "" and "0" are off, as KILN_EAGER reads.
  bool on = [] {
    const char* env = std::getenv("KILN_FLUSH_PROFILE");
    return env && env[0] && std::strcmp(env, "0") != 0;
  }();
  std::atomic<int64_t> ns[kPhases] = {};
  std::atomic<int64_t> count[kPhases] = {};
  std::atomic<int64_t> flushes{0}, nodes{0};
  // Extern steps by op: ns and calls.
  std::mutex mu;
  std::map<std::string, std::pair<int64_t, int64_t>> by_op;
  ~FlushProfile() {
    if (!on || flushes == 0) return;
    const double f = static_cast<double>(flushes.load());
    std::fprintf(stderr, "[flush profile] %lld flushes, %.1f nodes/flush\n",
                 static_cast<long long>(flushes.load()), static_cast<double>(nodes.load()) / f);
    for (int p = 0; p < kPhases; ++p) {
      std::fprintf(stderr, "[flush profile] %-15s %10.1f us/flush %8.1f calls/flush\n",
                   kPhaseNames[p], static_cast<double>(ns[p].load()) / f / 1e3,
                   static_cast<double>(count[p].load()) / f);
    }
    for (const auto& [op, t] : by_op) {
      std::fprintf(stderr, "[flush profile]   extern %-24s %10.1f us/flush %8.1f calls/flush\n",
                   op.c_str(), static_cast<double>(t.first) / f / 1e3,
                   static_cast<double>(t.second) / f);
    }
  }
};
FlushProfile g_profile;

class PhaseTimer {
 public:
  explicit PhaseTimer(Phase p) : p_(p) {
    if (g_profile.on) t0_ = std::chrono::steady_clock::now();
  }
  ~PhaseTimer() {
    if (!g_profile.on) return;
    auto dt = std::chrono::steady_clock::now() - t0_;
    g_profile.ns[p_].fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(dt).count(),
                               std::memory_order_relaxed);
    g_profile.count[p_].fetch_add(1, std::memory_order_relaxed);
  }

 private:
  Phase p_;
  std::chrono::steady_clock::time_point t0_{};
};

void clear_markers(const std::vector<Node>& nodes) {
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

// A reduction group runs as one generated kernel where the device's generator
// takes it; otherwise its members run one by one through their eager kernels.
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

}  // namespace

std::string describe_plan(std::vector<Node>& nodes) {
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

void run_trace(std::vector<Node> nodes) {
  g_flushes.fetch_add(1, std::memory_order_relaxed);
  if (g_profile.on) {
    g_profile.flushes.fetch_add(1, std::memory_order_relaxed);
    g_profile.nodes.fetch_add(static_cast<int64_t>(nodes.size()), std::memory_order_relaxed);
  }
  {
    PhaseTimer t(kEpilogue);
    fuse_matmul_epilogues(nodes);
  }
  // Held outside the trace: CSE rewrites only handles inside it, and fusion
  // (whose steps hold handles of their own) is not run yet.
  std::unordered_set<const StorageImpl*> external;
  std::vector<size_t> live;
  {
    PhaseTimer t(kDead);
    live = live_nodes(nodes, &external);
  }
  KILN_LOG(Fusion, "trace: ", nodes.size(), " nodes, ", live.size(),
           " live after dead-code elimination");
  g_dead.fetch_add(static_cast<int64_t>(nodes.size() - live.size()), std::memory_order_relaxed);
  {
    PhaseTimer t(kCse);
    CseResult cse = eliminate_common_subexpressions(nodes, live, external);
    if (cse.merged > 0) {
      g_cse.fetch_add(static_cast<int64_t>(cse.merged), std::memory_order_relaxed);
      live = live_nodes(nodes);
      KILN_LOG(Fusion, "cse: ", cse.merged, " node(s) merged (", cse.copies, " as copies), ",
               live.size(), " live");
    }
  }
  // Storages are computed from here on; eager kernels below must see plain memory.
  std::vector<Step> steps;
  {
    PhaseTimer t(kFuse);
    steps = fuse(nodes, live, external);  // CSE leaves `external` as it is
  }
  KILN_LOG(Fusion, "plan: ", describe(nodes, steps));
  {
    PhaseTimer t(kMarkers);
    clear_markers(nodes);
  }
  size_t done = 0;  // live nodes run so far
  try {
    MemoryPlan memory;
    {
      PhaseTimer t(kPlan);
      memory = plan_memory(nodes, steps, external);
    }
    g_planned.store(static_cast<int64_t>(memory.planned_bytes), std::memory_order_relaxed);
    g_naive.store(static_cast<int64_t>(memory.naive_bytes), std::memory_order_relaxed);
    for (const Step& step : steps) {
      PhaseTimer t(step.kind == Step::Kind::Extern  ? kExtern
                   : step.kind == Step::Kind::Fused ? kFused
                                                    : kReduce);
      if (step.kind == Step::Kind::Extern) {
        const Node& n = nodes[step.node];
        // A copy standing in for a merged node (Note [Common subexpressions])
        // writes a fresh storage in place: give it memory first.
        for (int w : n.written) {
          if (n.args[w].is_tensor()) ensure_memory(n.args[w].to_tensor());
        }
        const auto t0 = g_profile.on ? std::chrono::steady_clock::now()
                                     : std::chrono::steady_clock::time_point();
        auto out = memory.out_variants.find(step.node);
        if (out != memory.out_variants.end()) {
          if (out->second) execute_node_into(n, *out->second);  // else: its slice is its result
        } else {
          execute_node(n);
        }
        if (g_profile.on) {
          const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now() - t0)
                                 .count();
          std::lock_guard<std::mutex> lock(g_profile.mu);
          auto& t = g_profile.by_op[n.op->name()];
          t.first += ns;
          t.second += 1;
        }
        ++done;
      } else if (step.kind == Step::Kind::Fused) {
        run_fused(nodes, step.group, &done);
      } else {
        run_reduction(nodes, step.reduction, &done);
      }
    }
    g_executed.fetch_add(static_cast<int64_t>(done), std::memory_order_relaxed);
  } catch (const Error& e) {
    // What did not run stays unreadable, carrying the error, rather than garbage.
    g_executed.fetch_add(static_cast<int64_t>(done), std::memory_order_relaxed);
    auto poison = IntrusivePtr<FailedStorage>::make(e.what());
    for (size_t k = done; k < live.size(); ++k) {
      const Node& n = nodes[live[k]];
      auto mark = [&](const Tensor& t) {
        if (t.defined() && t.impl()->storage()) t.impl()->storage()->set_pending(poison);
      };
      for (const Tensor& t : n.outputs) mark(t);
      for (int w : n.written) {
        if (n.args[w].is_tensor()) mark(n.args[w].to_tensor());
      }
    }
    throw;
  }
}

}  // namespace kiln::jit
