#pragma once

// What the caching allocators need from a device: raw memory and events. The
// CUDA backends live in runtime/cuda/; allocator/fake_device_memory.h is the
// host-memory fake the tests drive by hand. Nothing here needs the toolkit.

#include <compare>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kiln::alloc {

// A stream as the allocators see it: its identity (a cudaStream_t's value) and
// the device it runs on. Blocks are cached per stream; work on one stream is ordered.
struct StreamId {
  uintptr_t handle = 0;
  int device = 0;
  constexpr auto operator<=>(const StreamId&) const = default;
};

// An event recorded by the backend; opaque to the allocators.
using EventId = void*;

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // Fresh memory of exactly `nbytes`, or nullptr when the device has no room
  // for it. Other failures throw kiln::Error.
  virtual void* raw_alloc(size_t nbytes) = 0;
  // Gives memory from raw_alloc back. Callers made sure no queued work uses it.
  virtual void raw_free(void* ptr) = 0;
  // The device's free and total bytes (the OOM message and the memory-fraction cap).
  virtual void mem_info(size_t* free_bytes, size_t* total_bytes) = 0;

  // An event marking the work queued on `stream` so far.
  virtual EventId record_event(StreamId stream) = 0;
  // True once the work before `event` is done.
  virtual bool query_event(EventId event) = 0;
  // Blocks until the work before `event` is done.
  virtual void synchronize_event(EventId event) = 0;
  // Hands a finished event back; the allocator never uses it again.
  virtual void release_event(EventId event) = 0;

  // Where the memory lives, for messages: "cuda:0", "pinned host".
  virtual std::string name() const = 0;
};

// Releases the completed events among `pending` (every event, after waiting
// for it, when `wait`), and calls ready(block) once a block's last event is
// done. Blocks count their outstanding events in `event_count`.
template <class Block, class Ready>
void drain_events(DeviceMemory& memory, std::vector<std::pair<EventId, Block*>>& pending, bool wait,
                  Ready ready) {
  size_t kept = 0;
  for (size_t i = 0; i < pending.size(); ++i) {
    auto [event, block] = pending[i];
    if (wait) {
      memory.synchronize_event(event);
    } else if (!memory.query_event(event)) {
      pending[kept++] = pending[i];
      continue;
    }
    memory.release_event(event);
    if (--block->event_count == 0) ready(block);
  }
  pending.resize(kept);
}

}  // namespace kiln::alloc
