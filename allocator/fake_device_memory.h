#pragma once

// A device made of host memory, for testing the allocators without a GPU:
// raw_alloc fails past a capacity, and events complete only when the test says
// so (complete_stream / complete_all) or when the allocator waits for one.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "allocator/device_memory.h"

namespace kiln::alloc {

class FakeDeviceMemory final : public DeviceMemory {
 public:
  explicit FakeDeviceMemory(size_t capacity, std::string name = "fake:0");
  ~FakeDeviceMemory() override;

  void* raw_alloc(size_t nbytes) override;
  void raw_free(void* ptr) override;
  void mem_info(size_t* free_bytes, size_t* total_bytes) override;
  EventId record_event(StreamId stream) override;
  bool query_event(EventId event) override;
  void synchronize_event(EventId event) override;
  void release_event(EventId event) override;
  std::string name() const override { return name_; }

  // Completes every event recorded so far on `stream` / on any stream.
  void complete_stream(StreamId stream);
  void complete_all();

  // What the allocator did, for tests.
  struct Log {
    std::vector<std::pair<uintptr_t, size_t>> allocs;  // address, size
    std::vector<uintptr_t> frees;
    int64_t events_recorded = 0;
    int64_t events_synchronized = 0;  // waited for by the allocator
    int64_t events_live = 0;          // recorded and not released
  };
  Log log() const;
  size_t used() const;
  // Changes the capacity (memory already handed out stays).
  void set_capacity(size_t capacity);

 private:
  struct Event {
    StreamId stream;
    bool done = false;
  };
  mutable std::mutex mu_;
  size_t capacity_;
  size_t used_ = 0;
  std::string name_;
  std::map<uintptr_t, size_t> live_;
  std::vector<Event*> events_;
  Log log_;
};

}  // namespace kiln::alloc
