#pragma once

// Note [Launch records]
// While a thread captures a CUDA graph, every launch of a kernel kiln
// generated reports what it launched: the function, the launch shape and each
// parameter's bytes (launch sites call note_launch() right after
// cudaLaunchKernel). The graph layer keeps these per captured node, so it
// knows every pointer its own kernel nodes hold and can point them at new
// memory on replay (Note [Graph addresses]). Library kernels (cuBLASLt)
// report nothing. With no recorder installed a report costs one thread-local
// load, and one relaxed load more for the profiler, which times each
// reported launch while a Profile times GPU work (Note [Profiler GPU timing]).

#include <cuda_runtime_api.h>

#include <cstddef>

namespace kiln::cuda {

class LaunchRecorder {
 public:
  virtual ~LaunchRecorder() = default;
  virtual void on_launch(cudaStream_t stream, const void* func, dim3 grid, dim3 block,
                         size_t shared_bytes, void* const* params, const size_t* sizes,
                         int count) = 0;
};

// Installs `recorder` for this thread's launches (null: none); returns the previous one.
LaunchRecorder* set_launch_recorder(LaunchRecorder* recorder);

// Reports a launch that just succeeded on `stream`: params[i] points at the
// i-th parameter's value, sizes[i] bytes long.
void note_launch(cudaStream_t stream, const void* func, dim3 grid, dim3 block, size_t shared_bytes,
                 void* const* params, const size_t* sizes, int count);

}  // namespace kiln::cuda
