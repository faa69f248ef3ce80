// Whether a generated tensor-core product can take GPT-2's prefill products
// at 128 rows from cuBLASLt, with the LayerNorm before it inside (issue 14's
// 1x128 goal; perf/RESULTS.md, twenty-fifth session). Not part of the build:
// a probe, compiled by hand with
//   nvcc -O3 -std=c++17 -arch=sm_90 -o cluster_gemm perf/probes/cluster_gemm.cu -lcublasLt
// and run as `cluster_gemm ROWS`. LAYERS=1 times a GPT-2 layer's four
// products instead (layer_chain). ONLY=<form name> runs one form, ONCE=1
// skips the timing (for a profiler), SKIPS=1 times the first form with parts
// of it left out (Args::skip).
// out[m, n] = act(LN?(x)[m, k] . w[n, k] + bias[n]) (+ residual[m, n]),
// float16, float32 sums.
//
// The twentieth session's tile_gemm.cu lost 2-3x to cuBLASLt with one block
// of a whole k per SM on 72 SMs. This form splits k over a thread-block
// cluster instead: a cluster of KS blocks shares one BM x BN output tile,
// each block holds its k slice of x and w in shared memory whole (every load
// in flight at once), the weight slice is loaded before the kernel waits for
// the one before it (weights are not written by it), and the blocks add their
// float32 partials through distributed shared memory, each finishing BM / KS
// rows of the tile: no workspace, no counter, a fixed order of sums. With a
// LayerNorm prologue the blocks also trade their slices' row moments (mean
// and M2, merged exactly), then normalize their slice of x in place and
// round it to float16, where the eager norm stores its output.
#include <cooperative_groups.h>
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "linear_probe.cuh"
#include "lt_probe.h"
#include "probe.h"

namespace cg = cooperative_groups;

constexpr int kChain = 12;
constexpr int kThreads = 256;

struct Args {
  const __half* x;
  const __half* w;
  const __half* bias;
  const __half* residual;  // null: none
  const __half* ln_w;      // used when the kernel has the prologue
  const __half* ln_b;
  __half* out;
  int m, n, k, act;
  int skip;  // measuring: 1 no A loads, 2 no mma, 4 no partial trade, 8 exit after the wait
};

// Row pitch in halves of a k slice of KSL: 16 bytes past a multiple of 128,
// so that ldmatrix's eight rows fall in distinct banks.
constexpr int pitch(int ksl) {
  return ksl + 8 + (64 - ksl % 64) % 64;
}

// The norm's pieces, shared by the forms. A row's slice of SL halves in
// shared memory is read by TPR adjacent threads, each over every TPR-th
// 16-byte vector from `part`.
//
// The slice's moments (mean, M2), two passes over shared memory, merged
// across the TPR threads (equal counts: mean = average, M2 = sum + n_each *
// sum (mean_i - mean)^2).
template <int SL, int TPR>
__device__ float2 slice_moments(const __half* row, int part) {
  constexpr int V = SL / 8;
  constexpr float kCount = SL / TPR;  // elements per thread
  static_assert(V % TPR == 0, "vectors per thread");
  float sum = 0.f;
#pragma unroll
  for (int v = part; v < V; v += TPR) {
    const uint4 u = *reinterpret_cast<const uint4*>(row + v * 8);
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 f = __half22float2(h[e]);
      sum += f.x + f.y;
    }
  }
  float mean = sum / kCount, m2 = 0.f;
#pragma unroll
  for (int v = part; v < V; v += TPR) {
    const uint4 u = *reinterpret_cast<const uint4*>(row + v * 8);
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 f = __half22float2(h[e]);
      m2 += (f.x - mean) * (f.x - mean) + (f.y - mean) * (f.y - mean);
    }
  }
  float n_each = kCount;
#pragma unroll
  for (int o = 1; o < TPR; o <<= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, mean, o);
    const float o2 = __shfl_xor_sync(0xffffffffu, m2, o);
    const float d = om - mean;
    m2 += o2 + d * d * n_each * 0.5f;
    mean = 0.5f * (mean + om);
    n_each *= 2.f;
  }
  return make_float2(mean, m2);
}

// (mean, 1 / sqrt(var + eps)) of a row from S slices' moments, SL each.
template <int S, int SL>
__device__ float2 merge_moments(const float2 (&mo)[S]) {
  float mean = 0.f;
#pragma unroll
  for (int s = 0; s < S; ++s) mean += mo[s].x;
  mean *= 1.f / S;
  float m2 = 0.f;
#pragma unroll
  for (int s = 0; s < S; ++s) m2 += mo[s].y + (mo[s].x - mean) * (mo[s].x - mean) * SL;
  return make_float2(mean, rsqrtf(m2 / (S * SL) + 1e-5f));
}

// Normalizes the thread's vectors of a row's slice in place and rounds them
// to float16; gamma and beta are the slice's (float, shared memory).
template <int SL, int TPR>
__device__ void normalize_slice(__half* row, int part, float2 stats, const float* gamma,
                                const float* beta) {
  const float mean = stats.x, rstd = stats.y;
#pragma unroll
  for (int v = part; v < SL / 8; v += TPR) {
    uint4 u = *reinterpret_cast<uint4*>(row + v * 8);
    __half2* h = reinterpret_cast<__half2*>(&u);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = v * 8 + 2 * e;
      const float2 f = __half22float2(h[e]);
      h[e] = __floats2half2_rn((f.x - mean) * rstd * gamma[c] + beta[c],
                               (f.y - mean) * rstd * gamma[c + 1] + beta[c + 1]);
    }
    *reinterpret_cast<uint4*>(row + v * 8) = u;
  }
}

template <int BM, int BN, int KS, int KSL, int WM, int WN, bool LN, bool EARLY_W>
struct Cfg {
  static constexpr int P = pitch(KSL);
  static constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
  static constexpr int PART_PITCH = BN + 4;  // floats
  static constexpr int kOperandBytes = (BM + BN) * P * 2;
  static constexpr int kPartialBytes = BM * PART_PITCH * 4;
  static constexpr int kMainBytes = kOperandBytes > kPartialBytes ? kOperandBytes : kPartialBytes;
  // gamma, beta (float) for the slice, the bias (float) for the tile, row moments.
  static constexpr int kSmemBytes = kMainBytes + (LN ? 2 * KSL * 4 + BM * 8 : 0) + BN * 4;
  static_assert(WM * WN * 32 == kThreads, "8 warps");
  static_assert(MI >= 1 && NI >= 2 && NI % 2 == 0, "warp tile");
  static_assert(KSL % 16 == 0 && BM % KS == 0, "slices");
};

template <int BM, int BN, int KS, int KSL, int WM, int WN, bool LN, bool EARLY_W>
__global__ void __launch_bounds__(kThreads) cluster_gemm(Args p) {
  using C = Cfg<BM, BN, KS, KSL, WM, WN, LN, EARLY_W>;
  constexpr int P = C::P;
  extern __shared__ __align__(16) unsigned char smem[];
  __half* sa = reinterpret_cast<__half*>(smem);
  __half* sb = sa + BM * P;
  float* s_bias = reinterpret_cast<float*>(smem + C::kMainBytes);
  float* s_gamma = s_bias + BN;
  float* s_beta = s_gamma + KSL;
  float2* s_mom = reinterpret_cast<float2*>(s_beta + KSL);  // (mean, M2) per row
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM, rank = blockIdx.z;
  const int k0 = rank * KSL;
  constexpr int VPR = KSL / 8;  // 16-byte vectors per row of the slice

  // Before the wait: the weight slice (into shared memory or into L2), the
  // bias and the norm's vectors: nothing the kernel before writes.
  if (EARLY_W) {
    for (int i = tid; i < BN * VPR; i += kThreads) {
      const int r = i / VPR, c = (i % VPR) * 8;
      cp16(smem_addr(sb + r * P + c), p.w + (size_t)(n0 + r) * p.k + k0 + c, true);
    }
    commit();
  } else {
    for (int i = tid; i < BN * (KSL / 64); i += kThreads) {
      const int r = i / (KSL / 64), c = (i % (KSL / 64)) * 64;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(p.w + (size_t)(n0 + r) * p.k + k0 + c));
    }
  }
  for (int i = tid; i < BN; i += kThreads) s_bias[i] = __half2float(p.bias[n0 + i]);
  if (LN) {
    for (int i = tid; i < KSL; i += kThreads) {
      s_gamma[i] = __half2float(p.ln_w[k0 + i]);
      s_beta[i] = __half2float(p.ln_b[k0 + i]);
    }
  }
  wait_prior();
  let_next();
  if (p.skip & 8) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    return;
  }
  for (int i = tid; i < BM * VPR && !(p.skip & 1); i += kThreads) {
    const int r = i / VPR, c = (i % VPR) * 8;
    const bool ok = m0 + r < p.m;
    cp16(smem_addr(sa + r * P + c), ok ? p.x + (size_t)(m0 + r) * p.k + k0 + c : p.x, ok);
  }
  if (!EARLY_W) {
    for (int i = tid; i < BN * VPR; i += kThreads) {
      const int r = i / VPR, c = (i % VPR) * 8;
      cp16(smem_addr(sb + r * P + c), p.w + (size_t)(n0 + r) * p.k + k0 + c, true);
    }
  }
  commit();
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();

  cg::cluster_group cluster = cg::this_cluster();
  if (LN) {
    constexpr int TPR = kThreads / BM > 0 ? kThreads / BM : 1;  // threads per row
    constexpr int RPP = BM * TPR / kThreads;                    // rows per thread
#pragma unroll
    for (int rr = 0; rr < RPP; ++rr) {
      const int r = tid / TPR + rr * (kThreads / TPR), part = tid % TPR;
      const float2 mo = slice_moments<KSL, TPR>(sa + r * P, part);
      if (part == 0) s_mom[r] = mo;
    }
    if (KS > 1) {
      cluster.sync();
    } else {
      __syncthreads();
    }
#pragma unroll
    for (int rr = 0; rr < RPP; ++rr) {
      const int r = tid / TPR + rr * (kThreads / TPR), part = tid % TPR;
      float2 mo[KS];
#pragma unroll
      for (int s = 0; s < KS; ++s) mo[s] = cluster.map_shared_rank(s_mom, s)[r];
      normalize_slice<KSL, TPR>(sa + r * P, part, merge_moments<KS, KSL>(mo), s_gamma, s_beta);
    }
    __syncthreads();
  }

  constexpr int MI = C::MI, NI = C::NI;
  const int wm = warp / WN, wn = warp % WN;
  float acc[MI][NI][4] = {};
  const unsigned abase = smem_addr(sa) + ((wm * C::WTM + (lane & 15)) * P + (lane >> 4) * 8) * 2;
  const unsigned bbase =
      smem_addr(sb) +
      ((wn * C::WTN + (lane >> 4) * 8 + (lane & 7)) * P + ((lane >> 3) & 1) * 8) * 2;
  warp_mma<MI, NI, KSL / 16, P>(acc, abase, bbase, p.skip & 2);

  const int g = lane >> 2, t = lane & 3;
  auto finish = [&](int r, int c, float v0, float v1, __half2 res) {
    v0 += s_bias[c];
    v1 += s_bias[c + 1];
    if (p.act) {
      v0 = gelu(v0);
      v1 = gelu(v1);
    }
    if (p.residual) {
      v0 += __low2float(res);
      v1 += __high2float(res);
    }
    *reinterpret_cast<__half2*>(p.out + (size_t)(m0 + r) * p.n + n0 + c) =
        __floats2half2_rn(v0, v1);
  };
  if (KS == 1) {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wm * C::WTM + mi * 16 + g + 8 * h, c = wn * C::WTN + ni * 8 + 2 * t;
          if (m0 + r >= p.m) continue;
          __half2 res = __float2half2_rn(0.f);
          if (p.residual)
            res = *reinterpret_cast<const __half2*>(p.residual + (size_t)(m0 + r) * p.n + n0 + c);
          finish(r, c, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1], res);
        }
    return;
  }
  // The block's rows of the tile: BM / KS rows, each thread two adjacent
  // columns of some of them. The residual is loaded before the partials trade.
  constexpr int RB = BM / KS, PAIRS = RB * BN / 2, PER = (PAIRS + kThreads - 1) / kThreads;
  __half2 res[PER];
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int e = tid + j * kThreads, r = rank * RB + e / (BN / 2), c = (e % (BN / 2)) * 2;
    res[j] = __float2half2_rn(0.f);
    if (e < PAIRS && p.residual && m0 + r < p.m)
      res[j] = *reinterpret_cast<const __half2*>(p.residual + (size_t)(m0 + r) * p.n + n0 + c);
  }
  __syncthreads();  // every warp is done with the operands: their space takes the partials
  float* part = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wm * C::WTM + mi * 16 + g + 8 * h, c = wn * C::WTN + ni * 8 + 2 * t;
        *reinterpret_cast<float2*>(part + r * C::PART_PITCH + c) =
            make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
      }
  if (!(p.skip & 4)) cluster.sync();
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int e = tid + j * kThreads;
    if (e >= PAIRS) break;
    if (p.skip & 4) {
      const int r = rank * RB + e / (BN / 2), c = (e % (BN / 2)) * 2;
      if (m0 + r < p.m)
        finish(r, c, part[r * C::PART_PITCH + c], part[r * C::PART_PITCH + c + 1], res[j]);
      continue;
    }
    const int r = rank * RB + e / (BN / 2), c = (e % (BN / 2)) * 2;
    float2 q[KS];
#pragma unroll
    for (int s = 0; s < KS; ++s)
      q[s] = *reinterpret_cast<const float2*>(cluster.map_shared_rank(part, s) + r * C::PART_PITCH +
                                              c);
    float v0 = 0.f, v1 = 0.f;
#pragma unroll
    for (int s = 0; s < KS; ++s) {
      v0 += q[s].x;
      v1 += q[s].y;
    }
    if (m0 + r < p.m) finish(r, c, v0, v1, res[j]);
  }
  if (!(p.skip & 4)) cluster.sync();  // no block leaves while another reads its partials
}

// Second form: no cluster. A block owns a BM x BN tile over the whole of k;
// its 8 warps split k (warp w takes k/8 of it), each loading its own slice
// of x and w with cp.async (the w slice before the wait) and waiting only
// for its own copies, so no block barrier stands between the loads and the
// first mma. The warps' float32 partials are added through shared memory.
// With the norm, each lane takes the moments of one or two rows over its
// warp's slice; the block merges the eight slices' moments (one barrier)
// and each warp normalizes its own slice in place.
template <int BM, int BN, int K, bool LN>
struct CfgB {
  static constexpr int KW = K / 8;  // k per warp
  static constexpr int P = pitch(K);
  static constexpr int MI = BM / 16, NI = BN / 8;
  static constexpr int kOperandBytes = (BM + BN) * P * 2;
  static constexpr int kPartialBytes = 8 * BM * BN * 4;
  static constexpr int kMainBytes = kOperandBytes > kPartialBytes ? kOperandBytes : kPartialBytes;
  static constexpr int kSmemBytes = kMainBytes + BN * 4 + (LN ? 2 * K * 4 + 8 * BM * 8 : 0);
  static_assert(KW % 16 == 0 && NI % 2 == 0 && BM % 16 == 0 && BM <= 64, "tile");
};

template <int BM, int BN, int K, bool LN>
__global__ void __launch_bounds__(kThreads) warp_split_gemm(Args p) {
  using C = CfgB<BM, BN, K, LN>;
  constexpr int P = C::P, KW = C::KW, MI = C::MI, NI = C::NI;
  extern __shared__ __align__(16) unsigned char smem[];
  __half* sa = reinterpret_cast<__half*>(smem);
  __half* sb = sa + BM * P;
  float* s_bias = reinterpret_cast<float*>(smem + C::kMainBytes);
  float* s_gamma = s_bias + BN;
  float* s_beta = s_gamma + K;
  float2* s_mom = reinterpret_cast<float2*>(s_beta + K);  // [warp][row] (mean, M2)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM, kw0 = warp * KW;
  constexpr int VW = KW / 8;  // 16-byte vectors per row of the warp's slice
  for (int i = lane; i < BN * VW; i += 32) {
    const int r = i / VW, c = kw0 + (i % VW) * 8;
    cp16(smem_addr(sb + r * P + c), p.w + (size_t)(n0 + r) * K + c, true);
  }
  commit();
  for (int i = tid; i < BN; i += kThreads) s_bias[i] = __half2float(p.bias[n0 + i]);
  if (LN) {
    for (int i = tid; i < K; i += kThreads) {
      s_gamma[i] = __half2float(p.ln_w[i]);
      s_beta[i] = __half2float(p.ln_b[i]);
    }
  }
  wait_prior();
  let_next();
  for (int i = lane; i < BM * VW; i += 32) {
    const int r = i / VW, c = kw0 + (i % VW) * 8;
    const bool ok = m0 + r < p.m;
    cp16(smem_addr(sa + r * P + c), ok ? p.x + (size_t)(m0 + r) * K + c : p.x, ok);
  }
  commit();
  // The epilogue's residual: each thread's 8 outputs are one row, 8 columns.
  constexpr int OPT = BM * BN / kThreads;  // outputs per thread
  static_assert(OPT == 8 || OPT == 4 || OPT == 16, "outputs per thread");
  const int orow = tid / (BN / OPT), ocol = (tid % (BN / OPT)) * OPT;
  uint4 res[OPT / 8 > 0 ? OPT / 8 : 1] = {};
  uint2 res4 = {};
  if (p.residual && m0 + orow < p.m) {
    const __half* rp = p.residual + (size_t)(m0 + orow) * p.n + n0 + ocol;
    if constexpr (OPT >= 8) {
#pragma unroll
      for (int j = 0; j < OPT / 8; ++j) res[j] = *reinterpret_cast<const uint4*>(rp + 8 * j);
    } else {
      res4 = *reinterpret_cast<const uint2*>(rp);
    }
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncwarp();
  if (LN) {
    __syncthreads();  // gamma and beta in shared memory
#pragma unroll
    for (int rr = 0; rr < BM / 32; ++rr) {
      const int r = lane + 32 * rr;
      s_mom[warp * BM + r] = slice_moments<KW, 1>(sa + r * P + kw0, 0);
    }
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < BM / 32; ++rr) {
      const int r = lane + 32 * rr;
      float2 mo[8];
#pragma unroll
      for (int s = 0; s < 8; ++s) mo[s] = s_mom[s * BM + r];
      normalize_slice<KW, 1>(sa + r * P + kw0, 0, merge_moments<8, KW>(mo), s_gamma + kw0,
                             s_beta + kw0);
    }
    __syncwarp();
  }
  float acc[MI][NI][4] = {};
  const unsigned abase = smem_addr(sa) + (((lane & 15)) * P + kw0 + (lane >> 4) * 8) * 2;
  const unsigned bbase =
      smem_addr(sb) + (((lane >> 4) * 8 + (lane & 7)) * P + kw0 + ((lane >> 3) & 1) * 8) * 2;
  warp_mma<MI, NI, KW / 16, P>(acc, abase, bbase);
  // Partials: [warp][row][col], float32; the operands' space is reused once
  // every warp is done with it.
  float* part = reinterpret_cast<float*>(smem);
  if (C::kOperandBytes + C::kPartialBytes > C::kMainBytes) __syncthreads();
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = mi * 16 + g + 8 * h, c = ni * 8 + 2 * t;
        *reinterpret_cast<float2*>(part + (warp * BM + r) * BN + c) =
            make_float2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
      }
  __syncthreads();
  float v[OPT];
#pragma unroll
  for (int j = 0; j < OPT; ++j) v[j] = s_bias[ocol + j];
#pragma unroll
  for (int s = 0; s < 8; ++s) {
#pragma unroll
    for (int j = 0; j < OPT; j += 4) {
      const float4 q = *reinterpret_cast<const float4*>(part + (s * BM + orow) * BN + ocol + j);
      v[j] += q.x;
      v[j + 1] += q.y;
      v[j + 2] += q.z;
      v[j + 3] += q.w;
    }
  }
  if (m0 + orow >= p.m) return;
  __half2 o[OPT / 2];
  const __half2* rh =
      OPT >= 8 ? reinterpret_cast<const __half2*>(res) : reinterpret_cast<const __half2*>(&res4);
#pragma unroll
  for (int j = 0; j < OPT; j += 2) {
    float a = v[j], b = v[j + 1];
    if (p.act) {
      a = gelu(a);
      b = gelu(b);
    }
    if (p.residual) {
      a += __low2float(rh[j / 2]);
      b += __high2float(rh[j / 2]);
    }
    o[j / 2] = __floats2half2_rn(a, b);
  }
  __half* op = p.out + (size_t)(m0 + orow) * p.n + n0 + ocol;
  if constexpr (OPT >= 8) {
#pragma unroll
    for (int j = 0; j < OPT / 8; ++j)
      reinterpret_cast<uint4*>(op)[j] = reinterpret_cast<const uint4*>(o)[j];
  } else {
    *reinterpret_cast<uint2*>(op) = *reinterpret_cast<const uint2*>(o);
  }
}

// Third form: the first form's cluster, without cluster barriers on the
// critical path. cluster.sync() compiles to MEMBAR.ALL.GPU before the
// barrier (so does fence.acq_rel.cluster), and the first form's two trades
// cost about 1.8 us each in a chain. Here the blocks push instead: with KS
// warp rows per block (warp row r holds rows r * BM / KS onward), block s's
// warp row r sends its partial to block r with st.async, which completes a
// transaction count on an mbarrier in block r; block r's own warp row r
// waits on that mbarrier, adds the KS - 1 partials it received to its own
// (in rank order) and finishes the rows. With the norm, every block sends
// its slice's row moments to the others the same way. The mbarriers are set
// up before the kernel's wait, and the one cluster barrier that makes them
// visible to the other blocks is split: arrived at before the wait, waited
// for just before the first send.
__device__ __forceinline__ unsigned mapa(unsigned addr, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ void st_async4(unsigned raddr, float4 v, unsigned rbar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, "
      "[%5];" ::"r"(raddr),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(rbar)
      : "memory");
}
__device__ __forceinline__ void st_async2(unsigned raddr, float2 v, unsigned rbar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(
          raddr),
      "f"(v.x), "f"(v.y), "r"(rbar)
      : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar) {
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, "
        "p; }"
        : "=r"(done)
        : "r"(bar)
        : "memory");
  }
}

template <int BM, int BN, int KS, int KSL, bool LN>
struct CfgC {
  static constexpr int kBM = BM, kBN = BN, kKS = KS, kKSL = KSL;
  static constexpr int WM = KS, WN = 8 / KS;
  static constexpr int P = pitch(KSL);
  static constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
  static constexpr int kOperandBytes = (BM + BN) * P * 2;
  static constexpr int kFragBytes = MI * NI * 32 * 16;  // one warp's partial
  static constexpr int kRecvBytes = (KS - 1) * WN * kFragBytes;
  static constexpr int kMomBytes = LN ? KS * BM * 8 : 0;  // [rank][row] (mean, M2)
  static constexpr int kSmemBytes =
      kOperandBytes + kRecvBytes + kMomBytes + BN * 4 + (LN ? 2 * KSL * 4 : 0) + 16;
  static_assert(KS >= 2 && 8 % KS == 0 && MI >= 1 && NI >= 2 && NI % 2 == 0, "tile");
};

// What the two push forms (push_gemm, staged_gemm) share: the mbarriers,
// the finishers' residual, the trade of row moments, the pushes of the
// partials, and the finishers' sums and stores.
__device__ __forceinline__ void init_bar(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar));
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes));
}

template <class C>
struct Push {
  static constexpr int BM = C::kBM, KS = C::kKS, KSL = C::kKSL, P = C::P, MI = C::MI, NI = C::NI,
                       WN = C::WN;
  using Frag = float[MI][NI][4];
  using Res = __half2[MI][NI][2];

  // A finisher's residual (zeros without one), loaded before anything waits.
  static __device__ void load_residual(const Args& p, int m0, int n0, int wm, int wn, int lane,
                                       Res& res) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wm * C::WTM + mi * 16 + g + 8 * h, c = wn * C::WTN + ni * 8 + 2 * t;
          res[mi][ni][h] = __float2half2_rn(0.f);
          if (p.residual && m0 + r < p.m)
            res[mi][ni][h] =
                *reinterpret_cast<const __half2*>(p.residual + (size_t)(m0 + r) * p.n + n0 + c);
        }
  }

  // This block's slice moments of its rows, kept and pushed to the others.
  static __device__ void trade_moments(const __half* sa, float2* mom, unsigned bar_mom, int rank) {
    constexpr int TPR = kThreads / BM > 0 ? kThreads / BM : 1;
    constexpr int RPP = BM * TPR / kThreads;
    const int tid = threadIdx.x;
#pragma unroll
    for (int rr = 0; rr < RPP; ++rr) {
      const int r = tid / TPR + rr * (kThreads / TPR), part = tid % TPR;
      const float2 mo = slice_moments<KSL, TPR>(sa + r * P, part);
      if (part == 0) {
        mom[rank * BM + r] = mo;
        const unsigned local = smem_addr(&mom[rank * BM + r]);
#pragma unroll
        for (int s = 0; s < KS; ++s)
          if (s != rank) st_async2(mapa(local, s), mo, mapa(bar_mom, s));
      }
    }
  }

  // A sender warp's partial to warp row wm's block: its slot among that
  // block's senders, then this warp's place.
  static __device__ void send(const Frag& acc, const float4* recv, unsigned bar_part, int rank,
                              int wm, int wn, int lane) {
    const int slot = rank < wm ? rank : rank - 1;
    const unsigned local = smem_addr(recv) + ((slot * WN + wn) * (MI * NI) * 32 + lane) * 16;
    const unsigned rbase = mapa(local, wm), rbar = mapa(bar_part, wm);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
        st_async4(rbase + (mi * NI + ni) * 32 * 16,
                  make_float4(acc[mi][ni][0], acc[mi][ni][1], acc[mi][ni][2], acc[mi][ni][3]),
                  rbar);
  }

  // A finisher's sums over the KS blocks' partials, in rank order.
  static __device__ void gather(const Frag& acc, const float4* recv, int rank, int wn, int lane,
                                Frag& sum) {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) sum[mi][ni][e] = 0.f;
#pragma unroll
    for (int s = 0; s < KS; ++s) {
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          float4 q;
          if (s == rank) {
            q = make_float4(acc[mi][ni][0], acc[mi][ni][1], acc[mi][ni][2], acc[mi][ni][3]);
          } else {
            const int slot = s < rank ? s : s - 1;
            q = recv[((slot * WN + wn) * (MI * NI) + mi * NI + ni) * 32 + lane];
          }
          sum[mi][ni][0] += q.x;
          sum[mi][ni][1] += q.y;
          sum[mi][ni][2] += q.z;
          sum[mi][ni][3] += q.w;
        }
    }
  }

  // The finisher's stores: `pre(mi, h, c, v)` first (the folded norm, or
  // nothing), then bias, activation and residual.
  template <class Pre>
  static __device__ void store(const Args& p, const Frag& sum, const Res& res, const float* s_bias,
                               int m0, int n0, int wm, int wn, int lane, Pre&& pre) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wm * C::WTM + mi * 16 + g + 8 * h, c = wn * C::WTN + ni * 8 + 2 * t;
          if (m0 + r >= p.m) continue;
          float2 v = make_float2(sum[mi][ni][2 * h], sum[mi][ni][2 * h + 1]);
          pre(mi, h, c, v);
          float v0 = v.x + s_bias[c], v1 = v.y + s_bias[c + 1];
          if (p.act) {
            v0 = gelu(v0);
            v1 = gelu(v1);
          }
          if (p.residual) {
            v0 += __low2float(res[mi][ni][h]);
            v1 += __high2float(res[mi][ni][h]);
          }
          *reinterpret_cast<__half2*>(p.out + (size_t)(m0 + r) * p.n + n0 + c) =
              __floats2half2_rn(v0, v1);
        }
  }
};

// Before the wait: the block's weight slice (one cp.async group), its
// columns' bias and, with the norm, the slice's gamma and beta (float).
template <int BN, int KSL, int P, bool LN>
__device__ void load_slice(const Args& p, __half* sb, float* s_bias, float* s_gamma, float* s_beta,
                           int n0, int k0) {
  constexpr int VPR = KSL / 8;
  const int tid = threadIdx.x;
  for (int i = tid; i < BN * VPR; i += kThreads) {
    const int r = i / VPR, c = (i % VPR) * 8;
    cp16(smem_addr(sb + r * P + c), p.w + (size_t)(n0 + r) * p.k + k0 + c, true);
  }
  commit();
  for (int i = tid; i < BN; i += kThreads) s_bias[i] = __half2float(p.bias[n0 + i]);
  if (LN) {
    for (int i = tid; i < KSL; i += kThreads) {
      s_gamma[i] = __half2float(p.ln_w[k0 + i]);
      s_beta[i] = __half2float(p.ln_b[k0 + i]);
    }
  }
}

template <int BM, int BN, int KS, int KSL, bool LN>
__global__ void __launch_bounds__(kThreads) push_gemm(Args p) {
  using C = CfgC<BM, BN, KS, KSL, LN>;
  constexpr int P = C::P, MI = C::MI, NI = C::NI, WN = C::WN;
  extern __shared__ __align__(16) unsigned char smem[];
  __half* sa = reinterpret_cast<__half*>(smem);
  __half* sb = sa + BM * P;
  float4* recv = reinterpret_cast<float4*>(smem + C::kOperandBytes);
  float2* mom = reinterpret_cast<float2*>(smem + C::kOperandBytes + C::kRecvBytes);
  float* s_bias = reinterpret_cast<float*>(smem + C::kOperandBytes + C::kRecvBytes + C::kMomBytes);
  float* s_gamma = s_bias + BN;  // the norm's vectors, with LN only
  float* s_beta = s_gamma + KSL;
  unsigned long long* bars =
      reinterpret_cast<unsigned long long*>(s_bias + BN + (LN ? 2 * KSL : 0));
  const unsigned bar_part = smem_addr(&bars[0]), bar_mom = smem_addr(&bars[1]);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM, rank = blockIdx.z;
  const int k0 = rank * KSL;
  constexpr int VPR = KSL / 8;

  load_slice<BN, KSL, P, LN>(p, sb, s_bias, s_gamma, s_beta, n0, k0);
  if (tid == 0) {
    init_bar(bar_part, C::kRecvBytes);
    if (LN) {
      init_bar(bar_mom, (KS - 1) * BM * 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  wait_prior();
  let_next();
  for (int i = tid; i < BM * VPR; i += kThreads) {
    const int r = i / VPR, c = (i % VPR) * 8;
    const bool ok = m0 + r < p.m;
    cp16(smem_addr(sa + r * P + c), ok ? p.x + (size_t)(m0 + r) * p.k + k0 + c : p.x, ok);
  }
  commit();
  const int wm = warp / WN, wn = warp % WN;
  const bool finisher = wm == rank;
  // The finishers' residual, before anything waits.
  __half2 res[MI][NI][2];
  if (finisher) Push<C>::load_residual(p, m0, n0, wm, wn, lane, res);
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");

  if (LN) {
    Push<C>::trade_moments(sa, mom, bar_mom, rank);
    mbar_wait(bar_mom);
    __syncthreads();  // this block's own moments
    constexpr int TPR = kThreads / BM > 0 ? kThreads / BM : 1;
    constexpr int RPP = BM * TPR / kThreads;
#pragma unroll
    for (int rr = 0; rr < RPP; ++rr) {
      const int r = tid / TPR + rr * (kThreads / TPR), part = tid % TPR;
      float2 mo[KS];
#pragma unroll
      for (int s = 0; s < KS; ++s) mo[s] = mom[s * BM + r];
      normalize_slice<KSL, TPR>(sa + r * P, part, merge_moments<KS, KSL>(mo), s_gamma, s_beta);
    }
    __syncthreads();
  }

  float acc[MI][NI][4] = {};
  const unsigned abase = smem_addr(sa) + ((wm * C::WTM + (lane & 15)) * P + (lane >> 4) * 8) * 2;
  const unsigned bbase =
      smem_addr(sb) +
      ((wn * C::WTN + (lane >> 4) * 8 + (lane & 7)) * P + ((lane >> 3) & 1) * 8) * 2;
  warp_mma<MI, NI, KSL / 16, P>(acc, abase, bbase);
  if (!finisher) {
    Push<C>::send(acc, recv, bar_part, rank, wm, wn, lane);
    return;
  }
  mbar_wait(bar_part);
  float sum[MI][NI][4];
  Push<C>::gather(acc, recv, rank, wn, lane, sum);
  Push<C>::store(p, sum, res, s_bias, m0, n0, wm, wn, lane, [](int, int, int, float2&) {});
}

// Fourth form: the push form with x's copies in ST stages (the mma of a
// stage waits only for its own copies) and the norm folded instead of
// applied. Before the kernel's wait each block scales its weight slice by
// gamma in place (w' = w * gamma, rounded to float16) and takes, per output
// column j, G_j = sum_k w'_jk and B_j = sum_k beta_k w_jk over its slice,
// which it pushes to the cluster's other blocks. After the wait the mma
// runs on x as it is; the blocks then take and trade x's row moments, and a
// finisher computes out = rstd (acc - mean G) + B + bias. Since G is summed
// from the rounded w', acc - mean G is sum_k (x_k - mean) w'_k up to the
// float32 sums: the rounding that the unfused product applies to the
// normalized x falls on w * gamma instead, and a large mean cancels exactly.
template <int BM, int BN, int KS, int KSL, bool LN, int ST>
struct CfgD {
  using Base = CfgC<BM, BN, KS, KSL, LN>;
  static constexpr int kGbBytes = LN ? KS * BN * 8 : 0;  // [rank][column] (G, B)
  static constexpr int kSmemBytes = Base::kSmemBytes + kGbBytes + 16;
  static_assert(KSL % (16 * ST) == 0, "stages");
};

template <int N>
__device__ __forceinline__ void wait_groups() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

template <int BM, int BN, int KS, int KSL, bool LN, int ST>
__global__ void __launch_bounds__(kThreads) staged_gemm(Args p) {
  using C = CfgC<BM, BN, KS, KSL, LN>;
  constexpr int P = C::P, MI = C::MI, NI = C::NI, WN = C::WN;
  extern __shared__ __align__(16) unsigned char smem[];
  __half* sa = reinterpret_cast<__half*>(smem);
  __half* sb = sa + BM * P;
  float4* recv = reinterpret_cast<float4*>(smem + C::kOperandBytes);
  float2* mom = reinterpret_cast<float2*>(smem + C::kOperandBytes + C::kRecvBytes);
  float2* gb = mom + (LN ? KS * BM : 0);
  float* s_bias = reinterpret_cast<float*>(gb + (LN ? KS * BN : 0));
  float* s_gamma = s_bias + BN;  // the norm's vectors, with LN only
  float* s_beta = s_gamma + KSL;
  unsigned long long* bars =
      reinterpret_cast<unsigned long long*>(s_bias + BN + (LN ? 2 * KSL : 0));
  const unsigned bar_part = smem_addr(&bars[0]), bar_mom = smem_addr(&bars[1]),
                 bar_gb = smem_addr(&bars[2]);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM, rank = blockIdx.z;
  const int k0 = rank * KSL;
  constexpr int VPR = KSL / 8;

  load_slice<BN, KSL, P, LN>(p, sb, s_bias, s_gamma, s_beta, n0, k0);
  if (tid == 0) {
    init_bar(bar_part, C::kRecvBytes);
    if (LN) {
      init_bar(bar_mom, (KS - 1) * BM * 8);
      init_bar(bar_gb, (KS - 1) * BN * 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  if (LN) {
    // The fold, before the wait: TPC threads per weight row (output column).
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    constexpr int TPC = kThreads / BN;
    const int j = tid / TPC, part = tid % TPC;
    float gsum = 0.f, bsum = 0.f;
#pragma unroll
    for (int v = part; v < VPR; v += TPC) {
      uint4 u = *reinterpret_cast<uint4*>(sb + j * P + v * 8);
      __half2* h = reinterpret_cast<__half2*>(&u);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = v * 8 + 2 * e;
        const float2 f = __half22float2(h[e]);
        h[e] = __floats2half2_rn(f.x * s_gamma[c], f.y * s_gamma[c + 1]);
        const float2 r = __half22float2(h[e]);
        gsum += r.x + r.y;
        bsum += f.x * s_beta[c] + f.y * s_beta[c + 1];
      }
      *reinterpret_cast<uint4*>(sb + j * P + v * 8) = u;
    }
#pragma unroll
    for (int o = 1; o < TPC; o <<= 1) {
      gsum += __shfl_xor_sync(0xffffffffu, gsum, o);
      bsum += __shfl_xor_sync(0xffffffffu, bsum, o);
    }
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (part == 0) {
      const float2 v = make_float2(gsum, bsum);
      gb[rank * BN + j] = v;
      const unsigned local = smem_addr(&gb[rank * BN + j]);
#pragma unroll
      for (int s = 0; s < KS; ++s)
        if (s != rank) st_async2(mapa(local, s), v, mapa(bar_gb, s));
    }
    __syncthreads();
  }
  wait_prior();
  let_next();
  constexpr int SW = KSL / ST, VPS = SW / 8;  // a stage's width, and its vectors per row
#pragma unroll
  for (int st = 0; st < ST; ++st) {
    for (int i = tid; i < BM * VPS; i += kThreads) {
      const int r = i / VPS, c = st * SW + (i % VPS) * 8;
      const bool ok = m0 + r < p.m;
      cp16(smem_addr(sa + r * P + c), ok ? p.x + (size_t)(m0 + r) * p.k + k0 + c : p.x, ok);
    }
    commit();
  }
  const int wm = warp / WN, wn = warp % WN;
  const bool finisher = wm == rank;
  const int g = lane >> 2;
  __half2 res[MI][NI][2];
  if (finisher) Push<C>::load_residual(p, m0, n0, wm, wn, lane, res);
  if (!LN) asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
  float acc[MI][NI][4] = {};
  const unsigned abase = smem_addr(sa) + ((wm * C::WTM + (lane & 15)) * P + (lane >> 4) * 8) * 2;
  const unsigned bbase =
      smem_addr(sb) +
      ((wn * C::WTN + (lane >> 4) * 8 + (lane & 7)) * P + ((lane >> 3) & 1) * 8) * 2;
#pragma unroll
  for (int st = 0; st < ST; ++st) {
    if (ST - 1 - st == 0) wait_groups<0>();
    if (ST - 1 - st == 1) wait_groups<1>();
    if (ST - 1 - st == 2) wait_groups<2>();
    if (ST - 1 - st == 3) wait_groups<3>();
    if (ST - 1 - st >= 4) wait_groups<4>();
    __syncthreads();
    warp_mma<MI, NI, SW / 16, P>(acc, abase + st * SW * 2, bbase + st * SW * 2);
  }
  if (LN) {
    Push<C>::trade_moments(sa, mom, bar_mom, rank);
    __syncthreads();  // this block's own moments, for its finishers
  }
  if (!finisher) {
    Push<C>::send(acc, recv, bar_part, rank, wm, wn, lane);
    return;
  }
  mbar_wait(bar_part);
  float sum[MI][NI][4];
  Push<C>::gather(acc, recv, rank, wn, lane, sum);
  float2 stats[MI][2];  // (mean, rstd) of this lane's rows
  if (LN) {
    mbar_wait(bar_mom);
    mbar_wait(bar_gb);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wm * C::WTM + mi * 16 + g + 8 * h;
        float2 mo[KS];
#pragma unroll
        for (int s = 0; s < KS; ++s) mo[s] = mom[s * BM + r];
        stats[mi][h] = merge_moments<KS, KSL>(mo);
      }
  }
  // The folded norm: rstd (sum - mean G) + B per column pair.
  Push<C>::store(p, sum, res, s_bias, m0, n0, wm, wn, lane, [&](int mi, int h, int c, float2& v) {
    if (!LN) return;
    float g0 = 0.f, b0 = 0.f, g1 = 0.f, b1 = 0.f;
#pragma unroll
    for (int s = 0; s < KS; ++s) {
      g0 += gb[s * BN + c].x;
      b0 += gb[s * BN + c].y;
      g1 += gb[s * BN + c + 1].x;
      b1 += gb[s * BN + c + 1].y;
    }
    const float mean = stats[mi][h].x, rstd = stats[mi][h].y;
    v.x = rstd * (v.x - mean * g0) + b0;
    v.y = rstd * (v.y - mean * g1) + b1;
  });
}

// One configuration, launched early, in a cluster of KS blocks along z.
struct Form {
  std::string name;
  int bm, bn, ks, ksl;
  bool ln;
  std::function<void(const Args&, cudaStream_t)> launch;
};

template <int BM, int BN, int KS, int KSL, int WM, int WN, bool LN, bool EARLY_W>
Form form() {
  using C = Cfg<BM, BN, KS, KSL, WM, WN, LN, EARLY_W>;
  auto kernel = cluster_gemm<BM, BN, KS, KSL, WM, WN, LN, EARLY_W>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  char name[96];
  std::snprintf(name, sizeof name, "%dx%d/ks%d/w%dx%d%s%s", BM, BN, KS, WM, WN, LN ? "/ln" : "",
                EARLY_W ? "" : "/l2");
  Form f{name, BM, BN, KS, KSL, LN, nullptr};
  f.launch = [kernel](const Args& a, cudaStream_t s) {
    launch_early(kernel, dim3(a.n / BN, (a.m + BM - 1) / BM, KS), kThreads, C::kSmemBytes, KS, a,
                 s);
  };
  return f;
}

template <int BM, int BN, int K, bool LN>
Form form_b() {
  using C = CfgB<BM, BN, K, LN>;
  auto kernel = warp_split_gemm<BM, BN, K, LN>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  char name[96];
  std::snprintf(name, sizeof name, "B %dx%d%s (%d KB)", BM, BN, LN ? "/ln" : "",
                C::kSmemBytes / 1024);
  Form f{name, BM, BN, 1, K, LN, nullptr};
  f.launch = [kernel](const Args& a, cudaStream_t s) {
    launch_early(kernel, dim3(a.n / BN, (a.m + BM - 1) / BM, 1), kThreads, C::kSmemBytes, 1, a, s);
  };
  return f;
}

template <int BM, int BN, int KS, int KSL, bool LN>
Form form_c() {
  using C = CfgC<BM, BN, KS, KSL, LN>;
  auto kernel = push_gemm<BM, BN, KS, KSL, LN>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  char name[96];
  std::snprintf(name, sizeof name, "C %dx%d/ks%d%s (%d KB)", BM, BN, KS, LN ? "/ln" : "",
                C::kSmemBytes / 1024);
  Form f{name, BM, BN, KS, KSL, LN, nullptr};
  f.launch = [kernel](const Args& a, cudaStream_t s) {
    launch_early(kernel, dim3(a.n / BN, (a.m + BM - 1) / BM, KS), kThreads, C::kSmemBytes, KS, a,
                 s);
  };
  return f;
}

template <int BM, int BN, int KS, int KSL, bool LN, int ST>
Form form_d() {
  using C = CfgD<BM, BN, KS, KSL, LN, ST>;
  auto kernel = staged_gemm<BM, BN, KS, KSL, LN, ST>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  char name[96];
  std::snprintf(name, sizeof name, "D %dx%d/ks%d/st%d%s (%d KB)", BM, BN, KS, ST, LN ? "/fold" : "",
                C::kSmemBytes / 1024);
  Form f{name, BM, BN, KS, KSL, LN, nullptr};
  f.launch = [kernel](const Args& a, cudaStream_t s) {
    launch_early(kernel, dim3(a.n / BN, (a.m + BM - 1) / BM, KS), kThreads, C::kSmemBytes, KS, a,
                 s);
  };
  return f;
}

struct Shape {
  const char* name;
  int k, n, act;
  bool residual, ln;
};

// The forms tried at k = 768, with or without the norm inside.
template <bool LN>
void forms_768(std::vector<Form>& f) {
  f.push_back(form_d<64, 64, 4, 192, LN, 1>());
  f.push_back(form_d<64, 64, 4, 192, LN, 2>());
  f.push_back(form_d<64, 64, 4, 192, LN, 3>());
  f.push_back(form_d<128, 64, 4, 192, LN, 3>());
  f.push_back(form_c<128, 64, 4, 192, LN>());
  f.push_back(form_c<128, 32, 4, 192, LN>());
  f.push_back(form_c<64, 64, 4, 192, LN>());
  f.push_back(form_c<128, 64, 2, 384, LN>());
  f.push_back(form_b<32, 64, 768, LN>());
  f.push_back(form_b<64, 32, 768, LN>());
  f.push_back(form_b<32, 32, 768, LN>());
  f.push_back(form_b<64, 64, 768, LN>());
  f.push_back(form<128, 64, 4, 192, 4, 2, LN, true>());
  f.push_back(form<128, 32, 4, 192, 4, 2, LN, true>());
  f.push_back(form<64, 64, 4, 192, 2, 4, LN, true>());
  f.push_back(form<128, 64, 8, 96, 4, 2, LN, true>());
  f.push_back(form<64, 32, 4, 192, 4, 2, LN, true>());
}

// The forms to try per product (k 768 or 3072), and whether each has the norm.
std::vector<Form> forms_for(const Shape& sh) {
  std::vector<Form> f;
  if (sh.k == 768) {
    if (sh.ln) {
      forms_768<true>(f);
      f.push_back(form_d<128, 64, 2, 384, true, 4>());
      f.push_back(form<128, 64, 4, 192, 4, 2, true, false>());  // the weight into L2 only
      f.push_back(form<128, 64, 2, 384, 4, 2, true, true>());
    }
    forms_768<false>(f);
    f.push_back(form_d<64, 32, 4, 192, false, 3>());
    f.push_back(form_c<64, 32, 4, 192, false>());
    f.push_back(form<64, 64, 8, 96, 2, 4, false, true>());
  } else {  // k = 3072
    f.push_back(form_d<128, 64, 8, 384, false, 4>());
    f.push_back(form_d<128, 64, 8, 384, false, 2>());
    f.push_back(form_c<128, 64, 8, 384, false>());
    f.push_back(form_c<128, 32, 8, 384, false>());
    f.push_back(form<128, 64, 8, 384, 4, 2, false, true>());
    f.push_back(form<64, 64, 8, 384, 2, 4, false, true>());
    f.push_back(form<64, 32, 8, 384, 4, 2, false, true>());
    f.push_back(form<128, 32, 8, 384, 4, 2, false, true>());
  }
  return f;
}

// A GPT-2 layer's four products at `m` rows, kLayers layers in one graph
// (attention left out; proj reads a fixed input), each layer its own
// weights: the generated forms (the norms folded, every kernel launched
// early, so each one's weight loads overlap the kernel before) against the
// norm kernel plus cuBLASLt, and cuBLASLt alone. Prints µs per layer and
// the largest difference of the last layer's output.
void layer_chain(int m, cudaStream_t st) {
  constexpr int kLayers = 12, D = 768, F = 3072;
  struct Layer {
    __half *wqkv, *bqkv, *wo, *bo, *wfc, *bfc, *wdn, *bdn, *g1, *b1, *g2, *b2;
    Lt *qkv, *o, *fc, *dn;
  };
  std::vector<Layer> L(kLayers);
  for (int l = 0; l < kLayers; ++l) {
    const unsigned s = 100 + 16 * l;
    Layer& y = L[l];
    y.wqkv = random_halves((size_t)3 * D * D, 1.f / std::sqrt((float)D), 0.f, s);
    y.bqkv = random_halves(3 * D, 0.5f, 0.f, s + 1);
    y.wo = random_halves((size_t)D * D, 1.f / std::sqrt((float)D), 0.f, s + 2);
    y.bo = random_halves(D, 0.5f, 0.f, s + 3);
    y.wfc = random_halves((size_t)F * D, 1.f / std::sqrt((float)D), 0.f, s + 4);
    y.bfc = random_halves(F, 0.5f, 0.f, s + 5);
    y.wdn = random_halves((size_t)D * F, 1.f / std::sqrt((float)F), 0.f, s + 6);
    y.bdn = random_halves(D, 0.5f, 0.f, s + 7);
    y.g1 = random_halves(D, 0.5f, 1.f, s + 8);
    y.b1 = random_halves(D, 0.5f, 0.f, s + 9);
    y.g2 = random_halves(D, 0.5f, 1.f, s + 10);
    y.b2 = random_halves(D, 0.5f, 0.f, s + 11);
    y.qkv = new Lt(m, 3 * D, D, y.bqkv, false, false);
    y.o = new Lt(m, D, D, y.bo, false, true);
    y.fc = new Lt(m, F, D, y.bfc, true, false);
    y.dn = new Lt(m, D, F, y.bdn, false, true);
  }
  __half* x0 = random_halves((size_t)m * D, 1.f, 3.f, 7);
  __half* attn = random_halves((size_t)m * D, 1.f, 0.f, 8);
  __half *x[2], *xn, *qkv, *h, *f;
  for (auto** b : {&x[0], &x[1], &xn, &h}) CHECK(cudaMalloc(b, (size_t)m * D * 2));
  CHECK(cudaMalloc(&qkv, (size_t)m * 3 * D * 2));
  CHECK(cudaMalloc(&f, (size_t)m * F * 2));
  const Form fq = form_d<64, 64, 4, 192, true, 3>(), fo = form_d<64, 64, 4, 192, false, 2>(),
             ffc = form_d<128, 64, 4, 192, true, 3>(), fdn = form_d<128, 64, 8, 384, false, 2>();
  auto args = [&](const __half* in, const __half* w, const __half* b, const __half* res,
                  const __half* g, const __half* be, __half* out, int n, int k, int act) {
    Args a{};
    a.x = in;
    a.w = w;
    a.bias = b;
    a.residual = res;
    a.ln_w = g;
    a.ln_b = be;
    a.out = out;
    a.m = m;
    a.n = n;
    a.k = k;
    a.act = act;
    return a;
  };
  auto generated = [&](int l) {
    const Layer& y = L[l];
    __half *in = x[l % 2], *out = x[(l + 1) % 2];
    fq.launch(args(in, y.wqkv, y.bqkv, nullptr, y.g1, y.b1, qkv, 3 * D, D, 0), st);
    fo.launch(args(attn, y.wo, y.bo, in, nullptr, nullptr, h, D, D, 0), st);
    ffc.launch(args(h, y.wfc, y.bfc, nullptr, y.g2, y.b2, f, F, D, 1), st);
    fdn.launch(args(f, y.wdn, y.bdn, h, nullptr, nullptr, out, D, F, 0), st);
  };
  auto library = [&](int l, bool norms) {
    const Layer& y = L[l];
    __half *in = x[l % 2], *out = x[(l + 1) % 2];
    if (norms) layer_norm<<<(m + 3) / 4, 128, 0, st>>>(in, y.g1, y.b1, xn, m, D, false);
    y.qkv->run(y.wqkv, norms ? xn : in, nullptr, qkv, st);
    y.o->run(y.wo, attn, in, h, st);
    if (norms) layer_norm<<<(m + 3) / 4, 128, 0, st>>>(h, y.g2, y.b2, xn, m, D, false);
    y.fc->run(y.wfc, norms ? xn : h, nullptr, f, st);
    y.dn->run(y.wdn, f, h, out, st);
  };
  auto time_layers = [&](const std::function<void(int)>& body) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int l = 0; l < kLayers; ++l) body(l);
    CHECK(cudaStreamEndCapture(st, &g));
    return replay_us(g, st, 50) / kLayers;
  };
  // The outputs, from the same input: generated against the norms plus cuBLASLt.
  __half* out_gen;
  CHECK(cudaMalloc(&out_gen, (size_t)m * D * 2));
  CHECK(cudaMemcpy(x[0], x0, (size_t)m * D * 2, cudaMemcpyDeviceToDevice));
  for (int l = 0; l < kLayers; ++l) generated(l);
  CHECK(cudaMemcpyAsync(out_gen, x[kLayers % 2], (size_t)m * D * 2, cudaMemcpyDeviceToDevice, st));
  CHECK(cudaMemcpyAsync(x[0], x0, (size_t)m * D * 2, cudaMemcpyDeviceToDevice, st));
  for (int l = 0; l < kLayers; ++l) library(l, true);
  CHECK(cudaStreamSynchronize(st));
  CHECK(cudaGetLastError());
  const auto [diff, big] = max_diff(out_gen, x[kLayers % 2], (size_t)m * D);
  const float t_gen = time_layers(generated);
  const float t_norm_lt = time_layers([&](int l) { library(l, true); });
  const float t_lt = time_layers([&](int l) { library(l, false); });
  std::printf("layer of four products, %d rows, us per layer (%d layers in one graph):\n", m,
              kLayers);
  std::printf("  generated, norms folded        %6.2f\n", t_gen);
  std::printf("  norm kernels + cuBLASLt        %6.2f\n", t_norm_lt);
  std::printf("  cuBLASLt alone (no norms)      %6.2f\n", t_lt);
  std::printf("  last layer's output: max |diff| %.4f (of %.2f)\n", diff, big);
}

int main(int argc, char** argv) {
  const int m = argc > 1 ? std::atoi(argv[1]) : 128;
  const Shape shapes[] = {{"qkv", 768, 2304, 0, false, true},
                          {"proj", 768, 768, 0, true, false},
                          {"fc", 768, 3072, 1, false, true},
                          {"down", 3072, 768, 0, true, false}};
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  if (std::getenv("LAYERS")) {  // the layer chain only
    layer_chain(m, st);
    return 0;
  }
  auto capture = [&](const std::function<void(int)>& body) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kChain; ++i) body(i);
    CHECK(cudaStreamEndCapture(st, &g));
    return replay_us(g, st, 50) / kChain;
  };
  std::printf(
      "rows %d; us per product in a chain of %d (graph, early launch for kiln-like kernels)\n", m,
      kChain);
  for (const Shape& sh : shapes) {
    const int k = sh.k, n = sh.n;
    // x with a mean far from zero next to its spread, as a residual stream has.
    __half* x = random_halves((size_t)m * k, 1.f, 3.f, 1);
    __half* res = random_halves((size_t)m * n, 1.f, 0.f, 2);
    __half* lnw = random_halves(k, 0.5f, 1.f, 3);
    __half* lnb = random_halves(k, 0.5f, 0.f, 4);
    __half* xn;
    CHECK(cudaMalloc(&xn, (size_t)m * k * 2));
    std::vector<__half*> w(kChain), bias(kChain), out_lt(kChain), out_gen(kChain);
    std::vector<Lt*> lt(kChain);
    for (int i = 0; i < kChain; ++i) {
      w[i] = random_halves((size_t)n * k, 1.f / std::sqrt((float)k), 0.f, 10 + i);
      bias[i] = random_halves(n, 0.5f, 0.f, 40 + i);
      CHECK(cudaMalloc(&out_lt[i], (size_t)m * n * 2));
      CHECK(cudaMalloc(&out_gen[i], (size_t)m * n * 2));
      lt[i] = new Lt(m, n, k, bias[i], sh.act, sh.residual);
    }
    auto args = [&](int i) {
      Args a{};
      a.x = x;
      a.w = w[i];
      a.bias = bias[i];
      a.residual = sh.residual ? res : nullptr;
      a.ln_w = lnw;
      a.ln_b = lnb;
      a.out = out_gen[i];
      a.m = m;
      a.n = n;
      a.k = k;
      a.act = sh.act;
      return a;
    };
    const bool lt_times = std::getenv("ONCE") == nullptr;
    const float t_lt =
        lt_times ? capture([&](int i) { lt[i]->run(w[i], x, res, out_lt[i], st); }) : 0.f;
    float t_ln_lt = 0.f;
    if (sh.ln && lt_times) {
      t_ln_lt = capture([&](int i) {
        layer_norm<<<(m + 3) / 4, 128, 0, st>>>(x, lnw, lnb, xn, m, k, false);
        lt[i]->run(w[i], xn, res, out_lt[i], st);
      });
    }
    std::printf("%-5s %4dx%-5d cuBLASLt %.2f%s", sh.name, k, n, t_lt, sh.ln ? "" : "\n");
    if (sh.ln) std::printf("  norm kernel + cuBLASLt %.2f\n", t_ln_lt);
    const char* only = std::getenv("ONLY");  // a form's name, to profile it alone
    const bool once = std::getenv("ONCE") != nullptr;
    for (const Form& f : forms_for(sh)) {
      if (n % f.bn != 0 || k != f.ks * f.ksl) continue;
      if (only && f.name != only) continue;
      // Reference: cuBLASLt on x, or on the norm kernel's output.
      if (f.ln) layer_norm<<<(m + 3) / 4, 128, 0, st>>>(x, lnw, lnb, xn, m, k, false);
      lt[0]->run(w[0], f.ln ? xn : x, res, out_lt[0], st);
      f.launch(args(0), st);
      CHECK(cudaStreamSynchronize(st));
      CHECK(cudaGetLastError());
      const auto [diff, big] = max_diff(out_gen[0], out_lt[0], (size_t)m * n);
      const float us = once ? 0.f : capture([&](int i) { f.launch(args(i), st); });
      const int blocks = (n / f.bn) * ((m + f.bm - 1) / f.bm) * f.ks;
      if (std::getenv("SKIPS")) {
        for (int skip : {1, 2, 4, 3, 7, 8}) {
          const float t_skip = capture([&](int i) {
            Args a = args(i);
            a.skip = skip;
            f.launch(a, st);
          });
          std::printf("   %-24s skip %d: %6.2f us\n", f.name.c_str(), skip, t_skip);
        }
      }
      std::printf("   %-24s %4d blocks  %6.2f us  max|diff| %.4f (of %.2f)\n", f.name.c_str(),
                  blocks, us, diff, big);
    }
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < kChain; ++i) {
      CHECK(cudaFree(w[i]));
      CHECK(cudaFree(bias[i]));
      CHECK(cudaFree(out_lt[i]));
      CHECK(cudaFree(out_gen[i]));
    }
    CHECK(cudaFree(x));
    CHECK(cudaFree(xn));
    CHECK(cudaFree(res));
  }
  return 0;
}
