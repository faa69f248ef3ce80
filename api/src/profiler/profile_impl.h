#pragma once

// What a stopped Profile holds, and the two views of it (the table, the trace).

#include "kiln/profiler.h"
#include "runtime/profiler/recorder.h"

namespace kiln::profiler {

struct Profile::Impl {
  Options options;
  bool recording = false;
  detail::Collected data;

  // The impl of a Profile that is not recording; throws naming `what` otherwise.
  static const Impl& stopped(const Profile& p, const char* what);
};

KeyAverages compute_key_averages(const detail::Collected& data, bool group_by_shape);
std::string format_chrome_trace(const detail::Collected& data);

// "[[2, 3], [3], []]".
std::string shapes_str(const std::vector<std::vector<int64_t>>& shapes);

// Per GPU event (index in data.events): the GPU span on its stream that
// contains it (-1: none). Spans are GpuOp and GpuGraph events.
std::vector<int64_t> gpu_parents(const detail::Collected& data);

}  // namespace kiln::profiler
