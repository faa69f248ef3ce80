// Fused CPU kernels writing outputs whose innermost dim is strided (Note
// [Strided operands] in jit/codegen_cpu/pointwise_cpu.h): the generated
// stores at both ISAs against a scalar reference (elements between the
// strided ones untouched), and lazy in-place writes through sliced views
// against eager; an output overlapping another view must not run fused.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "jit/codegen_cpu/launch_cpu.h"
#include "jit/codegen_cpu/pointwise_cpu.h"
#include "jit/passes/fusion.h"
#include "kiln/half.h"
#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using namespace kiln::jit;
using namespace kiln::jit::cpu;

// y = x * 2 + 1, one input and one output of dtype dt.
PointwiseKernel affine_kernel(kiln::DType dt) {
  PointwiseKernel k;
  k.inputs = {dt};
  k.outputs = {dt};
  k.body.push_back(Instr{Prim::Load, kiln::kFloat32, -1, -1, -1, 0, 0});
  k.body.push_back(Instr{Prim::Const, kiln::kFloat32, -1, -1, -1, -1, 2.0});
  k.body.push_back(Instr{Prim::Mul, kiln::kFloat32, 0, 1, -1, -1, 0});
  k.body.push_back(Instr{Prim::Const, kiln::kFloat32, -1, -1, -1, -1, 1.0});
  k.body.push_back(Instr{Prim::Add, kiln::kFloat32, 2, 3, -1, -1, 0});
  k.stores = {4};
  return k;
}

float to_float(const uint16_t* p, kiln::DType dt) {
  if (dt == kiln::kFloat16) return static_cast<float>(kiln::Half::from_bits(*p));
  return static_cast<float>(kiln::BFloat16::from_bits(*p));
}
uint16_t from_float(float v, kiln::DType dt) {
  if (dt == kiln::kFloat16) return kiln::Half(v).bits;
  return kiln::BFloat16(v).bits;
}

TEST(CpuStridedOutput, GeneratedStoresAtBothIsas) {
  JitRuntime rt;
  const kiln::DType dtypes[] = {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16};
  const int64_t lengths[] = {1, 7, 8, 9, 15, 16, 17, 33, 100};
  const int64_t steps[] = {2, 3, -2};
  int checked = 0;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    for (kiln::DType dt : dtypes) {
      const int64_t item = dt == kiln::kFloat32 ? 4 : 2;
      for (bool strided_in : {false, true}) {
        std::vector<RunLayout> layouts = {RunLayout::Strided,
                                          strided_in ? RunLayout::Strided : RunLayout::Dense};
        CpuPointwiseKernel kernel(rt, isa, affine_kernel(dt), layouts);
        for (int64_t step : steps) {
          for (int64_t n : lengths) {
            SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << dt << " step=" << step
                                              << " n=" << n << " strided_in=" << strided_in);
            const int64_t span = std::abs(step) * n + 4;
            const int64_t in_step = strided_in ? 3 : 1;
            std::vector<char> out(static_cast<size_t>(span * item), 0x5a);
            std::vector<char> in(static_cast<size_t>(in_step * n * item + item));
            std::vector<float> want(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) {
              float v = static_cast<float>((i * 7) % 13 - 6) * 0.5f;
              if (i == 5) v = std::numeric_limits<float>::quiet_NaN();
              if (i == 6) v = -std::numeric_limits<float>::infinity();
              char* p = in.data() + i * in_step * item;
              if (dt == kiln::kFloat32) {
                std::memcpy(p, &v, 4);
              } else {
                uint16_t b = from_float(v, dt);
                std::memcpy(p, &b, 2);
              }
              want[i] = v * 2 + 1;
            }
            std::vector<char> expected_bytes = out;
            CpuRun r;
            r.n = n;
            const int64_t first = step > 0 ? 2 : 2 + (n - 1) * -step;
            r.ptrs[0] = out.data() + first * item;
            r.ptrs[1] = in.data();
            r.strides[0] = step * item;
            r.strides[1] = in_step * item;
            kernel.run(r);
            for (int64_t i = 0; i < n; ++i) {
              const char* p = out.data() + (first + i * step) * item;
              float got;
              if (dt == kiln::kFloat32) {
                std::memcpy(&got, p, 4);
              } else {
                uint16_t b;
                std::memcpy(&b, p, 2);
                got = to_float(&b, dt);
              }
              if (std::isnan(want[i])) {
                EXPECT_TRUE(std::isnan(got)) << "element " << i;
              } else {
                EXPECT_EQ(got, want[i]) << "element " << i;
              }
              std::memcpy(expected_bytes.data() + (first + i * step) * item, p,
                          static_cast<size_t>(item));
            }
            // Nothing but the strided elements was written.
            EXPECT_EQ(out, expected_bytes);
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

kiln::testing::Tolerance tolerance(kiln::DType t) {
  if (t == kiln::kFloat32) return {1e-4, 1e-5};  // tanh: 4e-5 relative, then a product
  return {1e-2, 1e-2};
}

TEST(CpuStridedOutput, InPlaceThroughSteppedSlicesRunsFused) {
  const kiln::DType dtypes[] = {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16};
  const int64_t lengths[] = {1, 17, 1000};
  uint64_t seed = 11;
  for (kiln::DType dt : dtypes) {
    for (int64_t n : lengths) {
      SCOPED_TRACE(::testing::Message() << dt << " n=" << n);
      Tensor base, x, w;
      {
        kiln::EagerGuard g;
        base = kiln::testing::random_tensor({5, 3 * n}, dt, "contiguous", seed++);
        x = kiln::testing::random_tensor({n, 5}, kiln::kFloat32, "contiguous", seed++).t();
        w = kiln::testing::random_tensor({5, n}, dt, "contiguous", seed++);
      }
      // x[:, ::2].mul_(...) and a step-3 slice from offset 1: strided outputs.
      auto program = [&](Tensor b) {
        Tensor v = b.slice(1, 0, 2 * n, 2);
        v.mul_(kiln::tanh(x) + 0.5);
        Tensor u = b.slice(1, 1, 3 * n, 3);
        u.add_(w * 2.0);
        return b;
      };
      Tensor want;
      {
        kiln::EagerGuard g;
        want = program(base.clone());
      }
      Tensor start;
      {
        kiln::EagerGuard g;
        start = base.clone();
      }
      const int64_t runs = cpu_pointwise_groups_run();
      const int64_t refused = cpu_pointwise_groups_refused();
      Tensor got = program(start);
      kiln::sync();
      EXPECT_EQ(cpu_pointwise_groups_run() - runs, 2) << "not fused";
      EXPECT_EQ(cpu_pointwise_groups_refused() - refused, 0);
      EXPECT_TENSOR_CLOSE_TOL(got, want, tolerance(dt).rtol, tolerance(dt).atol);
    }
  }
}

// Writes through two views of one storage in one group: a fused kernel would
// order them by vector, not by node; whatever path runs, eager's result.
TEST(CpuStridedOutput, OverlappingOutputViewsMatchEager) {
  for (kiln::DType dt : {kiln::kFloat32, kiln::kBFloat16}) {
    SCOPED_TRACE(::testing::Message() << dt);
    Tensor a, b;
    {
      kiln::EagerGuard g;
      a = kiln::testing::random_tensor({19, 19}, dt, "contiguous", 5);
      b = kiln::testing::random_tensor({19, 19}, dt, "contiguous", 6);
    }
    auto program = [&] {
      Tensor v = a * 1.5;
      Tensor t = v.t();
      t.mul_(b);
      return v + 1.0;
    };
    Tensor want;
    {
      kiln::EagerGuard g;
      want = program();
    }
    Tensor got = program();
    kiln::sync();
    EXPECT_TENSOR_CLOSE_TOL(got, want, tolerance(dt).rtol, tolerance(dt).atol);
  }
}

// Note [Output overlap]: a group storing one value through two views of one
// storage runs fused only when their bytes cannot meet.
TEST(CpuStridedOutput, OverlappingOutputsAreRefused) {
  Tensor base, x;
  {
    kiln::EagerGuard g;
    base = kiln::testing::random_tensor({20, 20}, kiln::kFloat32, "contiguous", 1);
    x = kiln::testing::random_tensor({10, 20}, kiln::kFloat32, "contiguous", 2);
  }
  auto group = [&](const Tensor& o0, const Tensor& o1) {
    FusedGroup g;
    g.kernel = affine_kernel(kiln::kFloat32);
    g.kernel.outputs.push_back(kiln::kFloat32);
    g.kernel.stores.push_back(4);
    g.shape = kiln::DimVector{10, 20};
    g.inputs = {x};
    g.outputs = {o0, o1};
    return g;
  };
  Tensor want;
  {
    kiln::EagerGuard g;
    want = x * 2.0 + 1.0;
  }
  // Rows 0-9 and 10-19: disjoint.
  const int64_t refused = cpu_pointwise_groups_refused();
  Tensor top = base.slice(0, 0, 10), bottom = base.slice(0, 10, 20);
  EXPECT_TRUE(run_pointwise_cpu(group(top, bottom)));
  EXPECT_TENSOR_CLOSE_TOL(top, want, 0, 0);
  EXPECT_TENSOR_CLOSE_TOL(bottom, want, 0, 0);
  // Even columns of rows 0-9 (strided) and rows 0-9 dense: they share elements.
  Tensor evens = base.slice(0, 0, 10).slice(1, 0, 20, 2);
  FusedGroup g = group(top, top);
  g.shape = kiln::DimVector{10, 10};
  Tensor x10 = x.slice(1, 0, 10);
  g.inputs = {x10};
  g.outputs = {evens, base.slice(0, 0, 10).slice(1, 0, 10)};
  EXPECT_FALSE(run_pointwise_cpu(g));
  EXPECT_EQ(cpu_pointwise_groups_refused() - refused, 1);
  // The same view read and written (in place, strided): fused.
  Tensor y;
  {
    kiln::EagerGuard guard;
    y = kiln::testing::random_tensor({10, 40}, kiln::kFloat32, "contiguous", 3);
  }
  Tensor ys = y.slice(1, 0, 40, 2);
  Tensor want_y;
  {
    kiln::EagerGuard guard;
    want_y = ys * 2.0 + 1.0;
  }
  FusedGroup in_place;
  in_place.kernel = affine_kernel(kiln::kFloat32);
  in_place.shape = kiln::DimVector{10, 20};
  in_place.inputs = {ys};
  in_place.outputs = {ys};
  EXPECT_TRUE(run_pointwise_cpu(in_place));
  EXPECT_TENSOR_CLOSE_TOL(ys, want_y, 0, 0);
}

}  // namespace
