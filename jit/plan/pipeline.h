#pragma once

#include <exception>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "jit/passes/fusion.h"
#include "jit/passes/memory_plan.h"
#include "jit/record/trace_buffer.h"

namespace kiln::jit {

// Note [Failures in a trace]
// An op's errors come from two places. Its Meta kernel sees shapes, dtypes,
// devices and scalar arguments: those errors are raised at the call, as in
// eager mode. What only the data shows (an index out of range, memory running
// out) comes up when the trace runs, and one request's bad op must not harm
// the work of others recorded in the same trace:
// - The step that fails, and every step that reads what a failed step should
//   have written, do not run; every other step does, so independent results
//   keep their values. A failing step is not retried, and run_plan does not
//   throw for it. A group run member by member fails member by member (Note
//   [A failed member of a group] in pipeline.cpp).
// - Each storage a failed or skipped step writes (fresh outputs and in-place
//   targets alike) carries the error (FailedStorage). Reading it, or recording
//   an op that reads it, rethrows the original error, which names the op that
//   failed. Flushing raises nothing, so the error never surfaces from a read
//   of unrelated work, from kiln::sync() or from a full trace.
// - A failed in-place target is usable again after a write that overwrites
//   all of it (overwrites_storage: fill_, zero_, copy_, an out= argument);
//   any other write raises the error, as its result would depend on the lost
//   value. The last good value is not kept: the failed step may have written
//   part of it.
// - A dead node (nobody holds what it writes) is not run, except an op that
//   checks index values, cache positions or integer divisors (checks_values): it runs anyway,
//   so that a bad index is not silently dropped. If its error then reaches
//   no tensor anyone holds, the next materialization on the thread that
//   recorded it (item(), data_ptr() or a copy to the host of a pending
//   tensor, kiln::sync(), jit::flush()) raises it once: "[lazy] op N 'index_select' failed and
//   nothing held its result: ..."; or an op that raises at its call before
//   that carries it in its own error (Note [A failed call settles its
//   thread's dead work] in jit/record/lazy_kernel.cpp). An error reaches a held tensor also through
//   another one: a skipped step that read several failed storages carries the
//   first one's error, which stands for all of them (the holder of `a + b`,
//   both of whose inputs failed, hears of a's failure and is done); so does
//   an error that replaced one a storage carried before. Only what no held
//   tensor stands for is raised later, so one bad request does not fail the
//   thread's next one.
// - If the passes or the memory plan fail, every storage the trace writes
//   carries that error.
// In eager mode the same program raises at the bad op. A jit::compile call
// (Note [Compiled instances]) marks the storages it writes by the same rules,
// and raises the first failed step's error: its results come back together.

// A trace after the passes: the steps to run, in record order, and the memory
// they run in. Built once per flush, or once per jit::compile instance, which
// runs it again on every call (Note [Compiled instances]).
struct Plan {
  std::vector<Node> nodes;
  std::vector<size_t> live;                         // live node indices, record order
  std::unordered_set<const StorageImpl*> external;  // storages held outside the trace
  std::vector<Step> steps;
  MemoryPlan memory;  // filled by place_memory()
  std::vector<Tensor>
      kept;  // results of dead nodes run for their checks (Note [Failures in a trace])
};

// What a run could not compute (Note [Failures in a trace]).
struct RunFailures {
  std::vector<std::exception_ptr> errors;  // per failed step, in run order
  std::vector<size_t> nodes;               // per failed step: the node that failed
  // Each storage a failed or skipped step writes: the index of its error.
  std::unordered_map<StorageImpl*, size_t> storages;
  // (covered, by): whoever sees error `by` has been told of `covered` too: a
  // storage carrying `covered` came to carry `by` (a step that overwrites it
  // whole ran into an error of its own), or a step that `by` blocked also
  // read a storage carrying `covered`.
  std::vector<std::pair<size_t, size_t>> covered;
  bool empty() const { return errors.empty(); }
};

// The passes, in order: products absorb the activations after them (Note
// [Matmul epilogues]), dead nodes go, common subexpressions merge (Note
// [Common subexpressions]), the live nodes are cut into fused groups,
// reduction groups and extern calls (Note [Fusion groups]). Each is logged
// under KILN_LOGS=fusion.
Plan build_plan(std::vector<Node> nodes);
// Lays the plan's intermediates out in one arena per device and gives each
// its slice (Note [Memory plan]).
void place_memory(Plan& plan);
// Told of each step run_plan runs, before and after it (a graph capture
// learns which steps add nodes it cannot see into: Note [Opaque steps] in
// jit/compile/instance.cpp).
class StepObserver {
 public:
  virtual void before_step(const Step& step) = 0;
  virtual void after_step(const Step& step) = 0;

 protected:
  ~StepObserver() = default;
};

// Runs the steps in order, skipping those a failure reaches; marks what they
// should have written with their error. Never throws for a failed step.
RunFailures run_plan(const Plan& plan, StepObserver* observer = nullptr);
// Clears `marker` (a trace's: Note [Pending storage]) from every storage the
// nodes write that still carries it: their memory holds their value now.
void clear_markers(const std::vector<Node>& nodes, const PendingValue* marker);

// A flush of nodes that carry `marker`: build_plan, place_memory, run_plan,
// clear_markers. Returns the errors of failed steps that no tensor held
// outside the trace carries (Note [Failures in a trace]).
std::vector<std::exception_ptr> run_trace(std::vector<Node> nodes, const PendingValue* marker);

// True while a plan runs on this thread; `marker` then is the marker of the
// trace it comes from (null for a compiled instance's plan). Note [Pending
// state across threads], rule 2.
bool plan_running();
const PendingValue* running_marker();

// The steps run_trace would take for `nodes` ("fused[...] extern[...]"), for
// tests. Applies run_trace's rewriting passes to `nodes` first, as it would,
// except CSE: the plan shown is that of the trace before merging.
std::string describe_plan(std::vector<Node>& nodes);

// Process-wide counters (jit::trace_stats()).
void count_recorded();
void count_eager_fallback();

}  // namespace kiln::jit
