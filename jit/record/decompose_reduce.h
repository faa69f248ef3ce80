#pragma once

// How reductions and row normalizations enter a reduction group (Note
// [Reduction kernels]): which dims they reduce, what their input becomes in
// the prologue, and what their result is in terms of the reduction's float32
// result in the epilogue. An op or call outside these stays an extern node.

#include <cstdint>
#include <functional>
#include <vector>

#include "jit/ir/reduction_ir.h"
#include "jit/record/decompose.h"

namespace kiln::jit {

struct ReductionSpec {
  RowOp op = RowOp::Sum;
  std::vector<bool> reduced;  // per input dim
  bool keepdim = false;
  int64_t correction = 0;
  double eps = 0;
  bool sqrt_result = false;      // std: sqrt of var, taken by the reduction kernel
  DType input_dtype = kFloat32;  // what the input is rounded to before reducing (dtype=)
};

// Fills `spec` when `node` is a reduction or row normalization the groups
// cover (float32/float16/bfloat16 data); false otherwise.
bool match_reduction(const Node& node, ReductionSpec* spec);

// The value reduced, from the value of the node's input `x`.
int32_t emit_reduction_prologue(KernelBuilder& b, const ReductionSpec& spec, int32_t x);

// The node's result from the reduction's result `core` (float32). `resolve`
// gives the value of another tensor argument (layer_norm's weight and bias,
// rms_norm's weight) in the epilogue, or -1 when it cannot be read there.
int32_t emit_reduction_epilogue(KernelBuilder& b, const Node& node, const ReductionSpec& spec,
                                int32_t core, const std::function<int32_t(const Tensor&)>& resolve);

}  // namespace kiln::jit
