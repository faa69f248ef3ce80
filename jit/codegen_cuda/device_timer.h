#pragma once

// Device time of a piece of work, for benchmarks (perf/kiln-layer-ops) and
// tests: no CUDA type in the interface, so that callers build without the
// toolkit (no_cuda.cpp throws).

#include <functional>

#include "kiln/tensor.h"

namespace kiln::jit::cuda {

// Note [Device time per call]
// `queue` is called `calls` times back to back on the current stream of
// `device` between two events, while a host callback holds the stream: the
// calls are all queued before the device starts on them, so the elapsed
// time is the device's work with its launch gaps (what a CUDA graph replay
// of the same kernels costs), not the host's launch rate. The hold lasts
// longer than queuing took (measured on a first attempt, which is retried
// with a longer hold when the host was slower). `queue` must not
// synchronize. Returns microseconds per call.
double device_us_per_call(Device device, int calls, const std::function<void()>& queue);

}  // namespace kiln::jit::cuda
