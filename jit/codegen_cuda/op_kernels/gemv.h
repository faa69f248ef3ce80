#pragma once

// The generated kernel behind skinny matrix products on CUDA (Note [Skinny
// matmuls] in runtime/cuda/blas_lt_skinny.cpp): out[m, n] = act(x[m, k] @
// w[n, k]^T + bias[n]) + residual[m, n] for m <= kGemvMaxRows, the weight
// read once, 16 bytes per load. Host logic (the configuration and the
// source) needs no device, so tests check it without a GPU.

#include <cstddef>
#include <cstdint>
#include <string>

#include "jit/codegen_cuda/op_kernels/op_sources.h"
#include "kiln/tensor.h"

namespace kiln::jit::cuda {

// Note [Skinny matmul kernel]
// A weight row w[n, :] is contiguous; a group of `tpr` threads (tpr a power
// of two from 8 to 256, a block being 256 threads) computes `rn` neighbouring
// outputs n of all m rows: each thread walks its share of k in 16-byte
// vectors (every tpr-th vector: the group's loads of one step are
// consecutive, so coalesced), `unroll` steps of loads issued before their
// math so that several are in flight, keeps m * rn float32 sums, and the
// group adds its threads' sums (shuffles, then shared memory across warps).
// The split of k over a group's threads is the split-K: no workspace, no
// second kernel, the same order of sums on every run. The weight is loaded
// with ld.global.nc.L1::no_allocate (read once: it should not evict x, which
// every group reads again through L1). Products accumulate in float32; the
// epilogue adds the bias, applies the activation, adds the residual, all in
// float32, and rounds once, as cuBLASLt's epilogues do.
// With a norm prologue (Note [Norm prologues]), each block first takes the
// statistics of its m rows of x (one pass of float64 sums of x and x * x,
// the rows side by side, eight warps per row at m = 1 and one from m = 5),
// then normalizes each x vector as it loads it and rounds it to the dtype,
// where the eager norm stores its output: the same values the unfused
// product reads, up to the rounding of the statistics' sums. Each thread's weight vectors are
// prefetched into L2 before anything else, even before the kernel waits for
// the one before it (Note [Early launch] in kernel_loader.h), so that their
// DRAM latency overlaps that kernel's end and the two block reductions
// instead of following them.
// The grid is at most the blocks that fit on the GPU at once; a block walks
// its steps of outputs gridDim.x apart and prefetches the next step's weight
// rows into L2 before it computes the current one. For an LM head (n = 50257:
// six waves of blocks at one step each) that takes the norm statistics once
// per block instead of once per step, and keeps the weight stream going
// across steps instead of refilling the GPU wave after wave.
// Choice: tpr is the largest power of two that still leaves each thread at
// least two vectors of k (more threads per row, more loads in flight and
// more blocks for a short n), rn grows with m so that each x vector loaded
// serves several weight rows, and unroll * rn stays at 4 vectors per step.

constexpr int64_t kGemvMaxRows = 16;

// Note [Epilogue operands early]
// The epilogue's bias and residual used to be loaded by kiln_store, after
// the step's sums: one more memory trip at the very end of the kernel, and
// the bias (a weight, evicted from L2 by the rest of the model's stream)
// from DRAM. Now the lane that stores an output loads its bias and residual
// when the step starts, after the kernel's wait (the residual may be what
// an earlier kernel wrote), so that they travel with the weights. Where a
// step has more outputs than a group has lanes (float32 at many rows), the
// store loads them as before. Measured on an H200 (perf/RESULTS.md,
// eighteenth session): gpt2-decode b8, whose products take the tensor-core
// form, 404-408 -> 390-394 us; one-row products within the machine's spread.
// Prefetching the bias and the norm's weight and bias into L2 before the
// wait as well was slower (gpt2 1x1 +8 to +14 us): not kept.

// Note [Wide groups for long products]
// From kGemvWideN outputs (an LM head: many steps per block, Note [Skinny
// matmul kernel]) a group of one or two rows computes two outputs instead
// of one, keeping unroll: twice the weight loads in flight per thread. The
// group's k is split as before, so it is the loads in flight, not the
// reduction, that change. At k = 2048 (Llama 3.2 1B's 525 MB head, 128 threads
// per group, two vectors each) a step had two 16-byte loads in flight per
// thread; measured on an H200, llama-decode b1 went from 1723 to 1592 us per
// step. GPT-2's head (k = 768, three vectors per thread) did not move
// (225 us at 1x1 either way), nor did any product below the threshold.
constexpr int64_t kGemvWideN = 16384;

// Note [Tensor-core skinny kernel]
// From kGemvMmaRows rows (16-bit dtypes, sm_80 and later) the FMA kernel
// above runs out of arithmetic: each 16-byte weight vector costs m * 8 FMAs
// plus the unpacking (and normalizing) of m x vectors, on the FP32 pipes
// (Llama 1B at 8 rows: 3.5 ms against cuBLASLt's 1.8). This form computes
// out^T = w x^T with mma.m16n8k16: a block takes a tile of 16 weight rows (A,
// 16 x 16 per instruction) against the m tokens of x as B's 8 columns (two
// instructions from 9 rows), float32 accumulators. Its 8 warps split k: warp
// `w` takes chunks of 32 elements w, w + 8, ..., `unroll` chunks' loads in
// flight. In a chunk, lane (g = lane / 4, t = lane % 4) loads one 16-byte
// vector at k = 32 c + 8 t from weight rows g and g + 8 and from x row g
// (and g + 8), the same k for A and B, so that the fragments need no
// shuffle: a sum over k may take its terms in any order, and logical
// column 2t + e (e < 2) of each instruction stands for k = 32 c + 8 t + e
// (the first) or + 4 + e (the second), column 2t + 8 + e for + 2 + e and
// + 6 + e. The warps' accumulators meet in shared memory; the epilogue and
// the norm prologue are the FMA kernel's. The grid and the tile walk are as
// above, with tiles of 16 outputs.
constexpr int64_t kGemvMmaRows = 5;

// Note [Tensor-core skinny default]
// Where the tensor-core form is the default over cuBLASLt (it is always a
// candidate when Mode::MaxAutotune times both). Measured per product on an
// H200 (kiln-layer-ops --products, float16, perf/RESULTS.md): at 8 rows it
// wins every GPT-2 product (768x768 2.2 against 4.5 us, the 77 MB LM head
// with its LayerNorm 34 against 57) and Llama 1B's of 8 MB or less
// (2048x512 with its RMSNorm 6.0 against 8.2), and loses those of 32 MB
// (2048x8192 14.7 against 10.0; the 525 MB LM head 185 against 132), where
// cuBLASLt reaches 70-83% of HBM and this form's 16-row tiles, one or two
// blocks per SM, about half. At 16 rows (two mma per chunk) it wins only at
// k <= 1024. So: from kGemvMmaRows rows, k <= 1024, or up to 8 rows a weight
// of at most kGemvMmaWeightBytes. Re-measured with the fence below: the
// 32 MB products still lose at 8 rows (8192x2048 12.8 against 9.8 us), and
// so do the 16-row products with a norm prologue at k = 2048; 3072x768 at 16
// rows (4.4 against 6.6) would now win, but no workload has 16 rows.
constexpr int64_t kGemvMmaWeightBytes = int64_t{8} << 20;

// Note [Loads in flight before the first mma]
// The tensor-core form loads a step's KU chunks (two weight vectors and the
// x vectors each) and then runs its mma instructions. ptxas (CUDA 13, sm_90)
// does not keep that order: the SASS of the form without a norm prologue
// issues one chunk's three loads, its two mma, then the next chunk's loads,
// so each chunk waits a full trip to DRAM and a warp has one chunk in
// flight, not four (40 registers; seen with nvdisasm). That matches the form
// reading the 32 MB products at 35-47% of HBM (perf/RESULTS.md, fourteenth
// session). With `fence`, the first accumulator of each token block takes
// a term that depends on every load of the step and is always +0 (their
// first words, masked by n >> 62): the mma then cannot start before every
// load has returned, so ptxas issues them all first (the SASS shows all
// twelve loads before the first mma; 108 registers, two blocks per SM).
// Measured on an H200 (kiln-layer-ops --products, float16): at 8 rows
// 8192x2048 went from 15.1 to 12.8 us and 3072x768 from 4.4 to 3.7; at 16
// rows 8192x2048 from 20.1 to 14.9, 3072x768 from 6.6 to 4.4; the forms with
// a norm prologue, whose loads ptxas already kept together, did not move;
// gpt2-decode b8 went from 470 to 430 us per step, llama-decode b8 from
// 1725 to 1667. No product was slower, so every tensor-core form takes it
// (KILN_GEMV_MMA_FENCE=0 turns it off, to measure).

// Note [Deeper groups where the grid stays full]
// The FMA form's rule above (at least two vectors of k per thread) keeps
// many blocks for a short n, but at k = 2048 it leaves each thread two
// 16-byte loads in flight per step, and Llama 1B's 2048x8192 read at 40% of
// HBM against cuBLASLt's 62%. Where halving tpr (twice the vectors per
// thread, twice the outputs per block) still leaves at least
// kGemvDeepStepsPerSm steps of outputs per SM, the group is halved. Measured
// on an H200 at one row with four vectors per thread everywhere
// (KILN_GEMV_MIN_VECTORS=4): 2048x8192 17.7 -> 14.2 us, the 525 MB head 176
// -> 140, 2048x2048 6.2 -> 5.5 (512 steps on 132 SMs), but GPT-2's 768x2304
// 4.3 -> 4.6 and 768x768 1.6 -> 2.0 (144 and 48 steps) and 2048x512 3.5 ->
// 3.9 (128 steps): gpt2 1x1 lost 35 us, llama-decode b1 gained 114. The
// threshold sits between 192 steps (3072x768, no change either way) and 512.
constexpr int64_t kGemvDeepStepsPerSm = 3;
bool gemv_preferred(DType dtype, int64_t m, int64_t k, int64_t n, int arch);

// Note [Skinny products better apart]
// Up to a few rows the FMA form is the default (Note [Skinny matmul choice]
// in runtime/cuda/blas_lt_skinny.cpp). At one row (the only one measured),
// from k = kGemvApartK (Llama 1B's 2048, not GPT-2's 768), two kinds measured
// slower than the other way on an H200 (Mode::MaxAutotune's timings, perf/RESULTS.md, twenty-eighth
// session), and a decode step ran faster with the other way:
//  - a norm prologue over a short grid, fewer than kGemvApartStepsPerSm
//    steps of outputs per SM (Llama 1B's q/k/v, 2048x3072, 5.8 steps): 12.6
//    us against 10.3 for the norm's own kernel then the product; its gate/up
//    (2048x16384, 15.5 steps) keeps the prologue, 25.3 against 26.7;
//  - an LM head, n >= kGemvApartHeadN (128256 outputs): cuBLASLt 130.5 us
//    against 137.9 (GPT-2's, k = 768: the generated kernel, 27.8 against 36.9).
// Both gave way to the streamed form where it applies (Note [Streamed
// one-row products]): Llama 1B's q/k/v 5.8 us with its prologue against
// 10.6 apart, its head 118.0 against 131.0 for cuBLASLt after the norm.
// gemv_advice: +1 where the generated kernel is the better default, -1 where
// the other way is, 0 where the rows decide. KILN_GEMV_APART=none|norm|head
// keeps only those of the two (default: both), to measure.
constexpr int64_t kGemvApartK = 2048;
constexpr int64_t kGemvApartStepsPerSm = 8;
constexpr int64_t kGemvApartHeadN = 65536;
int gemv_advice(DType dtype, int64_t m, int64_t k, int64_t n, bool norm, int arch, int sms);

struct GemvSpec {
  DType dtype = kFloat16;
  int m = 1;     // rows of x and out, 1..kGemvMaxRows
  int tpr = 32;  // threads per output group
  int rn = 1;    // outputs per group
  int unroll = 4;
  int act = 0;  // 0 none, 1 relu, 2 gelu (tanh form)
  bool bias = false;
  bool residual = false;
  int norm = 0;  // 0 none, 1 layer_norm, 2 rms_norm
  bool norm_weight = false;
  bool norm_bias = false;
  // Launched early (Note [Early launch]): prefetch the weights before the wait.
  bool early = false;
  // Note [Tensor-core skinny kernel] (float16 and bfloat16; tpr and rn unused).
  bool mma = false;
  // Note [Loads in flight before the first mma] (the tensor-core form; set
  // by gemv_take_mma).
  bool fence = false;
  // Note [Normalized x kept in registers] (set by gemv_keep_x).
  bool keep_x = false;
  // Note [Epilogue operands early] (KILN_GEMV_EARLY_EPILOGUE=0 turns it off).
  bool early_epilogue = true;
  // Note [Norm vectors in shared memory] (set by gemv_norm_smem).
  bool norm_smem = false;
  // Note [Norm folded into the sums] (set by gemv_fold_norm).
  bool fold_norm = false;
  // Note [Weights a step ahead] (set by gemv_pipe).
  bool pipe = false;
  // Note [Streamed one-row products] (set by gemv_stream); stream_tail: k
  // is not a multiple of a round of tpr vectors.
  bool stream = false;
  bool stream_tail = false;
};

// Note [Streamed one-row products]
// A one-row product of a large weight (Llama 1B's gate/up, 67 MB; its down
// and q/k/v products) read its weight at 48-61% of HBM in the forms above:
// a grid of the blocks that fit, walking steps of outputs, at two or three
// blocks of 256 threads per SM (the kept-x and a-step-ahead forms take 80
// to 123 registers), each lane a few vectors in flight per round, and a
// round's math between its loads and the next's. A probe
// (perf/probes/bulk_gemv.cu, perf/RESULTS.md, thirty-sixth session) read
// the same weights at 73-84% with the plainest form: a warp per output
// (four for k = 8192), every vector of the lane's share of the row loaded
// at once (8 of them), one step of outputs per block and as many blocks
// as steps, so that the GPU's own block scheduler keeps each SM full of
// small, short-lived blocks of about 40 registers a thread. With a norm
// prologue the block takes the row's statistics once (the usual block
// reduction), writes x normalized (rounded as the eager norm stores it)
// to shared memory, and its warps read x there; the normalization happens
// once per block instead of once per output.
// Taken at one row where the weight is at least kGemvStreamBytes, and
// each lane's share of a row is at most kGemvStreamVectors vectors;
// KILN_GEMV_STREAM=0 turns it off, to measure.
constexpr int64_t kGemvStreamBytes = int64_t{8} << 20;
constexpr int kGemvStreamVectors = 8;
// Makes `s` (one row, the FMA form) the streamed form for k inputs and n
// outputs where it applies; returns whether it did.
bool gemv_stream(GemvSpec& s, int64_t k, int64_t n);
// Whether products may take the streamed form (KILN_GEMV_STREAM, default
// on); for tests of the other forms. Returns the previous setting.
bool gemv_set_streaming(bool on);

// The configuration for a product of m rows and k inputs (k a multiple of
// the 16-byte vector).
GemvSpec gemv_spec(DType dtype, int64_t m, int64_t k, int act, bool bias, bool residual,
                   int norm = 0, bool norm_weight = false, bool norm_bias = false);
// The tensor-core form for this product on a device of compute capability
// `arch` (major * 10 + minor), from `from` rows (KILN_GEMV_MMA_ROWS=N sets
// it for benchmarks: 1 tries the form at every row count).
bool gemv_uses_mma(DType dtype, int64_t m, int arch, int64_t from = kGemvMmaRows);
// Makes `s` the wide form for a long n (Note [Wide groups for long products]).
void gemv_widen(GemvSpec& s);
// Halves the FMA form's group where `n` outputs still give every one of
// `sms` SMs kGemvDeepStepsPerSm steps (Note [Deeper groups where the grid
// stays full]).
void gemv_deepen(GemvSpec& s, int64_t n, int sms);
// Makes `s` the tensor-core form.
void gemv_take_mma(GemvSpec& s);
// Note [Normalized x kept in registers]: sets s.keep_x where it applies to
// `s` as configured (after the calls above), for k inputs and n outputs on
// `sms` SMs: where the blocks walk at least two steps each.
void gemv_keep_x(GemvSpec& s, int64_t k, int64_t n, int sms);
// Steps of outputs per SM from which x is kept (two per block at the three
// blocks of 256 threads the form is built for).
constexpr int64_t kGemvKeepXStepsPerSm = 6;

// Note [Norm vectors in shared memory]
// With a norm prologue, each step loaded the norm's weight and bias vectors
// inside its loop over a thread's KU vectors, each under `if (j < kv)`:
// ptxas does not move a load across that branch, so the SASS (GPT-2's QKV
// product at one row, nvdisasm) issues u's two vectors only after u - 1's
// FMAs. Now the block loads the norm's vectors once, beside the
// statistics' x loads (into registers, two per thread), stores them to
// shared memory before the statistics' first barrier, and the steps read
// them there. Up to kGemvNormSmemVectors vectors of k (k = 4096 in 16
// bits). The kept-x form takes them from shared memory as well, except
// where a group of up to 32 lanes takes the statistics by shuffles and the
// block has no barrier to read them after. KILN_GEMV_NORM_SMEM=0 turns it
// off, to measure. Measured on an H200 at one row (perf/RESULTS.md,
// twenty-fourth session): -1.0 to -2.1 us on the wide products (Llama's
// 2048x16384 and head, GPT-2's head), -1.1 on 4096x4096, -0.1 to -0.3 on
// GPT-2's QKV and FC; -2.5 us at 8 rows for 4096-wide ones. Most of the
// ~2 us by which a prologue product trails a plain one is therefore not
// these loads (warps of a block share them through L1) but the
// statistics' own chain.
constexpr int64_t kGemvNormSmemVectors = 512;
// Sets s.norm_smem where Note [Norm vectors in shared memory] applies.
void gemv_norm_smem(GemvSpec& s, int64_t k);

// Note [Norm folded into the sums]
// A product with a norm prologue took its rows' statistics first: after its
// wait each block loaded x, reduced its moments across the block (two
// barriers), and only then loaded its weights, so that a one-row product
// with a prologue took about 2 us more than one without (perf/RESULTS.md).
// The FMA form of one row (kGemvFoldRows; x not kept) now folds the norm
// into its sums.
// With scale = rstd and shift = -mean * rstd, for output n,
//   sum_k W[n,k] ((x_k scale + shift) w_k + b_k)
//     = scale sum_k W[n,k] x_k w_k + shift sum_k W[n,k] w_k + sum_k W[n,k] b_k,
// so a group accumulates the three sums and its share of the row's moments
// (float64) in the one pass that loads x, the weights and the norm's
// vectors together, reduces them with its sums, and applies scale and shift
// when it stores; rms_norm keeps only scale times the first sum. Eager
// rounds the normalized x to the dtype before its product, the folded form
// does not: the results differ by about that rounding, the size of the
// product's own. The first two terms cancel where |mean| >> std, losing
// what eager's x * scale + shift loses, float32's rounding of |mean| / std.
// An infinite weight can give NaN where eager gives an infinity (its terms
// in the first two sums cancel); a non-finite x gives NaN either way.
// Of the rounds of KTPR vectors of x that every group loads, each group takes
// the moments of its share (round r: group r mod 256 / KTPR), and the block
// adds them up once, after its sums. Taken where the grid's blocks are
// resident at once (kGemvFoldStepsPerSm): a block that walked steps would
// take the moments again at each. KILN_GEMV_FOLD_NORM=0 takes the statistics
// first, to measure. Measured on an H200 (perf/RESULTS.md, twenty-fourth
// session): GPT-2's QKV and FC products 4.7 -> 3.8 and 4.8 -> 3.9 us alone;
// gpt2 1x1 204 -> 192 us, gpt2-decode b1 287 -> 271.
constexpr int64_t kGemvFoldStepsPerSm = 3;
// At two rows GPT-2's QKV and FC products took 0.2-0.6 us longer folded
// than with the statistics first (H200); at four, 128 registers (151 with
// the block's moments) and 1.9 us longer.
constexpr int kGemvFoldRows = 1;
// Sets s.fold_norm where it applies, for a product of k inputs to n outputs
// on a GPU of `sms` multiprocessors.
void gemv_fold_norm(GemvSpec& s, int64_t k, int64_t n, int sms);
// Note [Weights a step ahead]
// A block loaded each round of its weights (KU vectors per lane) when the
// round began and waited for them there: the prefetch into L2 a step ahead
// hid DRAM's latency, not L2's, and between a step's last loads and the
// next step's first the block had nothing in flight (its FMAs, the group's
// reduction, a barrier, the stores). Llama 1B's one-row products, whose
// blocks walk 5-10 steps, read at 30-67% of HBM (perf/RESULTS.md,
// twenty-eighth session). Where the blocks walk at least two steps each
// (kGemvPipeStepsPerSm), a lane now issues the next round's loads (this
// step's next round, or the next step's first) into a second set of KU *
// KRN registers as a round begins, before its math, so that one round is
// always in flight; where a step is one round, the L2 prefetch moves to
// the step after the next. Two blocks per SM instead of three (the second
// set of registers). One row only: at two, the kept-x form spills at the
// 128 registers two blocks allow. KILN_GEMV_PIPE=0 turns it off, to measure.
constexpr int64_t kGemvPipeStepsPerSm = 6;
constexpr int kGemvPipeRows = 1;
// Sets s.pipe where it applies (after the calls above).
void gemv_pipe(GemvSpec& s, int64_t n, int sms);
// The dynamic shared memory a launch of `s` over k inputs takes.
size_t gemv_shared_bytes(const GemvSpec& s, int64_t k);
// Elements per 16-byte vector.
int gemv_vector(DType dtype);
// Outputs one block computes.
int64_t gemv_outputs_per_block(const GemvSpec& s);

std::string gemv_name(const GemvSpec& s);
std::string gemv_source(const GemvSpec& s);

NamedSources gemv_source_samples();

}  // namespace kiln::jit::cuda
