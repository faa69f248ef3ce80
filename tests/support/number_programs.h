#pragma once

// The programs of Note [Numbers as kernel arguments]'s tests, CPU
// (tests/jit/record/number_args_test.cpp) and CUDA
// (tests/jit/codegen_cuda/fused_cuda_test.cpp): each runs once per value of
// `s`, and no value after the first may compile a kernel.

#include "kiln/kiln.h"

namespace kiln::testing {

// Numbers from the program at every pointwise site that takes one:
// operators on numbers, clamp bounds, activation parameters, alpha, a lerp
// weight, a fill, softplus' beta and threshold, nan_to_num's value.
inline Tensor numbers_program(const Tensor& x, const Tensor& y, const Tensor& mask, double s) {
  Tensor a = x * s + (s - 1.0);
  a = kiln::clamp(a, kiln::Scalar(-2.0 * s - 0.5), kiln::Scalar(2.0 * s + 0.5));
  a = a + kiln::leaky_relu(y, 0.01 + s);
  a = kiln::add(a, x, s);
  a = kiln::elu(a, 0.5 + s, 1.0 + s, 2.0 - s);
  a = kiln::lerp(a, y, 0.1 * s);
  a = kiln::masked_fill(a, mask, -s);
  a = kiln::softplus(a, 1.0 + s, 3.0 + s);
  a = kiln::nan_to_num(a / (s - 0.25), 7.0 + s);
  return kiln::hardtanh(a, -1.0 - s, 1.0 + s) / (3.0 + s);
}

// Reductions take the numbers of their prologue and epilogue the same way:
// a sampling temperature, a scale before a sum, a norm's input and output.
inline Tensor number_reductions(const Tensor& x, const Tensor& w, double s) {
  Tensor p = kiln::softmax(x / s, -1);
  Tensor t = kiln::sum(x * s + 1.0, {-1}, true) / (2.0 + s);
  Tensor n = kiln::layer_norm(x * (1.0 + s), {x.sizes().back()}, w, std::nullopt, 1e-5) * s;
  return kiln::log_softmax(p + t + n - s, -1) * (s + 0.5);
}

}  // namespace kiln::testing
