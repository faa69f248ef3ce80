// Pointwise kernels: what the PyTorch oracle cannot express.
//   - Meta parity: every pointwise op, called through its schema with meta
//     twins of CPU inputs, gives outputs of the CPU result's sizes, strides
//     and dtype, and raises exactly when the CPU kernel raises (value-
//     dependent errors aside);
//   - integer edge cases PyTorch itself crashes on (INT_MIN / -1);
//   - the parallel and broadcast-scalar loop paths against the serial ones;
//   - errors thrown inside parallel loops reach the caller.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kiln/dispatch.h"
#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::DType;
using kiln::IValue;
using kiln::Stack;
using kiln::Tensor;
using kiln::testing::random_tensor;
using Kwargs = std::vector<std::pair<std::string, IValue>>;

Tensor meta_twin(const Tensor& t) {
  if (!t.defined() || t.impl()->is_wrapped_number()) return t;
  return kiln::empty_strided(t.sizes(), t.strides(),
                             kiln::TensorOptions(t.dtype()).device(kiln::Device::meta()));
}

IValue twin(const IValue& v) {
  return v.is_tensor() ? IValue(meta_twin(v.to_tensor())) : v;
}

struct Outcome {
  bool raised = false;
  std::string error;
  std::vector<Tensor> tensors;  // results, then the arguments (out= tensors resized)
};

Outcome run(const std::string& op, const Stack& args, const Kwargs& kwargs) {
  Outcome o;
  try {
    Stack out = kiln::call_op(op, args, kwargs);
    for (const IValue& v : out) {
      if (v.is_tensor()) o.tensors.push_back(v.to_tensor());
    }
    for (const IValue& v : args) {
      if (v.is_tensor()) o.tensors.push_back(v.to_tensor());
    }
    for (const auto& kv : kwargs) {
      if (kv.second.is_tensor()) o.tensors.push_back(kv.second.to_tensor());
    }
  } catch (const kiln::Error& e) {
    o.raised = true;
    o.error = e.what();
  }
  return o;
}

std::string describe(const Tensor& t) {
  std::ostringstream os;
  os << t.sizes() << " strides " << t.strides() << " " << t.dtype();
  return os.str();
}

// Runs `op` on CPU inputs and on their meta twins and compares the outcomes.
void expect_meta_matches_cpu(const std::string& op, const Stack& args, const Kwargs& kwargs = {}) {
  Stack margs;
  for (const IValue& v : args) margs.push_back(twin(v));
  Kwargs mkwargs;
  for (const auto& kv : kwargs) mkwargs.emplace_back(kv.first, twin(kv.second));
  Outcome cpu = run(op, args, kwargs);
  Outcome meta = run(op, margs, mkwargs);
  if (cpu.raised && cpu.error.find("ZeroDivisionError") != std::string::npos) return;
  std::string where = op + " on " +
                      (args.empty() || !args[0].is_tensor() ? std::string("scalar")
                                                            : describe(args[0].to_tensor()));
  ASSERT_EQ(cpu.raised, meta.raised)
      << where << ": cpu " << (cpu.raised ? "raised " + cpu.error : "returned") << ", meta "
      << (meta.raised ? "raised " + meta.error : "returned");
  if (cpu.raised) return;
  ASSERT_EQ(cpu.tensors.size(), meta.tensors.size()) << where;
  for (size_t i = 0; i < cpu.tensors.size(); ++i) {
    const Tensor& c = cpu.tensors[i];
    const Tensor& m = meta.tensors[i];
    if (c.impl()->is_wrapped_number()) continue;
    EXPECT_TRUE(m.is_meta() || m.impl()->is_wrapped_number()) << where << " tensor " << i;
    EXPECT_EQ(describe(c), describe(m)) << where << " tensor " << i;
  }
}

const DType kDtypes[] = {kiln::kFloat32, kiln::kFloat64, kiln::kFloat16, kiln::kBFloat16,
                         kiln::kInt64,   kiln::kInt32,   kiln::kUInt8,   kiln::kBool};
const char* const kLayouts[] = {"contiguous", "transposed", "strided", "offset", "expanded"};

const char* const kUnary[] = {
    "neg",   "abs",   "sign",    "exp",   "exp2",  "expm1",       "log",
    "log2",  "log10", "log1p",   "sqrt",  "rsqrt", "reciprocal",  "square",
    "sin",   "cos",   "tan",     "asin",  "acos",  "atan",        "sinh",
    "cosh",  "tanh",  "sigmoid", "relu",  "silu",  "erf",         "erfc",
    "floor", "ceil",  "round",   "trunc", "frac",  "logical_not", "bitwise_not"};

TEST(PointwiseMeta, UnaryForms) {
  kiln::EagerGuard eager;  // these check the eager kernels themselves
  uint64_t seed = 1;
  for (const char* name : kUnary) {
    const std::string op = name;
    for (DType dt : kDtypes) {
      for (const char* layout : kLayouts) {
        Tensor x = random_tensor({3, 4}, dt, layout, seed++);
        expect_meta_matches_cpu(op, {x});
        if (std::string(layout) != "expanded") expect_meta_matches_cpu(op + "_", {x.clone()});
        for (DType out_dt : {dt, kiln::kFloat64, kiln::kInt64}) {
          Tensor out = random_tensor({4, 3}, out_dt, "transposed", seed++).t();
          expect_meta_matches_cpu(op + ".out", {x}, {{"out", out}});
          Tensor resized = kiln::empty({0}, kiln::TensorOptions(out_dt));
          expect_meta_matches_cpu(op + ".out", {x}, {{"out", resized}});
        }
      }
    }
  }
}

TEST(PointwiseMeta, UnaryWithArguments) {
  kiln::EagerGuard eager;  // these check the eager kernels themselves
  uint64_t seed = 100;
  for (DType dt : kDtypes) {
    for (const char* layout : kLayouts) {
      Tensor x = random_tensor({2, 3, 4}, dt, layout, seed++);
      expect_meta_matches_cpu("round.decimals", {x}, {{"decimals", int64_t{2}}});
      for (const char* op : {"isnan", "isinf", "isfinite"}) expect_meta_matches_cpu(op, {x});
      expect_meta_matches_cpu("gelu", {x}, {{"approximate", "tanh"}});
      expect_meta_matches_cpu("gelu", {x}, {{"approximate", "sigmoid"}});
      expect_meta_matches_cpu("softplus", {x, IValue(2.0), IValue(int64_t{1})});
      expect_meta_matches_cpu("softplus", {x, IValue(1e300), IValue(int64_t{1})});
      expect_meta_matches_cpu("nan_to_num", {x, IValue(1.0), IValue(), IValue(-5.0)});
      expect_meta_matches_cpu("nan_to_num.out", {x},
                              {{"out", kiln::empty({0}, kiln::TensorOptions(dt))}});
      expect_meta_matches_cpu("nan_to_num.out", {x},
                              {{"out", kiln::empty({0}, kiln::TensorOptions(kiln::kFloat64))}});
      expect_meta_matches_cpu("clamp", {x, IValue(int64_t{-1}), IValue(2.5)});
      expect_meta_matches_cpu("clamp", {x, IValue(), IValue(int64_t{300})});
      expect_meta_matches_cpu("clamp", {x, IValue(), IValue()});
      Tensor lo = random_tensor({3, 1}, dt, "contiguous", seed++);
      expect_meta_matches_cpu("clamp.Tensor", {x, lo, IValue()});
      expect_meta_matches_cpu("clamp.Tensor", {x, lo, random_tensor({4}, dt, layout, seed++)});
      expect_meta_matches_cpu("clamp.out", {x, IValue(int64_t{0}), IValue(int64_t{1})},
                              {{"out", kiln::empty({0}, kiln::TensorOptions(kiln::kFloat32))}});
    }
  }
}

TEST(PointwiseMeta, BinaryForms) {
  kiln::EagerGuard eager;  // these check the eager kernels themselves
  const char* const tensor_overloads[] = {"remainder", "fmod", "bitwise_and", "bitwise_or",
                                          "bitwise_xor"};
  const char* const plain[] = {"atan2",       "maximum",    "minimum",
                               "logical_and", "logical_or", "logical_xor"};
  uint64_t seed = 1000;
  const std::pair<std::vector<int64_t>, std::vector<int64_t>> shapes[] = {
      {{3, 4}, {3, 4}}, {{2, 3, 4}, {4}}, {{3, 1}, {1, 5}}, {{}, {2, 3}}, {{0, 3}, {3}}};
  for (DType da : kDtypes) {
    for (DType db : {da, kiln::kFloat32, kiln::kInt64}) {
      for (const auto& [sa, sb] : shapes) {
        Tensor a = random_tensor(sa, da, kLayouts[seed % 5], seed);
        Tensor b = random_tensor(sb, db, kLayouts[(seed + 1) % 5], seed + 1);
        seed += 2;
        for (const char* n : tensor_overloads) {
          const std::string op = n;
          expect_meta_matches_cpu(op + ".Tensor", {a, b});
          expect_meta_matches_cpu(op + ".Scalar", {a, IValue(int64_t{3})});
          expect_meta_matches_cpu(op + "_.Tensor", {a.clone(), b});
          expect_meta_matches_cpu(op + ".Tensor_out", {a, b},
                                  {{"out", kiln::empty({0}, kiln::TensorOptions(db))}});
        }
        for (const char* n : plain) {
          const std::string op = n;
          expect_meta_matches_cpu(op, {a, b});
          expect_meta_matches_cpu(op + "_", {a.clone(), b});
          expect_meta_matches_cpu(op + ".out", {a, b},
                                  {{"out", kiln::empty({0}, kiln::TensorOptions(da))}});
        }
        for (const char* mode : {"trunc", "floor"}) {
          expect_meta_matches_cpu("div.Tensor_mode", {a, b}, {{"rounding_mode", mode}});
          expect_meta_matches_cpu("div.out_mode", {a, b},
                                  {{"rounding_mode", mode},
                                   {"out", kiln::empty({0}, kiln::TensorOptions(kiln::kInt64))}});
        }
        expect_meta_matches_cpu("div.Tensor_mode", {a, b}, {{"rounding_mode", IValue()}});
        expect_meta_matches_cpu("floor_divide", {a, b});
        expect_meta_matches_cpu("pow.Tensor_Tensor", {a, b});
        expect_meta_matches_cpu("pow.Tensor_Scalar", {a, IValue(2.5)});
        expect_meta_matches_cpu("pow.Tensor_Scalar", {a, IValue(int64_t{-2})});
        expect_meta_matches_cpu("pow.Tensor_Scalar", {a, IValue(int64_t{0})});
        expect_meta_matches_cpu("pow.Scalar", {IValue(2.0), b});
        expect_meta_matches_cpu("pow_.Scalar", {a.clone(), IValue(int64_t{3})});
        expect_meta_matches_cpu("pow.Tensor_Tensor_out", {a, b},
                                {{"out", kiln::empty({1}, kiln::TensorOptions(kiln::kFloat64))}});
      }
    }
  }
}

TEST(PointwiseMeta, TernaryForms) {
  kiln::EagerGuard eager;  // these check the eager kernels themselves
  uint64_t seed = 5000;
  const std::vector<std::vector<int64_t>> shapes[] = {
      {{3, 4}, {3, 4}, {3, 4}}, {{2, 3, 4}, {4}, {3, 1}}, {{3, 1}, {1, 5}, {}}, {{0, 3}, {3}, {1}}};
  for (DType dt : kDtypes) {
    for (const auto& s : shapes) {
      Tensor a = random_tensor(s[0], dt, kLayouts[seed % 5], seed);
      Tensor b = random_tensor(s[1], dt, kLayouts[(seed + 1) % 5], seed + 1);
      Tensor c = random_tensor(s[2], dt, kLayouts[(seed + 2) % 5], seed + 2);
      Tensor cond = random_tensor(s[2], kiln::kBool, "contiguous", seed + 3);
      seed += 4;
      expect_meta_matches_cpu("where.self", {cond, a, b});
      expect_meta_matches_cpu("where.self", {cond.to(kiln::kUInt8), a, c.to(kiln::kFloat64)});
      expect_meta_matches_cpu("where.self", {cond.to(kiln::kInt64), a, b});
      expect_meta_matches_cpu("where.self_out", {cond, a, b},
                              {{"out", kiln::empty({0}, kiln::TensorOptions(dt))}});
      expect_meta_matches_cpu("lerp.Scalar", {a, b, IValue(0.3)});
      expect_meta_matches_cpu("lerp.Tensor", {a, b, c});
      expect_meta_matches_cpu("lerp_.Scalar", {a.clone(), b, IValue(0.7)});
      expect_meta_matches_cpu("lerp.Scalar_out", {a, b, IValue(0.7)},
                              {{"out", kiln::empty({0}, kiln::TensorOptions(kiln::kFloat64))}});
      for (const char* op : {"addcmul", "addcdiv"}) {
        const std::string name = op;
        expect_meta_matches_cpu(name, {a, b, c}, {{"value", IValue(2.0)}});
        expect_meta_matches_cpu(name, {a, b.to(kiln::kFloat32), c});
        expect_meta_matches_cpu(name + "_", {a.clone(), b, c});
        expect_meta_matches_cpu(name + ".out", {a, b, c},
                                {{"out", kiln::empty({0}, kiln::TensorOptions(dt))}});
      }
    }
  }
}

// --- Integer edge cases -----------------------------------------------------------

template <class T>
void check_int_min_by_minus_one(DType dt) {
  const T lo = std::numeric_limits<T>::min();
  Tensor a = kiln::tensor<T>({lo, lo, T(7)}).to(dt);
  Tensor b = kiln::tensor<T>({T(-1), T(1), T(-1)}).to(dt);
  // PyTorch traps here (x86 idiv); kiln wraps as two's complement does.
  EXPECT_EQ(kiln::div(a, b, "trunc").tolist<int64_t>(), (std::vector<int64_t>{lo, lo, -7}));
  EXPECT_EQ(kiln::div(a, b, "floor").tolist<int64_t>(), (std::vector<int64_t>{lo, lo, -7}));
  EXPECT_EQ(kiln::floor_divide(a, b).tolist<int64_t>(), (std::vector<int64_t>{lo, lo, -7}));
  EXPECT_EQ(kiln::remainder(a, b).tolist<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(kiln::fmod(a, b).tolist<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(kiln::neg(a).tolist<int64_t>(), (std::vector<int64_t>{lo, lo, -7}));
  EXPECT_EQ(kiln::abs(a).tolist<int64_t>(), (std::vector<int64_t>{lo, lo, 7}));
}

TEST(PointwiseIntegers, MinDividedByMinusOneWraps) {
  check_int_min_by_minus_one<int64_t>(kiln::kInt64);
  check_int_min_by_minus_one<int32_t>(kiln::kInt32);
}

// add, sub (with alpha) and mul at the extremes of each integer type wrap in
// two's complement (Note [Integer wrap-around]); the expected values are the
// exact results reduced modulo 2^bits. Under UBSan this also proves there is no
// signed overflow, including the promotion of 8- and 16-bit operands to int.
template <class T>
void check_wrapping_arithmetic(DType dt) {
  const T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  const std::vector<T> xs = {lo, hi, T(-1), T(3), T(0), hi};
  const std::vector<T> ys = {T(-1), hi, lo, T(-3), hi, T(2)};
  const int64_t n = static_cast<int64_t>(xs.size());
  Tensor x = kiln::tensor<T>(xs, {n}), y = kiln::tensor<T>(ys, {n});
  ASSERT_EQ(x.dtype(), dt);
  auto low_bits = [](__int128 v) {
    return static_cast<int64_t>(static_cast<T>(static_cast<uint64_t>(v)));
  };
  std::vector<int64_t> add, sub, sub3, mul;
  for (size_t i = 0; i < xs.size(); ++i) {
    const __int128 a = xs[i], b = ys[i];
    add.push_back(low_bits(a + b));
    sub.push_back(low_bits(a - b));
    sub3.push_back(low_bits(a - 3 * b));
    mul.push_back(low_bits(a * b));
  }
  EXPECT_EQ(kiln::add(x, y).tolist<int64_t>(), add) << dt;
  EXPECT_EQ(kiln::sub(x, y).tolist<int64_t>(), sub) << dt;
  EXPECT_EQ(kiln::sub(x, y, 3).tolist<int64_t>(), sub3) << dt;
  EXPECT_EQ(kiln::mul(x, y).tolist<int64_t>(), mul) << dt;
}

TEST(PointwiseIntegers, AddSubMulWrapInEveryIntegerType) {
  kiln::EagerGuard eager;  // the eager kernels; fused integer code is checked against them
  check_wrapping_arithmetic<int64_t>(kiln::kInt64);
  check_wrapping_arithmetic<int32_t>(kiln::kInt32);
  check_wrapping_arithmetic<int16_t>(kiln::kInt16);
  check_wrapping_arithmetic<int8_t>(kiln::kInt8);
  check_wrapping_arithmetic<uint8_t>(kiln::kUInt8);
}

TEST(PointwiseIntegers, PowWrapsAndNegativeExponents) {
  Tensor base = kiln::tensor<int64_t>({3, -1, -1, 1, 0, 2});
  Tensor exp = kiln::tensor<int64_t>({40, -3, -4, -7, -1, 64});
  // 3^40 mod 2^64, as PyTorch's repeated squaring wraps.
  uint64_t p = 1;
  for (int i = 0; i < 40; ++i) p *= 3;
  EXPECT_EQ(kiln::pow(base, exp).tolist<int64_t>(),
            (std::vector<int64_t>{static_cast<int64_t>(p), -1, 1, 1, 0, 0}));
}

// --- Loop paths -------------------------------------------------------------------

// Computes op over `n` elements at once (parallel above the grain) and in
// 1000-element slices (serial), which must agree exactly.
template <class Op>
void expect_parallel_matches_slices(const Tensor& x, Op op) {
  Tensor whole = op(x);
  const int64_t n = x.size(0);
  for (int64_t start = 0; start < n; start += 1000) {
    const int64_t len = std::min<int64_t>(1000, n - start);
    Tensor part = op(x.narrow(0, start, len));
    EXPECT_TENSOR_CLOSE_TOL(whole.narrow(0, start, len), part, 0.0, 0.0);
  }
}

TEST(PointwiseLoops, ParallelMatchesSerial) {
  kiln::EagerGuard eager;  // these check the eager kernels themselves
  const int64_t n = 150001;
  Tensor x = random_tensor({n}, kiln::kFloat32, "contiguous", 7);
  Tensor xs = random_tensor({n}, kiln::kFloat32, "strided", 8);
  Tensor h = random_tensor({n}, kiln::kBFloat16, "contiguous", 9);
  expect_parallel_matches_slices(x, [](const Tensor& t) { return kiln::exp(t); });
  expect_parallel_matches_slices(xs, [](const Tensor& t) { return kiln::sigmoid(t); });
  expect_parallel_matches_slices(h, [](const Tensor& t) { return kiln::gelu(t, "tanh"); });
  expect_parallel_matches_slices(x, [](const Tensor& t) { return kiln::remainder(t, 0.7); });
  expect_parallel_matches_slices(
      x, [](const Tensor& t) { return kiln::where(kiln::gt(t, 0.0), t, kiln::mul(t, 0.1)); });
  expect_parallel_matches_slices(x,
                                 [](const Tensor& t) { return kiln::lerp(t, kiln::neg(t), 0.3); });
}

TEST(PointwiseLoops, BroadcastScalarPathMatchesDense) {
  kiln::EagerGuard eager;  // these check the eager kernels themselves
  // Inputs broadcast along the innermost dim take the block-copy path; the
  // same values laid out densely take the plain path.
  Tensor a = random_tensor({50, 1}, kiln::kFloat32, "contiguous", 11).expand({50, 300});
  Tensor b = random_tensor({50, 300}, kiln::kFloat32, "contiguous", 12);
  Tensor dense_a = a.contiguous();
  EXPECT_TENSOR_CLOSE_TOL(kiln::atan2(a, b), kiln::atan2(dense_a, b), 0.0, 0.0);
  EXPECT_TENSOR_CLOSE_TOL(kiln::atan2(b, a), kiln::atan2(b, dense_a), 0.0, 0.0);
  EXPECT_TENSOR_CLOSE_TOL(kiln::addcmul(b, a, a, 0.5), kiln::addcmul(b, dense_a, dense_a, 0.5), 0.0,
                          0.0);
  Tensor s = kiln::scalar_tensor(2.5);
  EXPECT_TENSOR_CLOSE_TOL(kiln::pow(b, s), kiln::pow(b, kiln::full({50, 300}, 2.5)), 0.0, 0.0);
  Tensor cond = kiln::gt(b, 0.0);
  EXPECT_TENSOR_CLOSE_TOL(kiln::where(cond, a, s),
                          kiln::where(cond, dense_a, kiln::full({50, 300}, 2.5)), 0.0, 0.0);
}

TEST(PointwiseLoops, OutMayAliasAnInput) {
  kiln::EagerGuard eager;  // these check the eager kernels themselves
  Tensor a = random_tensor({4, 33}, kiln::kFloat32, "transposed", 13);
  Tensor expected = kiln::exp(a);
  kiln::exp_out(a, a);
  EXPECT_TENSOR_CLOSE_TOL(a, expected, 0.0, 0.0);
}

TEST(PointwiseLoops, ErrorsInParallelLoopsReachTheCaller) {
  kiln::EagerGuard eager;  // these check the eager kernels themselves
  Tensor a = kiln::ones({200000}, kiln::TensorOptions(kiln::kInt64));
  Tensor b = kiln::ones({200000}, kiln::TensorOptions(kiln::kInt64));
  b.narrow(0, 123456, 1).fill_(0);
  EXPECT_KILN_ERROR(kiln::remainder(a, b), "ZeroDivisionError");
  EXPECT_KILN_ERROR(kiln::div(a, b, "floor"), "ZeroDivisionError");
}

// add/sub's alpha as PyTorch's CPU kernels take it: converted to the
// tensors' dtype first (0.3 is 0.300048828125 in float16, 0.30078125 in
// bfloat16), and for the 16-bit types alpha * other rounded to it before the
// add (float16 on every path, bfloat16's scalar loop: Note [16-bit floats in
// pointwise kernels]); eager and fused kernels alike, bit for bit.
template <class T>
void check_inexact_alpha(DType dt) {
  for (double alpha : {0.3, -1.7, 1e-3}) {
    SCOPED_TRACE(std::to_string(alpha));
    const Tensor x = random_tensor({37, 5}, dt, "strided", 11);
    const Tensor w = random_tensor({5}, dt, "contiguous", 12);
    std::vector<float> want_add, want_sub;
    const std::vector<float> xs = x.to(kiln::kFloat32).flatten().tolist<float>();
    const std::vector<float> ws = w.to(kiln::kFloat32).tolist<float>();
    const auto a = static_cast<float>(T(static_cast<float>(alpha)));
    for (size_t i = 0; i < xs.size(); ++i) {
      const float y = static_cast<float>(T(a * ws[i % ws.size()]));
      want_add.push_back(static_cast<float>(T(xs[i] + y)));
      want_sub.push_back(static_cast<float>(T(xs[i] - y)));
    }
    auto values = [](const Tensor& t) { return t.to(kiln::kFloat32).flatten().tolist<float>(); };
    for (bool lazy : {false, true}) {
      SCOPED_TRACE(lazy ? "lazy" : "eager");
      std::optional<kiln::EagerGuard> eager;
      if (!lazy) eager.emplace();
      EXPECT_EQ(values(kiln::add(x, w, alpha)), want_add);
      EXPECT_EQ(values(kiln::sub(x, w, alpha)), want_sub);
      Tensor in_place = x.clone();
      in_place.add_(w, alpha);
      EXPECT_EQ(values(in_place), want_add);
      // Fused with what follows: the same bits.
      EXPECT_EQ(values(kiln::add(x, w, alpha) * 1.0), want_add);
    }
  }
}

TEST(PointwiseLoops, InexactAlphaRoundedToTheDtypeFirst) {
  check_inexact_alpha<kiln::Half>(kiln::kFloat16);
  check_inexact_alpha<kiln::BFloat16>(kiln::kBFloat16);
  // 0.3 * 3 is 0.8984375 in bfloat16; 0.30078125 * 3 is 0.90234375.
  kiln::EagerGuard eager;
  const Tensor three = kiln::full({1}, 3.0, kiln::kBFloat16);
  EXPECT_EQ(kiln::add(kiln::zeros({1}, kiln::kBFloat16), three, 0.3).item<float>(), 0.90234375f);
}

// float32 and float64: eager and fused agree bit for bit on any alpha;
// integers refuse one that is not integral.
TEST(PointwiseLoops, InexactAlphaEagerAndFusedAgree) {
  for (DType dt : {kiln::kFloat32, kiln::kFloat64}) {
    for (double alpha : {0.3, -1.7, 1e-3}) {
      SCOPED_TRACE(std::to_string(alpha));
      const Tensor x = random_tensor({37, 5}, dt, "transposed", 13);
      const Tensor w = random_tensor({37, 5}, dt, "offset", 14);
      auto values = [](const Tensor& t) { return t.to(kiln::kFloat64).flatten().tolist<double>(); };
      std::vector<double> eager_add, eager_sub;
      {
        kiln::EagerGuard eager;
        eager_add = values(kiln::add(x, w, alpha));
        eager_sub = values(kiln::sub(x, w, alpha));
      }
      EXPECT_EQ(values(kiln::add(x, w, alpha)), eager_add) << dt;
      EXPECT_EQ(values(kiln::sub(x, w, alpha) * 1.0), eager_sub) << dt;
    }
  }
  // Integers take integral alphas only, in both modes, as PyTorch.
  for (bool lazy : {false, true}) {
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    for (DType dt : {kiln::kInt64, kiln::kInt32, kiln::kInt16, kiln::kInt8, kiln::kUInt8}) {
      const Tensor i = kiln::ones({2}, dt);
      EXPECT_KILN_ERROR(kiln::add(i, i, 0.3),
                        "[add] expected an integral alpha for integral inputs, got 0.3");
      EXPECT_KILN_ERROR(kiln::sub(i, i, -1.7),
                        "[sub] expected an integral alpha for integral inputs, got -1.7");
    }
  }
}

// PyTorch's rules, in eager and lazy mode: add/sub take a bool alpha only
// for bool results and any integral one for them; scalar_tensor is float32
// unless told; where keeps a double operand a double.
TEST(PointwiseLoops, AlphaScalarTensorAndWhereAsPyTorch) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    const Tensor t = kiln::tensor<bool>({true, false}), f = kiln::tensor<bool>({true, true});
    Tensor sum = kiln::add(t, f, 2);
    EXPECT_EQ(sum.dtype(), kiln::kBool);
    EXPECT_TENSOR_CLOSE(sum.to(kiln::kInt64), kiln::full({2}, 1, kiln::kInt64));
    // At the call in both modes, naming the inputs' dtype.
    EXPECT_KILN_ERROR(kiln::add(kiln::ones({1}), kiln::ones({1}), true),
                      "expected a bool alpha only for bool results, got True for float32");
    EXPECT_KILN_ERROR(
        kiln::add(kiln::ones({2}, kiln::kFloat16), kiln::ones({2}, kiln::kFloat16), true),
        "[add] expected a bool alpha only for bool results, got True for float16");
    EXPECT_KILN_ERROR(kiln::add(kiln::ones({1}, kiln::kInt32), kiln::ones({1}, kiln::kInt32), true),
                      "expected a bool alpha only for bool results");
    Tensor in_place = kiln::ones({3}, kiln::kInt64);
    EXPECT_KILN_ERROR(in_place.sub_(kiln::ones({3}, kiln::kInt64), 0.5),
                      "[sub_] expected an integral alpha for integral inputs, got 0.5");
    EXPECT_EQ(in_place.tolist<int64_t>(), (std::vector<int64_t>{1, 1, 1}));
    // Numbers that overflow the result's dtype are refused as PyTorch's
    // checked conversion refuses them; inf and negatives into uint8 pass.
    const Tensor h = kiln::ones({2}, kiln::kFloat16), i8 = kiln::ones({2}, kiln::kInt8);
    EXPECT_KILN_ERROR(kiln::add(h, h, 1e10), "[add] value 1e+10 cannot be converted to float16");
    EXPECT_KILN_ERROR(kiln::add(i8, i8, 1000), "[add] value 1000 cannot be converted to int8");
    EXPECT_KILN_ERROR(kiln::where(t, h, kiln::Scalar(1e10)),
                      "[where] value 1e+10 cannot be converted to float16 without overflow");
    EXPECT_KILN_ERROR(kiln::where(t, kiln::Scalar(300), i8),
                      "[where] value 300 cannot be converted to int8");
    EXPECT_EQ(kiln::where(t, i8, kiln::Scalar(2.5)).dtype(), kiln::kFloat32);
    const Tensor u8 = kiln::ones({2}, kiln::kUInt8);
    EXPECT_EQ(kiln::add(u8, u8, -1).to(kiln::kInt64).tolist<int64_t>(),
              (std::vector<int64_t>{0, 0}));
    EXPECT_EQ(kiln::where(t, u8, kiln::Scalar(-1)).to(kiln::kInt64).tolist<int64_t>(),
              (std::vector<int64_t>{1, 255}));
    EXPECT_TRUE(std::isinf(kiln::add(h, h, std::numeric_limits<double>::infinity())
                               .to(kiln::kFloat32)
                               .tolist<float>()[0]));
    EXPECT_EQ(kiln::scalar_tensor(3).dtype(), kiln::kFloat32);
    EXPECT_EQ(kiln::scalar_tensor(true).dtype(), kiln::kFloat32);
    EXPECT_EQ(kiln::scalar_tensor(3, kiln::kInt64).dtype(), kiln::kInt64);
    Tensor w = kiln::where(t, kiln::Scalar(0.1), kiln::zeros({2}, kiln::kFloat64));
    EXPECT_EQ(w.dtype(), kiln::kFloat64);
    EXPECT_EQ(w.to(kiln::Device::cpu()).tolist<double>(), (std::vector<double>{0.1, 0.0}));
    Tensor big = kiln::where(t, kiln::zeros({2}, kiln::kFloat64), kiln::Scalar(1e300));
    EXPECT_EQ(big.tolist<double>(), (std::vector<double>{0.0, 1e300}));
  }
}

}  // namespace
