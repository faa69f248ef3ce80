#pragma once

// The profiler: what ran, on which thread or stream, for how long.
//
//   kiln::profiler::Profile prof({.record_shapes = true});
//   {
//     kiln::profiler::Range r("tokenize");
//     ...
//   }
//   logits = step(ids);
//   prof.stop();
//   std::cout << prof.key_averages().table(kiln::profiler::SortBy::SelfCpu, 20);
//   prof.export_chrome_trace("trace.json");   // Perfetto, chrome://tracing
//
// While a Profile records (one per process at a time), every thread's work is
// recorded:
// - each op at dispatch (its name, CPU time and, with record_shapes, its
//   input shapes): ops the user calls, ops a composite calls, and the eager
//   kernels a lazy flush runs for extern steps;
// - each compiled call (jit::compile) and its phases: guard check, trace and
//   compile on a miss, argument binding, the launch of its plan or graph;
// - each kiln::sync() (where a lazy trace runs) and each fused CPU kernel
//   (wall time on the calling thread; TBB workers' shares are inside it);
// - on CUDA, each kernel kiln generated, each CUDA op's span on its stream,
//   and each graph replay, timed with CUDA events (Note [Profiler GPU timing]
//   in runtime/profiler/recorder.h);
// - user ranges (Range).
// A lazy flush outside kiln::sync() (item(), data_ptr()) shows as the ops and
// fused kernels it runs, inside whatever event was open.
// Not recording costs one predicted branch per op (Note [Dispatch observers]
// in runtime/dispatch/dispatcher.cpp).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/api.h"

namespace kiln::profiler {

enum class EventKind : uint8_t {
  Op,         // an op at dispatch (CPU)
  Range,      // a user range, or one of kiln's (a lazy flush)
  Compiled,   // a compiled call, or one of its phases (CPU)
  CpuKernel,  // a fused kernel run on the CPU
  GpuKernel,  // a kernel kiln generated, on its stream
  GpuOp,      // a CUDA op's work on its stream (library calls such as cuBLASLt included)
  GpuGraph,   // a CUDA graph replay on its stream (its kernels are not timed one by one)
};
KILN_API const char* event_kind_name(EventKind k);

struct Event {
  EventKind kind = EventKind::Op;
  std::string name;
  // Nanoseconds since the profile started, on the host's steady clock (GPU
  // events are mapped onto it).
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  // CPU events: the recording thread (0, 1, ... in order of first event);
  // its enclosing event's index in events() (-1: none) and nesting depth.
  int thread = -1;
  int64_t parent = -1;
  int depth = 0;
  // GPU events: the device and stream (a cudaStream_t's value).
  int device = -1;
  uint64_t stream = 0;
  // Links a launch on the host to the GPU event it made (0: none). A CPU
  // event and a GPU event with the same id are the two ends of a flow arrow.
  uint64_t correlation = 0;
  // Op events with record_shapes: the sizes of each argument ([] for a non-tensor).
  std::vector<std::vector<int64_t>> shapes;

  int64_t duration_ns() const { return end_ns - start_ns; }
  bool on_gpu() const {
    return kind == EventKind::GpuKernel || kind == EventKind::GpuOp || kind == EventKind::GpuGraph;
  }
};

// A launch point on the host: a flow arrow from `thread` at `time_ns` to the
// GPU event with `correlation`.
struct Launch {
  int thread = 0;
  int64_t time_ns = 0;
  uint64_t correlation = 0;
  int64_t enclosing = -1;  // the CPU event open around it (index in events(); -1: none)
};

enum class SortBy { SelfCpu, CpuTotal, SelfDevice, DeviceTotal, Calls };

// One row of key_averages(): every event of one name (and, grouped by
// shape, one list of input shapes).
struct KeyAverage {
  std::string name;
  EventKind kind = EventKind::Op;
  std::string shapes;  // "[[2, 3], [3]]" when grouped by shape, else ""
  int64_t calls = 0;
  int64_t self_cpu_ns = 0;      // CPU time less that of the events nested in it
  int64_t cpu_total_ns = 0;     // CPU time (nested events' included)
  int64_t self_device_ns = 0;   // GPU time of this event itself (kernels, library calls, graphs)
  int64_t device_total_ns = 0;  // GPU time of what it launched, nested launches included
};

class KILN_API KeyAverages {
 public:
  std::vector<KeyAverage> rows;

  // A table in the layout of PyTorch's key_averages().table(): one row per
  // key, sorted by `by` (largest first), at most `row_limit` rows (0: all),
  // and the totals of self CPU and self device time below it.
  std::string table(SortBy by = SortBy::SelfCpu, int row_limit = 0) const;
  // The row named `name` (nullptr when absent; the first when grouped by shape).
  // A row of this table; not on a temporary table (the row would dangle).
  const KeyAverage* find(std::string_view name) const&;
  const KeyAverage* find(std::string_view name) const&& = delete;
};

struct Options {
  bool record_shapes = false;  // input shapes of each op (costs a little more per op)
  bool cuda = true;            // time GPU work with CUDA events where a device is used
};

// A recording, from construction (or start()) to stop() (or destruction).
// Only one records at a time in a process; starting another throws.
class KILN_API Profile {
 public:
  explicit Profile(Options options = {}, bool start_now = true);
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  void start();
  // Stops recording; waits for the GPU work it timed. Idempotent.
  void stop();
  bool recording() const;

  // After stop(): every event, CPU events in order of start per thread, then GPU events.
  const std::vector<Event>& events() const;
  const std::vector<Launch>& launches() const;
  // Per name (and input shapes, with group_by_shape).
  KeyAverages key_averages(bool group_by_shape = false) const;
  // Chrome's trace event format (JSON): a track per CPU thread and per GPU
  // stream, flow arrows from each launch to its GPU work. Opens in
  // ui.perfetto.dev and chrome://tracing.
  std::string chrome_trace() const;
  void export_chrome_trace(const std::string& path) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A named span of the calling thread's work, recorded while a Profile records.
class KILN_API Range {
 public:
  explicit Range(std::string_view name);
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  void* buffer_ = nullptr;  // the thread's buffer (runtime/profiler/recorder.h)
  uint64_t session_ = 0;
  int32_t index_ = -1;
};

}  // namespace kiln::profiler
