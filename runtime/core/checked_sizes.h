#pragma once

// Checked arithmetic on sizes, strides and byte counts that come from users.
//
// Note [Checked size arithmetic]
// Sizes, strides and offsets reach kiln from users: factory and view
// arguments, as_strided, empty_strided, reshape, call_op, checkpoint headers.
// Every count derived from them (element count, storage extent, bytes) is
// computed here, with overflow checks, so that no tensor (meta tensors
// included) has a geometry whose arithmetic does not fit int64:
//   - sizes are non-negative, and the product of max(size, 1) fits int64, so
//     even an empty tensor's row-major strides do ([0, 2^62, 2^62] is
//     refused, as PyTorch refuses it);
//   - strides are non-negative, and the storage extent, offset + 1 +
//     sum((size - 1) * stride) elements, fits int64 in bytes.
// A view of such a tensor stays inside its base's extent, so kernels and the
// code generators index with plain int64 arithmetic. Meta tensors obey the
// same rule because lazy recording takes its geometry from the Meta kernels:
// an op refused in eager mode is refused at the same call in lazy mode. An
// op whose output size is a sum or product of sizes (cat, repeat, pad) uses
// checked_add / checked_mul, then makes its output through empty_tensor,
// which checks the bytes.

#include <cstdint>

#include "kiln/array_ref.h"
#include "kiln/dtype.h"

namespace kiln {

// The element count of `sizes`. Throws "[op] expected non-negative sizes, got
// [...]" or "[op] expected a size whose element count fits in int64, got [...]".
int64_t checked_numel(IntArrayRef sizes, const char* op);
// checked_numel, and the element count times the dtype's item size fits
// int64; returns the element count. Throws "[op] expected a size whose bytes
// fit in int64, got [...] of float32".
int64_t checked_bytes_numel(IntArrayRef sizes, DType dtype, const char* op);
// The storage, in elements, that sizes, strides and offset reach: 0 for no
// elements, else offset + 1 + sum((size - 1) * stride). Checks the sizes as
// checked_bytes_numel does, non-negative strides and offset, and that the
// extent fits int64 in bytes ("[op] expected sizes and strides whose storage
// extent fits in int64 bytes, got ...").
int64_t checked_extent(IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset, DType dtype,
                       const char* op);
// a + b and a * b, throwing "[op] expected sizes that fit int64, got a + b".
int64_t checked_add(int64_t a, int64_t b, const char* op);
int64_t checked_mul(int64_t a, int64_t b, const char* op);

}  // namespace kiln
