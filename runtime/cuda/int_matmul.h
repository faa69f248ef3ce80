#pragma once

// The integer matrix product behind the CUDA matmul kernels (this header
// needs no CUDA header; jit/codegen_cuda/op_kernels/int_matmul.cpp registers it).
//
// Note [Integer matmuls on CUDA]
// cuBLASLt has no integer GEMM that wraps around, and PyTorch's CPU kernels
// (which kiln's follow) accumulate integer products in the result dtype and
// wrap. runtime/cuda/matmul_cuda.cpp routes uint8/int8/int16/int32/int64
// operands of mm, bmm, mv, addmm, baddbmm, matmul and linear to one generated
// shared-memory tiled kernel per dtype instead. It computes in the unsigned
// type of the operands' width (32 bits for the narrower ones): unsigned
// arithmetic is exact modulo 2^w, so the truncated result is the wrapped one
// whatever the order of the sum, and no signed overflow (undefined) happens.
// alpha and beta are truncated to integers as the CPU kernel does. bool stays
// refused by the Meta kernel. addmm_act (made by the matmul epilogue pass in
// lazy mode) runs unfused for integers: addmm, then the activation. The kernel lives in jit/
// (runtime never includes jit), so it is registered here at load time, like the device copy kernel
// (Note [Device copies through generated kernels]).

#include "kiln/scalar.h"
#include "kiln/tensor.h"

namespace kiln::cuda {

// out[..., m, n] = beta * self + alpha * (a[..., m, k] @ b[..., k, n]) on
// integer CUDA tensors of one device and one dtype. a and b have out's rank
// and batch sizes (they may be expanded views); `self` (optional: undefined
// when beta is zero, and then never read) broadcasts to out's shape and may be
// out itself. out may share storage with a or b. Runs on the current stream.
using IntMatmulKernel = void (*)(const Tensor& out, const Tensor& self, const Tensor& a,
                                 const Tensor& b, const Scalar& beta, const Scalar& alpha);
void set_int_matmul_kernel(IntMatmulKernel kernel);

}  // namespace kiln::cuda
