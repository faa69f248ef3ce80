// Must-fail cases of the pointwise ops: each raises kiln::Error naming the op
// and what was wrong, on the CPU and (for everything not decided by the data)
// on meta tensors alike.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::TensorOptions;

Tensor f32(std::vector<int64_t> sizes = {3}) {
  return kiln::ones(sizes);
}
Tensor of(kiln::DType dt, std::vector<int64_t> sizes = {3}) {
  return kiln::ones(sizes, TensorOptions(dt));
}
Tensor meta(kiln::DType dt, std::vector<int64_t> sizes = {3}) {
  return kiln::empty(sizes, TensorOptions(dt).device(kiln::Device::meta()));
}

TEST(PointwiseErrors, RefusedDtypes) {
  kiln::EagerGuard eager;  // these check the eager kernels themselves
  for (bool on_meta : {false, true}) {
    auto make = [&](kiln::DType dt) { return on_meta ? meta(dt) : of(dt); };
    EXPECT_KILN_ERROR(kiln::neg(make(kiln::kBool)), "[neg] expected a non-bool tensor");
    EXPECT_KILN_ERROR(kiln::abs(make(kiln::kBool)), "[abs] expected a dtype among");
    EXPECT_KILN_ERROR(kiln::relu(make(kiln::kBool)), "[relu] expected a non-bool input");
    EXPECT_KILN_ERROR(kiln::floor(make(kiln::kBool)), "[floor]");
    EXPECT_KILN_ERROR(kiln::frac(make(kiln::kInt64)), "[frac] expected a dtype among");
    EXPECT_KILN_ERROR(kiln::round(make(kiln::kInt32), 2), "[round.decimals]");
    EXPECT_KILN_ERROR(kiln::bitwise_not(make(kiln::kFloat32)), "[bitwise_not]");
    EXPECT_KILN_ERROR(kiln::silu(make(kiln::kInt64)), "[silu]");
    EXPECT_KILN_ERROR(kiln::gelu(make(kiln::kInt64)), "[gelu]");
    EXPECT_KILN_ERROR(kiln::softplus(make(kiln::kInt64)), "[softplus]");
    for (kiln::DType dt : {kiln::kInt64, kiln::kInt32, kiln::kUInt8, kiln::kBool}) {
      EXPECT_KILN_ERROR(kiln::leaky_relu(make(dt)), "[leaky_relu] expected a dtype among");
      EXPECT_KILN_ERROR(kiln::elu(make(dt)), "[elu] expected a dtype among");
      EXPECT_KILN_ERROR(kiln::hardsigmoid(make(dt)), "[hardsigmoid] expected a dtype among");
      EXPECT_KILN_ERROR(kiln::hardswish(make(dt)), "[hardswish] expected a dtype among");
      EXPECT_KILN_ERROR(kiln::mish(make(dt)), "[mish] expected a dtype among");
      EXPECT_KILN_ERROR(kiln::log_sigmoid(make(dt)), "[log_sigmoid] expected a dtype among");
    }
    Tensor t = make(kiln::kInt32);
    EXPECT_KILN_ERROR(kiln::leaky_relu_(t), "[leaky_relu_] expected a dtype among");
    EXPECT_KILN_ERROR(
        kiln::call_op("elu.out", {make(kiln::kFloat32)}, {{"out", make(kiln::kFloat64)}}),
        "[elu.out]");
    EXPECT_KILN_ERROR(kiln::hardtanh(make(kiln::kBool)),
                      "[hardtanh] expected a non-bool self, got bool");
    EXPECT_KILN_ERROR(
        kiln::hardtanh(make(kiln::kUInt8)),
        "[hardtanh] expected min_val and max_val >= 0 for a uint8 self, got -1 and 1");
    EXPECT_KILN_ERROR(kiln::hardtanh(make(kiln::kInt32), NAN, 1),
                      "[hardtanh] expected min_val to fit in int64 for an integer self");
    EXPECT_KILN_ERROR(
        kiln::call_op("hardtanh.out", {make(kiln::kFloat32)}, {{"out", make(kiln::kFloat64)}}),
        "[hardtanh.out] expected out of dtype float32 like self, got float64");
    EXPECT_KILN_ERROR(kiln::bitwise_and(make(kiln::kFloat32), make(kiln::kInt32)),
                      "[bitwise_and.Tensor]");
    EXPECT_KILN_ERROR(kiln::bitwise_xor(make(kiln::kInt32), 2.5), "[bitwise_xor.Scalar]");
    EXPECT_KILN_ERROR(kiln::remainder(make(kiln::kBool), make(kiln::kBool)), "[remainder.Tensor]");
    // A Scalar overload's error names it, not the Tensor form it runs.
    EXPECT_KILN_ERROR(kiln::call_op("remainder.Scalar", {make(kiln::kBool), kiln::Scalar(true)}),
                      "[remainder.Scalar] expected a dtype among");
    EXPECT_KILN_ERROR(kiln::call_op("fmod_.Scalar", {make(kiln::kBool), kiln::Scalar(1)}),
                      "[fmod_.Scalar]");
    EXPECT_KILN_ERROR(kiln::call_op("floor_divide.Scalar", {make(kiln::kBool), kiln::Scalar(true)}),
                      "[floor_divide.Scalar]");
    EXPECT_KILN_ERROR(kiln::call_op("bitwise_or.Scalar", {make(kiln::kFloat32), kiln::Scalar(1)}),
                      "[bitwise_or.Scalar]");
    EXPECT_KILN_ERROR(kiln::floor_divide(make(kiln::kBool), make(kiln::kBool)), "[floor_divide]");
    EXPECT_KILN_ERROR(kiln::div(make(kiln::kBool), make(kiln::kBool), "trunc"),
                      "[div.Tensor_mode]");
    EXPECT_KILN_ERROR(kiln::pow(make(kiln::kBool), make(kiln::kBool)), "[pow.Tensor_Tensor]");
    EXPECT_KILN_ERROR(kiln::lerp(make(kiln::kInt64), make(kiln::kInt64), 0.5), "[lerp.Scalar]");
    EXPECT_KILN_ERROR(kiln::addcmul(make(kiln::kBool), make(kiln::kBool), make(kiln::kBool)),
                      "[addcmul]");
    EXPECT_KILN_ERROR(kiln::clamp(make(kiln::kBool), std::optional<Tensor>(make(kiln::kBool)),
                                  std::optional<Tensor>(make(kiln::kBool))),
                      "[clamp.Tensor]");
  }
}

TEST(PointwiseErrors, ResultDtypeIntoTarget) {
  kiln::EagerGuard eager;  // these check the eager kernels themselves
  // A float result cannot go into an integer tensor in place or through out=.
  Tensor i = of(kiln::kInt64);
  EXPECT_KILN_ERROR(kiln::exp_(i),
                    "result type float32 can't be cast to the desired output type int64");
  EXPECT_KILN_ERROR(kiln::sigmoid_(i), "can't be cast");
  Tensor out_i = of(kiln::kInt64);
  EXPECT_KILN_ERROR(kiln::sqrt_out(out_i, f32()), "can't be cast");
  Tensor self_i = of(kiln::kInt64);
  EXPECT_KILN_ERROR(kiln::clamp_(self_i, kiln::Scalar(0.5)), "[clamp_] result type float32");
  Tensor b = of(kiln::kBool);
  EXPECT_KILN_ERROR(kiln::square_(b), "[square_]");
  // Ops whose out= must have the result's dtype.
  Tensor out_f64 = of(kiln::kFloat64);
  EXPECT_KILN_ERROR(kiln::abs_out(out_f64, f32()), "[abs.out] expected an output of dtype float32");
  EXPECT_KILN_ERROR(kiln::floor_out(out_f64, f32()), "[floor.out]");
  EXPECT_KILN_ERROR(kiln::call_op("gelu.out", {f32()}, {{"out", of(kiln::kFloat64)}}),
                    "[gelu.out]");
  EXPECT_KILN_ERROR(kiln::call_op("nan_to_num.out", {f32()}, {{"out", of(kiln::kFloat64)}}),
                    "[nan_to_num.out] expected out of dtype float32");
  EXPECT_KILN_ERROR(kiln::call_op("where.self_out", {of(kiln::kBool), f32(), f32()},
                                  {{"out", of(kiln::kFloat64)}}),
                    "[where.self_out]");
  EXPECT_KILN_ERROR(kiln::call_op("addcmul_", {f32(), of(kiln::kFloat64), f32()}), "[addcmul_]");
}

TEST(PointwiseErrors, Arguments) {
  kiln::EagerGuard eager;  // these check the eager kernels themselves
  EXPECT_KILN_ERROR(kiln::gelu(f32(), "sigmoid"),
                    "[gelu] expected approximate to be \"none\" or \"tanh\"");
  EXPECT_KILN_ERROR(kiln::div(f32(), f32(), "round"), "[div.Tensor_mode] expected rounding_mode");
  EXPECT_KILN_ERROR(kiln::clamp(f32(), std::optional<kiln::Scalar>()),
                    "expected at least one of 'min' and 'max'");
  EXPECT_KILN_ERROR(kiln::clamp(f32(), std::optional<Tensor>(), std::optional<Tensor>()),
                    "expected at least one of 'min' and 'max'");
  EXPECT_KILN_ERROR(kiln::pow(of(kiln::kInt64), -1),
                    "[pow.Tensor_Scalar] expected a non-negative exponent");
  EXPECT_KILN_ERROR(kiln::pow(of(kiln::kInt8), 300), "expected 'exponent' to fit in int8");
  EXPECT_KILN_ERROR(kiln::clamp(of(kiln::kUInt8), kiln::Scalar(0), kiln::Scalar(256)),
                    "[clamp] expected 'max' to fit in uint8");
  EXPECT_KILN_ERROR(kiln::lerp(f32(), f32(), 1e300),
                    "[lerp.Scalar] expected 'weight' to fit in float32");
  EXPECT_KILN_ERROR(kiln::lerp(f32(), of(kiln::kFloat64), 0.5),
                    "[lerp.Scalar] expected 'end' of dtype float32");
  EXPECT_KILN_ERROR(kiln::lerp(f32(), f32(), of(kiln::kFloat64)),
                    "expected 'weight' of dtype float32");
  EXPECT_KILN_ERROR(kiln::addcdiv(f32(), of(kiln::kInt64), of(kiln::kInt32)),
                    "[addcdiv] expected a floating tensor1 or tensor2");
  EXPECT_KILN_ERROR(kiln::addcmul(of(kiln::kInt8), of(kiln::kInt8), of(kiln::kInt8), 1000),
                    "expected 'value' to fit in int8");
  EXPECT_KILN_ERROR(kiln::where(of(kiln::kInt64), f32(), f32()),
                    "[where.self] expected a bool condition, got int64");
  EXPECT_KILN_ERROR(kiln::where(f32(), f32(), f32()), "expected a bool condition, got float32");
}

// max(a, b), min(a, b) and hardtanh forward to maximum, minimum and clamp:
// errors name the op called (Note [Composite ops name themselves]).
TEST(PointwiseErrors, AliasesNameThemselves) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    EXPECT_KILN_ERROR(kiln::max(f32({3}), f32({4})),
                      "[max.other] cannot broadcast sizes [3] and [4] at dim 0");
    EXPECT_KILN_ERROR(kiln::min(f32({3}), f32({4})), "[min.other] cannot broadcast");
    Tensor out = kiln::ones({1}).expand({3});
    EXPECT_KILN_ERROR(kiln::call_op("max.out", {f32({3}), f32({3})}, {{"out", out}}),
                      "[max.out] expected an output whose elements do not share memory");
    Tensor expanded = kiln::ones({1}).expand({3});
    EXPECT_KILN_ERROR(kiln::hardtanh_(expanded),
                      "[hardtanh_] expected an output whose elements do not share memory");
    EXPECT_KILN_ERROR(kiln::call_op("hardtanh.out", {f32({3})}, {{"out", out}}), "[hardtanh.out]");
  }
}

TEST(PointwiseErrors, Shapes) {
  kiln::EagerGuard eager;  // these check the eager kernels themselves
  Tensor small = f32({4});
  Tensor expanded = small.expand({3, 4});
  EXPECT_KILN_ERROR(kiln::exp_(expanded), "elements do not share memory");
  Tensor out = kiln::ones({1}).expand({3});
  EXPECT_KILN_ERROR(kiln::exp_out(out, f32()), "elements do not share memory");
  EXPECT_KILN_ERROR(kiln::maximum_(small, f32({3, 4})), "doesn't match the broadcast shape");
  EXPECT_KILN_ERROR(kiln::atan2(f32({3, 4}), f32({5})), "cannot broadcast");
  EXPECT_KILN_ERROR(
      kiln::where(kiln::ones({3, 4}, TensorOptions(kiln::kBool)), f32({3, 4}), f32({5})),
      "cannot broadcast");
  EXPECT_KILN_ERROR(kiln::call_op("clamp_.Tensor", {f32({4}), f32({2, 4})}), "doesn't match");
  EXPECT_KILN_ERROR(
      kiln::call_op("where.self_out",
                    {kiln::ones({2, 4}, TensorOptions(kiln::kBool)), f32({4}), f32({4})},
                    {{"out", kiln::ones({1}).expand({2, 4})}}),
      "elements do not share memory");
}

TEST(PointwiseErrors, OutputPartlyOverlapsAnInput) {
  kiln::EagerGuard eager;  // these check the eager kernels themselves
  // As PyTorch: an output may be an input, or share no memory with it.
  Tensor base = kiln::testing::random_tensor({10}, kiln::kFloat32, "contiguous", 1);
  Tensor out = base.narrow(0, 0, 9);
  EXPECT_KILN_ERROR(kiln::exp_out(out, base.narrow(0, 1, 9)), "partly overlaps input 0");
  Tensor sq = kiln::testing::random_tensor({3, 3}, kiln::kFloat32, "contiguous", 2);
  EXPECT_KILN_ERROR(kiln::atan2_(sq, sq.t()), "partly overlaps input 1");
  EXPECT_NO_THROW(kiln::where(kiln::gt(sq, 2.0), sq, sq.t()));  // inputs may overlap each other
  Tensor same = sq;
  EXPECT_NO_THROW(kiln::maximum_(same, sq));
  EXPECT_NO_THROW(kiln::exp_out(out, base.narrow(0, 0, 9)));
}

TEST(PointwiseErrors, IntegerDivisionByZero) {
  kiln::EagerGuard eager;  // these check the eager kernels themselves
  Tensor a = kiln::tensor<int64_t>({5, 6, 7});
  Tensor z = kiln::tensor<int64_t>({1, 0, 2});
  EXPECT_KILN_ERROR(kiln::div(a, z, "trunc"), "ZeroDivisionError");
  EXPECT_KILN_ERROR(kiln::div(a, z, "floor"), "ZeroDivisionError");
  EXPECT_KILN_ERROR(kiln::floor_divide(a, 0), "ZeroDivisionError");
  EXPECT_KILN_ERROR(kiln::remainder(a, z), "ZeroDivisionError");
  EXPECT_KILN_ERROR(kiln::fmod(a.to(kiln::kUInt8), z.to(kiln::kUInt8)), "ZeroDivisionError");
  // Floating division by zero is IEEE's, not an error.
  EXPECT_EQ(kiln::isnan(kiln::fmod(a.to(kiln::kFloat32), z.to(kiln::kFloat32))).tolist<bool>(),
            (std::vector<bool>{false, true, false}));
  // In place or into out=, a zero divisor anywhere leaves the target as it
  // was: nothing is half-written.
  const std::vector<int64_t> start{10, 11, 12, 13};
  const Tensor zero_third = kiln::tensor<int64_t>({3, 3, 0, 3});
  for (const auto& op : std::vector<std::function<void(Tensor&)>>{
           [&](Tensor& t) { kiln::remainder_(t, zero_third); },
           [&](Tensor& t) { kiln::fmod_(t, zero_third); },
           [&](Tensor& t) { kiln::floor_divide_(t, zero_third); },
           [&](Tensor& t) { kiln::div_(t, zero_third, "trunc"); },
           [&](Tensor& t) { kiln::remainder_out(t, kiln::tensor(start, {4}), zero_third); },
       }) {
    Tensor t = kiln::tensor(start, {4});
    EXPECT_KILN_ERROR(op(t), "expected nonzero integer divisors, got a zero (ZeroDivisionError)");
    EXPECT_EQ(t.tolist<int64_t>(), start);
  }
}

TEST(PointwiseErrors, Dropout) {
  for (bool train : {false, true}) {
    for (double p : {-0.1, 1.5, static_cast<double>(NAN)}) {
      EXPECT_KILN_ERROR(kiln::dropout(f32(), p, train), "[dropout] expected p in [0, 1], got");
    }
  }
  EXPECT_KILN_ERROR(kiln::dropout(of(kiln::kInt64), 0.5, true),
                    "[dropout] expected a floating input when train is true and p is in (0, 1), "
                    "got int64");
  // Not training, or dropping everything, any dtype passes (as PyTorch).
  EXPECT_NO_THROW(kiln::dropout(of(kiln::kInt64), 0.5, false));
  EXPECT_NO_THROW(kiln::dropout(of(kiln::kInt64), 1.0, true));
}

}  // namespace
