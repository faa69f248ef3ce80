#pragma once

// Products of few rows through the generated kernel or cuBLASLt, whichever
// this problem was found faster with (Note [Skinny matmuls], Note [Skinny
// matmul choice]). Private to blas_lt*.cpp.

#include <functional>

#include "runtime/cuda/blas_lt.h"

namespace kiln::cuda {

// Queues out[m, n] = act(a @ b + bias) + residual (2-D operands, out sharing
// no memory with a, b or the residual) through the generated skinny kernel
// when that is the choice for this problem; false, nothing queued, when
// cuBLASLt should run it (including every problem the kernel does not
// take). `run_cublas` queues the same product through cuBLASLt: timing
// runs both (the result is then the same either way).
bool run_skinny(const Tensor& out, const Tensor& a, const Tensor& b, Activation act,
                const Tensor* bias, const Tensor* residual,
                const std::function<void()>& run_cublas);

}  // namespace kiln::cuda
