// What the probes in this folder share: a check of CUDA runtime calls, the
// two halves of early launch (Note [Early launch] in
// jit/codegen_cuda/kernel_loader.h), hashed float16 fills and the timing of
// a graph's replays.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t err_ = (x);                                                             \
    if (err_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

__device__ __forceinline__ void wait_prior() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void let_next() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// p[i] for i < n: a hash of (i, seed) as a uniform value in [-scale / 2, scale / 2).
__global__ void fill(__half* p, size_t n, unsigned seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    p[i] = __float2half((((h >> 8) & 0xffff) / 65536.f - 0.5f) * scale);
  }
}

// Microseconds per replay of `exec` over `reps` replays after 20 to warm up.
inline float time_graph(cudaGraphExec_t exec, cudaStream_t s, int reps) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 20; ++i) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaEventRecord(a, s));
  for (int i = 0; i < reps; ++i) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaEventRecord(b, s));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms * 1000.f / reps;
}

// Instantiates `g`, times `reps` replays, and destroys both.
inline float replay_us(cudaGraph_t g, cudaStream_t s, int reps) {
  cudaGraphExec_t e;
  CHECK(cudaGraphInstantiate(&e, g, 0));
  const float us = time_graph(e, s, reps);
  CHECK(cudaGraphExecDestroy(e));
  CHECK(cudaGraphDestroy(g));
  return us;
}
