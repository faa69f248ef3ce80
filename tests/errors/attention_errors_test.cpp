// Must-fail calls of grouped-query scaled_dot_product_attention and of
// kv_cache_attention: each raises kiln::Error naming the op, the argument,
// what was expected and what came (the Meta kernel's checks, which every
// backend runs first).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

Tensor f32(std::initializer_list<int64_t> sizes) {
  return kiln::ones(sizes);
}
Tensor pos(std::initializer_list<int64_t> sizes, kiln::DType t = kiln::kInt64) {
  return kiln::zeros(sizes, t);
}

TEST(AttentionErrors, GroupedQuery) {
  auto gqa = [](const Tensor& q, const Tensor& k, const Tensor& v) {
    return kiln::scaled_dot_product_attention(q, k, v, std::nullopt, false, std::nullopt, true);
  };
  EXPECT_KILN_ERROR(gqa(f32({2, 6, 3, 8}), f32({2, 4, 5, 8}), f32({2, 4, 5, 8})),
                    "[scaled_dot_product_attention] expected (enable_gqa) query heads a multiple "
                    "of key heads at dim -3, got query [2, 6, 3, 8] and key [2, 4, 5, 8]");
  EXPECT_KILN_ERROR(gqa(f32({2, 6, 3, 8}), f32({2, 2, 5, 8}), f32({2, 3, 5, 8})),
                    "expected (enable_gqa) value with as many heads as key at dim -3");
  // Without enable_gqa, fewer key heads must broadcast like any batch dim.
  EXPECT_KILN_ERROR(
      kiln::scaled_dot_product_attention(f32({2, 6, 3, 8}), f32({2, 2, 5, 8}), f32({2, 2, 5, 8})),
      "have batch dims that do not broadcast");
}

TEST(AttentionErrors, KvCache) {
  Tensor q = f32({2, 4, 1, 8}), k = f32({2, 2, 16, 8}), v = f32({2, 2, 16, 8});
  EXPECT_KILN_ERROR(kiln::kv_cache_attention(f32({4, 1, 8}), k, v, pos({1})),
                    "[kv_cache_attention] expected query [B, Hq, L, D], key_cache [B, Hkv, S, D] "
                    "and value_cache [B, Hkv, S, Dv], got shapes [4, 1, 8]");
  EXPECT_KILN_ERROR(kiln::kv_cache_attention(q, f32({3, 2, 16, 8}), v, pos({1})),
                    "got shapes [2, 4, 1, 8], [3, 2, 16, 8] and [2, 2, 16, 8]");
  EXPECT_KILN_ERROR(kiln::kv_cache_attention(q, k, f32({2, 2, 15, 8}), pos({1})),
                    "[kv_cache_attention] expected query [B, Hq, L, D]");
  EXPECT_KILN_ERROR(kiln::kv_cache_attention(q, f32({2, 2, 16, 4}), f32({2, 2, 16, 4}), pos({1})),
                    "[kv_cache_attention] expected query [B, Hq, L, D]");
  EXPECT_KILN_ERROR(
      kiln::kv_cache_attention(f32({2, 3, 1, 8}), k, v, pos({1})),
      "[kv_cache_attention] expected query heads a multiple of the cache's heads, got 3 and 2");
  EXPECT_KILN_ERROR(kiln::kv_cache_attention(q, k, v, pos({1}, kiln::kFloat32)),
                    "[kv_cache_attention] expected an int64 cache_position, got float32");
  EXPECT_KILN_ERROR(kiln::kv_cache_attention(q, k, v, pos({3})),
                    "[kv_cache_attention] expected cache_position of one element or [2], got "
                    "shape [3]");
  EXPECT_KILN_ERROR(kiln::kv_cache_attention(q, k, v, pos({2, 1})),
                    "expected cache_position of one element or [2], got shape [2, 1]");
  EXPECT_KILN_ERROR(
      kiln::kv_cache_attention(q, k, kiln::ones({2, 2, 16, 8}, kiln::kFloat64), pos({1})),
      "[kv_cache_attention] expected query, key and value of the same dtype, got "
      "float32, float32 and float64");
  EXPECT_KILN_ERROR(kiln::kv_cache_attention(kiln::ones({2, 4, 1, 8}, kiln::kInt64),
                                             kiln::ones({2, 2, 16, 8}, kiln::kInt64),
                                             kiln::ones({2, 2, 16, 8}, kiln::kInt64), pos({1})),
                    "expected query, key and value of a floating dtype, got int64");
}

// Note [Cache positions in range]: query row i sits at slot p + i, so p must
// be in [0, S - L]. Before, a position past the end attended over every slot
// and a negative one gave NaN rows, with no error.
TEST(AttentionErrors, KvCachePositionOutOfRange) {
  auto at = [](std::vector<int64_t> p) {
    return kiln::tensor(p, {static_cast<int64_t>(p.size())});
  };
  Tensor k = f32({2, 2, 16, 8}), v = f32({2, 2, 16, 8});
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    // Read at once: in lazy mode the kernel, and its check, run there.
    auto run = [](const Tensor& t) { return kiln::sum(t).item<float>(); };
    Tensor q1 = f32({2, 4, 1, 8}), q3 = f32({2, 4, 3, 8});
    EXPECT_KILN_ERROR(run(kiln::kv_cache_attention(q1, k, v, at({16}))),
                      "[kv_cache_attention] expected cache_position in [0, S - L] = [0, 15] (S = "
                      "16 cache slots, L = 1 query rows), got 16");
    EXPECT_KILN_ERROR(run(kiln::kv_cache_attention(q1, k, v, at({-1}))),
                      "[kv_cache_attention] expected cache_position in [0, S - L] = [0, 15] (S = "
                      "16 cache slots, L = 1 query rows), got -1");
    // Three new rows from slot 14 would run past the cache.
    EXPECT_KILN_ERROR(run(kiln::kv_cache_attention(q3, k, v, at({14}))),
                      "expected cache_position in [0, S - L] = [0, 13] (S = 16 cache slots, L = 3 "
                      "query rows), got 14");
    EXPECT_KILN_ERROR(run(kiln::kv_cache_attention(q3, k, v, at({2, 99}))), "got 99 at element 1");
    EXPECT_KILN_ERROR(run(kiln::kv_cache_attention(q1, k, v, at({INT64_MIN, 0}))),
                      "got -9223372036854775808 at element 0");
    EXPECT_KILN_ERROR(
        run(kiln::kv_cache_attention(q1, k, v, kiln::scalar_tensor(INT64_MAX, kiln::kInt64))),
        "got 9223372036854775807");
    if (lazy) {
      // A dropped result's error is raised at the next materialization (Note
      // [Failures in a trace]), not dropped with it.
      (void)kiln::kv_cache_attention(q1, k, v, at({16}));
      EXPECT_KILN_ERROR(kiln::sync(),
                        "failed and nothing held its result: [kv_cache_attention] expected "
                        "cache_position in [0, S - L] = [0, 15]");
    }
    // The edges that fit.
    EXPECT_FALSE(std::isnan(run(kiln::kv_cache_attention(q3, k, v, at({13, 0})))));
    EXPECT_FALSE(std::isnan(run(kiln::kv_cache_attention(q1, k, v, at({15})))));
  }
  // More query rows than the cache has slots fit no position.
  EXPECT_KILN_ERROR(kiln::kv_cache_attention(f32({2, 4, 17, 8}), k, v, pos({1})),
                    "[kv_cache_attention] expected at most 16 query rows (the cache's length), got "
                    "query of shape [2, 4, 17, 8]");
}

// decode_attention with a sliding window is a masked attention, which reads
// no position: a position outside the cache gave a band past its end (or
// NaN rows below 0), with no error. Positions on the host are checked first,
// with or without a window.
TEST(AttentionErrors, DecodeAttentionPositionOutsideTheCache) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    Tensor q = f32({2, 4, 1, 8}), k = f32({2, 2, 16, 8}), v = f32({2, 2, 16, 8});
    for (int64_t window : {0, 4}) {
      EXPECT_KILN_ERROR(kiln::nn::decode_attention(q, k, v, kiln::tensor<int64_t>({3, 16}), window),
                        "[decode_attention] expected pos (the first query row's cache slot) in "
                        "[0, 16), got 16 at element 1");
      EXPECT_KILN_ERROR(kiln::nn::decode_attention(q, k, v, kiln::tensor<int64_t>({-1}), window),
                        "[decode_attention] expected pos (the first query row's cache slot) in "
                        "[0, 16), got -1 at element 0");
      EXPECT_EQ(kiln::nn::decode_attention(q, k, v, kiln::tensor<int64_t>({15, 0}), window).sizes(),
                (std::vector<int64_t>{2, 4, 1, 8}));
      // Its own arguments, and the attention's checks, under its name (they
      // named Tensor::size, Tensor::dtype and kv_cache_attention).
      const Tensor p = kiln::tensor<int64_t>({1});
      EXPECT_KILN_ERROR(
          kiln::nn::decode_attention(f32({2, 4, 8}), k, v, p, window),
          "[decode_attention] expected q [batch, heads, tokens, head_dim], got [2, 4, "
          "8]");
      EXPECT_KILN_ERROR(kiln::nn::decode_attention(Tensor(), k, v, p, window),
                        "[decode_attention] expected q [batch, heads, tokens, head_dim], got []");
      EXPECT_KILN_ERROR(kiln::nn::decode_attention(q, k, v, Tensor(), window),
                        "[decode_attention] expected pos as one int64 element or int64 [2], got an "
                        "undefined tensor");
      EXPECT_KILN_ERROR(kiln::nn::decode_attention(q, k, f32({2, 3, 16, 8}), p, window),
                        "[decode_attention]");
      EXPECT_KILN_ERROR(kiln::nn::decode_attention(q, k, f32({2, 2, 15, 8}), p, window),
                        "[decode_attention]");
    }
  }
}

// causal_attention, write_kv and write_kv_prefix check their own arguments
// and run what they are built on under their own names (Note [Composite ops
// name themselves]): these named Tensor::size, Tensor::dim,
// scaled_dot_product_attention, index_copy_ and copy_.
TEST(AttentionErrors, NnFunctionsNameThemselves) {
  Tensor q = f32({1, 2, 3, 4});
  EXPECT_KILN_ERROR(kiln::nn::causal_attention(Tensor(), q, q),
                    "[causal_attention] expected q [batch, heads, tokens, head_dim], got []");
  EXPECT_KILN_ERROR(
      kiln::nn::causal_attention(q, f32({2, 3, 4}), q),
      "[causal_attention] expected k [batch, heads, tokens, head_dim], got [2, 3, 4]");
  EXPECT_KILN_ERROR(kiln::nn::causal_attention(f32({1, 3, 3, 4}), q, q),
                    "[causal_attention] expected query heads a multiple of key/value heads, got 3 "
                    "and 2");
  for (int64_t window : {0, 2}) {
    EXPECT_KILN_ERROR(kiln::nn::causal_attention(q, f32({1, 2, 3, 5}), q, window),
                      "[causal_attention] expected query [..., L, E], key [..., S, E] and value");
  }
  Tensor cache = kiln::zeros({1, 2, 4, 4});
  EXPECT_KILN_ERROR(kiln::nn::write_kv(cache, kiln::tensor<int64_t>({0}), Tensor()),
                    "[write_kv] expected keys or values [1, 2, 1, 4], got []");
  Tensor expanded = kiln::zeros({1, 2, 1, 4}).expand({1, 2, 4, 4});
  EXPECT_KILN_ERROR(kiln::nn::write_kv(expanded, kiln::tensor<int64_t>({0}), f32({1, 2, 1, 4})),
                    "[write_kv] expected a target whose elements are distinct memory locations");
  EXPECT_KILN_ERROR(kiln::nn::write_kv_prefix(expanded, f32({1, 2, 2, 4})),
                    "[write_kv_prefix] expected a target whose elements are distinct memory "
                    "locations");
}

// On CUDA the position must be on the device (it is read there).
TEST(AttentionErrors, KvCachePositionOnTheHost) {
  KILN_REQUIRE_CUDA();
  kiln::EagerGuard eager;
  Tensor q = f32({1, 2, 1, 64}).cuda(), k = f32({1, 2, 16, 64}).cuda(), v = k;
  EXPECT_KILN_ERROR(
      kiln::kv_cache_attention(q, k, v, pos({1})),
      "[kv_cache_attention] expected 'cache_position' on cuda:0 like the input, got cpu");
}

// kv_cache_attention_write (Note [Cache writes in the decode kernel]): a
// call that fails any check, the attention's included, leaves both caches
// as they were.
TEST(AttentionErrors, CacheWriteThatFailsWritesNothing) {
  kiln::EagerGuard eager;
  Tensor kc = kiln::zeros({1, 2, 4, 8}), vc = kiln::zeros({1, 2, 4, 8});
  Tensor k = f32({1, 2, 1, 8}), v = f32({1, 2, 1, 8});
  auto call = [&](const Tensor& q, const Tensor& p) {
    return kiln::call_op("kv_cache_attention_write", {q, kc, vc, p, k, v});
  };
  EXPECT_KILN_ERROR(call(f32({1, 3, 1, 8}), pos({1})),
                    "[kv_cache_attention] expected query heads a multiple of the cache's heads");
  EXPECT_KILN_ERROR(call(f32({1, 2, 1, 8}), pos({1}, kiln::kInt32)), "int64");
  EXPECT_KILN_ERROR(call(f32({1, 2, 1, 8}), kiln::full({1}, 4, kiln::TensorOptions(kiln::kInt64))),
                    "out of bounds");
  EXPECT_EQ(kiln::sum(kiln::abs(kc)).item<float>(), 0.f);
  EXPECT_EQ(kiln::sum(kiln::abs(vc)).item<float>(), 0.f);
  // A good call writes slot 2 of each and attends to slots 0..2.
  Tensor out =
      call(f32({1, 2, 1, 8}), kiln::full({1}, 2, kiln::TensorOptions(kiln::kInt64)))[0].to_tensor();
  EXPECT_EQ(kiln::sum(kc).item<float>(), 16.f);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{1, 2, 1, 8}));
}

// split_heads / merge_heads check their own arguments (a head count of 0
// used to divide by zero).
TEST(AttentionErrors, SplitAndMergeHeads) {
  for (int64_t heads : {0, -2, 3}) {
    EXPECT_KILN_ERROR(kiln::nn::split_heads(f32({1, 3, 8}), heads),
                      "[split_heads] expected a positive number of heads dividing x's last dim 8, "
                      "got " +
                          std::to_string(heads) + " heads for x of shape [1, 3, 8]");
  }
  EXPECT_KILN_ERROR(kiln::nn::split_heads(f32({3, 8}), 2),
                    "[split_heads] expected x [batch, tokens, heads * head_dim], got [3, 8]");
  EXPECT_KILN_ERROR(kiln::nn::split_heads(Tensor(), 2),
                    "[split_heads] expected x [batch, tokens, heads * head_dim], got []");
  EXPECT_KILN_ERROR(kiln::nn::merge_heads(f32({2, 3, 4})),
                    "[merge_heads] expected x [batch, heads, tokens, head_dim], got [2, 3, 4]");
  EXPECT_EQ(kiln::nn::split_heads(f32({1, 3, 8}), 2).sizes(), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(kiln::nn::merge_heads(f32({1, 2, 3, 4})).sizes(), (std::vector<int64_t>{1, 3, 8}));
}

// Attention layers refuse head counts they cannot run when they are made,
// not at their first forward.
TEST(AttentionErrors, AttentionLayerHeads) {
  const kiln::TensorOptions meta = kiln::TensorOptions(kiln::kFloat32).device(kiln::Device::meta());
  auto make = [&](int64_t heads, int64_t kv_heads, int64_t head_dim) {
    return kiln::nn::Attention::empty(32, heads, kv_heads, head_dim, false, false, meta);
  };
  EXPECT_KILN_ERROR(make(0, 1, 8),
                    "[Attention] expected positive hidden, num_heads, num_kv_heads and head_dim, "
                    "got 32, 0, 1 and 8");
  EXPECT_KILN_ERROR(make(4, 0, 8), "got 32, 4, 0 and 8");
  EXPECT_KILN_ERROR(make(4, 2, 0), "got 32, 4, 2 and 0");
  EXPECT_KILN_ERROR(make(4, 3, 8),
                    "[Attention] expected query heads a multiple of key/value heads, got 4 and 3");
  EXPECT_KILN_ERROR(make(int64_t{1} << 60, 1, 64), "expected num_heads * head_dim to fit int64");
  EXPECT_EQ(make(4, 2, 8).k_proj.weight.sizes(), (std::vector<int64_t>{16, 32}));
}

}  // namespace
