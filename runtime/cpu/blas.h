#pragma once

// Matrix products on raw strided memory: C = beta * C + alpha * A @ B, one
// matrix or a batch of them. The tensor-level entry points are in blas_tensor.h.
//
// Note [BLAS layouts]
// float32 and float64 go to OpenBLAS (sgemm/dgemm). A matrix whose column
// stride is 1 is passed row-major with its row stride as the leading dimension;
// one whose row stride is 1 (a transposed view) is passed with the transpose
// flag and its column stride as the leading dimension, so t() and transpose()
// never cost a copy. Only strides BLAS cannot express (two non-unit strides, a
// stride-0 broadcast) are copied to a contiguous scratch buffer first. An
// output that is column-major is computed as C^T = B^T A^T; any other output
// layout goes through a scratch buffer.
// float16 and bfloat16 convert their operands to float32, run sgemm and round
// once at the end, as PyTorch's CPU kernels do. Integer dtypes take a plain
// loop whose arithmetic wraps like the integer type's own.

#include <cstdint>

#include "kiln/dtype.h"
#include "kiln/scalar.h"

namespace kiln::cpu {

// A strided matrix: element (i, j) lives `i * row_stride + j * col_stride`
// elements past `data` (strides in elements, not bytes).
struct MatrixRef {
  char* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
  int64_t col_stride = 0;

  MatrixRef t() const { return {data, cols, rows, col_stride, row_stride}; }
};

// A batch of matrices that share sizes and strides: entry b starts
// `offsets[b]` elements past each MatrixRef's `data`. Offsets may repeat
// (a broadcast operand). Null offsets mean a single matrix.
struct GemmBatch {
  int64_t count = 1;
  const int64_t* c_offsets = nullptr;
  const int64_t* a_offsets = nullptr;
  const int64_t* b_offsets = nullptr;
};

// C = beta * C + alpha * A @ B for every entry of `batch`; all three of
// `dtype` (not bool). A is [m, k], B is [k, n], C is [m, n]. When
// `beta_is_zero`, C is written without being read (NaN and inf in C do not
// propagate). C must not overlap A or B. Batches of small matrices run in
// parallel across TBB workers; large ones rely on OpenBLAS's own threads.
void gemm(DType dtype, const MatrixRef& c, const MatrixRef& a, const MatrixRef& b,
          const Scalar& alpha, const Scalar& beta, bool beta_is_zero, const GemmBatch& batch = {});

// True when `s` is zero once converted to `dtype` (0.5 is zero for integers,
// as PyTorch converts beta and alpha to the operands' type).
bool scalar_is_zero(const Scalar& s, DType dtype);

}  // namespace kiln::cpu
