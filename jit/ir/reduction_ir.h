#pragma once

// Note [Reduction kernels]
// A fused reduction group, as both code generators consume it: a pointwise
// prologue over the input shape, one reduction over the group's reduced
// dims, and a pointwise epilogue. The prologue's output 0 is the float32
// value reduced (it has no tensor: generators keep it in registers or a
// scratch row); its other outputs store members someone else needs. The
// epilogue's input 0 is the reduction's float32 result (no tensor either).
//
// Two families share the form:
//  - statistics (Sum, Mean, Max, Min, Var): one value per kept position; the
//    epilogue runs over the reduced shape (e.g. `sum(x*x, -1) / n`);
//  - row normalizations (Softmax, LogSoftmax, LayerNorm, RmsNorm): the
//    reduced dims form a row that is reduced and then normalized element by
//    element; the epilogue runs over the input shape (layer_norm's weight
//    and bias, residual adds, casts).
// Math is float32 (16-bit inputs convert on load, as in Note [Kernel IR]);
// statistics that need a row's count (mean, var, the norms) take it at launch.
// Cache keys: hash() covers the op, its parameters and both bodies; the CPU
// generator caches prologue and epilogue as pointwise kernels (body + operand
// layouts) and the row passes once per ISA, so no size enters a key.

#include <algorithm>
#include <cstdint>
#include <string>

#include "jit/ir/kernel_ir.h"

namespace kiln::jit {

enum class RowOp : uint8_t {
  // statistics: one result per row
  Sum,
  Mean,
  Max,  // NaN propagates (amax, max)
  Min,
  Var,  // sum((x - mean)^2) / max(0, n - correction)
  // row normalizations: one result per element
  Softmax,     // exp(x - max) / sum(exp(x - max))
  LogSoftmax,  // (x - max) - log(sum(exp(x - max)))
  LayerNorm,   // x * rstd - mean * rstd, rstd = 1 / sqrt(var(x, correction 0) + eps)
  RmsNorm,     // x / sqrt(mean(x^2) + eps)
};

const char* row_op_name(RowOp op);
// Var's divisor max(0, n - correction), taken in float64 as the eager kernel
// takes it: in int64, n - correction overflows for a correction near the
// type's limits (any int64 is a valid correction).
inline double var_divisor(int64_t n, int64_t correction) {
  return std::max(0.0, static_cast<double>(n) - static_cast<double>(correction));
}
// Whether the op's result has the input's shape (a row normalization).
constexpr bool is_row_normalization(RowOp op) {
  return op >= RowOp::Softmax;
}

struct ReductionKernel {
  RowOp op = RowOp::Sum;
  int64_t correction = 0;  // Var
  // Var: the kernel returns sqrt(var) (std), each generator as its device's
  // eager kernel: on the CPU from the float64 variance (the float32 variance
  // of values near 1e20 overflows where its root does not), on CUDA from the
  // float32 one (whose Welford sums overflow there, as PyTorch's).
  bool sqrt_result = false;
  double eps = 0;  // LayerNorm, RmsNorm
  PointwiseKernel prologue;
  PointwiseKernel epilogue;

  // A hash of the structure (op, parameters, both bodies).
  uint64_t hash() const;
  // "reduce sum\nprologue: kernel(...)\n...\nepilogue: ..."
  std::string str() const;
};

}  // namespace kiln::jit
