#pragma once

// The generated kernel behind skinny matrix products on CUDA (Note [Skinny
// matmuls] in runtime/cuda/blas_lt_skinny.cpp): out[m, n] = act(x[m, k] @
// w[n, k]^T + bias[n]) + residual[m, n] for m <= kGemvMaxRows, the weight
// read once, 16 bytes per load. Host logic (the configuration and the
// source) needs no device, so tests check it without a GPU.

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
};

// The configuration for a product of m rows and k inputs (k a multiple of
// the 16-byte vector).
GemvSpec gemv_spec(DType dtype, int64_t m, int64_t k, int act, bool bias, bool residual,
                   int norm = 0, bool norm_weight = false, bool norm_bias = false);
// Elements per 16-byte vector.
int gemv_vector(DType dtype);
// Outputs one block computes.
int64_t gemv_outputs_per_block(const GemvSpec& s);

std::string gemv_name(const GemvSpec& s);
std::string gemv_source(const GemvSpec& s);

NamedSources gemv_source_samples();

}  // namespace kiln::jit::cuda
