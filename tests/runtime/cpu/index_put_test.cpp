// index_put_ beyond the oracle (eager and lazy against PyTorch): the
// KV-cache write in a compiled function, which reads no index on the host
// (Note [index_put]), a self whose leading dims do not merge, and the errors.

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::TensorOptions;
using kiln::testing::random_tensor;

Tensor idx(std::initializer_list<int64_t> v) {
  return kiln::tensor<int64_t>(v);
}

TEST(IndexPut, CompiledKvCacheWrite) {
  // cache [B, H, S, D]; each call writes x [B, H, D] at one position per row.
  const int64_t b = 2, h = 3, s = 8, d = 4;
  Tensor cache = kiln::zeros({b, h, s, d});
  Tensor expected = kiln::zeros({b, h, s, d});
  auto body = [&](const Tensor& x, const Tensor& pos) {
    Tensor rows = kiln::arange(b, TensorOptions(kiln::kInt64)).view({b, 1});
    Tensor heads = kiln::arange(h, TensorOptions(kiln::kInt64)).view({1, h});
    kiln::index_put_(cache, {rows, heads, pos.view({b, 1})}, x);
    return kiln::sum(cache, {2});
  };
  auto f = kiln::jit::compile(body, {.name = "kv_write"});
  for (int64_t t = 0; t < 4; ++t) {
    Tensor x = random_tensor({b, h, d}, kiln::kFloat32, "contiguous", 30 + t);
    Tensor pos = idx({t, 2 * t + 1});
    Tensor got = f(x, pos);
    {
      kiln::EagerGuard eager;
      expected.select(0, 0).select(1, t).copy_(x.select(0, 0));
      expected.select(0, 1).select(1, 2 * t + 1).copy_(x.select(0, 1));
    }
    EXPECT_TENSOR_CLOSE(cache, expected);
    EXPECT_TENSOR_CLOSE(got, kiln::sum(expected, {2}));
  }
  EXPECT_EQ(f.stats().graph_breaks, 0);
}

TEST(IndexPut, SelfWhoseLeadingDimsDoNotMerge) {
  kiln::EagerGuard eager;
  // A transposed self: its two leading dims cannot be one view.
  Tensor base = random_tensor({4, 3, 2}, kiln::kFloat64, "contiguous", 40);
  Tensor self = base.transpose(0, 1);
  Tensor values = random_tensor({2, 2}, kiln::kFloat64, "contiguous", 41);
  Tensor expected = self.clone();
  expected.select(0, 2).select(0, 1).copy_(values.select(0, 0));
  expected.select(0, 0).select(0, 3).copy_(values.select(0, 1));
  kiln::index_put_(self, {idx({2, 0}), idx({1, -1})}, values);
  EXPECT_TENSOR_CLOSE(self, expected);
  EXPECT_TENSOR_CLOSE(base.transpose(0, 1), expected);  // written through to base
}

TEST(IndexPutErrors, Arguments) {
  kiln::EagerGuard eager;
  Tensor x = kiln::zeros({3, 4});
  // Indices on the host are checked by index_put_ itself, against their own
  // dim (Note [Composite ops name themselves]); -size is the lowest.
  EXPECT_KILN_ERROR(kiln::index_put_(x, {idx({0, 3})}, kiln::ones({4})),
                    "[index_put_] index 3 is out of bounds for dimension 0 with size 3");
  EXPECT_KILN_ERROR(kiln::index_put_(x, {idx({0}), idx({4})}, kiln::ones({1})),
                    "[index_put_] index 4 is out of bounds for dimension 1 with size 4");
  EXPECT_KILN_ERROR(kiln::index_put_(x, {idx({-4})}, kiln::ones({4})),
                    "[index_put_] index -4 is out of bounds for dimension 0 with size 3");
  EXPECT_KILN_ERROR(kiln::index_put(x, {idx({0}), idx({-5})}, kiln::ones({1}), true),
                    "[index_put] index -5 is out of bounds for dimension 1 with size 4");
  EXPECT_EQ(kiln::sum(kiln::abs(x)).item<float>(), 0.f);  // nothing written
  EXPECT_KILN_ERROR(kiln::index_put_(x, {idx({0}).to(kiln::kInt32)}, kiln::ones({4})),
                    "[index_put_] expected index tensors of dtype int64, bool or uint8, got int32 "
                    "at position 0");
  EXPECT_KILN_ERROR(kiln::index_put_(x, {idx({0})}, kiln::ones({4}, kiln::kFloat64)),
                    "[index_put_] expected values of self's dtype float32, got float64");
  EXPECT_KILN_ERROR(kiln::index_put_(x, {idx({0, 1})}, kiln::ones({3})),
                    "[index_put_] expected values that broadcast to the indexed shape [2, 4], got "
                    "sizes [3]");
  EXPECT_KILN_ERROR(
      kiln::index_put_(x, {idx({0}), idx({0}), idx({0})}, kiln::ones({1})),
      "[index_put_] expected at most 2 index tensors for self of sizes [3, 4], got 3");
  EXPECT_KILN_ERROR(kiln::index_put_(x, {kiln::ones({2}, kiln::kBool)}, kiln::ones({4})),
                    "[index_put_] expected mask 0 of sizes matching self's [3, 4] from dim 0, got "
                    "[2]");
  EXPECT_KILN_ERROR(kiln::index_put_(x, {}, kiln::ones({4})),
                    "[index_put_] expected at least one index tensor, got none");
  // PyTorch 1.13 writes the shared rows of an expanded self; kiln refuses, as index_add_.
  Tensor expanded = kiln::zeros({1, 4}).expand({3, 4});
  EXPECT_KILN_ERROR(kiln::index_put_(expanded, {idx({0})}, kiln::ones({4})), "[index_put_]");
  EXPECT_KILN_ERROR(kiln::index_put(x, {Tensor()}, kiln::ones({4})),
                    "[index_put] expected argument 'indices'");
}

}  // namespace
