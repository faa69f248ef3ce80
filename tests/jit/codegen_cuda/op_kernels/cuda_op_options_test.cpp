// The CUDA side of PyTorch's op options: the reflect / replicate / circular
// pads (Note [Pad modes]), the scatter reductions (Note [CUDA scatter
// reductions]) and embedding's max_norm (Note [Embedding max_norm]) against
// the eager CPU kernels, in eager and lazy mode; and 16-bit silu / gelu(tanh)
// of the generated CUDA kernels against the CPU eager kernels on every 16-bit
// value (Note [16-bit floats in pointwise kernels]). CudaOpOptionsSource
// compiles the new kernels' sources with NVRTC and needs no GPU; the other
// suites skip without one.

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "jit/codegen_cuda/nvrtc.h"
#include "jit/codegen_cuda/op_kernels/op_sources.h"
#include "kiln/kiln.h"
#include "runtime/cuda/cuda_runtime.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
namespace kc = kiln::jit::cuda;

// --- sources (no GPU) ------------------------------------------------------------------

bool is_new_kernel(const std::string& name) {
  for (const char* prefix : {"kiln_remap_", "kiln_scatter_", "kiln_embedding_renorm_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

TEST(CudaOpOptionsSource, PadScatterReduceAndRenormKernelsCompile) {
  if (!kiln::cuda::built()) GTEST_SKIP() << "kiln was built without the CUDA toolkit (no NVRTC)";
  kc::NamedSources sources;
  for (auto& s : kc::op_source_samples()) {
    if (is_new_kernel(s.first)) sources.push_back(std::move(s));
  }
  // 4 remap widths; 5 reductions x 10 dtypes x 2 (include_self) less bool mean, and the
  // value forms of sum and prod; 8 renorm variants.
  ASSERT_EQ(sources.size(), 4u + (5 * 10 * 2 - 2) + 2 * 10 + 8);
  std::vector<std::string> failures(sources.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < sources.size();) {
      const auto& [name, src] = sources[i];
      try {
        kc::CompiledKernel ck = kc::nvrtc_compile(src, name, i % 7 == 0 ? 80 : 90);
        if (ck.is_ptx || ck.image.size() <= 1000u) failures[i] = "no SASS image";
      } catch (const kiln::Error& e) {
        failures[i] = e.what() + std::string("\nsource:\n") + src;
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t) {
    threads.emplace_back(work);
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < sources.size(); ++i) {
    EXPECT_TRUE(failures[i].empty()) << sources[i].first << ": " << failures[i];
  }
}

// --- helpers -------------------------------------------------------------------------

// A CPU tensor in `layout` ("contiguous", "transposed": the last two dims
// swapped in memory, "strided": every other element of the last dim) and the
// same view of a GPU copy of its storage.
struct Pair {
  Tensor cpu, cuda;
};
Pair make(std::vector<int64_t> s, kiln::DType dt, const std::string& layout, uint64_t seed,
          double low = -3, double high = 3) {
  kiln::EagerGuard eager;
  if (layout == "transposed" && s.size() >= 2) {
    std::swap(s[s.size() - 1], s[s.size() - 2]);
    Tensor base = kiln::testing::random_tensor(s, dt, "contiguous", seed, low, high);
    const int64_t n = static_cast<int64_t>(s.size());
    return {base.transpose(n - 1, n - 2), base.cuda().transpose(n - 1, n - 2)};
  }
  if (layout == "strided" && !s.empty()) {
    s.back() *= 2;
    Tensor base = kiln::testing::random_tensor(s, dt, "contiguous", seed, low, high);
    const int64_t last = static_cast<int64_t>(s.size()) - 1;
    return {base.slice(last, 0, std::nullopt, 2), base.cuda().slice(last, 0, std::nullopt, 2)};
  }
  Tensor base = kiln::testing::random_tensor(s, dt, "contiguous", seed, low, high);
  return {base, base.cuda()};
}

// f(false) on the CPU (eager), f(true) on CUDA in eager and in lazy mode; the
// results compared at `tol` (0, 0: bit for bit, NaN where NaN).
void check(const std::string& what, const std::function<Tensor(bool)>& f,
           kiln::testing::Tolerance tol) {
  Tensor expected;
  {
    kiln::EagerGuard eager;
    expected = f(false);
  }
  for (bool lazy : {false, true}) {
    Tensor got;
    {
      std::optional<kiln::EagerGuard> eager;
      if (!lazy) eager.emplace();
      got = f(true);
      kiln::sync();
    }
    ASSERT_TRUE(got.is_cuda()) << what;
    const std::string msg = kiln::testing::compare(got.cpu(), expected, tol);
    EXPECT_TRUE(msg.empty()) << what << (lazy ? " (lazy)" : " (eager)") << ": " << msg;
  }
}

const char* const kLayouts[] = {"contiguous", "transposed", "strided"};
const kiln::DType kAll[] = {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16, kiln::kFloat64,
                            kiln::kInt64,   kiln::kInt32,   kiln::kInt16,    kiln::kInt8,
                            kiln::kUInt8,   kiln::kBool};
constexpr kiln::testing::Tolerance kExact{0, 0};

// --- pads ----------------------------------------------------------------------------

TEST(CudaOpOptions, PadModesMatchCpuBitForBit) {
  KILN_REQUIRE_CUDA();
  struct Shape {
    std::vector<int64_t> sizes;
    std::vector<int64_t> pad;
  };
  const Shape shapes[] = {{{2, 3, 7}, {3, 2}},
                          {{3, 7}, {-2, 4}},
                          {{2, 3, 5, 6}, {2, 1, 4, 0}},
                          {{3, 5, 6}, {1, -2, 0, 3}},
                          {{1, 2, 3, 4, 5}, {1, 2, 2, 1, 0, 2}},
                          {{2, 3, 4, 5}, {4, 0, 1, 1, 2, 2}}};
  uint64_t seed = 1;
  for (const char* mode : {"reflect", "replicate", "circular"}) {
    for (kiln::DType dt : kAll) {
      for (const Shape& s : shapes) {
        std::vector<int64_t> pad = s.pad;
        if (std::string(mode) == "circular") {
          for (int64_t& p : pad) p = std::min<int64_t>(p, 2);  // wraps once over cropped dims
        }
        for (const char* layout : kLayouts) {
          Pair x = make(s.sizes, dt, layout, ++seed);
          check(
              std::string("pad ") + mode + " " + kiln::dtype_name(dt) + " " + layout + " " +
                  std::to_string(s.sizes.size()) + "-D",
              [&](bool gpu) { return kiln::pad(gpu ? x.cuda : x.cpu, pad, mode); }, kExact);
        }
      }
    }
  }
  // The constant mode still pads through the same kernel.
  Pair x = make({2, 3, 4}, kiln::kFloat32, "strided", 99);
  check(
      "pad constant",
      [&](bool gpu) {
        return kiln::pad(gpu ? x.cuda : x.cpu, {1, 2, -1, 1});
      },
      kExact);
}

TEST(CudaOpOptions, PadModeErrorsOnCuda) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  Tensor x = kiln::zeros({2, 3, 4}).cuda();
  EXPECT_KILN_ERROR(kiln::pad(x, {4, 0}, "reflect"), "smaller than the input size");
  EXPECT_KILN_ERROR(kiln::pad(x, {5, 0}, "circular"), "wraps once");
  EXPECT_KILN_ERROR(kiln::pad(kiln::zeros({2, 0, 4}).cuda(), {1, 1}, "replicate"), "empty dim");
}

// --- scatter reductions ----------------------------------------------------------------

TEST(CudaOpOptions, ScatterReductionsMatchCpuBitForBit) {
  KILN_REQUIRE_CUDA();
  uint64_t seed = 1000;
  Tensor index_cpu;
  {
    kiln::EagerGuard eager;
    // [7, 5] into 4 rows along dim 0, repeats included; [4, 9] into 5 columns along dim 1.
    index_cpu = kiln::randint(0, 4, {7, 5});
  }
  Tensor index_cols = [] {
    kiln::EagerGuard eager;
    return kiln::randint(0, 5, {4, 9}).transpose(0, 1).contiguous().transpose(0, 1);
  }();
  for (kiln::DType dt : kAll) {
    for (const char* layout : kLayouts) {
      Pair self = make({4, 5}, dt, layout, ++seed);
      Pair src = make({7, 5}, dt, "transposed", ++seed);
      Pair src_cols = make({4, 9}, dt, "strided", ++seed);
      const std::string tag = std::string(kiln::dtype_name(dt)) + " " + layout;
      for (const char* reduce : {"sum", "prod", "mean", "amax", "amin"}) {
        if (dt == kiln::kBool && std::string(reduce) == "mean") continue;
        for (bool include_self : {true, false}) {
          check(
              std::string("scatter_reduce ") + reduce + " " + tag +
                  (include_self ? "" : " exclude self"),
              [&](bool gpu) {
                return kiln::scatter_reduce(gpu ? self.cuda : self.cpu, 0,
                                            gpu ? index_cpu.cuda() : index_cpu,
                                            gpu ? src.cuda : src.cpu, reduce, include_self);
              },
              kExact);
          check(
              std::string("scatter_reduce_ dim 1 ") + reduce + " " + tag,
              [&](bool gpu) {
                Tensor s = (gpu ? self.cuda : self.cpu).clone();
                kiln::scatter_reduce_(s, 1, gpu ? index_cols.cuda() : index_cols,
                                      gpu ? src_cols.cuda : src_cols.cpu, reduce, include_self);
                return s;
              },
              kExact);
        }
      }
      for (const char* reduce : {"add", "multiply"}) {
        check(
            std::string("scatter.reduce ") + reduce + " " + tag,
            [&](bool gpu) {
              return kiln::scatter(gpu ? self.cuda : self.cpu, 0,
                                   gpu ? index_cpu.cuda() : index_cpu, gpu ? src.cuda : src.cpu,
                                   reduce);
            },
            kExact);
        check(
            std::string("scatter_.value_reduce ") + reduce + " " + tag,
            [&](bool gpu) {
              Tensor s = (gpu ? self.cuda : self.cpu).clone();
              kiln::scatter_(s, 1, gpu ? index_cols.cuda() : index_cols, kiln::Scalar(2), reduce);
              return s;
            },
            kExact);
      }
    }
  }
}

TEST(CudaOpOptions, ScatterReduceIndexOutOfRangeOnCuda) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  Tensor self = kiln::zeros({3, 4}).cuda();
  Tensor index = kiln::tensor({int64_t{0}, int64_t{3}}).view({2, 1}).cuda();
  Tensor src = kiln::ones({2, 1}).cuda();
  EXPECT_KILN_ERROR(kiln::scatter_reduce(self, 0, index, src, "amax"),
                    "index 3 is out of bounds for dimension 0 with size 3");
}

// --- embedding max_norm ----------------------------------------------------------------

TEST(CudaOpOptions, EmbeddingMaxNormMatchesCpu) {
  KILN_REQUIRE_CUDA();
  uint64_t seed = 2000;
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16, kiln::kFloat64}) {
    // Norms are summed in another order on the GPU: the scale differs in the last
    // bits of a double, so 16-bit results may round to a neighbour.
    const kiln::testing::Tolerance tol = kiln::testing::default_tolerance(dt);
    for (const char* layout : {"contiguous", "transposed"}) {
      for (double p : {2.0, 1.0, 3.0, 0.0, double(INFINITY), -double(INFINITY)}) {
        for (kiln::DType idt : {kiln::kInt64, kiln::kInt32}) {
          Pair w = make({9, 300}, dt, layout, ++seed);
          Tensor idx;
          {
            kiln::EagerGuard eager;
            idx = kiln::randint(0, 9, {5, 3}, idt);
          }
          const std::string what = std::string("embedding max_norm ") + kiln::dtype_name(dt) + " " +
                                   layout + " p=" + std::to_string(p);
          Tensor w_cpu, w_cuda;
          {
            kiln::EagerGuard eager;
            w_cpu = w.cpu.clone();
            w_cuda = w.cuda.clone();
          }
          Tensor out_cpu, out_cuda;
          {
            kiln::EagerGuard eager;
            out_cpu = kiln::embedding(w_cpu, idx, -1, 12.0, p);
            out_cuda = kiln::embedding(w_cuda, idx.cuda(), -1, 12.0, p);
          }
          const std::string out_msg = kiln::testing::compare(out_cuda.cpu(), out_cpu, tol);
          EXPECT_TRUE(out_msg.empty()) << what << ": " << out_msg;
          const std::string w_msg = kiln::testing::compare(w_cuda.cpu(), w_cpu, tol);
          EXPECT_TRUE(w_msg.empty()) << what << " weight: " << w_msg;
        }
      }
    }
  }
  kiln::EagerGuard eager;
  Tensor w = kiln::ones({4, 3}).cuda();
  Tensor bad = kiln::tensor({int64_t{1}, int64_t{4}}).cuda();
  EXPECT_KILN_ERROR(kiln::embedding_renorm_(w, bad, 1.0, 2.0), "index 4 is out of range");
}

// --- 16-bit activations ----------------------------------------------------------------

Tensor every_value(kiln::DType dt) {
  std::vector<uint16_t> bits(65536);
  for (uint32_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(i);
  return kiln::from_data(bits.data(), {65536}, dt);
}

// The generated CUDA kernels (eager and fused) against the CPU eager kernel, on
// every 16-bit value: within one ulp, or within 1e-9 where the result is tiny
// (the CUDA sigmoid's error is absolute below 1e-5: Note [CUDA vector math]).
TEST(CudaFusedActivations, SixteenBitSiluAndGeluMatchCpuEager) {
  KILN_REQUIRE_CUDA();
  struct Op {
    const char* name;
    Tensor (*f)(const Tensor&);
  };
  const Op ops[] = {{"silu", [](const Tensor& x) { return kiln::silu(x); }},
                    {"gelu_tanh", [](const Tensor& x) { return kiln::gelu(x, "tanh"); }}};
  for (const Op& op : ops) {
    for (kiln::DType dt : {kiln::kBFloat16, kiln::kFloat16}) {
      const Tensor x = every_value(dt);
      Tensor want;
      {
        kiln::EagerGuard eager;
        want = op.f(x).to(kiln::kFloat32);
      }
      for (bool lazy : {false, true}) {
        Tensor got;
        {
          std::optional<kiln::EagerGuard> eager;
          if (!lazy) eager.emplace();
          // x * 1 keeps a fused group of two ops in lazy mode.
          got = lazy ? op.f(x.cuda() * 1.0) : op.f(x.cuda());
          kiln::sync();
        }
        kiln::EagerGuard eager;
        const Tensor g16 = got.cpu().contiguous(), w16 = want.to(dt).contiguous();
        const Tensor g32 = got.cpu().to(kiln::kFloat32);
        const uint16_t* gb = static_cast<const uint16_t*>(g16.data_ptr());
        const uint16_t* wb = static_cast<const uint16_t*>(w16.data_ptr());
        const float* gf = g32.data_ptr<float>();
        const float* wf = want.data_ptr<float>();
        int64_t differ = 0, beyond = 0;
        std::string worst;
        for (int64_t i = 0; i < 65536; ++i) {
          if (gb[i] == wb[i] || (std::isnan(gf[i]) && std::isnan(wf[i]))) continue;
          ++differ;
          auto ord = [](uint16_t u) {
            return (u & 0x8000) ? -static_cast<int64_t>(u & 0x7fff) : static_cast<int64_t>(u);
          };
          const bool ok = (std::abs(ord(gb[i]) - ord(wb[i])) <= 1 && !std::isnan(gf[i]) &&
                           !std::isnan(wf[i])) ||
                          std::fabs(gf[i] - wf[i]) <= 1e-9f;
          if (!ok && beyond++ == 0) {
            worst = "x bits " + std::to_string(i) + ": cpu " + std::to_string(wf[i]) + ", cuda " +
                    std::to_string(gf[i]);
          }
        }
        const std::string what =
            std::string(op.name) + " " + kiln::dtype_name(dt) + (lazy ? " fused" : " eager");
        EXPECT_EQ(beyond, 0) << what << ": " << beyond << " values beyond the bound, first "
                             << worst;
        EXPECT_LE(differ, 65536 / 100) << what;
        std::printf("%-28s %5lld of 65536 differ from the CPU (all within the bound)\n",
                    what.c_str(), static_cast<long long>(differ));
      }
    }
  }
}

}  // namespace
