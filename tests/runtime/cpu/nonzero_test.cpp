// nonzero, argwhere and masked_select beyond the oracle (eager and lazy
// against PyTorch): sizes read on the host in compiled functions (Note
// [Sizes read on the host]), CUDA through the host, and the errors.

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::random_tensor;

TEST(Nonzero, CompiledCountsEveryCall) {
  auto body = [](const Tensor& x, const Tensor& threshold) {
    Tensor keep = kiln::gt(x, threshold);
    return std::vector<Tensor>{kiln::masked_select(x * 2.0, keep), kiln::nonzero(keep)};
  };
  auto f = kiln::jit::compile(body, {.name = "select"});
  Tensor x = random_tensor({4, 6}, kiln::kFloat32, "transposed", 21);
  for (double t : {0.0, 1.5, -1.0, 5.0}) {
    SCOPED_TRACE(t);
    Tensor threshold = kiln::scalar_tensor(t);
    std::vector<Tensor> expected;
    {
      kiln::EagerGuard eager;
      expected = body(x, threshold);
    }
    std::vector<Tensor> got = f(x, threshold);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_TENSOR_CLOSE(got[0], expected[0]);
    EXPECT_TENSOR_CLOSE(got[1], expected[1]);
  }
  // The count is data: the first call's trace broke there.
  EXPECT_GE(f.stats().graph_breaks, 1);
}

TEST(Nonzero, LazyReadsAfterPendingWrites) {
  Tensor x = kiln::zeros({3, 3});
  x.select(0, 1).fill_(2.0);  // recorded, not run yet
  Tensor idx = kiln::argwhere(x);
  EXPECT_EQ(idx.tolist<int64_t>(), (std::vector<int64_t>{1, 0, 1, 1, 1, 2}));
  EXPECT_EQ(kiln::masked_select(x, kiln::ne(x, 0.0)).numel(), 3);
}

TEST(Nonzero, CudaThroughTheHost) {
  KILN_REQUIRE_CUDA();
  Tensor x = random_tensor({5, 7}, kiln::kFloat32, "strided", 22);
  Tensor m = kiln::lt(x, 0.5);
  Tensor expected = kiln::masked_select(x, m);
  Tensor got = kiln::masked_select(x.cuda(), m.cuda());
  EXPECT_TRUE(got.is_cuda());
  EXPECT_TENSOR_CLOSE(got.cpu(), expected);
  EXPECT_TENSOR_CLOSE(kiln::nonzero(m.cuda()).cpu(), kiln::nonzero(m));
}

TEST(NonzeroErrors, MaskedSelect) {
  Tensor x = kiln::ones({3, 4});
  EXPECT_KILN_ERROR(kiln::masked_select(x, kiln::ones({3, 4}, kiln::kInt64)),
                    "[masked_select] expected a mask of dtype bool (or uint8), got int64");
  EXPECT_KILN_ERROR(kiln::masked_select(x, kiln::ones({5}, kiln::kBool)),
                    "[masked_select] cannot broadcast sizes [3, 4] and [5] at dim 1");
  EXPECT_KILN_ERROR(kiln::masked_select(Tensor(), kiln::ones({5}, kiln::kBool)),
                    "[masked_select] expected argument 'self' to be a defined tensor");
}

}  // namespace
