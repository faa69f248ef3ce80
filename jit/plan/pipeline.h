#pragma once

#include <string>
#include <vector>

#include "jit/record/trace_buffer.h"

namespace kiln::jit {

// Runs a trace: folds activations into matrix products (Note [Matmul
// epilogues]), drops dead nodes, merges common subexpressions (Note [Common
// subexpressions]), fuses, lays intermediates out in one arena per device
// (Note [Memory plan]), then executes the steps in record order, and clears
// the pending markers of every storage the trace wrote. Logs each step under
// KILN_LOGS=fusion.
void run_trace(std::vector<Node> nodes);

// The steps run_trace would take for `nodes` ("fused[...] extern[...]"), for
// tests. Applies run_trace's rewriting passes to `nodes` first, as it would,
// except CSE: the plan shown is that of the trace before merging.
std::string describe_plan(std::vector<Node>& nodes);

// Process-wide counters (jit::trace_stats()).
void count_recorded();
void count_eager_fallback();

}  // namespace kiln::jit
