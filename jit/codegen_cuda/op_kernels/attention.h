#pragma once

// The fused attention kernels behind scaled_dot_product_attention and
// kv_cache_attention on CUDA (attention.cpp): a tensor-core prefill kernel
// (attention_prefill.cpp) and a split-sequence decode kernel
// (attention_decode.cpp). Each launcher takes the op's arguments after the
// Meta kernel checked them and writes a fresh `out`: contiguous, or for the
// prefill kernel the transposed view of merged heads (Note [Merged heads]).

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::jit::cuda {

// Note [Batch coordinates in 32 bits]
// The prefill kernel finds its (batch, head) from blockIdx: coordinates over
// up to kMaxKernelDims batch dims, then an offset per operand. It used to
// divide the index again for each of its four or five operands, in 64-bit
// integers (a long emulated sequence on the GPU), through arrays indexed at
// run time (a 320-byte stack frame), before its first load. Now it takes the
// coordinates once, in 32 bits (fewer than 2^31 blocks, checked at launch),
// with the loops over dims unrolled so that everything stays in registers.

// Note [Fused attention]
// Prefill: one block per 64 query rows of one (batch, head); four warps of 16
// rows each hold Q in registers and stream 64-key tiles of K and V through
// shared memory (cp.async, K of the next tile loading while this one's
// softmax and P @ V run), with mma.sync m16n8k16 (float16/bfloat16 in,
// float32 accumulate) and an online softmax in base 2. P is rounded to the
// input dtype for the second product, as FlashAttention does. The T x T
// scores never leave the chip.
// Decode: a few query rows (grouped-query heads x new tokens, at most
// kDecodeMaxRows) against a long cache: the sequence is split over blocks
// (flash-decoding), each block writes its rows' partial (max, sum, P @ V) and
// the last block of a (batch, kv head) combines them (a counter per group,
// zeroed by a memset before the launch). The position is read on the device.
// Both give NaN for a row that sees no key, as the CPU kernel, and compute
// the scale and mask in float32, as the CPU kernel does.

constexpr int64_t kDecodeMaxRows = 16;

// Note [Prefill keys split over warps]
// The row form above gives a (batch, head) one block per 64 query rows, and
// a block walks its key tiles one after another: GPT-2 at 1x128 is 24 blocks
// on 132 SMs, and the block of the last rows walks two tiles. The split form
// gives each block 16 query rows and splits their keys over its warps (four
// of 32-key tiles at head dim 64, two at 128, each warp its own tiles in
// shared memory, K of its next tile loading during this one's softmax and
// P @ V); the warps' (max, sum, P @ V) meet in shared memory at the end, as
// the decode kernel's splits do. Four times the blocks, a quarter of the
// chain, each block reading its keys for 16 rows instead of 64, and more
// registers (210 against 168 at head dim 64: two blocks per SM).
// Measured on an H200 (gpt2, compile mode, against the row form forced in
// the same command): 1x128 (96 split blocks) 448-452 -> 435-441 us per
// call; 8x128 (768 split blocks, three waves) 754 -> 898. So it is taken
// only where its blocks fit one per SM and no warp walks more than two
// tiles (S <= 256 at head dim 64, 128 at 128). It gained less than its
// count promised: the kernel is a chain of latencies (occupancy 6%), of
// which the key walk was a small part (perf/RESULTS.md, fifteenth session).
// KILN_PREFILL_FORM=rows|split (or set_prefill_form) forces one form, for
// tests and measurements.
enum class PrefillForm { Auto, Rows, SplitKeys };
void set_prefill_form(PrefillForm form);

// Whether the prefill kernel takes query/key/value of this dtype and head
// dims (key dim `e`, value dim `ev`).
bool prefill_supported(DType dtype, int64_t e, int64_t ev);
// Whether the prefill kernel can write `out` in its layout: the last dim
// dense, the other strides and the data aligned to two elements (a
// contiguous tensor, or attention_merged_heads' transposed view, Note
// [Merged heads]).
bool prefill_writes(const Tensor& out);
// out [batch..., L, E] (strided: prefill_writes) = attention of q [..., L, E] over k, v [..., S, E]
// whose batch dims broadcast to out's (k and v heads read as head / group,
// Note [Grouped-query attention as a batch dim]). `mask` (optional): bool or
// floating, broadcastable to [batch..., L, S]. `causal`: key j is seen by row
// i when j - i <= offset, the offset being 0 or, with `pos` defined (an int64
// device tensor of one element or one per leading batch index), pos[b].
// `pos_err` (optional, with `pos`): an error flag's two words
// (DeviceErrorFlag::ptr), set to a position outside [0, S - L] (Note [Cache
// positions in range] in runtime/cpu/attention.cpp).
void run_prefill_attention(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                           const std::optional<Tensor>& mask, bool causal, const Tensor& pos,
                           double scale, int64_t group, int64_t* pos_err = nullptr);

// Whether the decode kernel takes this dtype, head dims and rows per kv head.
bool decode_supported(DType dtype, int64_t e, int64_t ev, int64_t rows);
// Note [Cache writes in the decode kernel]
// A decode step writes this token's key and value into the cache at the
// position, then attends over the cache (write_kv's two index_copy_, then
// kv_cache_attention): three kernels, where the two writes are pure latency
// (3.4 us each on an H200 for one row per head). The trace pass
// fold_kv_writes (jit/passes/kv_writes.h) turns them into one
// kv_cache_attention_write, run by the decode kernel: every block reads slot
// p's key and value from the new ones instead of the cache (so no block
// waits for the store), and block 0 of each (batch, kv head) stores them in
// the cache. A position outside [0, S) stores nothing and sets the error
// flag, which the launcher reads back and raises as index_copy_ does (Note
// [Device error flags] in op_support.h).
struct DecodeWrite {
  Tensor k, v;  // [B, Hkv, 1, E]: this step's keys and values, last dim dense and aligned
  int64_t* err = nullptr;  // the error flag's two words (DeviceErrorFlag::ptr), or null
};

// out [B, Hq, L, E] = kv_cache_attention(q [B, Hq, L, E], k, v [B, Hkv, S, E], pos).
// With `pos` undefined every row takes `p_const` (Note [Few-row attention]).
// With `write`, also stores write->k / write->v at the position in k and v,
// which must be aligned as they are (no copy). Without it, `pos_err`
// (optional) is set as run_prefill_attention's.
void run_decode_attention(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& pos, double scale, int64_t p_const = 0,
                          const DecodeWrite* write = nullptr, int64_t* pos_err = nullptr);

// `t` itself when its last dim is dense, its other strides are multiples of
// `align` elements and its data is aligned to `align` elements; else a
// contiguous copy (fresh, so aligned).
Tensor aligned_operand(const Tensor& t, int64_t align);

std::vector<std::pair<std::string, std::string>> prefill_source_samples();
std::vector<std::pair<std::string, std::string>> decode_source_samples();

}  // namespace kiln::jit::cuda
