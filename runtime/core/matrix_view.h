#pragma once

// Tensors seen as matrices, the same for every backend: the CPU BLAS path
// (runtime/cpu/blas_tensor.cpp) and cuBLASLt (runtime/cuda/blas_lt_layout.cpp)
// fold batches into rows and expand batch dims alike, and linear runs as one
// 2-D product on both.

#include <optional>

#include "kiln/tensor.h"

namespace kiln {

// When dims [0, nd - 1) of `t` (batch dims and rows) form one evenly strided
// run, the stride of that run: the batch folds into the rows of one matrix.
std::optional<int64_t> folded_row_stride(const Tensor& t);

// True when every batch dim of `t` (all but the last two) has size 1 or stride 0.
bool batch_is_broadcast(const Tensor& t);

// True when `a` and `b` are non-empty views of one storage.
bool shares_storage(const Tensor& a, const Tensor& b);

// A view of `t` expanded to `batch` + its own last `keep` dims: missing and
// size-1 batch dims get stride 0 (matmul's broadcasting of batch dims).
Tensor expand_batch(const Tensor& t, IntArrayRef batch, int64_t keep);

// `t` (at least 1-D) seen as a matrix [numel / size(-1), size(-1)]: a view
// when its leading dims fold into evenly strided rows, else a contiguous copy.
Tensor as_matrix(const Tensor& t);

// True when a tensor of `from` sizes broadcasts to `to` without changing `to`.
bool broadcasts_to(IntArrayRef from, IntArrayRef to);

// linear(input, weight) as one product out2 = in2 @ w2: `out` (contiguous,
// of linear's result shape) as [rows, out_features], `input` as [rows,
// in_features] (as_matrix) and the weight, [out_features, in_features] or
// [in_features], read transposed as [in_features, out_features] (not copied).
struct LinearMatrices {
  Tensor out2, in2, w2;
};
LinearMatrices linear_matrices(const Tensor& out, const Tensor& input, const Tensor& weight);

}  // namespace kiln
