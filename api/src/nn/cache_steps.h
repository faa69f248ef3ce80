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

// What a model's KV cache must be: `layers` keys and values ("blocks",
// "layers": `unit`), each [batch, heads, length, head_dim] in the model's
// dtype on its device, with length <= max_length (the positions the model
// has embeddings for, as make_cache checks).
//
// Note [Caches of other models]
// A cache is a plain struct the caller can make for any model, so the steps
// check it whole against the model before they use it, reading sizes only
// (never values: a step's ops stay the same at every position). Before, a
// cache of another model or config was refused, if at all, by an op the
// caller never called, and not always: the prefill's copy_ into the slots
// converts dtypes (a bfloat16 cache under a float32 model took the prompt,
// then the first decode step failed in index_copy_) and broadcasts (a model
// with one key/value head filled every head of a cache made for four), and a
// cache short of value tensors was indexed past the end of its vector. A
// cache longer than the model's positions would let a position pass the
// cache write's bounds check and fail later, in the position embedding or
// the rotary table.
struct CacheSpec {
  size_t layers = 0;
  const char* unit = "layers";
  int64_t heads = 0, head_dim = 0, max_length = 0;
  DType dtype = kFloat32;
  Device device;
  int64_t vocab = 0;  // token ids are in [0, vocab)
};
// ids [B, T] against the cache of `spec` with batch B and T <= its length.
void check_prefill(const char* op, const Tensor& ids, const KVCache& cache, const CacheSpec& spec);
// ids [B, 1], pos one int64 element or int64 [B], and the cache of `spec` with batch B.
void check_decode(const char* op, const Tensor& ids, const Tensor& pos, const KVCache& cache,
                  const CacheSpec& spec);
// Note [Token ids and positions checked on the host]
// An id past the vocab or a position past the cache is data: eagerly, the
// op that reads it raises before the step writes anything; lazily and in
// jit::compile it is raised when the trace runs, and every storage the
// failed step would have written carries the error (Note [Failures in a
// trace]), the KV cache included: one bad id in one row made every later
// step over that cache fail with it, for every row, until each cache tensor
// was overwritten whole. Where the values are on the host already (a CPU
// tensor that is not pending and not a stand-in being traced), the steps
// and the compiled steps of compile_steps check them before recording or
// running anything, so a refused call leaves the cache as it was. Values on
// a device or still pending are left to the ops' own checks: reading them
// would wait for them.
//
// Checks lo <= t's values < hi under that rule: "[op] expected `what` in
// [lo, hi), got v at element i".
void check_host_values(const char* op, const char* what, const Tensor& t, int64_t lo, int64_t hi);

// hidden [B, T, d] at row b's position last[b] -> [B, d].
Tensor rows_at(const Tensor& hidden, const Tensor& last);

}  // namespace kiln::nn
