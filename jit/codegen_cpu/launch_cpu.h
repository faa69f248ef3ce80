#pragma once

#include "jit/passes/fusion.h"

namespace kiln::jit::cpu {

// Runs a fused group with a generated kernel (Note [CPU fused kernels]):
// gives its outputs memory, orders and merges its dims, compiles (or finds)
// the kernel and calls it over TBB workers. Returns false, having done
// nothing, when the group's dtypes, primitives or layouts are outside what the
// generator handles; the caller then runs the group's nodes one by one.
bool run_pointwise_cpu(const FusedGroup& group);

// Kernels compiled so far in this process (for tests and logs).
int64_t cpu_kernels_compiled();

}  // namespace kiln::jit::cpu
