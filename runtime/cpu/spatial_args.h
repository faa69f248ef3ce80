#pragma once

// Arguments of the windowed composites (conv, pooling) that PyTorch takes as
// one int for every spatial dim or one per dim.

#include <cstdint>

#include "kiln/array_ref.h"
#include "kiln/error.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::cpu {

// `values` (one for every spatial dim, or one per dim) as one per dim, each
// at least `min`; `fallback` when empty and given. Raises "[op] expected
// stride to be one int or a list of 2 (one per spatial dim), got [1, 2, 3]".
inline DimVector spatial_per_dim(const char* op, int64_t nd, IntArrayRef values, const char* name,
                                 int64_t min, const DimVector* fallback = nullptr) {
  if (values.empty() && fallback) return *fallback;
  KILN_CHECK(values.size() == 1 || static_cast<int64_t>(values.size()) == nd, "[", op,
             "] expected ", name, " to be ", fallback ? "empty (kernel_size), " : "",
             "one int or a list of ", nd, " (one per spatial dim), got ", values);
  DimVector out;
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t v = values[values.size() == 1 ? 0 : static_cast<size_t>(d)];
    KILN_CHECK(v >= min, "[", op, "] expected ", name, " >= ", min, " in every spatial dim, got ",
               values);
    out.push_back(v);
  }
  return out;
}

}  // namespace kiln::cpu
