#pragma once

#include <cstdint>

#include "jit/passes/fusion.h"

namespace kiln::jit::cuda {

// Runs a fused group whose tensors are on one CUDA device as one generated
// kernel on the device's current stream: NVRTC-compiled to SASS for the
// device's arch (through the memory and disk kernel caches), loaded with
// cudaLibraryLoadData, launched with the iteration's sizes and strides as
// arguments (Note [CUDA pointwise ABI]). Returns false, having done nothing,
// when the group is outside what the generator handles.
bool run_pointwise_cuda(const FusedGroup& group);

// Runs a reduction group (Note [Reduction kernels]) whose tensors are on one
// CUDA device as one generated kernel: prologue, reduction and epilogue
// (Note [CUDA reduction ABI]), through the same kernel caches. Returns false,
// having done nothing, when the group is outside what the generator handles
// (logged under KILN_LOGS=fusion); the caller then runs its nodes one by one.
bool run_reduction_cuda(const ReductionGroup& group);
// Reduction groups run fused on CUDA so far in this process (tests, logs).
int64_t cuda_reductions_run();

struct CudaKernelStats {
  int64_t compiled = 0;   // NVRTC compiles
  int64_t disk_hits = 0;  // loaded from the disk cache
  int64_t launches = 0;
  double compile_ms = 0;  // total NVRTC time
  double ready_ms = 0;    // total time making kernels ready (KernelLoaderStats::ready_ms)
};
CudaKernelStats cuda_kernel_stats();

}  // namespace kiln::jit::cuda
