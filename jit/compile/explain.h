#pragma once

// The parts of jit::compile's explain() that read a plan or a break reason
// (CompiledCore::explain gathers them, compiled_function.cpp).

#include <string>
#include <vector>

#include "jit/compile/instance.h"
#include "kiln/jit.h"

namespace kiln::jit {

// What `inst`'s plan launches: generated kernels with the ops fused into each,
// extern calls, its arena. `sizes` names the specialization.
ExplainPlan explain_plan(const Instance& inst, const std::vector<int64_t>& sizes,
                         const std::string& specialized_for);

// A graph break of entry `entry`, its op and position read from the reason the
// trace gave ("the value of op 3 'sum' was needed on the host (...), after 4
// recorded ops" or "op 5 'nonzero' ...").
GraphBreak describe_break(int entry, const std::string& reason);

}  // namespace kiln::jit
