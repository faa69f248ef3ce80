#pragma once

// How a new tensor shaped like an existing one is laid out.

#include <functional>

#include "kiln/tensor.h"

namespace kiln {

// Note [Preserved layout]
// An op that PyTorch gives memory_format=preserve (clone, to, the *_like
// factories, flip, sort, constant_pad_nd's copy) makes its output with self's
// strides where they describe a dense, non-overlapping layout (a transposed
// matrix stays transposed), else with dense strides whose dims nest in the
// order of self's strides (a transposed, column-sliced matrix comes out
// transposed and gapless), as PyTorch's empty_like does. Contiguous inputs get
// row-major strides. The CPU kernels and their meta twins (Note [Meta twins])
// both allocate through empty_like_preserve, so a lazy trace records the
// geometry the eager op returns.
//
// PyTorch's infer_dense_strides: dense strides for `sizes` that nest the dims
// in the order of `strides` (ties go to the smaller size first; a stride-0
// dim keeps its place among the others).
DimVector infer_dense_strides(IntArrayRef sizes, IntArrayRef strides);
// The `nd` dims from the innermost out, as PyTorch's TensorIterator orders
// them: an insertion sort from row-major order in which `outside(a, b)` > 0
// moves dim a outside dim b, < 0 keeps it inside, and 0 (no opinion) looks
// past b. The ties it leaves keep row-major order.
DimVector dims_inner_first(int64_t nd, const std::function<int(int64_t, int64_t)>& outside);
// The strides of a fresh tensor shaped like `self` by Note [Preserved layout].
DimVector preserved_strides(const Tensor& self);
// A fresh tensor shaped like `self`, laid out by Note [Preserved layout].
Tensor empty_like_preserve(const Tensor& self, DType dtype, Device device,
                           const char* op = "empty_like");

}  // namespace kiln
