// The reduction engine beyond what the PyTorch oracle covers: accuracy of long
// float sums against a double reference, eager 16-bit sums against the
// generated (lazy) kernels, the parallel schedules (split reductions,
// outer-reduction blocks) against a single-thread run, and Meta kernels
// giving the CPU kernels' sizes and dtypes.

#include <tbb/task_arena.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "jit/codegen_cpu/reduce_cpu.h"
#include "runtime/cpu/reduce_math.h"
#include "tests/support/testing.h"

namespace kiln {
namespace {

std::vector<float> uniform(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

Tensor from_vector(const std::vector<float>& v, IntArrayRef sizes) {
  return from_data(v.data(), sizes, kFloat32);
}

// Exact-enough reference: Kahan-Babuska summation in double.
double reference_sum(const float* p, int64_t n, int64_t stride = 1) {
  double s = 0, c = 0;
  for (int64_t i = 0; i < n; ++i) {
    double x = p[i * stride];
    double t = s + x;
    c += std::fabs(s) >= std::fabs(x) ? (s - t) + x : (x - t) + s;
    s = t;
  }
  return s + c;
}

void expect_rel(double actual, double expected, double rtol, const char* what) {
  EXPECT_LE(std::fabs(actual - expected), rtol * std::fabs(expected))
      << what << ": expected " << expected << ", got " << actual;
}

// Runs `f` in an arena of `threads` workers.
template <class F>
auto in_arena(int threads, F f) {
  tbb::task_arena arena(threads);
  return arena.execute(f);
}

TEST(ReduceAccuracy, SixteenMillionFloatsMatchDoubleReference) {
  const int64_t n = int64_t{1} << 24;
  // All positive: a float accumulator would lose every digit past 2^24.
  std::vector<float> v = uniform(n, 0.0f, 1.0f, 1);
  Tensor x = from_vector(v, {n});
  double ref = reference_sum(v.data(), n);
  expect_rel(sum(x).item<double>(), ref, 1.2e-7, "sum");
  expect_rel(mean(x).item<double>(), ref / static_cast<double>(n), 1.2e-7, "mean");
  // Split rows (2 outputs) and columns (outputs interleaved in memory).
  Tensor rows = sum(x.view({2, n / 2}), {1});
  expect_rel(rows.tolist<float>()[0], reference_sum(v.data(), n / 2), 1.2e-7, "row 0");
  expect_rel(rows.tolist<float>()[1], reference_sum(v.data() + n / 2, n / 2), 1.2e-7, "row 1");
  Tensor cols = sum(x.view({n / 2, 2}), {0});
  expect_rel(cols.tolist<float>()[1], reference_sum(v.data() + 1, n / 2, 2), 1.2e-7, "col 1");
  // A strided view: every fourth element.
  Tensor strided = x.as_strided({n / 4}, {4}, 3);
  expect_rel(sum(strided).item<double>(), reference_sum(v.data() + 3, n / 4, 4), 1.2e-7, "strided");
}

TEST(ReduceAccuracy, LongHalfMeanMatchesDoubleReference) {
  const int64_t n = int64_t{1} << 22;
  std::vector<float> v = uniform(n, 0.0f, 1.0f, 2);
  Tensor x = from_vector(v, {n}).to(kFloat16);
  std::vector<float> rounded = x.to(kFloat32).tolist<float>();
  double ref = reference_sum(rounded.data(), n) / static_cast<double>(n);
  expect_rel(mean(x).item<double>(), ref, 1e-3, "float16 mean");
  expect_rel(mean(x.to(kBFloat16)).item<double>(), ref, 8e-3, "bfloat16 mean");
}

// Note [Reduction accumulators]: a mean or norm whose value fits its dtype is
// finite though the sum (or a square) before it would not be, where PyTorch
// 1.13 rounds that intermediate and gives inf (or 0 from the row norms). The
// sum itself is rounded to its dtype when stored, and overflows.
TEST(ReduceAccuracy, IntermediatesPastTheDtypeDoNotOverflow) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<EagerGuard> eager;
    if (!lazy) eager.emplace();
    const Tensor h = full({100}, 1000, TensorOptions(kFloat16));
    EXPECT_EQ(mean(h).item<double>(), 1000.0);   // PyTorch: inf
    EXPECT_EQ(sum(h).item<double>(), INFINITY);  // PyTorch: inf
    EXPECT_EQ(norm(full({100}, 300, TensorOptions(kFloat16))).item<double>(), 3000.0);  // inf
    const Tensor f = tensor({1e30f, -1e30f, 3.0f});
    expect_rel(norm(f).item<double>(), std::sqrt(2.0) * 1e30, 1e-6, "norm");  // PyTorch: inf
    std::vector<float> ln = layer_norm(f, {3}).tolist<float>();               // PyTorch: [0, 0, 0]
    std::vector<float> rms = rms_norm(f, {3}).tolist<float>();  // PyTorch 2.4: [0, -0, 0]
    for (const std::vector<float>* r : {&ln, &rms}) {
      expect_rel((*r)[0], std::sqrt(1.5), 1e-6, "row norm [0]");
      expect_rel((*r)[1], -std::sqrt(1.5), 1e-6, "row norm [1]");
      EXPECT_LT(std::fabs((*r)[2]), 1e-29f);
    }
  }
}

// Note [Reduction accumulators]: bfloat16 has float32's exponent range, and
// its sums accumulate in double, so a sum or mean whose value fits is what
// every mode and layout gives (a float accumulator made the sum nan and the
// mean inf eagerly, where the generated kernels gave inf and 3e38).
TEST(ReduceAccuracy, BFloat16SumsPastFloatRange) {
  const float inf = std::numeric_limits<float>::infinity();
  const float big = static_cast<float>(BFloat16(3e38f));
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<EagerGuard> eager;
    if (!lazy) eager.emplace();
    const Tensor a = tensor({-3e38f, -3e38f, inf, 1.0f}).to(kBFloat16);
    EXPECT_EQ(sum(a).item<float>(), inf);
    EXPECT_EQ(sum(stack({a, a}, 1).select(1, 0)).item<float>(), inf);  // strided
    const Tensor b = full({4}, 3e38, TensorOptions(kBFloat16));
    EXPECT_EQ(mean(b).item<float>(), big);
    EXPECT_EQ(mean(b.narrow(0, 0, 1).expand({4})).item<float>(), big);  // expanded
    EXPECT_EQ(sum(b).item<float>(), inf);  // the sum overflows when stored
    std::vector<float> cols = mean(full({4, 3}, 3e38, TensorOptions(kBFloat16)), {0})
                                  .to(kFloat32)
                                  .tolist<float>();  // outer
    for (float c : cols) EXPECT_EQ(c, big);
  }
}

// Distance between two values of a 16-bit dtype, in its units in the last place.
int64_t ulps16(float a, float b, DType dtype) {
  auto key = [&](float f) -> int64_t {
    const uint16_t bits = dtype == kFloat16 ? Half(f).bits : BFloat16(f).bits;
    return (bits & 0x8000) != 0 ? -static_cast<int64_t>(bits & 0x7fff) : bits;
  };
  return std::abs(key(a) - key(b));
}

// Note [Reduction accumulators]: eager 16-bit sums accumulate in double on
// every schedule, as the generated kernels do, so eager and lazy agree on
// long inputs in every layout. float16 bit for bit: a double sum of float16
// values is exact while its partial sums stay below 2^29, so the order each
// path adds in does not matter. bfloat16 within one ulp: its values span
// more bits than a double holds, each path's sum rounds in its own order,
// and the result can then round to either 16-bit neighbour.
TEST(ReduceAccuracy, SixteenBitSumsMatchLazyInEveryLayout) {
  const int64_t n = int64_t{1} << 22;
  using Reduction = std::function<Tensor(const Tensor&)>;
  struct Case {
    const char* name;
    Tensor x;
    Reduction f;
  };
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<Case> cases;
    {
      EagerGuard g;
      // Positive values, so a serial float accumulator would drift far from the sum.
      auto values = [&](IntArrayRef sizes, const char* layout) {
        return testing::random_tensor(sizes, dt, layout, 7, 0, 1);
      };
      const Tensor dense = values({n}, "contiguous");
      auto all_sum = [](const Tensor& t) { return sum(t); };
      auto all_mean = [](const Tensor& t) { return mean(t); };
      cases = {
          {"contiguous sum", dense, all_sum},
          {"contiguous mean", dense, all_mean},
          {"rows", dense.view({4, n / 4}), [](const Tensor& t) { return sum(t, {1}); }},
          {"strided", values({n}, "strided"), all_mean},
          {"transposed rows", values({8, n / 8}, "transposed"),
           [](const Tensor& t) { return mean(t, {1}); }},
          {"expanded", values({n}, "expanded"), all_mean},
          {"expanded 0.1", full({1}, 0.1, TensorOptions(dt)).expand({n}), all_mean},
          {"outer", values({n / 8, 8}, "contiguous"), [](const Tensor& t) { return mean(t, {0}); }},
          {"outer sum", values({n / 64, 64}, "contiguous"),
           [](const Tensor& t) { return sum(t, {0}); }},
      };
    }
    for (const Case& c : cases) {
      SCOPED_TRACE(c.name);
      const int64_t before = jit::cpu::cpu_reductions_run();
      const Tensor r = c.f(c.x);
      sync();
      EXPECT_GT(jit::cpu::cpu_reductions_run(), before) << "lazy did not run generated code";
      std::vector<float> lazy;
      {
        EagerGuard g;  // the 16-bit result as stored, not a cast fused into it
        lazy = r.to(kFloat32).tolist<float>();
      }
      // One worker reduces serially; four split a long reduction into chunks.
      for (int threads : {1, 4}) {
        const std::vector<float> eager = in_arena(threads, [&] {
          EagerGuard g;
          return c.f(c.x).to(kFloat32).tolist<float>();
        });
        ASSERT_EQ(eager.size(), lazy.size());
        for (size_t i = 0; i < eager.size(); ++i) {
          EXPECT_LE(ulps16(eager[i], lazy[i], dt), dt == kFloat16 ? 0 : 1)
              << threads << " threads, index " << i << ": lazy " << lazy[i] << ", eager "
              << eager[i];
        }
      }
    }
    // The mean of a constant is the constant, however long.
    EagerGuard g;
    const float v = full({1}, 0.1, TensorOptions(dt)).item<float>();
    EXPECT_EQ(mean(full({1}, 0.1, TensorOptions(dt)).expand({n})).item<float>(), v);
    EXPECT_EQ(mean(full({n / 8, 8}, 0.1, TensorOptions(dt)), {0})[3].item<float>(), v);
  }
}

TEST(ReduceAccuracy, LongVarianceAndCumsum) {
  const int64_t n = 3'000'000;
  std::vector<float> v = uniform(n, 1000.0f, 1001.0f, 3);  // large mean: catastrophic if naive
  Tensor x = from_vector(v, {n});
  double mu = reference_sum(v.data(), n) / static_cast<double>(n), m2 = 0;
  for (float f : v) m2 += (f - mu) * (f - mu);
  expect_rel(var(x).item<double>(), m2 / static_cast<double>(n - 1), 1e-6, "var");
  expect_rel(std(x, {}, 0).item<double>(), std::sqrt(m2 / static_cast<double>(n)), 1e-6, "std");
  std::vector<float> c = cumsum(x, 0).tolist<float>();
  expect_rel(c.back(), reference_sum(v.data(), n), 1.2e-7, "cumsum last");
}

TEST(ReduceAccuracy, LogsumexpExpIsAccurate) {
  double worst = 0;
  for (int i = 0; i <= 1'000'000; ++i) {
    float x = -90.0f * static_cast<float>(i) / 1e6f;
    double ref = std::exp(static_cast<double>(x));
    double got = cpu::exp_nonpositive(x);
    if (x >= -87.0f) worst = std::max(worst, std::fabs(got - ref) / ref);
    EXPECT_LE(got, 1.7e-38 + ref * (1 + 1e-6)) << "x = " << x;
  }
  EXPECT_LE(worst, 3e-7);
  EXPECT_EQ(cpu::exp_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(cpu::exp_nonpositive(-0.0f), 1.0f);
  EXPECT_LT(cpu::exp_nonpositive(-std::numeric_limits<float>::infinity()), 1e-37f);
}

TEST(ReduceParallel, SplitReductionMatchesSingleThread) {
  const int64_t n = 5'000'003;
  std::vector<float> v = uniform(n, -1.0f, 1.0f, 4);
  v[17] = v[3'000'000] = v[4'999'999] = 5.0f;  // ties in different chunks: first wins
  v[123] = v[2'500'000] = -7.0f;
  Tensor x = from_vector(v, {n});
  using Op = std::function<std::vector<Tensor>(const Tensor&)>;
  std::vector<std::pair<const char*, Op>> ops = {
      {"sum", [](const Tensor& t) { return std::vector<Tensor>{sum(t)}; }},
      {"amax", [](const Tensor& t) { return std::vector<Tensor>{amax(t)}; }},
      {"argmax", [](const Tensor& t) { return std::vector<Tensor>{argmax(t)}; }},
      {"argmin", [](const Tensor& t) { return std::vector<Tensor>{argmin(t)}; }},
      {"max.dim",
       [](const Tensor& t) {
         auto [v, i] = max(t, 0);
         return std::vector<Tensor>{v, i};
       }},
      {"var", [](const Tensor& t) { return std::vector<Tensor>{var(t)}; }},
      {"logsumexp", [](const Tensor& t) { return std::vector<Tensor>{logsumexp(t, {0})}; }},
      {"norm", [](const Tensor& t) { return std::vector<Tensor>{norm(t, 3)}; }},
      {"any", [](const Tensor& t) { return std::vector<Tensor>{any(gt(t, 4.5))}; }},
      {"all", [](const Tensor& t) { return std::vector<Tensor>{all(lt(t, 4.5))}; }},
      {"rows",
       [](const Tensor& t) {
         return std::vector<Tensor>{sum(t.narrow(0, 0, n - 3).view({4, -1}), {1})};
       }},
  };
  for (auto& [name, op] : ops) {
    std::vector<Tensor> one = in_arena(1, [&] { return op(x); });
    std::vector<Tensor> many = in_arena(4, [&] { return op(x); });
    ASSERT_EQ(one.size(), many.size());
    for (size_t k = 0; k < one.size(); ++k) {
      std::string msg = testing::compare(many[k], one[k], {1e-6, 1e-6});
      EXPECT_TRUE(msg.empty()) << name << ": " << msg;
    }
  }
  EXPECT_EQ(argmax(x).item<int64_t>(), 17);
  EXPECT_EQ(argmin(x).item<int64_t>(), 123);
  EXPECT_EQ(std::get<1>(max(x, 0)).item<int64_t>(), 17);
  EXPECT_FALSE(all(lt(x, 4.5)).item<bool>());
  // NaN: the first one wins, whichever chunk reduces it.
  v[4'000'000] = v[2'000'001] = std::nanf("");
  Tensor y = from_vector(v, {n});
  EXPECT_EQ(in_arena(4, [&] { return argmax(y); }).item<int64_t>(), 2'000'001);
  EXPECT_EQ(in_arena(4, [&] { return argmin(y); }).item<int64_t>(), 2'000'001);
  EXPECT_TRUE(std::isnan(in_arena(4, [&] { return amax(y); }).item<double>()));
  EXPECT_TRUE(std::isnan(in_arena(4, [&] { return sum(y); }).item<double>()));
}

TEST(ReduceParallel, OuterReductionBlocksMatchReference) {
  // Summing dim 0 of a row-major matrix takes the blocked schedule; 37 and
  // 70 columns leave partial blocks.
  for (int64_t cols : {37, 70, 1}) {
    const int64_t rows = 3001;
    std::vector<float> v = uniform(rows * cols, -2.0f, 2.0f, 5);
    Tensor x = from_vector(v, {rows, cols});
    std::vector<float> got = in_arena(4, [&] { return sum(x, {0}); }).tolist<float>();
    std::vector<int64_t> arg = in_arena(4, [&] { return argmax(x, 0); }).tolist<int64_t>();
    for (int64_t j = 0; j < cols; ++j) {
      expect_rel(got[j], reference_sum(v.data() + j, rows, cols), 1e-5, "column sum");
      int64_t best = 0;
      for (int64_t i = 1; i < rows; ++i) {
        if (v[i * cols + j] > v[best * cols + j]) best = i;
      }
      EXPECT_EQ(arg[j], best) << "column " << j;
    }
  }
}

TEST(ReduceSort, UnstableSortOfTiesIsAPermutationInOrder) {
  std::vector<float> v = uniform(5000, 0.0f, 4.0f, 6);
  for (float& f : v) f = std::floor(f);
  Tensor x = from_vector(v, {5000});
  auto [values, indices] = sort(x, 0, true);
  std::vector<float> sv = values.tolist<float>();
  std::vector<int64_t> si = indices.tolist<int64_t>();
  std::vector<bool> seen(v.size(), false);
  for (size_t i = 0; i < sv.size(); ++i) {
    ASSERT_GE(si[i], 0);
    ASSERT_LT(si[i], 5000);
    EXPECT_FALSE(seen[si[i]]) << "index " << si[i] << " repeats";
    seen[si[i]] = true;
    EXPECT_EQ(v[si[i]], sv[i]) << "at " << i;
    if (i > 0) {
      EXPECT_GE(sv[i - 1], sv[i]) << "at " << i;
    }
  }
}

// Meta kernels give the CPU kernels' sizes and dtypes.
TEST(ReduceMeta, MetaMatchesCpu) {
  using Op = std::function<std::vector<Tensor>(const Tensor&)>;
  auto one = [](Tensor t) { return std::vector<Tensor>{t}; };
  auto two = [](TensorPair p) { return std::vector<Tensor>{std::get<0>(p), std::get<1>(p)}; };
  std::vector<std::pair<const char*, Op>> ops = {
      {"sum", [&](const Tensor& t) { return one(sum(t)); }},
      {"sum dims",
       [&](const Tensor& t) {
         return one(sum(t, {0, -1}, true));
       }},
      {"sum dtype", [&](const Tensor& t) { return one(sum(t, {1}, false, kFloat64)); }},
      {"mean", [&](const Tensor& t) { return one(mean(t.to(kFloat32), {-1})); }},
      {"prod", [&](const Tensor& t) { return one(prod(t, 1, true)); }},
      {"amax", [&](const Tensor& t) { return one(amax(t, {2})); }},
      {"amin", [&](const Tensor& t) { return one(amin(t, {}, true)); }},
      {"max", [&](const Tensor& t) { return one(max(t)); }},
      {"max.dim", [&](const Tensor& t) { return two(max(t, 1, true)); }},
      {"min.dim", [&](const Tensor& t) { return two(min(t, -1)); }},
      {"argmax", [&](const Tensor& t) { return one(argmax(t, std::nullopt, true)); }},
      {"argmin", [&](const Tensor& t) { return one(argmin(t, 0)); }},
      {"var", [&](const Tensor& t) { return one(var(t.to(kFloat64), {1}, 0, true)); }},
      {"std", [&](const Tensor& t) { return one(std(t.to(kFloat32))); }},
      {"logsumexp",
       [&](const Tensor& t) {
         return one(logsumexp(t, {0, 2}));
       }},
      {"all", [&](const Tensor& t) { return one(all(t)); }},
      {"any.dim", [&](const Tensor& t) { return one(any(t, 1, true)); }},
      {"norm", [&](const Tensor& t) { return one(norm(t.to(kBFloat16), 0.5)); }},
      {"norm.dim", [&](const Tensor& t) { return one(norm(t.to(kFloat32), std::nullopt, {1})); }},
      {"cumsum", [&](const Tensor& t) { return one(cumsum(t, 1)); }},
      {"cumprod", [&](const Tensor& t) { return one(cumprod(t, 0, kFloat64)); }},
      {"sort", [&](const Tensor& t) { return two(sort(t, 1, true)); }},
      {"argsort", [&](const Tensor& t) { return one(argsort(t, 0)); }},
      {"topk", [&](const Tensor& t) { return two(topk(t, 2, -1, false)); }},
  };
  for (DType dt : {kFloat32, kInt32, kUInt8, kBFloat16}) {
    std::vector<float> v = uniform(60, 0.0f, 5.0f, 7);
    Tensor cpu = from_vector(v, {5, 4, 3}).to(dt).permute({2, 1, 0});
    Tensor meta = empty({3, 4, 5}, TensorOptions(dt).device(Device::meta()));
    for (auto& [name, op] : ops) {
      std::vector<Tensor> a, b;
      std::string cpu_error, meta_error;
      try {
        a = op(cpu);
      } catch (const Error& e) {
        cpu_error = e.what();
      }
      try {
        b = op(meta);
      } catch (const Error& e) {
        meta_error = e.what();
      }
      EXPECT_EQ(cpu_error.empty(), meta_error.empty())
          << name << " " << dt << ": cpu error '" << cpu_error << "', meta error '" << meta_error
          << "'";
      ASSERT_EQ(a.size(), b.size()) << name;
      for (size_t k = 0; k < a.size(); ++k) {
        EXPECT_TRUE(b[k].is_meta()) << name;
        EXPECT_EQ(a[k].sizes(), b[k].sizes()) << name << " " << dt << " output " << k;
        EXPECT_EQ(a[k].dtype(), b[k].dtype()) << name << " " << dt << " output " << k;
      }
    }
  }
}

}  // namespace
}  // namespace kiln
