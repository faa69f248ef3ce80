#pragma once

// Cached page-locked host memory for staging copies (Note [Pinned staging]).
// Written against DeviceMemory so tests run it on the fake backend.

#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "allocator/allocator.h"
#include "allocator/device_memory.h"

namespace kiln::alloc {

// Requests round up to a size class: 512 B, then four classes per power of two.
size_t host_size_class(size_t nbytes);

class HostCachingAllocator final : public Allocator {
 public:
  explicit HostCachingAllocator(std::unique_ptr<DeviceMemory> memory);
  ~HostCachingAllocator() override;

  DataPtr allocate(size_t nbytes) override;
  // Waits for pending events, then frees every cached block.
  void empty_cache() override;
  MemoryStats stats() const override;
  void reset_peak_stats() override;

  // Marks the block that starts at `ptr` as read or written by work queued on
  // `stream`; after it is freed, it is reused only once that work is done.
  // False when `ptr` does not start a live block of this allocator.
  bool record_stream(const void* ptr, StreamId stream);
  // True when `ptr` starts a live block of this allocator.
  bool owns(const void* ptr) const;

 private:
  struct Block {
    void* ptr;
    size_t size;
    bool allocated = false;
    int event_count = 0;
    std::vector<StreamId> stream_uses;
  };
  static void free_data(void* ctx, void* ptr);
  void free(void* ptr);
  void process_events();
  void synchronize_and_free_events();
  void release_free_blocks();
  void make_free(Block* b);

  std::unique_ptr<DeviceMemory> memory_;
  mutable std::mutex mu_;
  std::unordered_map<const void*, std::unique_ptr<Block>> blocks_;  // every block held
  std::map<size_t, std::vector<Block*>> free_;                      // by size class
  std::vector<std::pair<EventId, Block*>> pending_;
  MemoryStats stats_;
};

}  // namespace kiln::alloc
