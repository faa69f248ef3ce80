#pragma once

// Causal self-attention with a static KV cache, multi-head or grouped-query
// (fewer key/value heads than query heads).
//
// Note [Attention seam]
// Every attention a kiln::nn model computes goes through causal_attention()
// (prefill: queries attend to themselves) or decode_attention() (new queries
// against the cache up to their position): scaled_dot_product_attention with
// enable_gqa, and kv_cache_attention, whose CUDA kernels are fused (online
// softmax, grouped-query heads without copies, the decode position read on
// the device, so a decode step's ops are the same at every position: what
// jit::compile and graph replay need). A faster kernel replaces these two
// bodies and nothing else.
//
// Positions: `pos` is an int64 tensor of one element (every row at the same
// position) or of [B] (row b at pos[b]: batches of prompts of different
// lengths, right-padded; see Note [Batched generation] in generate.cpp),
// each a slot of the cache, in [0, S): another raises kiln::Error (Note
// [Cache positions in range] in runtime/cpu/attention.cpp), before anything
// is written where the positions are on the host. (Positions on a device
// are checked by the ops that read them there, which a windowed
// decode_attention's masked attention does not: it attends as the mask says.)
//
// Note [Sliding window]
// With a window W > 0 (Mistral's sliding_window), a query at position i sees
// keys at positions i - W < j <= i: its own and the W - 1 before it, as
// Hugging Face's models mask them. When every position fits in the window
// (T <= W in a prefill, a cache of at most W slots in decode) that is plain
// causal attention, and the two functions take their usual path. Otherwise
// the band is an explicit bool mask: [T, T] made from aranges in a prefill,
// and [B or 1, S] made on the device from `pos` in decode, so a decode step
// stays the same ops at every position (one compiled entry, one graph). The
// cache keeps every position (slots are positions, as without a window); a
// windowed decode step reads all S slots, masked, where kv_cache_attention
// reads up to pos.

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/api.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/rotary.h"

namespace kiln::nn {

// A static KV cache: per layer, keys and values [batch, kv_heads, length, head_dim].
struct KILN_API KVCache {
  std::vector<Tensor> k, v;

  static KVCache make(int64_t layers, int64_t batch, int64_t kv_heads, int64_t length,
                      int64_t head_dim, TensorOptions options);
  int64_t batch() const { return k.empty() ? 0 : k[0].size(0); }
  int64_t length() const { return k.empty() ? 0 : k[0].size(2); }
};

// [B, T, H*D] -> [B, H, T, D] (a view).
KILN_API Tensor split_heads(const Tensor& x, int64_t heads);
// [B, H, T, D] -> [B, T, H*D].
KILN_API Tensor merge_heads(const Tensor& x);

// q [B, Hq, T, D] over k, v [B, Hkv, T, D] with a causal mask; Hq % Hkv == 0.
// window > 0: each query sees only the last `window` positions up to its own
// (Note [Sliding window]).
KILN_API Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                 int64_t window = 0);
// q [B, Hq, 1, D] over cache slots 0..pos of k_cache, v_cache [B, Hkv, S, D]
// (window > 0: slots pos - window + 1..pos).
KILN_API Tensor decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                 const Tensor& pos, int64_t window = 0);
// Writes kv [B, H, 1, D] into cache [B, H, S, D] at slot pos (per row for a [B] pos).
KILN_API void write_kv(Tensor& cache, const Tensor& pos, const Tensor& kv);
// Writes kv [B, H, T, D] into cache slots [0, T).
KILN_API void write_kv_prefix(Tensor& cache, const Tensor& kv);

// Llama-family attention: q/k/v/o projections, rotary embeddings, Hq query
// heads over Hkv key/value heads.
struct KILN_API Attention {
  Linear q_proj, k_proj, v_proj, o_proj;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t sliding_window = 0;  // 0: none (Note [Sliding window])
  // q, k and v as one product (Note [Fused projections]); set by fuse_projections().
  FusedLinears qkv;

  static Attention empty(int64_t hidden, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                         bool qkv_bias, bool o_bias, TensorOptions options);
  // x [B, T, hidden] at positions 0..T-1, causal. With a cache, also writes
  // this call's keys and values into its slots [0, T).
  Tensor forward(const Tensor& x, const RotaryEmbedding& rope, Tensor* k_cache = nullptr,
                 Tensor* v_cache = nullptr) const;
  // x [B, 1, hidden] at `pos`: writes the cache there and attends to slots <= pos.
  Tensor forward_decode(const Tensor& x, const RotaryEmbedding& rope, Tensor& k_cache,
                        Tensor& v_cache, const Tensor& pos) const;
  // Makes q, k and v's weights views of one tensor (Note [Fused projections]).
  void fuse_projections();
  void visit(const TensorVisitor& f, const std::string& prefix);
};

}  // namespace kiln::nn
