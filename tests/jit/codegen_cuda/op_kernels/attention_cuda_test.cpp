// The fused CUDA attention kernels (Note [Fused attention]) on a device
// against the eager CPU kernel computed in float64 from the same values:
// every dtype, head dims 64 and 128 (and others, which take the unfused
// path), causal or not, bool and additive masks, grouped-query attention,
// KV caches of 1, 17, 1024 and 4096 slots, batch > 1, and q/k/v as the
// strided views GPT-2 cuts from its fused projection. Each case names its
// shape, dtype and path so one GPU run says what broke.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "jit/codegen_cuda/launch_cuda.h"
#include "jit/codegen_cuda/op_kernels/attention.h"
#include "jit/record/trace_buffer.h"
#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::Tolerance;

// Against a float64 reference: float16 and bfloat16 round P to the input
// dtype for P @ V (as FlashAttention) and the output once; float32 differs
// in summation order only.
Tolerance tol(kiln::DType t) {
  if (t == kiln::kFloat16) return {2e-3, 2e-3};
  if (t == kiln::kBFloat16) return {1.6e-2, 1.6e-2};
  if (t == kiln::kFloat64) return {1e-10, 1e-10};
  return {2e-5, 2e-5};
}

std::string tag(kiln::DType t) {
  return kiln::dtype_name(t);
}

std::string shape_string(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// A tensor on the CPU and its copy on the device, viewed alike.
struct Both {
  Tensor cpu, cuda;
};

// Uniform values in [low, high) of `dt`, contiguous on both sides.
Both random_both(kiln::IntArrayRef sizes, kiln::DType dt, uint64_t seed, double low = -2,
                 double high = 2) {
  kiln::EagerGuard eager;
  Tensor t = kiln::testing::random_tensor(sizes, dt, "contiguous", seed, low, high);
  return {t, t.cuda()};
}

Both apply(const Both& b, const std::function<Tensor(const Tensor&)>& f) {
  kiln::EagerGuard eager;
  return {f(b.cpu), f(b.cuda)};
}

// q, k, v [B, H, T, D] as GPT-2 makes them: heads split out of one fused
// [B, T, 3 * H * D] projection (strides [T * 3HD, D, 3HD, 1]).
struct Qkv {
  Both q, k, v;
};
Qkv gpt2_views(int64_t b, int64_t h, int64_t t, int64_t d, kiln::DType dt, uint64_t seed) {
  Both qkv = random_both({b, t, 3 * h * d}, dt, seed);
  auto part = [&](int64_t i) {
    return apply(qkv, [=](const Tensor& x) {
      return x.slice(2, i * h * d, (i + 1) * h * d).view({b, t, h, d}).transpose(1, 2);
    });
  };
  return {part(0), part(1), part(2)};
}

Tensor f64(const Tensor& t) {
  return t.to(kiln::kFloat64);
}

// The CPU kernel in float64 on the values of the CPU tensors.
Tensor ref_sdpa(const Tensor& q, const Tensor& k, const Tensor& v,
                const std::optional<Tensor>& mask, bool causal, std::optional<double> scale,
                bool gqa) {
  kiln::EagerGuard eager;
  return kiln::scaled_dot_product_attention(f64(q), f64(k), f64(v), mask, causal, scale, gqa);
}

Tensor ref_cache(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos) {
  kiln::EagerGuard eager;
  return kiln::kv_cache_attention(f64(q), f64(k), f64(v), pos);
}

int64_t launches() {
  return kiln::jit::cuda::cuda_kernel_stats().launches;
}

// Runs `gpu` eagerly, compares with `want` (float64), and when `kernels` >= 0
// checks how many generated kernels the call launched.
void expect_close(const std::string& what, const std::function<Tensor()>& gpu, const Tensor& want,
                  kiln::DType dt, int64_t kernels = -1) {
  kiln::EagerGuard eager;
  const int64_t before = launches();
  Tensor got = gpu();
  const int64_t launched = launches() - before;
  ASSERT_TRUE(got.is_cuda()) << what;
  ASSERT_EQ(got.dtype(), dt) << what;
  std::string msg = kiln::testing::compare(f64(got.cpu()), want, tol(dt));
  EXPECT_TRUE(msg.empty()) << what << ": " << msg;
  if (kernels >= 0) {
    EXPECT_EQ(launched, kernels) << what << ": kernels launched";
  }
}

const kiln::DType kHalfs[] = {kiln::kFloat16, kiln::kBFloat16};

namespace kc = kiln::jit::cuda;

// Each prefill case runs in both forms (Note [Prefill keys split over
// warps]), whichever the rule would pick for its shape.
const kc::PrefillForm kPrefillForms[] = {kc::PrefillForm::Rows, kc::PrefillForm::SplitKeys};

class FormScope {
 public:
  explicit FormScope(kc::PrefillForm form)
      : trace_(__FILE__, __LINE__,
               form == kc::PrefillForm::Rows ? "prefill form: rows" : "prefill form: split keys") {
    kc::set_prefill_form(form);
  }
  ~FormScope() { kc::set_prefill_form(kc::PrefillForm::Auto); }
  FormScope(const FormScope&) = delete;
  FormScope& operator=(const FormScope&) = delete;

 private:
  ::testing::ScopedTrace trace_;
};

// --- Prefill: scaled_dot_product_attention -------------------------------------------

TEST(CudaAttention, PrefillGpt2LayoutIsOneKernel) {
  KILN_REQUIRE_CUDA();
  for (kc::PrefillForm form : kPrefillForms) {
    FormScope scope(form);
    uint64_t seed = 1000;
    for (kiln::DType dt : kHalfs) {
      for (int64_t d : {64, 128}) {
        for (int64_t t : {1, 17, 64, 130}) {
          for (bool causal : {false, true}) {
            Qkv x = gpt2_views(2, 3, t, d, dt, ++seed);
            const std::string what = "sdpa " + tag(dt) + " d" + std::to_string(d) + " T" +
                                     std::to_string(t) + (causal ? " causal" : "");
            expect_close(
                what,
                [&] {
                  return kiln::scaled_dot_product_attention(x.q.cuda, x.k.cuda, x.v.cuda,
                                                            std::nullopt, causal);
                },
                ref_sdpa(x.q.cpu, x.k.cpu, x.v.cpu, std::nullopt, causal, std::nullopt, false), dt,
                1);
          }
        }
      }
    }
  }
}

TEST(CudaAttention, PrefillQueryAndKeyLengthsDiffer) {
  KILN_REQUIRE_CUDA();
  for (kc::PrefillForm form : kPrefillForms) {
    FormScope scope(form);
    uint64_t seed = 2000;
    struct Shape {
      int64_t l, s;
      bool causal;
    };
    // Causal attention is top-left aligned (row i sees keys <= i), as PyTorch's is_causal.
    for (Shape sh : {Shape{5, 200, false}, Shape{5, 200, true}, Shape{200, 70, true},
                     Shape{1, 1, false}, Shape{1, 1, true}, Shape{65, 63, true},
                     Shape{129, 1000, false}, Shape{64, 4096, false}}) {
      for (kiln::DType dt : kHalfs) {
        for (int64_t d : {64, 128}) {
          Both q = random_both({2, 2, sh.l, d}, dt, ++seed),
               k = random_both({2, 2, sh.s, d}, dt, ++seed);
          Both v = random_both({2, 2, sh.s, d}, dt, ++seed, -1, 1);
          const std::string what = "sdpa " + tag(dt) + " d" + std::to_string(d) + " L" +
                                   std::to_string(sh.l) + " S" + std::to_string(sh.s) +
                                   (sh.causal ? " causal" : "");
          expect_close(
              what,
              [&] {
                return kiln::scaled_dot_product_attention(q.cuda, k.cuda, v.cuda, std::nullopt,
                                                          sh.causal);
              },
              ref_sdpa(q.cpu, k.cpu, v.cpu, std::nullopt, sh.causal, std::nullopt, false), dt, 1);
        }
      }
    }
  }
}

// Note [Few-row attention]: up to kDecodeMaxRows query rows per kv head take
// the decode kernel with a constant position, one kernel per call: causal
// (top-left) or not, grouped-query heads, keys from 1 to several splits.
TEST(CudaAttention, FewRowsTakeTheDecodeKernel) {
  KILN_REQUIRE_CUDA();
  uint64_t seed = 2500;
  for (kiln::DType dt : {kiln::kFloat16, kiln::kBFloat16, kiln::kFloat32}) {
    for (int64_t d : {64, 128}) {
      for (int64_t l : {1, 3, 8}) {
        for (int64_t s : {1, 17, 700}) {
          for (bool causal : {false, true}) {
            for (bool gqa : {false, true}) {
              const int64_t hq = 4, hkv = gqa ? 2 : 4;
              Both q = random_both({2, hq, l, d}, dt, ++seed),
                   k = random_both({2, hkv, s, d}, dt, ++seed);
              Both v = random_both({2, hkv, s, d}, dt, ++seed, -1, 1);
              const std::string what = "few rows " + tag(dt) + " d" + std::to_string(d) + " L" +
                                       std::to_string(l) + " S" + std::to_string(s) +
                                       (causal ? " causal" : "") + (gqa ? " gqa" : "");
              expect_close(
                  what,
                  [&] {
                    return kiln::scaled_dot_product_attention(q.cuda, k.cuda, v.cuda, std::nullopt,
                                                              causal, std::nullopt, gqa);
                  },
                  ref_sdpa(q.cpu, k.cpu, v.cpu, std::nullopt, causal, std::nullopt, gqa), dt, 1);
            }
          }
        }
      }
    }
  }
}

TEST(CudaAttention, PrefillLongCausal) {
  KILN_REQUIRE_CUDA();
  for (kc::PrefillForm form : kPrefillForms) {
    FormScope scope(form);
    uint64_t seed = 2500;
    for (kiln::DType dt : kHalfs) {
      for (int64_t d : {64, 128}) {
        Qkv x = gpt2_views(1, 2, 1024, d, dt, ++seed);
        expect_close(
            "sdpa causal T1024 " + tag(dt) + " d" + std::to_string(d),
            [&] {
              return kiln::scaled_dot_product_attention(x.q.cuda, x.k.cuda, x.v.cuda, std::nullopt,
                                                        true);
            },
            ref_sdpa(x.q.cpu, x.k.cpu, x.v.cpu, std::nullopt, true, std::nullopt, false), dt, 1);
      }
    }
  }
}

TEST(CudaAttention, PrefillMasks) {
  KILN_REQUIRE_CUDA();
  for (kc::PrefillForm form : kPrefillForms) {
    FormScope scope(form);
    uint64_t seed = 3000;
    const int64_t b = 2, h = 3, l = 70, s = 90;
    for (kiln::DType dt : kHalfs) {
      for (int64_t d : {64, 128}) {
        Both q = random_both({b, h, l, d}, dt, ++seed), k = random_both({b, h, s, d}, dt, ++seed);
        Both v = random_both({b, h, s, d}, dt, ++seed, -1, 1);
        std::vector<std::pair<std::string, Both>> masks;
        // Bool masks (True keeps) of several broadcast shapes; row 3 keeps nothing (NaN).
        for (std::vector<int64_t> ms :
             std::vector<std::vector<int64_t>>{{l, s}, {b, 1, l, s}, {h, l, s}, {s}}) {
          Both m = random_both(ms, kiln::kBool, ++seed, 0, 2);
          if (ms.size() >= 2) {
            kiln::EagerGuard eager;
            Tensor host = m.cpu.clone();
            host.select(-2, 3).fill_(false);
            m = {host, host.cuda()};
          }
          masks.emplace_back("bool mask " + shape_string(ms), m);
        }
        // A transposed (non-contiguous) bool mask.
        Both mt = random_both({s, l}, kiln::kBool, ++seed, 0, 2);
        masks.emplace_back("bool mask transposed",
                           apply(mt, [](const Tensor& x) { return x.transpose(0, 1); }));
        // Additive masks in the input dtype, float32, float64 and the other 16-bit dtype,
        // with -inf entries and one row of only -inf (NaN).
        const kiln::DType other = dt == kiln::kFloat16 ? kiln::kBFloat16 : kiln::kFloat16;
        for (kiln::DType mdt : {dt, kiln::kFloat32, kiln::kFloat64, other}) {
          kiln::EagerGuard eager;
          Tensor host = kiln::testing::random_tensor({h, l, s}, mdt, "contiguous", ++seed, -3, 3);
          host.select(2, 5).fill_(-INFINITY);
          host.select(1, 7).fill_(-INFINITY);
          masks.emplace_back(std::string("additive mask ") + tag(mdt), Both{host, host.cuda()});
        }
        for (const auto& [name, m] : masks) {
          expect_close(
              "sdpa " + tag(dt) + " d" + std::to_string(d) + " " + name,
              [&] { return kiln::scaled_dot_product_attention(q.cuda, k.cuda, v.cuda, m.cuda); },
              ref_sdpa(q.cpu, k.cpu, v.cpu, m.cpu, false, std::nullopt, false), dt);
        }
      }
    }
  }
}

TEST(CudaAttention, PrefillGroupedQuery) {
  KILN_REQUIRE_CUDA();
  for (kc::PrefillForm form : kPrefillForms) {
    FormScope scope(form);
    uint64_t seed = 4000;
    const int64_t b = 2, hq = 8, l = 33, s = 100;
    for (kiln::DType dt : kHalfs) {
      for (int64_t d : {64, 128}) {
        for (int64_t hkv : {1, 2, 4}) {
          Both q = random_both({b, hq, l, d}, dt, ++seed);
          Both k = random_both({b, hkv, s, d}, dt, ++seed);
          Both v = random_both({b, hkv, s, d}, dt, ++seed, -1, 1);
          Both m = random_both({b, hq, l, s}, kiln::kBool, ++seed, 0, 2);
          const std::string what =
              "sdpa gqa " + tag(dt) + " d" + std::to_string(d) + " hkv " + std::to_string(hkv);
          for (bool causal : {false, true}) {
            expect_close(
                what + (causal ? " causal" : ""),
                [&] {
                  return kiln::scaled_dot_product_attention(q.cuda, k.cuda, v.cuda, std::nullopt,
                                                            causal, std::nullopt, true);
                },
                ref_sdpa(q.cpu, k.cpu, v.cpu, std::nullopt, causal, std::nullopt, true), dt, 1);
          }
          expect_close(
              what + " bool mask",
              [&] {
                return kiln::scaled_dot_product_attention(q.cuda, k.cuda, v.cuda, m.cuda, false,
                                                          0.2, true);
              },
              ref_sdpa(q.cpu, k.cpu, v.cpu, m.cpu, false, 0.2, true), dt);
        }
      }
    }
  }
}

// Layouts the fused kernel cannot read directly (a transposed last dim, rows
// not 16-byte aligned), broadcast batch dims, 2-D and 3-D inputs, and the
// shapes and dtypes that take the unfused path.
TEST(CudaAttention, PrefillLayoutsAndOtherPaths) {
  KILN_REQUIRE_CUDA();
  uint64_t seed = 5000;
  for (kiln::DType dt : kHalfs) {
    const int64_t d = 64;
    Both q = random_both({2, 3, 20, d}, dt, ++seed);
    Both kt = apply(random_both({2, 3, d, 30}, dt, ++seed),
                    [](const Tensor& x) { return x.transpose(2, 3); });  // last stride 30
    Both vo = apply(random_both({2, 3, 30, d + 1}, dt, ++seed),
                    [&](const Tensor& x) { return x.slice(3, 1, d + 1); });  // odd row stride
    expect_close(
        "sdpa transposed key, misaligned value " + tag(dt),
        [&] { return kiln::scaled_dot_product_attention(q.cuda, kt.cuda, vo.cuda); },
        ref_sdpa(q.cpu, kt.cpu, vo.cpu, std::nullopt, false, std::nullopt, false), dt);
    Both k3 = random_both({3, 30, d}, dt, ++seed), v3 = random_both({3, 30, d}, dt, ++seed);
    expect_close(
        "sdpa broadcast batch " + tag(dt),
        [&] {
          return kiln::scaled_dot_product_attention(q.cuda, k3.cuda, v3.cuda, std::nullopt, true);
        },
        ref_sdpa(q.cpu, k3.cpu, v3.cpu, std::nullopt, true, std::nullopt, false), dt, 1);
    Both q2 = random_both({20, 128}, dt, ++seed), k2 = random_both({30, 128}, dt, ++seed),
         v2 = random_both({30, 128}, dt, ++seed);
    expect_close(
        "sdpa 2-D " + tag(dt),
        [&] {
          return kiln::scaled_dot_product_attention(q2.cuda, k2.cuda, v2.cuda, std::nullopt, true,
                                                    0.5);
        },
        ref_sdpa(q2.cpu, k2.cpu, v2.cpu, std::nullopt, true, 0.5, false), dt, 1);
    // Head dim 80 and a value dim unlike the key's: the unfused path.
    Both q80 = random_both({2, 20, 80}, dt, ++seed), k80 = random_both({2, 30, 80}, dt, ++seed),
         v48 = random_both({2, 30, 48}, dt, ++seed);
    expect_close(
        "sdpa d80 ev48 " + tag(dt),
        [&] { return kiln::scaled_dot_product_attention(q80.cuda, k80.cuda, v48.cuda); },
        ref_sdpa(q80.cpu, k80.cpu, v48.cpu, std::nullopt, false, std::nullopt, false), dt);
    // No keys: zeros, as the CPU kernel's empty product. No queries: empty.
    Both k0 = random_both({2, 3, 0, d}, dt, ++seed), v0 = random_both({2, 3, 0, d}, dt, ++seed);
    expect_close(
        "sdpa S=0 " + tag(dt),
        [&] { return kiln::scaled_dot_product_attention(q.cuda, k0.cuda, v0.cuda); },
        ref_sdpa(q.cpu, k0.cpu, v0.cpu, std::nullopt, false, std::nullopt, false), dt);
  }
  // float32 and float64 keep the unfused path, GQA included.
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat64}) {
    Both q = random_both({2, 4, 9, 64}, dt, ++seed), k = random_both({2, 2, 11, 64}, dt, ++seed),
         v = random_both({2, 2, 11, 64}, dt, ++seed);
    expect_close(
        "sdpa gqa unfused " + tag(dt),
        [&] {
          return kiln::scaled_dot_product_attention(q.cuda, k.cuda, v.cuda, std::nullopt, true,
                                                    std::nullopt, true);
        },
        ref_sdpa(q.cpu, k.cpu, v.cpu, std::nullopt, true, std::nullopt, true), dt);
  }
}

// --- Decode: kv_cache_attention --------------------------------------------------------

Both positions(const std::vector<int64_t>& p) {
  Tensor t = kiln::from_data(p.data(), {static_cast<int64_t>(p.size())}, kiln::kInt64);
  return {t, t.cuda()};
}

TEST(CudaAttention, DecodeMatchesCpu) {
  KILN_REQUIRE_CUDA();
  uint64_t seed = 6000;
  struct Heads {
    int64_t q, kv;
  };
  for (kiln::DType dt : {kiln::kFloat16, kiln::kBFloat16, kiln::kFloat32}) {
    for (int64_t d : {64, 128}) {
      for (int64_t s : {1, 17, 1024, 4096}) {
        for (int64_t b : {1, 3}) {
          for (Heads h : {Heads{4, 4}, Heads{8, 2}}) {
            for (int64_t l : {1, 3}) {
              if (l > s) continue;  // no position fits (Note [Cache positions in range])
              // The new tokens' q as GPT-2 makes it; a cache with room past the
              // positions used (S slots of a longer allocation).
              Qkv x = gpt2_views(b, h.q, l, d, dt, ++seed);
              Both kc = apply(random_both({b, h.kv, s + 8, d}, dt, ++seed),
                              [&](const Tensor& t) { return t.slice(2, 0, s); });
              Both vc = random_both({b, h.kv, s, d}, dt, ++seed, -1, 1);
              std::vector<std::vector<int64_t>> poss = {{0}, {(s - l) / 2}, {s - l}};
              if (b > 1) poss.push_back({s - l, 0, (s - l) / 3});
              for (const auto& p : poss) {
                Both pos = positions(p);
                const std::string what = "kv_cache_attention " + tag(dt) + " d" +
                                         std::to_string(d) + " S" + std::to_string(s) + " B" +
                                         std::to_string(b) + " Hq" + std::to_string(h.q) + " Hkv" +
                                         std::to_string(h.kv) + " L" + std::to_string(l) +
                                         " pos[0] " + std::to_string(p[0]);
                expect_close(
                    what,
                    [&] { return kiln::kv_cache_attention(x.q.cuda, kc.cuda, vc.cuda, pos.cuda); },
                    ref_cache(x.q.cpu, kc.cpu, vc.cpu, pos.cpu), dt, 1);
              }
            }
          }
        }
      }
    }
  }
}

// More new tokens than the decode kernel takes (a prompt written into the
// cache): the prefill kernel with the causal offset read on the device, in
// both forms (Note [Prefill keys split over warps]), grouped heads too, one
// position for all or one per batch row.
TEST(CudaAttention, PrefillIntoACache) {
  KILN_REQUIRE_CUDA();
  for (kc::PrefillForm form : kPrefillForms) {
    FormScope scope(form);
    uint64_t seed = 6500;
    for (kiln::DType dt : kHalfs) {
      for (int64_t d : {64, 128}) {
        for (int64_t s : {64, 200}) {
          for (int64_t hkv : {4, 2}) {
            const int64_t b = 2, hq = 4, l = 40;
            Both q = random_both({b, hq, l, d}, dt, ++seed);
            Both kc = random_both({b, hkv, s, d}, dt, ++seed);
            Both vc = random_both({b, hkv, s, d}, dt, ++seed, -1, 1);
            for (const std::vector<int64_t>& p :
                 std::vector<std::vector<int64_t>>{{0}, {s - l}, {s - l, 3}}) {
              Both pos = positions(p);
              const std::string what = "kv_cache_attention prefill " + tag(dt) + " d" +
                                       std::to_string(d) + " S" + std::to_string(s) + " Hkv" +
                                       std::to_string(hkv) + " pos[0] " + std::to_string(p[0]) +
                                       " of " + std::to_string(p.size());
              expect_close(
                  what,
                  [&] { return kiln::kv_cache_attention(q.cuda, kc.cuda, vc.cuda, pos.cuda); },
                  ref_cache(q.cpu, kc.cpu, vc.cpu, pos.cpu), dt, 1);
            }
          }
        }
      }
    }
  }
}

// Note [Cache positions in range]: the first and the last position that fit
// the rows give the CPU's answer; one outside [0, S - L] raises from the
// kernel's error flag (decode kernel for 3 rows, prefill kernel for 40) as
// the CPU kernel does. Before, a position past the cache saw every slot and
// one before its start gave NaN rows.
TEST(CudaAttention, DecodeEdgePositions) {
  KILN_REQUIRE_CUDA();
  uint64_t seed = 7000;
  for (kiln::DType dt : {kiln::kFloat16, kiln::kBFloat16, kiln::kFloat32}) {
    for (int64_t s : {47, 1024}) {
      for (int64_t l : {3, 40}) {
        if (l == 40 && dt == kiln::kFloat32) continue;  // no prefill kernel for float32
        Both q = random_both({2, 4, l, 64}, dt, ++seed),
             kc = random_both({2, 2, s, 64}, dt, ++seed),
             vc = random_both({2, 2, s, 64}, dt, ++seed);
        const std::string what =
            "kv_cache_attention " + tag(dt) + " S" + std::to_string(s) + " L" + std::to_string(l);
        for (std::vector<int64_t> p : std::vector<std::vector<int64_t>>{{0}, {s - l}, {s - l, 0}}) {
          Both pos = positions(p);
          expect_close(
              what + " pos[0] " + std::to_string(p[0]) + " of " + std::to_string(p.size()),
              [&] { return kiln::kv_cache_attention(q.cuda, kc.cuda, vc.cuda, pos.cuda); },
              ref_cache(q.cpu, kc.cpu, vc.cpu, pos.cpu), dt, 1);
        }
        const std::string range =
            "[kv_cache_attention] expected cache_position in [0, S - L] = "
            "[0, " +
            std::to_string(s - l) + "] (S = " + std::to_string(s) +
            " cache slots, L = " + std::to_string(l) + " query rows), got ";
        for (std::vector<int64_t> p : std::vector<std::vector<int64_t>>{
                 {s - l + 1}, {s + 5}, {-1}, {-7}, {s - l, -2}, {INT64_MAX}, {INT64_MIN}}) {
          Both pos = positions(p);
          SCOPED_TRACE(what + " pos " + std::to_string(p[0]) + " of " + std::to_string(p.size()));
          const int64_t bad = p.size() > 1 ? p[1] : p[0];
          kiln::EagerGuard eager;
          EXPECT_KILN_ERROR(kiln::kv_cache_attention(q.cuda, kc.cuda, vc.cuda, pos.cuda),
                            range + std::to_string(bad));
          EXPECT_KILN_ERROR(kiln::kv_cache_attention(q.cpu, kc.cpu, vc.cpu, pos.cpu),
                            range + std::to_string(bad));
        }
        // A 0-dim position.
        kiln::EagerGuard eager;
        Tensor p0 = kiln::from_data(std::vector<int64_t>{(s - l) / 2}.data(), {}, kiln::kInt64);
        expect_close(
            what + " 0-dim pos",
            [&] { return kiln::kv_cache_attention(q.cuda, kc.cuda, vc.cuda, p0.cuda()); },
            ref_cache(q.cpu, kc.cpu, vc.cpu, p0), dt, 1);
      }
    }
  }
}

// The kernel reads the position on the device: the same host calls after the
// position changed in place give the new answer (what lets a captured CUDA
// graph replay every step).
TEST(CudaAttention, DecodePositionIsReadOnTheDevice) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  Qkv x = gpt2_views(1, 12, 1, 64, kiln::kFloat16, 8000);
  Both kc = random_both({1, 12, 1024, 64}, kiln::kFloat16, 8001),
       vc = random_both({1, 12, 1024, 64}, kiln::kFloat16, 8002);
  Tensor pos = positions({0}).cuda;
  for (int64_t p : {0, 1, 16, 17, 63, 64, 500, 1023}) {
    pos.fill_(p);
    expect_close(
        "kv_cache_attention pos " + std::to_string(p) + " set on the device",
        [&] { return kiln::kv_cache_attention(x.q.cuda, kc.cuda, vc.cuda, pos); },
        ref_cache(x.q.cpu, kc.cpu, vc.cpu, positions({p}).cpu), kiln::kFloat16, 1);
  }
}

// The kernel right before the attention writes the position (an in-place
// add, launched early like every generated kernel), so the attention's read
// before its wait (Note [Decode cache prefetched early]) may see the old
// value: only the prefetch may follow it. 64 steps launched back to back,
// across tile and split boundaries, one position per batch row; each result
// against the reference at its own position.
TEST(CudaAttention, DecodeFollowsAPositionTheKernelBeforeWrote) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  for (kiln::DType dt : {kiln::kFloat16, kiln::kBFloat16}) {
    Qkv x = gpt2_views(2, 12, 1, 64, dt, 8100);
    Both kc = random_both({2, 12, 1024, 64}, dt, 8101),
         vc = random_both({2, 12, 1024, 64}, dt, 8102);
    const std::vector<int64_t> start = {30, 500};
    Tensor pos = positions(start).cuda;
    std::vector<Tensor> got;
    for (int step = 1; step <= 64; ++step) {
      pos.add_(1);
      got.push_back(kiln::kv_cache_attention(x.q.cuda, kc.cuda, vc.cuda, pos));
    }
    for (int step = 1; step <= 64; ++step) {
      const Tensor want =
          ref_cache(x.q.cpu, kc.cpu, vc.cpu, positions({start[0] + step, start[1] + step}).cpu);
      const std::string msg =
          kiln::testing::compare(f64(got[static_cast<size_t>(step - 1)].cpu()), want, tol(dt));
      EXPECT_TRUE(msg.empty()) << tag(dt) << " step " << step << ": " << msg;
    }
  }
}

// More rows per kv head than the decode kernel holds (the prefill kernel with
// the device position), float64 and other head dims (the unfused path with
// a mask built on the device).
TEST(CudaAttention, DecodeOtherPaths) {
  KILN_REQUIRE_CUDA();
  uint64_t seed = 9000;
  struct Case {
    kiln::DType dt;
    int64_t hq, hkv, l, d;
  };
  for (Case c : {Case{kiln::kFloat16, 8, 2, 5, 64}, Case{kiln::kBFloat16, 8, 2, 5, 128},
                 Case{kiln::kFloat16, 4, 4, 70, 128}, Case{kiln::kFloat32, 8, 2, 5, 64},
                 Case{kiln::kFloat64, 4, 2, 2, 64}, Case{kiln::kFloat16, 4, 2, 2, 80}}) {
    Both q = random_both({2, c.hq, c.l, c.d}, c.dt, ++seed),
         kc = random_both({2, c.hkv, 300, c.d}, c.dt, ++seed),
         vc = random_both({2, c.hkv, 300, c.d}, c.dt, ++seed);
    for (std::vector<int64_t> p :
         std::vector<std::vector<int64_t>>{{0}, {150}, {300 - c.l}, {300 - c.l, 10}}) {
      Both pos = positions(p);
      expect_close(
          "kv_cache_attention " + tag(c.dt) + " Hq" + std::to_string(c.hq) + " Hkv" +
              std::to_string(c.hkv) + " L" + std::to_string(c.l) + " d" + std::to_string(c.d) +
              " pos[0] " + std::to_string(p[0]),
          [&] { return kiln::kv_cache_attention(q.cuda, kc.cuda, vc.cuda, pos.cuda); },
          ref_cache(q.cpu, kc.cpu, vc.cpu, pos.cpu), c.dt);
    }
  }
}

// --- attention_merged_heads (Note [Merged heads]) -------------------------------------

Tensor merged_heads(const Tensor& q, const Tensor& k, const Tensor& v,
                    const std::optional<Tensor>& mask, bool causal, bool gqa) {
  return kiln::call_op("attention_merged_heads",
                       {q, k, v, mask ? kiln::IValue(*mask) : kiln::IValue(), 0.0, causal},
                       {{"enable_gqa", gqa}})[0]
      .to_tensor();
}

// [..., H, L, Ev] -> [..., L, H, Ev]
Tensor merged(const Tensor& t) {
  kiln::EagerGuard eager;
  return t.transpose(-3, -2).contiguous();
}

// The prefill kernel writes [..., L, H, D] through a transposed view: one
// kernel, the values of attention then the merge; other dtypes and head
// dims take attention then a copy.
TEST(CudaAttention, MergedHeadsMatchAttentionThenMerge) {
  KILN_REQUIRE_CUDA();
  uint64_t seed = 9600;
  for (kiln::DType dt : {kiln::kFloat16, kiln::kBFloat16, kiln::kFloat32}) {
    for (int64_t d : {64, 128, 40}) {
      for (int64_t t : {1, 17, 130}) {
        for (bool causal : {false, true}) {
          Qkv x = gpt2_views(2, 3, t, d, dt, ++seed);
          const std::string what = "merged heads " + tag(dt) + " d" + std::to_string(d) + " T" +
                                   std::to_string(t) + (causal ? " causal" : "");
          const bool fused = dt != kiln::kFloat32 && d != 40;
          expect_close(
              what,
              [&] {
                Tensor r = merged_heads(x.q.cuda, x.k.cuda, x.v.cuda, std::nullopt, causal, false);
                EXPECT_TRUE(r.is_contiguous()) << what;
                EXPECT_EQ(r.sizes(), (std::vector<int64_t>{2, t, 3, d})) << what;
                return r;
              },
              merged(
                  ref_sdpa(x.q.cpu, x.k.cpu, x.v.cpu, std::nullopt, causal, std::nullopt, false)),
              dt, fused ? 1 : -1);
        }
      }
    }
  }
  // A mask, grouped-query heads, extra batch dims, strided and transposed operands.
  for (kiln::DType dt : kHalfs) {
    Both q = apply(random_both({2, 3, 4, 64, 33}, dt, ++seed),
                   [](const Tensor& a) { return a.narrow(-1, 0, 32).transpose(-1, -2); });
    Both k = random_both({2, 3, 2, 50, 64}, dt, ++seed),
         v = random_both({2, 3, 2, 50, 64}, dt, ++seed);
    Both mask = random_both({32, 50}, kiln::kBool, ++seed, 0, 2);
    expect_close(
        "merged heads gqa masked " + tag(dt),
        [&] { return merged_heads(q.cuda, k.cuda, v.cuda, mask.cuda, false, true); },
        merged(ref_sdpa(q.cpu, k.cpu, v.cpu, mask.cpu, false, std::nullopt, true)), dt);
  }
}

// A GPT-2 merge of heads, recorded lazily: the trace folds it into the
// attention (one kernel, no copy) and the values are attention's.
TEST(CudaAttention, MergedHeadsLazy) {
  KILN_REQUIRE_CUDA();
  for (kiln::DType dt : kHalfs) {
    Qkv x = gpt2_views(2, 12, 128, 64, dt, 9700);
    Tensor want =
        merged(ref_sdpa(x.q.cpu, x.k.cpu, x.v.cpu, std::nullopt, true, std::nullopt, false));
    kiln::jit::flush();
    kiln::sync();
    const int64_t before = launches();
    Tensor got =
        kiln::scaled_dot_product_attention(x.q.cuda, x.k.cuda, x.v.cuda, std::nullopt, true)
            .transpose(1, 2)
            .reshape({2, 128, 768});
    EXPECT_EQ(kiln::jit::TraceBuffer::current().describe_pending(),
              "extern[attention_merged_heads]");
    kiln::sync();
    EXPECT_EQ(launches() - before, 1) << tag(dt);
    std::string msg = kiln::testing::compare(f64(got.cpu()), want.reshape({2, 128, 768}), tol(dt));
    EXPECT_TRUE(msg.empty()) << tag(dt) << ": " << msg;
  }
}

// Recorded lazily, kv_cache_attention runs as an extern step of the trace.
TEST(CudaAttention, DecodeLazy) {
  KILN_REQUIRE_CUDA();
  Both q = random_both({2, 4, 1, 64}, kiln::kFloat16, 9500),
       kc = random_both({2, 4, 1024, 64}, kiln::kFloat16, 9501),
       vc = random_both({2, 4, 1024, 64}, kiln::kFloat16, 9502);
  Both pos = positions({700});
  Tensor got = kiln::kv_cache_attention(q.cuda * 1.0, kc.cuda, vc.cuda, pos.cuda + 0);
  std::string msg = kiln::testing::compare(
      f64(got.cpu()), ref_cache(q.cpu, kc.cpu, vc.cpu, pos.cpu), tol(kiln::kFloat16));
  EXPECT_TRUE(msg.empty()) << msg;
}

// Note [Cache writes in the decode kernel]: a recorded decode step (write_kv
// twice, then decode_attention) runs as one kernel that also stores the new
// key and value; output and both caches equal the eager CPU step, at the
// first, a middle and the last slot, with grouped-query heads and with a
// split sequence. A position past the cache raises as index_copy_ does.
TEST(CudaAttention, DecodeCacheWritesFoldIntoTheKernel) {
  KILN_REQUIRE_CUDA();
  uint64_t seed = 9700;
  for (kiln::DType dt : {kiln::kFloat16, kiln::kBFloat16, kiln::kFloat32}) {
    for (int64_t d : {64, 128}) {
      for (int64_t s : {33, 1000}) {
        for (int64_t p : {int64_t{0}, s / 2, s - 1}) {
          for (int64_t hkv : {4, 2}) {
            const std::string what = "cache writes " + tag(dt) + " d" + std::to_string(d) + " S" +
                                     std::to_string(s) + " p" + std::to_string(p) + " kv heads " +
                                     std::to_string(hkv);
            Both q = random_both({2, 4, 1, d}, dt, ++seed);
            Both k = random_both({2, hkv, 1, d}, dt, ++seed),
                 v = random_both({2, hkv, 1, d}, dt, ++seed);
            Both kc = random_both({2, hkv, s, d}, dt, ++seed),
                 vc = random_both({2, hkv, s, d}, dt, ++seed);
            Both pos = positions({p});
            Tensor kc_ref = kc.cpu.clone(), vc_ref = vc.cpu.clone(), want;
            {
              kiln::EagerGuard eager;
              kiln::nn::write_kv(kc_ref, pos.cpu, k.cpu);
              kiln::nn::write_kv(vc_ref, pos.cpu, v.cpu);
              want = ref_cache(q.cpu, kc_ref, vc_ref, pos.cpu);
            }
            kiln::sync();
            const int64_t before = launches();
            Tensor dk = kc.cuda, dv = vc.cuda;
            kiln::nn::write_kv(dk, pos.cuda, k.cuda);
            kiln::nn::write_kv(dv, pos.cuda, v.cuda);
            Tensor got = kiln::nn::decode_attention(q.cuda, dk, dv, pos.cuda).cpu();
            EXPECT_EQ(launches() - before, 1) << what << ": one kernel";
            std::string msg = kiln::testing::compare(f64(got), want, tol(dt));
            EXPECT_TRUE(msg.empty()) << what << ": " << msg;
            EXPECT_TENSOR_CLOSE_TOL(dk.cpu(), kc_ref, 0, 0);
            EXPECT_TENSOR_CLOSE_TOL(dv.cpu(), vc_ref, 0, 0);
          }
        }
      }
    }
  }
  Both q = random_both({1, 2, 1, 64}, kiln::kFloat16, ++seed);
  Both k = random_both({1, 2, 1, 64}, kiln::kFloat16, ++seed);
  Both kc = random_both({1, 2, 16, 64}, kiln::kFloat16, ++seed),
       vc = random_both({1, 2, 16, 64}, kiln::kFloat16, ++seed);
  Tensor dk = kc.cuda, dv = vc.cuda;
  Tensor far = positions({16}).cuda;
  kiln::nn::write_kv(dk, far, k.cuda);
  kiln::nn::write_kv(dv, far, k.cuda);
  EXPECT_KILN_ERROR(kiln::nn::decode_attention(q.cuda, dk, dv, far).cpu(),
                    "index 16 is out of bounds for dimension 2 with size 16");
}

}  // namespace
