#pragma once

// The profiler's recording side (kiln/profiler.h is the user's side): the
// hooks that runtime/, jit/ and the CUDA backend call, and where they write.
//
// Note [Profiler recording]
// Each thread appends to a buffer of its own (ThreadBuffer), registered with
// the recording session the first time the thread records in it; a buffer
// lives as long as its thread or the session that collects it, whichever is
// longer, so an event still open when recording stops (another thread in the
// middle of an op) ends harmlessly. Events are appended at their start, so a
// thread's events are in start order, and each names the event open around
// it (parent) when it started: that is the nesting the table's self times
// and the trace's slices use. Names are computed only while recording.
// Hooks test one relaxed atomic flag first; the dispatcher tests its observer
// word, which a recording session sets (Note [Dispatch observers] in
// runtime/dispatch/dispatcher.cpp).
//
// Note [Profiler GPU timing]
// CUDA work is timed with CUDA events, without CUPTI (no extra library, no
// driver permissions, no callbacks on the launch path):
// - an op dispatched to a CUDA kernel records an event on its stream before
//   and after its kernel: its span [before, after] is exact, library work
//   (cuBLASLt) included;
// - a kernel kiln generated records an event after its launch
//   (runtime/cuda/launch_record.h reports every such launch); it started
//   after the previous event on its stream and after it was launched, so its
//   span runs from the later of the two to its own event. Where the GPU was
//   busy that is exact; where it was idle and the kernel finished before its
//   launch call returned on the host, the start falls back to the previous
//   event (an upper bound on its time);
// - a CUDA graph replays as one span (events around cudaGraphLaunch): its
//   kernels run inside the graph, where no event can be put between them, so
//   they are attributed per graph, not per node;
// - nothing is recorded on a stream that is being captured (the capture
//   runs nothing).
// At stop every device is synchronized and one more event is recorded and
// waited for; the host clock read then anchors that device's events
// (cudaEventElapsedTime to the anchor), with an error of the order of the
// event's completion latency (microseconds). Elapsed times are float
// milliseconds: sub-microsecond for profiles up to ~10 s.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/profiler.h"

namespace kiln::profiler::detail {

// True while a Profile records.
extern std::atomic<bool> g_recording;
inline bool recording() {
  return g_recording.load(std::memory_order_relaxed);
}
// True while a Profile records with Options::cuda.
extern std::atomic<bool> g_gpu_recording;
inline bool gpu_recording() {
  return g_gpu_recording.load(std::memory_order_relaxed);
}
// The host clock events are stamped with (steady_clock, ns).
int64_t now_ns();
// Whether the current recording wants input shapes.
bool record_shapes();
// "[2, 8, 32]", for event names.
template <class Dims>
std::string dims_str(const Dims& dims) {
  std::string s = "[";
  for (auto d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + "]";
}

struct RawEvent {
  EventKind kind = EventKind::Op;
  std::string name;
  int64_t start_ns = 0;
  int64_t end_ns = -1;  // -1: still open
  int32_t parent = -1;  // index in the same buffer
  int32_t depth = 0;
  std::vector<std::vector<int64_t>> shapes;
};

struct RawLaunch {
  int64_t time_ns = 0;
  uint64_t correlation = 0;
  int32_t enclosing = -1;  // the event open on the thread at the launch
};

struct ThreadBuffer {
  std::mutex mu;  // the owning thread appends; the session collects
  uint64_t session = 0;
  int index = -1;      // the thread's number in that session
  int64_t os_tid = 0;  // the kernel's id for it (gettid), for trace track names
  std::vector<RawEvent> events;
  std::vector<int32_t> open;
  std::vector<RawLaunch> launches;
};

// An open event: where it was written.
struct Handle {
  ThreadBuffer* buffer = nullptr;
  uint64_t session = 0;
  int32_t index = -1;
};

// Opens an event on the calling thread (an empty handle when not recording).
Handle begin(EventKind kind, std::string name, std::vector<std::vector<int64_t>> shapes = {});
void end(const Handle& h);
// A launch point on the calling thread: the host end of a flow arrow. Returns
// its correlation id (0 when not recording).
uint64_t launch_point();

// Opens an event for its scope while recording; `make_name` runs only then.
class Scope {
 public:
  Scope() = default;
  Scope(EventKind kind, const char* name) {
    if (recording()) h_ = begin(kind, name);
  }
  template <class F, class = std::enable_if_t<std::is_invocable_r_v<std::string, F&>>>
  Scope(EventKind kind, F&& make_name) {
    if (recording()) h_ = begin(kind, make_name());
  }
  ~Scope() { stop(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  void stop() {
    if (h_.buffer) end(h_);
    h_.buffer = nullptr;
  }

 private:
  Handle h_;
};

// The GPU side, filled by the CUDA backend when it is built (runtime/cuda/profiler_cuda.cpp).
class GpuTimer {
 public:
  virtual ~GpuTimer() = default;
  virtual void start() = 0;
  // Marks `device`'s current stream (-1: the current device's) before some work; a token for
  // end_span
  // (-1: not timed, e.g. the stream is being captured).
  virtual int64_t begin_span(int device) = 0;
  // Marks the stream after the work; the span becomes a GPU event.
  virtual void end_span(int64_t token, EventKind kind, std::string name, uint64_t correlation) = 0;
  // Every timed item, on the host clock (absolute ns); waits for the devices.
  virtual std::vector<Event> stop() = 0;
};
void set_gpu_timer(GpuTimer* timer);
GpuTimer* gpu_timer();

// Times `device`'s work from construction to destruction as one GPU event
// (an op's span, a graph replay) while recording with CUDA.
class GpuSpan {
 public:
  GpuSpan(int device, EventKind kind, std::string name);
  // The name is made only while GPU work is timed.
  template <class F, class = std::enable_if_t<std::is_invocable_r_v<std::string, F&>>>
  GpuSpan(int device, EventKind kind, F&& make_name) {
    if (gpu_recording()) begin(device, kind, make_name());
  }
  ~GpuSpan();
  GpuSpan(const GpuSpan&) = delete;
  GpuSpan& operator=(const GpuSpan&) = delete;

 private:
  void begin(int device, EventKind kind, std::string name);

  int64_t token_ = -1;
  EventKind kind_ = EventKind::GpuOp;
  std::string name_;
  uint64_t correlation_ = 0;
};

// What a session recorded, in the order kiln/profiler.h's events() gives it.
struct Collected {
  int64_t start_ns = 0;
  std::vector<int64_t> thread_os_ids;  // per thread number
  std::vector<Event> events;
  std::vector<Launch> launches;
};

// Starts a session (throws when one is recording).
void start_session(const Options& options);
// Stops the session and hands back what it recorded.
Collected stop_session();

}  // namespace kiln::profiler::detail
