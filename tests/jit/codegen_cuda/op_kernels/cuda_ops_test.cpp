// Generated CUDA op kernels (jit/codegen_cuda/op_kernels/) on a real device against
// the eager CPU kernels: random, non-contiguous, empty and 0-dim inputs,
// float32/float16/bfloat16 and integer dtypes where the op admits them.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>

#include "jit/codegen_cuda/launch_cuda.h"
#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::Tolerance;

Tolerance tol(kiln::DType t) {
  if (t == kiln::kFloat16) return {2e-3, 2e-3};
  if (t == kiln::kBFloat16) return {1.6e-2, 1.6e-2};
  if (t == kiln::kFloat64) return {1e-9, 1e-9};
  if (kiln::is_floating(t)) return {2e-5, 2e-5};  // other summation orders on the GPU
  return {0, 0};
}

// A random tensor of `sizes` in one of the layouts "contiguous", "transposed"
// (the last two dims swapped in memory) or "strided" (every other element of
// the last dim), made on the CPU and moved as its base, then viewed the same
// way on both devices, so the CUDA copy has the layout too.
struct Pair {
  Tensor cpu, cuda;
};
Pair make(kiln::IntArrayRef sizes, kiln::DType dt, const char* layout, uint64_t seed,
          double low = -3, double high = 3) {
  kiln::EagerGuard eager;
  std::string l = layout;
  std::vector<int64_t> s(sizes.begin(), sizes.end());
  if (l == "transposed" && s.size() >= 2) {
    std::swap(s[s.size() - 1], s[s.size() - 2]);
    Tensor base = kiln::testing::random_tensor(s, dt, "contiguous", seed, low, high);
    const int64_t n = static_cast<int64_t>(s.size());
    return {base.transpose(n - 1, n - 2), base.cuda().transpose(n - 1, n - 2)};
  }
  if (l == "strided" && !s.empty()) {
    s.back() *= 2;
    Tensor base = kiln::testing::random_tensor(s, dt, "contiguous", seed, low, high);
    const int64_t last = static_cast<int64_t>(s.size()) - 1;
    return {base.slice(last, 0, std::nullopt, 2), base.cuda().slice(last, 0, std::nullopt, 2)};
  }
  Tensor base = kiln::testing::random_tensor(sizes, dt, "contiguous", seed, low, high);
  return {base, base.cuda()};
}

// Runs `f` eagerly on both devices and compares.
void check(const std::string& what, const std::function<Tensor(bool)>& f, Tolerance t) {
  kiln::EagerGuard eager;
  Tensor expected;
  try {
    expected = f(false);
  } catch (const kiln::Error& e) {
    // What the CPU kernel refuses (as PyTorch 1.13 does), CUDA may compute;
    // it must not crash either way.
    try {
      f(true);
    } catch (const kiln::Error&) {
    }
    return;
  }
  Tensor got = f(true);
  ASSERT_TRUE(got.is_cuda()) << what;
  std::string msg = kiln::testing::compare(got.cpu(), expected, t);
  EXPECT_TRUE(msg.empty()) << what << ": " << msg;
}

const char* const kLayouts[] = {"contiguous", "transposed", "strided"};
const kiln::DType kFloats[] = {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16, kiln::kFloat64};

TEST(CudaOps, SoftmaxAndLogSoftmax) {
  KILN_REQUIRE_CUDA();
  const std::vector<std::vector<int64_t>> shapes = {{7, 33}, {4, 5000}, {3, 9000}, {2, 3, 4},
                                                    {0, 5},  {5},       {}};
  int seed = 0;
  for (kiln::DType dt : kFloats) {
    for (const auto& s : shapes) {
      for (const char* layout : kLayouts) {
        Pair x = make(s, dt, layout, ++seed, -8, 8);
        for (int64_t dim : {int64_t{0}, int64_t{-1}}) {
          for (bool log : {false, true}) {
            check(
                std::string(log ? "log_softmax " : "softmax ") + kiln::dtype_name(dt) + " " +
                    layout + " dim " + std::to_string(dim),
                [&](bool gpu) {
                  const Tensor& in = gpu ? x.cuda : x.cpu;
                  return log ? kiln::log_softmax(in, dim) : kiln::softmax(in, dim);
                },
                tol(dt));
          }
        }
      }
    }
  }
  // dtype= converts first; -inf and NaN rows.
  Pair x = make({4, 6}, kiln::kFloat16, "contiguous", 99);
  check(
      "softmax dtype=float32",
      [&](bool gpu) { return kiln::softmax(gpu ? x.cuda : x.cpu, 1, kiln::kFloat32); },
      tol(kiln::kFloat16));
  kiln::EagerGuard eager;
  Tensor special = kiln::full({3, 4}, -INFINITY);
  special.select(0, 1).fill_(NAN);
  special.select(0, 2).fill_(1.0);
  check(
      "softmax of -inf/NaN rows",
      [&](bool gpu) { return kiln::softmax(gpu ? special.cuda() : special, 1); },
      tol(kiln::kFloat32));
}

TEST(CudaOps, LayerNormAndRmsNorm) {
  KILN_REQUIRE_CUDA();
  int seed = 100;
  for (kiln::DType dt : kFloats) {
    for (std::vector<int64_t> s : {std::vector<int64_t>{6, 64}, {3, 4, 10}, {2, 12000}, {0, 8}}) {
      for (const char* layout : kLayouts) {
        Pair x = make(s, dt, layout, ++seed);
        std::vector<int64_t> shape = {s.back()};
        if (s.size() == 3) shape = {s[1], s[2]};
        Pair w = make(shape, dt, "contiguous", ++seed), b = make(shape, dt, "strided", ++seed);
        const std::string what = std::string(kiln::dtype_name(dt)) + " " + layout;
        check(
            "layer_norm " + what,
            [&](bool g) {
              return kiln::layer_norm(g ? x.cuda : x.cpu, shape, g ? w.cuda : w.cpu,
                                      g ? b.cuda : b.cpu, 1e-5);
            },
            tol(dt));
        check(
            "layer_norm no affine " + what,
            [&](bool g) {
              return kiln::layer_norm(g ? x.cuda : x.cpu, shape, std::nullopt, std::nullopt, 1e-5);
            },
            tol(dt));
        check(
            "rms_norm " + what,
            [&](bool g) {
              return kiln::rms_norm(g ? x.cuda : x.cpu, shape, g ? w.cuda : w.cpu, 1e-6);
            },
            tol(dt));
        check(
            "rms_norm default eps " + what,
            [&](bool g) {
              return kiln::rms_norm(g ? x.cuda : x.cpu, shape, std::nullopt, std::nullopt);
            },
            tol(dt));
      }
    }
  }
  // A float32 weight promotes a bfloat16 input's result to float32.
  Pair x = make({5, 16}, kiln::kBFloat16, "contiguous", 7),
       w = make({16}, kiln::kFloat32, "contiguous", 8);
  check(
      "rms_norm bf16 x f32 weight",
      [&](bool g) { return kiln::rms_norm(g ? x.cuda : x.cpu, {16}, g ? w.cuda : w.cpu, 1e-6); },
      tol(kiln::kBFloat16));
}

TEST(CudaOps, Reductions) {
  KILN_REQUIRE_CUDA();
  const std::vector<std::vector<int64_t>> dims = {{}, {0}, {1}, {-1}, {0, 2}};
  int seed = 200;
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16, kiln::kFloat64,
                         kiln::kInt32, kiln::kInt64, kiln::kBool}) {
    const bool fl = kiln::is_floating(dt);
    for (std::vector<int64_t> s : {std::vector<int64_t>{5, 37, 6}, {3, 2000, 2}, {4, 0, 3}}) {
      for (const char* layout : kLayouts) {
        Pair x = make(s, dt, layout, ++seed, fl ? -3 : -5, fl ? 3 : 6);
        const bool empty = x.cpu.numel() == 0;
        Tolerance t = tol(dt);
        if (fl) t = {t.rtol * 4, t.atol * 4 + 1e-4 * (dt == kiln::kFloat32)};
        for (const auto& d : dims) {
          for (bool keep : {false, true}) {
            const std::string what = std::string(kiln::dtype_name(dt)) + " " + layout + " dims " +
                                     std::to_string(d.size()) + (keep ? " keepdim" : "");
            auto in = [&](bool g) { return g ? x.cuda : x.cpu; };
            if (dt != kiln::kBool) {
              check(
                  "sum " + what, [&](bool g) { return kiln::sum(in(g), d, keep); },
                  fl ? t : tol(kiln::kInt64));
              check(
                  "amax " + what,
                  [&](bool g) {
                    if (empty) return kiln::sum(in(g), d, keep);  // amax refuses empty reductions
                    return kiln::amax(in(g), d, keep);
                  },
                  t);
            }
            if (fl) {
              check(
                  "mean " + what, [&](bool g) { return kiln::mean(in(g), d, keep); }, t);
              check(
                  "var " + what, [&](bool g) { return kiln::var(in(g), d, 1, keep); }, t);
              check(
                  "std " + what, [&](bool g) { return kiln::std(in(g), d, 0, keep); }, t);
              if (!d.empty() || keep) {  // PyTorch 1.13 refuses an empty dim list without keepdim
                check(
                    "logsumexp " + what, [&](bool g) { return kiln::logsumexp(in(g), d, keep); },
                    t);
              }
              for (double p : {0.0, 1.0, 2.0, 3.0, double(INFINITY)}) {
                check(
                    "norm p=" + std::to_string(p) + " " + what,
                    [&](bool g) { return kiln::norm(in(g), kiln::Scalar(p), d, keep); }, t);
              }
            }
          }
        }
        for (int64_t dim : {0, 1, -1}) {
          auto in = [&](bool g) { return g ? x.cuda : x.cpu; };
          const std::string what =
              std::string(kiln::dtype_name(dt)) + " " + layout + " dim " + std::to_string(dim);
          check("all " + what, [&](bool g) { return kiln::all(in(g), dim); }, {0, 0});
          check("any " + what, [&](bool g) { return kiln::any(in(g), dim); }, {0, 0});
          if (x.cpu.size(dim) == 0 || dt == kiln::kBool) continue;
          check(
              "max.dim values " + what, [&](bool g) { return std::get<0>(kiln::max(in(g), dim)); },
              tol(dt));
          check("max.dim indices " + what,
                [&](bool g) { return std::get<1>(kiln::max(in(g), dim)); }, {0, 0});
          check("min.dim indices " + what,
                [&](bool g) { return std::get<1>(kiln::min(in(g), dim, true)); }, {0, 0});
          check("argmax " + what, [&](bool g) { return kiln::argmax(in(g), dim); }, {0, 0});
          check("argmin " + what, [&](bool g) { return kiln::argmin(in(g), dim, true); }, {0, 0});
          if (dt == kiln::kFloat32 || dt == kiln::kFloat64) {
            check("prod " + what, [&](bool g) { return kiln::prod(in(g)*0.5, dim); }, {1e-4, 1e-6});
          }
        }
        if (!empty && dt != kiln::kBool) {
          check("argmax all " + std::string(layout),
                [&](bool g) { return kiln::argmax(g ? x.cuda : x.cpu); }, {0, 0});
          check(
              "max all", [&](bool g) { return kiln::max(g ? x.cuda : x.cpu); }, tol(dt));
          check(
              "min all", [&](bool g) { return kiln::min(g ? x.cuda : x.cpu); }, tol(dt));
        }
      }
    }
  }
  // Integer sums and products accumulate in int64; 0-dim inputs.
  Pair i = make({50, 7}, kiln::kInt32, "transposed", 5, -9, 9);
  check("prod int32", [&](bool g) { return kiln::prod(g ? i.cuda : i.cpu, 1); }, {0, 0});
  check("sum int32 dtype=f32",
        [&](bool g) { return kiln::sum(g ? i.cuda : i.cpu, {0}, false, kiln::kFloat32); },
        {1e-6, 1e-6});
  Pair z = make({}, kiln::kFloat32, "contiguous", 6);
  check(
      "sum 0-dim", [&](bool g) { return kiln::sum(g ? z.cuda : z.cpu); }, tol(kiln::kFloat32));
  check("max.dim 0-dim", [&](bool g) { return std::get<1>(kiln::max(g ? z.cuda : z.cpu, 0)); },
        {0, 0});
  check(
      "var 0-dim", [&](bool g) { return kiln::var(g ? z.cuda : z.cpu); }, tol(kiln::kFloat32));
}

TEST(CudaOps, ArgmaxTiesAndNaN) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  Tensor x = kiln::zeros({3, 3000});
  x.select(0, 1).fill_(2.0);
  x.select(0, 2).narrow(0, 1500, 3).fill_(NAN);
  check("argmax ties", [&](bool g) { return kiln::argmax(g ? x.cuda() : x, 1); }, {0, 0});
  check("amax NaN", [&](bool g) { return kiln::amax(g ? x.cuda() : x, {1}); }, {0, 0});
  check("max.dim NaN index", [&](bool g) { return std::get<1>(kiln::max(g ? x.cuda() : x, 1)); },
        {0, 0});
}

TEST(CudaOps, EmbeddingAndIndexOps) {
  KILN_REQUIRE_CUDA();
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16, kiln::kInt64}) {
    for (const char* layout : kLayouts) {
      Pair w = make({50, 24}, dt, layout, 300);
      Pair ids = make({3, 7}, kiln::kInt64, "contiguous", 301, 0, 50);
      const std::string what = std::string(kiln::dtype_name(dt)) + " " + layout;
      check("embedding " + what,
            [&](bool g) { return kiln::embedding(g ? w.cuda : w.cpu, g ? ids.cuda : ids.cpu); },
            {0, 0});
      Pair idx = make({9}, kiln::kInt64, "strided", 302, 0, 24);
      check(
          "index_select " + what,
          [&](bool g) { return kiln::index_select(g ? w.cuda : w.cpu, 1, g ? idx.cuda : idx.cpu); },
          {0, 0});
      Pair gi = make({50, 5}, kiln::kInt64, "transposed", 303, 0, 24);
      check("gather " + what,
            [&](bool g) { return kiln::gather(g ? w.cuda : w.cpu, 1, g ? gi.cuda : gi.cpu); },
            {0, 0});
      // scatter with distinct targets per row (a permutation) so the result is defined.
      kiln::EagerGuard eager;
      Tensor perm =
          kiln::argsort(kiln::testing::random_tensor({50, 24}, kiln::kFloat32, "contiguous", 304),
                        1)
              .narrow(1, 0, 10);
      Pair src = make({50, 10}, dt, "contiguous", 305);
      check("scatter " + what,
            [&](bool g) {
              return kiln::scatter(g ? w.cuda : w.cpu, 1, g ? perm.cuda() : perm,
                                   g ? src.cuda : src.cpu);
            },
            {0, 0});
      check("scatter value " + what,
            [&](bool g) {
              return kiln::scatter(g ? w.cuda : w.cpu, 1, g ? perm.cuda() : perm, kiln::Scalar(2));
            },
            {0, 0});
      Pair dup = make({50, 30}, kiln::kInt64, "contiguous", 306, 0, 24);
      Pair src2 = make({50, 30}, dt, "contiguous", 307, dt == kiln::kInt64 ? -5 : -1,
                       dt == kiln::kInt64 ? 5 : 1);
      Tolerance addt =
          kiln::is_floating(dt) ? Tolerance{tol(dt).rtol * 4, tol(dt).atol * 4} : Tolerance{0, 0};
      check(
          "scatter_add " + what,
          [&](bool g) {
            return kiln::scatter_add(g ? w.cuda : w.cpu, 1, g ? dup.cuda : dup.cpu,
                                     g ? src2.cuda : src2.cpu);
          },
          addt);
      Pair vals = make({4, 24}, dt, "contiguous", 309);
      kiln::EagerGuard again;
      Tensor ri = kiln::arange(4) * 13;  // distinct rows 0, 13, 26, 39
      check("index_copy " + what,
            [&](bool g) {
              return kiln::index_copy(g ? w.cuda : w.cpu, 0, g ? ri.cuda() : ri,
                                      g ? vals.cuda : vals.cpu);
            },
            {0, 0});
      check("index_copy_ " + what,
            [&](bool g) {
              Tensor target = g ? w.cpu.cuda() : w.cpu.clone();
              kiln::index_copy_(target, 0, g ? ri.cuda() : ri, g ? vals.cuda : vals.cpu);
              return target;
            },
            {0, 0});
    }
  }
}

TEST(CudaOps, IndexBoundsAreChecked) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  Tensor w = kiln::ones({10, 4}).cuda();
  Tensor bad = kiln::arange(9, 11).cuda();  // 9, 10
  EXPECT_KILN_ERROR(kiln::embedding(w, bad), "out of bounds");
  EXPECT_KILN_ERROR(kiln::index_select(w, 0, bad),
                    "index 10 is out of bounds for dimension 0 with size 10");
  Tensor neg = kiln::arange(-1, 0).cuda();
  EXPECT_KILN_ERROR(kiln::index_copy_(w, 0, neg, kiln::ones({1, 4}).cuda()), "out of bounds");
  EXPECT_KILN_ERROR(kiln::index_select(w, 0, kiln::arange(2)), "expected 'index' on cuda");
}

// Note [Direct error slots]: a flag's slot goes back to the pool cleared,
// whether its kernel set it or not. More calls than a slab has slots, bad and
// good ones interleaved, in eager and lazy mode: each bad one raises with its
// own value, no good one raises a stale error, and every good one is right.
TEST(CudaOps, DeviceErrorFlagsAreReused) {
  KILN_REQUIRE_CUDA();
  const Tensor w = kiln::arange(40).to(kiln::kFloat32).view({10, 4}).cuda();
  const Tensor want = kiln::arange(40).to(kiln::kFloat32).view({10, 4}).narrow(0, 2, 3);
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    for (int64_t i = 0; i < 600; ++i) {
      if (i % 3 == 0) {
        const int64_t bad = 10 + i;
        EXPECT_KILN_ERROR(
            kiln::index_select(w, 0, kiln::full({1}, bad, kiln::kInt64).cuda()).cpu(),
            "index " + std::to_string(bad) + " is out of bounds for dimension 0 with size 10");
        EXPECT_KILN_ERROR(kiln::floor_divide(kiln::full({3}, i, kiln::kInt64).cuda(),
                                             kiln::zeros({3}, kiln::kInt64).cuda())
                              .cpu(),
                          "ZeroDivisionError");
      } else {
        SCOPED_TRACE("call " + std::to_string(i));
        EXPECT_TENSOR_CLOSE(kiln::index_select(w, 0, kiln::arange(2, 5).cuda()).cpu(), want);
      }
    }
  }
}

// Note [Device checks at the end of a run]: in one lazy flush, a bad index
// found on the device fails its op's result and everything computed from it,
// including a cache written from it, while work that did not read it keeps
// its values; the same plan compiled in Mode::Default raises at the call.
TEST(CudaOps, DeviceChecksAtTheEndOfARun) {
  KILN_REQUIRE_CUDA();
  const Tensor w = kiln::arange(40).to(kiln::kFloat32).view({10, 4}).cuda();
  const Tensor x = kiln::arange(6).to(kiln::kFloat32).cuda();
  const Tensor good = kiln::tensor(std::vector<int64_t>{1, 3}, {2}).cuda();
  const Tensor bad = kiln::tensor(std::vector<int64_t>{1, 12}, {2}).cuda();
  const std::string error = "index 12 is out of bounds for dimension 0 with size 10";
  Tensor cache = kiln::zeros({4, 4}).cuda(), other = kiln::zeros({4, 4}).cuda();
  Tensor rows = kiln::index_select(w, 0, bad);  // lazy: nothing runs yet
  Tensor doubled = x * 2;                       // reads nothing that fails
  Tensor later = kiln::index_select(w, 0, good) + rows.sum();
  kiln::index_copy_(cache, 0, kiln::arange(2).cuda(), rows + 1);
  kiln::index_copy_(other, 0, kiln::arange(2).cuda(), kiln::index_select(w, 0, good));
  kiln::sync();
  EXPECT_TENSOR_CLOSE(doubled.cpu(), kiln::arange(6).to(kiln::kFloat32) * 2);
  const Tensor w_cpu = kiln::arange(40).to(kiln::kFloat32).view({10, 4});
  EXPECT_TENSOR_CLOSE(other.narrow(0, 0, 2).cpu(),
                      kiln::index_select(w_cpu, 0, kiln::arange(1, 4, 2)));
  EXPECT_KILN_ERROR(rows.cpu(), error);
  EXPECT_KILN_ERROR(later.cpu(), error);
  EXPECT_KILN_ERROR(cache.cpu(), error);
  cache.zero_();  // overwritten whole: usable again
  EXPECT_EQ(cache.sum().item<float>(), 0.f);

  auto f = kiln::jit::compile(
      [&](const Tensor& idx) { return kiln::index_select(w, 0, idx) * 2 + x.sum(); },
      kiln::jit::Options{.name = "late", .mode = kiln::jit::Mode::Default});
  const Tensor want = kiln::index_select(w, 0, good).cpu() * 2 + 15;
  EXPECT_TENSOR_CLOSE(f(good).cpu(), want);
  EXPECT_KILN_ERROR(f(bad), error);
  EXPECT_TENSOR_CLOSE(f(good).cpu(), want);
}

// Note [CUDA ordered scatter_add]: 16-bit floats add in index order, so the
// result equals the CPU's bit for bit, with many additions into each element.
TEST(CudaOps, ScatterAddHalfMatchesCpuExactly) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  for (kiln::DType dt : {kiln::kFloat16, kiln::kBFloat16}) {
    for (int64_t dim : {0, 1}) {
      Pair w = make({40, 36}, dt, "transposed", 310);
      Pair idx = make({40, 30}, kiln::kInt64, "strided", 311, 0, 30);
      Pair src = make({40, 30}, dt, "transposed", 312, -1, 1);
      check(
          "scatter_add exact " + std::string(kiln::dtype_name(dt)) + " dim " + std::to_string(dim),
          [&](bool g) {
            Tensor target = g ? w.cpu.cuda() : w.cpu.clone();
            kiln::scatter_add_(target, dim, g ? idx.cuda : idx.cpu, g ? src.cuda : src.cpu);
            return target;
          },
          {0, 0});
    }
  }
  Tensor w = kiln::zeros({4}, kiln::kBFloat16).cuda();
  EXPECT_KILN_ERROR(
      kiln::scatter_add(w, 0, kiln::arange(3, 5).cuda(), kiln::ones({2}, kiln::kBFloat16).cuda()),
      "index 4 is out of bounds for dimension 0 with size 4");
}

// Note [CUDA masked_fill value]: a device value tensor is checked as the CPU
// checks a number, in eager and in lazy mode; one that fits stays fused.
TEST(CudaOps, MaskedFillValueTensorIsChecked) {
  KILN_REQUIRE_CUDA();
  for (bool lazy : {false, true}) {
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    // A failed lazy in-place op leaves its target unreadable: a fresh x each time.
    auto x8 = [] { return kiln::arange(6).to(kiln::kInt8).cuda(); };
    Tensor mask = (kiln::arange(6) > 2).cuda();
    Tensor big = kiln::full({}, 300, kiln::kInt64).cuda();
    EXPECT_KILN_ERROR(kiln::masked_fill(x8(), mask, big).cpu(),
                      "value 300 cannot be converted to int8 without overflow");
    Tensor target = x8();
    EXPECT_KILN_ERROR(kiln::masked_fill_(target, mask, big).cpu(), "without overflow");
    Tensor x = x8();
    Tensor ok = kiln::masked_fill(x, mask, kiln::full({}, -7, kiln::kInt64).cuda()).cpu();
    EXPECT_TENSOR_CLOSE(ok, kiln::masked_fill(kiln::arange(6).to(kiln::kInt8), kiln::arange(6) > 2,
                                              kiln::Scalar(-7)));
    Tensor f = kiln::arange(6).to(kiln::kFloat32).cuda();
    Tensor fits = kiln::masked_fill(f, mask, kiln::full({}, 2.5, kiln::kFloat16).cuda()).cpu();
    EXPECT_TENSOR_CLOSE(fits, kiln::masked_fill(kiln::arange(6).to(kiln::kFloat32),
                                                kiln::arange(6) > 2, kiln::Scalar(2.5)));
  }
}

// Note [Meta twins]: float16 ops that only the CPU lacks (PyTorch 1.13) run
// on CUDA in eager and in lazy mode, and still raise on the CPU.
TEST(CudaOps, HalfOpsTheCpuLacksRunOnCuda) {
  KILN_REQUIRE_CUDA();
  Tensor ref = kiln::testing::random_tensor({6, 33}, kiln::kFloat32, "contiguous", 320, 0.9, 1.1);
  Tensor h = ref.to(kiln::kFloat16);
  for (bool lazy : {false, true}) {
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    Tensor d = h.cuda();
    Tensor want = h.to(kiln::kFloat32);
    EXPECT_TENSOR_CLOSE_TOL(kiln::cumsum(d, 1).cpu().to(kiln::kFloat32), kiln::cumsum(want, 1),
                            1e-2, 1e-2);
    EXPECT_TENSOR_CLOSE_TOL(kiln::prod(d, 1).cpu().to(kiln::kFloat32), kiln::prod(want, 1), 1e-2,
                            1e-2);
    EXPECT_TENSOR_CLOSE_TOL(kiln::var(d, {1}).cpu().to(kiln::kFloat32), kiln::var(want, {1}), 1e-2,
                            1e-3);
    EXPECT_TENSOR_CLOSE_TOL(std::get<0>(kiln::topk(d, 3, 1)).cpu().to(kiln::kFloat32),
                            std::get<0>(kiln::topk(want, 3, 1)), 0, 0);
    EXPECT_KILN_ERROR(kiln::cumsum(h, 1).cpu(), "not implemented for float16 on cpu");
  }
}

TEST(CudaOps, Cat) {
  KILN_REQUIRE_CUDA();
  Pair a = make({3, 4}, kiln::kFloat32, "transposed", 400),
       b = make({3, 2}, kiln::kFloat16, "contiguous", 401);
  Pair c = make({3, 0}, kiln::kFloat32, "contiguous", 402);
  check(
      "cat dim 1 mixed dtypes",
      [&](bool g) {
        return g ? kiln::cat({a.cuda, b.cuda, c.cuda}, 1) : kiln::cat({a.cpu, b.cpu, c.cpu}, 1);
      },
      tol(kiln::kFloat32));
  Pair d = make({5, 4}, kiln::kFloat32, "strided", 403);
  check("cat dim 0",
        [&](bool g) {
          return g ? kiln::cat({a.cuda, d.cuda}, 0) : kiln::cat({a.cpu, d.cpu}, 0);
        },
        {0, 0});
}

TEST(CudaOps, ScaledDotProductAttention) {
  KILN_REQUIRE_CUDA();
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16}) {
    Pair q = make({2, 3, 5, 16}, dt, "contiguous", 500),
         k = make({2, 3, 7, 16}, dt, "transposed", 501);
    Pair v = make({2, 3, 7, 8}, dt, "contiguous", 502);
    Pair qc = make({2, 3, 7, 16}, dt, "contiguous", 503);
    Pair bm = make({5, 7}, kiln::kBool, "contiguous", 504, 0, 2),
         am = make({3, 1, 7}, dt, "contiguous", 505);
    const std::string what = kiln::dtype_name(dt);
    auto sel = [](const Pair& p, bool g) { return g ? p.cuda : p.cpu; };
    check(
        "sdpa " + what,
        [&](bool g) { return kiln::scaled_dot_product_attention(sel(q, g), sel(k, g), sel(v, g)); },
        tol(dt));
    check(
        "sdpa causal " + what,
        [&](bool g) {
          return kiln::scaled_dot_product_attention(sel(qc, g), sel(k, g), sel(v, g), std::nullopt,
                                                    true);
        },
        tol(dt));
    check(
        "sdpa bool mask " + what,
        [&](bool g) {
          return kiln::scaled_dot_product_attention(sel(q, g), sel(k, g), sel(v, g), sel(bm, g),
                                                    false, 0.3);
        },
        tol(dt));
    check(
        "sdpa additive mask " + what,
        [&](bool g) {
          return kiln::scaled_dot_product_attention(sel(q, g), sel(k, g), sel(v, g), sel(am, g));
        },
        tol(dt));
  }
}

TEST(CudaOps, CumsumCumprodTrilTriu) {
  KILN_REQUIRE_CUDA();
  int seed = 600;
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat64, kiln::kInt32, kiln::kInt64}) {
    for (const char* layout : kLayouts) {
      for (std::vector<int64_t> s : {std::vector<int64_t>{6, 45}, {3, 4, 5}, {0, 3}}) {
        Pair x = make(s, dt, layout, ++seed, -2, 2);
        const std::string what = std::string(kiln::dtype_name(dt)) + " " + layout;
        Tolerance t = kiln::is_floating(dt) ? Tolerance{1e-4, 1e-5} : Tolerance{0, 0};
        for (int64_t dim : {0, -1}) {
          check(
              "cumsum " + what, [&](bool g) { return kiln::cumsum(g ? x.cuda : x.cpu, dim); }, t);
          check(
              "cumprod " + what, [&](bool g) { return kiln::cumprod(g ? x.cuda : x.cpu, dim); }, t);
        }
        for (int64_t diag : {-1, 0, 2}) {
          check("tril " + what, [&](bool g) { return kiln::tril(g ? x.cuda : x.cpu, diag); },
                {0, 0});
          check("triu " + what, [&](bool g) { return kiln::triu(g ? x.cuda : x.cpu, diag); },
                {0, 0});
        }
      }
    }
  }
}

TEST(CudaOps, KernelsCompileOncePerSpec) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  Tensor x = kiln::ones({8, 100}).cuda();
  (void)kiln::softmax(x, 1).cpu();
  auto before = kiln::jit::cuda::cuda_kernel_stats();
  for (int i = 0; i < 3; ++i) (void)kiln::softmax(x, 1).cpu();
  auto after = kiln::jit::cuda::cuda_kernel_stats();
  EXPECT_EQ(after.compiled, before.compiled);
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  EXPECT_GE(after.launches - before.launches, 3);
}

}  // namespace
