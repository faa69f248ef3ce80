#pragma once

#include "jit/passes/fusion.h"

namespace kiln::jit::cpu {

// Runs a reduction group (Note [Reduction kernels]) with generated code:
// its prologue and epilogue as fused pointwise kernels over rows, the
// reduction as row passes (Note [Row passes]). Returns false, having done
// nothing, when a dtype, body or layout is outside what the generator
// handles (logged under KILN_LOGS=fusion); the caller then runs the group's
// nodes one by one.
bool run_reduction_cpu(const ReductionGroup& group);

// Reduction groups run fused so far in this process (for tests and logs).
int64_t cpu_reductions_run();
// CPU reduction groups refused so far for their layout (run node by node;
// unsupported dtypes and primitives not counted).
int64_t cpu_reductions_refused();
// Normalized rows split across workers (Note [Long rows]) so far.
int64_t cpu_long_rows_split();
// Outer softmax / log_softmax / var groups whose prologue stores members
// (Note [Storing prologues]) run so far.
int64_t cpu_outer_storing_runs();

}  // namespace kiln::jit::cpu
