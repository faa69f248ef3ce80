// The skinny float32 product (Note [Skinny GEMM]): every vector path against
// a double-precision loop, over row counts, vector-width tails, register-block
// tails, strides and the beta/alpha forms; and linear/addmm through it.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kiln/kiln.h"
#include "runtime/cpu/gemv.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::cpu::SkinnyGemm;
using kiln::cpu::SkinnyIsa;

struct Problem {
  int64_t m, n, k, lda, ldw, ldc;
  float alpha, beta;
  bool beta_is_zero;
};

void check(const Problem& p, SkinnyIsa isa, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> a(static_cast<size_t>(p.m * p.lda)), w(static_cast<size_t>(p.n * p.ldw)),
      c(static_cast<size_t>(p.m * p.ldc));
  for (float& v : a) v = dist(rng);
  for (float& v : w) v = dist(rng);
  for (float& v : c) v = p.beta_is_zero ? NAN : dist(rng);
  const std::vector<float> c0 = c;
  SkinnyGemm g{p.m,   p.n,      p.k,   a.data(), p.lda,  w.data(),
               p.ldw, c.data(), p.ldc, p.alpha,  p.beta, p.beta_is_zero};
  kiln::cpu::skinny_gemm(g, isa);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.ldc; ++j) {
      const float got = c[i * p.ldc + j];
      if (j >= p.n) {
        // Padding past the row is never written.
        EXPECT_TRUE(std::isnan(got) ? std::isnan(c0[i * p.ldc + j]) : got == c0[i * p.ldc + j]);
        continue;
      }
      double dot = 0, mag = 0;
      for (int64_t q = 0; q < p.k; ++q) {
        dot += double(a[i * p.lda + q]) * w[j * p.ldw + q];
        mag += std::fabs(double(a[i * p.lda + q]) * w[j * p.ldw + q]);
      }
      double want = p.alpha * dot + (p.beta_is_zero ? 0.0 : p.beta * double(c0[i * p.ldc + j]));
      double tol = 1e-6 * (std::fabs(p.alpha) * mag + std::fabs(p.beta) * 4 + 1);
      ASSERT_NEAR(got, want, tol) << "isa " << int(isa) << " m " << p.m << " n " << p.n << " k "
                                  << p.k << " at (" << i << ", " << j << ")";
    }
  }
}

TEST(SkinnyGemm, EveryPathMatchesDoubleLoops) {
  uint64_t seed = 1;
  for (SkinnyIsa isa : {SkinnyIsa::kAvx512, SkinnyIsa::kAvx2, SkinnyIsa::kScalar}) {
    if (!kiln::cpu::skinny_isa_supported(isa)) continue;
    for (int64_t m = 1; m <= kiln::cpu::kSkinnyMaxRows; ++m) {
      for (int64_t n : {1, 3, 8, 13, 37, 50}) {
        for (int64_t k : {1, 7, 8, 15, 16, 17, 33, 100}) {
          check({m, n, k, k, k, n, 1.f, 0.f, true}, isa, seed++);
          // Padded rows everywhere, alpha and beta.
          check({m, n, k, k + 3, k + 5, n + 2, -0.5f, 1.5f, false}, isa, seed++);
        }
      }
    }
  }
}

TEST(SkinnyGemm, LargeWeightSplitsAcrossThreads) {
  // Big enough for several TBB chunks, with rows that end mid-block.
  for (SkinnyIsa isa : {SkinnyIsa::kBest, SkinnyIsa::kAvx2}) {
    if (!kiln::cpu::skinny_isa_supported(isa)) continue;
    for (int64_t m : {1, 3, 5}) check({m, 1029, 771, 771, 771, 1029, 1.f, 1.f, false}, isa, 99);
  }
}

// a @ w.T + bias in double precision, for 2-D a and w.
Tensor naive_linear(const Tensor& a, const Tensor& w, const Tensor& bias) {
  const int64_t m = a.size(0), k = a.size(1), n = w.size(0);
  std::vector<double> av = a.tolist<double>(), wv = w.tolist<double>(), bv = bias.tolist<double>(),
                      c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = bv[j];
      for (int64_t p = 0; p < k; ++p) s += av[i * k + p] * wv[j * k + p];
      c[i * n + j] = s;
    }
  }
  return kiln::tensor(c, {m, n});
}

TEST(SkinnyGemm, LinearAndAddmmTakeIt) {
  kiln::EagerGuard g;
  uint64_t seed = 5;
  for (int64_t m : {1, 2, 4, 7, 8, 9}) {
    for (const char* layout : {"contiguous", "strided", "offset"}) {
      Tensor x = kiln::testing::random_tensor({m, 130}, kiln::kFloat32, layout, seed++);
      Tensor w = kiln::testing::random_tensor({300, 130}, kiln::kFloat32, layout, seed++);
      Tensor b = kiln::testing::random_tensor({300}, kiln::kFloat32, "contiguous", seed++);
      Tensor want = naive_linear(x, w, b).to(kiln::kFloat32);
      EXPECT_TENSOR_CLOSE_TOL(kiln::linear(x, w, b), want, 1e-5, 1e-3);
      EXPECT_TENSOR_CLOSE_TOL(kiln::addmm(b, x, w.t()), want, 1e-5, 1e-3);
      EXPECT_TENSOR_CLOSE_TOL(kiln::addmm_act(b, x, w.t(), "relu"), kiln::relu(want), 1e-5, 1e-3);
      // A batch of one token folds into the rows of one product.
      Tensor x3 = x.unsqueeze(0);
      EXPECT_TENSOR_CLOSE_TOL(kiln::linear(x3, w, b), want.unsqueeze(0), 1e-5, 1e-3);
    }
  }
}

}  // namespace
