// Fused CPU kernels reading inputs whose innermost dim is strided (Note
// [Strided operands] in jit/codegen_cpu/pointwise_cpu.h): transposed, sliced
// with a step and permuted inputs of every fusible dtype, at lengths around
// the vector width and the unrolled step, must run fused and match eager.

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "jit/codegen_cpu/launch_cpu.h"
#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

// A view of `dt` with sizes [rows, n] ([2, rows / 2, n] when permuted) whose
// inner dim is not dense.
Tensor strided_view(const std::string& kind, int64_t rows, int64_t n, kiln::DType dt,
                    uint64_t seed) {
  kiln::EagerGuard g;
  if (kind == "transposed") {
    return kiln::testing::random_tensor({n, rows}, dt, "contiguous", seed).t();
  }
  if (kind == "step2") {
    return kiln::testing::random_tensor({rows, 2 * n}, dt, "contiguous", seed)
        .slice(1, 0, 2 * n, 2);
  }
  if (kind == "step3_offset") {  // starts at element 1, ends on the storage's last element
    return kiln::testing::random_tensor({rows, 3 * n}, dt, "contiguous", seed)
        .slice(1, 2, 3 * n, 3);
  }
  // permuted: [n, rows / 2, 2] -> [2, rows / 2, n], no two dims merge
  Tensor base = kiln::testing::random_tensor({n, rows / 2, 2}, dt, "contiguous", seed);
  return base.permute({2, 1, 0});
}

kiln::testing::Tolerance tolerance(kiln::DType t) {
  // Eager rounds each op's result to its dtype; the fused kernel rounds the
  // same way (RoundF16/RoundBF16), so only the vector math differs.
  if (t == kiln::kFloat32) return {1e-4, 1e-5};  // tanh: 4e-5 relative, then an add
  return {1e-2, 1e-2};
}

TEST(CpuStrided, StridedInputsRunFusedAndMatchEager) {
  const int64_t lengths[] = {1, 15, 17, 1000};
  const kiln::DType dtypes[] = {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16};
  const char* kinds[] = {"transposed", "step2", "step3_offset", "permuted"};
  const int64_t rows = 6;
  uint64_t seed = 1;
  int programs = 0;
  const int64_t runs_before = kiln::jit::cpu::cpu_pointwise_groups_run();
  for (kiln::DType dt : dtypes) {
    for (const char* kind : kinds) {
      for (int64_t n : lengths) {
        SCOPED_TRACE(::testing::Message() << kind << " n=" << n << " dtype=" << dt);
        Tensor x = strided_view(kind, rows, n, dt, seed++);
        Tensor w = strided_view(std::string(kind) == "permuted" ? kind : "transposed", rows, n,
                                kiln::kFloat32, seed++);
        Tensor y;
        {
          kiln::EagerGuard g;
          y = kiln::testing::random_tensor(x.sizes(), dt, "contiguous", seed++);
        }
        // Exact: arithmetic only (each op rounded to dtype in both paths).
        auto exact = [&] { return (x * y + 0.5f) * x - y; };
        // Mixed dtypes, a second strided input and vector math.
        auto mixed = [&] { return kiln::tanh(x * w) + y.to(kiln::kFloat32); };
        Tensor want_exact, want_mixed;
        {
          kiln::EagerGuard g;
          want_exact = exact();
          want_mixed = mixed();
        }
        int64_t before = kiln::jit::cpu::cpu_pointwise_groups_run();
        Tensor got_exact = exact();
        kiln::sync();
        EXPECT_EQ(kiln::jit::cpu::cpu_pointwise_groups_run() - before, 1) << "not fused";
        before = kiln::jit::cpu::cpu_pointwise_groups_run();
        Tensor got_mixed = mixed();
        kiln::sync();
        EXPECT_EQ(kiln::jit::cpu::cpu_pointwise_groups_run() - before, 1) << "not fused";
        EXPECT_TENSOR_CLOSE_TOL(got_exact, want_exact, 0, 0);
        EXPECT_TENSOR_CLOSE_TOL(got_mixed, want_mixed, tolerance(dt).rtol, tolerance(dt).atol);
        programs += 2;
      }
    }
  }
  EXPECT_EQ(kiln::jit::cpu::cpu_pointwise_groups_run() - runs_before, programs);
}

// Special values read through a gather land in their own lanes.
TEST(CpuStrided, SpecialValuesThroughStridedLoads) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float specials[] = {0.0f, -0.0f, inf, -inf, nan, 1e-40f, -1e-40f, 100.0f, -100.0f, 7.5f};
  std::vector<float> v;
  for (int i = 0; i < 2 * 37; ++i) v.push_back(specials[i % 10] + (i % 10 >= 7 ? 0.01f * i : 0));
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16}) {
    SCOPED_TRACE(::testing::Message() << "dtype=" << dt);
    Tensor x, y;
    {
      kiln::EagerGuard g;
      x = kiln::from_blob(v.data(), {37, 2}, kiln::kFloat32).clone().to(dt).t();  // [2, 37]
      y = kiln::testing::random_tensor({2, 37}, dt, "contiguous", 3);
    }
    // x and y differ in layout: whichever the output follows, the other one
    // is read strided.
    auto f = [&](const Tensor& t) { return kiln::relu(t) - t * 2.0f + y; };
    Tensor want;
    {
      kiln::EagerGuard g;
      want = f(x);
    }
    int64_t before = kiln::jit::cpu::cpu_pointwise_groups_run();
    Tensor got = f(x);
    kiln::sync();
    EXPECT_EQ(kiln::jit::cpu::cpu_pointwise_groups_run() - before, 1) << "not fused";
    EXPECT_TENSOR_CLOSE_TOL(got, want, 0, 0);
  }
}

}  // namespace
