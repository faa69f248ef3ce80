#pragma once

// Matrix products on CUDA tensors through cuBLASLt (this header needs no CUDA
// header; blas_lt.cpp holds the library calls).
//
// Note [cuBLASLt layouts]
// cuBLASLt reads column-major matrices. A kiln matrix [r, c] with strides
// (rs, cs) is passed as it is when rs == 1 (column-major, ld = cs) and as the
// transpose of a column-major [c, r] when cs == 1 (row-major, ld = rs), so
// t(), transpose() and row slices never cost a copy. The output cannot be
// transposed: a row-major output D [m, n] is computed as D^T = B^T A^T, which
// swaps the operands and turns each one's orientation around. Batches are one
// strided batch (stride 0 for a broadcast operand); batch dims that do not
// collapse into one evenly strided dim loop over their outer part. Only
// layouts cuBLASLt cannot express (two non-unit strides, an output that
// overlaps an input) go through a contiguous scratch tensor.
//
// Note [Matmul epilogues]
// addmm_act(bias, a, b, act) = act(bias + a @ b) and linear_act(x, w, bias,
// act, residual) = act(x @ w^T + bias) + residual, act in {none, relu,
// gelu_tanh}. When the bias is a [n] (or [1, n]) vector, dense, and the output
// row-major, the product runs as one cuBLASLt call with the BIAS, RELU_BIAS or
// GELU_BIAS epilogue (cuBLASLt's GELU is the tanh form); the activation is then
// applied to the float32 accumulator before the one rounding to the output
// dtype, where the eager form rounds the product first. A residual without
// activation is cuBLASLt's C operand (beta = 1, C apart from D): D = A B + C +
// bias, rounded once, where the eager form rounds twice; a residual after an
// activation is added by its own kernel (the skinny kernel, Note [Skinny
// matmuls], does both in its epilogue). Any other bias is added through C
// (beta = 1) and the activation runs as its own kernel, as does everything
// when cuBLASLt finds no algorithm for the epilogue.
// jit/passes/matmul_epilogue.h turns addmm/linear + relu/gelu(tanh), and on
// CUDA linear + a residual add, into these ops.

#include <cstdint>
#include <functional>

#include "kiln/scalar.h"
#include "kiln/tensor.h"

namespace kiln::cuda {

enum class Activation { None, Relu, GeluTanh };

// Parses addmm_act's `act` argument; throws "[op] expected act to be one of
// 'none', 'relu', 'gelu_tanh', got 'x'".
Activation parse_activation(std::string_view act, const char* op);

// out[..., m, n] = act(beta * out + alpha * a[..., m, k] @ b[..., k, n] + bias)
// + residual on CUDA tensors of one device and one dtype (float32, float16,
// bfloat16, float64; half types accumulate in float32, float32 uses TF32 only
// when allow_tf32()). out, a and b have the same rank (>= 2) and batch sizes;
// a and b may be expanded (stride-0) views. A zero beta writes out without
// reading it. `bias` (optional) is a [n] vector of out's dtype. `residual`
// (optional, only with a zero beta) has out's sizes and dtype and shares no
// memory with out; with no activation it is cuBLASLt's C operand, so the sum
// is rounded once (Note [Matmul epilogues]). Products of few rows may run
// through a generated kernel instead (Note [Skinny matmuls]). Runs on the
// current stream of the tensors' device; may share storage with a or b.
void lt_matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& beta = 0,
               const Scalar& alpha = 1, Activation act = Activation::None,
               const Tensor* bias = nullptr, const Tensor* residual = nullptr);

// out[m, n] = act(norm(a)[m, k] @ b[k, n] + bias) + residual through the
// generated skinny kernel, its norm prologue normalizing a's rows (norm 1:
// layer_norm with `norm_weight`, `norm_bias`; 2: rms_norm with
// `norm_weight`), the only kernel that fuses a norm (Note [Norm prologues]),
// when that is the choice for this problem (Note [Skinny matmul choice]);
// 2-D operands, out sharing no memory with the others. False, nothing
// queued, when that kernel does not take these operands, SkinnyPath::Cublas
// is forced or the other way was found faster: the caller then normalizes
// first. `run_unfused` queues that other way into `out` (timing runs both).
bool skinny_matmul_with_norm(const Tensor& out, const Tensor& a, const Tensor& b, Activation act,
                             const Tensor* bias, const Tensor* residual, int norm,
                             const Tensor* norm_weight, const Tensor* norm_bias, double norm_eps,
                             const std::function<void()>& run_unfused);

// Note [Skinny matmul choice] (blas_lt_skinny.cpp)
// While a MatmulTuning object lives on a thread, each skinny product it runs
// whose choice between cuBLASLt and the generated kernel was not timed yet is
// timed both ways on its own operands; the faster is kept in this process and
// in the disk cache, and later products of the same problem take it without
// timing. jit::compile opens one around the first run of a Mode::MaxAutotune
// entry. Nesting is allowed; products under CUDA graph capture are not timed.
class MatmulTuning {
 public:
  MatmulTuning();
  ~MatmulTuning();
  MatmulTuning(const MatmulTuning&) = delete;
  MatmulTuning& operator=(const MatmulTuning&) = delete;
};

// Which kernel skinny products take: Auto (the kept choice, else the
// default of Note [Skinny matmuls]) or one forced, for benchmarks and tests;
// GeneratedNorm forces the generated kernel only for products with a norm
// prologue (the rest as Auto).
// KILN_SKINNY_MATMUL=generated|generated-norm|cublas|auto sets it at start.
enum class SkinnyPath { Auto, Generated, GeneratedNorm, Cublas };
void set_skinny_path(SkinnyPath path);
SkinnyPath skinny_path();

// Skinny products run (each way) and choices timed, in this process.
struct SkinnyStats {
  int64_t generated = 0;
  int64_t cublas = 0;
  int64_t timed = 0;
};
SkinnyStats skinny_stats();
// Rows up to which a product with a norm prologue takes the generated kernel
// by default (Note [Skinny matmul choice]).
int64_t skinny_norm_rows();

// Heuristic cache statistics (tests): lookups that found a cached algorithm,
// and those that asked cuBLASLt.
struct LtCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  // Misses answered by the disk cache (Note [cuBLASLt algorithm disk cache]).
  int64_t disk_hits = 0;
  // Wall time of the misses (disk lookups and heuristic queries), waits for
  // the warm-up included (Note [cuBLASLt warm-up]).
  double miss_ms = 0;
};
LtCacheStats lt_cache_stats();

// Note [cuBLASLt warm-up]
// The first algorithm query of a process, or the first check of a stored one,
// costs 100-200 ms on an H200 while cuBLASLt initializes itself (measured: the
// disk cache does not avoid it). The first host-to-device copy onto a device
// therefore starts that initialization on a background thread, so that it
// overlaps the loading of a model's weights; a matmul that needs an algorithm
// while it runs waits for it rather than initialize twice. KILN_BLAS_WARMUP=0
// turns it off. Called on the main thread it returns at once; on another it
// makes the query before returning (Note [Exit during the warm-up] in
// blas_lt_warmup.cpp). Does nothing after the first call per device.
void start_blas_warmup(int device);

}  // namespace kiln::cuda
