#pragma once

// How a product of strided tensors becomes one cuBLASLt problem (Note
// [cuBLASLt layouts] in blas_lt.h): each matrix as column-major, read
// transposed or not; batch dims as one strided batch plus an outer loop.
// Host logic only: no CUDA header, no device.

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::cuda {

// A matrix as cuBLASLt takes it: column-major rows x cols with leading
// dimension ld, read transposed when `trans` (Note [cuBLASLt layouts]).
struct LtMatrix {
  bool trans = false;
  int64_t rows = 0, cols = 0, ld = 0;
};

// A column-major problem D[m, n] = act(alpha * op(A)[m, k] @ op(B)[k, n] + beta * D + bias)
// over `batch` strided entries; C is D.
struct Problem {
  LtMatrix a, b, d;
  int64_t m = 0, n = 0, k = 0;
  int32_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;
  bool swapped = false;  // A is the tensor b, B the tensor a, D out^T
  // Element offsets (A, B, D) of the outer batch entries (dims that did not collapse).
  std::vector<std::array<int64_t, 3>> offsets{{0, 0, 0}};
};

// The cuBLASLt problem for out = a @ b (out, a and b of one rank >= 2 and the
// same batch sizes), with `swap` computing out^T = b^T a^T. Empty when some
// layout cannot be expressed (two non-unit strides, entries of a batch that
// write the same memory).
std::optional<Problem> plan_problem(const Tensor& out, const Tensor& a, const Tensor& b, bool swap);

}  // namespace kiln::cuda
