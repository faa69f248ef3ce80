#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "allocator/allocator.h"
#include "kiln/error.h"
#include "kiln/logging.h"

namespace kiln::alloc {

// Note [Requests larger than the machine]
// A request for more bytes than the host's memory and swap together can
// never be met. It is refused before anything else looks at it: the
// counters below add sizes in int64, and a sanitizer's allocator stops the
// process on a request it cannot map instead of returning null. The error
// is the allocator's usual out-of-memory one.
size_t host_memory_bytes() {
  static const size_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return size_t{1} << 50;  // unknown: no smaller bound
    size_t total = static_cast<size_t>(pages) * static_cast<size_t>(page);
    // Swap, from /proc/meminfo where there is one (kB).
    if (FILE* f = std::fopen("/proc/meminfo", "r")) {
      char line[128];
      unsigned long long kb = 0;
      while (std::fgets(line, sizeof line, f)) {
        if (std::sscanf(line, "SwapTotal: %llu kB", &kb) == 1) break;
      }
      std::fclose(f);
      total += static_cast<size_t>(kb) * 1024;
    }
    return total;
  }();
  return bytes;
}

namespace {

// Note [CPU allocator size classes]
// Requests round up to a size class: multiples of 64 B up to 512 B, then four
// classes per power of two (at most 25% waste). Freed blocks stay cached per
// class, so a steady-state eager model allocates nothing from the system; large
// blocks are cached too because first-touching fresh pages costs more than the
// kernels that fill them. The cache is capped; past the cap, frees go back to
// the system.
//
// Note [CPU allocator thread caches]
// Blocks of up to kThreadCacheMax bytes are also kept in a small per-thread
// cache (kThreadCacheDepth per class), so the common eager step of allocating
// an output and freeing a temporary takes no lock. A block may be freed on
// another thread than the one that allocated it: it simply joins that thread's
// cache. Threads flush their caches to the shared lists when they exit.
// Statistics: Note [CPU allocator statistics].
constexpr size_t kAlignment = 64;
constexpr size_t kMaxCachedBytes = size_t{4} << 30;
constexpr int kNumClasses = 8 + 4 * 56;  // up to 2^64 bytes
constexpr size_t kThreadCacheMax = size_t{1} << 20;
constexpr int kThreadCacheDepth = 32;

// Note [CPU allocator statistics]
// Every eager op allocates its output here, so the hot path takes no atomic
// read-modify-write (each costs about as much as the rest of an allocation
// from the thread cache). Each thread counts what it allocated and freed in
// counters only it writes; stats() sums them, so `current` is exact. The
// shared `current_` that drives `peak` is fed in batches: a thread publishes
// its net change once it passes kPublishBytes either way (and on exit), so
// `peak` may miss a high point by less than kPublishBytes per thread.
constexpr int64_t kPublishBytes = int64_t{64} << 10;

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

constexpr int kThreadClasses = 8 + 4 * (20 - 9) + 4;  // classes up to kThreadCacheMax

struct ThreadCounters {
  // Written by the owning thread only; read by stats().
  std::atomic<int64_t> allocated_total{0};
  std::atomic<int64_t> freed_total{0};
  std::atomic<int64_t> blocks_allocated{0};
  std::atomic<int64_t> blocks_freed{0};
  void bump(std::atomic<int64_t>& c, int64_t v) {
    c.store(c.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
};

class CpuCachingAllocator;
CpuCachingAllocator& instance();

// Set when this thread's cache is gone (thread exit): later frees on the
// thread (static tensors dying after it) go to the shared lists.
thread_local bool t_cache_gone = false;

struct ThreadCache {
  void* blocks[kThreadClasses][kThreadCacheDepth];
  int count[kThreadClasses] = {};
  ThreadCounters* counters;
  int64_t unpublished = 0;  // bytes allocated minus freed here, not yet in current_
  ThreadCache();
  ~ThreadCache();
};

class CpuCachingAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr{nullptr, nullptr, [](void*, void*) {}};
    if (KILN_UNLIKELY(nbytes > host_limit_)) {  // Note [Requests larger than the machine]
      std::lock_guard<std::mutex> lock(mu_);
      num_ooms_++;
      KILN_FAIL(oom_tag("cpu allocator"), " out of memory: tried to allocate ", nbytes,
                " bytes, more than this machine's ", host_limit_, " bytes of memory and swap (",
                oom_figures_of("cpu allocator"), current_locked(), " bytes allocated, ",
                reserved_.current, " reserved)");
    }
    size_t rounded = 0;
    int cls = size_class(nbytes, &rounded);
    KILN_INTERNAL_ASSERT(cls >= 0 && cls < kNumClasses, "size class of ", nbytes);
    void* p = nullptr;
    if (KILN_UNLIKELY(t_cache_gone)) {
      p = take_shared(cls, rounded);
      note_alloc_shared(rounded);
    } else {
      ThreadCache& tc = thread_cache();
      if (cls < kThreadClasses && tc.count[cls] > 0) p = tc.blocks[cls][--tc.count[cls]];
      if (!p) p = take_shared(cls, rounded);
      note_alloc(tc, rounded);
    }
    KILN_LOG(Alloc, "cpu alloc ", nbytes, " B (class ", rounded, " B) at ", p);
    return DataPtr{p, reinterpret_cast<void*>(rounded), &CpuCachingAllocator::free_block};
  }

  void empty_cache() override {
    // Only the shared lists: other threads' caches are theirs (small by construction).
    if (!t_cache_gone) flush_thread_cache(thread_cache());
    std::lock_guard<std::mutex> lock(mu_);
    for (int cls = 0; cls < kNumClasses; ++cls) {
      for (void* p : free_[cls]) std::free(p);
      free_[cls].clear();
    }
    reserved_.sub(static_cast<int64_t>(cached_bytes_));
    cached_bytes_ = 0;
  }

  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    MemoryStats s;
    int64_t alloc_total = retired_.allocated_total, freed_total = retired_.freed_total;
    int64_t blocks_a = retired_.blocks_allocated, blocks_f = retired_.blocks_freed;
    for (const ThreadCounters* c : live_) {
      alloc_total += c->allocated_total.load(std::memory_order_relaxed);
      freed_total += c->freed_total.load(std::memory_order_relaxed);
      blocks_a += c->blocks_allocated.load(std::memory_order_relaxed);
      blocks_f += c->blocks_freed.load(std::memory_order_relaxed);
    }
    // Exact, from the counters (Note [CPU allocator statistics]).
    s.allocated_bytes.current = alloc_total - freed_total;
    s.allocated_bytes.peak =
        std::max(peak_.load(std::memory_order_relaxed), s.allocated_bytes.current);
    s.allocated_bytes.allocated = alloc_total;
    s.allocated_bytes.freed = freed_total;
    s.active_blocks.current = blocks_a - blocks_f;
    s.active_blocks.allocated = blocks_a;
    s.active_blocks.freed = blocks_f;
    s.active_blocks.peak = s.active_blocks.current;  // not tracked per event
    s.reserved_bytes = reserved_;
    s.num_ooms = num_ooms_;
    return s;
  }

  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    peak_.store(current_locked());
    reserved_.peak = reserved_.current;
  }

  // Exact bytes allocated now, from every thread's counters; mu_ held.
  int64_t current_locked() const {
    int64_t n = retired_.allocated_total - retired_.freed_total;
    for (const ThreadCounters* c : live_) {
      n += c->allocated_total.load(std::memory_order_relaxed) -
           c->freed_total.load(std::memory_order_relaxed);
    }
    return n;
  }

  void register_thread(ThreadCounters* c) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.push_back(c);
  }

  void retire_thread(ThreadCache& tc) {
    publish(tc);
    flush_thread_cache(tc);
    std::lock_guard<std::mutex> lock(mu_);
    ThreadCounters* c = tc.counters;
    retired_.allocated_total += c->allocated_total.load();
    retired_.freed_total += c->freed_total.load();
    retired_.blocks_allocated += c->blocks_allocated.load();
    retired_.blocks_freed += c->blocks_freed.load();
    for (size_t i = 0; i < live_.size(); ++i) {
      if (live_[i] == c) {
        live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
  }

 private:
  static void free_block(void* ctx, void* p);
  static ThreadCache& thread_cache() {
    static thread_local ThreadCache tc;
    return tc;
  }

  void note_alloc_shared(size_t rounded) {
    bump_current(static_cast<int64_t>(rounded));
    std::lock_guard<std::mutex> lock(mu_);
    retired_.allocated_total += static_cast<int64_t>(rounded);
    retired_.blocks_allocated += 1;
  }

  void note_alloc(ThreadCache& tc, size_t rounded) {
    tc.unpublished += static_cast<int64_t>(rounded);
    if (tc.unpublished > kPublishBytes) publish(tc);
    tc.counters->bump(tc.counters->allocated_total, static_cast<int64_t>(rounded));
    tc.counters->bump(tc.counters->blocks_allocated, 1);
  }

  void publish(ThreadCache& tc) {
    int64_t delta = tc.unpublished;
    tc.unpublished = 0;
    if (delta > 0) {
      bump_current(delta);
    } else {
      current_.fetch_sub(-delta, std::memory_order_relaxed);
    }
  }

  void bump_current(int64_t bytes) {
    int64_t now = current_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }

  void* take_shared(int cls, size_t rounded) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& list = free_[cls];
      if (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        cached_bytes_ -= rounded;
        return p;
      }
      reserved_.add(static_cast<int64_t>(rounded));
    }
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (!p) {
      empty_cache();
      p = std::aligned_alloc(kAlignment, rounded);
    }
    if (!p) {
      std::lock_guard<std::mutex> lock(mu_);
      reserved_.sub(static_cast<int64_t>(rounded));
      num_ooms_++;
      KILN_FAIL(oom_tag("cpu allocator"), " out of memory: tried to allocate ", rounded, " bytes (",
                oom_figures_of("cpu allocator"), current_locked(), " bytes allocated, ",
                reserved_.current, " reserved)");
    }
    return p;
  }

  void release(void* p, size_t rounded) {
    KILN_LOG(Alloc, "cpu free ", rounded, " B at ", p);
    size_t r = 0;
    int cls = size_class(rounded, &r);
    if (KILN_UNLIKELY(t_cache_gone)) {
      current_.fetch_sub(static_cast<int64_t>(rounded), std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> lock(mu_);
        retired_.freed_total += static_cast<int64_t>(rounded);
        retired_.blocks_freed += 1;
      }
      give_shared(p, cls, rounded);
      return;
    }
    ThreadCache& tc = thread_cache();
    tc.unpublished -= static_cast<int64_t>(rounded);
    if (tc.unpublished < -kPublishBytes) publish(tc);
    tc.counters->bump(tc.counters->freed_total, static_cast<int64_t>(rounded));
    tc.counters->bump(tc.counters->blocks_freed, 1);
    if (cls < kThreadClasses && tc.count[cls] < kThreadCacheDepth) {
      tc.blocks[cls][tc.count[cls]++] = p;
      return;
    }
    give_shared(p, cls, rounded);
  }

  // Runs inside storage deleters, which must not throw: a block the cache
  // cannot record (its list cannot grow, out of memory) goes back to the system.
  void give_shared(void* p, int cls, size_t rounded) noexcept {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_bytes_ + rounded <= kMaxCachedBytes) {
        try {
          free_[cls].push_back(p);
          cached_bytes_ += rounded;
          return;
        } catch (const std::bad_alloc&) {
        }
      }
      reserved_.sub(static_cast<int64_t>(rounded));
    }
    std::free(p);
  }

  void flush_thread_cache(ThreadCache& tc) {
    for (int cls = 0; cls < kThreadClasses; ++cls) {
      while (tc.count[cls] > 0) {
        void* p = tc.blocks[cls][--tc.count[cls]];
        size_t rounded = cls < 8 ? static_cast<size_t>(cls + 1) * 64 : class_bytes(cls);
        give_shared(p, cls, rounded);
      }
    }
  }

  static size_t class_bytes(int cls) {
    int log2 = (cls - 8) / 4 + 9;
    int sub = (cls - 8) % 4 + 1;
    return static_cast<size_t>(4 + sub) << (log2 - 2);
  }

  // Read once: allocate() compares every request with it.
  const size_t host_limit_ = host_memory_bytes();
  mutable std::mutex mu_;
  std::vector<void*> free_[kNumClasses];
  size_t cached_bytes_ = 0;
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
  Stat reserved_;
  int64_t num_ooms_ = 0;
  std::vector<ThreadCounters*> live_;
  struct {
    int64_t allocated_total = 0, freed_total = 0, blocks_allocated = 0, blocks_freed = 0;
  } retired_;
};

CpuCachingAllocator& instance() {
  // Leaked on purpose: tensors in static objects may die after main returns.
  static auto* a = new CpuCachingAllocator();
  return *a;
}

ThreadCache::ThreadCache() : counters(new ThreadCounters()) {
  instance().register_thread(counters);
}

ThreadCache::~ThreadCache() {
  instance().retire_thread(*this);
  delete counters;
  t_cache_gone = true;
}

void CpuCachingAllocator::free_block(void* ctx, void* p) {
  instance().release(p, reinterpret_cast<size_t>(ctx));
}

}  // namespace

Allocator& cpu_allocator() {
  return instance();
}

}  // namespace kiln::alloc
