#include "runtime/cpu/blas_memory.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <atomic>
#include <fstream>
#include <string>

#include "kiln/error.h"

namespace kiln::cpu {
namespace {

// OpenBLAS's BUFFER_SIZE on x86-64 (common_x86_64.h), mapped as one region.
constexpr size_t kOpenBlasBuffer = size_t{128} << 20;
// Products above this many multiply-adds always take the work buffer (the
// small-matrix kernels stop at 100^3).
constexpr int64_t kSurelyBuffered = int64_t{1} << 21;

std::atomic<int> g_in_flight{0};
// The most products that ran at once, each large enough to have used a buffer.
std::atomic<int> g_proven{0};

bool strict_overcommit() {
  static const bool strict = [] {
    std::ifstream f("/proc/sys/vm/overcommit_memory");
    int mode = 0;
    return (f >> mode) && mode == 2;
  }();
  return strict;
}

// The address-space cap in bytes, 0 for none.
uint64_t address_space_cap() {
  struct rlimit r;
  if (getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY) return r.rlim_cur;
  return 0;
}

bool can_map(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  munmap(p, bytes);
  return true;
}

}  // namespace

BlasCall::BlasCall(int64_t work)
    : work_(work), in_flight_(g_in_flight.fetch_add(1, std::memory_order_acq_rel) + 1) {
  const int proven = g_proven.load(std::memory_order_acquire);
  if (KILN_LIKELY(in_flight_ <= proven)) return;
  const uint64_t cap = address_space_cap();
  if (cap == 0 && !strict_overcommit()) return;
  const size_t need = static_cast<size_t>(in_flight_ - proven) * kOpenBlasBuffer;
  if (can_map(need)) return;
  g_in_flight.fetch_sub(1, std::memory_order_acq_rel);
  KILN_FAIL("[gemm] out of memory: expected ", need,
            " bytes of address space for OpenBLAS's work buffer, got a failed mapping (",
            cap ? "address-space limit " + std::to_string(cap) + " bytes"
                : std::string("strict overcommit"),
            "); OpenBLAS would retry for ever (Note [OpenBLAS under a memory cap])");
}

BlasCall::~BlasCall() {
  if (work_ > kSurelyBuffered) {
    int proven = g_proven.load(std::memory_order_relaxed);
    while (proven < in_flight_ &&
           !g_proven.compare_exchange_weak(proven, in_flight_, std::memory_order_acq_rel)) {
    }
  }
  g_in_flight.fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace kiln::cpu
