// Must-fail cases of values that do not fit the dtype they are stored in:
// full, fill_ and their relatives refuse what PyTorch's checked Scalar
// conversion refuses ("value cannot be converted to type int8_t without
// overflow") instead of storing a wrapped value, in eager and lazy mode and
// on meta tensors; the values PyTorch accepts are stored as it stores them.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/modes.h"
#include "tests/support/testing.h"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::Scalar;
using kiln::Tensor;
using kiln::TensorOptions;

// A 0-dim tensor that holds `v` exactly (float64 or int64).
Tensor wide_scalar(const Scalar& v) {
  return kiln::scalar_tensor(v,
                             TensorOptions(v.is_floating_point() ? kiln::kFloat64 : kiln::kInt64));
}

struct Case {
  DType dtype;
  Scalar value;
};

// Each refused by PyTorch 1.13 (torch.full((3,), v, dtype=...) and fill_).
const Case kRefused[] = {
    {kiln::kInt8, 300},
    {kiln::kInt8, -129},
    {kiln::kInt8, 255},
    {kiln::kInt8, 300.0},
    {kiln::kUInt8, 256},
    {kiln::kUInt8, -256},
    {kiln::kUInt8, -1.0},
    {kiln::kInt16, 40000},
    {kiln::kInt32, int64_t{1} << 40},
    {kiln::kInt64, 1e30},
    {kiln::kInt64, 9.3e18},
    {kiln::kInt64, 9223372036854775808.0},  // 2^63: the double int64's max rounds to
    {kiln::kInt64, std::numeric_limits<double>::quiet_NaN()},
    {kiln::kInt64, std::numeric_limits<double>::infinity()},
    {kiln::kFloat16, 70000},
    {kiln::kFloat16, 1e6},
    {kiln::kFloat16, -65505.0},
    {kiln::kBFloat16, 1e300},
    {kiln::kFloat32, 1e300},
    {kiln::kFloat32, -1e39},
};

// Each accepted by PyTorch 1.13, with the value it stores.
struct Accepted {
  DType dtype;
  Scalar value;
  double stored;
};
const Accepted kAccepted[] = {
    {kiln::kInt8, 127, 127},
    {kiln::kInt8, -128, -128},
    {kiln::kInt8, 2.5, 2},
    {kiln::kUInt8, -1, 255},  // negative integers wrap into unsigned types
    {kiln::kUInt8, -255, 1},
    {kiln::kInt64, std::numeric_limits<int64_t>::max(), 9223372036854775807.0},
    {kiln::kInt64, 9.2e18, 9.2e18},
    {kiln::kFloat16, 65504, 65504},
    {kiln::kFloat32, std::numeric_limits<double>::infinity(), INFINITY},
    {kiln::kBool, 5, 1},
    {kiln::kBool, 2.5, 1},
    {kiln::kInt8, true, 1},
};

// item<T>() converts only values T holds: NaN, infinities and values past
// an integer type's range raise, as past a float's (PyTorch's checked
// conversion); values that fit convert exactly.
TEST(ValueFitErrors, ItemAsAnotherType) {
  EXPECT_KILN_ERROR(kiln::scalar_tensor(NAN).item<int64_t>(),
                    "[item] expected a value that the requested 64-bit type holds, got nan");
  EXPECT_KILN_ERROR(kiln::scalar_tensor(1e20, kiln::kFloat64).item<int>(), "32-bit type holds");
  EXPECT_KILN_ERROR(kiln::scalar_tensor(300, kiln::kInt64).item<int8_t>(),
                    "8-bit type holds, got 300");
  EXPECT_KILN_ERROR(kiln::scalar_tensor(-1, kiln::kInt64).item<uint32_t>(),
                    "unsigned 32-bit type holds, got -1");
  EXPECT_KILN_ERROR(kiln::scalar_tensor(1e300, kiln::kFloat64).item<float>(), "32-bit type holds");
  EXPECT_EQ(kiln::scalar_tensor(-128, kiln::kInt64).item<int8_t>(), -128);
  EXPECT_EQ(kiln::scalar_tensor(2.75, kiln::kFloat64).item<int>(), 2);
  EXPECT_EQ(kiln::scalar_tensor(INFINITY, kiln::kFloat64).item<float>(), INFINITY);
  EXPECT_EQ(kiln::scalar_tensor(-9.2233720368547758e18, kiln::kFloat64).item<int64_t>(),
            std::numeric_limits<int64_t>::min());
}

// Sizes and values that do not agree, and a 0-dim tensor's dims, raise
// instead of reading past what is there.
TEST(ValueFitErrors, ValuesForSizesAndDimsOfAScalar) {
  EXPECT_KILN_ERROR(kiln::tensor(std::vector<float>{1, 2, 3}, {2, 2}),
                    "[tensor] expected 4 values for sizes [2, 2], got 3");
  EXPECT_KILN_ERROR(kiln::tensor(std::vector<float>{1, 2, 3, 4, 5}, {2, 2}),
                    "[tensor] expected 4 values for sizes [2, 2], got 5");
  const Tensor s = kiln::scalar_tensor(3.5);
  EXPECT_KILN_ERROR(s.size(0), "[size] expected a tensor with dims, got a 0-dim tensor (dim 0)");
  EXPECT_KILN_ERROR(s.stride(-1), "[stride] expected a tensor with dims, got a 0-dim tensor");
  // permute of more than 64 dims (a bit set of 64 wrapped).
  std::vector<int64_t> sizes(100, 1), reversed(100);
  for (int64_t i = 0; i < 100; ++i) reversed[static_cast<size_t>(i)] = 99 - i;
  EXPECT_EQ(kiln::zeros(sizes).permute(reversed).dim(), 100);
  reversed[1] = 99;
  EXPECT_KILN_ERROR(kiln::zeros(sizes).permute(reversed), "repeated dim 99");
}

TEST(ValueFitErrors, Full) {
  kiln::testing::in_eager_lazy_and_meta([](Device d) {
    for (const Case& c : kRefused) {
      SCOPED_TRACE(::testing::Message() << c.value << " into " << c.dtype);
      EXPECT_KILN_ERROR(kiln::full({3}, c.value, TensorOptions(c.dtype).device(d)),
                        "[full] value ");
      EXPECT_KILN_ERROR(kiln::full({3}, c.value, TensorOptions(c.dtype).device(d)),
                        "without overflow");
    }
    EXPECT_KILN_ERROR(kiln::full({3}, 300, TensorOptions(kiln::kInt8).device(d)),
                      "[full] value 300 cannot be converted to int8 without overflow");
    // Zero elements: still refused, as PyTorch.
    EXPECT_KILN_ERROR(kiln::full({0}, 300, TensorOptions(kiln::kInt8).device(d)), "[full]");
    EXPECT_KILN_ERROR(kiln::scalar_tensor(300, TensorOptions(kiln::kInt8).device(d)),
                      "[scalar_tensor] value 300 cannot be converted to int8");
  });
}

TEST(ValueFitErrors, Fill) {
  kiln::testing::in_eager_lazy_and_meta([](Device d) {
    for (const Case& c : kRefused) {
      SCOPED_TRACE(::testing::Message() << c.value << " into " << c.dtype);
      Tensor t = kiln::zeros({3}, TensorOptions(c.dtype).device(d));
      EXPECT_KILN_ERROR(t.fill_(c.value), "[fill_] value ");
      // A 0-dim value tensor goes the same way.
      if (!d.is_meta()) {
        EXPECT_KILN_ERROR(kiln::call_op("fill_.Tensor", {t, wide_scalar(c.value)}),
                          "without overflow");
        // The target keeps its value.
        EXPECT_EQ(t.to(kiln::kFloat64).sum().item<double>(), 0.0);
      }
    }
    Tensor i8 = kiln::zeros({3}, TensorOptions(kiln::kInt8).device(d));
    EXPECT_KILN_ERROR(i8.fill_(300),
                      "[fill_] value 300 cannot be converted to int8 without overflow");
    // A strided view and an empty tensor check the same.
    Tensor wide = kiln::zeros({4, 4}, TensorOptions(kiln::kInt8).device(d));
    EXPECT_KILN_ERROR(wide.t().fill_(-200), "[fill_] value -200");
    EXPECT_KILN_ERROR(wide.slice(0, 0, 0).fill_(-200), "[fill_] value -200");
  });
}

TEST(ValueFitErrors, MaskedFillSharesTheRule) {
  kiln::testing::in_eager_lazy_and_meta([](Device d) {
    for (const Case& c : kRefused) {
      SCOPED_TRACE(::testing::Message() << c.value << " into " << c.dtype);
      Tensor t = kiln::zeros({3}, TensorOptions(c.dtype).device(d));
      Tensor mask = kiln::ones({3}, TensorOptions(kiln::kBool).device(d));
      EXPECT_KILN_ERROR(kiln::masked_fill_(t, mask, c.value), "without overflow");
    }
  });
}

// randint's range must fit its dtype (PyTorch: "random_ expects 'from' and
// 'to' to be in range of the dtype"), else values would wrap out of it.
TEST(ValueFitErrors, RandintRange) {
  kiln::testing::in_eager_lazy_and_meta([](Device d) {
    auto randint = [&](int64_t low, int64_t high, DType t) {
      return kiln::randint(low, high, {64}, TensorOptions(t).device(d));
    };
    EXPECT_KILN_ERROR(randint(0, 300, kiln::kInt8),
                      "[randint] expected high <= 128 for int8, got 300");
    EXPECT_KILN_ERROR(randint(200, 300, kiln::kUInt8),
                      "[randint] expected high <= 256 for uint8, got 300");
    EXPECT_KILN_ERROR(randint(-1, 5, kiln::kUInt8),
                      "[randint] expected low >= 0 for uint8, got -1");
    EXPECT_KILN_ERROR(randint(-129, 0, kiln::kInt8), "expected low >= -128 for int8, got -129");
    EXPECT_KILN_ERROR(randint(0, 40000, kiln::kInt16), "expected high <= 32768 for int16");
    EXPECT_KILN_ERROR(randint(0, int64_t{1} << 32, kiln::kInt32),
                      "expected high <= 2147483648 for int32");
    EXPECT_KILN_ERROR(randint(0, 70000, kiln::kFloat16), "expected high <= 65505 for float16");
    // The ends themselves fit.
    randint(-128, 128, kiln::kInt8);
    randint(0, 256, kiln::kUInt8);
    randint(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), kiln::kInt64);
  });
  kiln::EagerGuard eager;
  const Tensor u8 = kiln::randint(200, 256, {4096}, TensorOptions(kiln::kUInt8)).to(kiln::kInt64);
  EXPECT_GE(kiln::amin(u8).item<int64_t>(), 200);
  EXPECT_LE(kiln::amax(u8).item<int64_t>(), 255);
  const Tensor i8 = kiln::randint(-128, 128, {4096}, TensorOptions(kiln::kInt8)).to(kiln::kInt64);
  EXPECT_GE(kiln::amin(i8).item<int64_t>(), -128);
  EXPECT_LE(kiln::amax(i8).item<int64_t>(), 127);
}

// randint into bool, as PyTorch 1.13: the range must lie in [0, 2) ("from"
// and "to - 1" in bool's range: randint(0, 2), (0, 1), (1, 2) and
// randint(2) are taken, randint(0, 3) and randint(-1, 2) refused), and the
// values are the int64 ones at the same seed, stored as value != 0.
TEST(ValueFitErrors, RandintBool) {
  const TensorOptions b8 = TensorOptions(kiln::kBool);
  kiln::testing::in_eager_lazy_and_meta([&](Device d) {
    auto randint = [&](int64_t low, int64_t high) {
      return kiln::randint(low, high, {64}, TensorOptions(b8).device(d));
    };
    EXPECT_EQ(randint(0, 2).dtype(), kiln::kBool);
    EXPECT_EQ(randint(0, 1).dtype(), kiln::kBool);
    EXPECT_EQ(randint(1, 2).dtype(), kiln::kBool);
    EXPECT_EQ(kiln::randint(2, {64}, TensorOptions(b8).device(d)).dtype(), kiln::kBool);
    EXPECT_KILN_ERROR(randint(0, 3), "[randint] expected high <= 2 for bool, got 3");
    EXPECT_KILN_ERROR(kiln::randint(3, {64}, TensorOptions(b8).device(d)),
                      "[randint] expected high <= 2 for bool, got 3");
    EXPECT_KILN_ERROR(randint(-1, 2), "[randint] expected low >= 0 for bool, got -1");
    EXPECT_KILN_ERROR(randint(-1, 1), "[randint] expected low >= 0 for bool, got -1");
    EXPECT_KILN_ERROR(randint(2, 3), "[randint] expected high <= 2 for bool, got 3");
    EXPECT_KILN_ERROR(randint(0, 0), "[randint] expected low < high, got low=0 high=0");
  });
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    kiln::manual_seed(11);
    const Tensor bits = kiln::randint(0, 2, {4096}, b8);
    kiln::manual_seed(11);
    const Tensor ints = kiln::randint(0, 2, {4096});
    EXPECT_TENSOR_CLOSE(bits, ints.to(kiln::kBool));
    EXPECT_EQ(kiln::sum(bits.to(kiln::kInt64)).item<int64_t>(), kiln::sum(ints).item<int64_t>());
    EXPECT_GT(kiln::sum(ints).item<int64_t>(), 1800);
    EXPECT_LT(kiln::sum(ints).item<int64_t>(), 2300);
    EXPECT_TENSOR_CLOSE(kiln::randint(0, 1, {8}, b8), kiln::zeros({8}, kiln::kBool));
    EXPECT_TENSOR_CLOSE(kiln::randint(1, 2, {8}, b8), kiln::ones({8}, kiln::kBool));
  }
}

TEST(ValueFitErrors, AcceptedValuesStoreAsPyTorch) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    for (const Accepted& c : kAccepted) {
      SCOPED_TRACE(::testing::Message() << c.value << " into " << c.dtype);
      Tensor f = kiln::full({3}, c.value, TensorOptions(c.dtype));
      Tensor z = kiln::zeros({3}, TensorOptions(c.dtype));
      z.fill_(c.value);
      Tensor expected = kiln::full({3}, c.stored, TensorOptions(kiln::kFloat64));
      EXPECT_TENSOR_CLOSE(f.to(kiln::kFloat64), expected);
      EXPECT_TENSOR_CLOSE(z.to(kiln::kFloat64), expected);
    }
  }
}

// A number argument an op converts to its dtype (clamp's bounds, pow's
// exponent, masked_fill's value) is checked in every mode with the eager
// kernel's words: lazy recording takes the eager kernel's check (the typed
// clamp recorded any bound, and the generated kernel clamped to inf or not at
// all), also for a pending self that the op fuses with, and when compiled.
struct NumberArgument {
  const char* what;
  DType dtype;
  std::function<Tensor(const Tensor&)> call;
  const char* message;
};

void expect_refused_in_every_mode(const NumberArgument& c) {
  SCOPED_TRACE(::testing::Message() << c.what << " on " << c.dtype);
  kiln::testing::in_eager_lazy_and_meta([&](Device d) {
    Tensor x = kiln::ones({3}, TensorOptions(c.dtype).device(d));
    EXPECT_KILN_ERROR(c.call(x), c.message);
    Tensor pending = x * 2.0;  // lazily: not computed yet, so the op fuses with it
    EXPECT_KILN_ERROR(c.call(pending), c.message);
  });
  auto f = kiln::jit::compile([&](const Tensor& x) { return c.call(x * 2.0); });
  EXPECT_KILN_ERROR(f(kiln::ones({3}, TensorOptions(c.dtype))), c.message);
}

TEST(ValueFitErrors, ClampBoundsAreCheckedInEveryMode) {
  using Opt = std::optional<Scalar>;
  const DType h = kiln::kFloat16, bf = kiln::kBFloat16, f = kiln::kFloat32;
  const NumberArgument cases[] = {
      {"clamp(x, 1e5)", h, [](const Tensor& x) { return kiln::clamp(x, Opt(1e5)); },
       "[clamp] expected 'min' to fit in float16, got 100000"},
      {"clamp(x, -70000.0)", h, [](const Tensor& x) { return kiln::clamp(x, Opt(-70000.0)); },
       "[clamp] expected 'min' to fit in float16, got -70000"},
      {"clamp(x, max=-1e5)", h, [](const Tensor& x) { return kiln::clamp(x, Opt(), Opt(-1e5)); },
       "[clamp] expected 'max' to fit in float16"},
      {"clamp(x, 1e39)", bf, [](const Tensor& x) { return kiln::clamp(x, Opt(1e39)); },
       "[clamp] expected 'min' to fit in bfloat16, got 1e+39"},
      {"clamp(x, 0, -1e39)", bf, [](const Tensor& x) { return kiln::clamp(x, Opt(0), Opt(-1e39)); },
       "[clamp] expected 'max' to fit in bfloat16"},
      {"clamp(x, 1e39)", f, [](const Tensor& x) { return kiln::clamp(x, Opt(1e39)); },
       "[clamp] expected 'min' to fit in float32"},
      {"clamp_(x, 1e5)", h,
       [](const Tensor& x) {
         Tensor y = x.clone();
         return kiln::clamp_(y, Opt(1e5), Opt());
       },
       "[clamp_] expected 'min' to fit in float16"},
      {"pow(x, 1e5)", h, [](const Tensor& x) { return kiln::pow(x, 1e5); },
       "[pow.Tensor_Scalar] expected 'exponent' to fit in float16"},
      {"masked_fill(x, m, 1e5)", h,
       [](const Tensor& x) {
         return kiln::masked_fill(
             x, kiln::ones(x.sizes(), TensorOptions(kiln::kBool).device(x.device())), 1e5);
       },
       "[masked_fill] value 100000 cannot be converted to float16"},
  };
  for (const NumberArgument& c : cases) expect_refused_in_every_mode(c);
  // Bounds that fit, infinities and NaN are taken lazily as eagerly.
  Tensor x = kiln::ones({3}, TensorOptions(h));
  for (const Opt& lo : {Opt(65504.0), Opt(-INFINITY), Opt(NAN), Opt(-65504)}) {
    Tensor lazy = kiln::clamp(x * 2.0, lo);
    kiln::EagerGuard eager;
    EXPECT_TENSOR_CLOSE(lazy, kiln::clamp(x * 2.0, lo));
  }
}

// An integer number is checked as a floating one is: PyTorch 1.13 refuses
// pow(float16, 2**40) ("value cannot be converted to type at::Half without
// overflow"), as it refuses the same integer as a clamp bound or an alpha.
// Only float16 is narrower than int64; bfloat16 and float32 hold 2**40.
TEST(ValueFitErrors, IntegersPastFloat16AreRefused) {
  using Opt = std::optional<Scalar>;
  const DType h = kiln::kFloat16;
  const int64_t big = int64_t{1} << 40;
  const NumberArgument cases[] = {
      {"pow(x, 2**40)", h, [&](const Tensor& x) { return kiln::pow(x, big); },
       "[pow.Tensor_Scalar] expected 'exponent' to fit in float16, got 1099511627776"},
      {"pow(x, -70000)", h, [](const Tensor& x) { return kiln::pow(x, -70000); },
       "[pow.Tensor_Scalar] expected 'exponent' to fit in float16, got -70000"},
      {"pow_(x, 70000)", h,
       [](const Tensor& x) {
         return kiln::call_op("pow_.Scalar", {x.clone(), Scalar(70000)}).at(0).to_tensor();
       },
       "[pow_.Scalar] expected 'exponent' to fit in float16"},
      {"clamp(x, 70000)", h, [](const Tensor& x) { return kiln::clamp(x, Opt(70000)); },
       "[clamp] expected 'min' to fit in float16, got 70000"},
      {"clamp(x, max=-70000)", h,
       [](const Tensor& x) { return kiln::clamp(x, Opt(), Opt(-70000)); },
       "[clamp] expected 'max' to fit in float16"},
      {"add(x, x, alpha=70000)", h, [](const Tensor& x) { return kiln::add(x, x, 70000); },
       "[add] value 70000 cannot be converted to float16 without overflow"},
  };
  for (const NumberArgument& c : cases) expect_refused_in_every_mode(c);
  // What PyTorch computes: the largest float16, and 2**40 into wider types.
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    auto two = [](DType t) { return kiln::full({2}, 2.0, TensorOptions(t)); };
    const Tensor inf = kiln::full({2}, INFINITY, TensorOptions(kiln::kFloat64));
    EXPECT_TENSOR_CLOSE(kiln::pow(two(h), 65504).to(kiln::kFloat64), inf);
    EXPECT_TENSOR_CLOSE(kiln::pow(two(kiln::kBFloat16), big).to(kiln::kFloat64), inf);
    EXPECT_TENSOR_CLOSE(kiln::clamp(two(kiln::kFloat32), Opt(big)).to(kiln::kFloat64),
                        kiln::full({2}, 1099511627776.0, TensorOptions(kiln::kFloat64)));
    // A number operand is not converted: PyTorch computes x * 1e5 and x + 2**40.
    EXPECT_TENSOR_CLOSE(kiln::mul(two(h), 1e5).to(kiln::kFloat64), inf);
    EXPECT_TENSOR_CLOSE(kiln::add(two(h), big).to(kiln::kFloat64), inf);
  }
}

// lerp's weight, addcmul's and addcdiv's value and softplus's beta and
// threshold are converted to the type the op computes in, float32 for the
// 16-bit floats, as PyTorch converts them (its message names "float"):
// bfloat16 takes 3.39e38 (past its own largest, 3.3895e38) and float16 1e5;
// 1e39 is refused.
TEST(ValueFitErrors, NumbersOfOpsComputingInFloat32FitFloat32) {
  for (DType t : {kiln::kFloat16, kiln::kBFloat16}) {
    const NumberArgument cases[] = {
        {"lerp", t, [](const Tensor& x) { return kiln::lerp(x, x, 1e39); },
         "[lerp.Scalar] expected 'weight' to fit in float32, got 1e+39"},
        {"addcmul", t, [](const Tensor& x) { return kiln::addcmul(x, x, x, 1e39); },
         "[addcmul] expected 'value' to fit in float32"},
        {"addcdiv", t, [](const Tensor& x) { return kiln::addcdiv(x, x, x, -1e39); },
         "[addcdiv] expected 'value' to fit in float32"},
        {"softplus beta", t, [](const Tensor& x) { return kiln::softplus(x, 1e39); },
         "[softplus] expected 'beta' to fit in float32"},
        {"softplus threshold", t, [](const Tensor& x) { return kiln::softplus(x, 1, 1e39); },
         "[softplus] expected 'threshold' to fit in float32"},
    };
    for (const NumberArgument& c : cases) expect_refused_in_every_mode(c);
  }
  // PyTorch 1.13's results (float16's are those of its CUDA kernels, the
  // 1.13 CPU build having none).
  const double big = 3.39e38, inf = INFINITY;
  struct Accepted {
    DType dtype;
    std::function<Tensor(const Tensor&)> call;
    std::vector<double> expected;
  };
  const Accepted accepted[] = {
      {kiln::kBFloat16, [&](const Tensor& x) { return kiln::lerp(x, x, big); }, {1, 2}},
      {kiln::kBFloat16,
       [&](const Tensor& x) { return kiln::addcmul(x, x, x, big); },
       {3.3895313892515355e38, inf}},
      {kiln::kBFloat16, [&](const Tensor& x) { return kiln::softplus(x, big); }, {1, 2}},
      {kiln::kBFloat16,
       [&](const Tensor& x) { return kiln::softplus(x, 1, big); },
       {1.3125, 2.125}},
      {kiln::kFloat16, [](const Tensor& x) { return kiln::lerp(x, x, 1e5); }, {1, 2}},
      {kiln::kFloat16, [](const Tensor& x) { return kiln::addcdiv(x, x, x, 1e5); }, {inf, inf}},
      {kiln::kFloat16, [](const Tensor& x) { return kiln::softplus(x, 1e5); }, {1, 2}},
  };
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    for (const Accepted& a : accepted) {
      Tensor x = kiln::tensor({1.0, 2.0}).to(a.dtype);
      EXPECT_TENSOR_CLOSE(a.call(x).to(kiln::kFloat64), kiln::tensor(a.expected, {2}));
    }
  }
}

// The CUDA fill kernel and the lazy CUDA path check the same (GPU machine only).
TEST(ValueFitErrors, Cuda) {
  KILN_REQUIRE_CUDA();
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    const TensorOptions i8 = TensorOptions(kiln::kInt8).device(Device::cuda());
    EXPECT_KILN_ERROR(kiln::full({3}, 300, i8), "[full] value 300 cannot be converted to int8");
    Tensor t = kiln::zeros({3}, i8);
    EXPECT_KILN_ERROR(t.fill_(300), "[fill_] value 300 cannot be converted to int8");
    EXPECT_KILN_ERROR(t.fill_(1e300), "without overflow");
    EXPECT_KILN_ERROR(
        kiln::zeros({3}, TensorOptions(kiln::kFloat16).device(Device::cuda())).fill_(70000),
        "[fill_] value 70000 cannot be converted to float16");
    Tensor u8 = kiln::full({3}, -1, TensorOptions(kiln::kUInt8).device(Device::cuda()));
    EXPECT_TENSOR_CLOSE(u8.cpu(), kiln::full({3}, 255, TensorOptions(kiln::kUInt8)));
  }
}

}  // namespace
