// Note [Numbers as kernel arguments]: a number a program passes to an op is a
// kernel argument, so a new value compiles no new kernel, and the fused result
// still matches the eager kernels at every value.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "jit/codegen_cpu/launch_cpu.h"
#include "jit/ir/kernel_ir.h"
#include "jit/record/decompose.h"
#include "kiln/kiln.h"
#include "tests/support/number_programs.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::jit::KernelBuilder;
using kiln::jit::PointwiseKernel;
using kiln::jit::Prim;

// x * a + b over float32 loads, a and b Params or Consts.
PointwiseKernel axpb(double a, double b, bool params) {
  KernelBuilder k;
  int32_t x = k.load(0, kiln::kFloat32);
  int32_t va = params ? k.param(a, kiln::kFloat32) : k.constant(a, kiln::kFloat32);
  int32_t vb = params ? k.param(b, kiln::kFloat32) : k.constant(b, kiln::kFloat32);
  int32_t y = k.op(Prim::Add, kiln::kFloat32, k.op(Prim::Mul, kiln::kFloat32, x, va), vb);
  PointwiseKernel out = k.kernel();
  out.inputs = {kiln::kFloat32};
  out.outputs = {kiln::kFloat32};
  out.stores = {y};
  out.compact();
  return out;
}

TEST(NumberArgs, ParamValuesStayOutOfTheKeyAndConstValuesDoNot) {
  PointwiseKernel p1 = axpb(1.5, -2, true), p2 = axpb(0.25, 7, true);
  EXPECT_EQ(p1.key(), p2.key());
  EXPECT_EQ(p1.hash(), p2.hash());
  EXPECT_EQ(p1.param_count(), 2);
  PointwiseKernel c1 = axpb(1.5, -2, false), c2 = axpb(0.25, 7, false);
  EXPECT_NE(c1.key(), c2.key());
  EXPECT_NE(c1.hash(), c2.hash());
  EXPECT_EQ(c1.param_count(), 0);
  EXPECT_NE(p1.key(), c1.key());
}

TEST(NumberArgs, ConversionsOfAParamGiveAParamOfTheConvertedValue) {
  KernelBuilder k;
  int32_t p = k.param(1.0 / 3.0, kiln::kFloat64);
  int32_t f = k.cast(p, kiln::kFloat32);
  EXPECT_EQ(k.kernel().body[f].op, Prim::Param);
  EXPECT_EQ(k.kernel().body[f].imm, static_cast<double>(static_cast<float>(1.0 / 3.0)));
  int32_t h = k.round_to(f, kiln::kFloat16);
  EXPECT_EQ(k.kernel().body[h].op, Prim::Param);
  EXPECT_EQ(k.kernel().body[h].imm, static_cast<double>(static_cast<float>(kiln::Half(1.0f / 3))));
  int32_t b = k.cast(k.param(-0.0, kiln::kFloat32), kiln::kBool);
  EXPECT_EQ(k.kernel().body[b].op, Prim::Param);
  EXPECT_EQ(k.kernel().body[b].imm, 0.0);
  // Compacting numbers the live Params in order.
  PointwiseKernel out = k.kernel();
  out.inputs = {};
  out.outputs = {kiln::kFloat16, kiln::kBool};
  out.stores = {h, b};
  out.compact();
  ASSERT_EQ(out.param_count(), 2);
  int expect = 0;
  for (const auto& in : out.body) {
    if (in.op != Prim::Param) continue;
    EXPECT_EQ(in.operand, expect++);
  }
}

// Past kMaxParams numbers, a kernel takes the rest as Consts; the results
// are the same.
TEST(NumberArgs, NumbersPastTheLimitAreConsts) {
  KernelBuilder k;
  for (int i = 0; i < kiln::jit::kMaxParams + 8; ++i) (void)k.param(i, kiln::kFloat32);
  EXPECT_EQ(k.kernel().param_count(), kiln::jit::kMaxParams);
  EXPECT_EQ(k.kernel().body.back().op, Prim::Const);
  Tensor x = kiln::testing::random_tensor({9, 33}, kiln::kFloat32, "transposed", 51);
  auto f = [&] {
    Tensor y = x;
    for (int i = 0; i < kiln::jit::kMaxParams + 8; ++i) y = y * (1.0 + 0.001 * i) - 0.0005 * i;
    return y;
  };
  Tensor expected;
  {
    kiln::EagerGuard eager;
    expected = f();
  }
  Tensor got = f().contiguous();
  kiln::sync();
  EXPECT_TRUE(kiln::testing::compare(got, expected).empty())
      << kiln::testing::compare(got, expected);
}

// Runs f(s) lazily for each value in `values`: each matches f(s) run
// eagerly, and no value after the first compiles a CPU kernel.
void expect_no_kernel_per_value(const std::function<Tensor(double)>& f,
                                const std::vector<double>& values, const char* what) {
  int64_t warm = -1;
  for (double s : values) {
    Tensor expected;
    {
      kiln::EagerGuard eager;
      expected = f(s);
    }
    Tensor got = f(s);
    EXPECT_TRUE(got.is_pending());
    got = got.contiguous();
    kiln::sync();
    const std::string msg = kiln::testing::compare(got, expected);
    EXPECT_TRUE(msg.empty()) << what << " s=" << s << ": " << msg;
    if (warm < 0) {
      warm = kiln::jit::cpu::cpu_kernels_compiled();
    } else {
      EXPECT_EQ(kiln::jit::cpu::cpu_kernels_compiled(), warm)
          << what << ": s=" << s << " compiled a kernel of its own";
    }
  }
}

TEST(NumberArgs, ANewNumberCompilesNoCpuKernelAndMatchesEager) {
  std::vector<double> values;
  for (int i = 0; i < 12; ++i) values.push_back(0.1 + 0.03 * i);
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16}) {
    Tensor x = kiln::testing::random_tensor({37, 29}, dt, "transposed", 11);
    Tensor y = kiln::testing::random_tensor({37, 29}, dt, "strided", 12);
    Tensor mask =
        kiln::gt(kiln::testing::random_tensor({29}, kiln::kFloat32, "contiguous", 13), 1.0);
    expect_no_kernel_per_value(
        [&](double s) { return kiln::testing::numbers_program(x, y, mask, s); }, values,
        kiln::dtype_name(dt));
  }
}

TEST(NumberArgs, ANewNumberInAReductionCompilesNoCpuKernel) {
  std::vector<double> values;
  for (int i = 0; i < 10; ++i) values.push_back(0.7 + 0.11 * i);
  for (kiln::DType dt : {kiln::kFloat32, kiln::kBFloat16}) {
    Tensor x = kiln::testing::random_tensor({23, 67}, dt, "transposed", 41);
    Tensor w = kiln::testing::random_tensor({67}, dt, "contiguous", 42);
    expect_no_kernel_per_value([&](double s) { return kiln::testing::number_reductions(x, w, s); },
                               values, kiln::dtype_name(dt));
  }
}

// The values a kernel argument carries exactly as a Const did: signed zeros,
// infinities, NaN, subnormals, the edge of float32, numbers a 16-bit type
// rounds to zero or infinity (the CPU's eager kernels round the number to the
// result's 16-bit type first).
TEST(NumberArgs, SpecialNumbersMatchEager) {
  const double inf = std::numeric_limits<double>::infinity();
  const double values[] = {-0.0, 0.0, inf, -inf, std::nan(""), 1e-40, 3.4e38, 1e300, 1e-8, 7e4};
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16}) {
    Tensor x = kiln::testing::random_tensor({5, 19}, dt, "transposed", 21);
    Tensor mask =
        kiln::gt(kiln::testing::random_tensor({19}, kiln::kFloat32, "contiguous", 22), 0.0);
    for (double s : values) {
      // A fill or bound past the dtype's range raises (as PyTorch): those take 1.
      const double fill = std::isfinite(s) && std::abs(s) > 6e4 ? 1.0 : s;
      auto f = [&] {
        Tensor a = kiln::masked_fill(kiln::exp(x * s) - s, mask, fill);
        return kiln::clamp(a * 0.5, kiln::Scalar(-fill));
      };
      Tensor expected;
      {
        kiln::EagerGuard eager;
        expected = f();
      }
      Tensor got = f().contiguous();
      kiln::sync();
      const std::string msg = kiln::testing::compare(got, expected);
      EXPECT_TRUE(msg.empty()) << kiln::dtype_name(dt) << " s=" << s << ": " << msg;
    }
  }
}

}  // namespace
