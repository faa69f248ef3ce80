#pragma once

// The CUDA side of the profiler (Note [Profiler GPU timing] in
// runtime/profiler/recorder.h): a GpuTimer registered at load, and the hook
// every launch of a generated kernel reports to.

#include <cuda_runtime_api.h>

namespace kiln::cuda {

// A kernel kiln generated was just launched on `stream` (note_launch calls
// this while a profile records with CUDA timing).
void profile_kernel_launch(cudaStream_t stream, const void* func);

}  // namespace kiln::cuda
