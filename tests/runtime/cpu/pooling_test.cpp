// The pools and interpolate beyond the oracle (which checks eager, lazy and
// compiled calls against PyTorch): lazy and compiled calls against eager on
// non-contiguous inputs, and the forms where kiln and PyTorch 1.13 differ.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::random_tensor;

// One use of every op, summed to a (N, C) tensor so that one result checks all.
Tensor every_op(const Tensor& x, const Tensor& seq) {
  auto [mv, mi] = kiln::max_pool2d_with_indices(x, {3, 2}, {2, 1}, {1, 1}, {1, 2}, true);
  Tensor y = kiln::max_pool2d(x, 2).sum({2, 3}) + mv.sum({2, 3}) +
             mi.to(x.dtype()).mean({2, 3}) * 0.01 +
             kiln::avg_pool2d(x, 3, 2, 1, true, false).sum({2, 3}) +
             kiln::avg_pool2d(x, {2, 3}, 1, 0, false, true, 5).sum({2, 3}) +
             kiln::adaptive_avg_pool2d(x, {3, 4}).sum({2, 3}) +
             std::get<0>(kiln::adaptive_max_pool2d(x, {4, 3})).sum({2, 3}) +
             kiln::interpolate(x, {11, 5}, "bilinear", true).mean({2, 3}) +
             kiln::interpolate(x, std::nullopt, std::vector<double>{1.5, 0.7}).mean({2, 3}) +
             kiln::interpolate(x, std::nullopt, 2.0, "bilinear").mean({2, 3});
  Tensor z = kiln::max_pool1d(seq, 3, 2, 1).sum({2}) +
             std::get<0>(kiln::max_pool1d_with_indices(seq, 2, 1, 1, 2, true)).sum({2}) +
             kiln::avg_pool1d(seq, 4, 3, 2, true).sum({2}) +
             kiln::adaptive_avg_pool1d(seq, 5).sum({2}) +
             std::get<0>(kiln::adaptive_max_pool1d(seq, 4)).sum({2}) +
             kiln::interpolate(seq, {17}, "linear").mean({2}) +
             kiln::interpolate(seq, std::nullopt, 1.3, "nearest-exact").mean({2});
  return y + z;
}

TEST(Pool, LazyMatchesEagerOnNonContiguousInput) {
  ASSERT_TRUE(kiln::jit::is_lazy());
  uint64_t seed = 10;
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat64, kiln::kBFloat16, kiln::kFloat16}) {
    for (const char* layout : {"transposed", "strided", "offset", "expanded"}) {
      SCOPED_TRACE(std::string(kiln::dtype_name(dt)) + " " + layout);
      Tensor x = random_tensor({2, 3, 9, 7}, dt, layout, seed++);
      Tensor seq = random_tensor({2, 3, 13}, dt, layout, seed++);
      auto body = [&](const Tensor& a, const Tensor& b) { return every_op(a * 0.5, b); };
      Tensor eager;
      {
        kiln::EagerGuard g;
        eager = body(x, seq);
      }
      Tensor lazy = body(x, seq);
      ASSERT_TRUE(lazy.is_pending());
      const bool low = kiln::is_reduced_float(dt);
      const double rtol = low ? (dt == kiln::kBFloat16 ? 1.6e-2 : 2e-3) : 1e-5;
      EXPECT_TENSOR_CLOSE_TOL(lazy, eager, rtol, low ? 0.25 : 1e-4);
    }
  }
}

TEST(Pool, CompiledMatchesEager) {
  auto body = [](const Tensor& x, const Tensor& seq) { return every_op(x, seq); };
  Tensor x = random_tensor({2, 3, 8, 9}, kiln::kFloat32, "transposed", 20);
  Tensor seq = random_tensor({2, 3, 12}, kiln::kFloat32, "strided", 21);
  Tensor expected;
  {
    kiln::EagerGuard eager;
    expected = body(x, seq);
  }
  auto f = kiln::jit::compile(body, {.name = "pooling"});
  for (int call = 0; call < 3; ++call) {
    EXPECT_TENSOR_CLOSE_TOL(f(x, seq), expected, 1e-4, 1e-4);
  }
  EXPECT_EQ(f.stats().calls, 3);
}

TEST(Pool, IndicesPointAtTheMaxima) {
  kiln::EagerGuard eager;
  Tensor x = random_tensor({2, 3, 7, 8}, kiln::kFloat64, "transposed", 30);
  auto [values, indices] = kiln::max_pool2d_with_indices(x, 3, 2, 1, {2, 1}, true);
  Tensor plane = x.reshape({2, 3, 56});
  Tensor picked = kiln::gather(plane, 2, indices.reshape({2, 3, -1})).view(values.sizes());
  EXPECT_TENSOR_CLOSE(picked, values);
  auto [av, ai] = kiln::adaptive_max_pool2d(x, {3, 5});
  EXPECT_TENSOR_CLOSE(kiln::gather(plane, 2, ai.reshape({2, 3, -1})).view(av.sizes()), av);
}

// Where every value of a window is -inf, PyTorch returns the window's first
// tap inside the input, not one in the padding.
TEST(Pool, AllMinusInfinityWindowPointsInside) {
  kiln::EagerGuard eager;
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = kiln::tensor<float>({-inf, -inf, 1.0f}).view({1, 1, 3});
  auto [values, indices] = kiln::max_pool1d_with_indices(x, 3, 1, 1);
  EXPECT_EQ(indices.tolist<int64_t>(), (std::vector<int64_t>{0, 2, 2}));
  EXPECT_EQ(values.tolist<float>()[0], -inf);
}

// PyTorch 1.13 returns the last NaN's position; kiln returns the first's
// (max.dim's rule). The value is NaN in both.
TEST(Pool, NaNMaximumIsTheFirstNaN) {
  kiln::EagerGuard eager;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = kiln::tensor<float>({nan, 1.0f, nan, 2.0f}).view({1, 1, 4});
  auto [values, indices] = kiln::max_pool1d_with_indices(x, 4);
  EXPECT_TRUE(std::isnan(values.tolist<float>()[0]));
  EXPECT_EQ(indices.tolist<int64_t>()[0], 0);
}

// A one-element size or scale_factor applies to every spatial dim (PyTorch
// raises for a one-element list with two spatial dims).
TEST(Interpolate, OneValueForEveryDim) {
  kiln::EagerGuard eager;
  Tensor x = random_tensor({2, 3, 5, 4}, kiln::kFloat32, "strided", 40);
  EXPECT_TENSOR_CLOSE(kiln::interpolate(x, std::vector<int64_t>{7}, "bilinear"),
                      kiln::interpolate(x, {7, 7}, "bilinear"));
  EXPECT_TENSOR_CLOSE(kiln::interpolate(x, std::nullopt, std::vector<double>{2.5}),
                      kiln::interpolate(x, std::nullopt, std::vector<double>{2.5, 2.5}));
}

TEST(Interpolate, ScaleOneCopies) {
  kiln::EagerGuard eager;
  Tensor x = random_tensor({2, 3, 5, 4}, kiln::kFloat32, "transposed", 41);
  Tensor y = kiln::interpolate(x, {5, 4}, "bilinear");
  EXPECT_TENSOR_CLOSE(y, x);
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_NE(y.data_ptr(), x.data_ptr());
  EXPECT_TENSOR_CLOSE(kiln::interpolate(x, {5, 4}), x);
}

TEST(Pool, ResultsAreContiguous) {
  kiln::EagerGuard eager;
  Tensor x = random_tensor({2, 3, 8, 8}, kiln::kFloat32, "transposed", 50);
  EXPECT_TRUE(kiln::max_pool2d(x, 2).is_contiguous());
  EXPECT_TRUE(std::get<1>(kiln::max_pool2d_with_indices(x[0], 3, 2, 1)).is_contiguous());
  EXPECT_TRUE(kiln::avg_pool2d(x, 3, 2, 1).is_contiguous());
  EXPECT_TRUE(kiln::adaptive_avg_pool2d(x, {3, 3}).is_contiguous());
  EXPECT_TRUE(kiln::interpolate(x, {5, 11}, "bilinear").is_contiguous());
}

// On CUDA the composites run CUDA's pad, views, reductions, index_select and
// pointwise kernels: eager, lazy and compiled against the CPU's eager result.
TEST(Pool, CudaMatchesTheCpu) {
  KILN_REQUIRE_CUDA();
  const kiln::Device cuda = kiln::Device::cuda();
  Tensor x = random_tensor({2, 3, 9, 7}, kiln::kFloat32, "transposed", 60);
  Tensor seq = random_tensor({2, 3, 13}, kiln::kFloat32, "strided", 61);
  auto body = [](const Tensor& x, const Tensor& seq) { return every_op(x, seq); };
  Tensor expected;
  {
    kiln::EagerGuard eager;
    expected = body(x, seq);
  }
  Tensor xd = x.to(cuda), sd = seq.to(cuda);
  {
    kiln::EagerGuard eager;
    EXPECT_TENSOR_CLOSE_TOL(body(xd, sd).cpu(), expected, 1e-4, 1e-4);
  }
  EXPECT_TENSOR_CLOSE_TOL(body(xd, sd).cpu(), expected, 1e-4, 1e-4);
  auto f = kiln::jit::compile(body, {.name = "pooling_cuda"});
  for (int call = 0; call < 3; ++call) {
    EXPECT_TENSOR_CLOSE_TOL(f(xd, sd).cpu(), expected, 1e-4, 1e-4);
  }
}

}  // namespace
