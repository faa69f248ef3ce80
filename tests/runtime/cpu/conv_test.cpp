// conv1d and conv2d beyond the oracle (which checks eager and lazy against
// PyTorch): lazy and compiled calls against eager on non-contiguous inputs,
// the composite against a convolution written out as loops, and the forms
// PyTorch 1.13 gets wrong or the oracle cannot spell.

#include <gtest/gtest.h>

#include <vector>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::random_tensor;

// conv2d in float64 by its definition, one output element at a time.
Tensor conv2d_loops(const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t sh,
                    int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  kiln::EagerGuard eager;
  const Tensor x = input.to(kiln::kFloat64).contiguous();
  const Tensor w = weight.to(kiln::kFloat64).contiguous();
  const Tensor b = bias.to(kiln::kFloat64).contiguous();
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t o = w.size(0), kh = w.size(2), kw = w.size(3);
  const int64_t oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
  const int64_t ow = (wd + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  const int64_t cg = c / groups, og = o / groups;
  const double* xp = x.data_ptr<double>();
  const double* wp = w.data_ptr<double>();
  const double* bp = b.data_ptr<double>();
  std::vector<double> out(static_cast<size_t>(n * o * oh * ow));
  size_t at = 0;
  for (int64_t in = 0; in < n; ++in) {
    for (int64_t io = 0; io < o; ++io) {
      const int64_t g = io / og;
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t xx = 0; xx < ow; ++xx) {
          double s = bp[io];
          for (int64_t ic = 0; ic < cg; ++ic) {
            for (int64_t i = 0; i < kh; ++i) {
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t r = y * sh - ph + i * dh, q = xx * sw - pw + j * dw;
                if (r < 0 || r >= h || q < 0 || q >= wd) continue;
                s += xp[((in * c + g * cg + ic) * h + r) * wd + q] *
                     wp[((io * cg + ic) * kh + i) * kw + j];
              }
            }
          }
          out[at++] = s;
        }
      }
    }
  }
  return kiln::tensor(out, {n, o, oh, ow});
}

TEST(Conv, MatchesLoops) {
  kiln::EagerGuard eager;
  Tensor x = random_tensor({2, 6, 7, 8}, kiln::kFloat64, "transposed", 1);
  Tensor w = random_tensor({4, 3, 3, 2}, kiln::kFloat64, "strided", 2);
  Tensor b = random_tensor({4}, kiln::kFloat64, "offset", 3);
  EXPECT_TENSOR_CLOSE(kiln::conv2d(x, w, b, {2, 1}, {1, 2}, {1, 3}, 2),
                      conv2d_loops(x, w, b, 2, 1, 1, 2, 1, 3, 2));
  // conv1d is conv2d over a height of 1.
  Tensor x1 = random_tensor({2, 6, 9}, kiln::kFloat64, "strided", 4);
  Tensor w1 = random_tensor({6, 2, 3}, kiln::kFloat64, "contiguous", 5);
  Tensor b1 = kiln::repeat(b.narrow(0, 0, 2), {3});
  EXPECT_TENSOR_CLOSE(
      kiln::conv1d(x1, w1, b1, 2, 1, 2, 3),
      conv2d_loops(x1.unsqueeze(2), w1.unsqueeze(2), b1, 1, 2, 0, 1, 1, 2, 3).squeeze(2));
}

TEST(Conv, LazyMatchesEagerOnNonContiguousInput) {
  ASSERT_TRUE(kiln::jit::is_lazy());
  uint64_t seed = 10;
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat64, kiln::kBFloat16, kiln::kFloat16}) {
    for (const char* layout : {"transposed", "strided", "offset", "expanded"}) {
      SCOPED_TRACE(std::string(kiln::dtype_name(dt)) + " " + layout);
      Tensor x = random_tensor({2, 4, 9, 7}, dt, layout, seed++);
      Tensor w = random_tensor({6, 2, 3, 3}, dt, "contiguous", seed++);
      Tensor b = random_tensor({6}, dt, "strided", seed++);
      auto body = [&](const Tensor& in) {
        return kiln::relu(kiln::conv2d(in * 0.5, w, b, {2, 1}, {1, 0}, {1, 2}, 2)) +
               kiln::conv2d(in, w, std::nullopt, 1, "same", 1, 2).narrow(2, 0, 1).sum();
      };
      Tensor eager;
      {
        kiln::EagerGuard g;
        eager = body(x);
      }
      Tensor lazy = body(x);
      ASSERT_TRUE(lazy.is_pending());
      // Eager and lazy run the same products; 16-bit results may differ by
      // the fused kernels' rounding (Note [16-bit tolerances]).
      const bool low = kiln::is_reduced_float(dt);
      const double rtol = low ? (dt == kiln::kBFloat16 ? 1.6e-2 : 2e-3) : 1e-5;
      EXPECT_TENSOR_CLOSE_TOL(lazy, eager, rtol, low ? 0.25 : 1e-4);
    }
  }
}

TEST(Conv, CompiledMatchesEager) {
  Tensor w = random_tensor({6, 4, 3, 3}, kiln::kFloat32, "contiguous", 20);
  Tensor w1 = random_tensor({4, 1, 5}, kiln::kFloat32, "contiguous", 21);
  auto body = [&](const Tensor& x, const Tensor& seq) {
    Tensor pooled = kiln::conv1d(seq, w1, std::nullopt, 1, "same", 1, 4).mean({-1});
    return kiln::conv2d(x, w, std::nullopt, 1, 1).sum({2, 3}) +
           kiln::repeat(pooled, {1, 2}).narrow(1, 0, 6);
  };
  Tensor x = random_tensor({2, 4, 6, 5}, kiln::kFloat32, "transposed", 22);
  Tensor seq = random_tensor({2, 4, 11}, kiln::kFloat32, "strided", 23);
  Tensor expected;
  {
    kiln::EagerGuard eager;
    expected = body(x, seq);
  }
  auto f = kiln::jit::compile(body, {.name = "conv"});
  for (int call = 0; call < 3; ++call) {
    EXPECT_TENSOR_CLOSE_TOL(f(x, seq), expected, 1e-4, 1e-4);
  }
  EXPECT_EQ(f.stats().calls, 3);
}

TEST(Conv, SameMatchesItsPadding) {
  kiln::EagerGuard eager;
  Tensor x = random_tensor({2, 3, 6, 5}, kiln::kFloat32, "contiguous", 30);
  Tensor w = random_tensor({4, 3, 3, 5}, kiln::kFloat32, "contiguous", 31);
  EXPECT_TENSOR_CLOSE(kiln::conv2d(x, w, std::nullopt, 1, "same"),
                      kiln::conv2d(x, w, std::nullopt, 1, {1, 2}));
  EXPECT_TENSOR_CLOSE(kiln::conv2d(x, w, std::nullopt, 1, "valid"), kiln::conv2d(x, w));
  // An even kernel: the extra row and column of zeros go at the end.
  Tensor w2 = random_tensor({4, 3, 2, 4}, kiln::kFloat32, "contiguous", 32);
  EXPECT_TENSOR_CLOSE(kiln::conv2d(x, w2, std::nullopt, 1, std::string("same")),
                      kiln::conv2d(kiln::pad(x, {1, 2, 0, 1}), w2));
}

// PyTorch 1.13 returns (N, 0, ...) when the input has no channels; the
// convolution of nothing is the bias, (N, O, ...), as kiln gives.
TEST(Conv, NoInputChannelsGivesTheBias) {
  kiln::EagerGuard eager;
  Tensor b = kiln::tensor<float>({1.0f, -2.0f, 3.0f});
  Tensor y = kiln::conv2d(kiln::ones({2, 0, 5, 5}), kiln::ones({3, 0, 3, 3}), b, 1, 1);
  EXPECT_TENSOR_CLOSE(y, b.view({1, 3, 1, 1}).expand({2, 3, 5, 5}));
}

TEST(Conv, ResultIsContiguous) {
  kiln::EagerGuard eager;
  Tensor x = random_tensor({3, 4, 6, 6}, kiln::kFloat32, "transposed", 40);
  Tensor w = random_tensor({8, 2, 3, 3}, kiln::kFloat32, "contiguous", 41);
  EXPECT_TRUE(kiln::conv2d(x, w, std::nullopt, 1, 0, 1, 2).is_contiguous());
  EXPECT_TRUE(kiln::conv2d(x[0], w, std::nullopt, 1, 0, 1, 2).is_contiguous());
  Tensor x1 = random_tensor({3, 4, 9}, kiln::kFloat32, "strided", 42);
  Tensor w1 = random_tensor({6, 4, 2}, kiln::kFloat32, "contiguous", 43);
  EXPECT_TRUE(kiln::conv1d(x1, w1).is_contiguous());
  EXPECT_TRUE(kiln::conv1d(x1[1], w1, std::nullopt, 2).is_contiguous());
}

// On CUDA the composite runs CUDA's pad, copies and bmm (cuBLASLt): eager,
// lazy and compiled (one graph per call) against the CPU's eager result.
TEST(Conv, CudaMatchesTheCpu) {
  KILN_REQUIRE_CUDA();
  const kiln::Device cuda = kiln::Device::cuda();
  Tensor x = random_tensor({2, 6, 9, 7}, kiln::kFloat32, "transposed", 50);
  Tensor w = random_tensor({4, 3, 3, 2}, kiln::kFloat32, "contiguous", 51);
  Tensor b = random_tensor({4}, kiln::kFloat32, "contiguous", 52);
  Tensor s = random_tensor({3, 5, 13}, kiln::kFloat32, "strided", 53);
  Tensor w1 = random_tensor({5, 1, 4}, kiln::kFloat32, "contiguous", 54);
  auto body = [](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& s,
                 const Tensor& w1) {
    Tensor y = kiln::conv2d(x, w, b, {2, 1}, {1, 0}, {1, 2}, 2);
    Tensor z = kiln::conv1d(s, w1, std::nullopt, 1, "same", 2, 5);
    return kiln::sum(y, {2, 3}) + kiln::mean(z);
  };
  Tensor expected;
  {
    kiln::EagerGuard eager;
    expected = body(x, w, b, s, w1);
  }
  Tensor xd = x.to(cuda), wd = w.to(cuda), bd = b.to(cuda), sd = s.to(cuda), w1d = w1.to(cuda);
  {
    kiln::EagerGuard eager;
    EXPECT_TENSOR_CLOSE_TOL(body(xd, wd, bd, sd, w1d).cpu(), expected, 1e-4, 1e-4);
  }
  EXPECT_TENSOR_CLOSE_TOL(body(xd, wd, bd, sd, w1d).cpu(), expected, 1e-4, 1e-4);
  auto f = kiln::jit::compile(body, {.name = "conv_cuda"});
  for (int call = 0; call < 3; ++call) {
    EXPECT_TENSOR_CLOSE_TOL(f(xd, wd, bd, sd, w1d).cpu(), expected, 1e-4, 1e-4);
  }
}

}  // namespace
