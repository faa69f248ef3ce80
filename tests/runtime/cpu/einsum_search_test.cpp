// einsum and searchsorted beyond the oracle (which checks eager and lazy
// against PyTorch): compiled functions against eager, and the composite's
// forms against products written out by hand.

#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::random_tensor;

TEST(Einsum, MatchesProductsWrittenOut) {
  kiln::EagerGuard eager;
  Tensor q = random_tensor({2, 3, 4, 8}, kiln::kFloat32, "transposed", 1);
  Tensor k = random_tensor({2, 3, 5, 8}, kiln::kFloat32, "strided", 2);
  EXPECT_TENSOR_CLOSE_TOL(kiln::einsum("bhqd,bhkd->bhqk", {q, k}),
                          kiln::matmul(q, k.transpose(-1, -2)), 1e-5, 1e-5);
  Tensor m = random_tensor({4, 4}, kiln::kFloat64, "offset", 3);
  EXPECT_TENSOR_CLOSE(kiln::einsum("ii", {m}), kiln::sum(m.diagonal()));
  Tensor x = random_tensor({3, 4}, kiln::kFloat32, "contiguous", 4);
  Tensor w = random_tensor({5, 4}, kiln::kFloat32, "contiguous", 5);
  Tensor v = random_tensor({5}, kiln::kFloat32, "contiguous", 6);
  // Three operands, left to right: (x w^T) v.
  EXPECT_TENSOR_CLOSE_TOL(kiln::einsum("ij,kj,k->i", {x, w, v}),
                          kiln::mv(kiln::matmul(x, w.t()), v), 1e-5, 1e-5);
}

TEST(Einsum, CompiledMatchesEager) {
  auto body = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    return kiln::einsum("bij,bjk,bk->bi", {a, b, c}) * 2.0 +
           kiln::einsum("bii->b", {b}).unsqueeze(1);
  };
  Tensor a = random_tensor({2, 3, 4}, kiln::kFloat32, "transposed", 7);
  Tensor b = random_tensor({2, 4, 4}, kiln::kFloat32, "strided", 8);
  Tensor c = random_tensor({2, 4}, kiln::kFloat32, "contiguous", 9);
  Tensor expected;
  {
    kiln::EagerGuard eager;
    expected = body(a, b, c);
  }
  auto f = kiln::jit::compile(body, {.name = "einsum"});
  for (int call = 0; call < 3; ++call) {
    EXPECT_TENSOR_CLOSE_TOL(f(a, b, c), expected, 1e-5, 1e-5);
  }
  EXPECT_EQ(f.stats().calls, 3);
  EXPECT_TENSOR_CLOSE_TOL(body(a, b, c), expected, 1e-5, 1e-5);  // lazy
}

TEST(Searchsorted, CompiledMatchesEager) {
  auto body = [](const Tensor& seq, const Tensor& v) {
    return kiln::searchsorted(seq, v * 2.0, false, true) + kiln::bucketize(v, seq.select(0, 0));
  };
  Tensor seq = std::get<0>(kiln::sort(random_tensor({3, 9}, kiln::kFloat32, "contiguous", 10)));
  Tensor v = random_tensor({3, 5}, kiln::kFloat32, "transposed", 11);
  Tensor expected;
  {
    kiln::EagerGuard eager;
    expected = body(seq, v);
  }
  auto f = kiln::jit::compile(body, {.name = "search"});
  for (int call = 0; call < 2; ++call) EXPECT_TENSOR_CLOSE(f(seq, v), expected);
  // New values reach the compiled search.
  Tensor v2 = random_tensor({3, 5}, kiln::kFloat32, "contiguous", 12);
  Tensor expected2;
  {
    kiln::EagerGuard eager;
    expected2 = body(seq, v2);
  }
  EXPECT_TENSOR_CLOSE(f(seq, v2), expected2);
}

// Note [searchsorted] on CUDA takes the CPU loop's steps for every value at
// once: the same indices for sorted rows, rows with NaN (sorted last, as
// sort puts them) and unsorted rows, both sides, batched and 1-D, int32 out.
TEST(Searchsorted, CudaTakesTheCpuSteps) {
  KILN_REQUIRE_CUDA();
  Tensor sorted =
      std::get<0>(kiln::sort(random_tensor({3, 37}, kiln::kFloat32, "contiguous", 7), -1));
  Tensor with_nan = sorted.clone();
  with_nan.narrow(1, 30, 7).fill_(NAN);
  Tensor unsorted = random_tensor({3, 37}, kiln::kFloat32, "transposed", 8);
  Tensor values = random_tensor({3, 11}, kiln::kFloat32, "strided", 9);
  values.narrow(1, 0, 1).fill_(NAN);
  for (const Tensor& seq : {sorted, with_nan, unsorted}) {
    for (bool right : {false, true}) {
      SCOPED_TRACE(std::string(right ? "right" : "left"));
      EXPECT_TENSOR_CLOSE(kiln::searchsorted(seq.cuda(), values.cuda(), false, right).cpu(),
                          kiln::searchsorted(seq, values, false, right));
      Tensor row = seq.select(0, 1);
      EXPECT_TENSOR_CLOSE(kiln::searchsorted(row.cuda(), values.cuda(), true, right).cpu(),
                          kiln::searchsorted(row, values, true, right));
    }
  }
  EXPECT_TENSOR_CLOSE(kiln::bucketize(values.cuda(), sorted.select(0, 0).cuda()).cpu(),
                      kiln::bucketize(values, sorted.select(0, 0)));
}

}  // namespace
