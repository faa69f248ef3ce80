#include "runtime/cuda/launch_record.h"

#include <mutex>
#include <unordered_map>

#include "kiln/cuda.h"
#include "kiln/error.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/profiler_cuda.h"
#include "runtime/profiler/recorder.h"

namespace kiln::cuda {
namespace {
thread_local LaunchRecorder* t_recorder = nullptr;

// Note [Errors of replayed kernels]: per graph, its slots and the stream of
// its last launch.
struct Watched {
  const std::vector<ErrorSlot>* slots = nullptr;
  cudaStream_t stream = nullptr;
  bool launched = false;
};

struct ErrorRegistry {
  std::mutex mu;
  std::unordered_map<const void*, Watched> graphs;
};

ErrorRegistry& registry() {
  static auto* r = new ErrorRegistry();  // leaked: graphs may go away during exit
  return *r;
}
}  // namespace

void watch_errors(const void* owner, const std::vector<ErrorSlot>* slots) {
  ErrorRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.graphs[owner].slots = slots;
}

void unwatch_errors(const void* owner) {
  ErrorRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.graphs.erase(owner);
}

void note_replay(const void* owner, cudaStream_t stream) {
  ErrorRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.graphs.find(owner);
  if (it == r.graphs.end()) return;
  it->second.stream = stream;
  it->second.launched = true;
}

namespace {

// Clears the set slots of `slots`; the first one's error joins `error` when
// that is still empty.
void take_errors(const std::vector<ErrorSlot>& slots, std::string& error) {
  for (const ErrorSlot& slot : slots) {
    if (slot.words[0] == 0) continue;
    const int64_t value = slot.words[1];
    slot.words[0] = 0;
    if (error.empty()) error = error_text(slot.what, value);
  }
}

void raise_error(const std::string& error) {
  KILN_CHECK(error.empty(), error,
             " (met by a replay of a compiled function's CUDA graph: that call's results are "
             "wrong)");
}

}  // namespace

std::string error_text(std::string what, int64_t value) {
  const size_t at = what.find("{}");
  if (at != std::string::npos) what.replace(at, 2, std::to_string(value));
  return what;
}

void check_replay_errors(cudaStream_t stream) {
  std::string error;
  {
    ErrorRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& [owner, w] : r.graphs) {
      if (w.launched && (!stream || w.stream == stream)) take_errors(*w.slots, error);
    }
  }
  raise_error(error);
}

void check_errors(const std::vector<ErrorSlot>& slots) {
  std::string error;
  take_errors(slots, error);
  raise_error(error);
}

int64_t* error_slot(int device, std::string what) {
  LaunchRecorder* r = t_recorder;
  if (!r) return nullptr;
  return r->error_slot(raw(Stream::current(Device::cuda(device))), std::move(what));
}

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
