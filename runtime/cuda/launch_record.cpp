#include "runtime/cuda/launch_record.h"

#include "runtime/cuda/profiler_cuda.h"
#include "runtime/profiler/recorder.h"

namespace kiln::cuda {
namespace {
thread_local LaunchRecorder* t_recorder = nullptr;
}  // namespace

LaunchRecorder* set_launch_recorder(LaunchRecorder* recorder) {
  LaunchRecorder* previous = t_recorder;
  t_recorder = recorder;
  return previous;
}

LaunchRecorder* launch_recorder() {
  return t_recorder;
}

void note_launch(cudaStream_t stream, const void* func, dim3 grid, dim3 block, size_t shared_bytes,
                 void* const* params, const size_t* sizes, int count) {
  if (t_recorder)
    t_recorder->on_launch(stream, func, grid, block, shared_bytes, params, sizes, count);
  if (profiler::detail::gpu_recording()) profile_kernel_launch(stream, func);
}

}  // namespace kiln::cuda
