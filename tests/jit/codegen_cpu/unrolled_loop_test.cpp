// The fused CPU kernel's loop (Note [Unrolled body] in pointwise_cpu.cpp):
// lengths around the unrolled step (4 vectors), the one-vector loop and the
// masked tail, with float32/float16/bfloat16 operands (per-copy byte offsets
// differ by dtype), broadcast and strided inputs and several outputs, run
// lazily (fused) and compared with eager kernels.

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "jit/codegen_cpu/emitter.h"
#include "jit/codegen_cpu/launch_cpu.h"
#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

struct Outputs {
  Tensor y, z, w;
};

// chain16's steps plus a second and third output (one stored as float16).
Outputs program(const Tensor& a, const Tensor& b, const Tensor& c) {
  Tensor x = a;
  for (int i = 0; i < 2; ++i) {
    x = x * 1.0001 + b;
    x = kiln::sigmoid(x);
    x = x - 0.25;
    x = kiln::tanh(x);
  }
  Tensor z = x * c + a;
  Tensor w = kiln::tanh(z * 3.0).to(kiln::kFloat16);
  return {x, z, w};
}

kiln::testing::Tolerance tolerance(kiln::DType t) {
  // Eager rounds every op's result to its dtype; fused kernels keep float32.
  if (t == kiln::kBFloat16) return {1e-1, 1e-1};
  if (t == kiln::kFloat16) return {3e-2, 3e-2};
  return {2e-5, 2e-5};
}

TEST(CpuUnrolledLoop, LengthsAroundTheUnrolledStep) {
  const int64_t lengths[] = {1, 15, 16, 17, 63, 64, 65, 79, 80, 127, 128, 129, 1000, 4099};
  const kiln::DType dtypes[] = {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16};
  int64_t compiled_before = kiln::jit::cpu::cpu_kernels_compiled();
  uint64_t seed = 1;
  for (int64_t n : lengths) {
    for (kiln::DType dt : dtypes) {
      for (bool wide : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " dtype=" << dt << " wide=" << wide);
        // wide: [3, n] with a broadcast row and a transposed operand; else [n]
        // with a broadcast scalar.
        std::vector<int64_t> shape = wide ? std::vector<int64_t>{3, n} : std::vector<int64_t>{n};
        std::vector<int64_t> bshape = wide ? std::vector<int64_t>{1, n} : std::vector<int64_t>{1};
        Tensor a, b, c;
        {
          kiln::EagerGuard g;
          a = kiln::testing::random_tensor(shape, dt, "contiguous", seed++, -4, 4);
          b = kiln::testing::random_tensor(bshape, kiln::kFloat32, "contiguous", seed++, -1, 1);
          c = kiln::testing::random_tensor(shape, kiln::kFloat32, wide ? "transposed" : "offset",
                                           seed++, -2, 2);
        }
        Outputs eager;
        {
          kiln::EagerGuard g;
          eager = program(a, b, c);
        }
        Outputs lazy = program(a, b, c);
        kiln::sync();
        auto tol = tolerance(dt);
        std::string m = kiln::testing::compare(lazy.y, eager.y, tol);
        EXPECT_TRUE(m.empty()) << "y: " << m;
        m = kiln::testing::compare(lazy.z, eager.z, tol);
        EXPECT_TRUE(m.empty()) << "z: " << m;
        m = kiln::testing::compare(lazy.w, eager.w, tolerance(kiln::kFloat16));
        EXPECT_TRUE(m.empty()) << "w: " << m;
      }
    }
  }
  // The programs went through generated kernels.
  EXPECT_GT(kiln::jit::cpu::cpu_kernels_compiled(), compiled_before);
}

// Special values through the unrolled copies: each lane must see its own input.
TEST(CpuUnrolledLoop, SpecialValuesPerLane) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v;
  const float specials[] = {0.0f, -0.0f, inf, -inf, nan, 1e-40f, -1e-40f, 100.0f, -100.0f, 7.5f};
  for (int i = 0; i < 200; ++i) v.push_back(specials[i % 10] + (i % 10 >= 7 ? 0.01f * i : 0.0f));
  Tensor x;
  {
    kiln::EagerGuard g;
    x = kiln::from_blob(v.data(), {static_cast<int64_t>(v.size())}, kiln::kFloat32).clone();
  }
  auto f = [](const Tensor& t) { return kiln::tanh(kiln::sigmoid(t) * 2.0) + kiln::tanh(t); };
  Tensor want;
  {
    kiln::EagerGuard g;
    want = f(x);
  }
  Tensor got = f(x);
  kiln::sync();
  EXPECT_TENSOR_CLOSE_TOL(got, want, 2e-5, 2e-6);
}

}  // namespace

namespace {

// Note [Spilled values]: 40 values live at once (each sin(x * c) is kept until
// the sums at the end) need more vector registers than AVX2's 16 or
// AVX-512's 32; the kernel spills instead of refusing the group, and gives
// the eager result on each ISA the CPU has.
TEST(CpuUnrolledLoop, ValuesPastTheRegisterFileSpill) {
  for (kiln::jit::cpu::Isa isa : {kiln::jit::cpu::Isa::kAvx2, kiln::jit::cpu::Isa::kAvx512}) {
    if (!kiln::jit::cpu::isa_supported(isa)) continue;
    kiln::testing::IsaScope scope(kiln::jit::cpu::isa_name(isa));
    SCOPED_TRACE(kiln::jit::cpu::isa_name(isa));
    for (int64_t n : {5, 64, 1000}) {
      Tensor x = kiln::testing::random_tensor({n}, kiln::kFloat32, "contiguous", 77 + n, -2, 2);
      auto body = [&] {
        std::vector<Tensor> v;
        for (int i = 0; i < 40; ++i) v.push_back(kiln::sin(x * (0.5 + 0.05 * i)));
        Tensor sum = v.back();
        for (int i = 38; i >= 0; --i) sum = sum + v[static_cast<size_t>(i)] * (1.0 + i);
        return sum;
      };
      Tensor want;
      {
        kiln::EagerGuard eager;
        want = body();
      }
      const int64_t refused = kiln::jit::cpu::cpu_pointwise_groups_refused();
      const int64_t runs = kiln::jit::cpu::cpu_pointwise_groups_run();
      Tensor got = body();
      kiln::sync();
      EXPECT_EQ(kiln::jit::cpu::cpu_pointwise_groups_refused(), refused);
      EXPECT_GT(kiln::jit::cpu::cpu_pointwise_groups_run(), runs) << "no fused kernel ran";
      const std::string msg = kiln::testing::compare(got, want, {1e-4, 1e-4});
      EXPECT_TRUE(msg.empty()) << "n=" << n << ": " << msg;
    }
  }
}

}  // namespace
