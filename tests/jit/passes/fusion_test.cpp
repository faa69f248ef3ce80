// Golden tests of fusion grouping: which nodes become one kernel, and why a
// group is cut. A change in grouping shows here first.

#include <gtest/gtest.h>

#include "jit/record/trace_buffer.h"
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
  // On the CPU a transposed read of the innermost dim would make the whole
  // group run node by node: it stays a cut (Note [View folding]).
  Tensor x = real({8, 8});
  Tensor a = x * 2.0f;
  Tensor b = a.t() + 1.0f;  // needs `a` stored, transposed
  EXPECT_EQ(plan(), "fused[mul.Tensor -> 1 out] fused[add.Tensor -> 1 out]");
}

TEST_F(Fusion, ReadingAGroupResultThroughAnOuterViewRecomputesIt) {
  // Note [View folding]: the value is recomputed at the viewed elements.
  Tensor x = real({4, 4, 8});
  Tensor b = (x * 2.0f).transpose(0, 1) + 1.0f;
  EXPECT_EQ(plan(), "fused[mul.Tensor add.Tensor -> 1 out]");
  Tensor a = x * 2.0f;  // held: stored as well
  Tensor c = a.permute({1, 0, 2}) * a;
  EXPECT_EQ(plan(), "fused[mul.Tensor add.Tensor mul.Tensor mul.Tensor -> 3 out]");
}

TEST_F(Fusion, AViewThatCarriesAcrossDimsCutsTheGroup) {
  // Row i of the view starts 3 elements further: it runs into the next row of p.
  Tensor x;
  {
    kiln::EagerGuard g;
    x = kiln::testing::random_tensor({3, 2, 6}, kiln::kFloat32, "contiguous", 9);
  }
  auto run = [&] {
    Tensor p = x * 2.0f;
    return p.as_strided({3, 2, 6}, {12, 3, 1}, 0) + x;
  };
  Tensor lazy = run();
  EXPECT_EQ(plan(), "fused[mul.Tensor -> 1 out] fused[add.Tensor -> 1 out]");
  Tensor eager;
  {
    kiln::EagerGuard g;
    eager = run();
  }
  EXPECT_TENSOR_CLOSE(lazy, eager);
}

TEST_F(Fusion, ReadingAnInPlaceResultThroughAnotherViewCutsTheGroup) {
  Tensor x = real({8, 8});
  Tensor a = x * 2.0f;
  a.add_(1.0f);
  Tensor b = a.t() + 1.0f;  // a's value depends on memory the group writes
  EXPECT_EQ(plan(), "fused[mul.Tensor add_.Tensor -> 1 out] fused[add.Tensor -> 1 out]");
}

TEST_F(Fusion, FoldedViewsMatchEager) {
  auto run = [] {
    Tensor x = kiln::testing::random_tensor({5, 7}, kiln::kFloat32, "transposed", 5);
    Tensor y = kiln::testing::random_tensor({7, 5}, kiln::kFloat16, "strided", 6);
    Tensor r = kiln::testing::random_tensor({7}, kiln::kBFloat16, "contiguous", 7);
    Tensor p = kiln::tanh(x * 2.0f + 0.5f);  // [5, 7]
    Tensor q = p.t() * y + r.unsqueeze(1);   // [7, 5], reads p transposed
    Tensor s = kiln::testing::random_tensor({4, 4, 6}, kiln::kFloat32, "contiguous", 8);
    Tensor u = kiln::exp(s * 0.5f);
    Tensor w = u.permute({2, 0, 1}).permute({1, 2, 0}) + u;       // a chain of views, back to u
    Tensor z = kiln::sigmoid(u - 0.5f).transpose(0, 1) * u;       // recomputed, transposed
    Tensor h = (u * 3.0f).narrow(2, 0, 1).expand({4, 4, 6}) + u;  // one column, broadcast
    return std::vector<Tensor>{q, w, z, h};
  };
  std::vector<Tensor> eager;
  {
    kiln::EagerGuard g;
    eager = run();
  }
  std::vector<Tensor> lazy = run();
  for (size_t i = 0; i < lazy.size(); ++i) EXPECT_TENSOR_CLOSE(lazy[i], eager[i]);
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
