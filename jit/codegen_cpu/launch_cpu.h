#pragma once

#include <vector>

#include "jit/codegen_cpu/pointwise_cpu.h"
#include "jit/passes/fusion.h"

namespace kiln::jit::cpu {

// Runs a fused group with a generated kernel (Note [CPU fused kernels]):
// gives its outputs memory, orders and merges its dims, compiles (or finds)
// the kernel and calls it over TBB workers. Returns false, having done
// nothing, when the group's dtypes, primitives or layouts are outside what the
// generator handles; the caller then runs the group's nodes one by one.
bool run_pointwise_cpu(const FusedGroup& group);

// Whether run_pointwise_cpu would run `group` fused (compiling its kernel now).
bool pointwise_cpu_ready(const FusedGroup& group);

// The kernel for this body and operand layout, compiled once per process;
// null when the generator refuses it (logged once, remembered).
const CpuPointwiseKernel* cpu_pointwise_kernel(const PointwiseKernel& kernel,
                                               const std::vector<RunLayout>& layouts);

// Kernels compiled so far in this process (for tests and logs).
int64_t cpu_kernels_compiled();
// Groups run_pointwise_cpu has run fused so far in this process (for tests).
int64_t cpu_pointwise_groups_run();
// CPU groups refused so far for their operands' layout (an overlap, a step
// too long) or by the code generator (its nodes then run one by one; the
// reason is logged under KILN_LOGS=fusion). Dtypes and primitives the
// generator lacks by design (float64, integers) are not counted.
int64_t cpu_pointwise_groups_refused();

}  // namespace kiln::jit::cpu
