#include "allocator/host_caching_allocator.h"

#include <algorithm>
#include <cstdio>

#include "allocator/memory_summary.h"
#include "kiln/error.h"
#include "kiln/logging.h"

namespace kiln::alloc {

// Note [Pinned staging]
// Copies between pageable host memory and a device are synchronous and slow;
// from page-locked memory they are DMA transfers that run while the host goes
// on. Page-locking is expensive (cudaHostAlloc maps and pins every page), so
// blocks are cached by size class and reused. A block handed to a copy on some
// stream (record_stream) returns to the cache only when an event recorded on
// that stream at free() says the copy is done: a staging buffer can be freed
// right after its copy is queued.

size_t host_size_class(size_t n) {
  if (n <= 512) return 512;
  int log2 = 63 - __builtin_clzll(n - 1);  // n in (2^log2, 2^(log2+1)]
  size_t step = size_t{1} << (log2 - 2);
  return (n + step - 1) & ~(step - 1);
}

HostCachingAllocator::HostCachingAllocator(std::unique_ptr<DeviceMemory> memory)
    : memory_(std::move(memory)) {}

HostCachingAllocator::~HostCachingAllocator() {
  try {
    empty_cache();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[kiln] %s allocator teardown: %s\n", memory_->name().c_str(), e.what());
  }
}

DataPtr HostCachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return DataPtr{nullptr, nullptr, [](void*, void*) {}};
  const size_t size = host_size_class(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  process_events();
  Block* b = nullptr;
  auto take = [&] {
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) return false;
    b = it->second.back();
    it->second.pop_back();
    return true;
  };
  if (!take()) {
    void* p = memory_->raw_alloc(size);
    if (!p) {
      stats_.num_alloc_retries++;
      synchronize_and_free_events();
      if (!take()) {
        release_free_blocks();
        p = memory_->raw_alloc(size);
      }
    }
    if (!b && !p) {
      stats_.num_ooms++;
      const std::string allocator = memory_->name() + " allocator";
      KILN_FAIL(oom_tag(allocator), " out of memory: tried to allocate ",
                format_bytes(static_cast<int64_t>(nbytes)), " (", nbytes, " bytes); ",
                oom_figures_of(allocator), "kiln has ",
                format_bytes(stats_.allocated_bytes.current), " allocated and ",
                format_bytes(stats_.reserved_bytes.current - stats_.allocated_bytes.current),
                " reserved but unused");
    }
    if (!b) {
      auto owned = std::make_unique<Block>(Block{p, size});
      b = owned.get();
      blocks_.emplace(p, std::move(owned));
      stats_.reserved_bytes.add(static_cast<int64_t>(size));
    }
  }
  b->allocated = true;
  stats_.allocated_bytes.add(static_cast<int64_t>(size));
  stats_.active_blocks.add(1);
  KILN_LOG(Alloc, memory_->name(), " alloc ", nbytes, " B (class ", size, " B) at ", b->ptr);
  return DataPtr{b->ptr, this, &HostCachingAllocator::free_data};
}

void HostCachingAllocator::free_data(void* ctx, void* ptr) {
  static_cast<HostCachingAllocator*>(ctx)->free(ptr);
}

void HostCachingAllocator::free(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(ptr);
  if (it == blocks_.end() || !it->second->allocated) {
    std::fprintf(stderr,
                 "[kiln] %s allocator: free of %p, which is not a live block "
                 "(this is a kiln bug)\n",
                 memory_->name().c_str(), ptr);
    return;
  }
  Block* b = it->second.get();
  b->allocated = false;
  stats_.allocated_bytes.sub(static_cast<int64_t>(b->size));
  KILN_LOG(Alloc, memory_->name(), " free ", b->size, " B at ", ptr,
           b->stream_uses.empty() ? "" : " (waiting for its copies)");
  try {
    for (StreamId s : b->stream_uses) {
      pending_.emplace_back(memory_->record_event(s), b);
      b->event_count++;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[kiln] %s allocator: %s; the block at %p stays unused\n",
                 memory_->name().c_str(), e.what(), ptr);
    b->stream_uses.clear();
    return;
  }
  b->stream_uses.clear();
  if (b->event_count == 0) make_free(b);
}

void HostCachingAllocator::make_free(Block* b) {
  stats_.active_blocks.sub(1);
  free_[b->size].push_back(b);
}

bool HostCachingAllocator::record_stream(const void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(ptr);
  if (it == blocks_.end() || !it->second->allocated) return false;
  auto& uses = it->second->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
  return true;
}

bool HostCachingAllocator::owns(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(ptr);
  return it != blocks_.end() && it->second->allocated;
}

void HostCachingAllocator::process_events() {
  drain_events(*memory_, pending_, /*wait=*/false, [&](Block* b) { make_free(b); });
}

void HostCachingAllocator::synchronize_and_free_events() {
  drain_events(*memory_, pending_, /*wait=*/true, [&](Block* b) { make_free(b); });
}

void HostCachingAllocator::release_free_blocks() {
  for (auto& [size, list] : free_) {
    for (Block* b : list) {
      memory_->raw_free(b->ptr);
      stats_.reserved_bytes.sub(static_cast<int64_t>(b->size));
      blocks_.erase(b->ptr);
    }
    list.clear();
  }
}

void HostCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  synchronize_and_free_events();
  release_free_blocks();
}

MemoryStats HostCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void HostCachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.allocated_bytes.peak = stats_.allocated_bytes.current;
  stats_.reserved_bytes.peak = stats_.reserved_bytes.current;
  stats_.active_blocks.peak = stats_.active_blocks.current;
}

}  // namespace kiln::alloc
