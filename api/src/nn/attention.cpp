#include "kiln/nn/attention.h"

#include <functional>
#include <sstream>
#include <string>
#include <utility>

#include "api/src/nn/cache_steps.h"
#include "jit/compile/tracing.h"
#include "kiln/jit.h"
#include "kiln/ops.h"
#include "runtime/core/composite_errors.h"

namespace kiln::nn {
namespace {

void check_cache(const Tensor& cache, const char* op) {
  KILN_CHECK(cache.defined() && cache.dim() == 4, "[", op,
             "] expected a cache [batch, heads, length, head_dim], got ",
             cache.defined() ? cache.sizes() : IntArrayRef());
}

void check_pos(const Tensor& pos, int64_t batch, const char* op) {
  KILN_CHECK(pos.defined() && pos.dtype() == kInt64 && (pos.numel() == 1 || pos.numel() == batch),
             "[", op, "] expected pos as one int64 element or int64 [", batch, "], got ",
             pos.defined() ? detail::str(pos.dtype(), " ", pos.sizes()) : "an undefined tensor");
}

void check_heads(int64_t hq, int64_t hkv, const char* op) {
  KILN_CHECK(hkv > 0 && hq % hkv == 0, "[", op,
             "] expected query heads a multiple of key/value heads, got ", hq, " and ", hkv);
}

// copy_ would convert, index_copy_ and scatter_ name themselves: say it here.
void check_kv_dtype(const Tensor& cache, const Tensor& kv, const char* op) {
  KILN_CHECK(kv.dtype() == cache.dtype() && kv.device() == cache.device(), "[", op,
             "] expected keys or values of the cache's dtype ", cache.dtype(), " on ",
             cache.device(), ", got ", kv.dtype(), " on ", kv.device());
}

void check_window(int64_t window, const char* op) {
  KILN_CHECK(window >= 0, "[", op, "] expected a sliding window >= 0 (0: none), got ", window);
}

// Keys j a query at `at` sees through a window (Note [Sliding window]):
// at - window < j <= at, broadcast over j's and at's shapes.
Tensor window_band(const Tensor& j, const Tensor& at, int64_t window) {
  return logical_and(le(j, at), gt(j, at - window));
}

// q [B, T, Hq*D] and k [B, T, Hkv*D] as heads, rotated by `rotate`: in one
// kernel where they are adjacent views of one product (Note [Fused
// projections]), as one [B, T, (Hq+Hkv)*D] view; else one by one.
std::pair<Tensor, Tensor> rotated_qk(const Tensor& q, const Tensor& k, int64_t hq, int64_t hkv,
                                     const std::function<Tensor(const Tensor&)>& rotate) {
  const bool adjacent = q.dim() == 3 && k.dim() == 3 && q.size(0) == k.size(0) &&
                        q.size(1) == k.size(1) && q.stride(2) == 1 && q.strides() == k.strides() &&
                        q.impl()->storage().get() == k.impl()->storage().get() &&
                        k.storage_offset() == q.storage_offset() + q.size(2) &&
                        q.size(2) * hkv == k.size(2) * hq;  // one head_dim for both
  if (!adjacent) return {rotate(split_heads(q, hq)), rotate(split_heads(k, hkv))};
  const Tensor both =
      q.as_strided({q.size(0), q.size(1), q.size(2) + k.size(2)}, q.strides(), q.storage_offset());
  const Tensor r = rotate(split_heads(both, hq + hkv));
  return {r.narrow(1, 0, hq), r.narrow(1, hq, hkv)};
}

}  // namespace

KVCache KVCache::make(int64_t layers, int64_t batch, int64_t kv_heads, int64_t length,
                      int64_t head_dim, TensorOptions options) {
  check_layer_count("KVCache", "layers", layers, /*allow_zero=*/true);  // Note [Layer counts]
  KILN_CHECK(batch > 0 && kv_heads > 0 && length > 0 && head_dim > 0,
             "[KVCache] expected positive batch, heads, length and head_dim, got ", batch, ", ",
             kv_heads, ", ", length, " and ", head_dim);
  KVCache c;
  for (int64_t i = 0; i < layers; ++i) {
    c.k.push_back(zeros({batch, kv_heads, length, head_dim}, options));
    c.v.push_back(zeros({batch, kv_heads, length, head_dim}, options));
  }
  return c;
}

Tensor split_heads(const Tensor& x, int64_t heads) {
  KILN_CHECK(x.defined() && x.dim() == 3,
             "[split_heads] expected x [batch, tokens, heads * head_dim], got ",
             x.defined() ? x.sizes() : IntArrayRef());
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
  KILN_CHECK(heads > 0 && d % heads == 0,
             "[split_heads] expected a positive number of heads dividing x's last dim ", d,
             ", got ", heads, " heads for x of shape ", x.sizes());
  return x.view({b, t, heads, d / heads}).transpose(1, 2);
}

Tensor merge_heads(const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() == 4,
             "[merge_heads] expected x [batch, heads, tokens, head_dim], got ",
             x.defined() ? x.sizes() : IntArrayRef());
  const int64_t b = x.size(0), h = x.size(1), t = x.size(2), d = x.size(3);
  return x.transpose(1, 2).reshape({b, t, h * d});
}

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window) {
  const char* op = "causal_attention";
  for (const auto& [t, name] :
       {std::pair<const Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    KILN_CHECK(t->defined() && t->dim() == 4, "[", op, "] expected ", name,
               " [batch, heads, tokens, head_dim], got ",
               t->defined() ? t->sizes() : IntArrayRef());
  }
  const int64_t hq = q.size(1), hkv = k.size(1);
  check_heads(hq, hkv, op);
  check_window(window, op);
  const int64_t t = q.size(2);
  // The attention's checks are this op's (Note [Composite ops name themselves]).
  if (window == 0 || t <= window) {
    return rename_errors(op, "scaled_dot_product_attention", [&] {
      return scaled_dot_product_attention(q, k, v, std::nullopt, /*is_causal=*/true, std::nullopt,
                                          /*enable_gqa=*/hq != hkv);
    });
  }
  // Query i sees keys i - window < j <= i (Note [Sliding window]).
  const TensorOptions i64 = TensorOptions(kInt64).device(q.device());
  Tensor j = arange(t, i64).view({1, t});
  Tensor band = window_band(j, j.view({t, 1}), window);
  return rename_errors(op, "scaled_dot_product_attention", [&] {
    return scaled_dot_product_attention(q, k, v, band, /*is_causal=*/false, std::nullopt,
                                        /*enable_gqa=*/hq != hkv);
  });
}

Tensor decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                        const Tensor& pos, int64_t window) {
  const char* op = "decode_attention";
  KILN_CHECK(q.defined() && q.dim() == 4, "[", op,
             "] expected q [batch, heads, tokens, head_dim], got ",
             q.defined() ? q.sizes() : IntArrayRef());
  check_cache(k_cache, "decode_attention");
  check_cache(v_cache, "decode_attention");
  check_pos(pos, q.size(0), "decode_attention");
  check_window(window, "decode_attention");
  const int64_t s = k_cache.size(2);
  // Note [Cache positions in range]: the windowed path below is a masked
  // attention that checks no position, so they are checked here where their
  // values are on the host (Note [Token ids and positions checked on the host]).
  if (q.size(2) <= s) {
    check_host_values("decode_attention", "pos (the first query row's cache slot)", pos, 0,
                      s - q.size(2) + 1);
  }
  // The attention's checks are this op's (Note [Composite ops name themselves]).
  if (window == 0 || s <= window) {
    return rename_errors(op, "kv_cache_attention", [&] {
      return kv_cache_attention(q, k_cache, v_cache, pos.reshape({-1}));
    });
  }
  // Slots pos - window < j <= pos, from the position on the device: [B or 1, 1, 1, S].
  const int64_t hq = q.size(1), hkv = k_cache.size(1);
  check_heads(hq, hkv, "decode_attention");
  Tensor j = arange(s, TensorOptions(kInt64).device(q.device())).view({1, s});
  Tensor band = window_band(j, pos.reshape({-1, 1}), window).view({-1, 1, 1, s});
  return rename_errors(op, "scaled_dot_product_attention", [&] {
    return scaled_dot_product_attention(q, k_cache, v_cache, band, /*is_causal=*/false,
                                        std::nullopt, /*enable_gqa=*/hq != hkv);
  });
}

void write_kv(Tensor& cache, const Tensor& pos, const Tensor& kv) {
  check_cache(cache, "write_kv");
  const int64_t b = cache.size(0), h = cache.size(1), d = cache.size(3);
  KILN_CHECK(kv.defined() && kv.dim() == 4 && kv.size(0) == b && kv.size(1) == h &&
                 kv.size(2) == 1 && kv.size(3) == d,
             "[write_kv] expected keys or values [", b, ", ", h, ", 1, ", d, "], got ",
             kv.defined() ? kv.sizes() : IntArrayRef());
  check_kv_dtype(cache, kv, "write_kv");
  check_pos(pos, b, "write_kv");
  // The writes below check the slots on every device, under this op's name
  // (Note [Composite ops name themselves]); on the host they are checked first.
  check_host_values("write_kv", "pos (a cache slot)", pos, 0, cache.size(2));
  if (pos.numel() == 1) {
    rename_errors("write_kv", "index_copy_",
                  [&] { return index_copy_(cache, 2, pos.reshape({1}), kv); });
    return;
  }
  // Note [Per-row cache writes]
  // Row b's key or value goes to slot pos[b] of its own row: a scatter along
  // the slot dim, whose index is checked against the cache length like
  // index_copy_'s (on the device, where the positions are). The write used to
  // be an index_copy_ into the flat [B*H*S, D] view at (b*H + h)*S + pos[b],
  // which checks only against B*H*S: a position past the cache's end (or
  // below 0) landed silently in the first (last) slot of the next (previous)
  // head or row, overwriting another prompt's keys, and the attention then
  // ran over every slot.
  Tensor index = pos.reshape({b, 1, 1, 1}).expand({b, h, 1, d});
  rename_errors("write_kv", "scatter_", [&] { return scatter_(cache, 2, index, kv); });
}

void write_kv_prefix(Tensor& cache, const Tensor& kv) {
  check_cache(cache, "write_kv_prefix");
  const int64_t b = cache.size(0), h = cache.size(1), s = cache.size(2), d = cache.size(3);
  // Exactly the cache's batch, heads and head dim: copy_ would broadcast one
  // head into many (Note [Caches of other models]).
  KILN_CHECK(kv.defined() && kv.dim() == 4 && kv.size(0) == b && kv.size(1) == h &&
                 kv.size(2) <= s && kv.size(3) == d,
             "[write_kv_prefix] expected keys or values [", b, ", ", h, ", T <= ", s, ", ", d,
             "] (the cache's batch, heads, length and head dim), got ",
             kv.defined() ? kv.sizes() : IntArrayRef());
  check_kv_dtype(cache, kv, "write_kv_prefix");
  Tensor slots = cache.narrow(2, 0, kv.size(2));
  // A view: the write lands in the cache.
  rename_errors("write_kv_prefix", "copy_", [&] { return slots.copy_(kv); });
}

Attention Attention::empty(int64_t hidden, int64_t num_heads, int64_t num_kv_heads,
                           int64_t head_dim, bool qkv_bias, bool o_bias, TensorOptions options) {
  KILN_CHECK(hidden > 0 && num_heads > 0 && num_kv_heads > 0 && head_dim > 0,
             "[Attention] expected positive hidden, num_heads, num_kv_heads and head_dim, got ",
             hidden, ", ", num_heads, ", ", num_kv_heads, " and ", head_dim);
  check_heads(num_heads, num_kv_heads, "Attention");
  int64_t width = 0;
  KILN_CHECK(!__builtin_mul_overflow(num_heads, head_dim, &width),
             "[Attention] expected num_heads * head_dim to fit int64, got ", num_heads, " * ",
             head_dim);
  Attention a;
  a.q_proj = Linear::empty(hidden, num_heads * head_dim, qkv_bias, options);
  a.k_proj = Linear::empty(hidden, num_kv_heads * head_dim, qkv_bias, options);
  a.v_proj = Linear::empty(hidden, num_kv_heads * head_dim, qkv_bias, options);
  a.o_proj = Linear::empty(num_heads * head_dim, hidden, o_bias, options);
  a.num_heads = num_heads;
  a.num_kv_heads = num_kv_heads;
  a.head_dim = head_dim;
  return a;
}

Tensor Attention::forward(const Tensor& x, const RotaryEmbedding& rope, Tensor* k_cache,
                          Tensor* v_cache) const {
  const std::vector<Tensor> y = qkv.forward(x, {&q_proj, &k_proj, &v_proj});
  auto [q, k] = rotated_qk(y[0], y[1], num_heads, num_kv_heads,
                           [&](const Tensor& h) { return rope.apply(h); });
  Tensor v = split_heads(y[2], num_kv_heads);
  if (k_cache) write_kv_prefix(*k_cache, k);
  if (v_cache) write_kv_prefix(*v_cache, v);
  return o_proj.forward(merge_heads(causal_attention(q, k, v, sliding_window)));
}

Tensor Attention::forward_decode(const Tensor& x, const RotaryEmbedding& rope, Tensor& k_cache,
                                 Tensor& v_cache, const Tensor& pos) const {
  const std::vector<Tensor> y = qkv.forward(x, {&q_proj, &k_proj, &v_proj});
  auto [q, k] = rotated_qk(y[0], y[1], num_heads, num_kv_heads,
                           [&](const Tensor& h) { return rope.apply_at(h, pos); });
  write_kv(k_cache, pos, k);
  write_kv(v_cache, pos, split_heads(y[2], num_kv_heads));
  return o_proj.forward(merge_heads(decode_attention(q, k_cache, v_cache, pos, sliding_window)));
}

void Attention::fuse_projections() {
  qkv = FusedLinears::fuse({&q_proj, &k_proj, &v_proj});
}

void Attention::visit(const TensorVisitor& f, const std::string& prefix) {
  q_proj.visit(f, child_name(prefix, "q_proj"));
  k_proj.visit(f, child_name(prefix, "k_proj"));
  v_proj.visit(f, child_name(prefix, "v_proj"));
  o_proj.visit(f, child_name(prefix, "o_proj"));
}

}  // namespace kiln::nn

namespace kiln::nn {
namespace {

// "[2, 4]", or "an undefined tensor".
std::string sizes_of(const Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// "float32 [2, 4] on cpu", or "an undefined tensor".
std::string describe(const Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  std::ostringstream out;
  out << t.dtype() << " " << t.sizes() << " on " << t.device();
  return out.str();
}

}  // namespace

void check_layer_count(const char* op, const char* field, int64_t layers, bool allow_zero) {
  KILN_CHECK(layers >= (allow_zero ? 0 : 1) && layers <= kMaxLayers, "[", op, "] expected ", field,
             " in [", allow_zero ? 0 : 1, ", ", kMaxLayers, "], got ", layers);
}

void check_ids(const Tensor& ids, const char* op) {
  KILN_CHECK(ids.defined() && ids.dim() == 2, "[", op, "] expected token ids [batch, tokens], got ",
             sizes_of(ids));
}

namespace {

// The cache against `spec` for a batch of `batch` rows (Note [Caches of other models]).
void check_cache(const char* op, const KVCache& cache, int64_t batch, const CacheSpec& spec) {
  const bool counts = cache.k.size() == spec.layers && cache.v.size() == spec.layers;
  const bool first = !cache.k.empty() && cache.k[0].defined() && cache.k[0].dim() == 4;
  const int64_t rows = first ? cache.batch() : 0;
  KILN_CHECK(counts && (spec.layers == 0 || rows == batch), "[", op, "] expected a cache of ",
             spec.layers, " ", spec.unit, " and batch ", batch, ", got ", cache.k.size(),
             cache.v.size() == cache.k.size()
                 ? std::string()
                 : " (and " + std::to_string(cache.v.size()) + " value tensors)",
             " and ", rows);
  if (spec.layers == 0) return;
  const int64_t length = cache.length();
  KILN_CHECK(length <= spec.max_length, "[", op, "] expected a cache of at most ", spec.max_length,
             " slots (the model's positions), got ", length);
  for (size_t i = 0; i < spec.layers; ++i) {
    for (const bool key : {true, false}) {
      const Tensor& t = key ? cache.k[i] : cache.v[i];
      const bool fits = t.defined() && t.dim() == 4 && t.size(0) == batch &&
                        t.size(1) == spec.heads && t.size(2) == length &&
                        t.size(3) == spec.head_dim && t.dtype() == spec.dtype &&
                        t.device() == spec.device;
      KILN_CHECK(fits, "[", op, "] expected cache.", key ? "k" : "v", "[", i, "] ", spec.dtype,
                 " [", batch, ", ", spec.heads, ", ", length, ", ", spec.head_dim, "] on ",
                 spec.device, " (the model's key/value heads, head dim, dtype and device), got ",
                 describe(t));
    }
  }
}

}  // namespace

void check_host_values(const char* op, const char* what, const Tensor& t, int64_t lo, int64_t hi) {
  if (!t.defined() || !t.device().is_cpu() || t.is_pending() || jit::is_tracing() ||
      !(t.dtype() == kInt64 || t.dtype() == kInt32)) {
    return;
  }
  const std::vector<int64_t> values = t.tolist<int64_t>();
  for (size_t i = 0; i < values.size(); ++i) {
    KILN_CHECK(values[i] >= lo && values[i] < hi, "[", op, "] expected ", what, " in [", lo, ", ",
               hi, "), got ", values[i], " at element ", i);
  }
}

void check_prefill(const char* op, const Tensor& ids, const KVCache& cache, const CacheSpec& spec) {
  check_ids(ids, op);
  check_cache(op, cache, ids.size(0), spec);
  KILN_CHECK(ids.size(1) <= cache.length(), "[", op, "] expected at most ", cache.length(),
             " tokens (the cache length), got ", ids.size(1));
  check_host_values(op, "token ids", ids, 0, spec.vocab);
}

void check_decode(const char* op, const Tensor& ids, const Tensor& pos, const KVCache& cache,
                  const CacheSpec& spec) {
  KILN_CHECK(ids.defined() && ids.dim() == 2 && ids.size(1) == 1, "[", op,
             "] expected ids [batch, 1], got ", sizes_of(ids));
  KILN_CHECK(
      pos.defined() && pos.dtype() == kInt64 && (pos.numel() == 1 || pos.numel() == ids.size(0)),
      "[", op, "] expected pos as one int64 element or int64 [", ids.size(0), "], got ",
      describe(pos));
  check_cache(op, cache, ids.size(0), spec);
  check_host_values(op, "token ids", ids, 0, spec.vocab);
  check_host_values(op, "pos (a cache slot)", pos, 0, cache.length());
}

Tensor rows_at(const Tensor& hidden, const Tensor& last) {
  const int64_t b = hidden.size(0), d = hidden.size(2);
  KILN_CHECK(last.defined() && last.dtype() == kInt64 && last.numel() == b,
             "[prefill] expected last as int64 [", b, "], got ", describe(last));
  check_host_values("prefill", "last (a prompt position)", last, 0, hidden.size(1));
  return gather(hidden, 1, last.reshape({b, 1, 1}).expand({b, 1, d})).view({b, d});
}

}  // namespace kiln::nn
