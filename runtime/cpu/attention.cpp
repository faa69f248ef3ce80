// scaled_dot_product_attention and kv_cache_attention, inference only:
// softmax(q @ k^T * scale + mask) @ v over broadcast batch dims, as PyTorch
// 2.x's math path computes it. float16 and bfloat16 compute in float32 and
// round once at the end. A row whose keys are all masked out is NaN (softmax
// of only -inf), as PyTorch's math path gives. These are the reference the
// CUDA kernels are tested against, and (on meta twins) every backend's shape
// and argument checks.

#include <cmath>
#include <limits>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/blas_tensor.h"
#include "runtime/cpu/index_utils.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
constexpr const char* kCacheOp = "kv_cache_attention";

// The broadcast of the batch dims (all but the last two) of q, k and v.
DimVector attention_batch(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  size_t nb = 0;
  for (const Tensor* t : {&q, &k, &v}) nb = std::max(nb, static_cast<size_t>(t->dim() - 2));
  DimVector batch(nb, 1);
  for (const Tensor* t : {&q, &k, &v}) {
    const size_t own = static_cast<size_t>(t->dim() - 2);
    for (size_t i = 0; i < own; ++i) {
      int64_t s = t->size(static_cast<int64_t>(i));
      int64_t& b = batch[nb - own + i];
      KILN_CHECK(s == b || s == 1 || b == 1, "[", op, "] query, key and value of shapes ",
                 q.sizes(), ", ", k.sizes(), " and ", v.sizes(),
                 " have batch dims that do not broadcast");
      if (b == 1) b = s;
    }
  }
  return batch;
}

// Adds the mask to (or, for a bool mask, sets -inf in) each row of `scores`
// [rows, s], then replaces the row by its softmax. `mask` is contiguous and of
// the scores' full shape, or undefined.
template <class M>
void mask_softmax(M* scores, const Tensor& mask, bool is_causal, int64_t rows, int64_t l,
                  int64_t s) {
  const bool* bmask = mask.defined() && mask.dtype() == kBool ? mask.data_ptr<bool>() : nullptr;
  const M* fmask = mask.defined() && mask.dtype() != kBool ? mask.data_ptr<M>() : nullptr;
  constexpr M kNegInf = -std::numeric_limits<M>::infinity();
  parallel_range(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          M* row = scores + r * s;
          const int64_t i = r % l;
          for (int64_t j = 0; j < s; ++j) {
            if (bmask && !bmask[r * s + j]) row[j] = kNegInf;
            if (fmask) row[j] += fmask[r * s + j];
            if (is_causal && j > i) row[j] = kNegInf;
          }
          M mx = kNegInf;
          for (int64_t j = 0; j < s; ++j) mx = std::max(mx, row[j]);
          double sum = 0;
          for (int64_t j = 0; j < s; ++j) {
            row[j] = std::exp(row[j] - mx);
            sum += row[j];
          }
          const M inv = static_cast<M>(1.0 / sum);
          for (int64_t j = 0; j < s; ++j) row[j] *= inv;
        }
      },
      std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(s, 1)));
}

// The view of `t` ([..., a, b]) with its last two dims swapped.
Tensor swap_last(const Tensor& t) {
  DimVector sizes(t.sizes()), strides(t.strides());
  std::swap(sizes[sizes.size() - 1], sizes[sizes.size() - 2]);
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  return make_view(t, sizes, strides, t.storage_offset());
}

// Note [Grouped-query attention as a batch dim]
// With Hq query heads and Hkv key/value heads, query head h reads key/value
// head h / G (G = Hq / Hkv), as PyTorch's repeat_interleave. Splitting the
// query's head dim into [Hkv, G] and giving key and value a size-1 dim there
// makes the group one more broadcast batch dim: no key or value is copied, and
// the result [..., Hkv, G, L, Ev] is the wanted [..., Hq, L, Ev] in memory.
// The CUDA kernels instead read key/value head h / G directly.

// [..., H, X, Y] -> [..., H / g, g, X, Y] (a view).
Tensor split_heads(const Tensor& t, int64_t g) {
  DimVector sizes(t.sizes()), strides(t.strides());
  const size_t h = sizes.size() - 3;
  const int64_t hs = strides[h];
  sizes[h] /= g;
  strides[h] = hs * g;
  sizes.insert(h + 1, g);
  strides.insert(h + 1, hs);
  return make_view(t, sizes, strides, t.storage_offset());
}

// [..., H, X, Y] -> [..., H, 1, X, Y] (a view).
Tensor add_group_dim(const Tensor& t) {
  DimVector sizes(t.sizes()), strides(t.strides());
  sizes.insert(sizes.size() - 2, 1);
  strides.insert(strides.size() - 2, 0);
  return make_view(t, sizes, strides, t.storage_offset());
}

// softmax(q @ k^T * scale + mask) @ v for q [batch', L, E], k [batch', S, E],
// v [batch', S, Ev] whose batch dims broadcast to `batch`; `mask` (or
// undefined) broadcasts to [batch..., L, S]. Returns [batch..., L, Ev].
Tensor attention_math(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                      bool is_causal, double scale, IntArrayRef batch) {
  const int64_t l = q.size(-2), s = k.size(-2), ev = v.size(-1);
  DimVector score_shape(batch), out_shape(batch);
  score_shape.push_back(l);
  score_shape.push_back(s);
  out_shape.push_back(l);
  out_shape.push_back(ev);
  const DType ct = q.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Device dev = q.device();
  Tensor scores = empty_tensor(score_shape, ct, dev);
  Tensor out = empty_tensor(out_shape, ct, dev);
  if (scores.numel() > 0) {
    matmul_into(scores, expand_batch(cast(q, ct), batch, 2),
                swap_last(expand_batch(cast(k, ct), batch, 2)), 0, scale);
    Tensor m;
    if (mask.defined()) {
      m = expand_batch(cast(mask, mask.dtype() == kBool ? kBool : ct), score_shape, 0).contiguous();
    }
    const int64_t rows = scores.numel() / s;
    if (ct == kFloat64) {
      mask_softmax<double>(scores.data_ptr<double>(), m, is_causal, rows, l, s);
    } else {
      mask_softmax<float>(scores.data_ptr<float>(), m, is_causal, rows, l, s);
    }
  }
  matmul_into(out, scores, expand_batch(cast(v, ct), batch, 2));
  return cast(out, q.dtype());
}

// `out` ([batch5..., L, Ev], contiguous, from the split-heads form) seen as
// [batch..., L, Ev] with the head dims merged.
Tensor merge_group(const Tensor& out, IntArrayRef out_shape) {
  return make_view(out, out_shape, contiguous_strides(out_shape), out.storage_offset());
}

void check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  check_defined(q, op, "query");
  check_defined(k, op, "key");
  check_defined(v, op, "value");
  KILN_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), "[", op,
             "] expected query, key and value of the same dtype, got ", q.dtype(), ", ", k.dtype(),
             " and ", v.dtype());
  KILN_CHECK(is_floating(q.dtype()), "[", op,
             "] expected query, key and value of a floating dtype, got ", q.dtype());
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const std::optional<Tensor>& attn_mask, double dropout_p,
                                    bool is_causal, std::optional<double> scale, bool enable_gqa) {
  check_defined(q, kOp, "query");
  check_defined(k, kOp, "key");
  check_defined(v, kOp, "value");
  const bool has_mask = attn_mask && attn_mask->defined();
  KILN_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, "[", kOp,
             "] expected query, key and value of at least 2 dims, got shapes ", q.sizes(), ", ",
             k.sizes(), " and ", v.sizes());
  check_qkv(kOp, q, k, v);
  KILN_CHECK(dropout_p == 0.0, "[", kOp,
             "] expected dropout_p == 0 (kiln's attention is for inference), got ", dropout_p);
  KILN_CHECK(!(is_causal && has_mask), "[", kOp,
             "] expected either attn_mask or is_causal, got both (an explicit attn_mask should "
             "not be set when is_causal=True)");
  const int64_t l = q.size(-2), e = q.size(-1), s = k.size(-2), ev = v.size(-1);
  KILN_CHECK(k.size(-1) == e && v.size(-2) == s, "[", kOp,
             "] expected query [..., L, E], key [..., S, E] and value [..., S, Ev], got shapes ",
             q.sizes(), ", ", k.sizes(), " and ", v.sizes());
  // Grouped-query attention applies where key has fewer heads than query
  // (one query head against several is broadcasting, as without it).
  const bool gqa =
      enable_gqa && q.dim() >= 3 && k.dim() >= 3 && v.dim() >= 3 && q.size(-3) > k.size(-3);
  int64_t group = 1;
  if (gqa) {
    KILN_CHECK(k.size(-3) > 0 && q.size(-3) % k.size(-3) == 0, "[", kOp,
               "] expected (enable_gqa) query heads a multiple of key heads at dim -3, got "
               "query ",
               q.sizes(), " and key ", k.sizes());
    KILN_CHECK(v.size(-3) == k.size(-3), "[", kOp,
               "] expected (enable_gqa) value with as many heads as key at dim -3, got key ",
               k.sizes(), " and value ", v.sizes());
    group = q.size(-3) / k.size(-3);
  }
  const Tensor q5 = gqa ? split_heads(q, group) : q;
  const Tensor k5 = gqa ? add_group_dim(k) : k;
  const Tensor v5 = gqa ? add_group_dim(v) : v;
  const DimVector batch5 = attention_batch(kOp, q5, k5, v5);
  // The batch dims PyTorch sees (the group merged back into the heads).
  DimVector batch = batch5;
  if (gqa) {
    batch[batch.size() - 2] *= batch.back();
    batch.pop_back();
  }
  DimVector score_shape = batch;
  score_shape.push_back(l);
  score_shape.push_back(s);
  if (has_mask) {
    const DType mt = attn_mask->dtype();
    KILN_CHECK(mt == kBool || is_floating(mt), "[", kOp,
               "] expected a bool or floating attn_mask, got ", mt);
    KILN_CHECK(broadcasts_to(attn_mask->sizes(), score_shape), "[", kOp,
               "] expected attn_mask to broadcast to the attention weights' shape ",
               score_shape.ref(), ", got shape ", attn_mask->sizes());
  }
  DimVector out_shape = batch;
  out_shape.push_back(l);
  out_shape.push_back(ev);
  Device dev = product_device(kOp, {&q, &k, &v, has_mask ? &*attn_mask : &q});
  if (dev.is_meta()) return empty_tensor(out_shape, q.dtype(), dev);

  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(e));
  Tensor mask;
  if (has_mask) {
    mask = expand_batch(*attn_mask, score_shape, 0);
    if (gqa) mask = split_heads(mask, group);
  }
  Tensor out = attention_math(q5, k5, v5, mask, is_causal, sc, batch5);
  return gqa ? merge_group(out, out_shape) : out;
}

Tensor kv_cache_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos,
                          std::optional<double> scale) {
  check_qkv(kCacheOp, q, k, v);
  check_defined(pos, kCacheOp, "cache_position");
  KILN_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "[", kCacheOp,
             "] expected query [B, Hq, L, D], key_cache [B, Hkv, S, D] and value_cache "
             "[B, Hkv, S, Dv], got shapes ",
             q.sizes(), ", ", k.sizes(), " and ", v.sizes());
  const int64_t b = q.size(0), hq = q.size(1), l = q.size(2), e = q.size(3);
  const int64_t hkv = k.size(1), s = k.size(2), ev = v.size(3);
  KILN_CHECK(
      k.size(0) == b && v.size(0) == b && v.size(1) == hkv && v.size(2) == s && k.size(3) == e, "[",
      kCacheOp,
      "] expected query [B, Hq, L, D], key_cache [B, Hkv, S, D] and value_cache "
      "[B, Hkv, S, Dv], got shapes ",
      q.sizes(), ", ", k.sizes(), " and ", v.sizes());
  KILN_CHECK(hkv > 0 && hq >= hkv && hq % hkv == 0, "[", kCacheOp,
             "] expected query heads a multiple of the cache's heads, got ", hq, " and ", hkv);
  KILN_CHECK(pos.dtype() == kInt64, "[", kCacheOp, "] expected an int64 cache_position, got ",
             pos.dtype());
  KILN_CHECK(pos.numel() == 1 || (pos.dim() == 1 && pos.size(0) == b), "[", kCacheOp,
             "] expected cache_position of one element or [", b, "], got shape ", pos.sizes());
  KILN_CHECK(l <= s, "[", kCacheOp, "] expected at most ", s,
             " query rows (the cache's length), got query of shape ", q.sizes());
  const DimVector out_shape{b, hq, l, ev};
  Device dev = product_device(kCacheOp, {&q, &k, &v, &pos});
  if (dev.is_meta()) return empty_tensor(out_shape, q.dtype(), dev);

  // Note [Cache positions in range]
  // Query row i sits at slot p + i, so every row is in the cache only for p
  // in [0, S - L]. Before, any position ran: one past the end attended over
  // every slot (a silent wrong answer, the rows' own keys never written), a
  // negative one gave NaN rows. The CPU kernel checks the values here; the
  // CUDA kernels that read the position on the device (decode and prefill)
  // raise the same error through their error flag (Note [Device error
  // flags]); the CUDA fallback for other dtypes and head dims, which reads
  // the position only through a mask built on the device, checks it first
  // with a range-check kernel (check_values_in_range). Nothing reads or
  // writes out of bounds.
  const int64_t* pp = pos.data_ptr<int64_t>();
  const int64_t pstride = pos.numel() == 1 ? 0 : pos.stride(0);
  for (int64_t bi = 0; bi < pos.numel(); ++bi) {
    const int64_t p = pp[bi * pstride];
    KILN_CHECK(p >= 0 && p <= s - l, "[", kCacheOp,
               "] expected cache_position in [0, S - L] = [0, ", s - l, "] (S = ", s,
               " cache slots, L = ", l, " query rows), got ", p,
               pos.numel() > 1 ? detail::str(" at element ", bi) : std::string());
  }

  // keep[b, 0, 0, i, j] = j <= p_b + i, written as j - i <= p_b (no overflow).
  const int64_t mb = pos.numel() == 1 ? 1 : b;
  Tensor keep = empty_tensor({mb, 1, 1, l, s}, kBool, dev);
  bool* kp = keep.data_ptr<bool>();
  for (int64_t bi = 0; bi < mb; ++bi) {
    const int64_t p = pp[bi * pstride];
    for (int64_t i = 0; i < l; ++i) {
      for (int64_t j = 0; j < s; ++j) kp[(bi * l + i) * s + j] = j - i <= p;
    }
  }
  const int64_t group = hq / hkv;
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(e));
  Tensor out = attention_math(split_heads(q, group), add_group_dim(k), add_group_dim(v), keep,
                              false, sc, DimVector{b, hkv, group});
  return merge_group(out, out_shape);
}

// The writes, then the attention: what the CUDA kernel fuses (Note [Cache
// writes in the decode kernel]); the same on Meta tensors.
Tensor kv_cache_attention_write(const Tensor& q, const Tensor& kc, const Tensor& vc,
                                const Tensor& pos, const Tensor& k, const Tensor& v,
                                std::optional<double> scale) {
  const char* op = "kv_cache_attention_write";
  check_defined(pos, op, "cache_position");
  check_defined(kc, op, "key_cache");
  check_defined(vc, op, "value_cache");
  check_no_internal_overlap(kc, op);  // Note [Writes into shared storage]
  check_no_internal_overlap(vc, op);
  if (!q.device().is_meta()) {
    // Every check first, on meta twins, so that a bad call writes nothing.
    kv_cache_attention_write(meta_twin(q), meta_twin(kc), meta_twin(vc), meta_twin(pos),
                             meta_twin(k), meta_twin(v), scale);
  }
  Tensor kw = kc, vw = vc;
  kiln::index_copy_(kw, 2, pos.reshape({-1}), k);
  kiln::index_copy_(vw, 2, pos.reshape({-1}), v);
  return cpu::kv_cache_attention(q, kc, vc, pos, scale);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("scaled_dot_product_attention", &scaled_dot_product_attention);
  m.impl("kv_cache_attention", &kv_cache_attention);
  m.impl("kv_cache_attention_write", &kv_cache_attention_write);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("scaled_dot_product_attention", &scaled_dot_product_attention);
  m.impl("kv_cache_attention", &kv_cache_attention);
  m.impl("kv_cache_attention_write", &kv_cache_attention_write);
}

}  // namespace kiln::cpu
