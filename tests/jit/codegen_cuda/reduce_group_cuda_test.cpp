// Reduction groups as one generated CUDA kernel (Note [CUDA reduction ABI]):
// every RowOp in float32, float16 and bfloat16, rows shorter and longer than
// the on-chip path (4096), non-contiguous and broadcast inputs, against eager
// CPU.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "jit/codegen_cuda/launch_cuda.h"
#include "jit/record/trace_buffer.h"
#include "kiln/kiln.h"
#include "tests/jit/codegen_cuda/fused_reduce_check.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::expect_fused_matches;
using kiln::testing::on_cuda;

Tensor rnd(std::vector<int64_t> sizes, kiln::DType t, const char* layout, uint64_t seed) {
  kiln::EagerGuard g;
  return kiln::testing::random_tensor(sizes, t, layout, seed);
}

class CudaReduceGroups : public ::testing::TestWithParam<kiln::DType> {
 protected:
  void SetUp() override {
    KILN_REQUIRE_CUDA();
    kiln::jit::flush();
  }
};

// 7..768 keep the row in registers (warp or block per row), 2560 and 3072
// in two runs of vectors per lane (the second partly past the row), 4096 at the
// on-chip limit, 5000 and 20000 loop over global memory.
TEST_P(CudaReduceGroups, RowNormalizationsMatchEagerCpu) {
  const kiln::DType t = GetParam();
  for (const char* layout : {"contiguous", "offset", "expanded", "transposed"}) {
    for (int64_t n : {7, 33, 768, 2560, 3072, 4096, 5000, 20000}) {
      SCOPED_TRACE(std::string(layout) + " n=" + std::to_string(n));
      const int64_t rows = n > 4096 ? 3 : 15;
      Tensor x = rnd({rows, n}, t, layout, n), a = rnd({rows, n}, t, "contiguous", n + 1);
      Tensor w = rnd({n}, t, "contiguous", 2), b = rnd({n}, t, "offset", 3);
      const auto tol = kiln::testing::reduce_tol(t, n);
      using V = const std::vector<Tensor>&;
      expect_fused_matches(
          {x}, [](V v) { return kiln::softmax(v[0] * 0.5, -1); }, tol);
      expect_fused_matches(
          {x}, [](V v) { return kiln::log_softmax(v[0], -1); }, tol);
      expect_fused_matches(
          {x, a, w, b}, [n](V v) { return kiln::layer_norm(v[0] + v[1], {n}, v[2], v[3]); }, tol);
      expect_fused_matches(
          {x, w}, [n](V v) { return kiln::rms_norm(v[0], {n}, v[1]) + 1.0; }, tol);
      expect_fused_matches(
          {x}, [](V v) { return kiln::softmax(v[0], -1, kiln::kFloat32); },
          kiln::testing::reduce_tol(kiln::kFloat32, n));
    }
  }
}

// The residual add joins the next LayerNorm or RMSNorm on CUDA: one kernel
// stores the residual stream and normalizes it.
TEST_P(CudaReduceGroups, ResidualStreamIsStoredAndNormalized) {
  const kiln::DType t = GetParam();
  for (bool rms : {false, true}) {
    for (int64_t n : {768, 6000}) {
      SCOPED_TRACE(std::string(rms ? "rms_norm" : "layer_norm") + " n=" + std::to_string(n));
      Tensor x = rnd({4, 3, n}, t, "contiguous", 11), a = rnd({4, 3, n}, t, "strided", 12);
      Tensor w = rnd({n}, t, "contiguous", 13), b = rnd({n}, t, "contiguous", 14);
      auto norm = [&](const Tensor& h, const Tensor& ww, const Tensor& bb) {
        return rms ? kiln::rms_norm(h, {n}, ww) : kiln::layer_norm(h, {n}, ww, bb);
      };
      Tensor h_cpu, y_cpu;
      {
        kiln::EagerGuard g;
        h_cpu = x + a;
        y_cpu = norm(h_cpu, w, b);
      }
      Tensor xd = on_cuda(x), ad = on_cuda(a), wd = on_cuda(w), bd = on_cuda(b);
      kiln::jit::flush();
      const int64_t before = kiln::jit::cuda::cuda_reductions_run();
      Tensor h = xd + ad;
      Tensor y = norm(h, wd, bd);
      EXPECT_EQ(
          kiln::jit::TraceBuffer::current().describe_pending(),
          std::string("reduce[add.Tensor > ") + (rms ? "rms_norm" : "layer_norm") + " -> 2 out]");
      Tensor hc = h.cpu(), yc = y.cpu();
      kiln::sync();
      EXPECT_EQ(kiln::jit::cuda::cuda_reductions_run(), before + 1);
      EXPECT_TRUE(kiln::testing::compare(hc, h_cpu, kiln::testing::reduce_tol(t, n)).empty());
      std::string msg = kiln::testing::compare(yc, y_cpu, kiln::testing::reduce_tol(t, n));
      EXPECT_TRUE(msg.empty()) << msg;
    }
  }
}

TEST_P(CudaReduceGroups, StatisticsMatchEagerCpu) {
  const kiln::DType t = GetParam();
  for (const char* layout : {"contiguous", "transposed", "strided", "expanded"}) {
    SCOPED_TRACE(layout);
    Tensor x = rnd({6, 9, 33}, t, layout, 5);
    for (std::vector<int64_t> dims :
         std::vector<std::vector<int64_t>>{{-1}, {0}, {1}, {0, 2}, {}, {1, 2}}) {
      SCOPED_TRACE(::testing::PrintToString(dims));
      const auto tol = kiln::testing::reduce_tol(t, 6 * 9 * 33);
      using V = const std::vector<Tensor>&;
      expect_fused_matches(
          {x}, [&](V v) { return kiln::sum(v[0] * v[0], dims) / 16.0; }, tol);
      expect_fused_matches(
          {x}, [&](V v) { return kiln::mean(v[0], dims, true); }, tol);
      expect_fused_matches(
          {x}, [&](V v) { return kiln::amax(v[0], dims); }, tol);
      expect_fused_matches(
          {x}, [&](V v) { return kiln::amin(v[0] + 1.0, dims, true); }, tol);
      expect_fused_matches(
          {x}, [&](V v) { return kiln::var(v[0], dims); }, tol);
      expect_fused_matches(
          {x}, [&](V v) { return kiln::std(v[0], dims, 0) + 1e-5; }, tol);
    }
  }
}

TEST_P(CudaReduceGroups, LongRowsAndFewRows) {
  const kiln::DType t = GetParam();
  using V = const std::vector<Tensor>&;
  for (int64_t n : {4097, 100000}) {
    Tensor x = rnd({2, n}, t, "contiguous", 9);
    const auto tol = kiln::testing::reduce_tol(t, n);
    expect_fused_matches({x}, [](V v) { return kiln::sum(v[0], {-1}); }, {tol.rtol, 1e-3});
    expect_fused_matches(
        {x}, [](V v) { return kiln::var(v[0], {-1}); }, tol);
    expect_fused_matches(
        {x}, [](V v) { return kiln::amax(v[0], {-1}); }, tol);
  }
  // Outer reductions: the reduced dim is the strided one.
  Tensor y = rnd({3000, 40}, t, "contiguous", 10);
  expect_fused_matches({y}, [](V v) { return kiln::sum(v[0], {0}) * 0.5; },
                       {kiln::testing::reduce_tol(t, 3000).rtol, 1e-3});
  expect_fused_matches(
      {y}, [](V v) { return kiln::log_softmax(v[0], 0); }, kiln::testing::reduce_tol(t, 3000));
}

// Rows of 1, 2 and 3 elements (a thread per row, the row in registers):
// var and std with correction 1 over one element are 0/0 = NaN, layer_norm of
// one element is exactly its bias; the prologue (silu of an offset input) and
// a pointwise epilogue are fused as in a traced graph. Then rows of one
// repeated value in every schedule (a warp, a block, 1024 lanes over memory,
// a lane per row): deviations, var and the normalized values are exactly 0.
TEST_P(CudaReduceGroups, ShortAndConstantRowsCancelExactly) {
  const kiln::DType t = GetParam();
  using V = const std::vector<Tensor>&;
  const kiln::testing::Tolerance exact{0, 0};
  for (int64_t n : {1, 2, 3}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    Tensor x = rnd({5, n}, t, "offset", 20 + n), w = rnd({n}, t, "contiguous", 30 + n);
    Tensor b = rnd({n}, t, "contiguous", 40 + n);
    // 16-bit: the fused kernel keeps silu's result in float32 where the eager
    // reference rounds it to the 16-bit type, and normalizing a row of two or
    // three values magnifies that one rounding (about 3% seen in bfloat16).
    const bool half = t == kiln::kFloat16 || t == kiln::kBFloat16;
    const auto tol = n == 1 && t == kiln::kFloat32 ? exact
                     : half && n > 1               ? kiln::testing::Tolerance{0.05, 0.05}
                                                   : kiln::testing::reduce_tol(t, n);
    expect_fused_matches(
        {x}, [](V v) { return kiln::var(kiln::silu(v[0]), {-1}, 1, true) + 0.5; }, tol);
    expect_fused_matches(
        {x}, [](V v) { return kiln::std(kiln::silu(v[0]), {-1}, 1) * 2.0; }, tol);
    expect_fused_matches(
        {x, w, b}, [n](V v) { return kiln::layer_norm(kiln::silu(v[0]), {n}, v[1], v[2]); }, tol);
    expect_fused_matches(
        {x, w}, [n](V v) { return kiln::rms_norm(v[0] * 3.0, {n}, v[1]) + 1.0; },
        kiln::testing::reduce_tol(t, n));
    expect_fused_matches(
        {x}, [](V v) { return kiln::softmax(v[0] - 1.0, -1); }, kiln::testing::reduce_tol(t, n));
  }
  // Exact zeros, not the CPU's result: its float32 sums need not cancel.
  auto expect_zeros = [&](const Tensor& c, const std::function<Tensor(const Tensor&)>& f) {
    const int64_t before = kiln::jit::cuda::cuda_reductions_run();
    Tensor got = f(on_cuda(c)).cpu();
    kiln::sync();
    EXPECT_GT(kiln::jit::cuda::cuda_reductions_run(), before) << "did not run as one fused kernel";
    Tensor zeros;
    {
      kiln::EagerGuard g;
      zeros = kiln::zeros_like(got);
    }
    std::string msg = kiln::testing::compare(got, zeros, exact);
    EXPECT_TRUE(msg.empty()) << msg;
  };
  for (int64_t n : {1, 5, 40, 700, 3000, 5000}) {
    SCOPED_TRACE("constant rows, n=" + std::to_string(n));
    Tensor c;
    {
      kiln::EagerGuard g;
      c = kiln::full({4, n}, 0.3, kiln::TensorOptions().dtype(t));
    }
    expect_zeros(c, [](const Tensor& v) { return kiln::var(v, {-1}, 0); });
    expect_zeros(c, [n](const Tensor& v) { return kiln::layer_norm(v, {n}); });
    // The reduced dim outer in memory: a lane per kept position.
    if (n > 1) expect_zeros(c, [](const Tensor& v) { return kiln::var(v, {0}, 1); });
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaReduceGroups,
                         ::testing::Values(kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16));

TEST(CudaReduceGroupsSpecial, NanInfAndAllMinusInfRows) {
  KILN_REQUIRE_CUDA();
  Tensor s;
  {
    kiln::EagerGuard g;
    s = kiln::testing::random_tensor({4, 40}, kiln::kFloat32, "contiguous", 3);
    float* p = s.data_ptr<float>();
    p[1] = NAN;
    p[46] = INFINITY;
    for (int i = 80; i < 120; ++i) p[i] = -INFINITY;
    p[126] = -INFINITY;
  }
  using V = const std::vector<Tensor>&;
  const kiln::testing::Tolerance tol{1e-5, 1e-6};
  expect_fused_matches(
      {s}, [](V v) { return kiln::softmax(v[0], -1); }, tol);
  expect_fused_matches(
      {s}, [](V v) { return kiln::log_softmax(v[0], -1); }, tol);
  expect_fused_matches(
      {s}, [](V v) { return kiln::amax(v[0], {1}); }, tol);
  expect_fused_matches(
      {s}, [](V v) { return kiln::amin(v[0], {1}); }, tol);
}

TEST(CudaReduceGroupsSpecial, KernelIsCompiledOncePerStructure) {
  KILN_REQUIRE_CUDA();
  auto run = [](int64_t rows, int64_t n) {
    Tensor x = kiln::ones({rows, n}).cuda();
    Tensor y = kiln::softmax(x * 2.0, -1).cpu();
    kiln::sync();
    EXPECT_NEAR(y[0][0].item<float>(), 1.0f / static_cast<float>(n), 1e-7);
  };
  run(5, 300);
  const auto before = kiln::jit::cuda::cuda_kernel_stats();
  run(9, 304);  // another size, same schedule (and vector width): same kernel
  const auto after = kiln::jit::cuda::cuda_kernel_stats();
  EXPECT_EQ(after.compiled, before.compiled);
  EXPECT_EQ(after.disk_hits, before.disk_hits);
}

}  // namespace
