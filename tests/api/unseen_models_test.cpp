// Transformer blocks shaped unlike the GPT-2 and Llama fixtures (odd hidden
// sizes, 3 or 5 heads, partial and interleaved rotary embeddings, T5's
// bucketed relative bias, ALiBi through baddbmm, in-place writes to views of
// intermediates), run lazily and through jit::compile (new values, a second
// shape, a weight updated in place) against eager execution.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using Fn = std::function<Tensor(const Tensor&)>;

Tensor seeded(std::vector<int64_t> sizes, uint64_t seed, double scale = 1.0) {
  kiln::EagerGuard eager;
  kiln::manual_seed(seed);
  return (kiln::randn(sizes) * scale).contiguous();
}

Tensor eager(const Fn& f, const Tensor& x) {
  kiln::EagerGuard eager;
  return f(x).contiguous();
}

// Each input lazily, then compiled three times with new values, at every
// input's shape, and non-contiguous; then `mutate` in place and again.
void check_modes(const Fn& f, const std::vector<Tensor>& xs, const std::function<void()>& mutate) {
  auto compiled = kiln::jit::compile(f);
  auto run_all = [&] {
    for (const Tensor& x : xs) {
      const Tensor expected = eager(f, x);
      EXPECT_TENSOR_CLOSE_TOL(f(x), expected, 1e-5, 2e-5);
      for (double shift : {0.0, 0.5, -0.25}) {
        const Tensor moved = shift == 0.0 ? x : (x + shift).contiguous();
        EXPECT_TENSOR_CLOSE_TOL(compiled(moved), eager(f, moved), 1e-5, 2e-5);
      }
      Tensor strided;
      {
        kiln::EagerGuard eager_scope;
        strided = x.transpose(0, 1).contiguous().transpose(0, 1);
      }
      EXPECT_TENSOR_CLOSE_TOL(compiled(strided), expected, 1e-5, 2e-5);
    }
  };
  run_all();
  {
    kiln::EagerGuard eager_scope;
    mutate();
  }
  run_all();
}

Tensor rotate_half(const Tensor& x) {
  auto halves = kiln::chunk(x, 2, -1);
  return kiln::cat({-halves[1], halves[0]}, -1);
}

// GPT-NeoX: parallel attention and MLP residuals, rotary on a quarter of a
// head dim of 40 (5 heads of hidden 200).
TEST(UnseenModelsTest, NeoXPartialRotaryParallelBlock) {
  const int64_t H = 200, heads = 5, d = 40, rd = 10;
  Tensor qkv_w = seeded({3 * H, H}, 1, 0.1), o_w = seeded({H, H}, 2, 0.1);
  Tensor up_w = seeded({2 * H, H}, 3, 0.1), down_w = seeded({H, 2 * H}, 4, 0.1);
  Tensor ln_w = seeded({H}, 5, 0.2) + 1.0, ln_b = seeded({H}, 6, 0.2);
  Fn f = [&](const Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1);
    Tensor h = kiln::layer_norm(x, {H}, ln_w, ln_b);
    Tensor qkv = kiln::linear(h, qkv_w).view({B, T, heads, 3 * d}).permute({0, 2, 1, 3});
    Tensor inv = 1.0 / kiln::pow(kiln::scalar_tensor(10000.0),
                                 kiln::arange(0, rd, 2, kiln::kFloat32) / double(rd));
    Tensor freqs = kiln::outer(kiln::arange(T, kiln::kFloat32), inv);
    Tensor angles = kiln::cat({freqs, freqs}, -1);
    Tensor cos = kiln::cos(angles), sin = kiln::sin(angles);
    auto rotate = [&](const Tensor& z) {
      Tensor part = z.narrow(-1, 0, rd);
      return kiln::cat({part * cos + rotate_half(part) * sin, z.narrow(-1, rd, d - rd)}, -1);
    };
    Tensor a = kiln::scaled_dot_product_attention(rotate(qkv.narrow(-1, 0, d)),
                                                  rotate(qkv.narrow(-1, d, d)),
                                                  qkv.narrow(-1, 2 * d, d), std::nullopt, true);
    a = kiln::linear(a.transpose(1, 2).reshape({B, T, H}), o_w);
    Tensor m = kiln::linear(kiln::gelu(kiln::linear(h, up_w)), down_w);
    return x + a + m;
  };
  check_modes(f, {seeded({3, 7, H}, 7), seeded({3, 33, H}, 8), seeded({3, 1, H}, 9)},
              [&] { up_w.narrow(0, 5, 30).mul_(1.5); });
}

// T5's bucketed relative position bias, computed from aranges, added to
// unscaled scores of 3 heads of 80 over a hidden size of 96.
Tensor t5_buckets(int64_t T) {
  Tensor pos = kiln::arange(T, kiln::kInt64);
  Tensor rel = pos.unsqueeze(0) - pos.unsqueeze(1);
  const int64_t half = 16, exact = 8;
  Tensor n = kiln::abs(rel);
  Tensor large = exact + (kiln::log(n.to(kiln::kFloat32) / double(exact)) /
                          std::log(128.0 / exact) * double(half - exact))
                             .to(kiln::kInt64);
  large = kiln::min(large, kiln::full_like(large, half - 1));
  return (rel > 0).to(kiln::kInt64) * half + kiln::where(n < exact, n, large);
}

TEST(UnseenModelsTest, T5RelativeBiasBuckets) {
  // transformers' _relative_position_bucket(bidirectional, 32 buckets,
  // max_distance 128) for query 20 over memory 0..20, as PyTorch computes it.
  Tensor b = t5_buckets(21).select(0, 20);
  const std::vector<int64_t> expected = {10, 10, 10, 10, 10, 9, 9, 9, 9, 8, 8,
                                         8,  8,  7,  6,  5,  4, 3, 2, 1, 0};
  EXPECT_EQ(b.tolist<int64_t>(), expected);
}

TEST(UnseenModelsTest, T5Block) {
  const int64_t H = 96, heads = 3, dkv = 80, inner = heads * dkv;
  Tensor q_w = seeded({inner, H}, 1, 0.1), k_w = seeded({inner, H}, 2, 0.1);
  Tensor v_w = seeded({inner, H}, 3, 0.1), o_w = seeded({H, inner}, 4, 0.1);
  Tensor rel = seeded({32, heads}, 5), norm_w = seeded({H}, 6, 0.2) + 1.0;
  Tensor wi = seeded({150, H}, 7, 0.1), wo = seeded({H, 150}, 8, 0.1);
  Fn f = [&](const Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1);
    auto rms = [&](const Tensor& y) {
      return norm_w * (y * kiln::rsqrt(kiln::mean(kiln::pow(y, 2), {-1}, true) + 1e-6));
    };
    Tensor bias = kiln::embedding(rel, t5_buckets(T)).permute({2, 0, 1}).unsqueeze(0);
    Tensor h = rms(x);
    auto split = [&](const Tensor& y) { return y.view({B, T, heads, dkv}).transpose(1, 2); };
    Tensor s =
        kiln::matmul(split(kiln::linear(h, q_w)), split(kiln::linear(h, k_w)).transpose(-1, -2)) +
        bias;
    Tensor a = kiln::matmul(kiln::softmax(s, -1), split(kiln::linear(h, v_w)));
    Tensor x2 = x + kiln::linear(a.transpose(1, 2).reshape({B, T, inner}), o_w);
    return x2 + kiln::linear(kiln::relu(kiln::linear(rms(x2), wi)), wo);
  };
  check_modes(f, {seeded({3, 7, H}, 9), seeded({3, 1, H}, 10), seeded({2, 33, H}, 11)},
              [&] { rel.mul_(1.5); });
}

// BLOOM's ALiBi bias (slopes for 5 heads, positions from a padding mask's
// cumsum) added by baddbmm, and GPT-J's interleaved rotary (strided slices
// stacked back).
TEST(UnseenModelsTest, AlibiBaddbmmAndInterleavedRotary) {
  const int64_t heads = 5, d = 16, H = heads * d;
  Tensor qkv_w = seeded({3 * H, H}, 1, 0.1);
  Fn f = [&](const Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1);
    Tensor mask =
        (kiln::arange(T, kiln::kInt64).unsqueeze(0) >= kiln::arange(B, kiln::kInt64).unsqueeze(1))
            .to(kiln::kInt64);  // row b left-padded by b
    Tensor slopes = kiln::pow(kiln::scalar_tensor(0.5), kiln::arange(1, 9, 2, kiln::kInt32));
    slopes = kiln::cat(
        {kiln::pow(kiln::scalar_tensor(0.0625), kiln::arange(1, 2, 1, kiln::kInt32)), slopes});
    Tensor positions = ((kiln::cumsum(mask, -1) - 1) * mask).unsqueeze(1);
    Tensor alibi = (slopes.unsqueeze(-1) * positions).reshape({B * heads, 1, T});
    Tensor qkv = kiln::linear(x, qkv_w).view({B, T, heads, 3, d});
    Tensor q = qkv.select(3, 0).transpose(1, 2).reshape({B * heads, T, d});
    Tensor k = qkv.select(3, 1).permute({0, 2, 3, 1}).reshape({B * heads, d, T});
    Tensor v = qkv.select(3, 2).transpose(1, 2);
    Tensor inv = 1.0 / kiln::pow(kiln::scalar_tensor(10000.0),
                                 kiln::arange(0, d, 2, kiln::kFloat32) / double(d));
    Tensor angles = kiln::outer(kiln::arange(T, kiln::kFloat32), inv);
    Tensor sin = kiln::repeat_interleave(kiln::sin(angles), 2, -1);
    Tensor cos = kiln::repeat_interleave(kiln::cos(angles), 2, -1);
    Tensor turned =
        kiln::stack({-v.slice(-1, 1, std::nullopt, 2), v.slice(-1, 0, std::nullopt, 2)}, -1)
            .flatten(-2);
    v = (v * cos + turned * sin).reshape({B * heads, T, d});
    Tensor s = kiln::baddbmm(alibi, q, k, 1.0, 0.25).view({B, heads, T, T});
    Tensor hidden = kiln::triu(kiln::ones({T, T}, kiln::kBool), 1) |
                    kiln::eq(mask, 0).unsqueeze(1).unsqueeze(1);
    s = kiln::masked_fill(s, hidden, -3.4028234663852886e38);
    return kiln::bmm(kiln::softmax(s, -1).view({B * heads, T, T}), v);
  };
  check_modes(f, {seeded({3, 7, H}, 2), seeded({2, 12, H}, 3)}, [&] { qkv_w.add_(0.01); });
}

// In-place writes to views of intermediates: the base and its other views
// read them, in order.
TEST(UnseenModelsTest, WritesToViewsOfIntermediates) {
  Tensor w = seeded({48, 24}, 1, 0.3);
  Fn f = [&](const Tensor& x) {
    Tensor q = kiln::linear(x, w);
    q.narrow(-1, 0, 10).mul_(2.0);
    q.transpose(0, 1).select(0, 1).add_(1.0);
    Tensor even = q.slice(-1, 0, std::nullopt, 2), odd = q.slice(-1, 1, std::nullopt, 2);
    Tensor saved = even.clone();
    even.copy_(odd * 2);
    odd.copy_(saved);
    Tensor s = kiln::matmul(q, q.transpose(-1, -2));
    kiln::masked_fill_(s, kiln::triu(kiln::ones({x.size(1), x.size(1)}, kiln::kBool), 1),
                       -INFINITY);
    return kiln::matmul(kiln::softmax(s, -1), q) + kiln::layer_norm(q, {q.size(-2), q.size(-1)});
  };
  check_modes(f, {seeded({3, 5, 24}, 2), seeded({2, 7, 24}, 3)}, [&] { w.mul_(0.5); });
}

}  // namespace
