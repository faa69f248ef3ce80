#include "allocator/fake_device_memory.h"

#include <algorithm>
#include <cstdlib>

#include "kiln/error.h"

namespace kiln::alloc {

FakeDeviceMemory::FakeDeviceMemory(size_t capacity, std::string name)
    : capacity_(capacity), name_(std::move(name)) {}

FakeDeviceMemory::~FakeDeviceMemory() {
  for (auto& [p, n] : live_) std::free(reinterpret_cast<void*>(p));
  for (Event* e : events_) delete e;
}

void* FakeDeviceMemory::raw_alloc(size_t nbytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (used_ + nbytes > capacity_) return nullptr;
  // 512-byte aligned like device memory; the pages are not touched, so large
  // fake segments cost address space only.
  void* p = std::aligned_alloc(512, (nbytes + 511) / 512 * 512);
  KILN_INTERNAL_ASSERT(p, "fake device: host allocation of ", nbytes, " bytes failed");
  used_ += nbytes;
  live_.emplace(reinterpret_cast<uintptr_t>(p), nbytes);
  log_.allocs.emplace_back(reinterpret_cast<uintptr_t>(p), nbytes);
  return p;
}

void FakeDeviceMemory::raw_free(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
  KILN_INTERNAL_ASSERT(it != live_.end(), "fake device: free of unknown pointer");
  used_ -= it->second;
  live_.erase(it);
  log_.frees.push_back(reinterpret_cast<uintptr_t>(ptr));
  std::free(ptr);
}

void FakeDeviceMemory::mem_info(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  *free_bytes = capacity_ > used_ ? capacity_ - used_ : 0;
  *total_bytes = capacity_;
}

EventId FakeDeviceMemory::record_event(StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* e = new Event{stream};
  events_.push_back(e);
  log_.events_recorded++;
  log_.events_live++;
  return e;
}

bool FakeDeviceMemory::query_event(EventId event) {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<Event*>(event)->done;
}

void FakeDeviceMemory::synchronize_event(EventId event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* e = static_cast<Event*>(event);
  if (!e->done) log_.events_synchronized++;
  e->done = true;
}

void FakeDeviceMemory::release_event(EventId event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* e = static_cast<Event*>(event);
  auto it = std::find(events_.begin(), events_.end(), e);
  KILN_INTERNAL_ASSERT(it != events_.end(), "fake device: release of unknown event");
  KILN_INTERNAL_ASSERT(e->done, "fake device: release of an event not completed");
  events_.erase(it);
  log_.events_live--;
  delete e;
}

void FakeDeviceMemory::complete_stream(StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Event* e : events_) {
    if (e->stream == stream) e->done = true;
  }
}

void FakeDeviceMemory::complete_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Event* e : events_) e->done = true;
}

FakeDeviceMemory::Log FakeDeviceMemory::log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

size_t FakeDeviceMemory::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

void FakeDeviceMemory::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = capacity;
}

}  // namespace kiln::alloc
