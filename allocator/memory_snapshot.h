#pragma once

// kiln::cuda::memory_snapshot()'s data from the allocator's segments, and its
// JSON (Note [Memory snapshot JSON]). No CUDA here: the tests build snapshots
// from the fake device.

#include <vector>

#include "allocator/caching_allocator.h"
#include "kiln/cuda.h"

namespace kiln::alloc {

// Appends `segments` (DeviceCachingAllocator::snapshot() of device `device`) to `out`.
void append_snapshot(cuda::MemorySnapshot& out, const std::vector<SegmentInfo>& segments,
                     int device);

}  // namespace kiln::alloc
