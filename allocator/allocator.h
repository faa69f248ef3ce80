#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/error.h"
#include "kiln/impl/current_op.h"

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

// Note [Out of memory names the op]
// An allocator's out-of-memory error raised while an op runs (Note [The op
// being run]) leads with the op, which is what the user called and can act
// on, and names the allocator beside its figures:
//   [mm] out of memory: tried to allocate 64 bytes (cpu allocator: 0 bytes allocated, ...)
// Outside any op (a lazy flush's fused kernels and arenas, a direct
// allocate()) it reads as it always has:
//   [cpu allocator] out of memory: tried to allocate 64 bytes (0 bytes allocated, ...)
// The strings are built only when the error is.

// "[op]" while an op runs on this thread, else "[<allocator>]".
inline std::string oom_tag(std::string_view allocator) {
  const char* op = detail::current_op();
  return detail::str('[', op ? std::string_view(op) : allocator, ']');
}
// "<allocator>: " while an op runs on this thread (the op leads the message), else "".
inline std::string oom_figures_of(std::string_view allocator) {
  return detail::current_op() ? detail::str(allocator, ": ") : std::string();
}

}  // namespace kiln::alloc
