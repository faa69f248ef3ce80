// Golden tests of the matmul epilogue pass (jit/passes/matmul_epilogue.h),
// which folds on CUDA only: which product + activation pairs become one
// addmm_act or linear_act node, which residual adds and norms a product
// absorbs (traces recorded on the CPU, their nodes marked cuda for the pass,
// then run on the CPU against eager mode), which stay apart and why, and
// that the rewritten trace computes what eager mode does; that a CPU plan
// folds nothing. Also addmm_act and linear_act themselves on the CPU against
// the unfused ops.

#include <gtest/gtest.h>

#include "jit/plan/pipeline.h"
#include "jit/record/trace_buffer.h"
#include "kiln/kiln.h"
#include "tests/support/cuda_plan.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::random_tensor;

std::string plan() {
  return kiln::jit::TraceBuffer::current().describe_pending();
}

Tensor real(std::initializer_list<int64_t> sizes, uint64_t seed,
            const char* layout = "contiguous") {
  kiln::EagerGuard g;
  return random_tensor(sizes, kiln::kFloat32, layout, seed);
}

using kiln::testing::plan_as_cuda_then_run;

// `fn` traced lazily and planned as on CUDA must give `golden` and eager's
// values: its bits, unless a reduction group sums in another order (`tol`).
template <class F>
void expect_cuda_plan(F fn, const std::string& golden, double tol = 0) {
  Tensor eager;
  {
    kiln::EagerGuard g;
    eager = fn();
  }
  Tensor lazy = fn();
  EXPECT_EQ(plan_as_cuda_then_run(), golden);
  EXPECT_TENSOR_CLOSE_TOL(lazy, eager, tol, tol);
}

class MatmulEpilogue : public ::testing::Test {
 protected:
  void SetUp() override { kiln::jit::flush(); }
  void TearDown() override { kiln::jit::flush(); }
};

TEST_F(MatmulEpilogue, AddmmThenReluIsOneNode) {
  Tensor bias = real({5}, 1), a = real({4, 3}, 2), b = real({3, 5}, 3);
  expect_cuda_plan([&] { return kiln::relu(kiln::addmm(bias, a, b)); }, "extern[addmm_act]");
}

TEST_F(MatmulEpilogue, LinearThenGeluTanhIsOneNode) {
  Tensor x = real({6, 8}, 1), w = real({5, 8}, 2), bias = real({5}, 3);
  expect_cuda_plan([&] { return kiln::gelu(kiln::linear(x, w, bias), "tanh"); },
                   "extern[linear_act]");
}

// On the CPU nothing folds: the activation is a fused kernel of the CPU code
// generator (vector code), faster than linear_act's eager pass after the product.
TEST_F(MatmulEpilogue, OnTheCpuTheActivationIsAFusedKernel) {
  Tensor x = real({6, 8}, 1), w = real({5, 8}, 2), bias = real({5}, 3);
  Tensor y = kiln::gelu(kiln::linear(x, w, bias), "tanh");
  Tensor z = kiln::relu(kiln::addmm(bias, x, w.t()));
  EXPECT_EQ(plan(), "extern[linear] fused[gelu -> 1 out] extern[addmm] fused[relu -> 1 out]");
}

TEST_F(MatmulEpilogue, TheRestOfTheChainStillFuses) {
  Tensor x = real({6, 8}, 1), w = real({5, 8}, 2), bias = real({5}, 3);
  expect_cuda_plan([&] { return kiln::relu(kiln::linear(x * 2.0f, w, bias)) + 1.0f; },
                   "fused[mul.Tensor -> 1 out] extern[linear_act] fused[add.Tensor -> 1 out]");
}

TEST_F(MatmulEpilogue, ExactGeluIsNotAnEpilogue) {
  Tensor x = real({6, 8}, 1), w = real({5, 8}, 2), bias = real({5}, 3);
  Tensor y = kiln::gelu(kiln::linear(x, w, bias));
  EXPECT_EQ(plan(), "extern[linear] fused[gelu -> 1 out]");
}

TEST_F(MatmulEpilogue, AProductTheUserHoldsStaysApart) {
  Tensor bias = real({5}, 1), a = real({4, 3}, 2), b = real({3, 5}, 3);
  Tensor p = kiln::addmm(bias, a, b);
  Tensor y = kiln::relu(p);
  EXPECT_EQ(plan(), "extern[addmm] fused[relu -> 1 out]");
}

// Only a view of the product escapes (its handle is not the trace's): the
// product's storage is still observable, so it stays apart.
TEST_F(MatmulEpilogue, AViewOfTheProductHeldOutsideStaysApart) {
  Tensor bias = real({5}, 1), a = real({4, 3}, 2), b = real({3, 5}, 3);
  Tensor v;
  Tensor y = [&] {
    Tensor p = kiln::addmm(bias, a, b);
    v = p.transpose(0, 1);
    return kiln::relu(p);
  }();
  EXPECT_EQ(plan(), "extern[addmm] fused[relu -> 1 out]");
  Tensor p_eager, y_eager;
  {
    kiln::EagerGuard g;
    p_eager = kiln::addmm(bias, a, b);
    y_eager = kiln::relu(p_eager);
  }
  EXPECT_TENSOR_CLOSE_TOL(v, p_eager.transpose(0, 1), 0, 0);
  EXPECT_TENSOR_CLOSE_TOL(y, y_eager, 0, 0);
}

TEST_F(MatmulEpilogue, AProductWithTwoReadersStaysApart) {
  Tensor bias = real({5}, 1), a = real({4, 3}, 2), b = real({3, 5}, 3);
  Tensor y = [&] {
    Tensor p = kiln::addmm(bias, a, b);
    return kiln::relu(p) + p;
  }();
  EXPECT_EQ(plan().find("addmm_act"), std::string::npos) << plan();
}

TEST_F(MatmulEpilogue, ScaledAddmmStaysApart) {
  Tensor bias = real({5}, 1), a = real({4, 3}, 2), b = real({3, 5}, 3);
  Tensor y = kiln::relu(kiln::addmm(bias, a, b, /*beta=*/2, /*alpha=*/1));
  EXPECT_EQ(plan(), "extern[addmm] fused[relu -> 1 out]");
}

// linear_act takes linear's operands as they are: batched inputs, no bias.
TEST_F(MatmulEpilogue, BatchedAndBiaslessLinearsAreEpilogues) {
  Tensor bias = real({5}, 1), w = real({5, 8}, 5);
  // Inputs first: making one (eagerly) runs what was recorded before it.
  Tensor x3 = real({2, 4, 8}, 4), x2 = real({4, 8}, 6);
  expect_cuda_plan([&] { return kiln::relu(kiln::linear(x3, w, bias)); }, "extern[linear_act]");
  expect_cuda_plan([&] { return kiln::gelu(kiln::linear(x2, w), "tanh"); }, "extern[linear_act]");
}

TEST_F(MatmulEpilogue, RewrittenTracesMatchEager) {
  int cases = 0;
  for (const char* layout : {"contiguous", "transposed", "strided", "offset"}) {
    SCOPED_TRACE(layout);
    Tensor bias = real({7}, 1, layout == std::string("offset") ? "offset" : "contiguous");
    Tensor a = real({5, 9}, 2, layout), b = real({9, 7}, 3, layout);
    expect_cuda_plan([&] { return kiln::relu(kiln::addmm(bias, a, b)); }, "extern[addmm_act]");
    Tensor x = real({6, 8}, 4, layout), w = real({5, 8}, 5, layout);
    Tensor full_bias = real({6, 5}, 6);  // a full bias, not a row
    expect_cuda_plan([&] { return kiln::gelu(kiln::linear(x, w, full_bias), "tanh"); },
                     "extern[linear_act]");
    Tensor x2 = real({3, 4}, 7, layout), w2 = real({2, 4}, 8), row = real({1, 2}, 9);
    expect_cuda_plan([&] { return kiln::relu(kiln::linear(x2, w2, row)) * 3.0f; },
                     "extern[linear_act] fused[mul.Tensor -> 1 out]");
    cases += 3;
  }
  EXPECT_EQ(cases, 12);
}

// The fused node reads its operands where the product did: a write to the
// weight between the product and the activation is not seen.
TEST_F(MatmulEpilogue, AWriteBetweenProductAndActivationIsNotSeen) {
  Tensor x = real({4, 6}, 1);
  auto run = [&](Tensor& w, Tensor& bias) {
    Tensor p = kiln::linear(x, w, bias);
    w.add_(100.0f);
    bias.mul_(-1.0f);
    return kiln::relu(p);
  };
  Tensor w = real({3, 6}, 2), bias = real({3}, 3);
  Tensor w_eager = real({3, 6}, 2), bias_eager = real({3}, 3);
  Tensor eager;
  {
    kiln::EagerGuard g;
    eager = run(w_eager, bias_eager);
  }
  Tensor lazy = run(w, bias);
  EXPECT_EQ(plan_as_cuda_then_run(),
            "extern[linear_act] fused[add_.Tensor -> 1 out] fused[mul_.Tensor -> 1 out]");
  EXPECT_TENSOR_CLOSE_TOL(lazy, eager, 0, 0);
  EXPECT_TENSOR_CLOSE_TOL(w, w_eager, 0, 0);
  EXPECT_TENSOR_CLOSE_TOL(bias, bias_eager, 0, 0);
}

// --- Residual adds ---------------------------------------------------------------------

TEST_F(MatmulEpilogue, ResidualAddIsTheProductsEpilogueOnCuda) {
  Tensor x = real({2, 3, 8}, 1), h = real({2, 3, 16}, 2), w = real({8, 16}, 3), b = real({8}, 4);
  // Either side of the add, with or without a bias.
  expect_cuda_plan([&] { return x + kiln::linear(h, w, b); }, "extern[linear_act]");
  expect_cuda_plan([&] { return kiln::linear(h, w) + x; }, "extern[linear_act]");
  // The residual of a strided view, read where the product was.
  Tensor xt = real({3, 2, 8}, 5).transpose(0, 1);
  expect_cuda_plan([&] { return xt + kiln::linear(h, w, b); }, "extern[linear_act]");
}

// On the CPU the add stays free for the next group (here a LayerNorm's
// storing prologue, Note [Storing prologues]).
TEST_F(MatmulEpilogue, ResidualAddStaysApartOnTheCpu) {
  Tensor x = real({3, 8}, 1), h = real({3, 16}, 2), w = real({8, 16}, 3), b = real({8}, 4);
  Tensor y = x + kiln::linear(h, w, b);
  Tensor z = kiln::layer_norm(y, {8});
  EXPECT_EQ(plan(), "extern[linear] reduce[add.Tensor > layer_norm -> 2 out]");
}

// A residual add no product absorbs joins the next LayerNorm or RMSNorm on
// CUDA too, stored as it is normalized (GPU: CudaReduceGroups).
TEST_F(MatmulEpilogue, ResidualAddJoinsTheNextNormOnCuda) {
  Tensor x = real({3, 16}, 1), a = real({3, 16}, 2), w = real({16}, 3), b = real({16}, 4);
  Tensor h = x + a;  // held: the residual stream
  Tensor y = kiln::layer_norm(h, {16}, w, b);
  Tensor z = kiln::rms_norm(h, {16}, w);
  EXPECT_EQ(plan_as_cuda_then_run(),
            "reduce[add.Tensor > layer_norm -> 2 out] reduce[rms_norm -> 1 out]");
  Tensor h2 = x + a;
  Tensor z2 = kiln::rms_norm(h2, {16}, w);
  EXPECT_EQ(plan_as_cuda_then_run(), "reduce[add.Tensor > rms_norm -> 2 out]");
  kiln::EagerGuard g;
  EXPECT_TENSOR_CLOSE_TOL(z2, kiln::rms_norm(x + a, {16}, w), 1e-6, 1e-6);
  EXPECT_TENSOR_CLOSE_TOL(y, kiln::layer_norm(x + a, {16}, w, b), 1e-6, 1e-6);
}

// The GELU-MLP with its residual: one node for product, GELU and residual.
TEST_F(MatmulEpilogue, ActivationThenResidualIsOneNode) {
  Tensor x = real({4, 8}, 1), w1 = real({16, 8}, 2), b1 = real({16}, 3), w2 = real({8, 16}, 4);
  expect_cuda_plan(
      [&] { return x + kiln::linear(kiln::gelu(kiln::linear(x, w1, b1), "tanh"), w2); },
      "extern[linear_act] extern[linear_act]");
  // An activation after the residual is not the product's: the add is its last node.
  Tensor w3 = real({8, 8}, 5);
  expect_cuda_plan([&] { return kiln::relu(kiln::linear(x, w3) + x); },
                   "extern[linear_act] fused[relu -> 1 out]");
}

// A GPT-2 block as the CUDA plan sees it: two LayerNorms, the attention, and
// products that absorb their bias, GELU and residual adds, the attention
// writing merged heads (Note [Merged heads]): 7 kernels per layer; at up to
// 16 rows the LayerNorms are the products' prologues (Note [Norm
// prologues]): 5 kernels.
TEST_F(MatmulEpilogue, Gpt2BlockOnCuda) {
  kiln::nn::GPT2Config c;
  c.n_layer = 1;
  c.d_model = 64;
  c.n_head = 4;
  c.vocab = 16;
  c.n_positions = 16;
  const kiln::nn::GPT2 m = kiln::nn::GPT2::random(c, kiln::kFloat32, kiln::Device::cpu(), 7);
  kiln::sync();
  Tensor x = real({3, 9, 64}, 1);  // 27 rows
  expect_cuda_plan([&] { return m.blocks[0].forward(x, c.n_head); },
                   "reduce[layer_norm -> 1 out] extern[linear] extern[attention_merged_heads] "
                   "extern[linear_act] reduce[layer_norm -> 1 out] extern[linear_act] "
                   "extern[linear_act]",
                   1e-6);
  // Two tokens of two rows: few rows, the LayerNorms are prologues.
  Tensor x2 = real({2, 2, 64}, 3);
  expect_cuda_plan([&] { return m.blocks[0].forward(x2, c.n_head); },
                   "extern[linear_act] extern[attention_merged_heads] extern[linear_act] "
                   "extern[linear_act] extern[linear_act]",
                   1e-6);
  // One token: the merge of heads is a view, no copy.
  Tensor x1 = real({2, 1, 64}, 2);
  expect_cuda_plan([&] { return m.blocks[0].forward(x1, c.n_head); },
                   "extern[linear_act] extern[scaled_dot_product_attention] extern[linear_act] "
                   "extern[linear_act] extern[linear_act]",
                   1e-6);
}

// Steps of a CUDA plan: its described steps, the kernels it launches.
int64_t steps(const std::string& described) {
  int64_t n = 0;
  for (size_t at = described.find('['); at != std::string::npos; at = described.find('[', at + 1)) {
    ++n;
  }
  return n;
}

// Two layers and the final LayerNorm as kiln-bench's kernels_per_call sees
// them: 7 steps per layer at many rows, 5 at few, one for ln_f (a matmul,
// the LM head, is not a linear: its LayerNorm stays apart).
TEST_F(MatmulEpilogue, Gpt2LayersOnCudaAreSevenStepsOrFewer) {
  kiln::nn::GPT2Config c;
  c.n_layer = 2;
  c.d_model = 64;
  c.n_head = 4;
  c.vocab = 16;
  c.n_positions = 32;
  const kiln::nn::GPT2 m = kiln::nn::GPT2::random(c, kiln::kFloat32, kiln::Device::cpu(), 9);
  kiln::sync();
  for (auto [b, t, per_layer] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 1, 5}, {2, 8, 5}, {1, 17, 7}, {4, 16, 7}}) {
    SCOPED_TRACE("batch " + std::to_string(b) + " tokens " + std::to_string(t));
    Tensor x = real({b, t, 64}, 10 + b * t);
    Tensor eager;
    {
      kiln::EagerGuard g;
      eager = m.forward_hidden(x);
    }
    Tensor lazy = m.forward_hidden(x);
    const std::string described = plan_as_cuda_then_run();
    EXPECT_EQ(steps(described), 2 * per_layer + 1) << described;
    EXPECT_TENSOR_CLOSE_TOL(lazy, eager, 1e-5, 1e-5);
  }
}

// A decode step: 5 nodes, the cache writes inside the attention (Note [Cache
// writes in the decode kernel]), whose CPU kernel then runs them.
TEST_F(MatmulEpilogue, Gpt2DecodeStepOnCuda) {
  kiln::nn::GPT2Config c;
  c.n_layer = 1;
  c.d_model = 64;
  c.n_head = 4;
  c.vocab = 16;
  c.n_positions = 16;
  const kiln::nn::GPT2 m = kiln::nn::GPT2::random(c, kiln::kFloat32, kiln::Device::cpu(), 7);
  kiln::sync();
  Tensor x = real({3, 1, 64}, 1);
  Tensor pos = [] {
    kiln::EagerGuard g;
    return kiln::full({1}, 5, kiln::TensorOptions(kiln::kInt64));
  }();
  auto caches = [] {
    kiln::EagerGuard g;
    return std::pair<Tensor, Tensor>{random_tensor({3, 4, 8, 16}, kiln::kFloat32, "contiguous", 4),
                                     random_tensor({3, 4, 8, 16}, kiln::kFloat32, "contiguous", 5)};
  };
  auto [k_eager, v_eager] = caches();
  auto [k_lazy, v_lazy] = caches();
  Tensor eager;
  {
    kiln::EagerGuard g;
    eager = m.blocks[0].forward_decode(x, c.n_head, k_eager, v_eager, pos);
  }
  Tensor lazy = m.blocks[0].forward_decode(x, c.n_head, k_lazy, v_lazy, pos);
  EXPECT_EQ(plan_as_cuda_then_run(),
            "extern[linear_act] extern[kv_cache_attention_write] extern[linear_act] "
            "extern[linear_act] extern[linear_act]");
  EXPECT_TENSOR_CLOSE_TOL(lazy, eager, 1e-6, 1e-6);
  EXPECT_TENSOR_CLOSE_TOL(k_lazy, k_eager, 0, 0);
  EXPECT_TENSOR_CLOSE_TOL(v_lazy, v_eager, 0, 0);
}

// Note [Norm prologues]: which norms a linear takes as its prologue.
TEST_F(MatmulEpilogue, NormPrologues) {
  Tensor x = real({2, 3, 16}, 1), w = real({8, 16}, 2), b = real({8}, 3);
  Tensor lw = real({16}, 4), lb = real({16}, 5);
  // LayerNorm with and without its affine parameters; RMSNorm with its
  // default eps (the dtype's) and a weight.
  expect_cuda_plan([&] { return kiln::linear(kiln::layer_norm(x, {16}, lw, lb), w, b); },
                   "extern[linear_act]");
  expect_cuda_plan([&] { return kiln::linear(kiln::layer_norm(x, {16}), w); },
                   "extern[linear_act]");
  expect_cuda_plan([&] { return kiln::relu(kiln::linear(kiln::rms_norm(x, {16}, lw), w, b)); },
                   "extern[linear_act]");
  expect_cuda_plan([&] { return kiln::linear(kiln::rms_norm(x, {16}, std::nullopt, 1e-3), w); },
                   "extern[linear_act]");
  // With a residual too: norm, product, bias, residual in one node.
  Tensor r = real({2, 3, 8}, 6);
  expect_cuda_plan([&] { return r + kiln::linear(kiln::layer_norm(x, {16}, lw, lb), w, b); },
                   "extern[linear_act]");
  // GPT-2's tied LM head, a matmul by the transposed embedding: as linear_act
  // (a linear's sums, not a matmul's: close, not the same bits).
  Tensor wte = real({24, 16}, 7);
  expect_cuda_plan([&] { return kiln::matmul(kiln::layer_norm(x, {16}, lw, lb), wte.t()); },
                   "extern[linear_act]", 1e-5);
  // Too many rows, or a weight that is not a transposed row-major one: apart.
  Tensor x17 = real({17, 16}, 8);
  expect_cuda_plan([&] { return kiln::matmul(kiln::layer_norm(x17, {16}, lw, lb), wte.t()); },
                   "reduce[layer_norm -> 1 out] extern[matmul]", 1e-5);
  Tensor wk = real({16, 24}, 9);
  expect_cuda_plan([&] { return kiln::matmul(kiln::layer_norm(x, {16}, lw, lb), wk); },
                   "reduce[layer_norm -> 1 out] extern[matmul]", 1e-5);
}

TEST_F(MatmulEpilogue, NormsThatStayApart) {
  Tensor w = real({8, 16}, 2), lw = real({16}, 4);
  // 17 rows: too many for the skinny kernel's prologue.
  Tensor x17 = real({17, 16}, 1);
  expect_cuda_plan([&] { return kiln::linear(kiln::layer_norm(x17, {16}), w); },
                   "reduce[layer_norm -> 1 out] extern[linear]", 1e-5);
  // Normalized over more than the last dim.
  Tensor x = real({2, 4, 4}, 3), w4 = real({8, 4}, 6);
  expect_cuda_plan(
      [&] {
        return kiln::linear(kiln::layer_norm(x, {4, 4}), w4);
      },
      "reduce[layer_norm -> 1 out] extern[linear]", 1e-5);
  // The norm's output read twice.
  Tensor x2 = real({2, 16}, 5);
  expect_cuda_plan(
      [&] {
        Tensor n = kiln::layer_norm(x2, {16});
        return kiln::linear(n, w) + n.sum({-1}, true);
      },
      "reduce[layer_norm -> 1 out] reduce[sum.dim_IntList -> 1 out] extern[linear] "
      "fused[add.Tensor -> 1 out]",
      1e-5);
  // x written between the norm and the product: the product must see the old rows.
  auto written = [&](Tensor xs) {
    Tensor n = kiln::layer_norm(xs, {16});
    xs.mul_(2.0f);
    return kiln::linear(n, w);
  };
  Tensor xe = real({2, 16}, 7), xl = real({2, 16}, 7);
  Tensor eager;
  {
    kiln::EagerGuard g;
    eager = written(xe);
  }
  Tensor lazy = written(xl);
  EXPECT_EQ(plan_as_cuda_then_run(), "reduce[layer_norm > mul_.Tensor -> 2 out] extern[linear]");
  EXPECT_TENSOR_CLOSE_TOL(lazy, eager, 1e-5, 1e-5);
  // On the CPU nothing is a prologue.
  Tensor y = kiln::linear(kiln::layer_norm(x2, {16}, lw), w);
  EXPECT_EQ(plan(), "reduce[layer_norm -> 1 out] extern[linear]");
}

TEST_F(MatmulEpilogue, ResidualsThatStayApart) {
  Tensor x = real({3, 8}, 1), h = real({3, 16}, 2), w = real({8, 16}, 3), b = real({8}, 4);
  const std::string apart = "extern[linear] fused[add.Tensor -> 1 out]";
  // A residual that broadcasts (C cannot have a stride 0): a bias-like add.
  expect_cuda_plan([&] { return kiln::linear(h, w) + b; }, apart);
  // alpha != 1.
  expect_cuda_plan([&] { return kiln::add(x, kiln::linear(h, w, b), 2.0); }, apart);
  // The product added to itself.
  expect_cuda_plan(
      [&] {
        Tensor y = kiln::linear(h, w, b);
        return y + y;
      },
      "extern[linear] fused[add.Tensor -> 1 out]");
  // Another dtype: the add promotes.
  Tensor x64 = [&] {
    kiln::EagerGuard g;
    return random_tensor({3, 8}, kiln::kFloat64, "contiguous", 9);
  }();
  expect_cuda_plan([&] { return x64 + kiln::linear(h, w, b); }, apart);
}

// The fused node runs where the product was: a residual written or computed
// between the product and the add must stay the add's.
TEST_F(MatmulEpilogue, AResidualNotFinalAtTheProductStaysApart) {
  Tensor h = real({3, 16}, 2), w = real({8, 16}, 3), b = real({8}, 4);
  auto written_between = [&](Tensor x) {
    Tensor y = kiln::linear(h, w, b);
    x.mul_(3.0f);
    return x + y;
  };
  Tensor x_eager = real({3, 8}, 1), x_lazy = real({3, 8}, 1);
  Tensor eager;
  {
    kiln::EagerGuard g;
    eager = written_between(x_eager);
  }
  Tensor lazy = written_between(x_lazy);
  EXPECT_EQ(plan_as_cuda_then_run(), "extern[linear] fused[mul_.Tensor add.Tensor -> 2 out]");
  EXPECT_TENSOR_CLOSE_TOL(lazy, eager, 0, 0);
  EXPECT_TENSOR_CLOSE_TOL(x_lazy, x_eager, 0, 0);
  Tensor x = real({3, 8}, 1);
  expect_cuda_plan(
      [&] {
        Tensor y = kiln::linear(h, w, b);
        Tensor r = x * 2.0f;  // computed after the product
        return r + y;
      },
      "extern[linear] fused[mul.Tensor add.Tensor -> 1 out]");
}

// A residual held by the user, or the product held, changes nothing / keeps it apart.
TEST_F(MatmulEpilogue, HeldProductsStayApartHeldResidualsDoNot) {
  Tensor x = real({3, 8}, 1), h = real({3, 16}, 2), w = real({8, 16}, 3), b = real({8}, 4);
  Tensor held;
  expect_cuda_plan(
      [&] {
        held = kiln::linear(h, w, b);
        return x + held;
      },
      "extern[linear] fused[add.Tensor -> 1 out]");
  expect_cuda_plan(
      [&] {
        Tensor r = x * 2.0f;
        held = r;  // the residual escapes: still read where it is final
        return r + kiln::linear(h, w, b);
      },
      "fused[mul.Tensor -> 1 out] extern[linear_act]");
}

// --- linear_act on the CPU ----------------------------------------------------------------

TEST(LinearAct, EqualsLinearThenActivationThenResidual) {
  kiln::EagerGuard g;
  int cases = 0;
  uint64_t seed = 20;
  for (kiln::DType t : {kiln::kFloat32, kiln::kFloat64, kiln::kBFloat16, kiln::kFloat16}) {
    for (const char* layout : {"contiguous", "transposed", "strided", "expanded"}) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " " + layout);
        Tensor x = random_tensor({2, 5, 4}, t, layout, seed++);
        Tensor w = random_tensor({6, 4}, t, layout, seed++);
        std::optional<Tensor> bias;
        if (with_bias) bias = random_tensor({6}, t, "contiguous", seed++);
        Tensor r = random_tensor({2, 5, 6}, t, layout, seed++);
        Tensor lin = kiln::linear(x, w, bias);
        for (const char* act : {"none", "relu", "gelu_tanh"}) {
          Tensor a = std::string(act) == "relu"        ? kiln::relu(lin)
                     : std::string(act) == "gelu_tanh" ? kiln::gelu(lin, "tanh")
                                                       : lin;
          kiln::Stack got =
              kiln::call_op("linear_act", {x, w, bias ? kiln::IValue(*bias) : kiln::IValue(), act});
          EXPECT_TENSOR_CLOSE_TOL(got[0].to_tensor(), a, 0, 0);
          got = kiln::call_op("linear_act",
                              {x, w, bias ? kiln::IValue(*bias) : kiln::IValue(), act, r});
          EXPECT_TENSOR_CLOSE_TOL(got[0].to_tensor(), a + r, 0, 0);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 4 * 4 * 2 * 3);
}

// --- addmm_act on the CPU -------------------------------------------------------------

TEST(AddmmAct, EqualsAddmmThenActivation) {
  kiln::EagerGuard g;
  int cases = 0;
  uint64_t seed = 10;
  for (kiln::DType t : {kiln::kFloat32, kiln::kFloat64, kiln::kBFloat16, kiln::kFloat16}) {
    for (const char* layout : {"contiguous", "transposed", "strided", "expanded"}) {
      for (auto bias_shape : std::vector<std::vector<int64_t>>{{6}, {1, 6}, {5, 1}, {5, 6}, {}}) {
        SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " " + layout);
        Tensor a = random_tensor({5, 4}, t, layout, seed++);
        Tensor b = random_tensor({4, 6}, t, layout, seed++);
        Tensor bias = random_tensor(bias_shape, t, "contiguous", seed++);
        Tensor sum = kiln::addmm(bias, a, b);
        EXPECT_TENSOR_CLOSE_TOL(kiln::addmm_act(bias, a, b), sum, 0, 0);
        EXPECT_TENSOR_CLOSE_TOL(kiln::addmm_act(bias, a, b, "relu"), kiln::relu(sum), 0, 0);
        EXPECT_TENSOR_CLOSE_TOL(kiln::addmm_act(bias, a, b, "gelu_tanh"), kiln::gelu(sum, "tanh"),
                                0, 0);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 4 * 4 * 5);
}

TEST(AddmmAct, EmptyAndZeroInner) {
  kiln::EagerGuard g;
  Tensor bias = random_tensor({3}, kiln::kFloat32, "contiguous", 1);
  Tensor out = kiln::addmm_act(bias, kiln::zeros({2, 0}), kiln::zeros({0, 3}), "relu");
  EXPECT_TENSOR_CLOSE(out, kiln::relu(bias.expand({2, 3}).contiguous()));
  EXPECT_EQ(kiln::addmm_act(bias, kiln::zeros({0, 4}), kiln::zeros({4, 3})).sizes(),
            kiln::IntArrayRef({0, 3}));
}

}  // namespace
