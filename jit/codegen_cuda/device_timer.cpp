// Note [Device time per call] (device_timer.h).

#include "jit/codegen_cuda/device_timer.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <thread>

#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/cuda/device_guard.h"

namespace kiln::jit::cuda {
namespace {

void hold(void* us) {
  std::this_thread::sleep_for(std::chrono::microseconds(*static_cast<int64_t*>(us)));
}

}  // namespace

double device_us_per_call(Device device, int calls, const std::function<void()>& queue) {
  const int index = device.index();
  kiln::cuda::DeviceGuard guard(index);
  cudaStream_t stream = kiln::cuda::raw(kiln::cuda::Stream::current(device));
  std::array<cudaEvent_t, 2> ev{};
  for (cudaEvent_t& e : ev) KILN_CUDA_CHECK_DEVICE(cudaEventCreate(&e), index);
  // Outlives every callback: each one is waited for below.
  int64_t hold_us = 2000;
  double us = 0;
  try {
    for (int attempt = 0; attempt < 4; ++attempt) {
      KILN_CUDA_CHECK_DEVICE(cudaLaunchHostFunc(stream, &hold, &hold_us), index);
      const auto t0 = std::chrono::steady_clock::now();
      KILN_CUDA_CHECK_DEVICE(cudaEventRecord(ev[0], stream), index);
      for (int i = 0; i < calls; ++i) queue();
      KILN_CUDA_CHECK_DEVICE(cudaEventRecord(ev[1], stream), index);
      const double host_us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      KILN_CUDA_CHECK_DEVICE(cudaEventSynchronize(ev[1]), index);
      float ms = 0;
      KILN_CUDA_CHECK_DEVICE(cudaEventElapsedTime(&ms, ev[0], ev[1]), index);
      us = 1000.0 * ms / std::max(calls, 1);
      if (host_us < 0.8 * static_cast<double>(hold_us)) break;
      hold_us = static_cast<int64_t>(2 * host_us) + 1000;  // the host was slower: hold longer
    }
  } catch (...) {
    for (cudaEvent_t e : ev) (void)cudaEventDestroy(e);
    throw;
  }
  for (cudaEvent_t e : ev) (void)cudaEventDestroy(e);
  return us;
}

}  // namespace kiln::jit::cuda
