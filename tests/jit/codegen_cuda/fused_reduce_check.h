#pragma once

// Shared by the CUDA reduction-group suites: inputs moved to the device with
// their layout, tolerances for float sums, and the fused-versus-eager check.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "jit/codegen_cuda/launch_cuda.h"
#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace kiln::testing {

// `t` on CUDA with its sizes, strides and storage offset.
inline Tensor on_cuda(const Tensor& t) {
  EagerGuard g;
  const auto numel = static_cast<int64_t>(t.impl()->storage()->nbytes() / itemsize(t.dtype()));
  Tensor base = t.as_strided({numel}, {1}, 0).cuda();
  return base.as_strided(t.sizes(), t.strides(), t.storage_offset());
}

// Float sums on the GPU against float64 ones on the CPU, over rows of n.
inline Tolerance reduce_tol(DType t, int64_t n) {
  const double grow = std::sqrt(static_cast<double>(std::max<int64_t>(n, 1)));
  if (t == kFloat16) return {2e-3, 1e-3 + 1e-6 * grow};
  if (t == kBFloat16) return {1.6e-2, 4e-3 + 1e-6 * grow};
  return {1e-5, 1e-5 + 2e-7 * grow};
}

// Runs `f` eagerly on the CPU inputs and lazily on CUDA copies; the CUDA run
// must be a fused reduction kernel. Returns the CUDA result (on the CPU).
inline Tensor expect_fused_matches(const std::vector<Tensor>& inputs,
                                   const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                   Tolerance tol) {
  Tensor expected;
  {
    EagerGuard g;
    expected = f(inputs);
  }
  std::vector<Tensor> dev;
  for (const Tensor& t : inputs) dev.push_back(on_cuda(t));
  const int64_t before = jit::cuda::cuda_reductions_run();
  Tensor got = f(dev).cpu();
  sync();
  EXPECT_GT(jit::cuda::cuda_reductions_run(), before) << "did not run as one fused kernel";
  std::string msg = compare(got, expected, tol);
  EXPECT_TRUE(msg.empty()) << msg;
  return got;
}

}  // namespace kiln::testing
