#pragma once

// Folds what follows a matrix product into the product's epilogue (Note
// [Matmul epilogues] in runtime/cuda/blas_lt.h), on CUDA. A product's output
// read by one node only, and held by no tensor outside the trace, absorbs
// that node:
//   addmm(bias, a, b) (beta = alpha = 1) + relu / gelu(tanh)
//       -> addmm_act(bias, a, b, act)
//   linear(x, w, bias?) + relu / gelu(tanh)
//       -> linear_act(x, w, bias, act)
//   linear(x, w, bias?) [+ act] + add(y, r) or add(r, y) (alpha 1, r of y's
//   shape and dtype)
//       -> linear_act(x, w, bias, act, residual=r)
//   linear(layer_norm(x) or rms_norm(x), ...) over the last dim, few rows,
//   or matmul(that norm, w.t()) for a row-major weight w (a tied LM head)
//       -> linear_act(x, ..., norm=..., norm_weight, norm_bias, norm_eps)
//          (Note [Norm prologues])
// On CUDA the product computes these in the same kernel (cuBLASLt's
// epilogues and C operand, the skinny kernel's prologue and epilogue). On the
// CPU nothing is folded: addmm_act and linear_act there run the eager ops
// after the product, a scalar pass, where leaving the activation to a fused
// kernel of the CPU code generator (vector code) and the add to the next
// group (a LayerNorm's storing prologue, Note [Storing prologues]) is faster
// (GPT-2 (1,1) on 2 cores: the compiled call went from 1% slower than eager
// to 1% faster, kiln-paired). The fused node takes the product's place in
// the trace, so r must be final there: no node between the product and the
// add writes r's storage. Runs before dead-code elimination and fusion.

#include <vector>

#include "jit/record/trace_buffer.h"

namespace kiln::jit {

// Rewrites `nodes` in place; returns how many nodes were absorbed into products.
size_t fuse_matmul_epilogues(std::vector<Node>& nodes);

}  // namespace kiln::jit
