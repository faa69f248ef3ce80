// Tensor::unfold: a view (writes through it reach the base, overlapping
// windows share elements), lazily and under jit::compile as eagerly, and on
// CUDA as on the CPU. Values, strides and errors against PyTorch are the op
// oracle's (tests/oracle/cases/shape.py).

#include <gtest/gtest.h>

#include <optional>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::random_tensor;

TEST(Unfold, WritesReachTheBase) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    Tensor base = kiln::zeros({2, 7});
    Tensor windows = base.unfold(1, 3, 2);  // columns 0-2, 2-4, 4-6
    ASSERT_EQ(windows.sizes(), (std::vector<int64_t>{2, 3, 3}));
    EXPECT_EQ(windows.strides(), (std::vector<int64_t>{7, 2, 1}));
    windows.select(1, 1).fill_(1.0);  // columns 2-4; 2 and 4 are shared
    windows.select(1, 2).add_(2.0);   // columns 4-6
    Tensor expected = kiln::tensor({0.0f, 0.0f, 1.0f, 1.0f, 3.0f, 2.0f, 2.0f}).expand({2, 7});
    EXPECT_TENSOR_CLOSE(base, expected);
    EXPECT_TENSOR_CLOSE(windows.select(1, 0).select(0, 1), kiln::tensor({0.0f, 0.0f, 1.0f}));
  }
}

// A moving average over the last dim of a [6, 9] x, plus sums of row pairs.
Tensor moving_average(const Tensor& x) {
  return x.unfold(-1, 4, 1).mean({-1}) * 2.0 + x.unfold(0, 2, 2).sum({-1}).sum({0}).narrow(0, 0, 6);
}

TEST(Unfold, CompiledMatchesEager) {
  Tensor x = random_tensor({6, 9}, kiln::kFloat32, "transposed", 5);
  Tensor expected;
  {
    kiln::EagerGuard eager;
    expected = moving_average(x);
  }
  EXPECT_TENSOR_CLOSE_TOL(moving_average(x), expected, 1e-5, 1e-5);
  auto f = kiln::jit::compile(moving_average, {.name = "moving_average"});
  for (int call = 0; call < 3; ++call) EXPECT_TENSOR_CLOSE_TOL(f(x), expected, 1e-5, 1e-5);
}

TEST(Unfold, CudaMatchesTheCpu) {
  KILN_REQUIRE_CUDA();
  Tensor x = random_tensor({6, 9}, kiln::kFloat32, "strided", 6);
  Tensor expected;
  {
    kiln::EagerGuard eager;
    expected = moving_average(x);
  }
  Tensor xd = x.to(kiln::Device::cuda());
  {
    kiln::EagerGuard eager;
    EXPECT_TENSOR_CLOSE_TOL(moving_average(xd).cpu(), expected, 1e-5, 1e-5);
  }
  auto f = kiln::jit::compile(moving_average, {.name = "moving_average_cuda"});
  for (int call = 0; call < 3; ++call) EXPECT_TENSOR_CLOSE_TOL(f(xd).cpu(), expected, 1e-5, 1e-5);
}

}  // namespace
