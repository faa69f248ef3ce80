#pragma once

// Decompositions: how each fusible op is written in the kernel IR. An op
// without one (or with arguments its decomposition does not cover) stays an
// extern node and runs through its eager kernel.

#include <vector>

#include "jit/ir/kernel_ir.h"
#include "jit/record/trace_buffer.h"

namespace kiln::jit {

// Builds a PointwiseKernel body instruction by instruction, folding duplicates.
class KernelBuilder {
 public:
  int32_t load(int32_t operand, DType memory_dtype);
  int32_t constant(double v, DType t);
  // A number from the program, taken at launch (Note [Numbers as kernel
  // arguments]); every call gives a new argument, up to kMaxParams (then a
  // Const).
  int32_t param(double v, DType t);
  int32_t op(Prim p, DType t, int32_t a, int32_t b = -1, int32_t c = -1);
  // `v` converted to `t` (no instruction when it already is).
  int32_t cast(int32_t v, DType t);
  // `v` rounded to the grid of storage dtype `t` when that is a 16-bit float.
  int32_t round_to(int32_t v, DType t);
  DType dtype(int32_t v) const { return kernel_.body[v].dtype; }
  PointwiseKernel& kernel() { return kernel_; }

 private:
  PointwiseKernel kernel_;
};

// Emits `node`'s result given the values of its tensor arguments (in argument
// order; lists are not fusible). Returns the result value, or -1 when the op
// or this call of it cannot be expressed (the node then runs as an extern).
using Decomposition = int32_t (*)(KernelBuilder& b, const Node& node,
                                  const std::vector<int32_t>& tensor_values);
// The decomposition for `node`'s op, checking its dtypes are ones the
// generators handle (floating compute, bool results of comparisons); else null.
Decomposition find_decomposition(const Node& node);
// Whether `op` is a pointwise op (or the out= form of one) that the
// generators of either device fuse: its eager kernels go through TensorIter
// (Note [Overlaps raised at the call] in jit/record/lazy_kernel.cpp).
bool is_pointwise_op(const OperatorEntry* op);

}  // namespace kiln::jit
