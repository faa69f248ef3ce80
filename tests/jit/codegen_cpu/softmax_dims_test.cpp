// softmax / log_softmax groups on the CPU over a dim that is not the last
// one (Note [Outer normalizations] in jit/codegen_cpu/reduce_cpu.cpp) and over
// one long row split across workers (Note [Long rows]): they run as one
// reduction group and match eager; the row passes they add are checked at
// both ISAs against scalar references.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "jit/codegen_cpu/reduce_cpu.h"
#include "jit/codegen_cpu/row_pass.h"
#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using namespace kiln::jit::cpu;

kiln::testing::Tolerance tolerance(kiln::DType t) {
  if (t == kiln::kFloat32) return {1e-5, 1e-6};
  return {1e-2, 1e-2};
}

// Runs f lazily and eagerly; expects one fused reduction group and no refusal.
template <class F>
void expect_fused_match(F f, kiln::DType dt, int groups = 1) {
  Tensor want;
  {
    kiln::EagerGuard g;
    want = f();
  }
  const int64_t runs = cpu_reductions_run();
  const int64_t refused = cpu_reductions_refused();
  Tensor got = f();
  kiln::sync();
  EXPECT_EQ(cpu_reductions_run() - runs, groups) << "not fused";
  EXPECT_EQ(cpu_reductions_refused() - refused, 0);
  EXPECT_TENSOR_CLOSE_TOL(got, want, tolerance(dt).rtol, tolerance(dt).atol);
}

TEST(CpuSoftmaxDims, OuterDimsMatchEager) {
  const kiln::DType dtypes[] = {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16};
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 5}, {3, 17}, {37, 100}, {64, 1}, {2, 9, 33}};
  uint64_t seed = 1;
  for (kiln::DType dt : dtypes) {
    for (const auto& shape : shapes) {
      for (const char* layout : {"contiguous", "offset"}) {
        Tensor x, w;
        {
          kiln::EagerGuard g;
          x = kiln::testing::random_tensor(shape, dt, layout, seed++, -4, 4);
          w = kiln::testing::random_tensor({shape.back()}, dt, "contiguous", seed++);
        }
        const int64_t d = static_cast<int64_t>(shape.size()) - 2;
        SCOPED_TRACE(::testing::Message()
                     << dt << " " << kiln::IntArrayRef(shape) << " " << layout << " dim " << d);
        expect_fused_match([&] { return kiln::softmax(x, d); }, dt);
        expect_fused_match([&] { return kiln::log_softmax(x, d); }, dt);
        // A prologue, an epilogue with a broadcast operand, a float32 result.
        expect_fused_match([&] { return kiln::softmax(x * 2.0, d) * w + 1.0; }, dt);
        expect_fused_match([&] { return kiln::log_softmax(x - 0.5, d, kiln::kFloat32); }, dt);
        if (shape.size() == 3) {
          expect_fused_match([&] { return kiln::softmax(x, 0); }, dt);
        }
      }
    }
  }
}

TEST(CpuSoftmaxDims, OuterSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Columns: all -inf, one +inf, a NaN, large values, ordinary values.
  std::vector<float> v;
  const int64_t rows = 7, cols = 21;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float x = static_cast<float>((r * 5 + c * 3) % 11) - 5.0f;
      if (c == 0) x = -inf;
      if (c == 1 && r == 3) x = inf;
      if (c == 2 && r == 4) x = nan;
      if (c == 3) x = 80.0f + static_cast<float>(r);
      v.push_back(x);
    }
  }
  Tensor x;
  {
    kiln::EagerGuard g;
    x = kiln::from_blob(v.data(), {rows, cols}, kiln::kFloat32).clone();
  }
  expect_fused_match([&] { return kiln::softmax(x, 0); }, kiln::kFloat32);
  expect_fused_match([&] { return kiln::log_softmax(x, 0); }, kiln::kFloat32);
}

TEST(CpuSoftmaxDims, LongRowsMatchEager) {
  uint64_t seed = 7;
  for (kiln::DType dt : {kiln::kFloat32, kiln::kBFloat16}) {
    for (std::vector<int64_t> shape : {std::vector<int64_t>{300001}, {2, 70000}}) {
      SCOPED_TRACE(::testing::Message() << dt << " " << kiln::IntArrayRef(shape));
      Tensor x;
      {
        kiln::EagerGuard g;
        x = kiln::testing::random_tensor(shape, dt, "contiguous", seed++, -6, 6);
      }
      expect_fused_match([&] { return kiln::softmax(x, -1); }, dt);
      expect_fused_match([&] { return kiln::log_softmax(x, -1); }, dt);
      expect_fused_match([&] { return kiln::softmax(x + 1.0, -1) * 3.0; }, dt);
    }
  }
}

// The passes outer normalizations add, at both ISAs, against scalar math.
TEST(CpuSoftmaxDims, OuterRowPassesAtBothIsas) {
  kiln::jit::cpu::JitRuntime rt;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    for (int64_t n : {1, 7, 8, 17, 64, 100}) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " n=" << n);
      std::vector<float> x(n), z(n), w(n), y(n);
      for (int64_t i = 0; i < n; ++i) {
        x[i] = static_cast<float>(i % 9) * 0.75f - 3.0f;
        z[i] = static_cast<float>(i % 4) - 1.0f;
        w[i] = 0.5f + static_cast<float>(i % 3);
      }
      PassArgs a;
      a.x = x.data();
      a.z = z.data();
      a.w = w.data();
      a.n = n;
      a.y = y.data();
      RowPassKernel(rt, isa, Pass::kExpSubMul).run(a);
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_NEAR(y[i], std::exp(x[i] - z[i]) * w[i], 2e-6 * std::exp(x[i] - z[i]) * w[i]);
      }
      RowPassKernel(rt, isa, Pass::kSubSubZ).run(a);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], (x[i] - z[i]) - w[i]);
      std::vector<double> acc(n, 1.0);
      a.y = reinterpret_cast<float*>(acc.data());
      const int64_t full = n / isa_lanes(isa) * isa_lanes(isa);
      a.n = full;
      RowPassKernel(rt, isa, Pass::kAccExpSum).run(a);
      for (int64_t i = 0; i < n; ++i) {
        const double want = i < full ? 1.0 + std::exp(x[i] - z[i]) : 1.0;
        EXPECT_NEAR(acc[i], want, 2e-6 * want) << i;
      }
    }
  }
}

}  // namespace
