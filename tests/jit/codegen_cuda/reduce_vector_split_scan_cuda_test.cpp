// The CUDA schedules of issue 4 against eager CPU on random inputs: reduction
// groups reading aligned rows with 16-byte vectors (and misaligned views that
// must take the scalar path), statistics over few long rows split across
// blocks (bitwise the same on every run), and cumsum/cumprod over long lines
// with the block-wide scan (Note [CUDA scan schedules]).

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "jit/codegen_cuda/launch_cuda.h"
#include "kiln/kiln.h"
#include "tests/jit/codegen_cuda/fused_reduce_check.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::expect_fused_matches;
using kiln::testing::on_cuda;
using V = const std::vector<Tensor>&;
const std::vector<int64_t> kAll;  // every dim

Tensor rnd(std::vector<int64_t> sizes, kiln::DType t, const char* layout, uint64_t seed,
           double low = -3, double high = 3) {
  kiln::EagerGuard g;
  return kiln::testing::random_tensor(sizes, t, layout, seed, low, high);
}

// Columns [from, from + n) of a random [rows, stride] matrix: `from` sets the
// first element's alignment, `stride` the rows'.
Tensor window(int64_t rows, int64_t n, int64_t stride, int64_t from, kiln::DType t, uint64_t seed) {
  kiln::EagerGuard g;
  return kiln::testing::random_tensor({rows, stride}, t, "contiguous", seed).narrow(1, from, n);
}

class CudaVectorSplit : public ::testing::TestWithParam<kiln::DType> {
 protected:
  void SetUp() override {
    KILN_REQUIRE_CUDA();
    kiln::jit::flush();
  }
};

// Rows of 300 (a multiple of 4, not 8), 304, 768, 4096 and 5000 elements:
// in registers and from memory, aligned windows (vectors) and windows one
// element off or with an odd row stride (scalar loads).
TEST_P(CudaVectorSplit, AlignedAndMisalignedRowsMatchEagerCpu) {
  const kiln::DType t = GetParam();
  for (int64_t n : {300, 304, 768, 4096, 5000}) {
    for (auto [stride, from] :
         std::vector<std::pair<int64_t, int64_t>>{{n, 0}, {n + 8, 8}, {n + 8, 1}, {n + 3, 0}}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " stride=" + std::to_string(stride) +
                   " from=" + std::to_string(from));
      Tensor x = window(5, n, stride, from, t, n + from);
      Tensor r = rnd({5, n}, t, "contiguous", n + 7);
      Tensor w = rnd({n}, t, "contiguous", 2), b = rnd({n}, t, "offset", 3);
      const auto tol = kiln::testing::reduce_tol(t, n);
      expect_fused_matches({x}, [](V v) { return kiln::sum(v[0] * v[0], {-1}) / 16.0; },
                           {tol.rtol, tol.atol * 8});
      expect_fused_matches(
          {x}, [](V v) { return kiln::amax(v[0], {-1}); }, tol);
      expect_fused_matches(
          {x}, [](V v) { return kiln::var(v[0], {-1}); }, tol);
      expect_fused_matches(
          {x}, [](V v) { return kiln::softmax(v[0], -1); }, tol);
      expect_fused_matches(
          {x, r, w, b}, [n](V v) { return kiln::layer_norm(v[0] + v[1], {n}, v[2], v[3]); }, tol);
      expect_fused_matches(
          {x, w}, [n](V v) { return kiln::rms_norm(v[0], {n}, v[1]); }, tol);
    }
  }
}

// One output over millions of elements, a few rows of 300000, and two
// columns of 100000 (the reduced dim outer): split across blocks, the same
// bits on every run.
TEST_P(CudaVectorSplit, FewLongRowsSplitDeterministically) {
  const kiln::DType t = GetParam();
  const kiln::testing::Tolerance exact{0, 0};
  auto twice = [&](const std::vector<Tensor>& in, const std::function<Tensor(V)>& f,
                   kiln::testing::Tolerance tol) {
    Tensor a = expect_fused_matches(in, f, tol);
    Tensor b = expect_fused_matches(in, f, tol);
    std::string msg = kiln::testing::compare(b, a, exact);
    EXPECT_TRUE(msg.empty()) << "two runs differ: " << msg;
  };
  Tensor big = rnd({(1 << 22) + 3}, t, "contiguous", 1);  // odd length: scalar loads
  Tensor big4 = rnd({1 << 22}, t, "contiguous", 2);       // vector loads
  Tensor rows = rnd({3, 300000}, t, "offset", 3);
  Tensor cols = rnd({100000, 2}, t, "contiguous", 4);
  for (const Tensor& x : {big, big4}) {
    SCOPED_TRACE("numel=" + std::to_string(x.numel()));
    const auto tol = kiln::testing::reduce_tol(t, x.numel());
    twice({x}, [](V v) { return kiln::sum(v[0], kAll); }, {tol.rtol, 1e-2});
    twice(
        {x}, [](V v) { return kiln::mean(v[0] * 2.0, kAll); }, tol);
    twice(
        {x}, [](V v) { return kiln::amax(v[0], kAll); }, exact);
    twice(
        {x}, [](V v) { return kiln::amin(v[0], kAll); }, exact);
  }
  const auto tol = kiln::testing::reduce_tol(t, 300000);
  twice({rows}, [](V v) { return kiln::sum(v[0], {-1}, true); }, {tol.rtol, 1e-2});
  twice(
      {rows}, [](V v) { return kiln::amax(v[0] - 1.0, {-1}); }, tol);
  twice({cols}, [](V v) { return kiln::sum(v[0], {0}); }, {tol.rtol, 1e-2});
  twice(
      {cols}, [](V v) { return kiln::amin(v[0], {0}); }, exact);
  // Var keeps the row in one block (two passes): still right.
  expect_fused_matches(
      {rows}, [](V v) { return kiln::var(v[0], {-1}); }, tol);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVectorSplit,
                         ::testing::Values(kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16));

// The eager reduction kernels (Note [CUDA reduction schedules]) split few
// long reductions across blocks too: every accumulator kind (sums, Welford,
// arg-extremes with their positions, logsumexp, norms) against the CPU, and
// the same bits twice.
TEST(CudaEagerSplit, FewLongReductionsMatchEagerCpu) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard g;
  Tensor x = kiln::testing::random_tensor({(1 << 21) + 5}, kiln::kFloat32, "contiguous", 1);
  Tensor h = kiln::testing::random_tensor({3, 200001}, kiln::kFloat16, "offset", 2);
  Tensor i = kiln::testing::random_tensor({400000, 2}, kiln::kInt32, "contiguous", 3, -5, 5);
  Tensor p = kiln::testing::random_tensor({1 << 20}, kiln::kFloat64, "strided", 4, 0.9999, 1.0001);
  struct Op {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    const Tensor* in;
    kiln::testing::Tolerance tol;
  };
  const kiln::testing::Tolerance exact{0, 0}, f32{1e-5, 1e-2}, f16{2e-3, 1e-1};
  const std::vector<Op> ops = {
      {"sum", [](const Tensor& t) { return kiln::sum(t); }, &x, f32},
      {"mean", [](const Tensor& t) { return kiln::mean(t); }, &x, f32},
      {"var", [](const Tensor& t) { return kiln::var(t, kAll); }, &x, f32},
      {"std", [](const Tensor& t) { return kiln::std(t, kAll, 0); }, &x, f32},
      {"amax", [](const Tensor& t) { return kiln::amax(t, kAll); }, &x, exact},
      {"argmax", [](const Tensor& t) { return kiln::argmax(t); }, &x, exact},
      {"argmin", [](const Tensor& t) { return kiln::argmin(t); }, &x, exact},
      {"logsumexp", [](const Tensor& t) { return kiln::logsumexp(t, {0}); }, &x, f32},
      {"norm", [](const Tensor& t) { return kiln::norm(t); }, &x, f32},
      {"sum rows f16", [](const Tensor& t) { return kiln::sum(t, {1}); }, &h, f16},
      {"amin rows f16", [](const Tensor& t) { return kiln::amin(t, {1}); }, &h, exact},
      {"sum cols i32", [](const Tensor& t) { return kiln::sum(t, {0}); }, &i, exact},
      {"max cols i32", [](const Tensor& t) { return std::get<1>(kiln::max(t, 0)); }, &i, exact},
      {"prod f64", [](const Tensor& t) { return kiln::prod(t); }, &p, {1e-10, 1e-10}},
  };
  for (const Op& op : ops) {
    SCOPED_TRACE(op.name);
    Tensor expected = op.f(*op.in);
    Tensor d = on_cuda(*op.in);
    Tensor got = op.f(d).cpu();
    Tensor again = op.f(d).cpu();
    kiln::sync();
    std::string msg = kiln::testing::compare(got, expected, op.tol);
    EXPECT_TRUE(msg.empty()) << msg;
    msg = kiln::testing::compare(again, got, exact);
    EXPECT_TRUE(msg.empty()) << "two runs differ: " << msg;
  }
}

// cumsum and cumprod: long lines (block scan, several tiles, a partial last
// tile), a scan along a non-inner dim, and many short lines (a thread each).
TEST(CudaScan, LongAndShortLinesMatchEagerCpu) {
  KILN_REQUIRE_CUDA();
  struct Case {
    std::vector<int64_t> sizes;
    int64_t dim;
    const char* layout;
  };
  const std::vector<Case> cases = {
      {{1 << 20}, 0, "contiguous"}, {{3, 5001}, 1, "offset"},        {{2, 4096}, -1, "strided"},
      {{5000, 3}, 0, "contiguous"}, {{7, 2048, 2}, 1, "transposed"}, {{3000, 40}, 1, "contiguous"},
      {{1023}, 0, "contiguous"},
  };
  for (kiln::DType t : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16, kiln::kFloat64,
                        kiln::kInt32, kiln::kInt64}) {
    for (const Case& c : cases) {
      const int64_t n = c.sizes[c.dim < 0 ? c.sizes.size() - 1 : static_cast<size_t>(c.dim)];
      SCOPED_TRACE(std::string(kiln::dtype_name(t)) + " " + ::testing::PrintToString(c.sizes) +
                   " dim " + std::to_string(c.dim) + " " + c.layout);
      const bool integral = t == kiln::kInt32 || t == kiln::kInt64;
      // cumprod on values near 1 (integers in {-1, 0, 1}) stays finite.
      Tensor x = rnd(c.sizes, t, c.layout, static_cast<uint64_t>(n));
      Tensor p = integral ? rnd(c.sizes, t, c.layout, 5, -1, 2)
                          : rnd(c.sizes, t, c.layout, 5, 0.999, 1.001);
      const double grow = std::sqrt(static_cast<double>(n));
      const kiln::testing::Tolerance tol =
          integral               ? kiln::testing::Tolerance{0, 0}
          : t == kiln::kFloat16  ? kiln::testing::Tolerance{2e-3, 2e-3 * grow}
          : t == kiln::kBFloat16 ? kiln::testing::Tolerance{1.6e-2, 1.6e-2 * grow}
          : t == kiln::kFloat32  ? kiln::testing::Tolerance{1e-5, 1e-5 * grow}
                                 : kiln::testing::Tolerance{1e-12, 1e-12 * grow};
      for (bool prod : {false, true}) {
        const Tensor& in = prod ? p : x;
        Tensor expected, got;
        {
          kiln::EagerGuard g;
          // The CPU has no float16 scans (as PyTorch 1.13): the reference is
          // the float64 scan rounded once, what the CUDA kernel computes.
          const bool half = t == kiln::kFloat16;
          const Tensor r = half ? in.to(kiln::kFloat64) : in;
          expected = prod ? kiln::cumprod(r, c.dim) : kiln::cumsum(r, c.dim);
          if (half) expected = expected.to(t);
        }
        Tensor d = on_cuda(in);
        got = (prod ? kiln::cumprod(d, c.dim) : kiln::cumsum(d, c.dim)).cpu();
        kiln::sync();
        std::string msg = kiln::testing::compare(got, expected, tol);
        EXPECT_TRUE(msg.empty()) << (prod ? "cumprod: " : "cumsum: ") << msg;
        // Deterministic: a second run gives the same bits.
        Tensor again = (prod ? kiln::cumprod(d, c.dim) : kiln::cumsum(d, c.dim)).cpu();
        kiln::sync();
        msg = kiln::testing::compare(again, got, {0, 0});
        EXPECT_TRUE(msg.empty()) << "two runs differ: " << msg;
      }
    }
  }
}

TEST(CudaScan, BoolAndDtypeArgumentsMatchEagerCpu) {
  KILN_REQUIRE_CUDA();
  Tensor b = rnd({2, 3000}, kiln::kBool, "contiguous", 9);
  Tensor h = rnd({2, 3000}, kiln::kFloat16, "strided", 10);
  Tensor e1, e2;
  {
    kiln::EagerGuard g;
    e1 = kiln::cumsum(b, 1);
    e2 = kiln::cumsum(h, 1, kiln::kFloat32);
  }
  Tensor g1 = kiln::cumsum(on_cuda(b), 1).cpu();
  Tensor g2 = kiln::cumsum(on_cuda(h), 1, kiln::kFloat32).cpu();
  kiln::sync();
  EXPECT_TRUE(kiln::testing::compare(g1, e1, {0, 0}).empty());
  std::string msg = kiln::testing::compare(g2, e2, {1e-5, 1e-4});
  EXPECT_TRUE(msg.empty()) << msg;
}

}  // namespace
