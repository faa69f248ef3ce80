#pragma once

// Human-readable sizes and the memory_summary() table (Note [Memory summary]).

#include <cstddef>
#include <cstdint>
#include <string>

#include "allocator/caching_allocator.h"

namespace kiln::alloc {

// "512 B", "1.50 KiB", "20.00 MiB", "79.19 GiB".
std::string format_bytes(int64_t bytes);

// The table for one device. `cap` is the memory-fraction cap in bytes (0: none).
std::string format_memory_summary(const CachingStats& stats, const std::string& device,
                                  size_t total, size_t free_bytes, size_t cap);

}  // namespace kiln::alloc
