#pragma once

// CUDA C++ for a reduction group (Note [Reduction kernels]): prologue,
// reduction and epilogue in one kernel. No toolkit header is included (as
// Note [CUDA pointwise ABI]).

#include <cstdint>
#include <string>
#include <vector>

#include "jit/ir/reduction_ir.h"

namespace kiln::jit::cuda {

// Note [CUDA reduction ABI]
// The group's tensors are operands, in this order: prologue outputs after the
// reduced value, prologue inputs, epilogue outputs, epilogue inputs after the
// reduction's result. A kernel sees the input shape as rows (the kept dims,
// merged, at most kMaxReduceDims) by a reduced space of n elements (the
// reduced dims, merged, at most kMaxReduceDims). Each operand has a pointer,
// element strides over the kept dims and, per its walk class (part of the
// cache key), over the reduced dims: Contig (one reduced dim, stride 1: the
// offset is j), Zero (broadcast over the whole reduced space; a statistic's
// epilogue operands are all Zero) or Strided. The kernel takes one struct by
// value: rows, n, eps, divisor (Var's n - correction, floored at 0), for a
// split kernel the chunk length and the workspace pointer, kept sizes,
// reduced sizes, then per operand its pointer and strides, all 8-byte
// fields. Sizes and strides are arguments: one kernel serves every shape with
// the same structure, walks and dim counts.
constexpr int kMaxReduceDims = 6;
enum class Walk : uint8_t { Contig, Zero, Strided };

// Note [CUDA reduction schedules for groups]
// `threads` lanes share a row: 1 (a thread per row looping over the reduced
// space: neighbouring threads take neighbouring kept positions, coalesced when
// the reduced dims are the outer ones), 32 (a warp per row, shuffles), 128,
// 256 or 1024 (shuffles, then shared memory). Blocks hold max(threads, 256)
// threads. A row normalization or Var reads its values in two or three passes:
// with `per_thread` > 0 each lane keeps its `per_thread` values in registers
// after the first (the row fits on chip: up to 4096 elements, or up to 8 with
// one lane); with 0 every pass re-runs the prologue from global memory (its
// stores only in the first). Sum, Mean and the statistics of Var, LayerNorm
// and RmsNorm accumulate in float64 (Note [CUDA group sums]); Softmax's sum
// and Max/Min stay float32. Var and LayerNorm take the mean first and squared
// deviations second; exp and log are the precise expf/logf.
//
// Two launch-time choices are part of the key:
//  - `vec` > 1: every Contig prologue input is read `vec` elements at a time
//    with one access of up to 16 bytes (f32 x4, f16/bf16 x8; 16 bytes of the
//    widest such input). The plan picks it only when the row length is a
//    multiple of `vec` and each such input's pointer and kept strides keep
//    every vector aligned. A lane then takes runs of `vec` neighbours
//    (elements lane*vec.. of each stride of T*vec) instead of every T-th
//    element: each lane's values are added in position order as before, only
//    which lane holds which element changes (sums stay float64).
//  - `split`: a statistic (Sum, Mean, Max, Min) over few, long rows is cut
//    into gridDim.y chunks of `chunk` elements (an argument), one block each.
//    Each block writes its float64 partial to a workspace; the last block of
//    a row to finish (a counter per row, zeroed at launch) combines the
//    partials in chunk order and runs the epilogue, so the result does not
//    depend on which block finishes first (no float atomics).
//
// Note [Vector epilogues of row normalizations]
// A row normalization's epilogue (the norm's weight and bias, a cast, the
// store) used to run one element at a time even where the prologue read
// vectors: a lane holding `vec` neighbours loaded the weight and stored the
// result in 2-byte pieces, `vec` elements apart from its neighbour lane's,
// so each store instruction touched 16 sectors for 64 bytes. GPT-2's
// LayerNorm at 1024 rows of 768 took 9.5 us (ncu, H200: 37% of L2
// throughput, 3.5% of DRAM) for 3 MB of traffic. With `epi_vec` (chosen
// with `vec` when the row is kept in registers and every epilogue operand is
// a Zero input or walks Contig with its vectors aligned) the epilogue loads
// each Contig input and stores each output `vec` elements at a time, the
// same values in the same order. Measured on the H200 (ncu, GPU clocks
// free): that LayerNorm 7.54 -> 4.22 us, gpt2 8x128 730 -> 645 us per call.
struct ReduceSpec {
  const ReductionKernel* kernel = nullptr;
  std::vector<Walk> walks;  // per operand, in ABI order
  int kept_dims = 1;        // 1..kMaxReduceDims
  int red_dims = 1;         // 1..kMaxReduceDims
  int threads = 256;        // lanes per row: 1, 32, 128, 256 or 1024
  int per_thread = 0;       // 0, or 1..16 (a power of two): values kept in registers
  bool index32 = true;      // every offset and row index fits in 31 bits
  int vec = 1;              // 1, 2, 4 or 8: elements per vector load of Contig prologue inputs
  bool split = false;       // rows cut across blockIdx.y, combined by the last block
  bool epi_vec = false;     // Note [Vector epilogues of row normalizations]
};

// Operands of `k` in ABI order.
int reduce_operand_count(const ReductionKernel& k);
int reduce_block_size(const ReduceSpec& spec);
// The widest vector (1 when none) for the Contig prologue inputs of `spec`:
// 16 bytes of the widest of them, at most 8 elements.
int reduce_vector_width(const ReduceSpec& spec);

// "kiln_red_<hash>": the hash covers the kernel's structure and every spec field.
std::string reduce_name(const ReduceSpec& spec);
// The complete translation unit.
std::string reduce_source(const ReduceSpec& spec);

}  // namespace kiln::jit::cuda
