#pragma once

#include <string>
#include <unordered_set>
#include <vector>

#include "jit/passes/fusion.h"
#include "jit/passes/memory_plan.h"
#include "jit/record/trace_buffer.h"

namespace kiln::jit {

// A trace after the passes: the steps to run, in record order, and the memory
// they run in. Built once per flush, or once per jit::compile instance, which
// runs it again on every call (Note [Compiled instances]).
struct Plan {
  std::vector<Node> nodes;
  std::vector<size_t> live;                         // live node indices, record order
  std::unordered_set<const StorageImpl*> external;  // storages held outside the trace
  std::vector<Step> steps;
  MemoryPlan memory;  // filled by place_memory()
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
// Clears the pending markers of every storage the nodes write: from here on
// their memory is what the steps write.
void clear_markers(const std::vector<Node>& nodes);
// Runs the steps in order. On failure what did not run is marked with the
// error (reading it raises the error) and the error propagates.
void run_plan(const Plan& plan);

// A flush: build_plan, clear_markers, place_memory, run_plan.
void run_trace(std::vector<Node> nodes);

// The steps run_trace would take for `nodes` ("fused[...] extern[...]"), for
// tests. Applies run_trace's rewriting passes to `nodes` first, as it would,
// except CSE: the plan shown is that of the trace before merging.
std::string describe_plan(std::vector<Node>& nodes);

// Process-wide counters (jit::trace_stats()).
void count_recorded();
void count_eager_fallback();

}  // namespace kiln::jit
