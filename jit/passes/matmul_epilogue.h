#pragma once

// Folds an activation into the matrix product that feeds it (Note [Matmul
// epilogues] in runtime/cuda/blas_lt.h): addmm(bias, a, b) with beta = alpha
// = 1, or linear(x, w, bias) with 2-D x and w and a bias, followed by relu(y)
// or gelu(y, approximate="tanh"), becomes one addmm_act(bias, a, b, act) node
// when the activation is the product's only reader and no tensor outside the
// trace holds the product. Runs before dead-code elimination and fusion.

#include <vector>

#include "jit/record/trace_buffer.h"

namespace kiln::jit {

// Rewrites `nodes` in place; returns how many pairs became one node.
size_t fuse_matmul_epilogues(std::vector<Node>& nodes);

}  // namespace kiln::jit
