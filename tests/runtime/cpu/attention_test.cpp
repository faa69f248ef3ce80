// The CPU attention kernels' new arguments against explicit references:
// grouped-query attention (enable_gqa) against key/value heads repeated by
// hand (repeat_interleave, which PyTorch 1.13's oracle cannot call with
// enable_gqa), and kv_cache_attention against scaled_dot_product_attention
// with the mask arange(S) <= p + arange(L)[:, None] spelled out. Inputs are
// random and non-contiguous; the group split is a view, so layouts matter.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::random_tensor;

// [..., H, S, E] -> [..., H * group, S, E], each head `group` times in a row.
Tensor repeat_interleave_heads(const Tensor& t, int64_t group) {
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  const size_t h = sizes.size() - 3;
  std::vector<int64_t> merged = sizes;
  merged[h] *= group;
  sizes.insert(sizes.begin() + static_cast<std::ptrdiff_t>(h) + 1, group);
  return t.unsqueeze(static_cast<int64_t>(h) + 1).expand(sizes).contiguous().reshape(merged);
}

// keep[b or 0, 0, i, j] = j <= pos[b] + i, from the positions' values.
Tensor cache_mask(const std::vector<int64_t>& pos, int64_t l, int64_t s) {
  const int64_t nb = static_cast<int64_t>(pos.size());
  Tensor keep = kiln::zeros({nb, 1, l, s}, kiln::kBool);
  bool* p = keep.data_ptr<bool>();
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t i = 0; i < l; ++i) {
      for (int64_t j = 0; j < s; ++j) p[(b * l + i) * s + j] = j <= pos[b] + i;
    }
  }
  return keep;
}

Tensor positions(const std::vector<int64_t>& pos) {
  return kiln::from_data(pos.data(), {static_cast<int64_t>(pos.size())}, kiln::kInt64);
}

kiln::testing::Tolerance tol(kiln::DType t) {
  return t == kiln::kFloat64 ? kiln::testing::Tolerance{1e-12, 1e-12}
                             : kiln::testing::Tolerance{1e-5, 1e-5};
}

TEST(CpuAttention, GroupedQueryMatchesRepeatedHeads) {
  kiln::EagerGuard eager;
  uint64_t seed = 100;
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat64}) {
    for (const char* layout : {"contiguous", "transposed", "strided", "offset"}) {
      for (int64_t hkv : {1, 2, 4}) {
        const int64_t b = 2, hq = 4, l = 5, s = 7, e = 8;
        Tensor q = random_tensor({b, hq, l, e}, dt, layout, ++seed);
        Tensor k = random_tensor({b, hkv, s, e}, dt, layout, ++seed);
        Tensor v = random_tensor({b, hkv, s, 6}, dt, layout, ++seed);
        const int64_t g = hq / hkv;
        Tensor kr = repeat_interleave_heads(k, g), vr = repeat_interleave_heads(v, g);
        const std::string what =
            std::string(kiln::dtype_name(dt)) + " " + layout + " hkv " + std::to_string(hkv);
        for (bool causal : {false, true}) {
          Tensor got =
              kiln::scaled_dot_product_attention(q, k, v, std::nullopt, causal, std::nullopt, true);
          Tensor want = kiln::scaled_dot_product_attention(q, kr, vr, std::nullopt, causal);
          std::string msg = kiln::testing::compare(got, want, tol(dt));
          EXPECT_TRUE(msg.empty()) << what << " causal " << causal << ": " << msg;
        }
        // Masks of every broadcast shape, per query head included.
        for (std::vector<int64_t> ms : std::vector<std::vector<int64_t>>{
                 {l, s}, {hq, l, s}, {b, 1, l, s}, {b, hq, 1, s}, {s}}) {
          for (kiln::DType mt : {kiln::kBool, dt}) {
            Tensor m = random_tensor(ms, mt, layout, ++seed, mt == kiln::kBool ? 0 : -2, 2);
            Tensor got =
                kiln::scaled_dot_product_attention(q, k, v, m, false, 0.4, /*enable_gqa=*/true);
            Tensor want = kiln::scaled_dot_product_attention(q, kr, vr, m, false, 0.4);
            std::string msg = kiln::testing::compare(got, want, tol(dt));
            EXPECT_TRUE(msg.empty()) << what << " mask " << kiln::dtype_name(mt) << ": " << msg;
          }
        }
      }
    }
  }
}

TEST(CpuAttention, GroupedQueryBroadcastsBatchAndIgnoresEqualHeads) {
  kiln::EagerGuard eager;
  Tensor q = random_tensor({3, 6, 4, 8}, kiln::kFloat32, "transposed", 1);
  Tensor k = random_tensor({2, 5, 8}, kiln::kFloat32, "contiguous", 2);  // no batch dim
  Tensor v = random_tensor({1, 2, 5, 8}, kiln::kFloat32, "strided", 3);
  Tensor got = kiln::scaled_dot_product_attention(q, k, v, std::nullopt, false, std::nullopt, true);
  Tensor want = kiln::scaled_dot_product_attention(q, repeat_interleave_heads(k, 3),
                                                   repeat_interleave_heads(v, 3));
  EXPECT_EQ(got.sizes(), (kiln::IntArrayRef{3, 6, 4, 8}));
  EXPECT_TENSOR_CLOSE_TOL(got, want, 1e-5, 1e-5);
  // enable_gqa with as many heads changes nothing.
  Tensor k6 = random_tensor({3, 6, 5, 8}, kiln::kFloat32, "contiguous", 4);
  Tensor v6 = random_tensor({3, 6, 5, 8}, kiln::kFloat32, "contiguous", 5);
  EXPECT_TENSOR_CLOSE_TOL(
      kiln::scaled_dot_product_attention(q, k6, v6, std::nullopt, true, std::nullopt, true),
      kiln::scaled_dot_product_attention(q, k6, v6, std::nullopt, true), 0, 0);
  // Without enable_gqa the heads must broadcast.
  EXPECT_KILN_ERROR(kiln::scaled_dot_product_attention(q, k, v), "do not broadcast");
}

TEST(CpuAttention, KvCacheMatchesExplicitMask) {
  kiln::EagerGuard eager;
  uint64_t seed = 200;
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat64}) {
    for (int64_t s : {1, 17, 64}) {
      for (int64_t l : {1, 3}) {
        for (int64_t hkv : {2, 4}) {
          const int64_t b = 2, hq = 4, e = 16, g = hq / hkv;
          // q as GPT-2 makes it: heads split out of a fused projection.
          Tensor qkv = random_tensor({b, l, 3 * hq * e}, dt, "contiguous", ++seed);
          Tensor q = qkv.slice(2, 0, hq * e).view({b, l, hq, e}).transpose(1, 2);
          Tensor k = random_tensor({b, hkv, s, e}, dt, "offset", ++seed);
          Tensor v = random_tensor({b, hkv, s, e}, dt, "transposed", ++seed);
          const Tensor kr = repeat_interleave_heads(k, g), vr = repeat_interleave_heads(v, g);
          if (l > s) continue;  // more rows than slots: an error (AttentionErrors)
          // Positions: start, middle, the last that fits the rows
          // (Note [Cache positions in range]).
          for (std::vector<int64_t> pos : std::vector<std::vector<int64_t>>{
                   {0}, {(s - l) / 2}, {s - l}, {s - l, 0}, {0, (s - l) / 3}}) {
            Tensor p = positions(pos);
            if (pos.size() == 1) p = seed % 2 ? p.reshape({}) : p;  // 0-dim and [1] alike
            Tensor got = kiln::kv_cache_attention(q, k, v, p);
            Tensor want = kiln::scaled_dot_product_attention(q, kr, vr, cache_mask(pos, l, s));
            std::string msg = kiln::testing::compare(got, want, tol(dt));
            EXPECT_TRUE(msg.empty()) << kiln::dtype_name(dt) << " S " << s << " L " << l << " hkv "
                                     << hkv << " pos[0] " << pos[0] << ": " << msg;
          }
          ++seed;
        }
      }
    }
  }
}

TEST(CpuAttention, KvCacheScaleAndMeta) {
  kiln::EagerGuard eager;
  Tensor q = random_tensor({1, 8, 1, 32}, kiln::kFloat32, "contiguous", 7);
  Tensor k = random_tensor({1, 2, 9, 32}, kiln::kFloat32, "contiguous", 8);
  Tensor v = random_tensor({1, 2, 9, 12}, kiln::kFloat32, "contiguous", 9);
  Tensor p = positions({5});
  EXPECT_TENSOR_CLOSE_TOL(kiln::kv_cache_attention(q, k, v, p, 0.25),
                          kiln::scaled_dot_product_attention(q, repeat_interleave_heads(k, 4),
                                                             repeat_interleave_heads(v, 4),
                                                             cache_mask({5}, 1, 9), false, 0.25),
                          1e-5, 1e-5);
  auto meta = [](const Tensor& t) {
    return kiln::empty(t.sizes(), kiln::TensorOptions(t.dtype()).device(kiln::Device::meta()));
  };
  Tensor out = kiln::kv_cache_attention(meta(q), meta(k), meta(v), meta(p));
  EXPECT_TRUE(out.device().is_meta());
  EXPECT_EQ(out.sizes(), (kiln::IntArrayRef{1, 8, 1, 12}));
  Tensor sd = kiln::scaled_dot_product_attention(meta(q), meta(k), meta(v), std::nullopt, false,
                                                 std::nullopt, true);
  EXPECT_EQ(sd.sizes(), (kiln::IntArrayRef{1, 8, 1, 12}));
}

// The lazy path records kv_cache_attention like any op with a Meta kernel
// and gives the eager result.
TEST(CpuAttention, KvCacheLazyMatchesEager) {
  Tensor q = random_tensor({2, 4, 2, 16}, kiln::kFloat32, "transposed", 11);
  Tensor k = random_tensor({2, 2, 20, 16}, kiln::kFloat32, "contiguous", 12);
  Tensor v = random_tensor({2, 2, 20, 16}, kiln::kFloat32, "contiguous", 13);
  Tensor p = positions({7, 12});
  Tensor want;
  {
    kiln::EagerGuard eager;
    want = kiln::kv_cache_attention(q, k, v, p);
  }
  Tensor got = kiln::kv_cache_attention(q * 1.0, k, v, p + 0);
  EXPECT_TENSOR_CLOSE_TOL(got, want, 1e-6, 1e-6);
}

}  // namespace
