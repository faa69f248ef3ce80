#include "runtime/core/checked_sizes.h"

#include <limits>

#include "kiln/error.h"

namespace kiln {

namespace {

constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

// The elements of int64 bytes a dtype can have.
int64_t max_elements(DType dtype) {
  return kMaxInt64 / static_cast<int64_t>(itemsize(dtype));
}

}  // namespace

int64_t checked_numel(IntArrayRef sizes, const char* op) {
  int64_t numel = 1, span = 1;  // span: the product of max(size, 1)
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, "[", op, "] expected non-negative sizes, got ", sizes);
    KILN_CHECK(!__builtin_mul_overflow(span, s > 1 ? s : 1, &span), "[", op,
               "] expected a size whose element count fits in int64, got ", sizes);
    numel *= s;  // at most span
  }
  return numel;
}

int64_t checked_bytes_numel(IntArrayRef sizes, DType dtype, const char* op) {
  const int64_t numel = checked_numel(sizes, op);
  int64_t span = 1;
  for (int64_t s : sizes) span *= s > 1 ? s : 1;  // checked by checked_numel
  KILN_CHECK(span <= max_elements(dtype), "[", op,
             "] expected a size whose bytes fit in int64, got ", sizes, " of ", dtype);
  return numel;
}

int64_t checked_extent(IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset, DType dtype,
                       const char* op) {
  KILN_CHECK(sizes.size() == strides.size(), "[", op, "] expected as many strides as sizes (",
             sizes.size(), "), got ", strides.size());
  KILN_CHECK(storage_offset >= 0, "[", op, "] expected a non-negative storage offset, got ",
             storage_offset);
  const int64_t numel = checked_bytes_numel(sizes, dtype, op);
  for (int64_t st : strides) {
    KILN_CHECK(st >= 0, "[", op, "] expected non-negative strides, got ", strides);
  }
  // Even an empty tensor's offset is scaled to bytes (its data pointer).
  int64_t extent = storage_offset;
  bool ok = storage_offset <= max_elements(dtype);
  if (numel > 0) {
    ok = ok && !__builtin_add_overflow(extent, 1, &extent);
    for (size_t i = 0; i < sizes.size() && ok; ++i) {
      int64_t reach;
      ok = !__builtin_mul_overflow(sizes[i] - 1, strides[i], &reach) &&
           !__builtin_add_overflow(extent, reach, &extent);
    }
    ok = ok && extent <= max_elements(dtype);
  } else {
    extent = 0;
  }
  KILN_CHECK(ok, "[", op,
             "] expected sizes and strides whose storage extent fits in int64 bytes, got sizes ",
             sizes, ", strides ", strides, " and storage offset ", storage_offset, " of ", dtype);
  return extent;
}

int64_t checked_add(int64_t a, int64_t b, const char* op) {
  int64_t r;
  KILN_CHECK(!__builtin_add_overflow(a, b, &r), "[", op, "] expected sizes that fit int64, got ", a,
             " + ", b);
  return r;
}

int64_t checked_mul(int64_t a, int64_t b, const char* op) {
  int64_t r;
  KILN_CHECK(!__builtin_mul_overflow(a, b, &r), "[", op, "] expected sizes that fit int64, got ", a,
             " * ", b);
  return r;
}

}  // namespace kiln
