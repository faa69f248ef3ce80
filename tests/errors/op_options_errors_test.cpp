// Must-fail cases of PyTorch's op options where kiln's message or rule is its
// own (the oracle checks that kiln refuses what PyTorch refuses): pad's
// modes, the scatter reductions, embedding_renorm_, narrow with a tensor
// start, and the alias ops. Each raises a kiln::Error that names the op, what
// was expected and what came.

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

TEST(OpOptionErrors, PadModes) {
  kiln::EagerGuard eager;
  Tensor x = kiln::zeros({2, 3, 5});
  EXPECT_KILN_ERROR(kiln::pad(x, {1, 1}, "symmetric"),
                    "[pad] expected mode 'constant', 'reflect', 'replicate' or 'circular', got "
                    "'symmetric'");
  EXPECT_KILN_ERROR(kiln::pad(x, {1, 1}, "reflect", 2.0),
                    "[pad] expected no value with mode 'reflect' (only constant padding fills)");
  EXPECT_KILN_ERROR(kiln::pad(kiln::zeros({5}), {1, 1}, "replicate"),
                    "[pad] expected mode 'replicate' to pad 1, 2 or 3 trailing dims after 1 or 2 "
                    "others");
  EXPECT_KILN_ERROR(kiln::pad(x, {5, 0}, "reflect"),
                    "[pad] expected pads smaller than the input size 5 at dim 2, got "
                    "5 and 0");
  EXPECT_KILN_ERROR(kiln::pad(x, {0, -5}, "replicate"),
                    "[pad] expected a positive output size at dim 2, got 0");
  EXPECT_KILN_ERROR(kiln::pad(kiln::zeros({2, 0, 5}), {1, 1}, "reflect"),
                    "[pad] expected no empty dim but the batch dim, got shape [2, 0, 5]");
  // Circular pads wrap once over what the negative pads leave (PyTorch 1.13 reads
  // memory it has not written here).
  EXPECT_KILN_ERROR(kiln::pad(x, {3, -3}, "circular"), "[pad] expected pads of at most 2 at dim 2");
  EXPECT_KILN_ERROR(kiln::pad(x, {-6, 1}, "circular"),
                    "[pad] expected negative pads to crop at most the 5 elements of dim "
                    "2, got pads -6 and 1");
  EXPECT_KILN_ERROR(kiln::pad(kiln::zeros({2, 2, 3, 5}), {1, 1}, "circular"),
                    "[pad] expected mode 'circular' to pad 1, 2 or 3 trailing dims");
}

TEST(OpOptionErrors, ScatterReductions) {
  kiln::EagerGuard eager;
  Tensor self = kiln::zeros({3, 4});
  Tensor index = kiln::tensor<int64_t>({0, 2}).view({2, 1});
  Tensor src = kiln::ones({2, 1});
  EXPECT_KILN_ERROR(kiln::scatter(self, 0, index, src, "sum"),
                    "[scatter] expected reduce 'add' or 'multiply', got 'sum'");
  EXPECT_KILN_ERROR(
      kiln::scatter_reduce(self, 0, index, src, "add"),
      "[scatter_reduce] expected reduce 'sum', 'prod', 'mean', 'amax' or 'amin', got 'add'");
  EXPECT_KILN_ERROR(
      kiln::scatter_reduce(self.to(kiln::kBool), 0, index, src.to(kiln::kBool), "mean"),
      "[scatter_reduce] expected a self of a numeric dtype for reduce 'mean', got "
      "bool");
  EXPECT_KILN_ERROR(
      kiln::scatter_reduce(self, 0, kiln::tensor<int64_t>({0, 3}).view({2, 1}), src, "amax"),
      "[scatter_reduce] index 3 is out of bounds for dimension 0 with size 3");
  Tensor expanded = kiln::zeros({1, 4}).expand({3, 4});
  EXPECT_KILN_ERROR(kiln::scatter_reduce_(expanded, 0, index, src, "prod"), "scatter_reduce_");
}

TEST(OpOptionErrors, EmbeddingRenorm) {
  kiln::EagerGuard eager;
  Tensor w = kiln::ones({4, 3});
  // PyTorch 1.13 reads row -1 as the last row; kiln refuses it, as embedding does.
  EXPECT_KILN_ERROR(kiln::embedding_renorm_(w, kiln::tensor<int64_t>({1, -1}), 1.0, 2.0),
                    "[embedding_renorm_] index -1 at position [1] is out of range for a weight of "
                    "4 rows");
  EXPECT_KILN_ERROR(kiln::embedding_renorm_(w, kiln::tensor<double>({1.0}), 1.0, 2.0),
                    "[embedding_renorm_] expected indices of dtype int64 or int32, got float64");
  Tensor wi = kiln::ones({4, 3}, kiln::kInt64);
  EXPECT_KILN_ERROR(kiln::embedding_renorm_(wi, kiln::tensor<int64_t>({1}), 1.0, 2.0),
                    "[embedding_renorm_] expected a floating weight, got int64");
}

TEST(OpOptionErrors, NarrowWithTensorStart) {
  kiln::EagerGuard eager;
  Tensor x = kiln::zeros({5, 6});
  EXPECT_KILN_ERROR(x.narrow(0, kiln::tensor<int64_t>({1}), 2),
                    "[narrow] expected start to be a 0-dim integer tensor, got a 1-dim tensor");
  EXPECT_KILN_ERROR(x.narrow(0, kiln::scalar_tensor(1.0), 2),
                    "[narrow] expected start to be a 0-dim integer tensor, got a 0-dim tensor of "
                    "dtype float32");
  EXPECT_KILN_ERROR(x.narrow(0, kiln::scalar_tensor(4, kiln::kInt64), 2),
                    "[narrow] expected start (4) + length (2) to be at most the size of dim 0");
  EXPECT_KILN_ERROR(x.narrow(0, 0, -1), "[narrow] expected a length >= 0, got -1");
}

TEST(OpOptionErrors, Aliases) {
  kiln::EagerGuard eager;
  // Named as called (Note [Composite ops name themselves]), not maximum.
  EXPECT_KILN_ERROR(kiln::max(kiln::zeros({3}), kiln::zeros({4})), "[max.other]");
  EXPECT_KILN_ERROR(kiln::var(kiln::zeros({3}, kiln::kInt32), {0}, true), "[var]");
  EXPECT_KILN_ERROR(kiln::zeros({3}).where(kiln::zeros({3}), kiln::ones({3})),
                    "[where.self] expected a bool condition, got float32");
}

}  // namespace
