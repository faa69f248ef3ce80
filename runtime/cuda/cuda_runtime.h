#pragma once

// The CUDA glue the rest of runtime/ calls. Built from runtime/cuda/*.cpp when
// the toolkit is present, else from runtime/cuda/no_cuda.cpp, whose functions
// say "kiln was built without CUDA" (is_available() is false).

#include <cstddef>

#include "allocator/allocator.h"
#include "kiln/cuda.h"

namespace kiln::cuda {

// True when this build has the CUDA backend (the toolkit was there at build time).
bool built();

// Memory for a tensor on `device`, on the current stream of that device.
alloc::DataPtr allocate(size_t nbytes, Device device);
// Copies `nbytes` between any two of host / device memory, ordered on the current stream;
// returns after the copy finished when either side is pageable host memory.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

}  // namespace kiln::cuda
