// How close a one-row (and an eight-row) product with a long n, GPT-2's LM
// head (50257 x 768 float16, 77 MB), can come to the HBM's read bandwidth.
// kiln's skinny kernel reads it at about 71% at one row and 47% at eight
// (perf/RESULTS.md). Not part of the build: a probe, compiled by hand with
//   nvcc -O3 -std=c++17 -arch=sm_90 -o head_stream perf/probes/head_stream.cu
// A graph of kHeads heads, each its own weight (beyond L2), every kernel
// launched early with its first rows prefetched into L2 before the wait; µs
// per head and TB/s of weight read. Forms:
//   read: every weight byte summed, no product (the ceiling; no error checked)
//   rowsU: a warp per weight row, U rows of loads in flight, the grid the
//          blocks that fit on the GPU, walking the rows
//   halfU: half a warp per row
//   mma: (8 rows) mma.m16n8k16, a warp per 16-row tile, x as B from shared
//        memory
// Each form's output is checked against a float64 reference on the host.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe.h"

constexpr int kN = 50257, kK = 768, kHeads = 8, kThreads = 256;
constexpr int kVec = kK / 8;  // 16-byte vectors per row: 96

__device__ __forceinline__ uint4 stream16(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

__device__ __forceinline__ void prefetch_rows(const __half* w, int first, int rows) {
  const char* base = reinterpret_cast<const char*>(w + (size_t)first * kK);
  for (int o = threadIdx.x * 128; o < rows * kK * 2; o += kThreads * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + o));
}

// The ceiling: sums of every 32-bit word (as integers), added into y's
// first 64 words (x unused: the signature of the product forms).
__global__ void __launch_bounds__(kThreads)
    read_all(const __half* w, const __half* /*x*/, __half* y) {
  unsigned* out = reinterpret_cast<unsigned*>(y);
  const uint4* v = reinterpret_cast<const uint4*>(w);
  const size_t n = (size_t)kN * kVec, step = (size_t)gridDim.x * kThreads;
  prefetch_rows(w, blockIdx.x * 4, 4);
  wait_prior();
  let_next();
  unsigned s = 0;
  size_t i = blockIdx.x * (size_t)kThreads + threadIdx.x;
  for (; i + 3 * step < n; i += 4 * step) {
    uint4 r[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) r[u] = stream16(v + i + u * step);
#pragma unroll
    for (int u = 0; u < 4; ++u) s += r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
  }
  for (; i < n; i += step) {
    const uint4 r = stream16(v + i);
    s += r.x ^ r.y ^ r.z ^ r.w;
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out + blockIdx.x % 64, s);
}

template <int M>
__device__ __forceinline__ void load_x(const __half* x, float (*sx)[kK]) {
  for (int e = threadIdx.x; e < M * kK; e += kThreads) sx[e / kK][e % kK] = __half2float(x[e]);
  __syncthreads();
}

// A group of G lanes per row (G = 32 or 16), U rows per group in flight.
template <int M, int G, int U>
__global__ void __launch_bounds__(kThreads)
    rows(const __half* __restrict__ w, const __half* x, __half* y) {
  constexpr int kPer = kVec / G;  // vectors per lane per row: 3 or 6
  const int lane = threadIdx.x % G;
  const int groups = gridDim.x * (kThreads / G);
  const int group = blockIdx.x * (kThreads / G) + threadIdx.x / G;
  prefetch_rows(w, blockIdx.x * (kThreads / G) * U, (kThreads / G) * U);
  wait_prior();
  let_next();
  __shared__ float sx[M][kK];
  load_x<M>(x, sx);
  for (int r0 = group * U; r0 < kN; r0 += groups * U) {
    uint4 v[U][kPer];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int r = min(r0 + u, kN - 1);
      const uint4* row = reinterpret_cast<const uint4*>(w + (size_t)r * kK);
#pragma unroll
      for (int i = 0; i < kPer; ++i) v[u][i] = stream16(row + lane + G * i);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float s[M] = {};
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const __half2* h = reinterpret_cast<const __half2*>(&v[u][i]);
        const int k0 = (lane + G * i) * 8;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __half22float2(h[e]);
#pragma unroll
          for (int m = 0; m < M; ++m) s[m] += f.x * sx[m][k0 + 2 * e] + f.y * sx[m][k0 + 2 * e + 1];
        }
      }
#pragma unroll
      for (int m = 0; m < M; ++m) {
        for (int o = G / 2; o > 0; o >>= 1) s[m] += __shfl_xor_sync(0xffffffffu, s[m], o);
      }
      if (lane < M && r0 + u < kN) {
        float out = s[0];
#pragma unroll
        for (int m = 1; m < M; ++m) out = lane == m ? s[m] : out;
        y[(size_t)lane * kN + r0 + u] = __float2half(out);
      }
    }
  }
}

// Eight rows on tensor cores: out^T = w x^T with mma.m16n8k16 (A: 16 weight
// rows x 16 k, B: 16 k x the 8 tokens, float32 accumulators). A warp takes
// tiles of 16 rows, kChunks chunks of 32 k (two mma each) in flight; lane (g,
// t) loads 16 bytes at k = 32 c + 8 t of rows g and g + 8 straight into A's
// registers, and the matching x vector of token g from shared memory as B.
// Any order of k inside a sum is fine, so logical column 2t + e stands for k
// = 32 c + 8 t + e (first mma) or + 4 + e (second) and 2t + 8 + e for + 2 + e
// and + 6 + e: the fragments need no shuffle.
template <int kChunks>
__global__ void __launch_bounds__(kThreads)
    mma8(const __half* __restrict__ w, const __half* x, __half* y) {
  constexpr int kTiles = (kN + 15) / 16, kAll = kK / 32;  // 24 chunks per tile
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int warps = gridDim.x * (kThreads / 32);
  const int warp = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
  prefetch_rows(w, blockIdx.x * (kThreads / 32) * 16, (kThreads / 32) * 16);
  wait_prior();
  let_next();
  __shared__ __align__(16) __half sx[8][kK];
  for (int e = threadIdx.x; e < 8 * kVec; e += kThreads)
    reinterpret_cast<uint4*>(&sx[0][0])[e] = reinterpret_cast<const uint4*>(x)[e];
  __syncthreads();
  for (int tile = warp; tile < kTiles; tile += warps) {
    const int r0 = min(tile * 16 + g, kN - 1), r1 = min(tile * 16 + g + 8, kN - 1);
    const uint4* a0 = reinterpret_cast<const uint4*>(w + (size_t)r0 * kK) + t;
    const uint4* a1 = reinterpret_cast<const uint4*>(w + (size_t)r1 * kK) + t;
    float acc[4] = {};
    for (int c0 = 0; c0 < kAll; c0 += kChunks) {
      uint4 va[kChunks], vb[kChunks];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        va[c] = stream16(a0 + 4 * (c0 + c));
        vb[c] = stream16(a1 + 4 * (c0 + c));
      }
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const uint4 xb = reinterpret_cast<const uint4*>(&sx[g][0])[4 * (c0 + c) + t];
        // First mma: k = 32c + 8t + {0,1,4,5} ... A regs: {row g, cols 2t..}, {row g+8}, ...
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
            : "r"(va[c].x), "r"(vb[c].x), "r"(va[c].y), "r"(vb[c].y), "r"(xb.x), "r"(xb.y));
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
            : "r"(va[c].z), "r"(vb[c].z), "r"(va[c].w), "r"(vb[c].w), "r"(xb.z), "r"(xb.w));
      }
    }
    // acc: c0 (row g, token 2t), c1 (row g, token 2t + 1), c2, c3 (row g + 8).
    const int n0 = tile * 16 + g, n1 = n0 + 8;
    if (n0 < kN) {
      y[(size_t)(2 * t) * kN + n0] = __float2half(acc[0]);
      y[(size_t)(2 * t + 1) * kN + n0] = __float2half(acc[1]);
    }
    if (n1 < kN) {
      y[(size_t)(2 * t) * kN + n1] = __float2half(acc[2]);
      y[(size_t)(2 * t + 1) * kN + n1] = __float2half(acc[3]);
    }
  }
}

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t wn = (size_t)kN * kK;
  __half *w, *x, *y;
  CHECK(cudaMalloc(&w, kHeads * wn * sizeof(__half)));
  CHECK(cudaMalloc(&x, 8 * kK * sizeof(__half)));
  CHECK(cudaMalloc(&y, (size_t)kHeads * 8 * kN * sizeof(__half)));
  fill<<<528, 256, 0, s>>>(w, kHeads * wn, 1, 0.25f);
  fill<<<8, 256, 0, s>>>(x, 8 * kK, 2, 2.f);
  std::vector<__half> hw(wn), hx(8 * kK);
  CHECK(cudaMemcpyAsync(hw.data(), w, wn * sizeof(__half), cudaMemcpyDeviceToHost, s));
  CHECK(cudaMemcpyAsync(hx.data(), x, 8 * kK * sizeof(__half), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  std::vector<double> ref(8 * (size_t)kN);
  for (int m = 0; m < 8; ++m) {
    for (int n = 0; n < kN; ++n) {
      double a = 0;
      for (int k = 0; k < kK; ++k)
        a += (double)__half2float(hw[(size_t)n * kK + k]) * __half2float(hx[m * kK + k]);
      ref[(size_t)m * kN + n] = a;
    }
  }
  cudaLaunchAttribute early{};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  const double gb = wn * 2.0 / 1e9;
  // Times kHeads launches of `kernel` with `blocks_per_sm` blocks per SM and
  // checks rows 0..m-1 of the first head's output.
  auto run = [&](const char* name, auto kernel, int blocks_per_sm, int m, auto... extra) {
    int fit = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, kThreads, 0));
    const int per_sm = blocks_per_sm > 0 ? std::min(blocks_per_sm, fit) : fit;
    CHECK(cudaMemsetAsync(y, 0, (size_t)kHeads * 8 * kN * sizeof(__half), s));
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int h = 0; h < kHeads; ++h) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(sms * per_sm);
      cfg.blockDim = dim3(kThreads);
      cfg.stream = s;
      cfg.attrs = &early;
      cfg.numAttrs = 1;
      CHECK(cudaLaunchKernelEx(&cfg, kernel, (const __half*)(w + h * wn), extra...,
                               (decltype(y))(y + (size_t)h * 8 * kN)));
    }
    CHECK(cudaStreamEndCapture(s, &g));
    const float us = replay_us(g, s, 50) / kHeads;
    double err = 0;
    if (m > 0) {
      std::vector<__half> out((size_t)m * kN);
      CHECK(cudaMemcpy(out.data(), y, out.size() * sizeof(__half), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < out.size(); ++i)
        err = std::fmax(err, std::fabs(__half2float(out[i]) - ref[i]) / (1.0 + std::fabs(ref[i])));
    }
    std::printf("%-28s %2d blocks/SM %8.2f us per head %6.2f TB/s  rel err %.2g\n", name, per_sm,
                us, gb / us * 1e3, err);
  };
  for (int round = 0; round < 2; ++round) {
    run("read", read_all, 0, 0, (const __half*)x);
    run("m1 rows1", rows<1, 32, 1>, 0, 1, (const __half*)x);
    run("m1 rows2", rows<1, 32, 2>, 0, 1, (const __half*)x);
    run("m1 rows4", rows<1, 32, 4>, 0, 1, (const __half*)x);
    run("m1 half2", rows<1, 16, 2>, 0, 1, (const __half*)x);
    run("m1 half4", rows<1, 16, 4>, 0, 1, (const __half*)x);
    run("m1 rows4, 2 blocks/SM", rows<1, 32, 4>, 2, 1, (const __half*)x);
    run("m8 rows2", rows<8, 32, 2>, 0, 8, (const __half*)x);
    run("m8 mma 4 chunks", mma8<4>, 0, 8, (const __half*)x);
    run("m8 mma 6 chunks", mma8<6>, 0, 8, (const __half*)x);
    run("m8 mma 8 chunks", mma8<8>, 0, 8, (const __half*)x);
  }
  return 0;
}
