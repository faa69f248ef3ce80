#pragma once

// Matrix products on tensors, shared by matmul, linear and attention: the
// checks every product makes and the batched GEMM over strided, broadcast
// operands (see Note [BLAS layouts] in blas.h).

#include <initializer_list>

#include "kiln/tensor.h"
#include "runtime/core/matrix_view.h"  // expand_batch, as_matrix, broadcasts_to

namespace kiln::cpu {

// out[..., m, n] = beta * out + alpha * a[..., m, k] @ b[..., k, n] on CPU
// tensors of one dtype. The three have the same rank (>= 2) and batch sizes;
// `a` and `b` may be expanded (stride-0) views. A beta that is zero for the
// dtype writes `out` without reading it. `out` may share storage with `a` or
// `b` (the product then goes through a scratch tensor).
void matmul_into(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& beta = 0,
                 const Scalar& alpha = 1);

// Throws unless `a` and `b` have one dtype that products accept (not bool):
// "[mm] expected both operands of the same dtype, got float32 for self and float64 for mat2".
void check_product_dtypes(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                          const char* b_name);

// Where a product's result lives: meta when any operand is a meta tensor,
// else the CPU (every operand is checked to be there).
Device product_device(const char* op, std::initializer_list<const Tensor*> operands);

}  // namespace kiln::cpu
