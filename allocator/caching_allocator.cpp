#include "allocator/caching_allocator.h"

#include <algorithm>
#include <cstdio>

#include "allocator/memory_summary.h"
#include "kiln/error.h"
#include "kiln/logging.h"

namespace kiln::alloc {

// Note [Caching allocator policy]
// Device allocation (cudaMalloc) costs up to milliseconds and synchronizes the
// device, so memory is taken in segments and carved into blocks kept in a
// cache, as PyTorch's allocator does:
//   - requests round up to 512 B; those ≤ 1 MiB come from 2 MiB segments (the
//     small pool), larger ones from the large pool: segments of 20 MiB for
//     requests < 10 MiB, else a segment of the request rounded up to 2 MiB;
//   - free blocks sit in a set ordered by (stream, size, address), so best fit
//     is one lower_bound; blocks are cached per stream, which makes reuse on
//     the same stream safe without any synchronization;
//   - a block larger than needed is split when the rest is worth keeping
//     (≥ 512 B in the small pool, > 1 MiB in the large one); a freed block
//     merges with free neighbours of its segment;
//   - only whole segments go back to the device (empty_cache, or on OOM).
// Out of memory: wait for pending events, free the cache, try once more
// (num_alloc_retries); then count num_ooms and throw with the numbers a user
// needs. The allocator's state is unchanged by a failure, so the process goes on.
//
// Note [Cross-stream reuse]
// A block used by work on other streams (record_stream) is not reusable when
// freed: one event per such stream is recorded at free(), and the block
// returns to its pool only when all of them completed (checked at each
// allocation, or waited for on OOM and empty_cache). Until then it counts as
// active, not allocated.
//
// Note [Private pools]
// CUDA graphs bake addresses in, so the memory a captured graph uses must not
// be handed to anyone else while the graph lives. Between
// begin_allocate_to_pool(pool, stream) and end_allocate_to_pool(pool),
// allocations on `stream` come from the pool's own segments; freed blocks of
// the pool return to the pool, never to the shared pools, and are reused only
// by later allocations routed to the same pool. release_pool drops a user; at
// zero users the pool's whole free segments go back to the device at once and
// the rest as their blocks come home.
// While a pool takes allocations (between begin and end), its blocks freed
// in the meantime are held back and return to the pool only at
// end_allocate_to_pool: every address that a capture's nodes hold then
// belongs to one allocation. Graph replay relies on it (Note [Graph
// addresses]): it patches each kernel parameter that points into a result's
// buffer, so scratch that a library call used and freed earlier in the same
// capture must not sit at that address too, or replay would move the
// scratch's writes into the result. The pool then holds the sum of what
// the capture allocated rather than its peak.
// Raw allocations made while a graph is captured are allowed by the CUDA
// backend (Note [Allocating during capture] in runtime/cuda/memory.cpp).
// Not handled: a block with uses on other streams (record_stream) freed while
// a capture is under way records an event on a capturing stream, which cannot
// be queried; kiln's captures make no such uses.

namespace {

constexpr int kAgg = static_cast<int>(PoolKind::Aggregate);

std::string stream_str(StreamId s) {
  return detail::str("0x", std::hex, s.handle);
}

}  // namespace

const char* pool_kind_name(PoolKind k) {
  switch (k) {
    case PoolKind::Aggregate:
      return "all";
    case PoolKind::Small:
      return "small pool";
    case PoolKind::Large:
      return "large pool";
  }
  return "?";
}

size_t round_request(size_t nbytes) {
  if (nbytes < kMinBlockSize) return kMinBlockSize;
  KILN_CHECK(nbytes <= SIZE_MAX - kRoundLarge,
             "[cuda allocator] expected a request below 2^64 "
             "bytes, got ",
             nbytes);
  return (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

struct DeviceCachingAllocator::Block {
  StreamId stream;
  size_t size = 0;
  size_t requested = 0;
  char* ptr = nullptr;
  BlockPool* pool = nullptr;
  bool allocated = false;
  int event_count = 0;                // events still to complete before reuse
  std::vector<StreamId> stream_uses;  // other streams that used it (record_stream)
  Block* prev = nullptr;              // neighbours within the segment
  Block* next = nullptr;
};

bool DeviceCachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
}

struct DeviceCachingAllocator::BlockPool {
  BlockPool(bool small, PrivatePool* owner) : is_small(small), owner(owner) {}
  std::set<Block*, BlockLess> blocks;  // free blocks
  bool is_small;
  PrivatePool* owner;  // null for the shared pools
};

struct DeviceCachingAllocator::PrivatePool {
  explicit PrivatePool(PoolId id) : id(id), small(true, this), large(false, this) {}
  PoolId id;
  int use_count = 1;
  int64_t num_segments = 0;
  int routes = 0;            // active begin_allocate_to_pool calls
  std::vector<Block*> held;  // freed while routed to (Note [Private pools])
  BlockPool small;
  BlockPool large;
};

DeviceCachingAllocator::DeviceCachingAllocator(std::unique_ptr<DeviceMemory> memory)
    : memory_(std::move(memory)),
      small_(std::make_unique<BlockPool>(true, nullptr)),
      large_(std::make_unique<BlockPool>(false, nullptr)) {}

DeviceCachingAllocator::~DeviceCachingAllocator() {
  // Whole free segments go back; segments with live blocks (a leak by the
  // owner) are left to the device, and only their bookkeeping is deleted.
  try {
    synchronize_and_free_events();
    release_cached_blocks();
    for (auto& [id, pp] : private_pools_) {
      pp->use_count = 0;
      release_pool_blocks(pp->small);
      release_pool_blocks(pp->large);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[kiln] %s allocator teardown: %s\n", memory_->name().c_str(), e.what());
  }
  std::vector<Block*> all;
  auto collect = [&](BlockPool& p) { all.insert(all.end(), p.blocks.begin(), p.blocks.end()); };
  collect(*small_);
  collect(*large_);
  for (auto& [id, pp] : private_pools_) {
    collect(pp->small);
    collect(pp->large);
    all.insert(all.end(), pp->held.begin(), pp->held.end());
  }
  for (auto& [ptr, b] : live_) all.push_back(b);
  for (Block* b : all) delete b;
}

std::string PoolStats::name() const {
  if (pool) return "graph pool " + std::to_string(pool);
  return is_small ? "small pool" : "large pool";
}

PoolStats& DeviceCachingAllocator::pool_stats(const BlockPool& pool) {
  if (!pool.owner) return pool.is_small ? small_stats_ : large_stats_;
  PoolStats& p = private_stats_[pool.owner->id];
  p.pool = pool.owner->id;
  return p;
}

void DeviceCachingAllocator::update(Stat (&stat)[kNumPoolKinds], Stat PoolStats::*per_pool,
                                    const BlockPool& pool, int64_t delta) {
  int kind = static_cast<int>(pool.is_small ? PoolKind::Small : PoolKind::Large);
  Stat* targets[] = {&stat[kAgg], &stat[kind], per_pool ? &(pool_stats(pool).*per_pool) : nullptr};
  for (Stat* t : targets) {
    if (!t) continue;
    if (delta >= 0) {
      t->add(delta);
    } else {
      t->sub(-delta);
    }
  }
}

// Note [Inactive split blocks]
// A free block of a segment that is split (it has a neighbour) is cached
// memory only requests that fit it can use: PyTorch's "inactive split"
// statistics, a measure of fragmentation. A block's neighbours change only
// while it is out of its pool's free set (split on allocation, merged on
// free), so counting it as it enters and leaves the set keeps the statistic.
void DeviceCachingAllocator::insert_free(Block* b) {
  b->pool->blocks.insert(b);
  if (!b->prev && !b->next) return;
  update(stats_.inactive_split_bytes, &PoolStats::inactive_split_bytes, *b->pool,
         static_cast<int64_t>(b->size));
  update(stats_.inactive_split, nullptr, *b->pool, 1);
}

void DeviceCachingAllocator::erase_free(Block* b) {
  if (b->pool->blocks.erase(b) == 0) return;
  if (!b->prev && !b->next) return;
  update(stats_.inactive_split_bytes, &PoolStats::inactive_split_bytes, *b->pool,
         -static_cast<int64_t>(b->size));
  update(stats_.inactive_split, nullptr, *b->pool, -1);
}

DeviceCachingAllocator::BlockPool& DeviceCachingAllocator::pool_for(size_t size, StreamId stream) {
  const bool small = size <= kSmallSize;
  for (auto it = routes_.rbegin(); it != routes_.rend(); ++it) {
    if (it->second == stream) {
      PrivatePool& pp = *private_pools_.at(it->first);
      return small ? pp.small : pp.large;
    }
  }
  return small ? *small_ : *large_;
}

DeviceCachingAllocator::Block* DeviceCachingAllocator::find_free_block(BlockPool& pool,
                                                                       StreamId stream,
                                                                       size_t size) {
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.blocks.lower_bound(&key);
  if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  erase_free(b);
  return b;
}

DeviceCachingAllocator::Block* DeviceCachingAllocator::new_segment(BlockPool& pool, StreamId stream,
                                                                   size_t size) {
  int64_t reserved = stats_.reserved_bytes[kAgg].current;
  if (static_cast<size_t>(reserved) + size > memory_cap_) return nullptr;
  void* p = memory_->raw_alloc(size);
  if (!p) return nullptr;
  auto* b = new Block;
  b->stream = stream;
  b->size = size;
  b->ptr = static_cast<char*>(p);
  b->pool = &pool;
  update(stats_.reserved_bytes, &PoolStats::reserved_bytes, pool, static_cast<int64_t>(size));
  update(stats_.segments, &PoolStats::segments, pool, 1);
  stats_.num_device_allocs++;
  if (pool.owner) pool.owner->num_segments++;
  KILN_LOG(Alloc, memory_->name(), " new segment ", size, " B at ", p, " (",
           pool.is_small ? "small" : "large", " pool", pool.owner ? ", private" : "", ")");
  return b;
}

bool DeviceCachingAllocator::should_split(const Block* block, size_t size) const {
  size_t rest = block->size - size;
  return block->pool->is_small ? rest >= kMinBlockSize : rest > kSmallSize;
}

void* DeviceCachingAllocator::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  const size_t size = round_request(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  process_events();
  BlockPool& pool = pool_for(size, stream);
  const size_t alloc_size = pool.is_small ? kSmallBuffer : segment_size(size);
  Block* b = find_free_block(pool, stream, size);
  if (!b) b = new_segment(pool, stream, alloc_size);
  if (!b) {
    // Note [Caching allocator policy]: free what the cache holds, try once more.
    stats_.num_alloc_retries++;
    pool_stats(pool).alloc_retries++;
    synchronize_and_free_events();
    b = find_free_block(pool, stream, size);
    if (!b) {
      release_cached_blocks();
      b = new_segment(pool, stream, alloc_size);
    }
  }
  if (!b) {
    pool_stats(pool).ooms++;
    throw_oom(nbytes, alloc_size);
  }

  if (should_split(b, size)) {
    auto* rest = new Block;
    rest->stream = stream;
    rest->size = b->size - size;
    rest->ptr = b->ptr + size;
    rest->pool = &pool;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    insert_free(rest);
  }
  b->allocated = true;
  b->requested = nbytes;
  live_.emplace(b->ptr, b);
  const int64_t bs = static_cast<int64_t>(b->size);
  update(stats_.allocated_bytes, &PoolStats::allocated_bytes, pool, bs);
  update(stats_.allocations, &PoolStats::allocations, pool, 1);
  update(stats_.active_bytes, &PoolStats::active_bytes, pool, bs);
  update(stats_.active_blocks, nullptr, pool, 1);
  KILN_LOG(Alloc, memory_->name(), " alloc ", nbytes, " B (block ", b->size, " B, ",
           pool.is_small ? "small" : "large", " pool", pool.owner ? ", private" : "", ") at ",
           static_cast<void*>(b->ptr), " on stream ", stream_str(stream));
  return b->ptr;
}

namespace {
void free_data(void* ctx, void* ptr) {
  static_cast<DeviceCachingAllocator*>(ctx)->free(ptr);
}
void free_nothing(void*, void*) {}
}  // namespace

DataPtr DeviceCachingAllocator::allocate_data(size_t nbytes, StreamId stream) {
  void* p = allocate(nbytes, stream);
  if (!p) return DataPtr{nullptr, nullptr, &free_nothing};
  return DataPtr{p, this, &free_data};
}

void DeviceCachingAllocator::free(void* ptr) noexcept {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    std::fprintf(stderr,
                 "[kiln] %s allocator: free of %p, which it did not allocate "
                 "(this is a kiln bug)\n",
                 memory_->name().c_str(), ptr);
    return;
  }
  Block* b = it->second;
  live_.erase(it);
  b->allocated = false;
  update(stats_.allocated_bytes, &PoolStats::allocated_bytes, *b->pool,
         -static_cast<int64_t>(b->size));
  update(stats_.allocations, &PoolStats::allocations, *b->pool, -1);
  KILN_LOG(Alloc, memory_->name(), " free ", b->size, " B at ", ptr,
           b->stream_uses.empty() ? "" : " (waiting for other streams)");
  if (b->stream_uses.empty()) {
    PrivatePool* pp = b->pool->owner;
    if (pp && pp->routes > 0) {
      // Note [Private pools]: back at end_allocate_to_pool. Until then it
      // counts as a block awaiting its uses (active, never merged).
      b->event_count++;
      pp->held.push_back(b);
      return;
    }
    free_block(b);
    return;
  }
  // Note [Cross-stream reuse]. A failure to record (a dying process) keeps the
  // block out of the cache for good rather than risk reusing it early.
  try {
    for (StreamId s : b->stream_uses) {
      pending_.emplace_back(memory_->record_event(s), b);
      b->event_count++;
    }
    b->stream_uses.clear();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[kiln] %s allocator: %s; the block at %p stays unused\n",
                 memory_->name().c_str(), e.what(), ptr);
  }
}

bool DeviceCachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return false;
  Block* b = it->second;
  if (stream == b->stream) return true;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end()) {
    b->stream_uses.push_back(stream);
  }
  return true;
}

bool DeviceCachingAllocator::try_merge(Block* dst, Block* src) {
  if (!src || src->allocated || src->event_count > 0 || !src->stream_uses.empty()) return false;
  erase_free(src);
  if (dst->prev == src) {
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  dst->size += src->size;
  delete src;
  return true;
}

void DeviceCachingAllocator::free_block(Block* b) {
  update(stats_.active_bytes, &PoolStats::active_bytes, *b->pool, -static_cast<int64_t>(b->size));
  update(stats_.active_blocks, nullptr, *b->pool, -1);
  try_merge(b, b->prev);
  try_merge(b, b->next);
  b->requested = 0;
  insert_free(b);
  PrivatePool* pp = b->pool->owner;
  if (pp && pp->use_count == 0 && !b->prev && !b->next) {
    release_segment(b);
    maybe_drop_private_pool(pp);
  }
}

void DeviceCachingAllocator::process_events() {
  drain_events(*memory_, pending_, /*wait=*/false, [&](Block* b) { free_block(b); });
}

void DeviceCachingAllocator::synchronize_and_free_events() {
  drain_events(*memory_, pending_, /*wait=*/true, [&](Block* b) { free_block(b); });
}

void DeviceCachingAllocator::release_segment(Block* b) {
  KILN_INTERNAL_ASSERT(!b->allocated && !b->prev && !b->next, "releasing part of a segment");
  erase_free(b);
  KILN_LOG(Alloc, memory_->name(), " release segment ", b->size, " B at ",
           static_cast<void*>(b->ptr));
  memory_->raw_free(b->ptr);
  update(stats_.reserved_bytes, &PoolStats::reserved_bytes, *b->pool,
         -static_cast<int64_t>(b->size));
  update(stats_.segments, &PoolStats::segments, *b->pool, -1);
  stats_.num_device_frees++;
  if (b->pool->owner) b->pool->owner->num_segments--;
  delete b;
}

void DeviceCachingAllocator::release_pool_blocks(BlockPool& pool) {
  std::vector<Block*> whole;
  for (Block* b : pool.blocks) {
    if (!b->prev && !b->next) whole.push_back(b);
  }
  for (Block* b : whole) release_segment(b);
}

void DeviceCachingAllocator::maybe_drop_private_pool(PrivatePool* pp) {
  if (pp->use_count > 0 || pp->num_segments > 0) return;
  for (auto& r : routes_) {
    if (r.first == pp->id) return;  // still routed to: allocations would come back here
  }
  private_stats_.erase(pp->id);
  private_pools_.erase(pp->id);
}

void DeviceCachingAllocator::release_cached_blocks() {
  release_pool_blocks(*small_);
  release_pool_blocks(*large_);
  std::vector<PrivatePool*> freeable;
  for (auto& [id, pp] : private_pools_) {
    if (pp->use_count == 0) freeable.push_back(pp.get());
  }
  for (PrivatePool* pp : freeable) {
    release_pool_blocks(pp->small);
    release_pool_blocks(pp->large);
    maybe_drop_private_pool(pp);
  }
}

void DeviceCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  synchronize_and_free_events();
  release_cached_blocks();
}

void DeviceCachingAllocator::set_memory_fraction(double fraction) {
  KILN_CHECK(fraction >= 0.0 && fraction <= 1.0,
             "[set_memory_fraction] expected a fraction in [0, 1], got ", fraction);
  size_t free_bytes = 0, total = 0;
  memory_->mem_info(&free_bytes, &total);
  std::lock_guard<std::mutex> lock(mu_);
  fraction_ = fraction;
  memory_cap_ =
      fraction >= 1.0 ? SIZE_MAX : static_cast<size_t>(fraction * static_cast<double>(total));
}

void DeviceCachingAllocator::begin_allocate_to_pool(PoolId pool, StreamId stream) {
  KILN_CHECK(pool != 0, "[begin_allocate_to_pool] expected a nonzero pool id, got 0");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = private_pools_.find(pool);
  if (it == private_pools_.end()) {
    it = private_pools_.emplace(pool, std::make_unique<PrivatePool>(pool)).first;
  } else {
    it->second->use_count++;
  }
  it->second->routes++;
  routes_.emplace_back(pool, stream);
}

void DeviceCachingAllocator::end_allocate_to_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(routes_.rbegin(), routes_.rend(),
                         [&](const auto& r) { return r.first == pool; });
  KILN_CHECK(it != routes_.rend(), "[end_allocate_to_pool] expected pool ", pool,
             " to be active, got one that is not");
  routes_.erase(std::next(it).base());
  auto pp = private_pools_.find(pool);
  if (pp != private_pools_.end() && --pp->second->routes == 0) {
    std::vector<Block*> held = std::move(pp->second->held);
    pp->second->held.clear();
    for (Block* b : held) {
      if (--b->event_count == 0) free_block(b);  // may drop the pool: `pp` is not used after
    }
  }
}

void DeviceCachingAllocator::release_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = private_pools_.find(pool);
  KILN_CHECK(it != private_pools_.end() && it->second->use_count > 0,
             "[release_pool] expected a pool in use, got pool ", pool);
  PrivatePool* pp = it->second.get();
  if (--pp->use_count > 0) return;
  synchronize_and_free_events();
  release_pool_blocks(pp->small);
  release_pool_blocks(pp->large);
  maybe_drop_private_pool(pp);
}

void DeviceCachingAllocator::throw_oom(size_t nbytes, size_t alloc_size) {
  stats_.num_ooms++;
  size_t free_bytes = 0, total = 0;
  try {
    memory_->mem_info(&free_bytes, &total);
  } catch (const std::exception&) {
  }
  const int64_t allocated = stats_.allocated_bytes[kAgg].current;
  const int64_t reserved = stats_.reserved_bytes[kAgg].current;
  std::string cap;
  if (memory_cap_ != SIZE_MAX) {
    cap = detail::str("; set_memory_fraction(", fraction_, ") caps kiln's reserved memory at ",
                      format_bytes(static_cast<int64_t>(memory_cap_)));
  }
  KILN_FAIL(oom_tag("cuda allocator"), " out of memory on ", memory_->name(),
            ": tried to allocate ", format_bytes(static_cast<int64_t>(nbytes)), " (", nbytes,
            " bytes, needing a ", format_bytes(static_cast<int64_t>(alloc_size)),
            " segment); the device has ", format_bytes(static_cast<int64_t>(total)), " total, ",
            format_bytes(static_cast<int64_t>(free_bytes)), " free; ",
            oom_figures_of("cuda allocator"), "kiln has ", format_bytes(allocated),
            " allocated and ", format_bytes(reserved - allocated), " reserved but unused", cap);
}

CachingStats DeviceCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CachingStats s = stats_;
  s.pools.push_back(small_stats_);
  s.pools.back().is_small = true;
  s.pools.push_back(large_stats_);
  for (const auto& [id, p] : private_stats_) s.pools.push_back(p);
  return s;
}

void DeviceCachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Stat* s : {stats_.allocated_bytes, stats_.reserved_bytes, stats_.active_bytes,
                  stats_.allocations, stats_.segments, stats_.active_blocks,
                  stats_.inactive_split_bytes, stats_.inactive_split}) {
    for (int k = 0; k < kNumPoolKinds; ++k) s[k].peak = s[k].current;
  }
  auto reset = [](PoolStats& p) {
    for (Stat* s : {&p.allocated_bytes, &p.reserved_bytes, &p.active_bytes, &p.inactive_split_bytes,
                    &p.allocations, &p.segments}) {
      s->peak = s->current;
    }
  };
  reset(small_stats_);
  reset(large_stats_);
  for (auto& [id, p] : private_stats_) reset(p);
}

std::vector<SegmentInfo> DeviceCachingAllocator::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  // Every block is live, in a pool, awaiting events or held back for a
  // capture; a segment starts at a block with no prev.
  std::vector<const Block*> heads;
  auto consider = [&](const Block* b) {
    if (!b->prev) heads.push_back(b);
  };
  for (auto& [p, b] : live_) consider(b);
  for (const BlockPool* pool : {small_.get(), large_.get()}) {
    for (const Block* b : pool->blocks) consider(b);
  }
  for (auto& [id, pp] : private_pools_) {
    for (const BlockPool* pool : {&pp->small, &pp->large}) {
      for (const Block* b : pool->blocks) consider(b);
    }
    for (const Block* b : pp->held) consider(b);
  }
  for (auto& [event, b] : pending_) {
    if (!b->prev && std::find(heads.begin(), heads.end(), b) == heads.end()) heads.push_back(b);
  }
  std::sort(heads.begin(), heads.end(),
            [](const Block* a, const Block* b) { return a->ptr < b->ptr; });
  std::vector<SegmentInfo> out;
  for (const Block* h : heads) {
    SegmentInfo s;
    s.address = reinterpret_cast<uintptr_t>(h->ptr);
    s.stream = h->stream;
    s.is_small = h->pool->is_small;
    s.pool = h->pool->owner ? h->pool->owner->id : 0;
    for (const Block* b = h; b; b = b->next) {
      s.size += b->size;
      s.blocks.push_back({reinterpret_cast<uintptr_t>(b->ptr), b->size,
                          b->allocated ? b->requested : 0, b->allocated,
                          !b->allocated && b->event_count > 0});
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string DeviceCachingAllocator::memory_summary() const {
  CachingStats s = stats();
  size_t free_bytes = 0, total = 0;
  memory_->mem_info(&free_bytes, &total);
  return format_memory_summary(s, memory_->name(), total, free_bytes,
                               memory_cap_ == SIZE_MAX ? 0 : memory_cap_);
}

size_t DeviceCachingAllocator::block_size(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  return it == live_.end() ? 0 : it->second->size;
}

}  // namespace kiln::alloc
