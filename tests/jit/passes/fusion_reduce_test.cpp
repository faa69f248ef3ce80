// Golden tests of reduction groups (Note [Reduction kernels]): which nodes
// join a reduction as prologue and epilogue, and results against eager.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "jit/codegen_cpu/reduce_cpu.h"
#include "jit/record/trace_buffer.h"
#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

std::string plan() {
  return kiln::jit::TraceBuffer::current().describe_pending();
}

Tensor rnd(std::vector<int64_t> sizes, kiln::DType t = kiln::kFloat32,
           const char* layout = "contiguous", uint64_t seed = 1) {
  kiln::EagerGuard g;
  return kiln::testing::random_tensor(sizes, t, layout, seed);
}

class FusionReduce : public ::testing::Test {
 protected:
  void SetUp() override { kiln::jit::flush(); }
  void TearDown() override { kiln::jit::flush(); }
};

// A kept dim of size 0: nothing to compute, in every schedule (the outer
// one divided by that extent; found by the call_op fuzz test).
TEST_F(FusionReduce, EmptyKeptDimsGiveEmptyResults) {
  for (std::vector<int64_t> sizes : {std::vector<int64_t>{2, 1, 0}, {0, 3}, {3, 0, 5}}) {
    Tensor x = rnd(sizes);
    for (int64_t dim : {0, 1}) {
      if (sizes[dim] == 0) continue;
      for (bool keepdim : {true, false}) {
        Tensor got_max = kiln::amax(x * 2.0, {dim}, keepdim);
        Tensor got_sum = kiln::sum(x * 2.0, {dim}, keepdim);
        kiln::EagerGuard eager;
        EXPECT_TENSOR_CLOSE(got_max, kiln::amax(x * 2.0, {dim}, keepdim));
        EXPECT_TENSOR_CLOSE(got_sum, kiln::sum(x * 2.0, {dim}, keepdim));
      }
    }
  }
}

TEST_F(FusionReduce, SoftmaxIsOneRowGroup) {
  Tensor x = rnd({4, 16});
  Tensor y = kiln::softmax(x, -1);
  EXPECT_EQ(plan(), "reduce[softmax.int -> 1 out]");
}

TEST_F(FusionReduce, ScaledScoresJoinSoftmaxAsPrologue) {
  Tensor s = rnd({2, 4, 8, 8}), mask = rnd({8, 8});
  Tensor y = kiln::softmax(s * 0.125 + mask, -1);
  EXPECT_EQ(plan(), "reduce[mul.Tensor add.Tensor > softmax.int -> 1 out]");
}

TEST_F(FusionReduce, LayerNormWithAffineIsOneRowGroup) {
  Tensor x = rnd({3, 32}), w = rnd({32}), b = rnd({32});
  Tensor y = kiln::layer_norm(x, {32}, w, b);
  EXPECT_EQ(plan(), "reduce[layer_norm -> 1 out]");
}

TEST_F(FusionReduce, RmsNormIsOneRowGroup) {
  Tensor x = rnd({3, 32}), w = rnd({32});
  Tensor y = kiln::rms_norm(x, {32}, w);
  EXPECT_EQ(plan(), "reduce[rms_norm -> 1 out]");
}

TEST_F(FusionReduce, ResidualAddJoinsLayerNormAndIsStored) {
  Tensor x = rnd({3, 32}), a = rnd({3, 32}), w = rnd({32}), b = rnd({32});
  Tensor h = x + a;  // the residual stream: the user keeps it
  Tensor y = kiln::layer_norm(h, {32}, w, b);
  EXPECT_EQ(plan(), "reduce[add.Tensor > layer_norm -> 2 out]");
}

TEST_F(FusionReduce, PointwiseAfterANormIsItsEpilogue) {
  Tensor x = rnd({3, 32}), w = rnd({32});
  Tensor y = kiln::rms_norm(x, {32}) * w + 1.0;
  EXPECT_EQ(plan(), "reduce[rms_norm > mul.Tensor add.Tensor -> 1 out]");
}

// The GELU-MLP: gelu(tanh) after a biased linear is the matmul's epilogue
// (jit/passes/matmul_epilogue.h); any other pointwise tail is its own group.
// On the CPU the activation is a fused kernel between the products (on CUDA
// it is the first product's epilogue: Note [Matmul epilogues]).
TEST_F(FusionReduce, GeluOfAMatmulIsAFusedKernelOnTheCpu) {
  Tensor x = rnd({4, 16}), w1 = rnd({32, 16}), w2 = rnd({16, 32}), b1 = rnd({32});
  Tensor y = kiln::linear(kiln::gelu(kiln::linear(x, w1, b1), "tanh"), w2);
  EXPECT_EQ(plan(), "extern[linear] fused[gelu -> 1 out] extern[linear]");
}

TEST_F(FusionReduce, OtherPointwiseAfterAMatmulIsItsOwnGroup) {
  Tensor x = rnd({4, 16}), w1 = rnd({32, 16}), w2 = rnd({16, 32}), b1 = rnd({32});
  Tensor y = kiln::linear(kiln::gelu(kiln::linear(x, w1, b1)) * 2.0, w2);
  EXPECT_EQ(plan(), "extern[linear] fused[gelu mul.Tensor -> 1 out] extern[linear]");
}

TEST_F(FusionReduce, MeanOfSquaresIsPrologueReductionEpilogue) {
  Tensor x = rnd({4, 16});
  Tensor y = kiln::sum(x * x, {-1}) / 16.0;
  EXPECT_EQ(plan(), "reduce[mul.Tensor > sum.dim_IntList > div.Tensor -> 1 out]");
}

TEST_F(FusionReduce, VarAndStdAreReductions) {
  Tensor x = rnd({4, 16});
  Tensor v = kiln::var(x, {1});
  EXPECT_EQ(plan(), "reduce[var.correction -> 1 out]");
  kiln::jit::flush();
  Tensor s = kiln::sqrt(kiln::var(x, {0}, 0) + 1e-5);
  EXPECT_EQ(plan(), "reduce[var.correction > add.Tensor sqrt -> 1 out]");
}

TEST_F(FusionReduce, AProducerOfAnotherShapeIsNotAPrologue) {
  Tensor x = rnd({4, 16}), r = rnd({16});
  Tensor total = kiln::sum(r * 3.0);
  Tensor y = kiln::sum(x * 2.0, {-1}) + total;  // [4] + [] joins the second epilogue
  EXPECT_EQ(plan(),
            "reduce[mul.Tensor > sum -> 1 out] "
            "reduce[mul.Tensor > sum.dim_IntList > add.Tensor -> 1 out]");
}

// A norm whose input has normalized_shape (a 1-D input, or a norm over every
// dim): a weight or bias computed from values of that shape joins the
// prologue, and the epilogue loads it, so the prologue stores it although no
// later node reads it (it was neither stored nor given memory: a crash).
TEST_F(FusionReduce, AWeightThePrologueComputesIsStoredForTheEpilogue) {
  Tensor x = rnd({4}), w = rnd({4}, kiln::kFloat32, "contiguous", 2);
  Tensor y = kiln::layer_norm(x, {4}, kiln::exp(w));
  EXPECT_EQ(plan(), "reduce[exp > layer_norm -> 2 out]");
  kiln::jit::flush();
  Tensor z;
  {
    Tensor h = x * 2.0;  // dropped: only its weight is stored
    z = kiln::rms_norm(h, {4}, kiln::sin(x));
  }
  EXPECT_EQ(plan(), "reduce[mul.Tensor sin > rms_norm -> 2 out]");
}

TEST_F(FusionReduce, AnotherReductionClosesTheGroup) {
  Tensor x = rnd({4, 16});
  Tensor y = kiln::softmax(kiln::softmax(x, -1), 0);
  EXPECT_EQ(plan(), "reduce[softmax.int -> 1 out] reduce[softmax.int -> 1 out]");
}

// --- Results ------------------------------------------------------------------

void expect_matches_eager(const std::function<Tensor()>& f, kiln::testing::Tolerance tol,
                          bool fused = true) {
  Tensor eager;
  {
    kiln::EagerGuard g;
    eager = f();
  }
  int64_t before = kiln::jit::cpu::cpu_reductions_run();
  Tensor lazy = f();
  kiln::sync();
  if (fused) {
    EXPECT_GT(kiln::jit::cpu::cpu_reductions_run(), before) << "did not run fused";
  }
  std::string msg = kiln::testing::compare(lazy, eager, tol);
  EXPECT_TRUE(msg.empty()) << msg;
}

kiln::testing::Tolerance tol_for(kiln::DType t) {
  if (t == kiln::kFloat16) return {2e-3, 1e-3};
  if (t == kiln::kBFloat16) return {1.6e-2, 4e-3};
  return {2e-6, 1e-5};
}

class FusionReduceDtypes : public ::testing::TestWithParam<kiln::DType> {};

TEST_P(FusionReduceDtypes, RowNormalizationsMatchEager) {
  const kiln::DType t = GetParam();
  for (const char* layout : {"contiguous", "offset", "expanded", "transposed"}) {
    for (int64_t n : {1, 7, 16, 77, 768}) {
      SCOPED_TRACE(std::string(layout) + " n=" + std::to_string(n));
      Tensor x = rnd({3, 5, n}, t, layout, n), a = rnd({3, 5, n}, t, "contiguous", n + 1);
      Tensor w = rnd({n}, t, "contiguous", 2), b = rnd({n}, t, "offset", 3);
      // transposed inputs have strided rows: those groups run node by node
      bool fused = std::string(layout) != "transposed";
      expect_matches_eager([&] { return kiln::softmax(x * 0.5, -1); }, tol_for(t), fused);
      expect_matches_eager([&] { return kiln::log_softmax(x, -1); }, tol_for(t), fused);
      expect_matches_eager([&] { return kiln::layer_norm(x + a, {n}, w, b); }, tol_for(t), fused);
      expect_matches_eager([&] { return kiln::rms_norm(x, {n}, w) + 1.0; }, tol_for(t), fused);
      expect_matches_eager([&] { return kiln::softmax(x, -1, kiln::kFloat32); },
                           tol_for(kiln::kFloat32), fused);
    }
  }
}

// Weights and biases that the prologue computes (see
// AWeightThePrologueComputesIsStoredForTheEpilogue), lazily and compiled:
// rows in one piece, a long row split across workers, norms over two dims.
TEST_P(FusionReduceDtypes, NormsOfWeightsThePrologueComputesMatchEager) {
  const kiln::DType t = GetParam();
  const std::vector<std::vector<int64_t>> shapes{{4}, {77}, {2, 3}, {3, 5, 16}, {70000}};
  for (const std::vector<int64_t>& shape : shapes) {
    SCOPED_TRACE(::testing::PrintToString(shape));
    const kiln::IntArrayRef ns(shape);
    Tensor x = rnd(shape, t, "contiguous", 21), w = rnd(shape, t, "offset", 22);
    Tensor b = rnd(shape, t, "contiguous", 23);
    const std::vector<std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>> norms{
        [&](const Tensor& x, const Tensor& w, const Tensor&) {
          return kiln::layer_norm(x, ns, kiln::exp(w));
        },
        [&](const Tensor& x, const Tensor&, const Tensor& b) {
          return kiln::layer_norm(x, ns, std::nullopt, b * 1.0);
        },
        [&](const Tensor& x, const Tensor& w, const Tensor& b) {
          return kiln::layer_norm(x, ns, w + b, kiln::sigmoid(b));
        },
        [&](const Tensor& x, const Tensor& w, const Tensor&) {
          return kiln::rms_norm(x, ns, w * 1.0);
        },
        // The input is pending too: its weight reads what the prologue loads.
        [&](const Tensor& x, const Tensor&, const Tensor&) {
          return kiln::layer_norm(kiln::exp(x), ns, kiln::sin(x));
        },
        // The weight is the normalized value itself.
        [&](const Tensor& x, const Tensor&, const Tensor&) {
          Tensor e = x * 0.5;
          return kiln::rms_norm(e, ns, e);
        },
    };
    for (size_t k = 0; k < norms.size(); ++k) {
      SCOPED_TRACE("norm " + std::to_string(k));
      const auto& f = norms[k];
      expect_matches_eager([&] { return f(x, w, b); }, tol_for(t));
      auto compiled = kiln::jit::compile(
          [&](const Tensor& x, const Tensor& w, const Tensor& b) { return f(x, w, b); });
      Tensor eager;
      {
        kiln::EagerGuard g;
        eager = f(x, w, b);
      }
      for (int call = 0; call < 2; ++call) {  // a trace, then a replay
        std::string msg = kiln::testing::compare(compiled(x, w, b), eager, tol_for(t));
        EXPECT_TRUE(msg.empty()) << "call " << call << ": " << msg;
      }
    }
  }
}

TEST_P(FusionReduceDtypes, StatisticsMatchEager) {
  const kiln::DType t = GetParam();
  for (const char* layout : {"contiguous", "transposed", "strided", "expanded"}) {
    SCOPED_TRACE(layout);
    Tensor x = rnd({6, 9, 33}, t, layout, 5);
    for (std::vector<int64_t> dims :
         std::vector<std::vector<int64_t>>{{-1}, {0}, {1}, {0, 2}, {}, {1, 2}}) {
      SCOPED_TRACE(::testing::PrintToString(dims));
      kiln::IntArrayRef d(dims);
      expect_matches_eager([&] { return kiln::sum(x * x, d) / 16.0; }, tol_for(t), false);
      expect_matches_eager([&] { return kiln::mean(x, d, true); }, tol_for(t), false);
      expect_matches_eager([&] { return kiln::amax(x, d); }, tol_for(t), false);
      expect_matches_eager([&] { return kiln::amin(x + 1.0, d, true); }, tol_for(t), false);
      expect_matches_eager([&] { return kiln::var(x, d); }, tol_for(t), false);
      expect_matches_eager([&] { return kiln::std(x, d, 0) + 1e-5; }, tol_for(t), false);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusionReduceDtypes,
                         ::testing::Values(kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16));

TEST_F(FusionReduce, LongRowsAndSpecialValuesMatchEager) {
  Tensor x = rnd({2, 20000}, kiln::kFloat32, "contiguous", 9);
  expect_matches_eager([&] { return kiln::sum(x, {-1}); }, {1e-5, 1e-4});
  expect_matches_eager([&] { return kiln::var(x, {-1}); }, {1e-5, 1e-5});
  expect_matches_eager([&] { return kiln::softmax(x, -1); }, {2e-6, 1e-7});
  Tensor s;
  {
    kiln::EagerGuard g;
    s = kiln::testing::random_tensor({4, 5}, kiln::kFloat32, "contiguous", 3);
    float* p = s.data_ptr<float>();
    p[1] = NAN;
    p[6] = INFINITY;
    for (int i = 10; i < 15; ++i) p[i] = -INFINITY;
    p[16] = -INFINITY;
  }
  expect_matches_eager([&] { return kiln::softmax(s, -1); }, tol_for(kiln::kFloat32));
  expect_matches_eager([&] { return kiln::amax(s, {1}); }, tol_for(kiln::kFloat32));
  expect_matches_eager([&] { return kiln::amin(s, {1}); }, tol_for(kiln::kFloat32));
  expect_matches_eager([&] { return kiln::amax(s, {0}); }, tol_for(kiln::kFloat32));
  expect_matches_eager([&] { return kiln::sum(s, {1}); }, tol_for(kiln::kFloat32));
}

// Any int64 is a valid correction: the divisor max(0, n - correction) is
// taken in float64 (int64's n - correction overflowed near its limits, which
// the sanitizer build stops at). A correction past n gives inf or NaN, as
// eager does; a very negative one a tiny variance.
TEST_F(FusionReduce, VarWithCorrectionsAtTheInt64LimitsMatchesEager) {
  Tensor x = rnd({4, 16}, kiln::kFloat32, "contiguous", 11);
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  for (int64_t c : {lo, lo + 1, hi, int64_t{-3}, int64_t{16}, int64_t{17}}) {
    SCOPED_TRACE(c);
    expect_matches_eager([&] { return kiln::var(x, {-1}, c); }, tol_for(kiln::kFloat32));
    expect_matches_eager([&] { return kiln::var(x, {0}, c, true); }, tol_for(kiln::kFloat32));
    expect_matches_eager([&] { return kiln::std(x * 2.0, {-1}, c); }, tol_for(kiln::kFloat32));
  }
}

TEST_F(FusionReduce, EmptyAndZeroDimInputsMatchEager) {
  Tensor e = rnd({3, 0}), z = rnd({});
  expect_matches_eager([&] { return kiln::sum(e, {1}); }, tol_for(kiln::kFloat32), false);
  expect_matches_eager([&] { return kiln::mean(e, {1}); }, tol_for(kiln::kFloat32), false);
  expect_matches_eager([&] { return kiln::softmax(e, 0); }, tol_for(kiln::kFloat32), false);
  expect_matches_eager([&] { return kiln::sum(z * 2.0); }, tol_for(kiln::kFloat32), false);
  expect_matches_eager([&] { return kiln::softmax(z, 0); }, tol_for(kiln::kFloat32), false);
}

TEST_F(FusionReduce, StoredPrologueAndInPlaceEpilogueMatchEager) {
  auto run = [] {
    Tensor x = rnd({4, 24}, kiln::kFloat32, "contiguous", 11);
    Tensor a = rnd({4, 24}, kiln::kFloat32, "offset", 12);
    Tensor h = x + a;
    Tensor y = kiln::layer_norm(h, {24});
    h.mul_(2.0);
    return std::vector<Tensor>{h, y, kiln::sum(h * y, {0})};
  };
  std::vector<Tensor> eager;
  {
    kiln::EagerGuard g;
    eager = run();
  }
  std::vector<Tensor> lazy = run();
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TENSOR_CLOSE(lazy[i], eager[i]);
}

}  // namespace
