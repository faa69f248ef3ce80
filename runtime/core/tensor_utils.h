#pragma once

// Helpers every kernel and meta function uses: geometry, dims, allocation.

#include <optional>

#include "kiln/tensor.h"
#include "runtime/core/checked_sizes.h"

namespace kiln {

// Row-major strides for `sizes` (size-1 dims get the stride they would have).
DimVector contiguous_strides(IntArrayRef sizes);
// Maps a possibly negative dim into [0, ndim); a 0-dim tensor accepts -1 and 0.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// The dims set in a list such as {1, -1}, as a bitmask; checks repeats. Empty
// `dims` means "all dims" when `empty_is_all`.
uint64_t dim_mask(IntArrayRef dims, int64_t ndim, const char* op, bool empty_is_all = true);
// The dims from outermost to innermost in memory: by decreasing stride, ties
// in their own order.
DimVector dims_by_stride(IntArrayRef strides);
// The index (one per dim) of the element `offset` elements past the first of
// a tensor of `sizes` and `strides` whose dims nest without overlapping (a
// dense tensor in any order of dims, or a slice of one): dims taken by
// decreasing stride peel the offset apart. False where no element sits there.
bool index_at_offset(IntArrayRef sizes, IntArrayRef strides, int64_t offset,
                     std::vector<int64_t>* index);
// True where two elements of a tensor of these sizes and strides may share an
// address (an expanded dim, an unfold whose windows meet, an as_strided view
// onto itself): its dims by increasing stride do not each step past the span
// of those inside it. False proves every element its own address.
bool may_overlap_itself(IntArrayRef sizes, IntArrayRef strides);
// True when a tensor of these sizes and strides is laid out row-major without gaps.
bool compute_contiguous(IntArrayRef sizes, IntArrayRef strides);
// True when the tensor's elements fill a gapless block, one per address, in
// some order of its dims (a transpose of a contiguous tensor; not an
// expanded or a sliced-with-steps one): PyTorch's is_non_overlapping_and_dense.
bool non_overlapping_and_dense(const Tensor& t);

// A fresh, uninitialized tensor (storage from the device's allocator; meta
// tensors get none). No dispatch: kernels use these for their outputs. Sizes
// are checked as Note [Checked size arithmetic] says; errors name `op`.
Tensor empty_tensor(IntArrayRef sizes, DType dtype, Device device, const char* op = "empty");
// empty_tensor's geometry with a storage that has no memory yet (lazy outputs).
Tensor unallocated_tensor(IntArrayRef sizes, DType dtype, Device device, const char* op = "empty");
Tensor empty_strided_tensor(IntArrayRef sizes, IntArrayRef strides, DType dtype, Device device,
                            const char* op = "empty_strided");
Tensor empty_like_tensor(const Tensor& t);
// A view of `base` that shares its storage (or, for meta tensors, its nothing).
Tensor make_view(const Tensor& base, IntArrayRef sizes, IntArrayRef strides,
                 int64_t storage_offset);
// Resizes an out= tensor to `shape` as PyTorch's resize_ does: row-major
// strides, the same storage offset, the storage grown by grow_storage when
// short. Meta tensors only change geometry.
void resize_out(const Tensor& out, IntArrayRef shape);
// Gives `t` a storage of at least `nbytes`: kept when large enough, else
// replaced by a larger one that starts with the old bytes (elements an op does
// not write keep them, as with resize_). Views sharing the old one keep it.
void grow_storage(const Tensor& t, size_t nbytes);
// A 0-dim CPU tensor holding `s`, marked as a wrapped number for type promotion.
Tensor wrap_scalar(const Scalar& s);

// Note [Meta twins]
// Lazy recording and the CUDA op kernels compute shapes, dtypes and argument
// errors by running an op's Meta kernel, which is its CPU kernel, on meta
// twins of the arguments. A few CPU kernels refuse dtypes that only the CPU
// lacks (PyTorch 1.13 has no float16 cumsum, prod, var or topk on the CPU);
// such a refusal must not reach a CUDA op. A twin therefore remembers the
// device it stands for, and the CPU-only refusals ask cpu_kernel_for(t).
Tensor meta_twin(const Tensor& t);
// True when `t` is a CPU tensor or a meta one standing for a CPU tensor (or
// made as meta): what the CPU-only refusals apply to.
bool cpu_kernel_for(const Tensor& t);
// A 0-dim tensor of `dtype` on `device` holding `s`.
Tensor scalar_tensor(const Scalar& s, DType dtype, Device device = Device::cpu());

// Throws "[op] expected argument 'name' to be defined" for an undefined tensor.
void check_defined(const Tensor& t, const char* op, const char* name);
// Throws unless the tensor's dtype is in `allowed` (a bitmask over DType).
uint32_t dtype_bit(DType t);
void check_dtype_in(const Tensor& t, uint32_t allowed, const char* op, const char* name);
constexpr uint32_t kFloatingMask = (1u << 6) | (1u << 7) | (1u << 8) | (1u << 9);
constexpr uint32_t kIntegralMask = 0x3eu;  // uint8..int64, no bool
constexpr uint32_t kAllMask = 0x3ffu;

// Reads element `index` (a flat index into the storage, in elements) as a double / int64.
double load_as_double(const void* base, DType t, int64_t index);
Scalar load_scalar(const void* base, DType t, int64_t index);
// Writes `s` converted to dtype `t` at `dst`.
void store_scalar(void* dst, DType t, const Scalar& s);
// True when PyTorch's checked Scalar conversion to `t` would refuse `s`:
// integers out of range (negative integers may wrap into unsigned types),
// finite floats beyond a floating type's range, floats out of an integer
// type's range and NaN into integers. Bool targets and values never overflow.
bool scalar_overflows(const Scalar& s, DType t);
// Throws "[op] value 300 cannot be converted to int8 without overflow" when
// scalar_overflows: what fill_, full, masked_fill_, pad and the ranges check
// before they store a user's value.
void check_convertible(const Scalar& value, DType dtype, const char* op);
// The dtype's machine epsilon (what rms_norm uses when eps is unset, as PyTorch).
double machine_epsilon(DType t);

}  // namespace kiln
