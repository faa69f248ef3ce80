// sort, argsort and topk, the remap ops (roll, flip, repeat, constant_pad_nd),
// range factories and out= forms on a CUDA device against the eager CPU
// kernels: every dtype the CPU kernel admits, non-contiguous, empty and 0-dim
// inputs, ties and NaNs, and lines longer than one shared-memory tile (Note
// [CUDA sort]). Sort results are compared exactly, indices included: the
// order is total (Note [Sort order]).

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::Tolerance;

const kiln::DType kAll[] = {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16, kiln::kFloat64,
                            kiln::kInt64,   kiln::kInt32,   kiln::kInt16,    kiln::kInt8,
                            kiln::kUInt8,   kiln::kBool};

struct Pair {
  Tensor cpu, cuda;
};

// A random tensor (values rounded to few distinct ones when `ties`, a NaN in
// every fifth element of float dtypes when `nans`) in `layout`, the same on
// both devices.
Pair make(std::vector<int64_t> sizes, kiln::DType dt, const std::string& layout, uint64_t seed,
          bool ties, bool nans) {
  kiln::EagerGuard eager;
  std::vector<int64_t> s = sizes;
  if (layout == "transposed" && s.size() >= 2) std::swap(s[s.size() - 1], s[s.size() - 2]);
  if (layout == "strided" && !s.empty()) s.back() *= 2;
  Tensor base = kiln::testing::random_tensor(s, kiln::kFloat64, "contiguous", seed, -4, 4);
  if (ties) base = kiln::round(base, 0);
  if (nans && kiln::is_floating(dt) && base.numel() > 0) {
    Tensor flat = base.reshape({base.numel()});
    flat.slice(0, 0, std::nullopt, 5).fill_(NAN);
  }
  base = base.to(dt);
  Tensor g = base.cuda();
  const int64_t n = static_cast<int64_t>(s.size());
  if (layout == "transposed" && n >= 2)
    return {base.transpose(n - 1, n - 2), g.transpose(n - 1, n - 2)};
  if (layout == "strided" && n >= 1) {
    return {base.slice(n - 1, 0, std::nullopt, 2), g.slice(n - 1, 0, std::nullopt, 2)};
  }
  return {base, g};
}

// Runs `f` eagerly on both devices; outputs compare exactly unless `t` says
// otherwise. An error on the CPU must be an error on CUDA too.
void check(const std::string& what, const std::function<std::vector<Tensor>(bool)>& f,
           Tolerance t = {0, 0}) {
  kiln::EagerGuard eager;
  std::vector<Tensor> expected;
  try {
    expected = f(false);
  } catch (const kiln::Error&) {
    EXPECT_THROW(f(true), kiln::Error) << what << ": the CPU refuses, CUDA did not";
    return;
  }
  std::vector<Tensor> got = f(true);
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].is_cuda() || got[i].numel() == 0) << what << " output " << i;
    std::string msg = kiln::testing::compare(got[i].cpu(), expected[i], t);
    EXPECT_TRUE(msg.empty()) << what << " output " << i << ": " << msg;
  }
}

std::vector<Tensor> both(const kiln::TensorPair& p) {
  return {std::get<0>(p), std::get<1>(p)};
}

TEST(CudaSort, SortArgsortTopkEveryDtype) {
  KILN_REQUIRE_CUDA();
  // Lines within one tile, exactly one tile, and several tiles (merge passes).
  const std::vector<std::vector<int64_t>> shapes = {{6},     {3, 17},    {2, 4096}, {2, 4097},
                                                    {10000}, {3, 9000},  {0, 5},    {5, 0},
                                                    {},      {2, 3, 33}, {1, 1}};
  int seed = 0;
  for (kiln::DType dt : kAll) {
    for (const auto& s : shapes) {
      for (const char* layout : {"contiguous", "transposed", "strided"}) {
        for (bool ties : {false, true}) {
          Pair x = make(s, dt, layout, ++seed, ties, /*nans=*/ties);
          const std::string base = std::string(kiln::dtype_name(dt)) + " " + layout +
                                   (ties ? " ties+nan " : " ") + std::to_string(s.size()) + "d";
          for (int64_t dim : {int64_t{-1}, int64_t{0}}) {
            for (bool desc : {false, true}) {
              const std::string w = base + " dim " + std::to_string(dim) + (desc ? " desc" : "");
              check("sort " + w,
                    [&](bool gpu) { return both(kiln::sort(gpu ? x.cuda : x.cpu, dim, desc)); });
              check("sort stable " + w, [&](bool gpu) {
                return both(kiln::sort(gpu ? x.cuda : x.cpu, dim, desc, /*stable=*/true));
              });
              check("argsort " + w, [&](bool gpu) {
                return std::vector<Tensor>{kiln::argsort(gpu ? x.cuda : x.cpu, dim, desc)};
              });
            }
            const int64_t len = s.empty() ? 1 : s[dim < 0 ? s.size() - 1 : 0];
            for (int64_t k : {int64_t{0}, int64_t{1}, std::min<int64_t>(len, 5), len}) {
              for (bool largest : {true, false}) {
                check("topk k=" + std::to_string(k) + (largest ? " largest " : " smallest ") +
                          base + " dim " + std::to_string(dim),
                      [&](bool gpu) {
                        if (gpu) return both(kiln::topk(x.cuda, k, dim, largest, true));
                        // The CPU has no float16 topk (as PyTorch 1.13); CUDA
                        // has one (Note [Meta twins]): float32 values, exact in
                        // float16, order the same way.
                        const bool half = x.cpu.dtype() == kiln::kFloat16;
                        auto [v, i] = kiln::topk(half ? x.cpu.to(kiln::kFloat32) : x.cpu, k, dim,
                                                 largest, true);
                        return std::vector<Tensor>{half ? v.to(kiln::kFloat16) : v, i};
                      });
              }
            }
          }
        }
      }
    }
  }
}

TEST(CudaSort, TopkOfAVocabularyRow) {
  KILN_REQUIRE_CUDA();
  Pair x = make({4, 50257}, kiln::kFloat32, "contiguous", 7, false, false);
  check("topk 50 of 50257", [&](bool gpu) { return both(kiln::topk(gpu ? x.cuda : x.cpu, 50)); });
  Pair h = make({2, 50257}, kiln::kBFloat16, "contiguous", 8, true, true);
  check("sort bf16 50257 ties", [&](bool gpu) { return both(kiln::sort(gpu ? h.cuda : h.cpu)); });
}

TEST(CudaSort, RemapOps) {
  KILN_REQUIRE_CUDA();
  int seed = 100;
  for (kiln::DType dt : kAll) {
    for (const char* layout : {"contiguous", "transposed", "strided"}) {
      Pair x = make({3, 4, 5}, dt, layout, ++seed, false, false);
      const std::string w = std::string(kiln::dtype_name(dt)) + " " + layout;
      auto one = [](Tensor t) { return std::vector<Tensor>{t}; };
      check("flip " + w, [&](bool g) { return one(kiln::flip(g ? x.cuda : x.cpu, {0, 2})); });
      check("flip none " + w, [&](bool g) { return one(kiln::flip(g ? x.cuda : x.cpu, {})); });
      check("roll " + w, [&](bool g) {
        return one(kiln::roll(g ? x.cuda : x.cpu, {2, -7}, {1, 2}));
      });
      check("roll same dim twice " + w, [&](bool g) {
        return one(kiln::roll(g ? x.cuda : x.cpu, {1, 3}, {-1, -1}));
      });
      check("roll flat " + w, [&](bool g) { return one(kiln::roll(g ? x.cuda : x.cpu, {4})); });
      check("repeat " + w, [&](bool g) {
        return one(kiln::repeat(g ? x.cuda : x.cpu, {2, 1, 3, 2}));
      });
      check("repeat zero " + w, [&](bool g) {
        return one(kiln::repeat(g ? x.cuda : x.cpu, {1, 0, 1}));
      });
      check("pad " + w, [&](bool g) {
        return one(kiln::pad(g ? x.cuda : x.cpu, {1, 2, 0, 3}, "constant", 2.0));
      });
      check("pad crop " + w, [&](bool g) {
        return one(kiln::pad(g ? x.cuda : x.cpu, {-1, 2, -2, -1}, "constant", 0.5));
      });
      check("crop only " + w, [&](bool g) {
        return one(kiln::pad(g ? x.cuda : x.cpu, {-1, -2}, "constant", std::nullopt));
      });
    }
  }
  kiln::EagerGuard eager;
  Tensor s = kiln::full({}, 3.5);
  Tensor e = kiln::zeros({0, 3});
  for (const Tensor& t : {s, e}) {
    auto one = [](Tensor r) { return std::vector<Tensor>{r}; };
    check("flip 0-dim/empty", [&](bool g) { return one(kiln::flip(g ? t.cuda() : t, {})); });
    check("roll 0-dim/empty", [&](bool g) { return one(kiln::roll(g ? t.cuda() : t, {1})); });
    check("repeat 0-dim/empty", [&](bool g) {
      return one(kiln::repeat(g ? t.cuda() : t, {2, 2}));
    });
  }
}

TEST(CudaSort, RangeFactoriesOnTheDevice) {
  KILN_REQUIRE_CUDA();
  auto one = [](Tensor r) { return std::vector<Tensor>{r}; };
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat64, kiln::kInt64, kiln::kFloat16}) {
    const std::string w = kiln::dtype_name(dt);
    check("arange " + w, [&](bool g) {
      return one(kiln::arange(
          1, 10, 3,
          kiln::TensorOptions(dt).device(g ? kiln::Device::cuda() : kiln::Device::cpu())));
    });
    check("linspace " + w, [&](bool g) {
      return one(kiln::linspace(
          -1, 7, 9,
          kiln::TensorOptions(dt).device(g ? kiln::Device::cuda() : kiln::Device::cpu())));
    });
    check("eye " + w, [&](bool g) {
      return one(kiln::eye(
          3, 5, kiln::TensorOptions(dt).device(g ? kiln::Device::cuda() : kiln::Device::cpu())));
    });
  }
}

TEST(CudaSort, OutForms) {
  KILN_REQUIRE_CUDA();
  using T = const Tensor&;
  using OptD = std::optional<kiln::DType>;
  using OptIL = std::optional<kiln::IntArrayRef>;
  static const kiln::TypedOp<Tensor(T, int64_t, OptD, T)> cumsum_out("cumsum.out");
  static const kiln::TypedOp<Tensor(T, OptIL, bool, OptD, T)> sum_out("sum.IntList_out");
  static const kiln::TypedOp<Tensor(kiln::TensorList, int64_t, T)> cat_out("cat.out");
  Pair x = make({4, 6}, kiln::kFloat32, "transposed", 5, false, false);
  for (kiln::DType od : {kiln::kFloat32, kiln::kFloat64, kiln::kInt32}) {
    for (std::vector<int64_t> os : {std::vector<int64_t>{4, 6}, std::vector<int64_t>{0}}) {
      const std::string w = std::string(kiln::dtype_name(od)) + (os[0] ? "" : " resized");
      auto out_on = [&](bool g) {
        kiln::EagerGuard eager;
        Tensor o = kiln::empty(os, od);
        return g ? o.cuda() : o;
      };
      check("cumsum.out " + w,
            [&](bool g) {
              Tensor o = out_on(g);
              cumsum_out(g ? x.cuda : x.cpu, 1, std::nullopt, o);
              return std::vector<Tensor>{o};
            },
            {1e-5, 1e-5});
      check("sum.out " + w,
            [&](bool g) {
              Tensor o = out_on(g);
              const int64_t d0 = 0;
              sum_out(g ? x.cuda : x.cpu, kiln::IntArrayRef(&d0, 1), false, std::nullopt, o);
              return std::vector<Tensor>{o};
            },
            {1e-5, 1e-5});
      check("cat.out " + w, [&](bool g) {
        Tensor o = out_on(g);
        const Tensor& in = g ? x.cuda : x.cpu;
        std::vector<Tensor> parts = {in, in};
        cat_out(parts, 0, o);
        return std::vector<Tensor>{o};
      });
    }
  }
}

}  // namespace
