#pragma once

// What prefill and decode steps over a static KV cache check and share, for
// every model family (GPT2, Llama).

#include <cstddef>

#include "kiln/nn/attention.h"

namespace kiln::nn {

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
