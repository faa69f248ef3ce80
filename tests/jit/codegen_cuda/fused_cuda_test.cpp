// Generated CUDA kernels on a real device: fused lazy groups and eager
// single-op groups against the eager CPU kernels.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "jit/codegen_cuda/launch_cuda.h"
#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/number_programs.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

Tensor chain(const Tensor& x, const Tensor& row) {
  Tensor y = x;
  for (int i = 0; i < 4; ++i) {
    y = y * 1.0001 + 0.5;
    y = kiln::sigmoid(y) * row;
    y = y - 0.25;
    y = kiln::tanh(y);
  }
  return kiln::gelu(y, "tanh") + kiln::where(kiln::gt(x, 0.0), kiln::exp(x), kiln::erf(x));
}

kiln::testing::Tolerance tol(kiln::DType t) {
  if (t == kiln::kFloat16) return {2e-3, 2e-3};
  if (t == kiln::kBFloat16) return {1.6e-2, 1.6e-2};
  return {1e-5, 1e-5};  // fast math on the GPU vs vecmath/libm on the CPU
}

TEST(CudaFused, LazyChainMatchesEagerCpu) {
  KILN_REQUIRE_CUDA();
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16}) {
    for (const char* layout : {"contiguous", "transposed", "strided"}) {
      Tensor x, row, expected;
      {
        kiln::EagerGuard eager;
        x = kiln::testing::random_tensor({33, 70}, dt, layout, 5);
        row = kiln::testing::random_tensor({70}, dt, "contiguous", 6);
        expected = chain(x, row);
      }
      auto before = kiln::jit::cuda::cuda_kernel_stats();
      Tensor got = chain(x.to(kiln::Device::cuda()), row.to(kiln::Device::cuda()));
      EXPECT_TRUE(got.is_pending());
      EXPECT_TRUE(got.is_cuda());
      Tensor host = got.cpu();
      kiln::sync();  // runs the trace
      auto after = kiln::jit::cuda::cuda_kernel_stats();
      EXPECT_GE(after.launches - before.launches, 1) << "the chain ran as generated kernels";
      std::string msg = kiln::testing::compare(host, expected, tol(dt));
      EXPECT_TRUE(msg.empty()) << kiln::dtype_name(dt) << " " << layout << ": " << msg;
    }
  }
}

TEST(CudaFused, EagerPointwiseOpsAreSingleOpKernels) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  Tensor a = kiln::testing::random_tensor({1000}, kiln::kFloat32, "contiguous", 1);
  Tensor b = kiln::testing::random_tensor({1000}, kiln::kFloat32, "strided", 2);
  Tensor expected = kiln::sqrt(kiln::abs(a * b)) - b;
  Tensor got = kiln::sqrt(kiln::abs(a.cuda() * b.cuda())) - b.cuda();
  EXPECT_FALSE(got.is_pending());
  EXPECT_TENSOR_CLOSE_TOL(got.cpu(), expected, 1e-5, 1e-6);
}

TEST(CudaFused, KernelsAreCompiledOncePerStructure) {
  KILN_REQUIRE_CUDA();
  Tensor x = kiln::ones({256}).cuda();
  Tensor first = (x * 3.0 + 1.0).cpu();  // compiles (or loads from disk)
  kiln::sync();
  auto before = kiln::jit::cuda::cuda_kernel_stats();
  for (int i = 0; i < 5; ++i) {
    Tensor y = (x * 3.0 + 1.0).cpu();
    EXPECT_FLOAT_EQ(y[7].item<float>(), 4.0f);
  }
  auto after = kiln::jit::cuda::cuda_kernel_stats();
  EXPECT_EQ(after.compiled, before.compiled);
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  EXPECT_GE(after.launches - before.launches, 5);
}

// Kernels compiled or read from disk so far; after a first value, each
// later one must add none (Note [Numbers as kernel arguments]).
class NoNewKernels {
 public:
  void check(const std::string& what) {
    const auto stats = kiln::jit::cuda::cuda_kernel_stats();
    const int64_t built = stats.compiled + stats.disk_hits;
    if (warm_ < 0) {
      warm_ = built;
    } else {
      EXPECT_EQ(built, warm_) << what << " compiled (or loaded) a kernel of its own";
    }
  }

 private:
  int64_t warm_ = -1;
};

// Note [Numbers as kernel arguments]: every value of the program's numbers
// runs one kernel per structure, floating and integer, and matches the eager
// CPU kernels at each value (the programs: tests/support/number_programs.h).
TEST(CudaFused, ANewNumberCompilesNoKernel) {
  KILN_REQUIRE_CUDA();
  const kiln::Device cuda = kiln::Device::cuda();
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16, kiln::kFloat64}) {
    Tensor x = kiln::testing::random_tensor({37, 29}, dt, "transposed", 11);
    Tensor y = kiln::testing::random_tensor({37, 29}, dt, "strided", 12);
    Tensor mask =
        kiln::gt(kiln::testing::random_tensor({29}, kiln::kFloat32, "contiguous", 13), 1.0);
    Tensor xd = x.to(cuda), yd = y.to(cuda), maskd = mask.to(cuda);
    NoNewKernels kernels;
    for (int i = 0; i < 12; ++i) {
      const double s = 0.1 + 0.03 * i;
      Tensor expected;
      {
        kiln::EagerGuard eager;
        expected = kiln::testing::numbers_program(x, y, mask, s);
      }
      Tensor got = kiln::testing::numbers_program(xd, yd, maskd, s).cpu();
      kiln::sync();
      const kiln::testing::Tolerance t = tol(dt);
      const std::string msg = kiln::testing::compare(
          got, expected, {4 * t.rtol, dt == kiln::kFloat64 ? 1e-12 : 4 * t.atol});
      EXPECT_TRUE(msg.empty()) << kiln::dtype_name(dt) << " s=" << s << ": " << msg;
      kernels.check(std::string(kiln::dtype_name(dt)) + ": s=" + std::to_string(s));
    }
  }
  // Reductions' prologues and epilogues (Note [CUDA reduction ABI]).
  for (kiln::DType dt : {kiln::kFloat32, kiln::kBFloat16}) {
    Tensor xd = kiln::testing::random_tensor({23, 67}, dt, "transposed", 41).to(cuda);
    Tensor wd = kiln::testing::random_tensor({67}, dt, "contiguous", 42).to(cuda);
    NoNewKernels kernels;
    for (int i = 0; i < 10; ++i) {
      const double s = 0.7 + 0.11 * i;
      // Against the eager CUDA kernels: four chained row ops in bfloat16 part
      // from the CPU's by more than one op's rounding.
      Tensor expected;
      {
        kiln::EagerGuard eager;
        expected = kiln::testing::number_reductions(xd, wd, s).cpu();
      }
      Tensor got = kiln::testing::number_reductions(xd, wd, s).cpu();
      kiln::sync();
      const std::string msg = kiln::testing::compare(got, expected, tol(dt));
      EXPECT_TRUE(msg.empty()) << kiln::dtype_name(dt) << " s=" << s << ": " << msg;
      kernels.check(std::string("reductions, ") + kiln::dtype_name(dt) +
                    ": s=" + std::to_string(s));
    }
  }
  // Integers: the value reaches the kernel as an int64 word.
  Tensor xi = kiln::testing::random_tensor({41, 13}, kiln::kInt64, "transposed", 31, -1000, 1000);
  Tensor bi = kiln::testing::random_tensor({13}, kiln::kInt32, "contiguous", 32, -50, 50);
  Tensor mi =
      kiln::gt(kiln::testing::random_tensor({41, 13}, kiln::kFloat32, "contiguous", 33), 0.0);
  Tensor xid = xi.to(cuda), bid = bi.to(cuda), mid = mi.to(cuda);
  NoNewKernels int_kernels;
  for (int64_t k : std::vector<int64_t>{3, -7, 1000003, int64_t{1} << 20, 0, -1}) {
    auto f = [&](const Tensor& x, const Tensor& b, const Tensor& m) {
      return kiln::masked_fill(x * k + (k - 5), m, k) - b * k;
    };
    Tensor expected;
    {
      kiln::EagerGuard eager;
      expected = f(xi, bi, mi);
    }
    Tensor got = f(xid, bid, mid).cpu();
    kiln::sync();
    EXPECT_TRUE(kiln::testing::compare(got, expected).empty()) << "k=" << k;
    int_kernels.check("k=" + std::to_string(k));
  }
}

// The generated kernels' own sigmoid and tanh (Note [CUDA vector math]) against
// float64 references, with the bars DESIGN.md sets for vector math: 4e-6
// relative for sigmoid, 4e-5 for tanh and gelu, absolute below 1e-5.
TEST(CudaFused, FastMathMeetsTheAccuracyBars) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  const int64_t n = int64_t{1} << 20;
  Tensor x = kiln::linspace(-40.0, 40.0, n);
  std::vector<float> special = {0.0f,    -0.0f,  1e-30f,   -1e-30f,   1e-4f, -4.2e-4f, 0.0999f,
                                0.1001f, -0.1f,  9.0f,     -9.02f,    88.7f, -88.7f,   -104.0f,
                                1e30f,   -1e30f, INFINITY, -INFINITY, NAN};
  x = kiln::cat({x, kiln::tensor(special, {static_cast<int64_t>(special.size())})});
  Tensor xd = x.to(kiln::kFloat64);
  struct Case {
    const char* name;
    Tensor (*f)(const Tensor&);
    double bar;
  };
  const Case cases[] = {
      {"sigmoid", [](const Tensor& t) { return kiln::sigmoid(t); }, 4e-6},
      {"tanh", [](const Tensor& t) { return kiln::tanh(t); }, 4e-5},
      {"silu", [](const Tensor& t) { return kiln::silu(t); }, 4e-6},
      {"gelu_tanh", [](const Tensor& t) { return kiln::gelu(t, "tanh"); }, 4e-5},
  };
  for (const Case& c : cases) {
    Tensor got = c.f(x.cuda()).cpu().contiguous();
    Tensor ref = c.f(xd).contiguous();
    const float* g = got.data_ptr<float>();
    const double* r = ref.data_ptr<double>();
    int bad = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      const bool same_nan = std::isnan(g[i]) && std::isnan(r[i]);
      const bool same_inf = std::isinf(r[i]) && static_cast<double>(g[i]) == r[i];
      const double err = std::fabs(static_cast<double>(g[i]) - r[i]);
      if (!same_nan && !same_inf && !(err <= c.bar * std::max(std::fabs(r[i]), 1e-5))) {
        if (++bad <= 5) {
          ADD_FAILURE() << c.name << "(" << x[i].item<float>() << ") = " << g[i] << ", expected "
                        << r[i];
        }
      }
    }
    EXPECT_EQ(bad, 0) << c.name;
  }
}

// Sizes that leave vector tails, and views whose start breaks the vector
// alignment, in every float dtype.
TEST(CudaFused, VectorAndScalarPathsAgree) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16, kiln::kFloat64}) {
    for (int64_t size : {1, 3, 8, 4097}) {
      for (int64_t start : {0, 1}) {
        Tensor base = kiln::testing::random_tensor({size + 2}, dt, "contiguous", 11);
        Tensor x = base.narrow(0, start, size);
        Tensor expected = kiln::tanh(x * 2.0 + 1.0);
        Tensor got = kiln::tanh(x.cuda() * 2.0 + 1.0).cpu();
        std::string msg = kiln::testing::compare(got, expected, tol(dt));
        EXPECT_TRUE(msg.empty()) << kiln::dtype_name(dt) << " size " << size << " start " << start
                                 << ": " << msg;
      }
    }
  }
}

// Note [16-bit pairs]: the fused float16 and bfloat16 kernels' pair
// instructions give the eager kernels' results bit for bit (both round every
// op), over values that test the rounding: subnormals, the type's largest
// values (sums that overflow), signed zeros, infinities and NaN; vector
// paths (even sizes, aligned views), their tails, the scalar path, and a
// transposed operand.
TEST(CudaFused, SixteenBitPairsEqualEagerBitForBit) {
  KILN_REQUIRE_CUDA();
  const std::vector<float> common = {0.0f, -0.0f, 1.0f, 0.333251953125f, INFINITY, -INFINITY, NAN};
  const std::vector<float> f16 = {5.96e-8f,  -5.96e-8f, 6.1e-5f,     3.0e-5f, 65504.0f,
                                  -65504.0f, 65000.0f,  0.99951172f, 2049.0f};
  const std::vector<float> bf16 = {9.2e-41f,  -9.2e-41f, 1.2e-38f,    5.9e-39f, 3.38e38f,
                                   -3.38e38f, 3.0e38f,   0.99609375f, 257.0f};
  auto same_bits = [](const Tensor& got, const Tensor& want, const std::string& what) {
    const Tensor g = got.to(kiln::kFloat32).cpu().contiguous(),
                 w = want.to(kiln::kFloat32).cpu().contiguous();
    ASSERT_EQ(g.numel(), w.numel()) << what;
    const float *gp = g.data_ptr<float>(), *wp = w.data_ptr<float>();
    int64_t differ = 0, first = -1;
    for (int64_t i = 0; i < g.numel(); ++i) {
      const bool same = (std::isnan(gp[i]) && std::isnan(wp[i])) ||
                        (gp[i] == wp[i] && std::signbit(gp[i]) == std::signbit(wp[i]));
      if (!same && first < 0) first = i;
      differ += !same;
    }
    EXPECT_EQ(differ, 0) << what << ": first at " << first << ": got "
                         << (first >= 0 ? gp[first] : 0.0f) << ", eager "
                         << (first >= 0 ? wp[first] : 0.0f);
  };
  auto program = [](const Tensor& x, const Tensor& y, const Tensor& z) {
    Tensor a = x * 1.0001 + 0.5;  // a number's product; a constant sum
    Tensor b = (a + y) * z - x;   // 16-bit values only
    Tensor c = (b - 0.25) * 2.0;  // constants the type holds
    return std::vector<Tensor>{c * y + a, b};
  };
  uint64_t seed = 40;
  for (kiln::DType dt : {kiln::kFloat16, kiln::kBFloat16}) {
    std::vector<float> special = common;
    for (float v : dt == kiln::kFloat16 ? f16 : bf16) special.push_back(v);
    const float big = dt == kiln::kFloat16 ? 3000.0f : 1e36f, small = 1e-5f;
    auto values = [&](int64_t n, uint64_t s) {
      Tensor r;
      {
        kiln::EagerGuard eager;
        r = kiln::testing::random_tensor({n}, kiln::kFloat32, "contiguous", s);
      }
      std::vector<float> v(r.data_ptr<float>(), r.data_ptr<float>() + n);
      for (int64_t i = 0; i < n; ++i) {
        if (i % 3 == 0) v[i] = special[(i / 3 + s) % special.size()];
        if (i % 7 == 1) v[i] *= big;     // large products and sums
        if (i % 11 == 2) v[i] *= small;  // subnormal products
      }
      return kiln::tensor(v, {n}).to(dt).cuda();
    };
    for (int64_t n : {int64_t{4096}, int64_t{4097}, int64_t{6}}) {
      for (int64_t start : {0, 1}) {
        for (bool transposed : {false, true}) {
          if (transposed && n % 2 != 0) continue;
          const std::string what = std::string(kiln::dtype_name(dt)) + " n " + std::to_string(n) +
                                   " start " + std::to_string(start) +
                                   (transposed ? " transposed" : "");
          // [2, n / 2] (n even), as a view of a transposed [n / 2, 2] when asked; else [n].
          auto operand = [&](uint64_t s) {
            Tensor t = values(n + start, s).narrow(0, start, n);
            if (n % 2 != 0) return t;
            return transposed ? t.view({n / 2, 2}).t() : t.view({2, n / 2});
          };
          Tensor x = operand(++seed), y = operand(++seed), z = operand(++seed);
          std::vector<Tensor> want;
          {
            kiln::EagerGuard eager;
            want = program(x, y, z);
          }
          std::vector<Tensor> got = program(x, y, z);  // one fused kernel
          ASSERT_TRUE(got[0].is_pending()) << what;
          for (size_t o = 0; o < got.size(); ++o) {
            same_bits(got[o], want[o], what + ", output " + std::to_string(o));
          }
          // Inside jit::compile: the same kernel, replayed.
          auto f = kiln::jit::compile(
              [&](const Tensor& a, const Tensor& b, const Tensor& c) { return program(a, b, c); },
              {.name = "16-bit pairs"});
          for (int call = 0; call < 3; ++call) {
            std::vector<Tensor> r = f(x, y, z);
            same_bits(r[0], want[0], what + ", compiled call " + std::to_string(call));
          }
        }
      }
    }
  }
}

TEST(CudaFused, OpsWithoutACudaKernelSayWhy) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  Tensor x = kiln::ones({4, 4}).cuda();
  // Every built-in op has a CUDA path now; a custom op with CPU and Meta
  // kernels only (tests/runtime/dispatch/dispatcher_test.cpp) still has none.
  static const kiln::TypedOp<Tensor(const Tensor&, double)> op("testns::scale_plus_one");
  EXPECT_KILN_ERROR(op(x, 2.0), "has no CUDA kernel yet");
}

}  // namespace
