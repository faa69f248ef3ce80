// torch.nn.functional's activations (leaky_relu, elu, hardtanh, hardsigmoid,
// hardswish, mish, log_sigmoid) and dropout where the PyTorch oracle cannot
// reach: lazy (fused) results against eager ones, in-place writes through
// views, dropout's draws in every mode. Values against PyTorch:
// tests/oracle/cases/activation.py.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::DType;
using kiln::Tensor;
using kiln::testing::random_tensor;

struct Activation {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
};

const std::vector<Activation>& activations() {
  static const std::vector<Activation> all = {
      {"leaky_relu", [](const Tensor& x) { return kiln::leaky_relu(x, 0.2); }},
      {"elu", [](const Tensor& x) { return kiln::elu(x, 1.5, 0.5, 2.0); }},
      {"hardtanh", [](const Tensor& x) { return kiln::hardtanh(x, -0.5, 2.0); }},
      {"hardsigmoid", [](const Tensor& x) { return kiln::hardsigmoid(x); }},
      {"hardswish", [](const Tensor& x) { return kiln::hardswish(x); }},
      {"mish", [](const Tensor& x) { return kiln::mish(x); }},
      {"log_sigmoid", [](const Tensor& x) { return kiln::log_sigmoid(x); }},
  };
  return all;
}

// Lazy mode fuses each activation (a decomposition in the kernel IR) into the
// ops around it; the fused kernel computes what the eager kernel does.
TEST(Activation, LazyMatchesEagerInEveryFloatDtype) {
  uint64_t seed = 1;
  for (DType dt : {kiln::kFloat32, kiln::kFloat64, kiln::kBFloat16, kiln::kFloat16}) {
    for (const char* layout : {"contiguous", "transposed", "strided", "expanded"}) {
      Tensor x = random_tensor({7, 33}, dt, layout, seed++) * 4.0;
      for (const Activation& a : activations()) {
        SCOPED_TRACE(std::string(a.name) + " " + kiln::dtype_name(dt) + " " + layout);
        Tensor eager;
        {
          kiln::EagerGuard g;
          eager = a.fn(x) * 2.0 + 1.0;
        }
        Tensor lazy = a.fn(x) * 2.0 + 1.0;
        ASSERT_TRUE(lazy.is_pending());
        // One 16-bit ulp apart at most (Note [16-bit floats in pointwise kernels]).
        EXPECT_TENSOR_CLOSE(lazy, eager);
      }
    }
  }
}

TEST(Activation, SpecialValues) {
  kiln::EagerGuard g;
  const float inf = INFINITY;
  Tensor x = kiln::tensor<float>({-inf, -1000.0f, -3.0f, -0.0f, 0.0f, 3.0f, 1000.0f, inf});
  auto at = [](const Tensor& t, int64_t i) { return t[i].item<float>(); };
  Tensor ls = kiln::logsigmoid(x);
  EXPECT_EQ(at(ls, 0), -inf);
  EXPECT_EQ(at(ls, 1), -1000.0f);  // finite where log(sigmoid(x)) underflows
  EXPECT_EQ(at(ls, 7), 0.0f);
  Tensor m = kiln::mish(x);
  EXPECT_EQ(at(m, 6), 1000.0f);  // exp overflows: tanh(inf) = 1
  EXPECT_EQ(at(m, 7), inf);
  EXPECT_EQ(at(kiln::hardswish(x), 5), 3.0f);
  EXPECT_EQ(at(kiln::hardswish(x), 2), 0.0f);
  EXPECT_EQ(at(kiln::hardsigmoid(x), 5), 1.0f);
  EXPECT_EQ(at(kiln::elu(x), 0), -1.0f);
  for (const Activation& a : activations()) {
    EXPECT_TRUE(std::isnan(a.fn(kiln::tensor<float>({NAN}))[0].item<float>())) << a.name;
  }
}

// elu of either zero is +0, as PyTorch's exp(x) - 1 gives, eagerly and
// fused (expm1(-0) is -0); with a negative alpha, -0.
TEST(Activation, EluOfZeroHasPyTorchsSign) {
  for (bool eager : {true, false}) {
    std::optional<kiln::EagerGuard> g;
    if (eager) g.emplace();
    Tensor zeros = kiln::tensor<float>({-0.0f, 0.0f});
    Tensor e = kiln::elu(zeros * 1.0) * 1.0;
    Tensor n = kiln::elu(zeros * 1.0, -1.0) * 1.0;
    for (int64_t i = 0; i < 2; ++i) {
      EXPECT_FALSE(std::signbit(e[i].item<float>())) << (eager ? "eager " : "lazy ") << i;
      EXPECT_TRUE(std::signbit(n[i].item<float>())) << (eager ? "eager " : "lazy ") << i;
    }
  }
}

// In-place forms write their target, and views of its base see the write, in
// both modes.
TEST(Activation, InPlaceThroughAView) {
  for (bool eager : {true, false}) {
    std::optional<kiln::EagerGuard> g;
    if (eager) g.emplace();
    Tensor base = kiln::arange(-6.0, 6.0, 1.0).reshape({3, 4});
    Tensor col = base.select(1, 1);  // -5, -1, 3
    kiln::leaky_relu_(col, 0.5);
    Tensor row = base.narrow(0, 0, 1);
    kiln::hardtanh_(row, -2.0, 2.0);
    EXPECT_FLOAT_EQ(base[0][1].item<float>(), -2.0f);  // -2.5, then clamped
    EXPECT_FLOAT_EQ(base[1][1].item<float>(), -0.5f);
    EXPECT_FLOAT_EQ(base[2][1].item<float>(), 3.0f);
    EXPECT_FLOAT_EQ(base[0][0].item<float>(), -2.0f);
    EXPECT_FLOAT_EQ(base[1][0].item<float>(), -2.0f);  // untouched
    Tensor e = base.clone();
    kiln::elu_(e);
    kiln::hardsigmoid_(e);
    kiln::hardswish_(e);
    kiln::mish_(e);
    Tensor want;
    {
      kiln::EagerGuard inner;
      want = kiln::mish(kiln::hardswish(kiln::hardsigmoid(kiln::elu(base))));
    }
    EXPECT_TENSOR_CLOSE(e, want);
  }
}

// hardtanh is clamp in self's dtype: integer bounds truncate, so an integer
// self stays integer.
TEST(Activation, HardtanhKeepsIntegerDtypes) {
  for (bool eager : {true, false}) {
    std::optional<kiln::EagerGuard> g;
    if (eager) g.emplace();
    Tensor x = kiln::tensor<int64_t>({-5, -2, 0, 2, 5});
    Tensor y = kiln::hardtanh(x, -2.7, 3.9);
    EXPECT_EQ(y.dtype(), kiln::kInt64);
    EXPECT_TENSOR_CLOSE(y, kiln::tensor<int64_t>({-2, -2, 0, 2, 3}));
  }
}

// --- dropout ---------------------------------------------------------------------------

TEST(Dropout, WithoutTrainingIsTheInput) {
  Tensor x = random_tensor({4, 5}, kiln::kFloat32, "transposed", 3);
  Tensor y = kiln::dropout(x, 0.5, false);
  EXPECT_EQ(y.impl(), x.impl());
  Tensor i = kiln::tensor<int64_t>({1, 2, 3});
  EXPECT_EQ(kiln::dropout(i, 0.9, false).impl(), i.impl());
  EXPECT_EQ(kiln::dropout(x, 0.0, true).impl(), x.impl());
}

TEST(Dropout, POneGivesZeros) {
  Tensor x = random_tensor({4, 5}, kiln::kBFloat16, "strided", 4);
  Tensor y = kiln::dropout(x, 1.0, true);
  EXPECT_EQ(y.dtype(), kiln::kBFloat16);
  EXPECT_TENSOR_CLOSE(y, kiln::zeros({4, 5}, kiln::TensorOptions(kiln::kBFloat16)));
}

// Each element is dropped with probability p; the rest are scaled by 1/(1-p).
TEST(Dropout, DropsAFractionPAndScalesTheRest) {
  for (bool eager : {true, false}) {
    std::optional<kiln::EagerGuard> g;
    if (eager) g.emplace();
    for (double p : {0.1, 0.5, 0.8}) {
      for (DType dt : {kiln::kFloat32, kiln::kFloat64, kiln::kFloat16}) {
        SCOPED_TRACE(std::to_string(p) + " " + kiln::dtype_name(dt) + (eager ? " eager" : " lazy"));
        Tensor x = (random_tensor({200, 100}, kiln::kFloat32, "transposed", 5).abs() + 0.5).to(dt);
        Tensor y = kiln::dropout(x, p, true);
        const double n = static_cast<double>(x.numel());
        const double dropped = kiln::sum(kiln::eq(y, 0.0)).item<double>() / n;
        // 20000 draws: the fraction's standard deviation is below 0.0036.
        EXPECT_NEAR(dropped, p, 0.02);
        Tensor kept = kiln::ne(y, 0.0);
        Tensor scaled = kiln::div(x, 1.0 - p).to(dt);
        Tensor diff = kiln::where(kept, kiln::abs(y.to(kiln::kFloat64) - scaled.to(kiln::kFloat64)),
                                  kiln::zeros({}, kiln::TensorOptions(kiln::kFloat64)));
        // x * (1 / (1 - p)) against x / (1 - p): a rounding apart, one float16
        // ulp at the largest value (17.5 at p = 0.8: 0.0156).
        const double largest = kiln::max(kiln::abs(scaled.to(kiln::kFloat64))).item<double>();
        EXPECT_LE(kiln::max(diff).item<double>(), dt == kiln::kFloat16 ? largest * 0x1p-10 : 1e-5);
      }
    }
  }
}

// The mask comes from kiln's generator at the call: a seed gives the same
// mask eagerly and lazily; a compiled function draws a new one every call.
TEST(Dropout, DrawsFromTheGeneratorInEveryMode) {
  Tensor x = random_tensor({6, 7}, kiln::kFloat32, "contiguous", 6) + 5.0;
  auto body = [](const Tensor& t) { return kiln::dropout(t * 2.0, 0.5, true) + 1.0; };
  kiln::manual_seed(21);
  Tensor want, want_next;
  {
    kiln::EagerGuard g;
    want = body(x);
    want_next = body(x);
  }
  kiln::manual_seed(21);
  EXPECT_TENSOR_CLOSE(body(x), want);
  auto f = kiln::jit::compile(body, {.name = "dropout"});
  kiln::manual_seed(21);
  Tensor first = f(x);
  Tensor second = f(x);
  EXPECT_TENSOR_CLOSE(first, want);
  EXPECT_TENSOR_CLOSE(second, want_next);
  EXPECT_GT(kiln::max(kiln::abs(first - second)).item<float>(), 0.0f);
  EXPECT_EQ(f.stats().graph_breaks, 0);
}

}  // namespace
