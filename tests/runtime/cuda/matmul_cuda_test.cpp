// Matrix products on CUDA (cuBLASLt) against the eager CPU kernels, on the
// same values in the same layouts: transposed, sliced, offset and
// batch-broadcast operands, float32 / float16 / bfloat16 / float64, the
// fused epilogues of addmm_act, out= and in-place forms, and error parity.
// Skips without a GPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include "jit/record/trace_buffer.h"
#include "kiln/kiln.h"
#include "runtime/cuda/blas_lt.h"
#include "runtime/cuda/check.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace kiln {
namespace {

using kiln::testing::random_tensor;
using Shape = std::vector<int64_t>;

constexpr DType kDTypes[] = {kFloat32, kFloat16, kBFloat16, kFloat64};
const char* const kLayouts[] = {"contiguous", "transposed", "strided", "offset"};

// GEMM sums in another order than OpenBLAS; half types round once either way
// (the CPU converts to float32 and rounds at the end), so one or two ulps.
testing::Tolerance tol(DType t) {
  switch (t) {
    case kFloat16:
      return {4e-3, 2e-2};
    case kBFloat16:
      return {2e-2, 1e-1};
    case kFloat64:
      return {1e-10, 1e-10};
    default:
      return {1e-4, 1e-4};
  }
}

// cuBLASLt's GELU may use a fast tanh (relative error up to ~2^-11), applied
// to the float32 accumulator: a few 1e-4 from eager gelu(tanh) at most.
testing::Tolerance act_tol(DType t, const std::string& act) {
  testing::Tolerance r = tol(t);
  if (act == "gelu_tanh") r = {std::max(r.rtol, 2e-3), std::max(r.atol, 2e-3)};
  return r;
}

#define EXPECT_CLOSE_FOR(actual, expected, dtype)                                           \
  do {                                                                                      \
    std::string kiln_msg_ = ::kiln::testing::compare((actual).cpu(), expected, tol(dtype)); \
    EXPECT_TRUE(kiln_msg_.empty()) << kiln_msg_;                                            \
  } while (0)

using testing::to_cuda;

class MatmulCuda : public ::testing::Test {
 protected:
  void SetUp() override { cuda::set_allow_tf32(false); }
  void TearDown() override { cuda::set_allow_tf32(false); }
};

TEST_F(MatmulCuda, MmEveryDtypeAndLayout) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  const std::vector<std::array<int64_t, 3>> sizes = {
      {5, 7, 3}, {1, 9, 4}, {6, 5, 1}, {33, 17, 65}, {64, 64, 64}, {0, 3, 4}, {4, 0, 5}};
  int cases = 0;
  uint64_t seed = 1;
  for (DType t : kDTypes) {
    for (const char* la : kLayouts) {
      for (const char* lb : kLayouts) {
        for (const auto& [m, k, n] : sizes) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " " + la + " x " + lb + " m=" +
                       std::to_string(m) + " k=" + std::to_string(k) + " n=" + std::to_string(n));
          Tensor a = random_tensor({m, k}, t, la, seed++);
          Tensor b = random_tensor({k, n}, t, lb, seed++);
          Tensor expected = mm(a, b);
          Tensor got = mm(to_cuda(a), to_cuda(b));
          ASSERT_TRUE(got.is_cuda());
          EXPECT_EQ(got.dtype(), t);
          EXPECT_EQ(got.sizes(), expected.sizes());
          EXPECT_CLOSE_FOR(got, expected, t);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 4 * 4 * 4 * 7);
}

TEST_F(MatmulCuda, BmmAndBaddbmmWithBroadcastBatches) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  uint64_t seed = 100;
  for (DType t : kDTypes) {
    for (const char* la : {"contiguous", "transposed", "expanded", "offset"}) {
      for (const char* lb : {"contiguous", "transposed", "expanded", "strided"}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + la + " x " + lb);
        Tensor a = random_tensor({3, 5, 4}, t, la, seed++);
        Tensor b = random_tensor({3, 4, 6}, t, lb, seed++);
        EXPECT_CLOSE_FOR(bmm(to_cuda(a), to_cuda(b)), bmm(a, b), t);
        Tensor self = random_tensor({5, 6}, t, "contiguous", seed++);
        EXPECT_CLOSE_FOR(baddbmm(to_cuda(self), to_cuda(a), to_cuda(b), 0.5, 2),
                         baddbmm(self, a, b, 0.5, 2), t);
        Tensor row = random_tensor({6}, t, "contiguous", seed++);
        EXPECT_CLOSE_FOR(baddbmm(to_cuda(row), to_cuda(a), to_cuda(b)), baddbmm(row, a, b), t);
      }
    }
  }
  // baddbmm converts self to the batches' dtype.
  Tensor a = random_tensor({2, 3, 4}, kFloat32, "contiguous", 7);
  Tensor b = random_tensor({2, 4, 5}, kFloat32, "contiguous", 8);
  Tensor self = random_tensor({2, 3, 5}, kFloat64, "contiguous", 9);
  EXPECT_CLOSE_FOR(baddbmm(to_cuda(self), to_cuda(a), to_cuda(b)), baddbmm(self, a, b), kFloat32);
}

// A self that broadcasts per batch or along a column goes in as the
// product's C (it raised a shape error where it was added afterwards).
TEST_F(MatmulCuda, BaddbmmSelfPerBatchOrColumn) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  uint64_t seed = 150;
  for (DType t : kDTypes) {
    for (const Shape& ss : std::vector<Shape>{{3, 1, 6}, {3, 5, 1}, {1, 5, 1}, {5, 1}, {3, 1, 1}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " self " + std::to_string(ss.size()) + "-D");
      Tensor a = random_tensor({3, 5, 4}, t, "transposed", seed++);
      Tensor b = random_tensor({3, 4, 6}, t, "contiguous", seed++);
      Tensor self = random_tensor(ss, t, "contiguous", seed++);
      EXPECT_CLOSE_FOR(baddbmm(to_cuda(self), to_cuda(a), to_cuda(b)), baddbmm(self, a, b), t);
      EXPECT_CLOSE_FOR(baddbmm(to_cuda(self), to_cuda(a), to_cuda(b), 0.5, 2),
                       baddbmm(self, a, b, 0.5, 2), t);
    }
  }
}

// A bias row added to a batched product joins the float32 sums: a 16-bit
// result is rounded once (Note [Sums rounded once]). Here the bias cancels
// the product, so a product rounded first would leave nothing of the exact
// sum. This shape folds into one product of 15 rows and 6 columns whose
// bias takes cuBLASLt's epilogue; in bfloat16 the heuristic's first answer
// splits k and rounded before the bias on an H200 (every element 0) until
// such answers were replaced (Note [Split k rounds once]).
TEST_F(MatmulCuda, BaddbmmBiasJoinsTheSumsBeforeRounding) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  for (DType t : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor a = random_tensor({1, 1, 8}, t, "contiguous", 61).expand({3, 5, 8});
    Tensor b = random_tensor({1, 8, 6}, t, "contiguous", 62).expand({3, 8, 6});
    Tensor p = bmm(a.to(kFloat64), b.to(kFloat64));
    Tensor row = (p.select(0, 0).select(0, 0) * -1.0).to(t);
    Tensor expected = (p + row.to(kFloat64)).to(t).to(kFloat64);
    Tensor got = baddbmm(to_cuda(row), to_cuda(a), to_cuda(b)).cpu().to(kFloat64);
    EXPECT_TENSOR_CLOSE_TOL(got, expected, 1e-2, 1e-6);
  }
}

// Every element of `got` within one unit in the last place (of `t`, at the
// exact value's magnitude) of `exact`, plus what float32 sums of k terms in
// another order may differ by (`bound`: k * 2^-22 * sum |terms|). A sum
// rounded to 16 bits twice (a product before its bias, or partial sums)
// misses by up to a unit at the larger magnitude of the parts.
std::string within_one_ulp(const Tensor& got, const Tensor& exact, const Tensor& bound, DType t) {
  const Tensor g = got.cpu().to(kFloat64).contiguous(), e = exact.contiguous(),
               b = bound.contiguous();
  const int mantissa = t == kBFloat16 ? 7 : 10;
  const int min_exp = t == kBFloat16 ? -126 : -14;
  const double* gp = g.data_ptr<double>();
  const double* ep = e.data_ptr<double>();
  const double* bp = b.data_ptr<double>();
  int bad = 0;
  std::string first;
  for (int64_t i = 0; i < g.numel(); ++i) {
    int ex = 0;
    std::frexp(ep[i], &ex);  // |e| in [2^(ex-1), 2^ex)
    const double ulp = std::ldexp(1.0, std::max(ex - 1, min_exp) - mantissa);
    const double err = std::abs(gp[i] - ep[i]);
    if (!(err <= ulp + bp[i])) {
      if (bad++ == 0) {
        first = "element " + std::to_string(i) + ": got " + std::to_string(gp[i]) + ", exact " +
                std::to_string(ep[i]) + " (one ulp " + std::to_string(ulp) + ")";
      }
    }
  }
  return bad ? std::to_string(bad) + " of " + std::to_string(g.numel()) +
                   " elements off by more than an ulp; first " + first
             : std::string();
}

// Note [Sums rounded once] and Note [C apart from D], on every path a 16-bit
// product takes: the generated skinny kernel, cuBLASLt (split k included),
// the batched and the folded forms, with and without a bias. Row 0's bias
// cancels its product.
TEST_F(MatmulCuda, SixteenBitSumsRoundOnce) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  struct Restore {
    ~Restore() { cuda::set_skinny_path(cuda::SkinnyPath::Auto); }
  } restore;
  uint64_t seed = 700;
  int cases = 0;
  for (DType t : {kFloat16, kBFloat16}) {
    for (cuda::SkinnyPath path :
         {cuda::SkinnyPath::Auto, cuda::SkinnyPath::Generated, cuda::SkinnyPath::Cublas}) {
      cuda::set_skinny_path(path);
      for (int64_t m : {1, 3, 6, 9, 16, 40}) {
        for (int64_t k : {8, 16, 100, 768, 4096}) {
          const int64_t n = 24;
          SCOPED_TRACE(std::string(dtype_name(t)) + " path " +
                       std::to_string(static_cast<int>(path)) + " m=" + std::to_string(m) +
                       " k=" + std::to_string(k));
          Tensor x = random_tensor({m, k}, t, "contiguous", seed++);
          Tensor w = random_tensor({n, k}, t, "contiguous", seed++);
          Tensor x64 = x.to(kFloat64), w64 = w.to(kFloat64);
          Tensor p = mm(x64, w64.t());
          Tensor bias = (p.select(0, 0) * -1.0).to(t);
          Tensor exact = p + bias.to(kFloat64);
          Tensor bound =
              mm(abs(x64), abs(w64).t()) * (static_cast<double>(k) * std::ldexp(1.0, -22));
          std::string msg =
              within_one_ulp(linear(to_cuda(x), to_cuda(w), to_cuda(bias)), exact, bound, t);
          EXPECT_TRUE(msg.empty()) << "linear: " << msg;
          msg = within_one_ulp(addmm(to_cuda(bias), to_cuda(x), to_cuda(w).t()), exact, bound, t);
          EXPECT_TRUE(msg.empty()) << "addmm: " << msg;
          msg = within_one_ulp(mm(to_cuda(x), to_cuda(w).t()), p, bound, t);
          EXPECT_TRUE(msg.empty()) << "mm: " << msg;
          // Two batches: the second's rows reversed, so only its last row cancels.
          Tensor xb = stack({x, flip(x, {0})});
          Tensor eb = stack({exact, flip(p, {0}) + bias.to(kFloat64)});
          Tensor bb = stack({bound, flip(bound, {0})});
          Tensor wb = to_cuda(w).t().unsqueeze(0).expand({2, k, n});
          msg = within_one_ulp(baddbmm(to_cuda(bias), to_cuda(xb), wb), eb, bb, t);
          EXPECT_TRUE(msg.empty()) << "baddbmm over one weight: " << msg;
          msg = within_one_ulp(baddbmm(to_cuda(bias), to_cuda(xb), wb.contiguous()), eb, bb, t);
          EXPECT_TRUE(msg.empty()) << "baddbmm: " << msg;
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 2 * 3 * 6 * 5);
}

TEST_F(MatmulCuda, Mv) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  uint64_t seed = 200;
  for (DType t : kDTypes) {
    for (const char* la : kLayouts) {
      for (const char* lv : {"contiguous", "strided", "offset"}) {
        Tensor a = random_tensor({7, 5}, t, la, seed++);
        Tensor v = random_tensor({5}, t, lv, seed++);
        EXPECT_CLOSE_FOR(mv(to_cuda(a), to_cuda(v)), mv(a, v), t);
      }
    }
  }
}

TEST_F(MatmulCuda, AddmmBiasShapesAndScales) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  const std::vector<Shape> bias_shapes = {{6}, {1, 6}, {5, 1}, {5, 6}, {}};
  const std::vector<std::pair<double, double>> scales = {{1, 1}, {1, 0.5}, {0.5, 2}, {0, 1}};
  uint64_t seed = 300;
  int cases = 0;
  for (DType t : kDTypes) {
    for (const char* layout : kLayouts) {
      for (const Shape& bs : bias_shapes) {
        for (const auto& [beta, alpha] : scales) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " " + layout + " bias rank " +
                       std::to_string(bs.size()) + " beta " + std::to_string(beta));
          Tensor a = random_tensor({5, 4}, t, layout, seed++);
          Tensor b = random_tensor({4, 6}, t, layout, seed++);
          Tensor self = random_tensor(bs, t, bs.size() == 2 ? layout : "contiguous", seed++);
          EXPECT_CLOSE_FOR(addmm(to_cuda(self), to_cuda(a), to_cuda(b), beta, alpha),
                           addmm(self, a, b, beta, alpha), t);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 4 * 4 * 5 * 4);
}

// beta = 0 ignores self, NaN included.
TEST_F(MatmulCuda, AddmmZeroBetaIgnoresNaN) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  Tensor a = random_tensor({3, 4}, kFloat32, "contiguous", 1);
  Tensor b = random_tensor({4, 2}, kFloat32, "contiguous", 2);
  Tensor self = full({3, 2}, std::nan(""));
  EXPECT_CLOSE_FOR(addmm(to_cuda(self), to_cuda(a), to_cuda(b), 0, 1), mm(a, b), kFloat32);
}

TEST_F(MatmulCuda, OutAndInPlaceForms) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  uint64_t seed = 400;
  for (DType t : kDTypes) {
    SCOPED_TRACE(dtype_name(t));
    Tensor a = random_tensor({5, 4}, t, "transposed", seed++);
    Tensor b = random_tensor({4, 6}, t, "contiguous", seed++);
    Tensor self = random_tensor({5, 6}, t, "contiguous", seed++);
    // addmm_ into a transposed (column-major) self.
    Tensor cpu_self = random_tensor({5, 6}, t, "transposed", seed++);
    Tensor dev_self = to_cuda(cpu_self);
    static const OpHandle addmm_inplace = find_op("addmm_");
    addmm_inplace
        .call<Tensor(const Tensor&, const Tensor&, const Tensor&, const Scalar&, const Scalar&)>(
            dev_self, to_cuda(a), to_cuda(b), 0.5, 2);
    addmm_inplace
        .call<Tensor(const Tensor&, const Tensor&, const Tensor&, const Scalar&, const Scalar&)>(
            cpu_self, a, b, 0.5, 2);
    EXPECT_CLOSE_FOR(dev_self, cpu_self, t);
    // out= of the wrong size is resized; a strided out is written in place.
    Tensor out = empty({1}, TensorOptions().dtype(t).device(Device::cuda()));
    matmul_out(out, to_cuda(a), to_cuda(b));
    EXPECT_CLOSE_FOR(out, matmul(a, b), t);
    Tensor wide = zeros({5, 12}, TensorOptions().dtype(t).device(Device::cuda()));
    Tensor strided = wide.slice(1, 0, 12, 2);
    static const OpHandle mm_out = find_op("mm.out");
    mm_out.call<Tensor(const Tensor&, const Tensor&, const Tensor&)>(to_cuda(a), to_cuda(b),
                                                                     strided);
    EXPECT_CLOSE_FOR(strided, mm(a, b), t);
    static const OpHandle addmm_out = find_op("addmm.out");
    Tensor out2 = empty({5, 6}, TensorOptions().dtype(t).device(Device::cuda()));
    addmm_out.call<Tensor(const Tensor&, const Tensor&, const Tensor&, const Scalar&, const Scalar&,
                          const Tensor&)>(to_cuda(self), to_cuda(a), to_cuda(b), 1, 1, out2);
    EXPECT_CLOSE_FOR(out2, addmm(self, a, b), t);
    Tensor a3 = random_tensor({2, 5, 4}, t, "contiguous", seed++);
    Tensor b3 = random_tensor({2, 4, 3}, t, "transposed", seed++);
    static const OpHandle bmm_out = find_op("bmm.out");
    Tensor out3 = empty({0}, TensorOptions().dtype(t).device(Device::cuda()));
    bmm_out.call<Tensor(const Tensor&, const Tensor&, const Tensor&)>(to_cuda(a3), to_cuda(b3),
                                                                      out3);
    EXPECT_CLOSE_FOR(out3, bmm(a3, b3), t);
  }
}

// An output that shares memory with an operand is computed through scratch.
TEST_F(MatmulCuda, OutputOverlappingAnOperand) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  Tensor a = random_tensor({4, 4}, kFloat32, "contiguous", 1);
  Tensor b = random_tensor({4, 4}, kFloat32, "contiguous", 2);
  Tensor expected = mm(a, b);
  Tensor da = to_cuda(a);
  static const OpHandle mm_out = find_op("mm.out");
  mm_out.call<Tensor(const Tensor&, const Tensor&, const Tensor&)>(da, to_cuda(b), da);
  EXPECT_CLOSE_FOR(da, expected, kFloat32);
}

TEST_F(MatmulCuda, MatmulBroadcasting) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  const std::vector<std::pair<Shape, Shape>> pairs = {{{5}, {5}},
                                                      {{5}, {5, 3}},
                                                      {{4, 5}, {5}},
                                                      {{2, 4, 5}, {5, 3}},
                                                      {{2, 1, 5}, {5, 3}},
                                                      {{2, 4, 5}, {2, 5, 3}},
                                                      {{2, 1, 4, 5}, {3, 5, 6}},
                                                      {{5}, {2, 5, 3}},
                                                      {{2, 4, 5}, {5}},
                                                      {{1, 4, 5}, {3, 5, 2}},
                                                      {{3, 2, 4, 5}, {2, 5, 1}},
                                                      {{0, 4, 5}, {5, 2}}};
  uint64_t seed = 500;
  int cases = 0;
  for (DType t : kDTypes) {
    for (const char* layout : {"contiguous", "transposed", "expanded", "offset"}) {
      for (const auto& [sa, sb] : pairs) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + layout + " " + std::to_string(sa.size()) +
                     "-D x " + std::to_string(sb.size()) + "-D");
        Tensor a = random_tensor(sa, t, layout, seed++);
        Tensor b = random_tensor(sb, t, "contiguous", seed++);
        EXPECT_CLOSE_FOR(matmul(to_cuda(a), to_cuda(b)), matmul(a, b), t);
        EXPECT_CLOSE_FOR(
            matmul(to_cuda(b.dim() >= 2 ? b.transpose(-1, -2) : b),
                   to_cuda(a.dim() >= 2 ? a.transpose(-1, -2) : a)),
            matmul(b.dim() >= 2 ? b.transpose(-1, -2) : b, a.dim() >= 2 ? a.transpose(-1, -2) : a),
            t);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 4 * 4 * 12);
}

TEST_F(MatmulCuda, Linear) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  uint64_t seed = 600;
  for (DType t : kDTypes) {
    for (const char* layout : {"contiguous", "transposed", "strided", "expanded"}) {
      for (Shape in_shape : std::vector<Shape>{{6, 8}, {2, 3, 8}, {8}, {0, 8}}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + layout + " rank " +
                     std::to_string(in_shape.size()));
        Tensor x = random_tensor(in_shape, t, layout, seed++);
        Tensor w = random_tensor({5, 8}, t, layout, seed++);
        Tensor bias = random_tensor({5}, t, "contiguous", seed++);
        EXPECT_CLOSE_FOR(linear(to_cuda(x), to_cuda(w)), linear(x, w), t);
        EXPECT_CLOSE_FOR(linear(to_cuda(x), to_cuda(w), to_cuda(bias)), linear(x, w, bias), t);
        Shape full_shape = in_shape;
        full_shape.back() = 5;
        Tensor full_bias = random_tensor(full_shape, t, "contiguous", seed++);
        EXPECT_CLOSE_FOR(linear(to_cuda(x), to_cuda(w), to_cuda(full_bias)),
                         linear(x, w, full_bias), t);
        Tensor w1 = random_tensor({8}, t, "strided", seed++);
        EXPECT_CLOSE_FOR(linear(to_cuda(x), to_cuda(w1)), linear(x, w1), t);
      }
    }
  }
}

TEST_F(MatmulCuda, AddmmActEpiloguesMatchEager) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  const std::vector<Shape> bias_shapes = {{24}, {1, 24}, {16, 24}, {16, 1}};
  uint64_t seed = 700;
  int cases = 0;
  for (DType t : kDTypes) {
    for (const char* act : {"none", "relu", "gelu_tanh"}) {
      for (const char* layout : {"contiguous", "transposed", "offset"}) {
        for (const Shape& bs : bias_shapes) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " " + act + " " + layout + " bias rank " +
                       std::to_string(bs.size()));
          Tensor a = random_tensor({16, 40}, t, layout, seed++, -1, 1);
          Tensor b = random_tensor({40, 24}, t, layout, seed++, -1, 1);
          Tensor bias = random_tensor(bs, t, "contiguous", seed++);
          Tensor expected = addmm_act(bias, a, b, act);  // CPU: addmm, then act
          Tensor got = addmm_act(to_cuda(bias), to_cuda(a), to_cuda(b), act);
          std::string msg = testing::compare(got.cpu(), expected, act_tol(t, act));
          EXPECT_TRUE(msg.empty()) << msg;
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 4 * 3 * 3 * 4);
}

// The epilogue's GELU is the tanh form: on inputs where the tanh and erf forms
// part most (x near 2.7, up to 4.7e-4 apart), it is on average far closer to
// eager gelu(approximate="tanh") than to the exact form.
TEST_F(MatmulCuda, GeluEpilogueIsTheTanhForm) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  Tensor a = random_tensor({64, 32}, kFloat32, "contiguous", 1, -0.01, 0.01);
  Tensor b = random_tensor({32, 256}, kFloat32, "contiguous", 2, -0.01, 0.01);
  Tensor bias = random_tensor({256}, kFloat32, "contiguous", 3, 2.2, 3.2);
  Tensor got = addmm_act(to_cuda(bias), to_cuda(a), to_cuda(b), "gelu_tanh").cpu();
  Tensor sum = addmm(bias, a, b);
  const double to_tanh = mean(abs(got - gelu(sum, "tanh"))).item().to<double>();
  const double to_erf = mean(abs(got - gelu(sum))).item().to<double>();
  EXPECT_LT(to_tanh, 0.25 * to_erf) << "tanh form " << to_tanh << ", erf form " << to_erf;
  EXPECT_TENSOR_CLOSE_TOL(got, gelu(sum, "tanh"), 2e-3, 2e-3);
}

// Lazy mode: linear + gelu(tanh) on CUDA becomes linear_act (one cuBLASLt call).
TEST_F(MatmulCuda, LazyLinearGeluUsesTheEpilogue) {
  KILN_REQUIRE_CUDA();
  Tensor x = random_tensor({8, 16}, kFloat16, "contiguous", 1);
  Tensor w = random_tensor({12, 16}, kFloat16, "contiguous", 2);
  Tensor bias = random_tensor({12}, kFloat16, "contiguous", 3);
  Tensor expected;
  {
    EagerGuard eager;
    expected = gelu(linear(x, w, bias), "tanh");
  }
  Tensor dx = to_cuda(x), dw = to_cuda(w), db = to_cuda(bias);
  jit::flush();
  Tensor y = gelu(linear(dx, dw, db), "tanh");
  EXPECT_EQ(jit::TraceBuffer::current().describe_pending(), "extern[linear_act]");
  EXPECT_CLOSE_FOR(y, expected, kFloat16);
}

TEST_F(MatmulCuda, Tf32IsOptIn) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  EXPECT_FALSE(cuda::allow_tf32());
  Tensor a = random_tensor({64, 128}, kFloat32, "contiguous", 1);
  Tensor b = random_tensor({128, 32}, kFloat32, "contiguous", 2);
  Tensor expected = mm(a, b);
  cuda::set_allow_tf32(true);
  EXPECT_TRUE(cuda::allow_tf32());
  // TF32 keeps 10 mantissa bits of each input.
  EXPECT_TENSOR_CLOSE_TOL(mm(to_cuda(a), to_cuda(b)).cpu(), expected, 1e-2, 5e-2);
  cuda::set_allow_tf32(false);
  EXPECT_CLOSE_FOR(mm(to_cuda(a), to_cuda(b)), expected, kFloat32);
}

TEST_F(MatmulCuda, ErrorsMatchTheCpuKernels) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  Tensor a = random_tensor({3, 4}, kFloat32, "contiguous", 1);
  Tensor b = random_tensor({5, 2}, kFloat32, "contiguous", 2);
  Tensor h = random_tensor({4, 2}, kFloat16, "contiguous", 3);
  EXPECT_CUDA_ERROR_MATCHES_CPU([&](const testing::OnDevice& on) { return mm(on(a), on(b)); });
  EXPECT_CUDA_ERROR_MATCHES_CPU([&](const testing::OnDevice& on) { return mm(on(a), on(h)); });
  EXPECT_CUDA_ERROR_MATCHES_CPU([&](const testing::OnDevice& on) { return bmm(on(a), on(b)); });
  EXPECT_CUDA_ERROR_MATCHES_CPU([&](const testing::OnDevice& on) { return mv(on(a), on(a)); });
  EXPECT_CUDA_ERROR_MATCHES_CPU([&](const testing::OnDevice& on) { return matmul(on(a), on(b)); });
  EXPECT_CUDA_ERROR_MATCHES_CPU(
      [&](const testing::OnDevice& on) { return addmm(on(b), on(a), on(h)); });
  EXPECT_CUDA_ERROR_MATCHES_CPU([&](const testing::OnDevice& on) { return linear(on(a), on(b)); });
  EXPECT_CUDA_ERROR_MATCHES_CPU(
      [&](const testing::OnDevice& on) { return addmm_act(on(b), on(a), on(h), "relu"); });
  EXPECT_CUDA_ERROR_MATCHES_CPU(
      [&](const testing::OnDevice& on) { return addmm_act(on(b), on(a), on(a.t()), "tanh"); });
  EXPECT_KILN_ERROR(mm(to_cuda(a), a.t()), "[mm] expected all tensors on cuda:0, got mat2 on cpu");
  // Integers take their own kernel (tests/jit/codegen_cuda/op_kernels/int_matmul_cuda_test.cpp);
  // bool none.
  Tensor p = random_tensor({3, 4}, kBool, "contiguous", 4);
  EXPECT_CUDA_ERROR_MATCHES_CPU([&](const testing::OnDevice& on) { return mm(on(p), on(p.t())); });
}

TEST_F(MatmulCuda, HeuristicsAreCachedPerShape) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  Tensor a = to_cuda(random_tensor({24, 40}, kBFloat16, "contiguous", 1));
  Tensor b = to_cuda(random_tensor({40, 8}, kBFloat16, "contiguous", 2));
  Tensor first = mm(a, b);
  const cuda::LtCacheStats before = cuda::lt_cache_stats();
  for (int i = 0; i < 5; ++i) {
    EXPECT_TENSOR_CLOSE_TOL(mm(a, b).cpu(), first.cpu(), 0, 0);
  }
  const cuda::LtCacheStats after = cuda::lt_cache_stats();
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.hits, before.hits + 5);
}

// Not a GPU test: the check macro's message names the call and the device.
TEST(CublasCheck, NamesCallAndDevice) {
  auto fake_call = [](int status) { return status; };
  try {
    KILN_CUBLAS_CHECK_DEVICE(fake_call(7), 5);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[cublasLt] fake_call(7) failed at "), std::string::npos) << m;
    EXPECT_NE(m.find("matmul_cuda_test.cpp:"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda:5"), std::string::npos) << m;
  }
}

// Note [Exit during the warm-up] (runtime/cuda/blas_lt_warmup.cpp): a
// process whose main thread exits while cuBLASLt's first query runs on the
// warm-up thread exits cleanly. Each child is a fresh process (the
// threadsafe style runs the test binary again), whose first copy to the GPU
// starts the warm-up; cuBLASLt's first query takes about 160 ms on an H200,
// so the exits fall before, inside and after it. With the wait an exit
// handler instead, exits 10 to 100 ms in crashed in 39 of 40 tries
// (perf/probes/lt_exit.cpp).
TEST(CublasWarmup, ExitDuringTheWarmUpIsClean) {
  KILN_REQUIRE_CUDA();
  const std::string style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (int ms : {0, 5, 15, 30, 45, 60, 80, 100, 120, 150}) {
    SCOPED_TRACE("exit " + std::to_string(ms) + " ms after the first copy");
    EXPECT_EXIT(
        {
          Tensor t = ones({4}).to(Device::cuda());
          std::this_thread::sleep_for(std::chrono::milliseconds(ms));
          std::exit(0);
        },
        ::testing::ExitedWithCode(0), "");
  }
  GTEST_FLAG_SET(death_test_style, style);
}

}  // namespace
}  // namespace kiln
