#pragma once

// The device caching allocator's policy (Note [Caching allocator policy]),
// written against DeviceMemory so the same code runs on CUDA and, in tests, on
// a fake device made of host memory. One instance per device.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "allocator/allocator.h"
#include "allocator/device_memory.h"

namespace kiln::alloc {

// Statistics are kept for all blocks and per pool kind, in this order.
enum class PoolKind : int { Aggregate = 0, Small = 1, Large = 2 };
constexpr int kNumPoolKinds = 3;
const char* pool_kind_name(PoolKind k);

// A graph's private pool: blocks allocated while the pool is active stay in
// it until the pool is released (Note [Private pools]).
using PoolId = uint64_t;

// One pool's statistics: a shared pool (small or large) or a private pool.
struct PoolStats {
  PoolId pool = 0;  // 0: a shared pool
  bool is_small = false;
  Stat allocated_bytes, reserved_bytes, active_bytes, inactive_split_bytes;
  Stat allocations, segments;
  int64_t alloc_retries = 0;
  int64_t ooms = 0;
  std::string name() const;  // "small pool", "large pool", "graph pool 7"
};

struct CachingStats {
  Stat allocated_bytes[kNumPoolKinds];  // in blocks handed out and not freed
  Stat reserved_bytes[kNumPoolKinds];   // in segments held from the device
  Stat active_bytes[kNumPoolKinds];     // handed out, or freed but awaiting other streams
  Stat allocations[kNumPoolKinds];      // blocks handed out and not freed
  Stat segments[kNumPoolKinds];         // segments held from the device
  Stat active_blocks[kNumPoolKinds];    // blocks counted in active_bytes
  int64_t num_alloc_retries = 0;        // allocations that freed the cache and tried again
  int64_t num_ooms = 0;                 // allocations that failed after the retry
  int64_t num_device_allocs = 0;        // raw allocations from the device
  int64_t num_device_frees = 0;         // raw frees back to the device
  // Free blocks of split segments (Note [Inactive split blocks]).
  Stat inactive_split_bytes[kNumPoolKinds];
  Stat inactive_split[kNumPoolKinds];
  // Per pool: small, large, then the private pools by id (filled by stats()).
  std::vector<PoolStats> pools;
};

// Policy constants (PyTorch's values; see Note [Caching allocator policy]).
constexpr size_t kMinBlockSize = 512;                // every size rounds up to this
constexpr size_t kSmallSize = size_t{1} << 20;       // ≤ this: small pool
constexpr size_t kSmallBuffer = size_t{2} << 20;     // small pool segment
constexpr size_t kLargeBuffer = size_t{20} << 20;    // large pool segment for < kMinLargeAlloc
constexpr size_t kMinLargeAlloc = size_t{10} << 20;  // ≥ this: a segment of its own
constexpr size_t kRoundLarge = size_t{2} << 20;      // ... rounded up to this

// The size a request becomes (a multiple of kMinBlockSize), and the segment
// size asked of the device when no cached block fits.
size_t round_request(size_t nbytes);
size_t segment_size(size_t rounded);

// One segment as the allocator holds it (tests and memory_summary read these).
struct SegmentInfo {
  uintptr_t address = 0;
  size_t size = 0;
  StreamId stream;
  bool is_small = false;
  PoolId pool = 0;  // 0: the shared pools
  struct BlockInfo {
    uintptr_t address;
    size_t size;
    size_t requested;  // 0 unless allocated
    bool allocated;
    bool awaiting_events;  // freed, but other streams' work may still use it, or held
                           // back until a capture ends (Note [Private pools])
  };
  std::vector<BlockInfo> blocks;  // in address order
};

class DeviceCachingAllocator {
 public:
  explicit DeviceCachingAllocator(std::unique_ptr<DeviceMemory> memory);
  ~DeviceCachingAllocator();
  DeviceCachingAllocator(const DeviceCachingAllocator&) = delete;
  DeviceCachingAllocator& operator=(const DeviceCachingAllocator&) = delete;

  // At least `nbytes` for work ordered on `stream` (nullptr for 0 bytes). Throws
  // kiln::Error when the device is out of memory even after freeing the cache.
  void* allocate(size_t nbytes, StreamId stream);
  // The same, as a DataPtr whose deleter calls free().
  DataPtr allocate_data(size_t nbytes, StreamId stream);
  // Takes back a pointer from allocate(). Never throws.
  void free(void* ptr) noexcept;
  // Marks the block at `ptr` (a pointer allocate() returned) as used by work on
  // `stream`: after free() it is reused only once that work is done. False when
  // `ptr` is not a live block of this allocator.
  bool record_stream(void* ptr, StreamId stream);

  // Waits for pending events, then gives every cached whole segment back to
  // the device (segments of live private pools stay).
  void empty_cache();
  // Caps reserved memory at `fraction` of the device's total (1: no cap).
  void set_memory_fraction(double fraction);

  // Allocations on `stream` go to private pool `pool` until end_allocate_to_pool;
  // the pool gains a user that release_pool drops.
  void begin_allocate_to_pool(PoolId pool, StreamId stream);
  void end_allocate_to_pool(PoolId pool);
  // Drops a user; at zero the pool's cached segments go back to the device, and
  // its blocks still allocated go back when freed.
  void release_pool(PoolId pool);

  CachingStats stats() const;
  void reset_peak_stats();
  std::vector<SegmentInfo> snapshot() const;
  // The readable table memory_summary() prints (Note [Memory summary]).
  std::string memory_summary() const;
  // The size of the live block at `ptr` (0 if none).
  size_t block_size(const void* ptr) const;
  DeviceMemory& memory() { return *memory_; }

 private:
  struct Block;
  struct BlockPool;
  struct PrivatePool;
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };

  BlockPool& pool_for(size_t size, StreamId stream);
  Block* find_free_block(BlockPool& pool, StreamId stream, size_t size);
  Block* new_segment(BlockPool& pool, StreamId stream, size_t size);
  bool should_split(const Block* block, size_t size) const;
  void free_block(Block* block);
  bool try_merge(Block* dst, Block* src);
  void process_events();
  void synchronize_and_free_events();
  void release_cached_blocks();
  void release_pool_blocks(BlockPool& pool);
  void release_segment(Block* block);
  void maybe_drop_private_pool(PrivatePool* pp);
  [[noreturn]] void throw_oom(size_t nbytes, size_t alloc_size);
  PoolStats& pool_stats(const BlockPool& pool);
  void update(Stat (&stat)[kNumPoolKinds], Stat PoolStats::*per_pool, const BlockPool& pool,
              int64_t delta);
  // A free block enters or leaves its pool's set (counts inactive split blocks).
  void insert_free(Block* block);
  void erase_free(Block* block);

  std::unique_ptr<DeviceMemory> memory_;
  mutable std::mutex mu_;
  std::unique_ptr<BlockPool> small_;
  std::unique_ptr<BlockPool> large_;
  std::unordered_map<PoolId, std::unique_ptr<PrivatePool>> private_pools_;
  std::vector<std::pair<PoolId, StreamId>> routes_;  // active begin_allocate_to_pool calls
  std::unordered_map<const void*, Block*> live_;     // allocated blocks by address
  std::vector<std::pair<EventId, Block*>> pending_;  // events freed blocks wait on
  CachingStats stats_;
  PoolStats small_stats_, large_stats_;
  std::map<PoolId, PoolStats> private_stats_;
  size_t memory_cap_ = SIZE_MAX;  // reserved bytes allowed (set_memory_fraction)
  double fraction_ = 1.0;
};

}  // namespace kiln::alloc
