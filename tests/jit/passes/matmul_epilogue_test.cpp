// Golden tests of the matmul epilogue pass (jit/passes/matmul_epilogue.h):
// which product + activation pairs become one addmm_act node, which stay
// apart and why, and that the rewritten trace computes what eager mode does.
// Also addmm_act itself on the CPU against addmm followed by the activation.

#include <gtest/gtest.h>

#include "jit/record/trace_buffer.h"
#include "kiln/kiln.h"
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

// Runs `fn` eagerly and lazily; the lazy result must match bit for bit (the
// CPU addmm_act is addmm then the activation, as eager does it).
template <class F>
void expect_lazy_matches_eager(F fn) {
  Tensor eager;
  {
    kiln::EagerGuard g;
    eager = fn();
  }
  Tensor lazy = fn();
  EXPECT_TENSOR_CLOSE_TOL(lazy, eager, 0, 0);
}

class MatmulEpilogue : public ::testing::Test {
 protected:
  void SetUp() override { kiln::jit::flush(); }
  void TearDown() override { kiln::jit::flush(); }
};

TEST_F(MatmulEpilogue, AddmmThenReluIsOneNode) {
  Tensor bias = real({5}, 1), a = real({4, 3}, 2), b = real({3, 5}, 3);
  Tensor y = kiln::relu(kiln::addmm(bias, a, b));
  EXPECT_EQ(plan(), "extern[addmm_act]");
  EXPECT_TRUE(y.is_pending());
}

TEST_F(MatmulEpilogue, LinearThenGeluTanhIsOneNode) {
  Tensor x = real({6, 8}, 1), w = real({5, 8}, 2), bias = real({5}, 3);
  Tensor y = kiln::gelu(kiln::linear(x, w, bias), "tanh");
  EXPECT_EQ(plan(), "extern[addmm_act]");
}

TEST_F(MatmulEpilogue, TheRestOfTheChainStillFuses) {
  Tensor x = real({6, 8}, 1), w = real({5, 8}, 2), bias = real({5}, 3);
  Tensor y = kiln::relu(kiln::linear(x * 2.0f, w, bias)) + 1.0f;
  EXPECT_EQ(plan(), "fused[mul.Tensor -> 1 out] extern[addmm_act] fused[add.Tensor -> 1 out]");
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

TEST_F(MatmulEpilogue, ScaledAddmmAndBatchedLinearStayApart) {
  Tensor bias = real({5}, 1), a = real({4, 3}, 2), b = real({3, 5}, 3);
  Tensor y = kiln::relu(kiln::addmm(bias, a, b, /*beta=*/2, /*alpha=*/1));
  Tensor x3 = real({2, 4, 8}, 4), w = real({5, 8}, 5);
  Tensor z = kiln::relu(kiln::linear(x3, w, bias));
  Tensor u = kiln::relu(kiln::linear(real({4, 8}, 6), w));  // no bias
  EXPECT_EQ(plan().find("addmm_act"), std::string::npos) << plan();
}

TEST_F(MatmulEpilogue, RewrittenTracesMatchEager) {
  int cases = 0;
  for (const char* layout : {"contiguous", "transposed", "strided", "offset"}) {
    SCOPED_TRACE(layout);
    expect_lazy_matches_eager([&] {
      Tensor bias = real({7}, 1, layout == std::string("offset") ? "offset" : "contiguous");
      Tensor a = real({5, 9}, 2, layout), b = real({9, 7}, 3, layout);
      return kiln::relu(kiln::addmm(bias, a, b));
    });
    expect_lazy_matches_eager([&] {
      Tensor x = real({6, 8}, 4, layout), w = real({5, 8}, 5, layout);
      Tensor bias = real({6, 5}, 6);  // a full bias, not a row
      return kiln::gelu(kiln::linear(x, w, bias), "tanh");
    });
    expect_lazy_matches_eager([&] {
      Tensor x = real({3, 4}, 7, layout), w = real({2, 4}, 8), bias = real({1, 2}, 9);
      return kiln::relu(kiln::linear(x, w, bias)) * 3.0f;
    });
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
  EXPECT_EQ(plan(), "extern[addmm_act] fused[add_.Tensor -> 1 out] fused[mul_.Tensor -> 1 out]");
  EXPECT_TENSOR_CLOSE_TOL(lazy, eager, 0, 0);
  EXPECT_TENSOR_CLOSE_TOL(w, w_eager, 0, 0);
  EXPECT_TENSOR_CLOSE_TOL(bias, bias_eager, 0, 0);
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
