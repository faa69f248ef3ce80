#include <cstdlib>
#include <mutex>
#include <vector>

#include "allocator/allocator.h"
#include "kiln/error.h"
#include "kiln/logging.h"

namespace kiln::alloc {
namespace {

// Note [CPU allocator size classes]
// Requests round up to a size class: multiples of 64 B up to 512 B, then four
// classes per power of two (at most 25% waste). Freed blocks stay in a free
// list per class, so a steady-state eager model allocates nothing from the
// system; large blocks are cached too because first-touching fresh pages costs
// more than the kernels that fill them. The cache is capped; past the cap,
// frees go straight back to the system.
constexpr size_t kAlignment = 64;
constexpr size_t kMaxCachedBytes = size_t{4} << 30;
constexpr int kNumClasses = 8 + 4 * 56;  // up to 2^64 bytes

int size_class(size_t n, size_t* rounded) {
  if (n <= 512) {
    size_t r = (n + 63) & ~size_t{63};
    *rounded = r;
    return static_cast<int>(r / 64) - 1;  // 0..7
  }
  int log2 = 63 - __builtin_clzll(n - 1);  // n in (2^log2, 2^(log2+1)]
  size_t step = size_t{1} << (log2 - 2);
  size_t r = (n + step - 1) & ~(step - 1);
  *rounded = r;
  int sub = static_cast<int>((r >> (log2 - 2)) - 4);  // 1..4
  return 8 + (log2 - 9) * 4 + (sub - 1);
}

class CpuCachingAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr{nullptr, nullptr, [](void*, void*) {}};
    size_t rounded = 0;
    int cls = size_class(nbytes, &rounded);
    KILN_INTERNAL_ASSERT(cls >= 0 && cls < kNumClasses, "size class of ", nbytes);
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& list = free_[cls];
      if (!list.empty()) {
        p = list.back();
        list.pop_back();
        cached_bytes_ -= rounded;
      }
      stats_.allocated_bytes.add(static_cast<int64_t>(rounded));
      stats_.active_blocks.add(1);
      if (!p) stats_.reserved_bytes.add(static_cast<int64_t>(rounded));
    }
    if (!p) {
      p = std::aligned_alloc(kAlignment, rounded);
      if (!p) {
        empty_cache();
        p = std::aligned_alloc(kAlignment, rounded);
      }
      if (!p) {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.allocated_bytes.sub(static_cast<int64_t>(rounded));
        stats_.active_blocks.sub(1);
        stats_.reserved_bytes.sub(static_cast<int64_t>(rounded));
        stats_.num_ooms++;
        KILN_FAIL("[cpu allocator] out of memory: tried to allocate ", nbytes, " bytes (",
                  stats_.allocated_bytes.current, " bytes allocated)");
      }
    }
    KILN_LOG(Alloc, "cpu alloc ", nbytes, " B (class ", rounded, " B) at ", p);
    return DataPtr{p, reinterpret_cast<void*>(rounded), &CpuCachingAllocator::free_block};
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (int cls = 0; cls < kNumClasses; ++cls) {
      for (void* p : free_[cls]) std::free(p);
      free_[cls].clear();
    }
    stats_.reserved_bytes.sub(static_cast<int64_t>(cached_bytes_));
    cached_bytes_ = 0;
  }

  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.allocated_bytes.peak = stats_.allocated_bytes.current;
    stats_.reserved_bytes.peak = stats_.reserved_bytes.current;
    stats_.active_blocks.peak = stats_.active_blocks.current;
  }

 private:
  static void free_block(void* ctx, void* p);

  void release(void* p, size_t rounded) {
    KILN_LOG(Alloc, "cpu free ", rounded, " B at ", p);
    size_t r = 0;
    int cls = size_class(rounded, &r);
    bool keep = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.allocated_bytes.sub(static_cast<int64_t>(rounded));
      stats_.active_blocks.sub(1);
      if (cached_bytes_ + rounded <= kMaxCachedBytes) {
        free_[cls].push_back(p);
        cached_bytes_ += rounded;
        keep = true;
      } else {
        stats_.reserved_bytes.sub(static_cast<int64_t>(rounded));
      }
    }
    if (!keep) std::free(p);
  }

  mutable std::mutex mu_;
  std::vector<void*> free_[kNumClasses];
  size_t cached_bytes_ = 0;
  MemoryStats stats_;
};

CpuCachingAllocator& instance() {
  // Leaked on purpose: tensors in static objects may die after main returns.
  static auto* a = new CpuCachingAllocator();
  return *a;
}

void CpuCachingAllocator::free_block(void* ctx, void* p) {
  instance().release(p, reinterpret_cast<size_t>(ctx));
}

}  // namespace

Allocator& cpu_allocator() { return instance(); }

}  // namespace kiln::alloc
