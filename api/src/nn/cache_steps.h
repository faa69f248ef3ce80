#pragma once

// What prefill and decode steps over a static KV cache check and share, for
// every model family (GPT2, Llama).

#include <cstddef>
#include <cstdint>

#include "kiln/nn/attention.h"

namespace kiln::nn {

// Note [Layer counts]
// A model's blocks and a KV cache's tensors are built one layer at a time
// before any weight is read, so a config with an absurd layer count (n_layer
// 1e12 in a config.json) ran out of memory building them, with no error.
// Every model family's config check and KVCache::make bound the count first:
// at most kMaxLayers, hundreds of times the deepest published models (GPT-3
// 96 layers, Llama 3.1 405B 126). Sizes within a layer are checked where its
// tensors are made (Note [Checked size arithmetic]).
constexpr int64_t kMaxLayers = int64_t{1} << 16;

// Throws "[op] expected field in [1, 65536], got N" (0 allowed with `allow_zero`).
void check_layer_count(const char* op, const char* field, int64_t layers, bool allow_zero = false);

// ids [batch, tokens]; `op` names the caller ("GPT2::prefill").
void check_ids(const Tensor& ids, const char* op);
// ids [B, T] against a cache of `layers` `unit`s ("blocks", "layers") and T <= its length.
void check_prefill(const char* op, const Tensor& ids, const KVCache& cache, size_t layers,
                   const char* unit);
// ids [B, 1], pos one int64 element or int64 [B], a cache of `layers` `unit`s and batch B.
void check_decode(const char* op, const Tensor& ids, const Tensor& pos, const KVCache& cache,
                  size_t layers, const char* unit);
// hidden [B, T, d] at row b's position last[b] -> [B, d].
Tensor rows_at(const Tensor& hidden, const Tensor& last);

}  // namespace kiln::nn
