// Generated CUDA kernels on a real device: fused lazy groups and eager
// single-op groups against the eager CPU kernels.

#include <gtest/gtest.h>

#include "jit/codegen_cuda/launch_cuda.h"
#include "kiln/kiln.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

Tensor chain(const Tensor& x, const Tensor& row) {
  Tensor y = x;
  for (int i = 0; i < 4; ++i) {
    y = y * 1.0001 + 0.5;
    y = kiln::sigmoid(y) * row;
    y = y - 0.25;
    y = kiln::tanh(y);
  }
  return kiln::gelu(y, "tanh") + kiln::where(kiln::gt(x, 0.0), kiln::exp(x), kiln::erf(x));
}

kiln::testing::Tolerance tol(kiln::DType t) {
  if (t == kiln::kFloat16) return {2e-3, 2e-3};
  if (t == kiln::kBFloat16) return {1.6e-2, 1.6e-2};
  return {1e-5, 1e-5};  // fast math on the GPU vs vecmath/libm on the CPU
}

TEST(CudaFused, LazyChainMatchesEagerCpu) {
  KILN_REQUIRE_CUDA();
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16}) {
    for (const char* layout : {"contiguous", "transposed", "strided"}) {
      Tensor x, row, expected;
      {
        kiln::EagerGuard eager;
        x = kiln::testing::random_tensor({33, 70}, dt, layout, 5);
        row = kiln::testing::random_tensor({70}, dt, "contiguous", 6);
        expected = chain(x, row);
      }
      auto before = kiln::jit::cuda::cuda_kernel_stats();
      Tensor got = chain(x.to(kiln::Device::cuda()), row.to(kiln::Device::cuda()));
      EXPECT_TRUE(got.is_pending());
      EXPECT_TRUE(got.is_cuda());
      Tensor host = got.cpu();
      kiln::sync();  // runs the trace
      auto after = kiln::jit::cuda::cuda_kernel_stats();
      EXPECT_GE(after.launches - before.launches, 1) << "the chain ran as generated kernels";
      std::string msg = kiln::testing::compare(host, expected, tol(dt));
      EXPECT_TRUE(msg.empty()) << kiln::dtype_name(dt) << " " << layout << ": " << msg;
    }
  }
}

TEST(CudaFused, EagerPointwiseOpsAreSingleOpKernels) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  Tensor a = kiln::testing::random_tensor({1000}, kiln::kFloat32, "contiguous", 1);
  Tensor b = kiln::testing::random_tensor({1000}, kiln::kFloat32, "strided", 2);
  Tensor expected = kiln::sqrt(kiln::abs(a * b)) - b;
  Tensor got = kiln::sqrt(kiln::abs(a.cuda() * b.cuda())) - b.cuda();
  EXPECT_FALSE(got.is_pending());
  EXPECT_TENSOR_CLOSE_TOL(got.cpu(), expected, 1e-5, 1e-6);
}

TEST(CudaFused, KernelsAreCompiledOncePerStructure) {
  KILN_REQUIRE_CUDA();
  Tensor x = kiln::ones({256}).cuda();
  Tensor first = (x * 3.0 + 1.0).cpu();  // compiles (or loads from disk)
  kiln::sync();
  auto before = kiln::jit::cuda::cuda_kernel_stats();
  for (int i = 0; i < 5; ++i) {
    Tensor y = (x * 3.0 + 1.0).cpu();
    EXPECT_FLOAT_EQ(y[7].item<float>(), 4.0f);
  }
  auto after = kiln::jit::cuda::cuda_kernel_stats();
  EXPECT_EQ(after.compiled, before.compiled);
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  EXPECT_GE(after.launches - before.launches, 5);
}

TEST(CudaFused, OpsWithoutACudaKernelSayWhy) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  Tensor x = kiln::ones({4, 4}).cuda();
  EXPECT_KILN_ERROR(kiln::cumsum(x, 0), "has no CUDA kernel yet");
}

}  // namespace
