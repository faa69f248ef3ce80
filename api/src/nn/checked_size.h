#pragma once

// Size arithmetic on sizes read from files (checkpoint headers, configs): an
// overflow is the file's mistake, reported as kiln::Error with its context.
// Stands in for runtime/'s checked-size helper until api/ can use that one.

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/array_ref.h"
#include "kiln/error.h"

namespace kiln::nn {

inline int64_t checked_mul(int64_t a, int64_t b, const char* op, const std::string& ctx) {
  int64_t r = 0;
  KILN_CHECK(a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, &r), "[", op,
             "] expected a size whose bytes fit in int64 for ", ctx, ", got ", a, " * ", b);
  return r;
}

inline int64_t checked_numel(const std::vector<int64_t>& shape, const char* op,
                             const std::string& ctx) {
  int64_t n = 1;
  for (int64_t s : shape) {
    KILN_CHECK(s >= 0 && !__builtin_mul_overflow(n, s, &n), "[", op,
               "] expected a shape whose element count fits in int64 for ", ctx, ", got ",
               IntArrayRef(shape));
  }
  return n;
}

}  // namespace kiln::nn
