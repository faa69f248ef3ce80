#include "jit/plan/pipeline.h"

#include <atomic>

#include "jit/codegen_cpu/launch_cpu.h"
#include "jit/codegen_cpu/reduce_cpu.h"
#include "jit/codegen_cuda/launch_cuda.h"
#include "jit/ir/iteration.h"
#include "jit/passes/cse.h"
#include "jit/passes/dead_code.h"
#include "jit/passes/kv_writes.h"
#include "jit/passes/matmul_epilogue.h"
#include "jit/passes/merged_heads.h"
#include "jit/plan/executor.h"
#include "jit/plan/flush_profile.h"
#include "kiln/jit.h"
#include "kiln/logging.h"
#include "runtime/core/deferred_checks.h"

namespace kiln::jit {
namespace {

std::atomic<int64_t> g_recorded{0}, g_flushes{0}, g_executed{0}, g_dead{0}, g_fallbacks{0},
    g_cse{0}, g_planned{0}, g_naive{0};

// A group runs as one generated kernel where the device's generator takes it;
// otherwise its members run one by one through their eager kernels, `*at`
// the position of the member running (Note [A failed member of a group]).
void run_fused(const std::vector<Node>& nodes, const FusedGroup& group, size_t* done, size_t* at) {
  if (!group.outputs.empty()) {
    const Device d = group.outputs[0].device();
    bool ran =
        d.is_cpu() ? cpu::run_pointwise_cpu(group) : d.is_cuda() && cuda::run_pointwise_cuda(group);
    if (ran) {
      *done += group.members.size();
      return;
    }
  }
  for (*at = 0; *at < group.members.size(); ++*at) {
    execute_node(nodes[group.members[*at]]);
    ++*done;
  }
}

// The same for a reduction group.
void run_reduction(const std::vector<Node>& nodes, const ReductionGroup& group, size_t* done,
                   size_t* at) {
  const Device d = nodes[group.node].outputs[0].device();
  bool ran =
      d.is_cpu() ? cpu::run_reduction_cpu(group) : d.is_cuda() && cuda::run_reduction_cuda(group);
  if (ran) {
    *done += group.members.size();
    return;
  }
  for (*at = 0; *at < group.members.size(); ++*at) {
    execute_node(nodes[group.members[*at]]);
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

// Calls f(StorageImpl*) for each storage `n` writes: its outputs and written arguments.
template <class F>
void for_each_write(const Node& n, F&& f) {
  for (const Tensor& t : n.outputs) {
    if (t.defined() && t.impl()->storage()) f(t.impl()->storage().get());
  }
  for (int w : n.written) {
    if (!n.args[w].is_tensor()) continue;
    const Tensor& t = n.args[w].to_tensor();
    if (t.defined() && t.impl()->storage()) f(t.impl()->storage().get());
  }
}

thread_local int t_running = 0;
thread_local const PendingValue* t_running_marker = nullptr;

// The run of a plan on this thread, with the marker of its trace.
class Running {
 public:
  explicit Running(const PendingValue* marker) : saved_(t_running_marker) {
    ++t_running;
    t_running_marker = marker;
  }
  ~Running() {
    --t_running;
    t_running_marker = saved_;
  }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;

 private:
  const PendingValue* saved_;
};

// The failures of one run as it goes (Note [Failures in a trace]).
class Failures {
 public:
  Failures(const Plan& plan, RunFailures& out) : plan_(plan), out_(out) {}

  bool empty() const { return out_.storages.empty() && out_.errors.empty(); }

  // The failure node `i` may not run past (an input a failed step should have
  // written), or -1.
  int64_t blocking(size_t i) const {
    int64_t first = -1;
    reads_failed(i, [&](size_t f) {
      first = static_cast<int64_t>(f);
      return false;
    });
    return first;
  }

  // Node `i` did not run, as failure `b` blocks it: what it writes carries
  // `b`, which stands for every other failure it read too (whoever is told of
  // `b` has been told of those).
  void skip(size_t i, size_t b) {
    reads_failed(i, [&](size_t f) {
      if (f != b) out_.covered.emplace_back(f, b);
      return true;
    });
    fail(i, b);
  }

  size_t add(std::exception_ptr error, size_t node) {
    out_.errors.push_back(std::move(error));
    out_.nodes.push_back(node);
    return out_.errors.size() - 1;
  }
  // Node `i` did not run: what it writes carries failure `f`.
  void fail(size_t i, size_t f) {
    for_each_write(plan_.nodes[i], [&](StorageImpl* s) {
      auto [it, fresh] = out_.storages.try_emplace(s, f);
      if (!fresh && it->second != f) {
        out_.covered.emplace_back(it->second, f);
        it->second = f;
      }
    });
  }
  // Node `i` ran: what it writes holds a value (a write that would have read
  // a failed storage was blocked, so this one overwrote it whole).
  void ran(size_t i) {
    if (out_.storages.empty()) return;
    for_each_write(plan_.nodes[i], [&](StorageImpl* s) { out_.storages.erase(s); });
  }

 private:
  const Plan& plan_;
  RunFailures& out_;

  // Calls fn(failure) for each failed storage node `i` reads, in argument
  // order, while fn returns true.
  template <class Fn>
  void reads_failed(size_t i, Fn&& fn) const {
    if (out_.storages.empty()) return;
    const Node& n = plan_.nodes[i];
    auto find = [&](const Tensor& t) -> int64_t {
      if (!t.defined() || !t.impl()->storage()) return -1;
      auto it = out_.storages.find(t.impl()->storage().get());
      return it == out_.storages.end() ? -1 : static_cast<int64_t>(it->second);
    };
    for (size_t a = 0; a < n.args.size(); ++a) {
      const IValue& v = n.args[a];
      if (v.is_tensor()) {
        const Tensor& t = v.to_tensor();
        const int64_t f = find(t);
        if (f < 0) continue;
        bool written = false;
        for (int w : n.written) written |= static_cast<size_t>(w) == a;
        if (written && overwrites_storage(*n.op, a, t)) continue;  // not read
        if (!fn(static_cast<size_t>(f))) return;
      } else if (v.is_tensor_list()) {
        for (const Tensor& t : v.to_tensor_list()) {
          if (const int64_t f = find(t); f >= 0 && !fn(static_cast<size_t>(f))) return;
        }
      }
    }
  }
};

const std::vector<size_t>& members_of(const Step& step) {
  return step.kind == Step::Kind::Fused ? step.group.members : step.reduction.members;
}

// Runs one step; throws what it throws. `*at`: where a group ran member by
// member, the position of the member running (else left as it was).
void run_step(const Plan& plan, const Step& step, size_t* done, size_t* at) {
  switch (step.kind) {
    case Step::Kind::Extern:
      run_extern(plan, plan.nodes[step.node], step.node);
      ++*done;
      break;
    case Step::Kind::Fused: {
      PhaseTimer t(Phase::kFused);
      run_fused(plan.nodes, step.group, done, at);
      break;
    }
    case Step::Kind::Reduction: {
      PhaseTimer t(Phase::kReduce);
      run_reduction(plan.nodes, step.reduction, done, at);
      break;
    }
  }
}

// Members of a group from position `from` on, one by one, after a failure:
// those it reaches are skipped, the others run.
void run_members_after_failure(const Plan& plan, const std::vector<size_t>& members, size_t from,
                               Failures& f, size_t* done) {
  for (size_t k = from; k < members.size(); ++k) {
    const size_t m = members[k];
    if (const int64_t b = f.blocking(m); b >= 0) {
      f.skip(m, static_cast<size_t>(b));
      continue;
    }
    try {
      execute_node(plan.nodes[m]);
      ++*done;
      f.ran(m);
    } catch (...) {
      f.fail(m, f.add(std::current_exception(), m));
    }
  }
}

// Note [A failed member of a group]
// A group whose generated kernel does not take it (integer arithmetic on the
// CPU, say) runs its members one by one. When one of them raises, the
// members before it ran and keep their values, it fails, and the members
// after it run or are skipped by the rules of Note [Failures in a trace], as
// if each were a step of its own: a failing integer division fused beside an
// independent in-place add and an independent exp leaves both of them
// readable, as eager would. Where the group ran as one kernel and that
// raised (memory ran out, a compile failed), nothing of it is known to have
// run, and every member fails. A device check that fails after its kernel
// ran (Note [Device checks at the end of a run]) fails the members that
// check values and those that read what they wrote, not the rest.
void fail_step(const Plan& plan, const Step& step, size_t at, std::exception_ptr error, Failures& f,
               size_t* done) {
  if (step.kind == Step::Kind::Extern) {
    f.fail(step.node, f.add(std::move(error), step.node));
    return;
  }
  const std::vector<size_t>& members = members_of(step);
  if (at >= members.size()) {  // the group's kernel raised
    const size_t e = f.add(std::move(error), members.front());
    for (size_t m : members) f.fail(m, e);
    return;
  }
  for (size_t k = 0; k < at; ++k) f.ran(members[k]);
  f.fail(members[at], f.add(std::move(error), members[at]));
  run_members_after_failure(plan, members, at + 1, f, done);
}

// Runs one step after an earlier one failed: what a failure reaches is
// skipped; a group part of which it reaches runs member by member.
void run_step_after_failure(const Plan& plan, const Step& step, Failures& f, size_t* done) {
  if (step.kind == Step::Kind::Extern) {
    if (const int64_t b = f.blocking(step.node); b >= 0) {
      f.skip(step.node, static_cast<size_t>(b));
      return;
    }
  } else {
    bool reached = false;
    for (size_t m : members_of(step)) reached = reached || f.blocking(m) >= 0;
    if (reached) {
      run_members_after_failure(plan, members_of(step), 0, f, done);
      return;
    }
  }
  size_t at = SIZE_MAX;
  try {
    run_step(plan, step, done, &at);
  } catch (...) {
    fail_step(plan, step, at, std::current_exception(), f, done);
    return;
  }
  if (step.kind == Step::Kind::Extern) {
    f.ran(step.node);
  } else {
    for (size_t m : members_of(step)) f.ran(m);
  }
}

// Note [Device checks at the end of a run]: step `s` ran, and a check made
// during it raised `error` after the last step. What it wrote carries the
// error, as if it had raised at once; so does what every later step wrote
// that read a failed storage: it ran on the values the bad element left.
void fail_late(const Plan& plan, size_t s, std::exception_ptr error, Failures& f) {
  const auto members = [&](const Step& step) {
    return step.kind == Step::Kind::Extern ? std::vector<size_t>{step.node} : members_of(step);
  };
  const std::vector<size_t> failed = members(plan.steps[s]);
  // The members that check values fail, and those of the step after them
  // that read what a failed member wrote (Note [A failed member of a group]).
  std::vector<size_t> checking;
  for (size_t m : failed) {
    if (checks_values(plan.nodes[m])) checking.push_back(m);
  }
  if (checking.empty()) checking = failed;
  const size_t e = f.add(std::move(error), checking.front());
  for (size_t m : checking) f.fail(m, e);
  for (size_t m : failed) {
    if (const int64_t b = f.blocking(m); b >= 0) f.skip(m, static_cast<size_t>(b));
  }
  for (size_t t = s + 1; t < plan.steps.size(); ++t) {
    for (size_t m : members(plan.steps[t])) {
      if (const int64_t b = f.blocking(m); b >= 0) f.skip(m, static_cast<size_t>(b));
    }
  }
}

// Puts each failure's marker on the storages it reaches.
void mark_failed(const RunFailures& f) {
  std::vector<IntrusivePtr<PendingValue>> markers;
  markers.reserve(f.errors.size());
  for (const std::exception_ptr& e : f.errors)
    markers.push_back(IntrusivePtr<FailedStorage>::make(e));
  for (const auto& [storage, index] : f.storages) storage->set_pending(markers[index]);
}

// "[lazy] op 3 'index_select' failed and nothing held its result: ..."
std::exception_ptr unclaimed_error(const Plan& plan, const RunFailures& f, size_t index) {
  std::string what;
  try {
    std::rethrow_exception(f.errors[index]);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception that is not a std::exception";
  }
  const size_t node = f.nodes[index];
  return std::make_exception_ptr(Error("[lazy] op " + std::to_string(node) + " '" +
                                       plan.nodes[node].op->name() +
                                       "' failed and nothing held its result: " + what));
}

// Dead nodes that check values (an index, an integer divisor) stay live (Note
// [Failures in a trace]):
// their results are held by the plan while it runs.
void keep_checked(Plan& p) {
  std::vector<char> live(p.nodes.size(), 0);
  for (size_t i : p.live) live[i] = 1;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    if (live[i] || !checks_values(p.nodes[i])) continue;
    for (const Tensor& t : p.nodes[i].outputs) p.kept.push_back(t);
  }
  if (!p.kept.empty()) p.live = live_nodes(p.nodes);
}

void build_steps(Plan& p) {
  timed(Phase::kEpilogue, [&] {
    return fold_merged_heads(p.nodes) + fold_kv_writes(p.nodes) + fuse_matmul_epilogues(p.nodes);
  });
  // Held outside the trace: CSE rewrites only handles inside it, and fusion
  // (whose steps hold handles of their own) is not run yet.
  p.live = timed(Phase::kDead, [&] { return live_nodes(p.nodes, &p.external); });
  if (p.live.size() < p.nodes.size()) keep_checked(p);
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
}

}  // namespace

std::string describe_plan(std::vector<Node>& nodes) {
  fold_merged_heads(nodes);
  fold_kv_writes(nodes);
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
  build_steps(p);
  return p;
}

void place_memory(Plan& plan) {
  plan.memory =
      timed(Phase::kPlan, [&] { return plan_memory(plan.nodes, plan.steps, plan.external); });
  g_planned.store(static_cast<int64_t>(plan.memory.planned_bytes), std::memory_order_relaxed);
  g_naive.store(static_cast<int64_t>(plan.memory.naive_bytes), std::memory_order_relaxed);
}

void clear_markers(const std::vector<Node>& nodes, const PendingValue* marker) {
  PhaseTimer t(Phase::kMarkers);
  for (const Node& n : nodes) {
    for_each_write(n, [&](StorageImpl* s) {
      if (s->pending_marker() == marker) s->replace_pending(marker, nullptr);
    });
  }
}

bool plan_running() {
  return t_running > 0;
}

const PendingValue* running_marker() {
  return t_running_marker;
}

RunFailures run_plan(const Plan& plan, StepObserver* observer) {
  Running running(t_running_marker);
  // Steps run under their own ops' scopes, not the caller's (a flush inside a
  // composite: Note [Composite ops name themselves]).
  const RenameScopes no_scopes(ErrorRenames{});
  RunFailures out;
  Failures f(plan, out);
  kiln::detail::DeferredChecks checks;  // Note [Device checks at the end of a run]
  size_t done = 0;                      // live nodes run
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const Step& step = plan.steps[s];
    checks.set_step(s);
    if (observer) observer->before_step(step);
    if (KILN_LIKELY(f.empty())) {
      size_t at = SIZE_MAX;
      try {
        run_step(plan, step, &done, &at);
      } catch (...) {
        fail_step(plan, step, at, std::current_exception(), f, &done);
      }
    } else {
      run_step_after_failure(plan, step, f, &done);
    }
    if (observer) observer->after_step(step);
  }
  for (auto& [s, error] : checks.finish()) fail_late(plan, s, std::move(error), f);
  g_executed.fetch_add(static_cast<int64_t>(done), std::memory_order_relaxed);
  if (!out.empty()) mark_failed(out);
  return out;
}

std::vector<std::exception_ptr> run_trace(std::vector<Node> nodes, const PendingValue* marker) {
  // A flush may start inside an op (a lazy kernel that needs values): its
  // arena and fused kernels are not that op's (Note [The op being run]).
  const kiln::detail::CurrentOpScope no_op(nullptr);
  g_flushes.fetch_add(1, std::memory_order_relaxed);
  profile_flush(nodes.size());
  // The plan holds the trace's last references to storages; it is destroyed
  // after the Running guard, so that a deleter they run (from_blob's) which
  // records and reads kiln values does so as a new trace, not as one this
  // run computes (it read null memory).
  Plan plan;
  // Storages keep their marker until their value exists (Note [Pending state
  // across threads]); the steps below read them as plain memory.
  Running running(marker);
  plan.nodes = std::move(nodes);
  RunFailures failures;
  bool planned = false;
  try {
    build_steps(plan);
    place_memory(plan);
    planned = true;
  } catch (...) {
    // Nothing runs: everything the trace writes carries the error.
    failures.errors.push_back(std::current_exception());
    failures.nodes.push_back(0);
    for (const Node& n : plan.nodes) {
      for_each_write(n, [&](StorageImpl* s) { failures.storages[s] = 0; });
    }
    mark_failed(failures);
  }
  if (planned) failures = run_plan(plan);
  clear_markers(plan.nodes, marker);
  std::vector<std::exception_ptr> unclaimed;
  if (planned && !failures.empty()) {
    std::vector<char> claimed(failures.errors.size(), 0);
    for (const auto& [storage, index] : failures.storages) {
      if (plan.external.count(storage)) claimed[index] = 1;
    }
    // An error that a claimed one stands for (it blocked a step that the
    // claimed one blocked too, or a held storage carried it until the claimed
    // one replaced it) reaches the holder through that one: raised there, not
    // once more by an unrelated read. Covering is transitive: sweep until
    // nothing changes (the pairs are few, one per extra failure a step read).
    for (bool changed = true; changed;) {
      changed = false;
      for (const auto& [covered, by] : failures.covered) {
        if (!claimed[by] || claimed[covered]) continue;
        claimed[covered] = 1;
        changed = true;
      }
    }
    for (size_t e = 0; e < claimed.size(); ++e) {
      if (!claimed[e]) unclaimed.push_back(unclaimed_error(plan, failures, e));
    }
  }
  return unclaimed;
}

}  // namespace kiln::jit
