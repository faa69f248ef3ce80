#pragma once

// Folds the merge of attention heads into the attention on CUDA (Note
// [Merged heads] in jit/codegen_cuda/op_kernels/attention.cpp):
//   o = scaled_dot_product_attention(q, k, v, ...)        [..., H, L, Ev]
//   e = empty([..., L, H, Ev]); copy_(e, o.transpose(-3, -2))
//       -> e = attention_merged_heads(q, k, v, ...)
// (transpose(1, 2).reshape(...) and .contiguous() record the empty and the
// copy). Only when nothing but that copy reads o, nothing outside the trace
// holds it, and nothing but the empty and the copy touches e before the
// copy. The fused node takes the attention's place: its operands are read
// when they were, and e gets written earlier, where no node reads it yet.
// Runs before dead-code elimination and fusion, beside the matmul epilogues.

#include <cstddef>
#include <vector>

#include "jit/record/trace_buffer.h"

namespace kiln::jit {

// Rewrites `nodes` in place; returns how many nodes it removed (two per fold).
size_t fold_merged_heads(std::vector<Node>& nodes);

}  // namespace kiln::jit
