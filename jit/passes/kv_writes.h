#pragma once

// Folds a decode step's KV-cache writes into its attention on CUDA (Note
// [Cache writes in the decode kernel] in jit/codegen_cuda/op_kernels/attention.h):
//   index_copy_(k_cache, 2, p, k); index_copy_(v_cache, 2, p, v);
//   o = kv_cache_attention(q, k_cache, v_cache, pos)
//       -> o = kv_cache_attention_write(q, k_cache, v_cache, pos, k, v)
// where p is pos itself or a view of it (one element, the same storage and
// offset), q holds one row per head, and k, v one slot. Only when no node
// between a write and the attention touches that cache, or writes k, v or
// the position: the writes then move to the attention's place unobserved.
// Runs beside fold_merged_heads, before dead-code elimination and fusion.

#include <cstddef>
#include <vector>

#include "jit/record/trace_buffer.h"

namespace kiln::jit {

// Rewrites `nodes` in place; returns how many nodes it removed (two per fold).
size_t fold_kv_writes(std::vector<Node>& nodes);

}  // namespace kiln::jit
