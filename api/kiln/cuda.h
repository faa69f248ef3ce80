#pragma once

// CUDA devices, streams, events and memory. No CUDA header is needed to use
// this one: streams and events are opaque handles (a cudaStream_t or
// cudaEvent_t cast to void*). In a build without the toolkit every call that
// needs a device throws "kiln was built without CUDA".

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/api.h"
#include "kiln/device.h"
#include "kiln/tensor.h"

namespace kiln::cuda {

// False without a toolkit at build time, a driver, or a device at run time;
// kiln then runs on the CPU alone.
KILN_API bool is_available();
// True when this build has the CUDA backend (the toolkit was there at build time).
KILN_API bool built();
KILN_API int device_count();
// "NVIDIA H100 80GB HBM3 (sm_90)"; throws when the device does not exist.
KILN_API std::string device_name(int index = 0);
// (major, minor) compute capability, e.g. 9 and 0 for sm_90.
KILN_API void device_capability(int index, int* major, int* minor);
// Total bytes of device memory.
KILN_API int64_t device_total_memory(int index = 0);
// The device memory's theoretical bandwidth in GB/s (two transfers per
// memory clock over the bus width); 0 where the driver does not say.
KILN_API double device_memory_peak_gbps(int index = 0);
// Bytes of the device's L2 cache (what a benchmark must exceed to time
// device memory rather than the cache).
KILN_API int64_t device_l2_bytes(int index = 0);
// Streaming multiprocessors (SMs) of the device.
KILN_API int device_multiprocessors(int index = 0);
// Waits for all work queued on `device`, on every stream.
KILN_API void synchronize(Device device = Device::cuda());
// float32 matrix products may use TF32 tensor cores (10-bit mantissa inputs,
// float32 accumulate): faster, less exact. Process-wide; off by default. Also
// settable in a build without CUDA, where it changes nothing.
KILN_API void set_allow_tf32(bool allow);
KILN_API bool allow_tf32();

class Event;

// An ordered queue of work on one device. A value type: copies name the same
// stream. Kiln's own streams are never destroyed (Note [Default stream]).
class KILN_API Stream {
 public:
  // The stream kiln queues work on for `device`, on this thread.
  static Stream current(Device device = Device::cuda());
  // Kiln's default stream for `device`: non-blocking, shared by all threads.
  static Stream default_stream(Device device = Device::cuda());
  // CUDA's legacy default stream (0), which synchronizes with blocking streams.
  static Stream legacy(Device device = Device::cuda());
  // A stream from kiln's per-device pool (32, handed out round-robin, never destroyed).
  static Stream from_pool(Device device = Device::cuda());
  // Adopts a stream the caller created (a cudaStream_t) on `device`. The caller
  // keeps it alive while kiln may queue work on it.
  static Stream from_external(void* cuda_stream, Device device);

  // The cudaStream_t.
  void* handle() const { return handle_; }
  Device device() const { return device_; }
  // True when all queued work is done.
  bool query() const;
  // Blocks until all queued work is done.
  void synchronize() const;
  // Later work on this stream waits for `event` (recorded on any stream).
  void wait(const Event& event) const;

  bool operator==(const Stream& o) const { return handle_ == o.handle_ && device_ == o.device_; }
  bool operator!=(const Stream& o) const { return !(*this == o); }

 private:
  Stream(void* handle, Device device) : handle_(handle), device_(device) {}
  void* handle_ = nullptr;
  Device device_ = Device::cuda();
};

// Makes `stream` the current stream of its device on this thread; the
// previous one comes back when the guard dies.
class KILN_API StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
  bool had_previous_;
};

// A marker in a stream's work. Created on the device of the first stream it is
// recorded on; move-only.
class KILN_API Event {
 public:
  // `enable_timing`: elapsed_ms works (costs a little on record).
  explicit Event(bool enable_timing = false);
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the work queued on `stream` so far.
  void record(const Stream& stream);
  void record() { record(Stream::current()); }
  // Later work on `stream` waits for this event.
  void wait(const Stream& stream) const;
  // True when the marked work is done (or the event was never recorded).
  bool query() const;
  // Blocks until the marked work is done.
  void synchronize() const;
  // Milliseconds from this event to `end`; both recorded, with timing, and done.
  float elapsed_ms(const Event& end) const;

  bool recorded() const { return event_ != nullptr; }
  void* handle() const { return event_; }  // the cudaEvent_t (null before record)
  Device device() const { return device_; }

 private:
  void* event_ = nullptr;
  Device device_ = Device::cuda();
  bool timing_ = false;
};

// Memory of the caching allocator (Note [Caching allocator policy]). Each
// statistic is kept for all blocks and per pool: [0] all, [1] small (blocks
// ≤ 1 MiB), [2] large.
struct MemoryStat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;  // total ever added
  int64_t freed = 0;      // total ever removed
};
struct MemoryStats {
  MemoryStat allocated_bytes[3];  // in blocks handed to tensors
  MemoryStat reserved_bytes[3];   // held from the device (allocated + cached)
  MemoryStat active_bytes[3];     // allocated, or freed but still used by other streams
  MemoryStat allocations[3];      // blocks handed to tensors
  MemoryStat segments[3];         // device allocations held
  MemoryStat active_blocks[3];
  int64_t num_alloc_retries = 0;  // allocations that freed the cache and retried
  int64_t num_ooms = 0;           // allocations that failed
  // Free blocks in segments that are split (cached but usable only by
  // requests that fit): fragmentation.
  MemoryStat inactive_split_bytes[3];
  MemoryStat inactive_split[3];  // their count
  // Per pool: the shared small and large pools, then each CUDA graph's private pool.
  struct Pool {
    uint64_t pool = 0;  // 0: a shared pool; else the private pool's id
    bool is_small = false;
    std::string name;  // "small pool", "large pool", "graph pool 3"
    MemoryStat allocated_bytes, reserved_bytes, active_bytes, inactive_split_bytes;
    MemoryStat allocations, segments;
    int64_t alloc_retries = 0;
    int64_t ooms = 0;
  };
  std::vector<Pool> pools;
};
using PoolMemoryStats = MemoryStats::Pool;
KILN_API MemoryStats memory_stats(Device device = Device::cuda());
// A readable table of memory_stats and the device's free and total memory.
KILN_API std::string memory_summary(Device device = Device::cuda());
// memory_snapshot(): every segment the allocator holds, block by block.
struct MemoryBlock {
  enum class State { ActiveAllocated, ActivePendingFree, Inactive };
  uint64_t address = 0;
  int64_t size = 0;
  int64_t requested_size = 0;  // what was asked for (size is rounded up)
  // Allocated; freed but awaiting other streams' work; or free (cached).
  State state = State::Inactive;
};
struct MemorySegment {
  int device = 0;
  uint64_t address = 0;
  int64_t total_size = 0;
  int64_t allocated_size = 0;  // in ActiveAllocated blocks
  int64_t active_size = 0;     // in blocks not Inactive
  int64_t requested_size = 0;
  uint64_t stream = 0;  // the cudaStream_t it was allocated for
  bool is_small = false;
  uint64_t pool = 0;                // 0: the shared pools; else a CUDA graph's private pool
  std::vector<MemoryBlock> blocks;  // in address order, tiling the segment
};
struct KILN_API MemorySnapshot {
  std::vector<MemorySegment> segments;
  // PyTorch's torch.cuda.memory._snapshot() layout (Note [Memory snapshot
  // JSON] in allocator/memory_snapshot.cpp).
  std::string to_json() const;
};
// Every device's segments (an empty snapshot without CUDA).
KILN_API MemorySnapshot memory_snapshot();

// Gives cached, unused device memory back to the driver on every device (and
// cached pinned host memory). Does nothing without CUDA.
KILN_API void empty_cache();
// Caps the memory kiln reserves on `device` at `fraction` of its total; an
// allocation past it fails as if the device were full.
KILN_API void set_memory_fraction(double fraction, Device device = Device::cuda());
KILN_API void reset_peak_memory_stats(Device device = Device::cuda());

// Tells the allocator that `tensor`'s memory is used by work on `stream` (not
// the stream it was allocated on): when the tensor dies, its memory is reused
// only after that work is done. Does nothing for memory kiln did not allocate.
KILN_API void record_stream(const Tensor& tensor, const Stream& stream);
// A copy of the CPU tensor `tensor` in page-locked memory: copies from it to a
// device (and back into it) run asynchronously with `non_blocking`.
KILN_API Tensor pin_memory(const Tensor& tensor);
// True when `tensor` is a CPU tensor in page-locked memory.
KILN_API bool is_pinned(const Tensor& tensor);

}  // namespace kiln::cuda
