// Skinny matrix products on CUDA (Note [Skinny matmul kernel]): the source,
// its configuration, and the runtime/ slot through which cuBLASLt's caller
// reaches it (Note [Skinny matmuls], Note [Runtime hooks]).

#include "jit/codegen_cuda/op_kernels/gemv.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>

#include "jit/codegen_cuda/kernel_loader.h"
#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "kiln/error.h"
#include "runtime/core/env.h"
#include "runtime/core/hooks.h"
#include "runtime/core/thread_cache.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_guard.h"

// GCC 12 reports false stringop-overflow warnings for std::string
// concatenation inlined at -O3; this file builds strings.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

constexpr int kBlock = 256;

bool gemv_dtype(DType t) {
  return t == kFloat16 || t == kBFloat16 || t == kFloat32;
}

// 16 bytes `v` (four 32-bit words) as floats f[0..V).
std::string unpack_source(DType t) {
  std::string s = "__device__ __forceinline__ void kiln_unpack(const uint4& v, float* f) {\n";
  s += "  const unsigned w[4] = {v.x, v.y, v.z, v.w};\n";
  if (t == kFloat32) {
    s += "#pragma unroll\n  for (int i = 0; i < 4; ++i) f[i] = __uint_as_float(w[i]);\n";
  } else if (t == kBFloat16) {
    s += "#pragma unroll\n  for (int i = 0; i < 4; ++i) {\n"
         "    f[2 * i] = __uint_as_float(w[i] << 16);\n"
         "    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);\n  }\n";
  } else {
    s += "#pragma unroll\n  for (int i = 0; i < 4; ++i) {\n"
         "    f[2 * i] = kiln_h2f((unsigned short)(w[i] & 0xffffu));\n"
         "    f[2 * i + 1] = kiln_h2f((unsigned short)(w[i] >> 16));\n  }\n";
  }
  s += "}\n";
  // The inverse, for values already rounded to the dtype (Note [Normalized x
  // kept in registers]).
  s += "__device__ __forceinline__ uint4 kiln_pack_vec(const float* f) {\n  unsigned w[4];\n";
  if (t == kFloat32) {
    s += "#pragma unroll\n  for (int i = 0; i < 4; ++i) w[i] = __float_as_uint(f[i]);\n";
  } else {
    const std::string to = t == kBFloat16 ? "kiln_f2bf" : "kiln_f2h";
    s += "#pragma unroll\n  for (int i = 0; i < 4; ++i) w[i] = (unsigned)" + to +
         "(f[2 * i]) | ((unsigned)" + to + "(f[2 * i + 1]) << 16);\n";
  }
  return s + "  uint4 v;\n  v.x = w[0], v.y = w[1], v.z = w[2], v.w = w[3];\n  return v;\n}\n";
}

// The epilogue of one output: bias, activation, residual, one rounding.
std::string store_source(const GemvSpec& s) {
  const std::string T = mem_type(s.dtype);
  // Note [Epilogue operands early]: the bias and the residual of output
  // (i, col), loaded where the step starts; then the store, which takes them.
  std::string src = "__device__ __forceinline__ void kiln_epilogue_operands(const " + T +
                    "* __restrict__ bias, const " + T +
                    "* __restrict__ res, i64 n, i64 ldr, int i, i64 col, float& b, float& r) {\n"
                    "  b = 0.0f, r = 0.0f;\n"
                    "  if (col >= n) return;\n";
  if (s.bias) src += "  b = " + load_expr(s.dtype, "bias[col]") + ";\n";
  if (s.residual) src += "  r = " + load_expr(s.dtype, "res[(i64)i * ldr + col]") + ";\n";
  src += "}\n";
  src += "__device__ __forceinline__ void kiln_store_with(" + T +
         "* __restrict__ out, i64 n, i64 ldo, int i, i64 col, float v, float b, float r) {\n"
         "  if (col >= n) return;\n";
  if (s.bias) src += "  v += b;\n";
  if (s.act == 1) src += "  v = v < 0.0f ? 0.0f : v;\n";
  if (s.act == 2) {
    // x * sigmoid(2u) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
    // without the cancellation where tanh(u) nears -1 (as the pointwise gelu).
    src +=
        "  {\n"
        "    const float u2 = 1.5957691216057308f * (v + 0.044715f * v * v * v);\n"
        "    float e, r;\n"
        "    asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(e) : \"f\"(fabsf(u2) * "
        "-1.4426950408889634f));\n"
        "    asm(\"rcp.approx.ftz.f32 %0, %1;\" : \"=f\"(r) : \"f\"(1.0f + e));\n"
        "    v = v * (u2 >= 0.0f ? r : e * r);\n"
        "  }\n";
  }
  if (s.residual) src += "  v += r;\n";
  src += "  out[(i64)i * ldo + col] = " + store_expr(s.dtype, "v") + ";\n}\n";
  src += "__device__ __forceinline__ void kiln_store(" + T + "* __restrict__ out, const " + T +
         "* __restrict__ bias, const " + T +
         "* __restrict__ res, i64 n, i64 ldo, i64 ldr, int i, i64 col, float v) {\n"
         "  float b, r;\n"
         "  kiln_epilogue_operands(bias, res, n, ldr, i, col, b, r);\n"
         "  kiln_store_with(out, n, ldo, i, col, v, b, r);\n}\n";
  return src;
}

// The norm prologue (Note [Skinny matmul kernel]): each row's statistics
// into s_scale / s_shift (layer_norm: x * rstd - mean * rstd; rms_norm:
// x * rstd). One pass over x: float64 sums of x and of x * x, from which the
// variance (the eager kernels take the mean, then squared deviations; in
// float64 the two agree far below float32's rounding of rstd). The rows run
// side by side, WPR warps each (all eight warps on one row when m = 1, a
// warp per row from m = 5), so that m rows cost two barriers, not 2m block
// reductions one after another.
const char kNormStats[] = R"(
#if KNORM && !(KXRES && KTPR <= 32) && !KFOLD
  constexpr int KRPP = KM >= 5 ? 8 : KM >= 3 ? 4 : KM;  // rows side by side
  constexpr int WPR = 8 / KRPP;                         // warps per row
  __shared__ double s_part[KM][WPR][2];
  __shared__ float s_scale[KM], s_shift[KM];
  {
#if KNORM_SMEM
    // Note [Norm vectors in shared memory]: loaded with x's, stored after.
    uint4 fill_w[2], fill_b[2];
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      const i64 j = threadIdx.x + 256 * f;
      fill_w[f] = KNORM_W && j < kv ? ((const uint4*)nw)[j] : kiln_zero4();
      fill_b[f] = KNORM_B && j < kv ? ((const uint4*)nb)[j] : kiln_zero4();
    }
#endif
    const int warp = threadIdx.x >> 5, part = warp % WPR;
    for (int i0 = 0; i0 < KM; i0 += KRPP) {
      const int i = i0 + warp / WPR;
      if (i >= KM) break;  // the same for the whole warp
      const uint4* xr = (const uint4*)(x + (i64)i * ldx);
      double s = 0.0, q = 0.0;
#pragma unroll 4
      for (i64 j = part * 32 + (threadIdx.x & 31); j < kv; j += WPR * 32) kiln_moments(xr[j], s, q);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, o);
        q += __shfl_xor_sync(0xffffffffu, q, o);
      }
      if ((threadIdx.x & 31) == 0) s_part[i][part][0] = s, s_part[i][part][1] = q;
    }
#if KNORM_SMEM
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      const i64 j = threadIdx.x + 256 * f;
      if (j < kv) {
        if (KNORM_W) kiln_s_norm[j] = fill_w[f];
        if (KNORM_B) kiln_s_norm[kv + j] = fill_b[f];
      }
    }
#endif
    __syncthreads();
    if (threadIdx.x < KM) {
      double s = 0.0, q = 0.0;
#pragma unroll
      for (int p = 0; p < WPR; ++p) s += s_part[threadIdx.x][p][0], q += s_part[threadIdx.x][p][1];
      kiln_scale_shift(s, q, kiln_inv_count(kv), eps, s_scale[threadIdx.x], s_shift[threadIdx.x]);
    }
    __syncthreads();
  }
#endif
)";

// One x vector normalized as the eager norm stores it: layer_norm rounds
// (x * scale + shift) * w + b once; rms_norm rounds x * scale, and a
// weight's product again (it is a separate multiply there).
std::string normalize_source(const GemvSpec& s) {
  const std::string r = s.dtype == kFloat32 ? "" : s.dtype == kFloat16 ? "h" : "bf";
  auto round = [&](const std::string& v) {
    return r.empty() ? v : "kiln_" + r + "2f(kiln_f2" + r + "(" + v + "))";
  };
  // One vector's float64 sums of x (layer_norm only) and of x * x; the
  // scale and shift of a row from the sums over its kv vectors.
  std::string src =
      "__device__ __forceinline__ void kiln_moments(const uint4& v, double& s, double& q) {\n"
      "  float f[KV];\n  kiln_unpack(v, f);\n#pragma unroll\n  for (int e = 0; e < KV; ++e) {\n"
      "#if KNORM == 1\n    s += (double)f[e];\n#endif\n    q += (double)f[e] * (double)f[e];\n  "
      "}\n}\n"
      // 1 / count is the caller's (the folded form takes it at the kernel's
      // start), and float64 rsqrt (1 ulp) stands for 1 / sqrt: no division
      // on the statistics' path.
      "__device__ __forceinline__ double kiln_inv_count(i64 kv) { return 1.0 / (double)(kv * KV); "
      "}\n"
      "__device__ __forceinline__ void kiln_scale_shift(double s, double q, double inv_count, "
      "double eps, float& scale, float& shift) {\n"
      "  const double mean = s * inv_count, var = fmax(q * inv_count - mean * mean, 0.0);\n"
      "  const float rstd = (float)rsqrt(var + eps);\n"
      "  scale = rstd;\n  shift = -(rstd * (float)mean);\n}\n";
  // The norm's weight and bias from their vectors (1 and 0 where it has
  // none; the vector is then not read), and at vector j.
  src +=
      "__device__ __forceinline__ void kiln_norm_unpack(const uint4& w, const uint4& b, float* "
      "nwf, "
      "float* nbf) {\n#pragma unroll\n  for (int e = 0; e < KV; ++e) nwf[e] = 1.0f, "
      "nbf[e] = 0.0f;\n"
      "#if KNORM_W\n  kiln_unpack(w, nwf);\n#endif\n"
      "#if KNORM_B\n  kiln_unpack(b, nbf);\n#endif\n}\n"
      "__device__ __forceinline__ void kiln_norm_params(const T* nw, const T* nb, i64 j, i64 kv, "
      "float* nwf, float* nbf) {\n"
      "#if KNORM_SMEM\n"
      "  const uint4 *vw = kiln_s_norm, *vb = kiln_s_norm + kv;\n"
      "#else\n"
      "  const uint4 *vw = (const uint4*)nw, *vb = (const uint4*)nb;\n"
      "#endif\n"
      "  kiln_norm_unpack(KNORM_W ? vw[j] : kiln_zero4(), KNORM_B ? vb[j] : kiln_zero4(), nwf, "
      "nbf);\n"
      "}\n";
  // Note [Norm folded into the sums]: an output from its sum of weights
  // times x (times the norm's weight), the row's moments, and the sums of
  // its weights times the norm's weight (b) and bias (c).
  src +=
      "__device__ __forceinline__ float kiln_fold(float a, double s, double q, float b, float c, "
      "double inv_count, double eps) {\n"
      "  float scale, shift;\n  kiln_scale_shift(s, q, inv_count, eps, scale, shift);\n"
      "  return KNORM == 1 ? a * scale + (shift * b + c) : a * scale;\n}\n";
  src +=
      "__device__ __forceinline__ void kiln_normalize(float* f, const float* nw, const float* nb, "
      "float scale, float shift) {\n#pragma unroll\n  for (int e = 0; e < KV; ++e) {\n";
  if (s.norm == 1) {
    src += "    f[e] = " + round("(f[e] * scale + shift) * nw[e] + nb[e]") + ";\n";
  } else {
    src += "    f[e] = " + round("f[e] * scale") + ";\n";
    if (s.norm_weight) src += "    f[e] = " + round("f[e] * nw[e]") + ";\n";
  }
  return src + "  }\n}\n";
}

// Parameters: out, x, w, bias (null without), residual (null without), the
// norm's weight and bias (null without); n outputs, kv = k / V vectors per
// row, the row strides (elements) of out, x, w and the residual, the norm's eps.
const char kGemvHead[] = R"((
    T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ w,
    const T* __restrict__ bias, const T* __restrict__ res, const T* __restrict__ nw,
    const T* __restrict__ nb, i64 n, i64 kv, i64 ldo, i64 ldx, i64 ldw, i64 ldr, double eps) {
)";

const char kGemvSetup[] = R"(
  const int lane = threadIdx.x % KTPR, group = threadIdx.x / KTPR;
  // This thread's weight vectors of the block's first step start their trip
  // from DRAM into L2 while the kernel before this one finishes (Note [Early
  // launch]) and, with a norm prologue, while the statistics are taken. A
  // prefetch holds no register and reads no value, so it may run before the
  // wait. Launched the usual way, a product without a prologue gains nothing
  // from a prefetch just before its loads (on an H100, gpt2 1x1 took 15 us
  // longer with it).
#if (KEARLY || KNORM) && !KSTREAM
  kiln_prefetch_rows(w, ((i64)blockIdx.x * (256 / KTPR) + group) * KRN, n, kv, ldw, lane);
#endif
  kiln_grid_enter();
)";

// Note [Normalized x kept in registers]
// At one or two rows, x is the same for every step of outputs a block walks
// and, where a lane's vectors cover all of k in one pass (kv <= KTPR * KU),
// so are the lane's norm weight and bias. The FMA form with a norm prologue
// used to load x again at every step and, inside the step, the norm's weight
// and bias: a second round of loads that waited on nothing but came after
// the weights' (the kernel timeline: the FC product 4.5 us against 2.7 for
// the down projection, which moves the same bytes in as many steps). Now
// x is loaded once, normalized once (with the same roundings) and kept
// packed in registers; a group of at most 32 lanes, which then holds all of
// x, takes the statistics from those registers with shuffles (no shared
// memory, no barrier). The steps load weights only.
// The prologue is longer (x, the statistics, the norm's weight and bias,
// then the first weights), so it pays only where a block walks several
// steps: measured on an H200 in every product with a prologue at one or
// two rows, Llama 1B's decode step went from 1418 to 1344-1363 us, while
// GPT-2's (one step per block in its QKV and FC products) went from 210 to
// 226 and its decode from 296 to 310. Taken where the blocks walk at least
// two steps each (kGemvKeepXStepsPerSm).
const char kGemvKeepX[] = R"(
#if KXRES
  uint4 xr[KU][KM];
  {
#pragma unroll
    for (int u = 0; u < KU; ++u) {
      const i64 j = lane + (i64)u * KTPR;
#pragma unroll
      for (int i = 0; i < KM; ++i) xr[u][i] = j < kv ? ((const uint4*)(x + (i64)i * ldx))[j] : kiln_zero4();
    }
#if KNORM
    float g_scale[KM], g_shift[KM];
#if KTPR <= 32
#pragma unroll
    for (int i = 0; i < KM; ++i) {
      double s = 0.0, q = 0.0;
#pragma unroll
      for (int u = 0; u < KU; ++u) kiln_moments(xr[u][i], s, q);
#pragma unroll
      for (int o = KTPR / 2; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, o);
        q += __shfl_xor_sync(0xffffffffu, q, o);
      }
      kiln_scale_shift(s, q, kiln_inv_count(kv), eps, g_scale[i], g_shift[i]);
    }
#else
#pragma unroll
    for (int i = 0; i < KM; ++i) g_scale[i] = s_scale[i], g_shift[i] = s_shift[i];
#endif
#pragma unroll
    for (int u = 0; u < KU; ++u) {
      const i64 j = lane + (i64)u * KTPR;
      if (j < kv) {
        float nwf[KV], nbf[KV];
        kiln_norm_params(nw, nb, j, kv, nwf, nbf);
#pragma unroll
        for (int i = 0; i < KM; ++i) {
          float f[KV];
          kiln_unpack(xr[u][i], f);
          kiln_normalize(f, nwf, nbf, g_scale[i], g_shift[i]);
          xr[u][i] = kiln_pack_vec(f);
        }
      }
    }
#endif
  }
#endif
)";

// Note [Streamed one-row products]: x normalized once, by the whole block,
// into shared memory (after the statistics of kNormStats); then one output
// per group, the lane's KU vectors of its row loaded at once. No prefetch:
// the loads follow at once, and the prefetches' requests cost more than
// they hid (H200: 2048x8192 13.4 -> 11.2 us without them, 2048x16384 21.6
// -> 18.6). Indices are 32-bit (kv < 2^31) and the body holds nothing for
// steps it does not walk, so that it keeps to few registers.
const char kGemvStreamBody[] = R"(
#if KNORM
  for (int j = threadIdx.x; j < (int)kv; j += 256) {
    float f[KV], nwf[KV], nbf[KV];
    kiln_unpack(((const uint4*)x)[j], f);
    kiln_norm_params(nw, nb, j, kv, nwf, nbf);
    kiln_normalize(f, nwf, nbf, s_scale[0], s_shift[0]);
    kiln_s_norm[j] = kiln_pack_vec(f);
  }
  __syncthreads();
  const uint4* xs = kiln_s_norm;
#else
  const uint4* xs = (const uint4*)x;
#endif
  const i64 row = (i64)blockIdx.x * (256 / KTPR) + group;
  float pre_b = 0.0f, pre_r = 0.0f;
  if (lane == 0) kiln_epilogue_operands(bias, res, n, ldr, 0, row, pre_b, pre_r);
  const uint4* wr = (const uint4*)(w + (row < n ? row : n - 1) * ldw);
  // Loads and math in one loop, without a branch (ptxas moves no load
  // across one): the compiler keeps a few loads ahead of the math at about
  // 32 registers, eight blocks per SM; holding all KU vectors first took 48
  // and five blocks, and read slower (2048x8192: 11.3 against 9.8 us). Past
  // kv (k not a multiple of a round), a lane reads its last vector again
  // and zeroes it (KTAIL).
  float acc = 0.0f;
#pragma unroll
  for (int u = 0; u < KU; ++u) {
    const int j = lane + u * KTPR;
#if KTAIL
    const int jj = j < (int)kv ? j : (int)kv - 1;
    float wf[KV], xf[KV];
    kiln_unpack(kiln_ld_stream(wr + jj), wf);
    kiln_unpack(xs[jj], xf);
#pragma unroll
    for (int e = 0; e < KV; ++e) acc = fmaf(j < (int)kv ? wf[e] : 0.0f, j < (int)kv ? xf[e] : 0.0f, acc);
#else
    float wf[KV], xf[KV];
    kiln_unpack(kiln_ld_stream(wr + j), wf);
    kiln_unpack(xs[j], xf);
#pragma unroll
    for (int e = 0; e < KV; ++e) acc = fmaf(wf[e], xf[e], acc);
#endif
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
#if KTPR > 32
  __shared__ float red[8];
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (lane == 0) {
    acc = 0.0f;
#pragma unroll
    for (int g = 0; g < KTPR / 32; ++g) acc += red[group * (KTPR / 32) + g];
  }
#endif
  if (lane == 0) kiln_store_with(out, n, ldo, 0, row, acc, pre_b, pre_r);
}
)";

const char kGemvBody[] = R"(
  // Steps of 256 / KTPR * KRN outputs; the grid holds at most as many blocks
  // as fit on the GPU at once, and each walks the steps gridDim.x apart,
  // prefetching its next step's weight rows while it computes this one.
#if KPIPE
  // Note [Weights a step ahead]: the first round's weights into registers.
  uint4 wn[KU][KRN];
  kiln_load_round(wn, w, ((i64)blockIdx.x * (256 / KTPR) + group) * KRN, lane, n, kv, ldw);
#endif
  for (i64 step = blockIdx.x; step * (256 / KTPR) * KRN < n; step += gridDim.x) {
  const i64 n0 = (step * (256 / KTPR) + group) * KRN;
  const i64 n0_next = n0 + (i64)gridDim.x * 256 / KTPR * KRN;
  {
    // Where a step is one round and its successor's weights go into
    // registers during it (Note [Weights a step ahead]), the step after
    // that starts its trip into L2.
    const i64 ahead = KPIPE && kv <= (i64)KTPR * KU ? 2 : 1;
    if ((step + ahead * gridDim.x) * (256 / KTPR) * KRN < n) {
      kiln_prefetch_rows(w, ((step + ahead * gridDim.x) * (256 / KTPR) + group) * KRN, n, kv, ldw, lane);
    }
  }
  // Note [Epilogue operands early]: where each of the step's outputs has a
  // lane of its own (output q = i * KRN + r is stored by lane q), that lane
  // loads its bias and residual now, so that they travel with the weights.
#if KM * KRN <= KTPR && KEPI_EARLY
  float pre_b = 0.0f, pre_r = 0.0f;
  if (lane < KM * KRN) {
    kiln_epilogue_operands(bias, res, n, ldr, lane / KRN, n0 + lane % KRN, pre_b, pre_r);
  }
#define KILN_STORE(i, col, v) kiln_store_with(out, n, ldo, i, col, v, pre_b, pre_r)
#else
#define KILN_STORE(i, col, v) kiln_store(out, bias, res, n, ldo, ldr, i, col, v)
#endif
  // Rows past n read row n - 1 (in bounds) and are never stored.
  const uint4* wr[KRN];
#pragma unroll
  for (int r = 0; r < KRN; ++r) wr[r] = (const uint4*)(w + (n0 + r < n ? n0 + r : n - 1) * ldw);
  float acc[KM][KRN];
#pragma unroll
  for (int i = 0; i < KM; ++i) {
#pragma unroll
    for (int r = 0; r < KRN; ++r) acc[i][r] = 0.0f;
  }
#if KFOLD
  // Note [Norm folded into the sums]: each row's moments, and each output's
  // sums of its weights times the norm's weight (layer_norm) and bias.
  double fs[KM], fq[KM];
  float fb[KRN], fc[KRN];
  const double inv_count = kiln_inv_count(kv);
#pragma unroll
  for (int i = 0; i < KM; ++i) fs[i] = fq[i] = 0.0;
#pragma unroll
  for (int r = 0; r < KRN; ++r) fb[r] = fc[r] = 0.0f;
#endif
  for (i64 j0 = lane; j0 < kv; j0 += (i64)KTPR * KU) {
    // The step's loads first, so that they are in flight together: the
    // weight vectors, and x's too when they fit in a few registers (else
    // each u's x vectors load together).
    uint4 wv[KU][KRN];
#if KPIPE
    // This round's weights came a round ahead; the next round's (this
    // step's, or the next step's first) go out now, before the math.
#pragma unroll
    for (int u = 0; u < KU; ++u) {
#pragma unroll
      for (int r = 0; r < KRN; ++r) wv[u][r] = wn[u][r];
    }
    if (j0 + (i64)KTPR * KU < kv) {
      kiln_load_round(wn, w, n0, j0 + (i64)KTPR * KU, n, kv, ldw);
    } else if (n0_next - group * KRN < n) {
      kiln_load_round(wn, w, n0_next, lane, n, kv, ldw);
    }
#endif
#if KM * KU <= 8 && !KXRES
    uint4 xv[KU][KM];
#endif
#if KFOLD
    uint4 nwv[KU], nbv[KU];
#endif
#pragma unroll
    for (int u = 0; u < KU; ++u) {
      const i64 j = j0 + (i64)u * KTPR;
#if !KPIPE
#pragma unroll
      for (int r = 0; r < KRN; ++r) wv[u][r] = j < kv ? kiln_ld_stream(wr[r] + j) : kiln_zero4();
#endif
#if KFOLD
      nwv[u] = KNORM_W && j < kv ? ((const uint4*)nw)[j] : kiln_zero4();
      nbv[u] = KNORM_B && j < kv ? ((const uint4*)nb)[j] : kiln_zero4();
#endif
#if KM * KU <= 8 && !KXRES
#pragma unroll
      for (int i = 0; i < KM; ++i) xv[u][i] = j < kv ? ((const uint4*)(x + (i64)i * ldx))[j] : kiln_zero4();
#endif
    }
#pragma unroll
    for (int u = 0; u < KU; ++u) {
      const i64 j = j0 + (i64)u * KTPR;
      if (j < kv) {
#if KXRES
#define KILN_X(u, i) xr[u][i]
#elif KM * KU > 8
        uint4 xu[KM];
#pragma unroll
        for (int i = 0; i < KM; ++i) xu[i] = ((const uint4*)(x + (i64)i * ldx))[j];
#define KILN_X(u, i) xu[i]
#else
#define KILN_X(u, i) xv[u][i]
#endif
        float wf[KRN][KV];
#pragma unroll
        for (int r = 0; r < KRN; ++r) kiln_unpack(wv[u][r], wf[r]);
#if KFOLD
        float nwf[KV], nbf[KV];
        kiln_norm_unpack(nwv[u], nbv[u], nwf, nbf);
#if KNORM == 1
#pragma unroll
        for (int r = 0; r < KRN; ++r) {
#pragma unroll
          for (int e = 0; e < KV; ++e) {
            fb[r] = fmaf(wf[r][e], nwf[e], fb[r]);
            if (KNORM_B) fc[r] = fmaf(wf[r][e], nbf[e], fc[r]);
          }
        }
#endif
#elif KNORM && !KXRES
        float nwf[KV], nbf[KV];
        kiln_norm_params(nw, nb, j, kv, nwf, nbf);
#endif
#pragma unroll
        for (int i = 0; i < KM; ++i) {
          float xf[KV];
          kiln_unpack(KILN_X(u, i), xf);
#if KFOLD
          // Each round of KTPR vectors is one group's to take moments of.
          if (((j0 - lane) / KTPR + u) % (256 / KTPR) == group) kiln_moments(KILN_X(u, i), fs[i], fq[i]);
#if KNORM_W
#pragma unroll
          for (int e = 0; e < KV; ++e) xf[e] *= nwf[e];
#endif
#elif KNORM && !KXRES
          kiln_normalize(xf, nwf, nbf, s_scale[i], s_shift[i]);
#endif
#pragma unroll
          for (int r = 0; r < KRN; ++r) {
#pragma unroll
            for (int e = 0; e < KV; ++e) acc[i][r] = fmaf(wf[r][e], xf[e], acc[i][r]);
          }
        }
      }
    }
  }
  // The group's sums: a warp's lanes by shuffles (within aligned runs of
  // KTPR lanes when KTPR < 32), a group's warps through shared memory.
  constexpr int WL = KTPR < 32 ? KTPR : 32;
#pragma unroll
  for (int i = 0; i < KM; ++i) {
#pragma unroll
    for (int r = 0; r < KRN; ++r) {
#pragma unroll
      for (int o = WL / 2; o > 0; o >>= 1) acc[i][r] += __shfl_xor_sync(0xffffffffu, acc[i][r], o);
    }
  }
#if KFOLD
#pragma unroll
  for (int o = WL / 2; o > 0; o >>= 1) {
#pragma unroll
    for (int r = 0; r < KRN; ++r) {
      if (KNORM == 1) fb[r] += __shfl_xor_sync(0xffffffffu, fb[r], o);
      if (KNORM_B) fc[r] += __shfl_xor_sync(0xffffffffu, fc[r], o);
    }
  }
  // The moments are the block's: a warp's lanes, then its eight warps.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int i = 0; i < KM; ++i) {
      if (KNORM == 1) fs[i] += __shfl_xor_sync(0xffffffffu, fs[i], o);
      fq[i] += __shfl_xor_sync(0xffffffffu, fq[i], o);
    }
  }
  __shared__ double fold_m[256 / 32][KM][2];
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int i = 0; i < KM; ++i) fold_m[threadIdx.x / 32][i][0] = fs[i], fold_m[threadIdx.x / 32][i][1] = fq[i];
  }
#if KTPR <= 32
  __syncthreads();
#endif
#endif
#if KTPR > 32
  constexpr int WPG = KTPR / 32;
  __shared__ float red[256 / 32][KM * KRN];
#if KFOLD
  __shared__ float red_f[256 / 32][KRN][2];
#endif
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int i = 0; i < KM; ++i) {
#pragma unroll
      for (int r = 0; r < KRN; ++r) red[threadIdx.x / 32][i * KRN + r] = acc[i][r];
    }
#if KFOLD
#pragma unroll
    for (int r = 0; r < KRN; ++r) red_f[threadIdx.x / 32][r][0] = fb[r], red_f[threadIdx.x / 32][r][1] = fc[r];
#endif
  }
  __syncthreads();
  for (int q = lane; q < KM * KRN; q += KTPR) {
    float v = 0.0f;
#pragma unroll
    for (int g = 0; g < WPG; ++g) v += red[group * WPG + g][q];
#if KFOLD
    double s = 0.0, sq = 0.0;
#pragma unroll
    for (int g = 0; g < 8; ++g) s += fold_m[g][q / KRN][0], sq += fold_m[g][q / KRN][1];
    float b = 0.0f, c = 0.0f;
#pragma unroll
    for (int g = 0; g < WPG; ++g) b += red_f[group * WPG + g][q % KRN][0], c += red_f[group * WPG + g][q % KRN][1];
    v = kiln_fold(v, s, sq, b, c, inv_count, eps);
#endif
    KILN_STORE(q / KRN, n0 + q % KRN, v);
  }
  __syncthreads();  // `red` is written again by the next step
#else
#pragma unroll
  for (int i = 0; i < KM; ++i) {
#pragma unroll
    for (int r = 0; r < KRN; ++r) {
#if KFOLD
      if ((i * KRN + r) % KTPR == lane) {
        double s = 0.0, sq = 0.0;
#pragma unroll
        for (int g = 0; g < 8; ++g) s += fold_m[g][i][0], sq += fold_m[g][i][1];
        KILN_STORE(i, n0 + r, kiln_fold(acc[i][r], s, sq, fb[r], fc[r], inv_count, eps));
      }
#else
      if ((i * KRN + r) % KTPR == lane) KILN_STORE(i, n0 + r, acc[i][r]);
#endif
    }
  }
#if KFOLD
  __syncthreads();  // `fold_m` is written again by the next step
#endif
#endif
  }
}
)";

// Note [Tensor-core skinny kernel]: the setup (the first tile's weights into
// L2, as kGemvSetup) and the tile walk. KB token blocks of 8 (B's columns).
const char kGemvMmaSetup[] = R"(
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const i64 chunks = (kv + 3) / 4;  // chunks of 32 elements of k: four vectors
#if KEARLY || KNORM
  kiln_prefetch_tile(w, (i64)blockIdx.x * 16, n, kv, ldw, warp, g, t, chunks);
#endif
  kiln_grid_enter();
)";

const char kGemvMmaBody[] = R"(
  __shared__ float red[8][32][4 * KB];
  for (i64 tile = blockIdx.x; tile * 16 < n; tile += gridDim.x) {
    const i64 n0 = tile * 16;
    if ((tile + gridDim.x) * 16 < n) {
      kiln_prefetch_tile(w, (tile + gridDim.x) * 16, n, kv, ldw, warp, g, t, chunks);
    }
    // Note [Epilogue operands early]: thread o stores output (o & 15, o >> 4).
    float pre_b = 0.0f, pre_r = 0.0f;
    if (KEPI_EARLY && threadIdx.x < 16 * KM) {
      kiln_epilogue_operands(bias, res, n, ldr, threadIdx.x >> 4, n0 + (threadIdx.x & 15), pre_b,
                             pre_r);
    }
    // Rows past n read row n - 1 (in bounds) and are never stored.
    const uint4* wa = (const uint4*)(w + (n0 + g < n ? n0 + g : n - 1) * ldw);
    const uint4* wb = (const uint4*)(w + (n0 + g + 8 < n ? n0 + g + 8 : n - 1) * ldw);
    float acc[KB][4];
#pragma unroll
    for (int b = 0; b < KB; ++b) acc[b][0] = acc[b][1] = acc[b][2] = acc[b][3] = 0.0f;
    for (i64 c0 = warp; c0 < chunks; c0 += 8 * KU) {
      // KU chunks' loads in flight: this lane's vector of weight rows g and
      // g + 8 and of x rows g (and g + 8), all at the same k.
      uint4 va[KU], vb[KU], vx[KU][KB];
#pragma unroll
      for (int u = 0; u < KU; ++u) {
        const i64 j = (c0 + 8 * u) * 4 + t;
        va[u] = j < kv ? kiln_ld_stream(wa + j) : kiln_zero4();
        vb[u] = j < kv ? kiln_ld_stream(wb + j) : kiln_zero4();
#pragma unroll
        for (int b = 0; b < KB; ++b) {
          const int row = g + 8 * b;
          vx[u][b] = j < kv && row < KM ? ((const uint4*)(x + (i64)row * ldx))[j] : kiln_zero4();
        }
      }
#if KFENCE
      // Note [Loads in flight before the first mma]: every accumulator
      // depends on every load of the step (through a term that is always
      // +0), so that ptxas issues them all before the first mma.
      {
        unsigned dep = 0u;
#pragma unroll
        for (int u = 0; u < KU; ++u) {
          dep ^= va[u].x ^ vb[u].x;
#pragma unroll
          for (int b = 0; b < KB; ++b) dep ^= vx[u][b].x;
        }
        const float zero = __uint_as_float(dep & (unsigned)((unsigned long long)n >> 62));
#pragma unroll
        for (int b = 0; b < KB; ++b) acc[b][0] += zero;
      }
#endif
#pragma unroll
      for (int u = 0; u < KU; ++u) {
#if KNORM
        const i64 j = (c0 + 8 * u) * 4 + t;
        if (j < kv) {
          float nwf[KV], nbf[KV];
          kiln_norm_params(nw, nb, j, kv, nwf, nbf);
#pragma unroll
          for (int b = 0; b < KB; ++b) {
            const int row = g + 8 * b;
            if (row < KM) {
              float f[KV];
              kiln_unpack(vx[u][b], f);
              kiln_normalize(f, nwf, nbf, s_scale[row], s_shift[row]);
              vx[u][b] = kiln_pack(f);
            }
          }
        }
#endif
#pragma unroll
        for (int b = 0; b < KB; ++b) {
          kiln_mma(acc[b], va[u].x, vb[u].x, va[u].y, vb[u].y, vx[u][b].x, vx[u][b].y);
          kiln_mma(acc[b], va[u].z, vb[u].z, va[u].w, vb[u].w, vx[u][b].z, vx[u][b].w);
        }
      }
    }
    // The warps' sums. Output (row, token) of the tile is accumulator
    // 4 (token / 8) + 2 (row / 8) + token % 2 of lane 4 (row % 8) + (token % 8) / 2.
#pragma unroll
    for (int b = 0; b < KB; ++b) {
#pragma unroll
      for (int r = 0; r < 4; ++r) red[warp][lane][4 * b + r] = acc[b][r];
    }
    __syncthreads();
    if (threadIdx.x < 16 * KM) {  // KM <= 16: one output per thread at most
      const int o = threadIdx.x, row = o & 15, tok = o >> 4;
      const int ln = (row & 7) * 4 + ((tok & 7) >> 1);
      const int reg = 4 * (tok >> 3) + 2 * (row >> 3) + (tok & 1);
      float v = 0.0f;
#pragma unroll
      for (int q = 0; q < 8; ++q) v += red[q][ln][reg];
#if KEPI_EARLY
      kiln_store_with(out, n, ldo, tok, n0 + row, v, pre_b, pre_r);
#else
      kiln_store(out, bias, res, n, ldo, ldr, tok, n0 + row, v);
#endif
    }
    __syncthreads();  // `red` is written again by the next tile
  }
}
)";

// 16-byte mma helpers: the instruction, a tile's weights into L2, and eight
// floats (already rounded to the dtype) packed back into a vector.
std::string mma_helpers_source(DType t) {
  const std::string ty = t == kBFloat16 ? "bf16" : "f16";
  const std::string to = t == kBFloat16 ? "kiln_f2bf" : "kiln_f2h";
  std::string s =
      "__device__ __forceinline__ void kiln_mma(float* c, unsigned a0, unsigned a1, unsigned a2, "
      "unsigned a3, unsigned b0, unsigned b1) {\n"
      "  asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32." +
      ty + "." + ty +
      ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\"\n"
      "      : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
      "      : \"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"r\"(b0), \"r\"(b1));\n}\n";
  s += "__device__ __forceinline__ uint4 kiln_pack(const float* f) {\n"
       "  unsigned w[4];\n#pragma unroll\n  for (int i = 0; i < 4; ++i) w[i] = (unsigned)" +
       to + "(f[2 * i]) | ((unsigned)" + to +
       "(f[2 * i + 1]) << 16);\n"
       "  uint4 v;\n  v.x = w[0], v.y = w[1], v.z = w[2], v.w = w[3];\n  return v;\n}\n";
  s +=
      R"(__device__ __forceinline__ void kiln_prefetch_tile(const T* w, i64 n0, i64 n, i64 kv, i64 ldw,
                                                    int warp, int g, int t, i64 chunks) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (n0 + g + 8 * h >= n) break;
    const uint4* row = (const uint4*)(w + (n0 + g + 8 * h) * ldw);
    for (i64 c = warp; c < chunks; c += 8) {
      const i64 j = c * 4 + t;
      if (j < kv) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + j));
    }
  }
}
)";
  return s;
}

int pow2_floor(int64_t v) {
  int p = 1;
  while (static_cast<int64_t>(p) * 2 <= v) p *= 2;
  return p;
}

}  // namespace

int gemv_vector(DType dtype) {
  return static_cast<int>(16 / itemsize(dtype));
}

GemvSpec gemv_spec(DType dtype, int64_t m, int64_t k, int act, bool bias, bool residual, int norm,
                   bool norm_weight, bool norm_bias) {
  GemvSpec s;
  s.dtype = dtype;
  s.m = static_cast<int>(m);
  s.rn = m <= 2 ? 1 : m <= 8 ? 2 : 4;
  s.unroll = std::max(1, 4 / s.rn);
  const int64_t kv = k / gemv_vector(dtype);
  // At least two vectors of k per thread; 8 to 256 threads per group.
  s.tpr = std::clamp(pow2_floor(std::max<int64_t>(1, kv / 2)), 8, kBlock);
  s.act = act;
  s.bias = bias;
  s.residual = residual;
  s.norm = norm;
  s.norm_weight = norm != 0 && norm_weight;
  s.norm_bias = norm == 1 && norm_bias;
  return s;
}

namespace {
// Steps of outputs a grid of `s` takes for n outputs.
int64_t steps_of(const GemvSpec& s, int64_t n) {
  return (n + gemv_outputs_per_block(s) - 1) / gemv_outputs_per_block(s);
}
}  // namespace

void gemv_widen(GemvSpec& s) {
  if (s.rn == 1) s.rn = 2;  // unroll stays: twice the weight loads in flight
}

void gemv_deepen(GemvSpec& s, int64_t n, int sms) {
  if (s.mma || s.tpr <= 8) return;
  GemvSpec half = s;
  half.tpr /= 2;
  const int64_t steps = steps_of(half, n);
  if (steps >= kGemvDeepStepsPerSm * sms) s = half;
}

void gemv_keep_x(GemvSpec& s, int64_t k, int64_t n, int sms) {
  const int64_t kv = k / gemv_vector(s.dtype);
  const int64_t steps = steps_of(s, n);
  s.keep_x = s.norm != 0 && !s.mma && s.m <= 2 && kv <= static_cast<int64_t>(s.tpr) * s.unroll &&
             steps >= kGemvKeepXStepsPerSm * sms;
}

void gemv_pipe(GemvSpec& s, int64_t n, int sms) {
  s.pipe =
      !s.mma && !s.fold_norm && s.m <= kGemvPipeRows && steps_of(s, n) >= kGemvPipeStepsPerSm * sms;
}

void gemv_norm_smem(GemvSpec& s, int64_t k) {
  // The kept-x form of a group of up to 32 lanes, and the folded form, take
  // no block statistics, so no barrier after which the vectors could be read.
  s.norm_smem = s.norm != 0 && !(s.keep_x && s.tpr <= 32) && !s.fold_norm && !s.stream &&
                k / gemv_vector(s.dtype) <= kGemvNormSmemVectors;
}

void gemv_fold_norm(GemvSpec& s, int64_t k, int64_t n, int sms) {
  const int64_t steps = steps_of(s, n);
  s.fold_norm = s.norm != 0 && !s.mma && !s.keep_x && s.m <= kGemvFoldRows &&
                steps <= kGemvFoldStepsPerSm * sms;
  if (!s.fold_norm) return;
  // Four loads per round in flight (weights, x, the norm's weight and bias):
  // no round that no lane of a group can use (GPT-2's k = 768 is 96 vectors,
  // three rounds of 32 lanes).
  const int64_t kv = k / gemv_vector(s.dtype);
  s.unroll = static_cast<int>(std::min<int64_t>(s.unroll, (kv + s.tpr - 1) / s.tpr));
}

size_t gemv_shared_bytes(const GemvSpec& s, int64_t k) {
  const size_t kv = static_cast<size_t>(k / gemv_vector(s.dtype));
  if (s.stream) return s.norm ? kv * 16 : 0;  // x, normalized
  return s.norm_smem ? 2 * kv * 16 : 0;
}

bool gemv_stream(GemvSpec& s, int64_t k, int64_t n) {
  if (s.mma || s.m != 1 || n * k * static_cast<int64_t>(itemsize(s.dtype)) < kGemvStreamBytes) {
    return false;
  }
  const int64_t kv = k / gemv_vector(s.dtype);
  int tpr = 32;  // a warp per output at least: its sums by shuffles
  while (tpr < kBlock && static_cast<int64_t>(tpr) * kGemvStreamVectors < kv) tpr *= 2;
  if (static_cast<int64_t>(tpr) * kGemvStreamVectors < kv) return false;  // k too long
  s.stream = true;
  s.stream_tail = kv % tpr != 0;
  s.tpr = tpr;
  s.rn = 1;
  s.unroll = static_cast<int>((kv + tpr - 1) / tpr);  // the lane's whole share in one round
  s.keep_x = s.pipe = s.fold_norm = s.norm_smem = false;
  return true;
}

void gemv_take_mma(GemvSpec& s) {
  s.mma = true;
  s.fence = true;
  s.tpr = 32;  // unused by the tensor-core form: fixed so that names stay stable
  s.rn = 1;
  s.unroll = 4;  // chunks of 32 elements in flight per warp
}

bool gemv_uses_mma(DType dtype, int64_t m, int arch, int64_t from) {
  return (dtype == kFloat16 || dtype == kBFloat16) && m >= from && m <= kGemvMaxRows && arch >= 80;
}

bool gemv_preferred(DType dtype, int64_t m, int64_t k, int64_t n, int arch) {
  if (!gemv_uses_mma(dtype, m, arch)) return false;
  return k <= 1024 ||
         (m <= 8 && k * n * static_cast<int64_t>(itemsize(dtype)) <= kGemvMmaWeightBytes);
}

namespace {
// KILN_GEMV_STREAM (Note [Streamed one-row products]), read once; tests set it.
std::atomic<bool>& stream_switch() {
  static std::atomic<bool> on{env_flag("KILN_GEMV_STREAM", true)};
  return on;
}
bool stream_allowed() {
  return stream_switch().load(std::memory_order_relaxed);
}
}  // namespace

bool gemv_set_streaming(bool on) {
  return stream_switch().exchange(on);
}

int gemv_advice(DType dtype, int64_t m, int64_t k, int64_t n, bool norm, int arch, int sms) {
  if (gemv_preferred(dtype, m, k, n, arch)) return 1;
  if (m != 1 || k < kGemvApartK) return 0;  // measured at one row only
  static const std::string apart = [] {
    std::string v = env_string("KILN_GEMV_APART").value_or("both");
    if (v != "both" && v != "norm" && v != "head" && v != "none") {
      warn_env_value("KILN_GEMV_APART", v, "both, norm, head or none");
      v = "both";
    }
    return v;
  }();
  // The streamed form reads these weights faster than cuBLASLt, and
  // normalizes x once per block, for less than the norm's own kernel
  // (Note [Streamed one-row products]).
  GemvSpec streamed = gemv_spec(dtype, m, k, 0, false, false, norm ? 2 : 0);
  if (stream_allowed() && gemv_stream(streamed, k, n)) return 0;
  if (n >= kGemvApartHeadN) return apart == "both" || apart == "head" ? -1 : 0;
  if (!norm || (apart != "both" && apart != "norm")) return 0;
  GemvSpec s = gemv_spec(dtype, m, k, 0, false, false, 1);
  if (n >= kGemvWideN) gemv_widen(s);
  gemv_deepen(s, n, sms);
  const int64_t steps = steps_of(s, n);
  return steps < kGemvApartStepsPerSm * sms ? -1 : 0;
}

int64_t gemv_outputs_per_block(const GemvSpec& s) {
  if (s.mma) return 16;
  return static_cast<int64_t>(kBlock / s.tpr) * s.rn;
}

std::string gemv_name(const GemvSpec& s) {
  const std::string shape =
      s.mma ? "_tc" : "_t" + std::to_string(s.tpr) + "_r" + std::to_string(s.rn);
  return std::string("kiln_gemv_") + dtype_tag(s.dtype) + "_m" + std::to_string(s.m) + shape +
         "_u" + std::to_string(s.unroll) + "_a" + std::to_string(s.act) + (s.bias ? "_b" : "") +
         (s.residual ? "_res" : "") +
         (s.norm ? "_n" + std::to_string(s.norm) + (s.norm_weight ? "w" : "") +
                       (s.norm_bias ? "b" : "")
                 : "") +
         (s.early ? "_e" : "") + (s.fence ? "_f" : "") + (s.keep_x ? "_xr" : "") +
         (s.norm_smem ? "_ns" : "") + (s.fold_norm ? "_fn" : "") + (s.pipe ? "_pp" : "") +
         (s.stream ? (s.stream_tail ? "_stt" : "_st") : "") + (s.early_epilogue ? "" : "_le");
}

std::string gemv_source(const GemvSpec& s) {
  KILN_INTERNAL_ASSERT(gemv_dtype(s.dtype) && s.m >= 1 && s.m <= kGemvMaxRows && s.tpr >= 8 &&
                           s.tpr <= kBlock && (s.tpr & (s.tpr - 1)) == 0 && s.rn >= 1 &&
                           s.unroll >= 1 && s.act >= 0 && s.act <= 2 && s.norm >= 0 && s.norm <= 2,
                       "gemv_source: bad spec");
  KILN_INTERNAL_ASSERT(!s.mma || s.dtype == kFloat16 || s.dtype == kBFloat16,
                       "gemv_source: the tensor-core form takes 16-bit dtypes");
  KILN_INTERNAL_ASSERT(!s.keep_x || (!s.mma && s.norm && s.m <= 2),
                       "gemv_source: x is kept in registers by the FMA form's norm prologue");
  KILN_INTERNAL_ASSERT(!s.norm_smem || (s.norm && !(s.keep_x && s.tpr <= 32) && !s.fold_norm),
                       "gemv_source: the norm's vectors go to shared memory with the statistics");
  KILN_INTERNAL_ASSERT(!s.fold_norm || (s.norm && !s.mma && !s.keep_x),
                       "gemv_source: the norm is folded into the FMA form's sums");
  KILN_INTERNAL_ASSERT(!s.pipe || (!s.mma && !s.fold_norm),
                       "gemv_source: weights a step ahead are the FMA form's, unfolded");
  KILN_INTERNAL_ASSERT(!s.stream || (s.m == 1 && s.rn == 1 && !s.mma && !s.keep_x && !s.pipe &&
                                     !s.fold_norm && !s.norm_smem),
                       "gemv_source: the streamed form is the plain FMA form at one row");
  std::string src = op_prelude();
  src += "typedef " + std::string(mem_type(s.dtype)) + " T;\n";
  src += "#define KM " + std::to_string(s.m) + "\n#define KTPR " + std::to_string(s.tpr) +
         "\n#define KRN " + std::to_string(s.rn) + "\n#define KU " + std::to_string(s.unroll) +
         "\n#define KV " + std::to_string(gemv_vector(s.dtype)) + "\n";
  src +=
      R"(__device__ __forceinline__ uint4 kiln_zero4() { uint4 z; z.x = z.y = z.z = z.w = 0u; return z; }
// Read once: no L1 line for it (x, read by every group, keeps L1 to itself).
__device__ __forceinline__ uint4 kiln_ld_stream(const uint4* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
)";
  src += std::string("#define KEARLY ") + (s.early ? "1\n" : "0\n");
  src += std::string("#define KXRES ") + (s.keep_x ? "1\n" : "0\n");
  src += std::string("#define KEPI_EARLY ") + (s.early_epilogue ? "1\n" : "0\n");
  src += std::string("#define KNORM_SMEM ") + (s.norm_smem ? "1\n" : "0\n");
  src += std::string("#define KFOLD ") + (s.fold_norm ? "1\n" : "0\n");
  src += std::string("#define KPIPE ") + (s.pipe ? "1\n" : "0\n");
  src += std::string("#define KSTREAM ") + (s.stream ? "1\n" : "0\n");
  src += std::string("#define KTAIL ") + (s.stream_tail ? "1\n" : "0\n");
  // One buffer: the norm's vectors, or the streamed form's normalized x.
  if (s.norm_smem || (s.stream && s.norm)) src += "extern __shared__ uint4 kiln_s_norm[];\n";
  src += "#define KNORM " + std::to_string(s.norm) + "\n#define KNORM_W " +
         std::to_string(s.norm_weight ? 1 : 0) + "\n#define KNORM_B " +
         std::to_string(s.norm_bias ? 1 : 0) + "\n";
  src += R"(// Rows n0 .. n0 + KRN - 1 of w (those below n): this lane's vectors into L2.
__device__ __forceinline__ void kiln_prefetch_rows(const T* w, i64 n0, i64 n, i64 kv, i64 ldw, int lane) {
#pragma unroll
  for (int r = 0; r < KRN; ++r) {
    if (n0 + r >= n) break;
    const uint4* row = (const uint4*)(w + (n0 + r) * ldw);
    for (i64 j = lane; j < kv; j += KTPR) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + j));
  }
}
#if KPIPE
// The KU vectors j0 + u * KTPR of rows n0 .. n0 + KRN - 1 of w (Note [Weights
// a step ahead]); rows past n read row n - 1 (in bounds) and are never stored.
__device__ __forceinline__ void kiln_load_round(uint4 (&wv)[KU][KRN], const T* w, i64 n0, i64 j0, i64 n, i64 kv, i64 ldw) {
#pragma unroll
  for (int r = 0; r < KRN; ++r) {
    const uint4* row = (const uint4*)(w + (n0 + r < n ? n0 + r : n - 1) * ldw);
#pragma unroll
    for (int u = 0; u < KU; ++u) {
      const i64 j = j0 + (i64)u * KTPR;
      wv[u][r] = j < kv ? kiln_ld_stream(row + j) : kiln_zero4();
    }
  }
}
#endif
)";
  src += unpack_source(s.dtype);
  src += store_source(s);
  if (s.norm) src += normalize_source(s);
  if (s.mma) {
    src += "#define KB " + std::to_string(s.m > 8 ? 2 : 1) + "\n#define KFENCE " +
           std::to_string(s.fence ? 1 : 0) + "\n";
    src += mma_helpers_source(s.dtype);
  }
  // Kept x (Note [Normalized x kept in registers]): without a blocks-per-SM
  // hint ptxas held that form to 64 registers and spilled; three blocks of
  // 256 let it take the 70 it needs. The folded form (Note [Norm folded
  // into the sums]) took 79 without one (GPT-2's QKV product; two blocks
  // per SM) and 80, unspilled, with it. The streamed form takes 34 without
  // a hint and 32, unspilled, with eight blocks (2048x16384 on an H200:
  // 17.1 -> 16.6 us).
  src += std::string("extern \"C\" __global__ void __launch_bounds__(256") +
         (s.stream                  ? ", 8"
          : s.pipe                  ? ", 2"
          : s.keep_x || s.fold_norm ? ", 3"
                                    : "") +
         ") " + gemv_name(s) + kGemvHead;
  src += s.mma ? kGemvMmaSetup : kGemvSetup;
  src += kNormStats;
  if (!s.mma && !s.stream) src += kGemvKeepX;
  src += s.mma ? kGemvMmaBody : s.stream ? kGemvStreamBody : kGemvBody;
  return src;
}

NamedSources gemv_source_samples() {
  NamedSources out;
  for (DType t : {kFloat16, kBFloat16, kFloat32}) {
    for (int64_t m : {1, 3, 8, 16}) {
      for (int64_t k : {64, 768, 3072}) {
        const int act = static_cast<int>((m + k) % 3);
        GemvSpec s = gemv_spec(t, m, k, act, m != 3, m >= 8);
        s.early = m >= 3;           // both forms of the prefetch (Note [Early launch])
        s.early_epilogue = m != 3;  // both forms of the epilogue's loads
        out.emplace_back(gemv_name(s), gemv_source(s));
        // The norm prologues (Note [Norm prologues]): GPT-2's and Llama's;
        // an LM head's wide groups (Note [Wide groups for long products]).
        if (k == 768) {
          s = gemv_spec(t, m, k, act, true, false, m == 3 ? 2 : 1, true, m != 3);
          out.emplace_back(gemv_name(s), gemv_source(s));
          GemvSpec shared = s;  // Note [Norm vectors in shared memory]
          gemv_norm_smem(shared, k);
          out.emplace_back(gemv_name(shared), gemv_source(shared));
          if (m <= kGemvFoldRows) {  // Note [Norm folded into the sums]: a warp, 128 lanes
            GemvSpec fold = s;
            gemv_fold_norm(fold, k, 2304, 132);
            out.emplace_back(gemv_name(fold), gemv_source(fold));
            fold = gemv_spec(t, m, 2048, act, true, true, 1, true, true);
            gemv_fold_norm(fold, 2048, 256, 132);
            out.emplace_back(gemv_name(fold), gemv_source(fold));
          }
          if (m == 1) {
            // x kept in registers (Note [Normalized x kept in registers]):
            // statistics by shuffles in a group of 32 lanes, and from the
            // block's shared memory in a group of 128 (Llama's 2048, RMS).
            GemvSpec keep = s;
            gemv_keep_x(keep, k, 1 << 20, 132);
            out.emplace_back(gemv_name(keep), gemv_source(keep));
            keep = gemv_spec(t, m, 2048, act, false, false, 2, true, false);
            gemv_keep_x(keep, 2048, 1 << 20, 132);
            out.emplace_back(gemv_name(keep), gemv_source(keep));
            gemv_norm_smem(keep, 2048);  // Note [Norm vectors in shared memory]
            out.emplace_back(gemv_name(keep), gemv_source(keep));
            gemv_widen(s);
            out.emplace_back(gemv_name(s), gemv_source(s));
            // Note [Weights a step ahead]: Llama 1B's gate/up with its norm
            // (x kept), and a plain product with a residual.
            keep = gemv_spec(t, m, 2048, act, false, false, 2, true, false);
            gemv_widen(keep);
            gemv_deepen(keep, 16384, 132);
            gemv_keep_x(keep, 2048, 16384, 132);
            gemv_pipe(keep, 16384, 132);
            out.emplace_back(gemv_name(keep), gemv_source(keep));
            GemvSpec pipe = gemv_spec(t, m, 8192, act, false, true);
            gemv_deepen(pipe, 2048, 132);
            gemv_pipe(pipe, 1 << 20, 132);
            out.emplace_back(gemv_name(pipe), gemv_source(pipe));
            // Note [Streamed one-row products]: Llama 1B's down (four warps
            // per output, a residual), its gate/up with the RMSNorm, GPT-2's
            // head with the LayerNorm (three vectors per lane).
            GemvSpec st = gemv_spec(t, m, 8192, act, false, true);
            KILN_INTERNAL_ASSERT(gemv_stream(st, 8192, 2048), "gemv samples: not streamed");
            out.emplace_back(gemv_name(st), gemv_source(st));
            st = gemv_spec(t, m, 2048, act, false, false, 2, true, false);
            KILN_INTERNAL_ASSERT(gemv_stream(st, 2048, 16384), "gemv samples: not streamed");
            out.emplace_back(gemv_name(st), gemv_source(st));
            st = gemv_spec(t, m, 768, act, true, false, 1, true, true);
            KILN_INTERNAL_ASSERT(gemv_stream(st, 768, 50257), "gemv samples: not streamed");
            out.emplace_back(gemv_name(st), gemv_source(st));
          }
        }
        // The tensor-core form (Note [Tensor-core skinny kernel]), with and
        // without a prologue, one and two blocks of 8 tokens.
        if (t != kFloat32 && gemv_uses_mma(t, m, 90, k == 768 ? 1 : kGemvMmaRows)) {
          s = gemv_spec(t, m, k, act, m != 3, m >= 8, k == 768 ? 1 + (m > 8) : 0, k == 768,
                        k == 768 && m <= 8);
          s.early = k != 64;
          gemv_take_mma(s);
          gemv_norm_smem(s, k);
          out.emplace_back(gemv_name(s), gemv_source(s));
          if (m == 8 || m == 16) {  // KILN_GEMV_MMA_FENCE=0, KILN_GEMV_EARLY_EPILOGUE=0
            s.fence = false;
            s.early_epilogue = m != 16;
            out.emplace_back(gemv_name(s), gemv_source(s));
          }
        }
      }
    }
  }
  return out;
}

namespace {

bool aligned16(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// Note [Skinny matmul kernel]: the layouts the kernel reads.
bool gemv_takes(const kiln::cuda::SkinnyMatmul& p) {
  const Tensor &out = *p.out, &a = *p.a, &b = *p.b;
  if (out.dim() != 2 || a.dim() != 2 || b.dim() != 2) return false;
  const DType t = out.dtype();
  if (!gemv_dtype(t) || a.dtype() != t || b.dtype() != t) return false;
  const int64_t m = out.size(0), n = out.size(1), k = a.size(1);
  if (m < 1 || m > kGemvMaxRows || n < 1 || k < 1) return false;
  if (a.size(0) != m || b.size(0) != k || b.size(1) != n) return false;
  const int v = gemv_vector(t);
  if (k % v != 0 || p.act < 0 || p.act > 2) return false;
  if (a.stride(1) != 1 || (m > 1 && a.stride(0) % v != 0) || !aligned16(a)) return false;
  if (b.stride(0) != 1 || (n > 1 && b.stride(1) % v != 0) || !aligned16(b)) return false;
  if (n > 1 && out.stride(1) != 1) return false;
  if (p.bias) {
    const Tensor& bias = *p.bias;
    if (bias.dim() != 1 || bias.size(0) != n || bias.dtype() != t) return false;
    if (n > 1 && bias.stride(0) != 1) return false;
  }
  if (p.residual) {
    const Tensor& r = *p.residual;
    if (r.dim() != 2 || r.size(0) != m || r.size(1) != n || r.dtype() != t) return false;
    if (n > 1 && r.stride(1) != 1) return false;
  }
  if (p.norm < 0 || p.norm > 2 || (p.norm != 1 && p.norm_bias)) return false;
  for (const Tensor* nt : {p.norm_weight, p.norm_bias}) {
    if (!nt) continue;
    if (!p.norm || nt->dim() != 1 || nt->size(0) != k || nt->dtype() != t) return false;
    if (nt->stride(0) != 1 || !aligned16(*nt)) return false;
  }
  return true;
}

// One block per step of outputs, but no more blocks than fit on the GPU at
// once (Note [Skinny matmul kernel]): a large n (an LM head) then runs one
// wave whose blocks take their norm statistics once and walk the steps.
unsigned gemv_grid(cudaKernel_t kernel, int device, int64_t n, const GemvSpec& s, size_t smem) {
  const unsigned steps = grid_for(n, gemv_outputs_per_block(s));
  if (s.stream) return steps;  // a block per step (Note [Streamed one-row products])
  // Blocks per SM, per kernel and dynamic shared memory.
  // (Note [Thread caches at thread exit]: a flush at thread exit may find it gone.)
  using Resident = std::map<std::pair<const void*, size_t>, int>;
  Resident uncached;
  Resident* cached = ThreadCache<Resident>::get();
  Resident& resident = cached ? *cached : uncached;
  const void* f = reinterpret_cast<const void*>(kernel);
  auto it = resident.find({f, smem});
  if (it == resident.end()) {
    int per_sm = 0;
    kiln::cuda::DeviceGuard guard(device);
    KILN_CUDA_CHECK_DEVICE(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, kBlock, smem),
                           device);
    it = resident.emplace(std::make_pair(f, smem), std::max(1, per_sm)).first;
  }
  const int64_t fit =
      static_cast<int64_t>(it->second) * kiln::cuda::device_properties(device).multiProcessorCount;
  return static_cast<unsigned>(std::min<int64_t>(steps, fit));
}

// Settings for benchmarks, read once from the environment:
//   KILN_GEMV_MMA_ROWS=N   the tensor-core form from N rows (default kGemvMmaRows; 1: every
//                          row count);
//   KILN_GEMV_MMA_FENCE=0  without Note [Loads in flight before the first mma];
//   KILN_GEMV_MIN_VECTORS=V at least V vectors of k per thread in the FMA form, in place of
//                          Note [Deeper groups where the grid stays full] (fewer threads per
//                          group, more loads in flight each);
//   KILN_GEMV_EARLY_EPILOGUE=0  without Note [Epilogue operands early];
//   KILN_GEMV_NORM_SMEM=0  without Note [Norm vectors in shared memory];
//   KILN_GEMV_FOLD_NORM=0  without Note [Norm folded into the sums];
//   KILN_GEMV_PIPE=0       without Note [Weights a step ahead];
//   KILN_GEMV_WIDE_N=N     Note [Wide groups for long products] from N outputs (default
//                          kGemvWideN);
//   KILN_GEMV_STREAM=0     without Note [Streamed one-row products].
struct Overrides {
  int64_t mma_from = kGemvMmaRows;
  bool mma_fence = true;
  int min_vectors = 0;  // 0: the spec's
  bool early_epilogue = true;
  bool norm_smem = true;
  bool fold_norm = true;
  bool pipe = true;
  int64_t wide_n = kGemvWideN;
};

const Overrides& overrides() {
  static const Overrides o = [] {
    Overrides r;
    // An empty value is no setting (a script's VAR=$unset must not pick one).
    if (auto v = env_int("KILN_GEMV_MMA_ROWS", 1, INT32_MAX)) {
      r.mma_from = std::min<int64_t>(*v, kGemvMaxRows + 1);
    }
    r.mma_fence = env_flag("KILN_GEMV_MMA_FENCE", r.mma_fence);
    r.early_epilogue = env_flag("KILN_GEMV_EARLY_EPILOGUE", r.early_epilogue);
    r.norm_smem = env_flag("KILN_GEMV_NORM_SMEM", r.norm_smem);
    r.fold_norm = env_flag("KILN_GEMV_FOLD_NORM", r.fold_norm);
    r.pipe = env_flag("KILN_GEMV_PIPE", r.pipe);
    if (auto v = env_int("KILN_GEMV_WIDE_N", 1, INT64_MAX)) r.wide_n = *v;
    if (auto v = env_int("KILN_GEMV_MIN_VECTORS", 1, INT32_MAX)) {
      r.min_vectors = static_cast<int>(std::min<int64_t>(*v, 64));
    }
    return r;
  }();
  return o;
}

void gemv_run(const kiln::cuda::SkinnyMatmul& p) {
  KILN_INTERNAL_ASSERT(gemv_takes(p), "skinny matmul kernel called with operands it does not take");
  const Tensor &out = *p.out, &a = *p.a, &b = *p.b;
  const int64_t m = out.size(0), n = out.size(1), k = a.size(1);
  GemvSpec s = gemv_spec(out.dtype(), m, k, p.act, p.bias != nullptr, p.residual != nullptr, p.norm,
                         p.norm_weight != nullptr, p.norm_bias != nullptr);
  s.early = launches_early(out.device().index());
  s.early_epilogue = overrides().early_epilogue;
  const cudaDeviceProp& prop = kiln::cuda::device_properties(out.device().index());
  const Overrides& o = overrides();
  if (gemv_uses_mma(s.dtype, m, prop.major * 10 + prop.minor, o.mma_from)) {
    gemv_take_mma(s);
    s.fence = o.mma_fence;
  } else if (!(stream_allowed() && gemv_stream(s, k, n))) {
    if (n >= o.wide_n) gemv_widen(s);
    if (o.min_vectors) {
      const int64_t kv = k / gemv_vector(out.dtype());
      s.tpr = static_cast<int>(
          std::clamp<int64_t>(pow2_floor(std::max<int64_t>(1, kv / o.min_vectors)), 8, kBlock));
    } else {
      gemv_deepen(s, n, prop.multiProcessorCount);
    }
    gemv_keep_x(s, k, n, prop.multiProcessorCount);
    if (o.fold_norm) gemv_fold_norm(s, k, n, prop.multiProcessorCount);
    if (o.pipe) gemv_pipe(s, n, prop.multiProcessorCount);
  }
  gemv_norm_smem(s, k);
  s.norm_smem = s.norm_smem && o.norm_smem;
  const size_t smem = gemv_shared_bytes(s, k);
  cudaKernel_t kernel = load_kernel(
      gemv_name(s), [&] { return gemv_source(s); }, out.device().index());
  KernelArgs args;
  args.ptr(out).ptr(a).ptr(b);
  args.ptr(p.bias ? p.bias->data_ptr() : nullptr);
  args.ptr(p.residual ? p.residual->data_ptr() : nullptr);
  args.ptr(p.norm_weight ? p.norm_weight->data_ptr() : nullptr);
  args.ptr(p.norm_bias ? p.norm_bias->data_ptr() : nullptr);
  args.i64(n).i64(k / gemv_vector(out.dtype()));
  args.i64(out.stride(0)).i64(a.stride(0)).i64(b.stride(1));
  args.i64(p.residual ? p.residual->stride(0) : 0);
  args.f64(p.norm_eps);
  launch(kernel, out.device(), gemv_grid(kernel, out.device().index(), n, s, smem), kBlock, smem,
         args);
  out.impl()->bump_version();
}

// Note [Tensor-core skinny default] and Note [Skinny products better apart],
// on the product's device.
int gemv_prefers(const kiln::cuda::SkinnyMatmul& p) {
  const Tensor &out = *p.out, &a = *p.a;
  const cudaDeviceProp& prop = kiln::cuda::device_properties(out.device().index());
  return gemv_advice(out.dtype(), out.size(0), a.size(1), out.size(1), p.norm != 0,
                     prop.major * 10 + prop.minor, prop.multiProcessorCount);
}

[[maybe_unused]] const bool g_registered = [] {
  kiln::cuda::set_skinny_matmul_kernel({&gemv_takes, &gemv_run, &gemv_prefers});
  return true;
}();

}  // namespace
}  // namespace kiln::jit::cuda
