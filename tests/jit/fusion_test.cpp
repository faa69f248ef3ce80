// Golden tests of fusion grouping: which nodes become one kernel, and why a
// group is cut. A change in grouping shows here first.

#include <gtest/gtest.h>

#include "jit/trace_buffer.h"
#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

std::string plan() {
  return kiln::jit::TraceBuffer::current().describe_pending();
}

Tensor real(std::initializer_list<int64_t> sizes) {
  kiln::EagerGuard g;
  return kiln::full(sizes, 0.5f);
}

class Fusion : public ::testing::Test {
 protected:
  void SetUp() override { kiln::jit::flush(); }
  void TearDown() override { kiln::jit::flush(); }
};

TEST_F(Fusion, PointwiseChainIsOneKernelStoringOnlyTheResult) {
  Tensor x = real({4, 8});
  Tensor y = (x * 1.0001f + 0.5f) * 2.0f - 0.25f;
  EXPECT_EQ(plan(), "fused[mul.Tensor add.Tensor mul.Tensor sub.Tensor -> 1 out]");
  EXPECT_TRUE(y.is_pending());
}

TEST_F(Fusion, BroadcastInputsJoinTheGroup) {
  Tensor x = real({4, 8}), row = real({8}), col = real({4, 1});
  Tensor y = x * row + col;
  EXPECT_EQ(plan(), "fused[mul.Tensor add.Tensor -> 1 out]");
}

TEST_F(Fusion, IntermediatesTheUserHoldsAreStored) {
  Tensor x = real({16});
  Tensor a = x + 1.0f;
  Tensor b = a * a;
  EXPECT_EQ(plan(), "fused[add.Tensor mul.Tensor -> 2 out]");
}

TEST_F(Fusion, AShapeChangeCutsTheGroup) {
  Tensor x = real({4, 8}), y = real({8});
  Tensor a = x * 2.0f;  // [4, 8]
  Tensor b = y + 1.0f;  // [8]
  EXPECT_EQ(plan(), "fused[mul.Tensor -> 1 out] fused[add.Tensor -> 1 out]");
}

TEST_F(Fusion, ReadingAGroupResultThroughAnotherViewCutsTheGroup) {
  Tensor x = real({8, 8});
  Tensor a = x * 2.0f;
  Tensor b = a.t() + 1.0f;  // needs `a` stored, transposed
  EXPECT_EQ(plan(), "fused[mul.Tensor -> 1 out] fused[add.Tensor -> 1 out]");
}

TEST_F(Fusion, InPlaceWritesStoreIntoTheirTarget) {
  Tensor cache = real({4, 4});
  cache.add_(1.0f);
  cache.mul_(3.0f);
  EXPECT_EQ(plan(), "fused[add_.Tensor mul_.Tensor -> 1 out]");
}

TEST_F(Fusion, GroupedResultsMatchEager) {
  auto run = [] {
    Tensor x = kiln::testing::random_tensor({6, 10}, kiln::kFloat32, "transposed", 3);
    Tensor r = kiln::testing::random_tensor({10}, kiln::kFloat32, "strided", 4);
    Tensor a = x * r + 0.5f;
    Tensor b = a * a - x;
    return b.t() * 3.0f + a.t();
  };
  Tensor eager;
  {
    kiln::EagerGuard g;
    eager = run();
  }
  Tensor lazy = run();
  EXPECT_TENSOR_CLOSE(lazy, eager);
}

}  // namespace
