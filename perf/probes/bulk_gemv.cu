// Can a one-row product stream its weight nearer HBM's peak when the weight
// travels by bulk asynchronous copies (cp.async.bulk into shared memory,
// completion counted by an mbarrier) instead of each lane's 16-byte loads?
// (perf/RESULTS.md, thirty-sixth session.) Not part of the build: a probe,
// compiled by hand with
//   nvcc -O3 -std=c++17 -arch=sm_90 -o bulk_gemv perf/probes/bulk_gemv.cu
// y[n] = sum_k w[n, k] x[k], float16, float32 sums, one row of x; w row-major
// [n, k]. Each shape's weight is cycled through copies that together exceed
// L2 three times, so that every replay reads DRAM, as a decode step does.
//
// Forms:
//   ldg    a warp per row, each lane's vectors of the row loaded together
//          (16-byte ld.global.nc), shuffles; the plain form.
//   bulk   one producer warp per block copies chunks of 32 KB (whole rows)
//          into a ring of S stages; eight consumer warps take one row each
//          (k <= 2048) or a part of one (larger k, parts summed in order
//          through shared memory); a block per SM, chunks gridDim.x apart.
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe.h"

constexpr int kChunk = 32768;  // bytes per stage
constexpr int kConsumers = 8;  // warps

__device__ __forceinline__ void unpack8(const uint4& v, float* f) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __half22float2(h[i]);
    f[2 * i] = p.x, f[2 * i + 1] = p.y;
  }
}

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// The lane's part of a dot product: its N weight vectors against x's
// vectors lane, lane + 32, ... (x from global or shared memory).
template <int N>
__device__ __forceinline__ float dot_lane(const uint4 (&wv)[N], const uint4* x, int lane) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float a[8], b[8];
    unpack8(wv[i], a);
    unpack8(x[lane + 32 * i], b);
#pragma unroll
    for (int e = 0; e < 8; ++e) s = fmaf(a[e], b[e], s);
  }
  return s;
}

__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

// The same with x already unpacked to floats; weight vector i is wvec(i).
template <int N, class W>
__device__ __forceinline__ float dot_lane_f(W wvec, const float (&xf)[N][8]) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float a[8];
    unpack8(wvec(i), a);
#pragma unroll
    for (int e = 0; e < 8; ++e) s = fmaf(a[e], xf[i][e], s);
  }
  return s;
}

// ---- ldg: a warp per row, kVec vectors per lane (kVec * 256 = k).
template <int kVec>
__global__ void __launch_bounds__(256)
    gemv_ldg(const __half* __restrict__ w, const __half* __restrict__ x, __half* y, int n) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (row >= n) return;
  const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)row * kVec * 256);
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  uint4 wv[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) wv[i] = ld_stream(wr + lane + 32 * i);
  const float s = warp_sum(dot_lane(wv, xr, lane));
  if (lane == 0) y[row] = __float2half(s);
}

// ---- ldg with an RMSNorm prologue, k = 2048 (8 vectors per lane).
// kMode 0: each warp takes x's statistics itself (its lanes hold all of x)
// and normalizes x in registers, one row per warp.
// kMode 1: the block takes them once (a vector per thread, two barriers),
// stores normalized x in shared memory; warps read it from there; kSteps
// steps of 8 rows per block, the next step's weights loaded before this
// step's math.
template <int kMode, int kSteps>
__global__ void __launch_bounds__(256)
    gemv_rms(const __half* __restrict__ w, const __half* __restrict__ x,
             const __half* __restrict__ nw, __half* y, int n) {
  constexpr int kVec = 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  const uint4* nr = reinterpret_cast<const uint4*>(nw);
  int row = (blockIdx.x * kSteps) * 8 + warp;
  uint4 wv[kVec];
  const uint4* wrow = reinterpret_cast<const uint4*>(w + (size_t)row * 2048);
#pragma unroll
  for (int i = 0; i < kVec; ++i) wv[i] = ld_stream(wrow + lane + 32 * i);
  if (kMode == 0) {
    float xf[kVec][8];
    float q = 0.f;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      unpack8(xr[lane + 32 * i], xf[i]);
#pragma unroll
      for (int e = 0; e < 8; ++e) q = fmaf(xf[i][e], xf[i][e], q);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    const float rstd = rsqrtf(q / 2048.f + 1e-6f);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      float g[8];
      unpack8(nr[lane + 32 * i], g);
#pragma unroll
      for (int e = 0; e < 8; ++e) xf[i][e] = __half2float(__float2half(xf[i][e] * rstd * g[e]));
    }
    const float s = warp_sum(dot_lane_f([&](int i) { return wv[i]; }, xf));
    if (lane == 0) y[row] = __float2half(s);
    return;
  }
  __shared__ uint4 xs[256];
  __shared__ float red[8];
  {
    float f[8], g[8];
    unpack8(xr[threadIdx.x], f);
    float q = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) q = fmaf(f[e], f[e], q);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    if (lane == 0) red[warp] = q;
    __syncthreads();
    float t = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) t += red[i];
    const float rstd = rsqrtf(t / 2048.f + 1e-6f);
    unpack8(nr[threadIdx.x], g);
    __half2 h[4];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      h[e] = __floats2half2_rn(f[2 * e] * rstd * g[2 * e], f[2 * e + 1] * rstd * g[2 * e + 1]);
    xs[threadIdx.x] = *reinterpret_cast<uint4*>(h);
    __syncthreads();
  }
  for (int st = 0; st < kSteps; ++st, row += 8) {
    if (row >= n) break;
    uint4 cur[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) cur[i] = wv[i];
    if (st + 1 < kSteps && row + 8 < n) {
      const uint4* nxt = reinterpret_cast<const uint4*>(w + (size_t)(row + 8) * 2048);
#pragma unroll
      for (int i = 0; i < kVec; ++i) wv[i] = ld_stream(nxt + lane + 32 * i);
    }
    const float s = warp_sum(dot_lane(cur, xs, lane));
    if (lane == 0) y[row] = __float2half(s);
  }
}

// ---- ldg, kWpr warps per row (k = kWpr * 2048), partials summed in order
// through shared memory; 8 / kWpr rows per block.
template <int kWpr>
__global__ void __launch_bounds__(256)
    gemv_split(const __half* __restrict__ w, const __half* __restrict__ x, __half* y, int n) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = warp / kWpr, q = warp % kWpr;
  const int row = blockIdx.x * (8 / kWpr) + r;
  __shared__ float part[8];
  float s = 0.f;
  if (row < n) {
    const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)row * kWpr * 2048) + q * 256;
    const uint4* xr = reinterpret_cast<const uint4*>(x) + q * 256;
    uint4 wv[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) wv[i] = ld_stream(wr + lane + 32 * i);
    s = warp_sum(dot_lane(wv, xr, lane));
  }
  if (lane == 0) part[warp] = s;
  __syncthreads();
  if (threadIdx.x < 8 / kWpr && blockIdx.x * (8 / kWpr) + threadIdx.x < n) {
    float t = 0.f;
#pragma unroll
    for (int p = 0; p < kWpr; ++p) t += part[threadIdx.x * kWpr + p];
    y[blockIdx.x * (8 / kWpr) + threadIdx.x] = __float2half(t);
  }
}

// ---- bulk
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(b)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// kWpr warps per row (k = kWpr * 2048 halves); kRows = 8 / kWpr rows per chunk.
template <int kWpr, int kStages>
__global__ void __launch_bounds__(288, 1)
    gemv_bulk(const __half* __restrict__ w, const __half* __restrict__ x, __half* y, int n) {
  constexpr int kRows = kConsumers / kWpr;
  constexpr int kVecPerRow = kWpr * 256;  // 16-byte vectors per row
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
  __shared__ float part[kStages][kConsumers];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int chunks = n / kRows;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(&full[s], 1), mbar_init(&empty[s], kConsumers);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == kConsumers) {  // the producer
    if (lane == 0) {
      int it = 0;
      for (int c = blockIdx.x; c < chunks; c += gridDim.x, ++it) {
        const int slot = it % kStages;
        if (it >= kStages) mbar_wait(&empty[slot], ((it / kStages) - 1) & 1);
        mbar_expect(&full[slot], kChunk);
        bulk_copy(smem + slot * kChunk, reinterpret_cast<const char*>(w) + (size_t)c * kChunk,
                  kChunk, &full[slot]);
      }
    }
    return;
  }
  // A consumer: its row of the chunk and its part of k, x's vectors of it in registers.
  const int r = warp / kWpr, q = warp % kWpr;
  float xf[8][8];
  const uint4* xv = reinterpret_cast<const uint4*>(x) + q * 256;
#pragma unroll
  for (int i = 0; i < 8; ++i) unpack8(xv[lane + 32 * i], xf[i]);
  int it = 0;
  for (int c = blockIdx.x; c < chunks; c += gridDim.x, ++it) {
    const int slot = it % kStages;
    mbar_wait(&full[slot], (it / kStages) & 1);
    const uint4* sv =
        reinterpret_cast<const uint4*>(smem + slot * kChunk) + r * kVecPerRow + q * 256;
    const float s = warp_sum(dot_lane_f([&](int i) { return sv[lane + 32 * i]; }, xf));
    if (kWpr == 1) {
      __syncwarp();
      if (lane == 0) {
        mbar_arrive(&empty[slot]);
        y[c * kRows + r] = __float2half(s);
      }
    } else {
      if (lane == 0) part[slot][warp] = s;
      // The row's warps meet at a named barrier; the first sums in order.
      asm volatile("bar.sync %0, %1;" ::"r"(1 + r), "r"(32 * kWpr) : "memory");
      if (lane == 0) {
        if (q == 0) {
          float t = 0.f;
#pragma unroll
          for (int p = 0; p < kWpr; ++p) t += part[slot][r * kWpr + p];
          y[c * kRows + r] = __float2half(t);
        }
      }
      asm volatile("bar.sync %0, %1;" ::"r"(1 + r), "r"(32 * kWpr) : "memory");
      if (lane == 0) mbar_arrive(&empty[slot]);
    }
  }
}

struct Shape {
  int k, n;
};

template <int kWpr, int kStages>
void launch_bulk(const __half* w, const __half* x, __half* y, int n, int sms, cudaStream_t s) {
  const size_t smem = (size_t)kStages * kChunk;
  CHECK(cudaFuncSetAttribute(gemv_bulk<kWpr, kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem));
  gemv_bulk<kWpr, kStages><<<sms, 288, smem, s>>>(w, x, y, n);
}

template <int kWpr>
void launch_ldg(const __half* w, const __half* x, __half* y, int n, cudaStream_t s) {
  gemv_ldg<kWpr * 8><<<(n + 7) / 8, 256, 0, s>>>(w, x, y, n);
}

int main() {
  int dev = 0, sms = 0, l2 = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  const double peak_gbps = 4800.0;
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  const Shape shapes[] = {{2048, 16384}, {8192, 2048}, {2048, 8192}, {2048, 3072}};
  std::printf("one row, float16, us per product past L2 (%% of %.0f GB/s), 24 products a graph\n",
              peak_gbps);
  const char* names[] = {"ldg",      "bulk S4",  "bulk S6",  "split",
                         "rms warp", "rms blk1", "rms blk2", "rms blk4"};
  constexpr int kForms = 8;
  for (const Shape& sh : shapes) {
    const size_t elems = (size_t)sh.k * sh.n, bytes = elems * 2;
    const int copies = (int)std::max<size_t>(2, (3 * (size_t)l2 + bytes - 1) / bytes + 1);
    std::vector<__half*> ws(copies);
    for (int c = 0; c < copies; ++c) {
      CHECK(cudaMalloc(&ws[c], bytes));
      fill<<<1024, 256>>>(ws[c], elems, 17u + c, 0.25f);
    }
    __half *x, *nw, *y0, *y1;
    CHECK(cudaMalloc(&x, sh.k * 2));
    CHECK(cudaMalloc(&nw, sh.k * 2));
    CHECK(cudaMalloc(&y0, sh.n * 2));
    CHECK(cudaMalloc(&y1, sh.n * 2));
    fill<<<16, 256>>>(x, sh.k, 5u, 2.0f);
    fill<<<16, 256>>>(nw, sh.k, 9u, 2.0f);
    CHECK(cudaDeviceSynchronize());
    const int wpr = sh.k / 2048;
    // false where the form does not take the shape.
    auto run = [&](int form, const __half* w, __half* y) {
      switch (form) {
        case 0:
          if (wpr == 1)
            launch_ldg<1>(w, x, y, sh.n, s);
          else
            launch_ldg<4>(w, x, y, sh.n, s);
          return true;
        case 1:
          if (wpr == 1)
            launch_bulk<1, 4>(w, x, y, sh.n, sms, s);
          else
            launch_bulk<4, 4>(w, x, y, sh.n, sms, s);
          return true;
        case 2:
          if (wpr == 1)
            launch_bulk<1, 6>(w, x, y, sh.n, sms, s);
          else
            launch_bulk<4, 6>(w, x, y, sh.n, sms, s);
          return true;
        case 3:
          if (wpr != 4) return false;
          gemv_split<4><<<sh.n / 2, 256, 0, s>>>(w, x, y, sh.n);
          return true;
        case 4:
          if (wpr != 1) return false;
          gemv_rms<0, 1><<<sh.n / 8, 256, 0, s>>>(w, x, nw, y, sh.n);
          return true;
        case 5:
          if (wpr != 1) return false;
          gemv_rms<1, 1><<<sh.n / 8, 256, 0, s>>>(w, x, nw, y, sh.n);
          return true;
        case 6:
          if (wpr != 1) return false;
          gemv_rms<1, 2><<<sh.n / 16, 256, 0, s>>>(w, x, nw, y, sh.n);
          return true;
        default:
          if (wpr != 1) return false;
          gemv_rms<1, 4><<<sh.n / 32, 256, 0, s>>>(w, x, nw, y, sh.n);
          return true;
      }
    };
    char label[32];
    std::snprintf(label, sizeof label, "%dx%d", sh.k, sh.n);
    std::printf("%-12s %6.1f MB:", label, bytes / 1e6);
    for (int form = 0; form < kForms; ++form) {
      if (!run(form, ws[0], y1)) continue;
      CHECK(cudaStreamSynchronize(s));
      cudaGraph_t g;
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      for (int i = 0; i < 24; ++i) run(form, ws[i % copies], y1);
      CHECK(cudaStreamEndCapture(s, &g));
      const float us = replay_us(g, s, 10) / 24;
      // Plain forms against ldg, norm forms against the warp form.
      run(form < 4 ? 0 : 4, ws[0], y0);
      run(form, ws[0], y1);
      CHECK(cudaStreamSynchronize(s));
      std::vector<__half> a(sh.n), b(sh.n);
      CHECK(cudaMemcpy(a.data(), y0, sh.n * 2, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(b.data(), y1, sh.n * 2, cudaMemcpyDeviceToHost));
      double worst = 0;
      for (int i = 0; i < sh.n; ++i) {
        worst = std::max(worst, (double)std::abs(__half2float(a[i]) - __half2float(b[i])));
      }
      std::printf("  %s %.2f (%.1f%%, d %.2g)", names[form], us,
                  100.0 * bytes / (us * 1e-6) / 1e9 / peak_gbps, worst);
    }
    std::printf("\n");
    for (__half* p : ws) CHECK(cudaFree(p));
    for (__half* p : {x, nw, y0, y1}) CHECK(cudaFree(p));
  }
  return 0;
}
