// jit::compile's guards and recompile log (Note [Guards]): each change of an
// argument's dtype, size, strides or device, of a captured weight, of a
// scalar argument or of autocast recompiles exactly once, saying why; dynamic
// dims; the cache limit; verify mode; graph breaks; eager mode.

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::random_tensor;

// Captures stderr with the given log channels on.
class Logs {
 public:
  explicit Logs(const char* channels) {
    kiln::set_logs(channels);
    ::testing::internal::CaptureStderr();
  }
  ~Logs() {
    if (!taken_) (void)take();
  }
  std::string take() {
    taken_ = true;
    std::string s = ::testing::internal::GetCapturedStderr();
    kiln::set_logs("");
    return s;
  }

 private:
  bool taken_ = false;
};

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Calls f(a) then f(b) then both again; expects one recompile, logged with `reason`.
template <class F>
void expect_one_recompile(F& f, const Tensor& a, const Tensor& b, const std::string& reason) {
  Logs logs("recompiles");
  Tensor ra = f(a), rb = f(b);
  Tensor ra2 = f(a), rb2 = f(b);
  const std::string text = logs.take();
  EXPECT_EQ(f.stats().entries, 2) << text;
  EXPECT_EQ(f.stats().hits, 2) << text;
  EXPECT_EQ(count_of(text, "entry 2/8: "), 1) << text;
  EXPECT_NE(text.find(reason), std::string::npos) << "expected '" << reason << "' in:\n" << text;
  kiln::EagerGuard eager;
  EXPECT_TENSOR_CLOSE(ra2.cpu(), ra.cpu());
  EXPECT_TENSOR_CLOSE(rb2.cpu(), rb.cpu());
}

Tensor body(const Tensor& x) {
  return kiln::sigmoid(x * 2.0) + x.sum({-1}, true);
}

TEST(CompileGuards, DtypeRecompilesOnce) {
  auto f = kiln::jit::compile([](const Tensor& x) { return body(x); },
                              {.name = "g", .input_names = {"x"}});
  Tensor a = random_tensor({4, 8}, kiln::kFloat32, "contiguous", 1);
  expect_one_recompile(f, a, a.to(kiln::kFloat64),
                       "g: entry 2/8: input 0 'x' dtype mismatch: expected float32, got float64");
}

TEST(CompileGuards, SizeRecompilesOnceAndTurnsDynamic) {
  auto f = kiln::jit::compile([](const Tensor& x) { return body(x); },
                              {.name = "g", .input_names = {"x"}});
  expect_one_recompile(f, random_tensor({4, 8}, kiln::kFloat32, "contiguous", 1),
                       random_tensor({5, 8}, kiln::kFloat32, "contiguous", 2),
                       "g: entry 2/8: input 0 'x' size mismatch at dim 0: expected 4, got 5; dim 0 "
                       "is dynamic from now on");
}

TEST(CompileGuards, StridesRecompileOnce) {
  auto f = kiln::jit::compile([](const Tensor& x) { return body(x); }, {.name = "g"});
  Tensor a = random_tensor({6, 6}, kiln::kFloat32, "contiguous", 1);
  Tensor b = random_tensor({6, 6}, kiln::kFloat32, "transposed", 2);
  expect_one_recompile(f, a, b, "input 0 stride mismatch: expected [6, 1], got [1, 6]");
}

TEST(CompileGuards, DeviceRecompilesOnce) {
  KILN_REQUIRE_CUDA();
  auto f = kiln::jit::compile([](const Tensor& x) { return body(x); }, {.name = "g"});
  Tensor a = random_tensor({4, 8}, kiln::kFloat32, "contiguous", 1);
  expect_one_recompile(f, a, a.to(kiln::Device::cuda()),
                       "input 0 device mismatch: expected cpu, got cuda");
}

TEST(CompileGuards, ScalarArgumentRecompilesOnce) {
  auto f = kiln::jit::compile([](const Tensor& x, double s) { return x * s; },
                              {.name = "g", .input_names = {"x", "scale"}});
  Tensor x = random_tensor({3, 5}, kiln::kFloat32, "contiguous", 1);
  Logs logs("recompiles");
  Tensor r2 = f(x, 2.0), r3 = f(x, 3.0), r2b = f(x, 2.0);
  const std::string text = logs.take();
  EXPECT_NE(text.find("input 1 'scale' value mismatch: expected 2, got 3"), std::string::npos)
      << text;
  EXPECT_EQ(f.stats().entries, 2);
  kiln::EagerGuard eager;
  EXPECT_TENSOR_CLOSE(r3, x * 3.0);
  EXPECT_TENSOR_CLOSE(r2b, x * 2.0);
}

TEST(CompileGuards, DynamicScalarDoesNotRecompile) {
  auto f = kiln::jit::compile([](const Tensor& x, double s) { return x * s; },
                              {.name = "g", .dynamic_scalars = {1}});
  Tensor x = random_tensor({3, 5}, kiln::kFloat32, "contiguous", 1);
  for (double s : {2.0, 3.0, 4.0}) {
    Tensor r = f(x, s);
    kiln::EagerGuard eager;
    EXPECT_TENSOR_CLOSE(r, x * s);
  }
  EXPECT_EQ(f.stats().entries, 1);
  EXPECT_EQ(f.stats().specializations, 2);
}

struct Model {
  Tensor w;
};

TEST(CompileGuards, ReplacedWeightRecompilesOnce) {
  Model m{random_tensor({4, 8}, kiln::kFloat32, "contiguous", 7)};
  auto f = kiln::jit::compile([&](const Tensor& x) { return kiln::tanh(x * m.w); }, {.name = "g"});
  Tensor x = random_tensor({4, 8}, kiln::kFloat32, "contiguous", 1);
  Logs logs("recompiles");
  Tensor r1 = f(x);
  m.w.mul_(2.0);  // in place: seen, no recompile
  Tensor r2 = f(x);
  Tensor expected_r2;
  {
    kiln::EagerGuard eager;
    expected_r2 = kiln::tanh(x * m.w);
  }
  m.w = random_tensor({4, 8}, kiln::kFloat32, "contiguous", 8);  // replaced: recompiles
  Tensor r3 = f(x), r4 = f(x);
  const std::string text = logs.take();
  EXPECT_EQ(f.stats().entries, 2) << text;
  EXPECT_NE(text.find("captured tensor (other of op"), std::string::npos) << text;
  EXPECT_NE(text.find("replaced or released"), std::string::npos) << text;
  kiln::EagerGuard eager;
  EXPECT_TENSOR_CLOSE(r2, expected_r2);
  EXPECT_TENSOR_CLOSE(r3, kiln::tanh(x * m.w));
  EXPECT_TENSOR_CLOSE(r4, kiln::tanh(x * m.w));
}

TEST(CompileGuards, AutocastRecompilesOnce) {
  Tensor w = random_tensor({16, 8}, kiln::kFloat32, "contiguous", 3);
  auto f = kiln::jit::compile([&](const Tensor& x) { return kiln::linear(x, w); }, {.name = "g"});
  Tensor x = random_tensor({4, 8}, kiln::kFloat32, "contiguous", 1);
  Logs logs("recompiles");
  Tensor plain = f(x), cast;
  {
    kiln::AutocastGuard amp(kiln::kBFloat16);
    cast = f(x);
    cast = f(x);
  }
  Tensor plain2 = f(x);
  const std::string text = logs.take();
  EXPECT_EQ(f.stats().entries, 2) << text;
  EXPECT_NE(text.find("autocast mismatch: expected off, got bfloat16"), std::string::npos) << text;
  EXPECT_EQ(plain.dtype(), kiln::kFloat32);
  EXPECT_EQ(cast.dtype(), kiln::kBFloat16);
  EXPECT_EQ(plain2.dtype(), kiln::kFloat32);
}

// Sizes 4, 5, 6: two compiles, as in PyTorch; 6 reuses the dynamic entry's
// kernels (a plan for the new size, no kernel compiled).
TEST(CompileGuards, DynamicDimsTwoCompilesForThreeSizes) {
  auto f = kiln::jit::compile([](const Tensor& x) { return body(x); }, {.name = "g"});
  for (int64_t n : {4, 5, 6, 5}) {
    Tensor x = random_tensor({n, 8}, kiln::kFloat32, "contiguous", static_cast<uint64_t>(n));
    Tensor r = f(x);
    kiln::EagerGuard eager;
    SCOPED_TRACE("size " + std::to_string(n));
    EXPECT_TENSOR_CLOSE(r, body(x));
  }
  EXPECT_EQ(f.stats().entries, 2);
  EXPECT_EQ(f.stats().specializations, 1);
  // 0 and 1 stay specialized.
  Tensor one = random_tensor({1, 8}, kiln::kFloat32, "contiguous", 9);
  (void)f(one);
  EXPECT_EQ(f.stats().entries, 3);
}

TEST(CompileGuards, MarkedDynamicFromTheFirstCompile) {
  auto f = kiln::jit::compile([](const Tensor& x) { return body(x); },
                              {.name = "g", .dynamic = {{0, -2}}});
  for (int64_t n : {4, 5, 6}) {
    Tensor x = random_tensor({n, 8}, kiln::kFloat32, "contiguous", static_cast<uint64_t>(n));
    Tensor r = f(x);
    kiln::EagerGuard eager;
    EXPECT_TENSOR_CLOSE(r, body(x));
  }
  EXPECT_EQ(f.stats().entries, 1);
}

TEST(CompileGuards, CacheLimitRunsUncompiledAndSaysSoOnce) {
  auto f = kiln::jit::compile([](const Tensor& x) { return body(x); },
                              {.name = "g", .cache_limit = 2, .automatic_dynamic = false});
  Logs logs("");
  for (kiln::DType t : {kiln::kFloat32, kiln::kFloat64, kiln::kFloat16, kiln::kBFloat16}) {
    Tensor x = random_tensor({4, 8}, t, "contiguous", 1);
    Tensor r = f(x);
    kiln::EagerGuard eager;
    EXPECT_TENSOR_CLOSE(r, body(x));
  }
  const std::string text = logs.take();
  EXPECT_EQ(count_of(text,
                     "g: cache limit of 2 entries reached; last guard failure: input 0 dtype "
                     "mismatch"),
            1)
      << text;
  EXPECT_EQ(f.stats().entries, 2);
  EXPECT_EQ(f.stats().uncompiled_calls, 2);
}

TEST(CompileGuards, CacheLimitThrows) {
  auto f =
      kiln::jit::compile([](const Tensor& x) { return body(x); },
                         {.name = "g", .cache_limit = 1, .on_limit = kiln::jit::OnLimit::Throw});
  (void)f(random_tensor({4, 8}, kiln::kFloat32, "contiguous", 1));
  EXPECT_KILN_ERROR(f(random_tensor({4, 8}, kiln::kFloat64, "contiguous", 1)),
                    "[jit::compile] g: cache limit of 1 entries reached");
}

// A branch on a host variable changes the trace: verify mode says where.
TEST(CompileGuards, VerifyCatchesHostControlFlow) {
  bool flag = true;
  auto f = kiln::jit::compile(
      [&](const Tensor& x) { return flag ? kiln::exp(x) + 1.0 : kiln::exp(x) * 2.0; },
      {.name = "g", .verify = true});
  Tensor x = random_tensor({4, 8}, kiln::kFloat32, "contiguous", 1);
  (void)f(x);
  (void)f(x);
  flag = false;
  EXPECT_KILN_ERROR(f(x), "verify: the function's trace differs from the cached entry 1 at op 1");
  EXPECT_EQ(f.stats().verified, 2);
}

// A value read on the host while tracing: the entry runs uncompiled, exactly.
TEST(CompileGuards, GraphBreakFallsBackAndIsLogged) {
  auto f = kiln::jit::compile(
      [](const Tensor& x) {
        Tensor y = kiln::exp(x);
        const double s = kiln::sum(y).item<double>();
        return y * s;
      },
      {.name = "g"});
  Logs logs("recompiles");
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    Tensor x = random_tensor({4, 8}, kiln::kFloat32, "strided", seed, -1, 1);
    Tensor r = f(x);
    kiln::EagerGuard eager;
    Tensor y = kiln::exp(x);
    EXPECT_TENSOR_CLOSE(r, y * kiln::sum(y).item<double>());
  }
  const std::string text = logs.take();
  EXPECT_NE(text.find("g: entry 1/8: graph break: the value of op 1 'sum"), std::string::npos)
      << text;
  EXPECT_NE(text.find("runs uncompiled"), std::string::npos) << text;
  EXPECT_EQ(f.stats().graph_breaks, 1);
  EXPECT_EQ(f.stats().uncompiled_calls, 2);
}

TEST(CompileGuards, ReadingAnArgumentIsAGraphBreak) {
  auto f = kiln::jit::compile(
      [](const Tensor& x) { return x[0][0].item<float>() > 0 ? x + 1.0 : x - 1.0; }, {.name = "g"});
  Logs logs("recompiles");
  Tensor pos = kiln::full({2, 2}, 1.0), neg = kiln::full({2, 2}, -1.0);
  Tensor a = f(pos), b = f(neg);
  const std::string text = logs.take();
  EXPECT_NE(text.find("graph break: the value of input 0 was read on the host"), std::string::npos)
      << text;
  kiln::EagerGuard eager;
  EXPECT_TENSOR_CLOSE(a, pos + 1.0);
  EXPECT_TENSOR_CLOSE(b, neg - 1.0);
}

TEST(CompileGuards, EagerModeIsAnEntryOfItsOwn) {
  auto f = kiln::jit::compile([](const Tensor& x) { return body(x); }, {.name = "g"});
  Tensor x = random_tensor({4, 8}, kiln::kFloat32, "contiguous", 1);
  Tensor lazy = f(x), eager;
  {
    kiln::EagerGuard g;
    eager = f(x);
    eager = f(x);
  }
  EXPECT_EQ(f.stats().entries, 2);
  EXPECT_EQ(f.stats().uncompiled_calls, 2);
  kiln::EagerGuard g;
  EXPECT_TENSOR_CLOSE(lazy, eager);
}

TEST(CompileGuards, GuardsAreLogged) {
  auto f = kiln::jit::compile([](const Tensor& x, int64_t k) { return x * static_cast<double>(k); },
                              {.name = "g", .input_names = {"x", "k"}});
  Logs logs("guards");
  (void)f(random_tensor({4, 8}, kiln::kFloat32, "contiguous", 1), 3);
  const std::string text = logs.take();
  EXPECT_NE(
      text.find("[kiln guards] g: entry 1: input 0 'x': float32 on cpu, sizes [4, 8], strides "
                "[8, 1]"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("input 1 'k': == 3"), std::string::npos) << text;
}

}  // namespace
