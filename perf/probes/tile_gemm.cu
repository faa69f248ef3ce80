// Whether a generated tensor-core GEMM can beat cuBLASLt on GPT-2's prefill
// products at 128 and 1024 rows, and what a LayerNorm prologue inside it
// saves against the norm as its own kernel (perf/RESULTS.md, twentieth
// session). Not part of the build: a probe, compiled by hand with
//   nvcc -O3 -arch=sm_90 -o tile_gemm perf/probes/tile_gemm.cu -lcublasLt
// out[m, n] = act(x[m, k] . w[n, k] + bias[n]) (+ residual[m, n]), float16,
// float32 sums. Each form runs kChain times in one graph, every step its own
// weight (more than L2 holds, as in a model), early launch for the generated
// kernel; the printed time is per step.
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "linear_probe.cuh"
#include "lt_probe.h"
#include "probe.h"

constexpr int kChain = 12;
constexpr int BM = 64, BN = 64, CH = 64, MAX_CH = 12, THREADS = 256;
constexpr int ROW = CH + 8;                   // padded smem row (halves): conflict-free ldmatrix
constexpr int kTileHalves = (BM + BN) * ROW;  // one chunk of x and of w

// Waits until at most n groups are pending (N >= n, or N when n is larger;
// one branch is left when n is a constant).
template <int N>
__device__ __forceinline__ void wait_pending(int n) {
  if constexpr (N == 0) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
  } else if (n >= N) {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
  } else {
    wait_pending<N - 1>(n);
  }
}

struct Args {
  const __half* x;
  const __half* w;
  const __half* bias;
  const __half* residual;  // null: none
  const __half* ln_w;      // null: no LayerNorm prologue
  const __half* ln_b;
  __half* out;
  float* ws;          // split-K partials [splits][m][n]
  unsigned* counter;  // per output tile, left zero
  int m, n, k, splits, act;
};

// A warp's 32 x (8 NI) outputs at (row0, col0): bias, activation and
// residual, stored; with split K, partials to the workspace and the tile's
// last block (a counter per tile, left zero) adds them up and stores.
template <int NI>
__device__ void tile_epilogue(const Args& p, const float (&acc)[2][NI][4], int row0, int col0,
                              int threads, unsigned* s_last) {
  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  auto finish = [&](int row, int col, float v0, float v1) {
    if (row >= p.m) return;
    v0 += __half2float(p.bias[col]);
    v1 += __half2float(p.bias[col + 1]);
    if (p.act) {
      v0 = gelu(v0);
      v1 = gelu(v1);
    }
    if (p.residual) {
      const __half2 r = *reinterpret_cast<const __half2*>(p.residual + (size_t)row * p.n + col);
      v0 += __low2float(r);
      v1 += __high2float(r);
    }
    *reinterpret_cast<__half2*>(p.out + (size_t)row * p.n + col) = __floats2half2_rn(v0, v1);
  };
  if (p.splits == 1) {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int row = row0 + mi * 16 + g, col = col0 + ni * 8 + 2 * t;
        finish(row, col, acc[mi][ni][0], acc[mi][ni][1]);
        finish(row + 8, col, acc[mi][ni][2], acc[mi][ni][3]);
      }
    return;
  }
  float* part = p.ws + (size_t)blockIdx.z * p.m * p.n;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      const int row = row0 + mi * 16 + g, col = col0 + ni * 8 + 2 * t;
      if (row < p.m)
        *reinterpret_cast<float2*>(part + (size_t)row * p.n + col) =
            make_float2(acc[mi][ni][0], acc[mi][ni][1]);
      if (row + 8 < p.m)
        *reinterpret_cast<float2*>(part + (size_t)(row + 8) * p.n + col) =
            make_float2(acc[mi][ni][2], acc[mi][ni][3]);
    }
  __syncthreads();
  unsigned* ctr = p.counter + blockIdx.y * gridDim.x + blockIdx.x;
  if (tid == 0) {
    unsigned prev;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(prev) : "l"(ctr) : "memory");
    *s_last = prev == (unsigned)p.splits - 1;
    if (*s_last) *ctr = 0;
  }
  __syncthreads();
  if (!*s_last) return;
  __threadfence();
  for (int e = tid; e < BM * BN / 2; e += threads) {
    const int r = e / (BN / 2), c = (e % (BN / 2)) * 2, row = m0 + r, col = n0 + c;
    if (row >= p.m) continue;
    float v0 = 0.f, v1 = 0.f;
    for (int s = 0; s < p.splits; ++s) {
      const float2 q =
          __ldcg(reinterpret_cast<const float2*>(p.ws + ((size_t)s * p.m + row) * p.n + col));
      v0 += q.x;
      v1 += q.y;
    }
    finish(row, col, v0, v1);
  }
}

// Grid (n / BN, ceil(m / BM), splits). A block's whole share of k (at most
// MAX_CH chunks of CH) is loaded at once, a cp.async group per chunk, and
// multiplied chunk by chunk as the groups land: one memory latency per
// block instead of one per pipeline stage. 8 warps as 2 (m) x 4 (n), 32 x 16
// outputs each.
__global__ void __launch_bounds__(THREADS) tile_gemm(Args p) {
  extern __shared__ __align__(16) __half smem[];
  __shared__ float s_mean[BM], s_rstd[BM];
  __shared__ unsigned s_last;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM, z = blockIdx.z;
  const int chunks = p.k / CH, per = (chunks + p.splits - 1) / p.splits;
  const int c0 = min(chunks, z * per), c1 = min(chunks, c0 + per), nch = c1 - c0;
  // The weight slice into L2 before the wait: it depends on nothing before.
  const int lines = nch * CH / 64;  // 128-byte lines per weight row
  for (int i = tid; i < BN * lines; i += THREADS) {
    const int r = i / lines, c = i % lines;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p.w + (size_t)(n0 + r) * p.k + c0 * CH + c * 64));
  }
  wait_prior();
  let_next();
  for (int ch = 0; ch < nch; ++ch) {
    __half* sa = smem + ch * kTileHalves;
    __half* sb = sa + BM * ROW;
    const int k0 = (c0 + ch) * CH;
#pragma unroll
    for (int i = 0; i < BM * CH / 8 / THREADS; ++i) {
      const int c = tid + i * THREADS, r = c / (CH / 8), col = (c % (CH / 8)) * 8;
      const bool ok = m0 + r < p.m;
      cp16(smem_addr(sa + r * ROW + col), ok ? p.x + (size_t)(m0 + r) * p.k + k0 + col : p.x, ok);
      cp16(smem_addr(sb + r * ROW + col), p.w + (size_t)(n0 + r) * p.k + k0 + col, true);
    }
    commit();
  }
  if (p.ln_w) {
    // Row statistics over the whole of k from global memory, while the
    // chunks are in flight: warp w takes rows w, w + 8, ...
    for (int r = warp; r < BM; r += THREADS / 32) {
      const int row = m0 + r;
      float sum = 0.f, sq = 0.f;
      if (row < p.m) {
        for (int c = lane * 8; c < p.k; c += 256) {
          const uint4 v = *reinterpret_cast<const uint4*>(p.x + (size_t)row * p.k + c);
          const __half* h = reinterpret_cast<const __half*>(&v);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            const float f = __half2float(h[e]);
            sum += f;
            sq += f * f;
          }
        }
      }
      for (int o = 16; o > 0; o >>= 1) {
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
        sq += __shfl_xor_sync(0xffffffffu, sq, o);
      }
      if (lane == 0) {
        const float mean = sum / p.k;
        s_mean[r] = mean;
        s_rstd[r] = rsqrtf(fmaxf(sq / p.k - mean * mean, 0.f) + 1e-5f);
      }
    }
  }
  float acc[2][2][4] = {};
  for (int ch = 0; ch < nch; ++ch) {
    __half* sa = smem + ch * kTileHalves;
    wait_pending<MAX_CH - 1>(nch - 1 - ch);
    __syncthreads();
    if (p.ln_w) {
#pragma unroll
      for (int i = 0; i < BM * CH / 8 / THREADS; ++i) {
        const int c = tid + i * THREADS, r = c / (CH / 8), col = (c % (CH / 8)) * 8;
        const int kk = (c0 + ch) * CH + col;
        uint4 v = *reinterpret_cast<uint4*>(sa + r * ROW + col);
        const uint4 wv = *reinterpret_cast<const uint4*>(p.ln_w + kk);
        const uint4 bv = *reinterpret_cast<const uint4*>(p.ln_b + kk);
        __half* h = reinterpret_cast<__half*>(&v);
        const __half* hw = reinterpret_cast<const __half*>(&wv);
        const __half* hb = reinterpret_cast<const __half*>(&bv);
        const float mean = s_mean[r], rstd = s_rstd[r];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float f = (__half2float(h[e]) - mean) * rstd;
          h[e] = __float2half(f * __half2float(hw[e]) + __half2float(hb[e]));
        }
        *reinterpret_cast<uint4*>(sa + r * ROW + col) = v;
      }
      __syncthreads();
    }
    const unsigned a0 = smem_addr(sa), b0 = smem_addr(sa + BM * ROW);
#pragma unroll
    for (int kk = 0; kk < CH / 16; ++kk) {
      unsigned af[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const int r = wm * 32 + mi * 16 + (lane & 15), c = kk * 16 + (lane >> 4) * 8;
        ldsm4(a0 + (r * ROW + c) * 2, af[mi][0], af[mi][1], af[mi][2], af[mi][3]);
      }
      unsigned q0, q1, q2, q3;
      const int r = wn * 16 + (lane >> 4) * 8 + (lane & 7), c = kk * 16 + ((lane >> 3) & 1) * 8;
      ldsm4(b0 + (r * ROW + c) * 2, q0, q1, q2, q3);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        mma(acc[mi][0], af[mi], q0, q1);
        mma(acc[mi][1], af[mi], q2, q3);
      }
    }
  }
  tile_epilogue<2>(p, acc, m0 + wm * 32, n0 + wn * 16, THREADS, &s_last);
}

// Third form: the second form's whole-k loads with the chunk count NCH a
// template parameter, so that the chunk loop unrolls and every address is a
// per-thread base plus a constant; 4 warps as 2 x 2 of 32 x 32 outputs (8
// mma per 4 ldmatrix). With LN, the statistics come from the resident x
// panel once every chunk has landed: two threads per row, each normalizing
// in place the half of every chunk it summed.
constexpr int THREADS3 = 128;
template <int NCH, bool LN>
__global__ void __launch_bounds__(THREADS3) tile_gemm3(Args p) {
  extern __shared__ __align__(16) __half smem3[];
  __shared__ unsigned s_last;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM, z = blockIdx.z;
  const int c0 = z * NCH;
  const __half* wbase = p.w + (size_t)n0 * p.k + c0 * CH;
  for (int i = tid; i < BN * NCH; i += THREADS3) {
    const int r = i / NCH, c = i % NCH;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(wbase + (size_t)r * p.k + c * 64));
  }
  wait_prior();
  let_next();
  const int lr = tid >> 3, lc = (tid & 7) * 8;  // this thread's first row and column in a chunk
  const __half* xs[4];
  const __half* ws[4];
  bool ok[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = lr + 16 * i;
    ok[i] = m0 + r < p.m;
    xs[i] = ok[i] ? p.x + (size_t)(m0 + r) * p.k + c0 * CH + lc : p.x;
    ws[i] = wbase + (size_t)r * p.k + lc;
  }
  const unsigned sbase = smem_addr(smem3) + (lr * ROW + lc) * 2;
#pragma unroll
  for (int ch = 0; ch < NCH; ++ch) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned d = sbase + (ch * kTileHalves + 16 * i * ROW) * 2;
      cp16(d, xs[i] + (ok[i] ? ch * CH : 0), ok[i]);
      cp16(d + BM * ROW * 2, ws[i] + ch * CH, true);
    }
    commit();
  }
  if (LN) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    const int r = tid >> 1, h = tid & 1;
    float sum = 0.f, sq = 0.f;
#pragma unroll
    for (int ch = 0; ch < NCH; ++ch) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const uint4 u =
            *reinterpret_cast<const uint4*>(smem3 + ch * kTileHalves + r * ROW + h * 32 + v * 8);
        const __half2* h2 = reinterpret_cast<const __half2*>(&u);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __half22float2(h2[e]);
          sum += f.x + f.y;
          sq += f.x * f.x + f.y * f.y;
        }
      }
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sq += __shfl_xor_sync(0xffffffffu, sq, 1);
    const float mean = sum / p.k, rstd = rsqrtf(fmaxf(sq / p.k - mean * mean, 0.f) + 1e-5f);
#pragma unroll
    for (int ch = 0; ch < NCH; ++ch) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int kk = (c0 + ch) * CH + h * 32 + v * 8;
        __half* a = smem3 + ch * kTileHalves + r * ROW + h * 32 + v * 8;
        uint4 u = *reinterpret_cast<uint4*>(a);
        const uint4 wv = __ldg(reinterpret_cast<const uint4*>(p.ln_w + kk));
        const uint4 bv = __ldg(reinterpret_cast<const uint4*>(p.ln_b + kk));
        __half2* h2 = reinterpret_cast<__half2*>(&u);
        const __half2* w2 = reinterpret_cast<const __half2*>(&wv);
        const __half2* b2 = reinterpret_cast<const __half2*>(&bv);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __half22float2(h2[e]), fw = __half22float2(w2[e]),
                       fb = __half22float2(b2[e]);
          h2[e] = __floats2half2_rn((f.x - mean) * rstd * fw.x + fb.x,
                                    (f.y - mean) * rstd * fw.y + fb.y);
        }
        *reinterpret_cast<uint4*>(a) = u;
      }
    }
    __syncthreads();
  }
  float acc[2][4][4] = {};
  const unsigned abase = smem_addr(smem3) + ((wm * 32 + (lane & 15)) * ROW + (lane >> 4) * 8) * 2;
  const unsigned bbase =
      smem_addr(smem3) +
      ((BM + wn * 32 + (lane >> 4) * 8 + (lane & 7)) * ROW + ((lane >> 3) & 1) * 8) * 2;
#pragma unroll
  for (int ch = 0; ch < NCH; ++ch) {
    if (!LN) {
      wait_pending<MAX_CH - 1>(NCH - 1 - ch);  // a constant once the loop unrolls
      __syncthreads();
    }
#pragma unroll
    for (int kk = 0; kk < CH / 16; ++kk) {
      unsigned af[2][4], bf[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        ldsm4(abase + (ch * kTileHalves + mi * 16 * ROW + kk * 16) * 2, af[mi][0], af[mi][1],
              af[mi][2], af[mi][3]);
#pragma unroll
      for (int np = 0; np < 2; ++np)
        ldsm4(bbase + (ch * kTileHalves + np * 16 * ROW + kk * 16) * 2, bf[np][0], bf[np][1],
              bf[np][2], bf[np][3]);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          mma(acc[mi][2 * np], af[mi], bf[np][0], bf[np][1]);
          mma(acc[mi][2 * np + 1], af[mi], bf[np][2], bf[np][3]);
        }
    }
  }
  tile_epilogue<4>(p, acc, m0 + wm * 32, n0 + wn * 32, THREADS3, &s_last);
}

// Launches `kernel` early (programmatic stream serialization).
template <class... P, class... A>
void launch_early(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                  A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...));
}

dim3 tile_grid(const Args& p) {
  return dim3(p.n / BN, (p.m + BM - 1) / BM, p.splits);
}

void launch_tile(const Args& p, cudaStream_t s) {
  const int chunks = p.k / CH, per = (chunks + p.splits - 1) / p.splits;
  launch_early(tile_gemm, tile_grid(p), dim3(THREADS), (size_t)per * kTileHalves * sizeof(__half),
               s, p);
}

template <int NCH, bool LN>
void launch3_as(const Args& p, cudaStream_t s) {
  static bool init = [] {
    CHECK(cudaFuncSetAttribute(tile_gemm3<NCH, LN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               NCH * kTileHalves * (int)sizeof(__half)));
    return true;
  }();
  (void)init;
  launch_early(tile_gemm3<NCH, LN>, tile_grid(p), dim3(THREADS3),
               (size_t)NCH * kTileHalves * sizeof(__half), s, p);
}

// The third form where its chunk count per split is instantiated (3, 6 or 12).
bool launch3(const Args& p, cudaStream_t s) {
  const int chunks = p.k / CH;
  if (chunks % p.splits != 0) return false;
  const int per = chunks / p.splits;
  const bool ln = p.ln_w != nullptr;
  if (ln && p.splits != 1) return false;
  switch (per) {
    case 3:
      ln ? launch3_as<3, true>(p, s) : launch3_as<3, false>(p, s);
      return true;
    case 6:
      ln ? launch3_as<6, true>(p, s) : launch3_as<6, false>(p, s);
      return true;
    case 12:
      ln ? launch3_as<12, true>(p, s) : launch3_as<12, false>(p, s);
      return true;
    default:
      return false;
  }
}

void launch_ln(const __half* x, const __half* w, const __half* b, __half* y, int m, int k,
               cudaStream_t s) {
  launch_early(layer_norm, dim3((m + 3) / 4), dim3(128), 0, s, x, w, b, y, m, k, true);
}

int main() {
  struct Shape {
    const char* name;
    int k, n, act;
    bool residual, ln;
  };
  const Shape shapes[] = {{"qkv", 768, 2304, 0, false, true},
                          {"proj", 768, 768, 0, true, false},
                          {"fc", 768, 3072, 1, false, true},
                          {"down", 3072, 768, 0, true, false}};
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaFuncSetAttribute(tile_gemm, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             MAX_CH * kTileHalves * (int)sizeof(__half)));
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  std::printf("%-5s %5s | %9s %9s | %-22s | %9s %9s | %s\n", "prod", "m", "cuBLASLt", "ln+Lt",
              "generated (splits: us)", "gen+ln", "best", "max |diff|");
  for (int m : {128, 1024}) {
    for (const Shape& sh : shapes) {
      const int k = sh.k, n = sh.n;
      __half* x = random_halves((size_t)m * k, 1.f, 0.f, 1);
      __half* res = random_halves((size_t)m * n, 1.f, 0.f, 2);
      __half* lnw = random_halves(k, 1.f, 0.f, 3);
      __half* lnb = random_halves(k, 0.5f, 0.f, 4);
      __half* xn;
      CHECK(cudaMalloc(&xn, (size_t)m * k * 2));
      std::vector<__half*> w(kChain), bias(kChain), out_lt(kChain), out_gen(kChain);
      for (int i = 0; i < kChain; ++i) {
        w[i] = random_halves((size_t)n * k, 1.f / std::sqrt((float)k), 0.f, 10 + i);
        bias[i] = random_halves(n, 0.5f, 0.f, 40 + i);
        CHECK(cudaMalloc(&out_lt[i], (size_t)m * n * 2));
        CHECK(cudaMalloc(&out_gen[i], (size_t)m * n * 2));
      }
      std::vector<Lt*> lt(kChain);
      for (int i = 0; i < kChain; ++i) lt[i] = new Lt(m, n, k, bias[i], sh.act, sh.residual);
      float* ws;
      unsigned* ctr;
      CHECK(cudaMalloc(&ws, (size_t)16 * m * n * 4));
      CHECK(cudaMalloc(&ctr, 4096 * 4));
      CHECK(cudaMemset(ctr, 0, 4096 * 4));
      auto args = [&](int i, int splits, bool ln) {
        Args p{};
        p.x = x;
        p.w = w[i];
        p.bias = bias[i];
        p.residual = sh.residual ? res : nullptr;
        p.ln_w = ln ? lnw : nullptr;
        p.ln_b = lnb;
        p.out = out_gen[i];
        p.ws = ws;
        p.counter = ctr;
        p.m = m;
        p.n = n;
        p.k = k;
        p.splits = splits;
        p.act = sh.act;
        return p;
      };
      auto capture = [&](auto body) {
        cudaGraph_t g;
        CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < kChain; ++i) body(i);
        CHECK(cudaStreamEndCapture(st, &g));
        return replay_us(g, st, 50) / kChain;
      };
      const float t_lt = capture([&](int i) { lt[i]->run(w[i], x, res, out_lt[i], st); });
      float t_ln_lt = 0.f;
      if (sh.ln) {
        t_ln_lt = capture([&](int i) {
          launch_ln(x, lnw, lnb, xn, m, k, st);
          lt[i]->run(w[i], xn, res, out_lt[i], st);
        });
      }
      // Reference: cuBLASLt on x (or the normalized x).
      for (int i = 0; i < kChain; ++i) lt[i]->run(w[i], x, res, out_lt[i], st);
      CHECK(cudaStreamSynchronize(st));
      const int tiles = (n / BN) * ((m + BM - 1) / BM);
      char line[256] = "";
      float best = 1e9f, diff = 0.f;
      int best_s = 1;
      for (int splits : {1, 2, 3, 4, 6, 8, 12}) {
        if ((k / CH + splits - 1) / splits > MAX_CH || k / CH < splits) continue;
        if (splits > 1 && tiles * splits > 4 * sms) continue;
        const float us = capture([&](int i) { launch_tile(args(i, splits, false), st); });
        launch_tile(args(0, splits, false), st);
        CHECK(cudaStreamSynchronize(st));
        diff = std::fmax(diff, max_diff(out_gen[0], out_lt[0], (size_t)m * n).first);
        std::snprintf(line + std::strlen(line), sizeof line - std::strlen(line), "%d:%.1f ", splits,
                      us);
        if (us < best) {
          best = us;
          best_s = splits;
        }
      }
      // The third form, at the split counts it is instantiated for.
      char line3[256] = "";
      float diff3 = 0.f;
      for (int splits : {1, 2, 4, 8}) {
        if (splits > 1 && tiles * splits > 4 * sms) continue;
        if (!launch3(args(0, splits, false), st)) continue;
        CHECK(cudaStreamSynchronize(st));
        diff3 = std::fmax(diff3, max_diff(out_gen[0], out_lt[0], (size_t)m * n).first);
        const float us = capture([&](int i) { launch3(args(i, splits, false), st); });
        std::snprintf(line3 + std::strlen(line3), sizeof line3 - std::strlen(line3), "%d:%.1f ",
                      splits, us);
      }
      float t_gen_ln = 0.f, diff_ln = 0.f;
      if (sh.ln) {
        t_gen_ln = capture([&](int i) { launch_tile(args(i, best_s, true), st); });
        launch_ln(x, lnw, lnb, xn, m, k, st);
        lt[0]->run(w[0], xn, res, out_lt[0], st);
        launch_tile(args(0, best_s, true), st);
        CHECK(cudaStreamSynchronize(st));
        diff_ln = max_diff(out_gen[0], out_lt[0], (size_t)m * n).first;
      }
      float t3_ln = 0.f, diff3_ln = 0.f;
      if (sh.ln && launch3(args(0, 1, true), st)) {
        CHECK(cudaStreamSynchronize(st));
        diff3_ln = max_diff(out_gen[0], out_lt[0], (size_t)m * n).first;
        t3_ln = capture([&](int i) { launch3(args(i, 1, true), st); });
      }
      std::printf("%-5s %5d | third: %-22s | third+ln %6.2f | max |diff| %.4f / %.4f (ln)\n",
                  sh.name, m, line3, t3_ln, diff3, diff3_ln);
      std::printf("%-5s %5d | %9.2f %9.2f | %-22s | %9.2f %9s | %.4f / %.4f (ln)\n", sh.name, m,
                  t_lt, t_ln_lt, line, t_gen_ln, (std::to_string(best_s) + " splits").c_str(), diff,
                  diff_ln);
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
      CHECK(cudaFree(ws));
      CHECK(cudaFree(ctr));
    }
  }
  return 0;
}
