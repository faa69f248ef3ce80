// The C++ spellings of PyTorch's op options (the oracle checks their values
// against PyTorch; these check what only C++ can get wrong): overload choice,
// lazy recording through the alias Composites, pending tensor arguments, and
// in-place renormalization.

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <vector>

#include "jit/codegen_cpu/launch_cpu.h"
#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using Corr = std::optional<int64_t>;

TEST(OpOptionsApi, VarUnbiasedOverloadsTakeOnlyBools) {
  kiln::EagerGuard eager;
  Tensor x = kiln::testing::random_tensor({4, 6}, kiln::kFloat64, "transposed", 1);
  // An integer third argument stays a correction; only a bool is unbiased=.
  EXPECT_TENSOR_CLOSE(kiln::var(x, {1}, 2), kiln::var(x, {1}, Corr(2)));
  EXPECT_FALSE(kiln::testing::compare(kiln::var(x, {1}, 2), kiln::var(x, {1}, true)).empty());
  EXPECT_TENSOR_CLOSE(kiln::var(x, {1}, true), kiln::var(x, {1}, Corr(1)));
  EXPECT_TENSOR_CLOSE(kiln::var(x, {1}, false), kiln::var(x, {1}, Corr(0)));
  EXPECT_TENSOR_CLOSE(kiln::std(x, {0, 1}, false, true), kiln::std(x, {0, 1}, Corr(0), true));
  EXPECT_TENSOR_CLOSE(kiln::var(x, false), kiln::var(x, {}, Corr(0)));
  EXPECT_TENSOR_CLOSE(kiln::std(x, true), kiln::std(x));
}

// max(a, b) forwards to maximum, so a lazy trace fuses it with its neighbours.
TEST(OpOptionsApi, MaxOfTwoTensorsFusesLazily) {
  Tensor a = kiln::testing::random_tensor({3, 5}, kiln::kFloat32, "strided", 2);
  Tensor b = kiln::testing::random_tensor({5}, kiln::kFloat32, "contiguous", 3);
  Tensor want;
  {
    kiln::EagerGuard eager;
    want = kiln::minimum(kiln::maximum(a, b) * 2.0, b);
  }
  const int64_t groups = kiln::jit::cpu::cpu_pointwise_groups_run();
  Tensor got = kiln::min(kiln::max(a, b) * 2.0, b);
  kiln::sync();
  EXPECT_EQ(kiln::jit::cpu::cpu_pointwise_groups_run() - groups, 1);
  EXPECT_TENSOR_CLOSE(got, want);
}

TEST(OpOptionsApi, WhereMethodPutsSelfSecond) {
  kiln::EagerGuard eager;
  Tensor x = kiln::testing::random_tensor({2, 3}, kiln::kFloat32, "transposed", 4);
  Tensor y = kiln::testing::random_tensor({3}, kiln::kFloat32, "contiguous", 5);
  Tensor c = kiln::gt(x, 0.0);
  EXPECT_TENSOR_CLOSE(x.where(c, y), kiln::where(c, x, y));
  EXPECT_TENSOR_CLOSE(x.where(c, 0.5), kiln::where(c, x, kiln::Scalar(0.5)));
}

// A start still pending in a lazy trace is computed when narrow reads it.
TEST(OpOptionsApi, NarrowReadsAPendingStart) {
  Tensor x = kiln::arange(30.0).reshape({5, 6});
  Tensor start = kiln::scalar_tensor(1, kiln::kInt64) + 1;
  Tensor got = x.narrow(1, start, 3);
  EXPECT_EQ(std::vector<int64_t>(got.sizes().begin(), got.sizes().end()),
            (std::vector<int64_t>{5, 3}));
  kiln::EagerGuard eager;
  EXPECT_TENSOR_CLOSE(got, x.narrow(1, 2, 3));
  EXPECT_TENSOR_CLOSE(x.narrow(0, kiln::scalar_tensor(-2, kiln::kInt32), 2), x.narrow(0, 3, 2));
}

// max_norm scales the named rows of the weight itself, each once, lazily as eagerly.
TEST(OpOptionsApi, EmbeddingMaxNormRenormalizesTheWeight) {
  for (bool lazy : {false, true}) {
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    Tensor w = kiln::full({4, 3}, 2.0);  // row norms sqrt(12) ~ 3.46
    Tensor idx = kiln::tensor<int64_t>({2, 0, 2});
    Tensor out = kiln::embedding(w, idx, -1, 1.0, 2.0, /*scale_grad_by_freq=*/true);
    kiln::sync();
    kiln::EagerGuard g;
    const double scaled = 2.0 * (1.0 / (std::sqrt(12.0) + 1e-7));
    Tensor want_w = kiln::full({4, 3}, 2.0);
    want_w.select(0, 0).fill_(scaled);
    want_w.select(0, 2).fill_(scaled);
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    EXPECT_TENSOR_CLOSE(w, want_w);
    EXPECT_TENSOR_CLOSE(out, kiln::full({3, 3}, scaled));
  }
}

}  // namespace
