#pragma once

// Helpers shared by the shape and indexing kernels (index_*.cpp, shape_*.cpp):
// strided copies that ignore dtype, PyTorch's overlap checks, checked
// number conversions and index reading.

#include <cstdint>
#include <optional>
#include <vector>

#include "kiln/tensor.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::cpu {

// Copies elements of `elem` bytes between two layouts of the same `sizes`
// (strides in elements, any sign). Merges dims that step as one, uses memcpy
// for dense runs and splits large copies across workers.
void copy_strided(char* dst, IntArrayRef dst_strides, const char* src, IntArrayRef src_strides,
                  IntArrayRef sizes, size_t elem);

// Sets every element of a strided layout to the all-zero bit pattern (0, +0.0, false).
void zero_strided(char* dst, IntArrayRef strides, IntArrayRef sizes, size_t elem);

// Note [Writes into shared storage]
// An op that writes a tensor (out=, in place) while reading others refuses,
// as PyTorch does, a written tensor with repeated elements (stride 0) and an
// input that is dense and overlaps it. An input that shares the storage in a
// layout those checks cannot judge is read from a copy, so results never
// depend on the order of writes.

// Throws when writing `t` would write one memory location twice (a size > 1
// dim of stride 0, as from expand), as PyTorch's assert_no_internal_overlap.
void check_no_internal_overlap(const Tensor& t, const char* op);
// Throws when `out` and `in` are dense and share memory, as PyTorch's
// assert_no_overlap (layouts it cannot judge pass).
void check_no_overlap(const Tensor& out, const Tensor& in, const char* op);
// True when `a` and `b` share some bytes of one storage, both
// non_overlapping_and_dense, without being the same elements in the same
// order: what PyTorch's assert_no_partial_overlap refuses to write one of
// while reading the other (TensorIter's outputs, copy_; layouts it cannot
// judge pass). Reads offsets, not data: storages with no memory yet (lazy)
// are judged too.
bool partly_overlaps(const Tensor& a, const Tensor& b);
// True when `a` and `b` use the same storage (the caller should copy one).
bool same_storage(const Tensor& a, const Tensor& b);

// The shared value check (runtime/core/tensor_utils.h), also reached as cpu::.
using kiln::check_convertible;

// The values of an int32 or int64 index tensor as int64, in row-major order.
std::vector<int64_t> read_indices(const Tensor& index);
// Throws "[op] index 7 is out of bounds for dimension 0 with size 5" for the
// first index outside [0, size).
void check_indices(const std::vector<int64_t>& idx, int64_t size, int64_t dim, const char* op);

// The values of an int32 or int64 `index` in row-major order where they are
// on the host: a CPU tensor that is not pending, read in place, so that
// nothing runs (Note [Composite ops name themselves] in
// runtime/core/composite_errors.h); nullopt otherwise.
std::optional<std::vector<int64_t>> host_indices(const Tensor& index);

// Sizes and strides of `t` with a 0-dim tensor read as a 1-element vector
// (PyTorch's ensure_nonempty for gather/scatter).
DimVector nonempty_sizes(const Tensor& t);
DimVector nonempty_strides(const Tensor& t);

// `sizes` without entry `dim` (an empty list stays empty).
DimVector drop_dim(IntArrayRef sizes, int64_t dim);

}  // namespace kiln::cpu
