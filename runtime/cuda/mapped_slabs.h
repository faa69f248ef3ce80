#pragma once

// Slabs of mapped pinned host memory for error words that kernels write
// (Note [Errors of replayed kernels] in runtime/cuda/launch_record.h, Note
// [Direct error slots] in jit/codegen_cuda/op_kernels/op_support.cpp).
// Pinned allocations are slow and cudaHostAlloc is refused while a stream
// captures, so slabs are allocated once, zeroed, and kept in a pool for the
// process. Under unified addressing (every 64-bit platform CUDA 13 runs on)
// a slab is usable from any device, at the address mapped_device_address
// gives.

#include <cstddef>
#include <cstdint>

namespace kiln::cuda {

inline constexpr size_t kMappedSlabWords = 1024;  // 512 slots of two words
inline constexpr size_t kMappedSlabBytes = kMappedSlabWords * sizeof(int64_t);

// A zeroed slab, from the pool or newly allocated (errors name `device`).
int64_t* take_mapped_slab(int device);
// Gives `slab` back, zeroing it; null is ignored.
void give_mapped_slab(int64_t* slab);
// The address kernels write `slab` through.
int64_t* mapped_device_address(int64_t* slab, int device);

}  // namespace kiln::cuda
