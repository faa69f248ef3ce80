// What the linear-layer probes share (tile_gemm.cu, cluster_gemm.cu): the
// LayerNorm as its own kernel and cuBLASLt's product with kiln's epilogues,
// the references the generated forms are timed and checked against.
#pragma once

#include <cublasLt.h>
#include <cuda_fp16.h>

#include <cmath>
#include <utility>
#include <vector>

#include "lt_probe.h"
#include "probe.h"

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp16(unsigned dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(ok ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ void ldsm4(unsigned a, unsigned& r0, unsigned& r1, unsigned& r2,
                                      unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(a)
               : "memory");
}
__device__ __forceinline__ void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ float gelu(float x) {
  const float u = 0.7978845608f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.f + tanhf(u));
}

// A warp's MI x NI tiles of m16n8 over KSTEPS steps of 16 k: `abase` and
// `bbase` are this lane's ldmatrix addresses for the first step, rows P
// halves apart (A: 16 rows per tile; B: two n8 tiles per ldmatrix).
template <int MI, int NI, int KSTEPS, int P>
__device__ __forceinline__ void warp_mma(float (&acc)[MI][NI][4], unsigned abase, unsigned bbase,
                                         int skip = 0) {
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk) {
    if (skip) break;
    unsigned af[MI][4], bf[NI / 2][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
      ldsm4(abase + (mi * 16 * P + kk * 16) * 2, af[mi][0], af[mi][1], af[mi][2], af[mi][3]);
#pragma unroll
    for (int np = 0; np < NI / 2; ++np)
      ldsm4(bbase + (np * 16 * P + kk * 16) * 2, bf[np][0], bf[np][1], bf[np][2], bf[np][3]);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int np = 0; np < NI / 2; ++np) {
        mma(acc[mi][2 * np], af[mi], bf[np][0], bf[np][1]);
        mma(acc[mi][2 * np + 1], af[mi], bf[np][2], bf[np][3]);
      }
  }
}

// The norm as its own kernel: a warp per row with scalar loads (slower than
// kiln's: about 6 us at 128 rows of 768 in a graph, where kiln's takes
// about 3.2). `early`: it waits for the kernel before (early launch).
__global__ void layer_norm(const __half* x, const __half* w, const __half* b, __half* y, int m,
                           int k, bool early) {
  if (early) {
    wait_prior();
    let_next();
  }
  const int row = blockIdx.x * 4 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= m) return;
  float sum = 0.f, sq = 0.f;
  for (int c = lane; c < k; c += 32) {
    const float f = __half2float(x[(size_t)row * k + c]);
    sum += f;
    sq += f * f;
  }
  for (int o = 16; o > 0; o >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
    sq += __shfl_xor_sync(0xffffffffu, sq, o);
  }
  const float mean = sum / k, rstd = rsqrtf(fmaxf(sq / k - mean * mean, 0.f) + 1e-5f);
  for (int c = lane; c < k; c += 32) {
    const float f = (__half2float(x[(size_t)row * k + c]) - mean) * rstd;
    y[(size_t)row * k + c] = __float2half(f * __half2float(w[c]) + __half2float(b[c]));
  }
}

// out = act(x w^T + bias) (+ residual), the heuristic's first answer.
struct Lt {
  cublasLtHandle_t h;
  LtProblem p;
  cublasLtMatmulAlgo_t algo;
  void* ws;
  size_t ws_bytes = 32 << 20;
  bool beta_one;
  Lt(int m, int n, int k, const __half* bias, bool gelu_act, bool residual)
      : p(m, n, k, CUDA_R_16F, gelu_act ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS),
        beta_one(residual) {
    LT(cublasLtCreate(&h));
    p.set_bias(bias);
    const cudaDataType_t bt = CUDA_R_16F;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    const cublasLtMatmulHeuristicResult_t r = lt_first_answer(h, p, ws_bytes);
    algo = r.algo;
    CHECK(cudaMalloc(&ws, ws_bytes));
  }
  void run(const __half* w, const __half* x, const __half* res, __half* out, cudaStream_t s) {
    const float alpha = 1.f, beta = beta_one ? 1.f : 0.f;
    LT(cublasLtMatmul(h, p.desc, &alpha, w, p.a, x, p.b, &beta, beta_one ? res : out, p.c, out, p.c,
                      &algo, ws, ws_bytes, s));
  }
};

// n float16 values uniform in [shift - scale, shift + scale), from `seed`.
__half* random_halves(size_t n, float scale, float shift, unsigned seed) {
  std::vector<__half> h(n);
  unsigned s = seed;
  for (auto& v : h) {
    s = s * 1664525u + 1013904223u;
    v = __float2half(((s >> 8) * (1.0f / 16777216.0f) * 2.f - 1.f) * scale + shift);
  }
  __half* d;
  CHECK(cudaMalloc(&d, n * sizeof(__half)));
  CHECK(cudaMemcpy(d, h.data(), n * sizeof(__half), cudaMemcpyHostToDevice));
  return d;
}

// Largest |a - b| over n halves, and the largest |b| (for scale).
std::pair<float, float> max_diff(const __half* a, const __half* b, size_t n) {
  std::vector<__half> x(n), y(n);
  CHECK(cudaMemcpy(x.data(), a, n * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(y.data(), b, n * 2, cudaMemcpyDeviceToHost));
  float d = 0.f, big = 0.f;
  for (size_t i = 0; i < n; ++i) {
    const float u = __half2float(x[i]), v = __half2float(y[i]);
    d = std::isfinite(u) ? std::fmax(d, std::fabs(u - v)) : INFINITY;
    big = std::fmax(big, std::fabs(v));
  }
  return {d, big};
}

// Launches `kernel` early (programmatic stream serialization), in clusters
// of `ks` blocks along z where ks > 1.
template <class A>
void launch_early(void (*kernel)(A), dim3 grid, int threads, int smem, int ks, const A& a,
                  cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute at[2];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  at[1].id = cudaLaunchAttributeClusterDimension;
  at[1].val.clusterDim.x = 1;
  at[1].val.clusterDim.y = 1;
  at[1].val.clusterDim.z = ks;
  cfg.attrs = at;
  cfg.numAttrs = ks > 1 ? 2 : 1;
  CHECK(cudaLaunchKernelEx(&cfg, kernel, a));
}
