#pragma once

// The Lazy key's recording paths (Note [Lazy trace]): the boxed fallback every
// op can take, and the pieces the typed pointwise kernels of
// lazy_pointwise.cpp share with it (Note [Typed lazy recording]).

#include "kiln/dispatch.h"

namespace kiln::jit {

// Records `op` called with the normalized `stack` (output geometry from its
// Meta kernel) or runs it eagerly when it cannot be traced; leaves the results.
void lazy_fallback(const OperatorEntry& op, Stack& stack);

// A lazy output of the given geometry: a fresh storage with no memory yet.
Tensor fresh_output(IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset, DType dtype,
                    Device device);

}  // namespace kiln::jit
