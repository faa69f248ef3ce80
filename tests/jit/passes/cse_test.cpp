// Common-subexpression elimination (Note [Common subexpressions]): which
// duplicates merge, which must not, and that lazy results still equal eager
// ones on random, non-contiguous, broadcast and mixed-dtype inputs.

#include <gtest/gtest.h>

#include <functional>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::random_tensor;

class Cse : public ::testing::Test {
 protected:
  void SetUp() override { kiln::jit::flush(); }
  void TearDown() override { kiln::jit::flush(); }

  // Runs `fn` lazily and returns how many nodes CSE merged while it ran.
  static int64_t merges_in(const std::function<void()>& fn) {
    int64_t before = kiln::jit::trace_stats().cse_merged;
    fn();
    kiln::jit::flush();
    return kiln::jit::trace_stats().cse_merged - before;
  }
};

Tensor input(std::initializer_list<int64_t> sizes, const char* layout, uint64_t seed,
             kiln::DType dtype = kiln::kFloat32) {
  kiln::EagerGuard g;
  return random_tensor(sizes, dtype, layout, seed);
}

// Runs `fn` eagerly and lazily on the same inputs; the results must match.
void expect_matches_eager(const std::function<std::vector<Tensor>()>& fn) {
  std::vector<Tensor> eager;
  {
    kiln::EagerGuard g;
    eager = fn();
  }
  std::vector<Tensor> lazy = fn();
  ASSERT_EQ(lazy.size(), eager.size());
  for (size_t i = 0; i < lazy.size(); ++i) EXPECT_TENSOR_CLOSE(lazy[i], eager[i]);
}

TEST_F(Cse, SamePointwiseOpOnSameInputMerges) {
  Tensor x = input({5, 7}, "transposed", 1);
  Tensor y;
  EXPECT_EQ(merges_in([&] { y = kiln::exp(x) * 2.0f + kiln::exp(x); }), 1);
  expect_matches_eager([&] { return std::vector<Tensor>{kiln::exp(x) * 2.0f + kiln::exp(x)}; });
}

TEST_F(Cse, DuplicateMatmulRunsOnce) {
  Tensor a = input({6, 5}, "strided", 2), b = input({5, 4}, "transposed", 3);
  auto before = kiln::jit::trace_stats();
  Tensor y;
  EXPECT_EQ(merges_in([&] { y = kiln::mm(a, b) + kiln::mm(a, b); }), 1);
  auto after = kiln::jit::trace_stats();
  EXPECT_EQ(after.executed_nodes - before.executed_nodes, 2);  // one mm, one add
  expect_matches_eager([&] { return std::vector<Tensor>{kiln::mm(a, b) + kiln::mm(a, b)}; });
}

TEST_F(Cse, MergesChainTransitively) {
  Tensor x = input({4, 6}, "offset", 4), r = input({6}, "strided", 5);
  auto f = [&] {
    Tensor p = kiln::tanh(x * r) + 1.0f;
    Tensor q = kiln::tanh(x * r) + 1.0f;  // mul, tanh and add all repeat
    return std::vector<Tensor>{p * q};
  };
  Tensor keep;
  EXPECT_EQ(merges_in([&] { keep = f()[0]; }), 3);
  expect_matches_eager(f);
}

TEST_F(Cse, EqualViewsMergeDifferentViewsDoNot) {
  Tensor x = input({6, 6}, "contiguous", 6);
  Tensor y;
  EXPECT_EQ(merges_in([&] { y = kiln::exp(x.t()) + kiln::exp(x.t()); }), 1);
  EXPECT_EQ(merges_in([&] { y = kiln::exp(x.t()) + kiln::exp(x); }), 0);
  EXPECT_EQ(merges_in([&] { y = kiln::exp(x.narrow(0, 0, 3)) + kiln::exp(x.narrow(0, 3, 3)); }), 0);
  expect_matches_eager([&] {
    return std::vector<Tensor>{kiln::exp(x.t()) + kiln::exp(x),
                               kiln::exp(x.narrow(0, 0, 3)) + kiln::exp(x.narrow(0, 3, 3))};
  });
}

TEST_F(Cse, DifferentScalarsDoNotMerge) {
  Tensor x = input({3, 8}, "strided", 7);
  Tensor y;
  EXPECT_EQ(merges_in([&] { y = (x * 2.0f) - (x * 3.0f); }), 0);
  EXPECT_EQ(merges_in([&] { y = (x * 2.0f) - (x * 2.0f) + x; }), 1);
  EXPECT_EQ(merges_in([&] { y = kiln::add(x, x, 2) - kiln::add(x, x, 3); }), 0);
  EXPECT_EQ(merges_in([&] { y = kiln::sum(x, {0}) + kiln::sum(x, {1}).sum(); }), 0);
  expect_matches_eager([&] {
    return std::vector<Tensor>{(x * 2.0f) - (x * 3.0f), kiln::add(x, x, 2) - kiln::add(x, x, 3)};
  });
}

TEST_F(Cse, RandomOpsDoNotMerge) {
  Tensor d;
  EXPECT_EQ(merges_in([&] { d = kiln::rand({256}) - kiln::rand({256}); }), 0);
  EXPECT_GT(kiln::abs(d).sum().item<float>(), 1.0f);
}

TEST_F(Cse, AWriteBetweenPreventsTheMerge) {
  Tensor x0 = input({4, 5}, "transposed", 8);
  auto f = [&] {
    Tensor x = x0.clone();
    Tensor a = kiln::exp(x);
    x.add_(1.0f);
    Tensor b = kiln::exp(x);
    return std::vector<Tensor>{a + b, x};
  };
  std::vector<Tensor> keep;
  EXPECT_EQ(merges_in([&] { keep = f(); }), 0);
  expect_matches_eager(f);
}

TEST_F(Cse, AWriteThroughAViewBetweenPreventsTheMerge) {
  Tensor x0 = input({4, 6}, "contiguous", 9);
  auto f = [&] {
    Tensor x = x0.clone();
    Tensor a = kiln::sum(x, {1});
    Tensor row = x.narrow(0, 1, 1);
    row.mul_(3.0f);
    Tensor b = kiln::sum(x, {1});
    return std::vector<Tensor>{a - b};
  };
  std::vector<Tensor> keep;
  EXPECT_EQ(merges_in([&] { keep = f(); }), 0);
  expect_matches_eager(f);
}

TEST_F(Cse, AWriteAfterBothStillMerges) {
  Tensor x0 = input({4, 5}, "strided", 10);
  auto f = [&] {
    Tensor x = x0.clone();
    Tensor a = kiln::exp(x) + kiln::exp(x);
    x.add_(1.0f);
    return std::vector<Tensor>{a, x};
  };
  std::vector<Tensor> keep;
  EXPECT_EQ(merges_in([&] { keep = f(); }), 1);
  expect_matches_eager(f);
}

TEST_F(Cse, OutputsWrittenLaterDoNotMerge) {
  Tensor x = input({3, 4}, "offset", 11);
  auto f = [&] {
    Tensor a = kiln::exp(x);
    Tensor b = kiln::exp(x);
    b.add_(1.0f);  // consumers of b redirected to a would see a different value
    return std::vector<Tensor>{a * b, b};
  };
  std::vector<Tensor> keep;
  EXPECT_EQ(merges_in([&] { keep = f(); }), 0);
  expect_matches_eager(f);
}

TEST_F(Cse, UserHeldDuplicateExternIsACopy) {
  Tensor p = input({5, 3}, "transposed", 12), q = input({3, 4}, "strided", 13);
  Tensor a, b;
  EXPECT_EQ(merges_in([&] {
              a = kiln::mm(p, q);
              b = kiln::mm(p, q);
            }),
            1);
  Tensor expected;
  {
    kiln::EagerGuard g;
    expected = kiln::mm(p, q);
  }
  EXPECT_TENSOR_CLOSE(a, expected);
  EXPECT_TENSOR_CLOSE(b, expected);
  EXPECT_NE(a.data_ptr(), b.data_ptr());
  b.add_(1.0f);  // the copy is the user's own memory
  EXPECT_TENSOR_CLOSE(a, expected);
}

TEST_F(Cse, UserHeldDuplicatePointwiseIsStillComputed) {
  Tensor x = input({4, 4}, "expanded", 14);
  Tensor a, b;
  EXPECT_EQ(merges_in([&] {
              a = kiln::sigmoid(x);
              b = kiln::sigmoid(x);
            }),
            1);
  Tensor expected;
  {
    kiln::EagerGuard g;
    expected = kiln::sigmoid(x);
  }
  EXPECT_TENSOR_CLOSE(a, expected);
  EXPECT_TENSOR_CLOSE(b, expected);
  EXPECT_NE(a.data_ptr(), b.data_ptr());
}

TEST_F(Cse, MixedDtypesAndBroadcastMatchEager) {
  Tensor h = input({3, 1, 5}, "contiguous", 15, kiln::kFloat16);
  Tensor f = input({4, 5}, "transposed", 16);
  Tensor g = input({5}, "strided", 17, kiln::kBFloat16);
  expect_matches_eager([&] {
    Tensor u = (h + f) * g;
    Tensor v = (h + f) * g;  // the same promoted ops, merged
    Tensor w = (h + f.to(kiln::kFloat16)) * g;
    return std::vector<Tensor>{u - v + w, kiln::softmax(u, -1) + kiln::softmax(v, -1)};
  });
}

TEST_F(Cse, ZeroDimAndEmptyInputsMatchEager) {
  Tensor s = input({}, "contiguous", 18);
  Tensor e = input({0, 3}, "contiguous", 19);
  expect_matches_eager([&] {
    return std::vector<Tensor>{kiln::exp(s) + kiln::exp(s), kiln::exp(e) * kiln::exp(e)};
  });
}

}  // namespace
