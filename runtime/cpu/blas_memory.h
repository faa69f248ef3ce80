#pragma once

// Refusing an OpenBLAS product that would hang for want of address space.
//
// Note [OpenBLAS under a memory cap]
// OpenBLAS (0.3.21, Debian's pthread build) runs a level-3 call in a work
// buffer of its own: 128 MiB of address space (BUFFER_SIZE, 32 << 22 on
// x86-64), mapped the first time a calling thread needs one and kept for the
// process's life in a shared pool (its worker threads map theirs when the
// library loads). When that mapping fails (an address-space cap, `ulimit -v`,
// or strict overcommit) blas_memory_alloc retries, mmap then malloc, in a loop
// that never ends (driver/others/memory.c): the call hangs for ever instead of
// failing. Products of up to 100^3 multiply-adds may skip the buffer (the
// small-matrix kernels), so the hang shows on the first large product made
// under the cap.
//
// kiln cannot hook OpenBLAS's allocator, so BlasCall checks first: it counts
// the products running in OpenBLAS at once (each may need a buffer of its
// own), remembers how many ran at once and finished when large enough to
// have used the pool (the pool is never shrunk, so that many buffers exist),
// and only when more may be needed, and the process has a cap (a finite
// RLIMIT_AS, or overcommit_memory = 2), maps and unmaps the missing buffers'
// worth of address space the way OpenBLAS maps it. When that fails the
// product raises kiln::Error. A steady process pays two atomic additions per
// product. The check narrows the hang to a race it cannot close: memory taken
// by another thread between the check and OpenBLAS's own mapping.

#include <cstdint>

namespace kiln::cpu {

// Scope of one call into OpenBLAS gemm of `work` = m * n * k multiply-adds
// (saturated). Throws "[gemm] out of memory: ..." when OpenBLAS may need a work
// buffer that cannot be mapped.
class BlasCall {
 public:
  explicit BlasCall(int64_t work);
  ~BlasCall();
  BlasCall(const BlasCall&) = delete;
  BlasCall& operator=(const BlasCall&) = delete;

 private:
  int64_t work_;
  int in_flight_;
};

}  // namespace kiln::cpu
