// multinomial: kiln draws from its own Philox stream, so the oracle cannot
// compare samples with PyTorch's; these tests compare frequencies with the
// probabilities over many draws, check the without-replacement guarantees,
// the draws in each mode (Note [Random ops run at the call]), and the errors.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

// Each category's share of `samples` (int64 indices below `k`).
std::vector<double> frequencies(const Tensor& samples, int64_t k) {
  std::vector<double> f(static_cast<size_t>(k), 0.0);
  const std::vector<int64_t> v = samples.contiguous().tolist<int64_t>();
  for (int64_t i : v) {
    EXPECT_TRUE(i >= 0 && i < k) << "sample " << i << " outside [0, " << k << ")";
    if (i >= 0 && i < k) f[static_cast<size_t>(i)] += 1.0 / static_cast<double>(v.size());
  }
  return f;
}

TEST(Multinomial, WithReplacementFollowsTheWeights) {
  kiln::manual_seed(5);
  // Unnormalized weights, a zero among them, two rows.
  Tensor w = kiln::tensor<float>({1, 0, 3, 4, 2, 5, 0.5, 0.5}).reshape({2, 4});
  const int64_t n = 40000;
  Tensor s = kiln::multinomial(w, n, true);
  ASSERT_EQ(s.sizes(), kiln::IntArrayRef({2, n}));
  EXPECT_EQ(s.dtype(), kiln::kInt64);
  const std::vector<std::vector<double>> p = {{0.125, 0, 0.375, 0.5},
                                              {0.25, 0.625, 0.0625, 0.0625}};
  for (int64_t r = 0; r < 2; ++r) {
    const std::vector<double> f = frequencies(s.select(0, r), 4);
    for (size_t c = 0; c < 4; ++c) {
      // 5 standard deviations of a share estimated from n draws.
      const double pc = p[static_cast<size_t>(r)][c];
      const double sd = std::sqrt(pc * (1 - pc) / static_cast<double>(n));
      EXPECT_NEAR(f[c], pc, 5 * sd + 1e-12) << "row " << r << " category " << c;
    }
  }
}

TEST(Multinomial, WithoutReplacementDrawsDistinctCategories) {
  kiln::manual_seed(6);
  Tensor w = kiln::tensor<double>({0.1, 0.2, 0.3, 0.4, 0.0});
  // The first of two draws without replacement follows the weights.
  const int64_t trials = 20000;
  Tensor rows = w.unsqueeze(0).expand({trials, 5}).contiguous();
  Tensor s = kiln::multinomial(rows, 2, false);
  ASSERT_EQ(s.sizes(), kiln::IntArrayRef({trials, 2}));
  const std::vector<int64_t> v = s.contiguous().tolist<int64_t>();
  for (int64_t t = 0; t < trials; ++t) {
    ASSERT_NE(v[static_cast<size_t>(2 * t)], v[static_cast<size_t>(2 * t + 1)]) << "trial " << t;
    ASSERT_NE(v[static_cast<size_t>(2 * t)], 4) << "a category of weight 0 came first";
  }
  const std::vector<double> first = frequencies(s.select(1, 0), 5);
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4, 0.0};
  for (size_t c = 0; c < 5; ++c) {
    const double sd = std::sqrt(p[c] * (1 - p[c]) / static_cast<double>(trials));
    EXPECT_NEAR(first[c], p[c], 5 * sd + 1e-12) << "category " << c;
  }
  // All categories without replacement: a permutation of them.
  Tensor all = kiln::multinomial(kiln::tensor<float>({1, 2, 3, 4, 5, 6}), 6, false);
  const std::vector<int64_t> a = all.tolist<int64_t>();
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), 6u);
}

TEST(Multinomial, DrawsAtTheCallInEveryMode) {
  Tensor w = kiln::tensor<float>({1, 2, 3, 4, 5, 6, 7, 8});
  Tensor eager_draw, lazy_draw;
  kiln::manual_seed(11);
  {
    kiln::EagerGuard eager;
    eager_draw = kiln::multinomial(w, 16, true);
  }
  kiln::manual_seed(11);
  lazy_draw = kiln::multinomial(w, 16, true);
  EXPECT_TENSOR_CLOSE(lazy_draw, eager_draw);
  auto f = kiln::jit::compile([](const Tensor& p) { return kiln::multinomial(p, 16, true); },
                              {.name = "sample"});
  kiln::manual_seed(11);
  Tensor first = f(w);
  EXPECT_TENSOR_CLOSE(first, eager_draw);
  Tensor second = f(w);
  EXPECT_NE(first.tolist<int64_t>(), second.tolist<int64_t>())
      << "a compiled call returned the last call's samples";
}

TEST(Multinomial, Errors) {
  kiln::EagerGuard eager;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_KILN_ERROR(kiln::multinomial(kiln::tensor<float>({1, -1}), 1),
                    "[multinomial] expected probabilities that are finite and >= 0, got a "
                    "negative, inf or NaN one");
  EXPECT_KILN_ERROR(kiln::multinomial(kiln::tensor<float>({1, inf}), 1, true),
                    "[multinomial] expected probabilities that are finite");
  EXPECT_KILN_ERROR(kiln::multinomial(kiln::tensor<float>({nan, 1}), 1), "finite and >= 0");
  EXPECT_KILN_ERROR(kiln::multinomial(kiln::tensor<float>({1, 1, 0, 0}).reshape({2, 2}), 1),
                    "[multinomial] expected each row of probabilities to sum to more than 0, got "
                    "a row of zeros");
  EXPECT_KILN_ERROR(kiln::multinomial(kiln::ones({3}), 4, false),
                    "[multinomial] expected num_samples <= 3 (the categories) without "
                    "replacement, got 4");
  EXPECT_KILN_ERROR(kiln::multinomial(kiln::tensor<float>({0.5f, 0, 0.5f, 0}), 3, false),
                    "[multinomial] expected at least num_samples (3) categories of probability "
                    "> 0 in each row without replacement, got a row with 2");
  EXPECT_KILN_ERROR(kiln::multinomial(kiln::ones({3}), 0, true),
                    "[multinomial] expected num_samples > 0, got 0");
  EXPECT_KILN_ERROR(kiln::multinomial(kiln::ones({2, 2, 2}), 1),
                    "[multinomial] expected 1-D or 2-D probabilities, got 3 dims");
  EXPECT_KILN_ERROR(kiln::multinomial(kiln::ones({3}, kiln::kInt64), 1),
                    "[multinomial] expected floating probabilities, got int64");
}

}  // namespace
