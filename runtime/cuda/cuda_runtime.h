#pragma once

// The CUDA glue the rest of runtime/ (and jit/, graphs/) calls. Built from
// runtime/cuda/*.cpp when the toolkit is present, else from
// runtime/cuda/no_cuda.cpp, whose functions say "kiln was built without CUDA"
// (is_available() is false). No CUDA header here: handles are void*.

#include <cstddef>

#include "allocator/allocator.h"
#include "allocator/caching_allocator.h"
#include "allocator/host_caching_allocator.h"
#include "kiln/cuda.h"

namespace kiln::cuda {

// Throws "[op] expected a cuda device index below N, got cuda:K" unless `d` exists.
void check_device(Device d, const char* op);

// Memory for a tensor on `device`, from the caching allocator, on the current
// stream of that device.
alloc::DataPtr allocate(size_t nbytes, Device device);
// The device's caching allocator (graphs use its private pools).
alloc::DeviceCachingAllocator& device_allocator(int device);
// Page-locked host memory for staging copies (Note [Pinned staging]).
alloc::HostCachingAllocator& pinned_allocator();
// The allocator's name for a stream.
alloc::StreamId stream_id(const Stream& s);
// Whether the current stream of `device` is being captured into a CUDA graph
// (work launched now is recorded, not run; nothing may wait for it).
bool capturing(Device device);

// Copies `nbytes` between any two of host / device memory, ordered on the
// current stream of the device side (the destination's for device to device);
// returns after the copy finished when either side is pageable host memory.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

// Note [Device copies through generated kernels]
// copy_ between tensors on one device that memory copies cannot do (a dtype
// change, or a layout needing more than a few 2-D copies) runs a generated
// kernel: jit/codegen_cuda/copy_cuda.cpp, reached through its slot in
// runtime/core/hooks.h (Note [Runtime hooks]), as runtime/ never includes jit/.

}  // namespace kiln::cuda
