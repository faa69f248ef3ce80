#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::alloc {

// Memory handed to a Storage: the pointer, and who takes it back.
// `deleter(ctx, ptr)` is called exactly once when the storage dies.
struct DataPtr {
  void* ptr = nullptr;
  void* ctx = nullptr;
  void (*deleter)(void* ctx, void* ptr) = nullptr;
};

// Counters kept by every allocator: current and peak values, in bytes and blocks.
struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;  // total ever added
  int64_t freed = 0;      // total ever removed
  void add(int64_t n) {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void sub(int64_t n) {
    current -= n;
    freed += n;
  }
};

struct MemoryStats {
  Stat allocated_bytes;  // handed out to tensors
  Stat reserved_bytes;   // held from the system (handed out + cached)
  Stat active_blocks;
  int64_t num_alloc_retries = 0;
  int64_t num_ooms = 0;
};

// Interface every allocator implements. Thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory of at least `nbytes` (nbytes == 0 gives a null pointer with
  // a no-op deleter). Throws kiln::Error when the memory cannot be had.
  virtual DataPtr allocate(size_t nbytes) = 0;
  // Gives cached, unused memory back to the system.
  virtual void empty_cache() = 0;
  virtual MemoryStats stats() const = 0;
  // (optional) Resets the peaks to the current values. Default: does nothing.
  virtual void reset_peak_stats() {}
};

// 64-byte aligned host memory, cached by size class.
Allocator& cpu_allocator();
// The host's memory and swap together, in bytes: no request for more can be
// met (Note [Requests larger than the machine] in cpu_allocator.cpp).
size_t host_memory_bytes();

}  // namespace kiln::alloc
