// What one dependent kernel costs inside a replayed CUDA graph, against one
// phase of a persistent kernel separated by a grid barrier (perf/RESULTS.md,
// eighteenth session). Not part of the build: a probe, compiled by hand with
//   nvcc -O3 -arch=sm_90 -o launch_floor perf/probes/launch_floor.cu
// ONLY_PAIRS=1 runs the pairs alone.
// Each of kChain steps is a 768x768 float16 product of one row (the size of
// GPT-2's attention projection): a warp per output, x read from the step
// before, every step its own weight (kChain x 1.2 MB: more than L2 holds, so
// weights come from DRAM as in a model).
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe.h"

constexpr int kN = 768, kK = 768, kChain = 64, kWarps = 8;
constexpr int kBlocks = kN / kWarps;  // 96

// mode 0: no early launch instructions; 1: L2 prefetch of the row, then wait;
// 2: the row loaded into registers before the wait.
template <int kMode>
__global__ void __launch_bounds__(256)
    step(const __half* __restrict__ w, const float* x, float* y) {
  const int lane = threadIdx.x & 31, n = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const uint4* row = reinterpret_cast<const uint4*>(w + (size_t)n * kK);
  uint4 r[3];
  if (kMode == 1) {
    for (int i = 0; i < 3; ++i) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + lane + 32 * i));
  }
  if (kMode == 2) {
    for (int i = 0; i < 3; ++i) r[i] = __ldg(row + lane + 32 * i);
  }
  if (kMode != 0) {
    wait_prior();
    let_next();
  }
  if (kMode != 2) {
    for (int i = 0; i < 3; ++i) r[i] = __ldg(row + lane + 32 * i);
  }
  float s = 0.f;
  for (int i = 0; i < 3; ++i) {
    const __half* h = reinterpret_cast<const __half*>(&r[i]);
    const int k0 = (lane + 32 * i) * 8;
    for (int e = 0; e < 8; ++e) s += __half2float(h[e]) * x[k0 + e];
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) y[n] = s * (1.0f / 16.0f) + 1.0f;
}

// A wider product with a LayerNorm-like prologue (GPT-2's FC: 768 -> 3072),
// kRows outputs per warp: x's statistics by a block reduction first, then
// each warp's rows against normalized x. Weight rows prefetched into L2
// before the wait, or (kEarly) loaded into registers before it.
template <int kN, int kRows, bool kNorm, bool kEarly = false>
__global__ void __launch_bounds__(256)
    wide(const __half* __restrict__ w, const float* x, float* y) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n0 = (blockIdx.x * kWarps + warp) * kRows;
  uint4 r[kRows][3];
  for (int q = 0; q < kRows; ++q) {
    const uint4* row = reinterpret_cast<const uint4*>(w + (size_t)(n0 + q) * kK);
    for (int i = 0; i < 3; ++i) {
      if (kEarly) {
        r[q][i] = __ldg(row + lane + 32 * i);
      } else {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(row + lane + 32 * i));
      }
    }
  }
  wait_prior();
  let_next();
  float scale = 1.f, shift = 0.f;
  if (kNorm) {
    __shared__ float part[kWarps][2];
    __shared__ float stats[2];
    float s = 0.f, sq = 0.f;
    for (int k = threadIdx.x; k < kK; k += 256) {
      const float v = x[k];
      s += v;
      sq += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) {
      s += __shfl_xor_sync(0xffffffffu, s, o);
      sq += __shfl_xor_sync(0xffffffffu, sq, o);
    }
    if (lane == 0) part[warp][0] = s, part[warp][1] = sq;
    __syncthreads();
    if (threadIdx.x == 0) {
      float a = 0.f, b = 0.f;
      for (int i = 0; i < kWarps; ++i) a += part[i][0], b += part[i][1];
      const float mean = a / kK, var = fmaxf(b / kK - mean * mean, 0.f);
      stats[0] = rsqrtf(var + 1e-5f);
      stats[1] = -mean * stats[0];
    }
    __syncthreads();
    scale = stats[0];
    shift = stats[1];
  }
  for (int q = 0; q < kRows && !kEarly; ++q) {
    const uint4* row = reinterpret_cast<const uint4*>(w + (size_t)(n0 + q) * kK);
    for (int i = 0; i < 3; ++i) r[q][i] = __ldg(row + lane + 32 * i);
  }
  for (int q = 0; q < kRows; ++q) {
    float s = 0.f;
    for (int i = 0; i < 3; ++i) {
      const __half* h = reinterpret_cast<const __half*>(&r[q][i]);
      const int k0 = (lane + 32 * i) * 8;
      for (int e = 0; e < 8; ++e) s += __half2float(h[e]) * (x[k0 + e] * scale + shift);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) y[n0 + q] = s * (1.0f / 16.0f) + 1.0f;
  }
}

// Lines [a, a + na) and [b, b + nb) bytes into L2, a thread per 128-byte line.
__global__ void prefetch_ranges(const char* a, size_t na, const char* b, size_t nb) {
  const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x,
               step = (size_t)gridDim.x * blockDim.x;
  for (size_t o = t * 128; o < na; o += step * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(a + o));
  for (size_t o = t * 128; o < nb; o += step * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(b + o));
}

// Every step in one kernel: the weight row of the next step loaded into
// registers before the barrier that orders its x. kWork = false: barriers
// alone. kBarrier 0: a release increment and acquire loads by one thread;
// 1: a fence, a relaxed increment, volatile loads, a fence.
template <bool kWork, int kBarrier>
__global__ void __launch_bounds__(256)
    persistent(const __half* __restrict__ w, float* xs, unsigned* count) {
  const int lane = threadIdx.x & 31, n = blockIdx.x * kWarps + (threadIdx.x >> 5);
  uint4 r[3];
  const uint4* row = reinterpret_cast<const uint4*>(w + (size_t)n * kK);
  if (kWork) {
    for (int i = 0; i < 3; ++i) r[i] = __ldg(row + lane + 32 * i);
  }
  for (int c = 0; c < kChain; ++c) {
    if (kWork) {
      const float4* x = reinterpret_cast<const float4*>(xs + (size_t)c * kN);
      float s = 0.f;
      for (int i = 0; i < 3; ++i) {
        const __half* h = reinterpret_cast<const __half*>(&r[i]);
        const int v0 = (lane + 32 * i) * 2;
        const float4 a = __ldcg(x + v0), b = __ldcg(x + v0 + 1);
        s += __half2float(h[0]) * a.x + __half2float(h[1]) * a.y + __half2float(h[2]) * a.z +
             __half2float(h[3]) * a.w + __half2float(h[4]) * b.x + __half2float(h[5]) * b.y +
             __half2float(h[6]) * b.z + __half2float(h[7]) * b.w;
      }
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0) xs[(size_t)(c + 1) * kN + n] = s * (1.0f / 16.0f) + 1.0f;
    }
    if (c + 1 < kChain) {
      if (kWork) {
        const uint4* next =
            reinterpret_cast<const uint4*>(w + (size_t)(c + 1) * kN * kK + (size_t)n * kK);
        for (int i = 0; i < 3; ++i) r[i] = __ldg(next + lane + 32 * i);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        const unsigned target = (unsigned)(c + 1) * gridDim.x;
        if (kBarrier == 0) {
          unsigned seen;
          asm volatile("atom.add.release.gpu.u32 %0, [%1], 1;"
                       : "=r"(seen)
                       : "l"(count)
                       : "memory");
          ++seen;
          while (seen < target) {
            asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
          }
        } else {
          __threadfence();
          atomicAdd(count, 1u);
          while (*(volatile unsigned*)count < target) {
          }
          __threadfence();
        }
      }
      __syncthreads();
    }
  }
}

__global__ void reset(unsigned* count) {
  *count = 0;
}
__global__ void tiny(float* p, long a, long b) {
  if (threadIdx.x == 0 && a == b) p[blockIdx.x] = 1.f;
}

// Host time of one launch call, over batches of 256 launches (each batch
// synchronized after its timing, so the queue never fills).
template <typename F>
double host_us(cudaStream_t s, F&& launch) {
  double total = 0;
  int calls = 0;
  for (int rep = 0; rep < 40; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 256; ++i) launch();
    const auto t1 = std::chrono::steady_clock::now();
    CHECK(cudaStreamSynchronize(s));
    if (rep >= 4) {
      total += std::chrono::duration<double, std::micro>(t1 - t0).count();
      calls += 256;
    }
  }
  return total / calls;
}

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  __half* w;
  float* xs;
  unsigned* count;
  const size_t wn = (size_t)kChain * kN * kK;
  CHECK(cudaMalloc(&w, wn * sizeof(__half)));
  CHECK(cudaMalloc(&xs, (size_t)(kChain + 1) * kN * sizeof(float)));
  CHECK(cudaMalloc(&count, sizeof(unsigned)));
  std::vector<__half> hw(wn);
  for (size_t i = 0; i < wn; ++i) hw[i] = __float2half((float)((i * 2654435761u) % 17) - 8.f);
  CHECK(cudaMemcpy(w, hw.data(), wn * sizeof(__half), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(xs, 0, (size_t)(kChain + 1) * kN * sizeof(float)));
  const int reps = 200;
  auto chain = [&](auto kernel, bool early, const char* what) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int c = 0; c < kChain; ++c) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(kBlocks);
      cfg.blockDim = dim3(256);
      cfg.stream = s;
      cudaLaunchAttribute at{};
      at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      at.val.programmaticStreamSerializationAllowed = 1;
      if (early) {
        cfg.attrs = &at;
        cfg.numAttrs = 1;
      }
      CHECK(cudaLaunchKernelEx(&cfg, kernel, (const __half*)(w + (size_t)c * kN * kK),
                               (const float*)(xs + (size_t)c * kN), xs + (size_t)(c + 1) * kN));
    }
    CHECK(cudaStreamEndCapture(s, &g));
    const float us = replay_us(g, s, reps);
    std::printf("%-44s %8.2f us per graph, %6.3f us per step\n", what, us, us / kChain);
  };
  const bool only_pairs = std::getenv("ONLY_PAIRS") != nullptr;
  if (!only_pairs) {
    chain(step<0>, false, "64 kernels, no early launch");
    chain(step<1>, true, "64 kernels, early launch, L2 prefetch");
    chain(step<2>, true, "64 kernels, early launch, row in registers");
  }
  // Pairs: a 768 -> 3072 product (its output feeds nothing: a 3072-wide
  // buffer per pair) after a 768 -> 768 one that reads the pair before's.
  float* wide_out;
  CHECK(cudaMalloc(&wide_out, (size_t)kChain * 3072 * sizeof(float)));
  __half* w_wide;
  CHECK(cudaMalloc(&w_wide, (size_t)(kChain / 2) * 3072 * kK * sizeof(__half)));
  CHECK(cudaMemset(w_wide, 0, (size_t)(kChain / 2) * 3072 * kK * sizeof(__half)));
  cudaStream_t side;
  CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> forks(kChain);
  for (auto& ev : forks) CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  // ahead: 0 no side branch; 1 the next pair's weights prefetched on a side
  // branch forked where each pair starts; 2 the pair after next.
  // hot: every pair reads pair 0's weights (7 MB, held in L2 after the first).
  auto pairs = [&](auto wide_kernel, int wide_blocks, const char* what, int ahead = 0,
                   int pf_blocks = 16, bool hot = false, bool first_early = false) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    if (ahead) {
      // The first pairs' weights, before anything (as a model's first layer would be).
      CHECK(cudaEventRecord(forks[0], s));
      CHECK(cudaStreamWaitEvent(side, forks[0]));
      for (int c = 0; c < ahead; ++c) {
        prefetch_ranges<<<pf_blocks, 256, 0, side>>>(
            (const char*)(w + (size_t)c * kN * kK), (size_t)kN * kK * 2,
            (const char*)(w_wide + (size_t)c * 3072 * kK), (size_t)3072 * kK * 2);
      }
    }
    cudaLaunchAttribute at{};
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    for (int c = 0; c < kChain / 2; ++c) {
      if (ahead && c + ahead < kChain / 2) {
        CHECK(cudaEventRecord(forks[c + 1], s));
        CHECK(cudaStreamWaitEvent(side, forks[c + 1]));
        prefetch_ranges<<<pf_blocks, 256, 0, side>>>(
            (const char*)(w + (size_t)(c + ahead) * kN * kK), (size_t)kN * kK * 2,
            (const char*)(w_wide + (size_t)(c + ahead) * 3072 * kK), (size_t)3072 * kK * 2);
      }
      cudaLaunchConfig_t cfg{};
      cfg.blockDim = dim3(256);
      cfg.stream = s;
      cfg.attrs = &at;
      cfg.numAttrs = 1;
      cfg.gridDim = dim3(kBlocks);
      const int wc = hot ? 0 : c;
      CHECK(cudaLaunchKernelEx(&cfg, first_early ? step<2> : step<1>,
                               (const __half*)(w + (size_t)wc * kN * kK),
                               (const float*)(xs + (size_t)c * kN), xs + (size_t)(c + 1) * kN));
      cfg.gridDim = dim3(wide_blocks);
      CHECK(cudaLaunchKernelEx(&cfg, wide_kernel, (const __half*)(w_wide + (size_t)wc * 3072 * kK),
                               (const float*)(xs + (size_t)(c + 1) * kN),
                               wide_out + (size_t)c * 3072));
    }
    if (ahead) {
      CHECK(cudaEventRecord(forks[0], side));
      CHECK(cudaStreamWaitEvent(s, forks[0]));
    }
    CHECK(cudaStreamEndCapture(s, &g));
    const float us = replay_us(g, s, reps);
    std::printf("%-44s %8.2f us per graph, %6.3f us per pair\n", what, us, us / (kChain / 2));
  };
  pairs(wide<3072, 1, false>, 3072 / kWarps, "pairs 768 + 3072 (384 blocks), no norm");
  pairs(wide<3072, 1, true>, 3072 / kWarps, "pairs 768 + 3072 (384 blocks), norm");
  pairs(wide<3072, 2, true>, 3072 / kWarps / 2, "pairs 768 + 3072 (192 blocks), norm");
  pairs(wide<3072, 3, true>, 3072 / kWarps / 3, "pairs 768 + 3072 (128 blocks), norm");
  pairs(wide<3072, 1, false, true>, 3072 / kWarps, "pairs, no norm, rows in registers early");
  pairs(wide<3072, 1, true, true>, 3072 / kWarps, "pairs, norm, rows in registers early");
  pairs(wide<3072, 1, true, true>, 3072 / kWarps, "pairs, norm, both products' rows early", 0, 16,
        false, true);
  pairs(wide<3072, 2, true, true>, 3072 / kWarps / 2, "pairs, norm, rows early (192 blocks)");
  pairs(wide<3072, 1, true>, 3072 / kWarps, "pairs, norm, weights in L2", 0, 16, true);
  pairs(wide<3072, 1, false>, 3072 / kWarps, "pairs, no norm, weights in L2", 0, 16, true);
  pairs(wide<3072, 1, true>, 3072 / kWarps, "pairs, norm, next pair prefetched aside", 1);
  pairs(wide<3072, 1, true>, 3072 / kWarps, "pairs, norm, 2nd pair ahead prefetched aside", 2);
  pairs(wide<3072, 1, true>, 3072 / kWarps, "pairs, norm, next pair aside, 4 blocks", 1, 4);
  pairs(wide<3072, 1, true>, 3072 / kWarps, "pairs, norm, next pair aside, 64 blocks", 1, 64);
  if (only_pairs) return 0;
  auto one = [&](auto kernel, const char* what) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    reset<<<1, 1, 0, s>>>(count);
    kernel<<<kBlocks, 256, 0, s>>>(w, xs, count);
    CHECK(cudaStreamEndCapture(s, &g));
    const float us = replay_us(g, s, reps);
    std::printf("%-44s %8.2f us per graph, %6.3f us per step\n", what, us, us / kChain);
  };
  one(persistent<true, 0>, "one kernel, 64 phases, acquire barrier");
  one(persistent<true, 1>, "one kernel, 64 phases, fenced barrier");
  one(persistent<false, 0>, "one kernel, 64 acquire barriers, no work");
  one(persistent<false, 1>, "one kernel, 64 fenced barriers, no work");
  // An empty graph of one trivial kernel: the floor of a replay.
  {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    reset<<<1, 1, 0, s>>>(count);
    CHECK(cudaStreamEndCapture(s, &g));
    std::printf("%-44s %8.2f us per graph\n", "one trivial kernel", replay_us(g, s, reps));
  }
  // Host cost of the launch calls kiln can make for one kernel.
  {
    float* p = xs;
    long a = 1, b = 2;
    void* params[] = {&p, &a, &b};
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(16);
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    cudaLaunchAttribute at{};
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    std::printf("%-44s %8.3f us\n", "host: cudaLaunchKernel", host_us(s, [&] {
                  CHECK(cudaLaunchKernel((const void*)tiny, dim3(16), dim3(256), params, 0, s));
                }));
    std::printf("%-44s %8.3f us\n", "host: cudaLaunchKernelExC, no attribute",
                host_us(s, [&] { CHECK(cudaLaunchKernelExC(&cfg, (const void*)tiny, params)); }));
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    std::printf("%-44s %8.3f us\n", "host: cudaLaunchKernelExC, early launch",
                host_us(s, [&] { CHECK(cudaLaunchKernelExC(&cfg, (const void*)tiny, params)); }));
    cudaFunction_t fn;
    CHECK(cudaGetFuncBySymbol(&fn, (const void*)tiny));
    CUfunction cf = reinterpret_cast<CUfunction>(fn);
    using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, unsigned, CUstream, void**, void**);
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &entry, 12000, cudaEnableDefault, &q));
    auto cu_launch = reinterpret_cast<LaunchFn>(entry);
    std::printf("%-44s %8.3f us\n", "host: cuLaunchKernel (driver entry point)", host_us(s, [&] {
                  if (cu_launch(cf, 16, 1, 1, 256, 1, 1, 0, s, params, nullptr) != CUDA_SUCCESS)
                    std::exit(2);
                }));
    // One kernel as a graph: the launch alone, and with its pointer
    // argument updated first (a fresh result every call).
    {
      cudaGraph_t g;
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      CHECK(cudaLaunchKernel((const void*)tiny, dim3(16), dim3(256), params, 0, s));
      CHECK(cudaStreamEndCapture(s, &g));
      cudaGraphExec_t e;
      CHECK(cudaGraphInstantiate(&e, g, 0));
      size_t count = 1;
      cudaGraphNode_t node;
      CHECK(cudaGraphGetNodes(g, &node, &count));
      cudaKernelNodeParams kp{};
      CHECK(cudaGraphKernelNodeGetParams(node, &kp));
      std::printf("%-44s %8.3f us\n", "host: cudaGraphLaunch, one kernel",
                  host_us(s, [&] { CHECK(cudaGraphLaunch(e, s)); }));
      int flip = 0;
      std::printf("%-44s %8.3f us\n", "host: kernel node update + cudaGraphLaunch", host_us(s, [&] {
                    p = xs + 64 * (flip ^= 1);
                    kp.kernelParams = params;
                    CHECK(cudaGraphExecKernelNodeSetParams(e, node, &kp));
                    CHECK(cudaGraphLaunch(e, s));
                  }));
      CHECK(cudaGraphExecDestroy(e));
      CHECK(cudaGraphDestroy(g));
    }
    int dev = 0;
    std::printf("%-44s %8.3f us\n", "host: cudaGetDevice",
                host_us(s, [&] { CHECK(cudaGetDevice(&dev)); }));
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    std::printf("%-44s %8.3f us\n", "host: cudaEventRecord",
                host_us(s, [&] { CHECK(cudaEventRecord(ev, s)); }));
    cudaStreamCaptureStatus st;
    std::printf("%-44s %8.3f us\n", "host: cudaStreamIsCapturing",
                host_us(s, [&] { CHECK(cudaStreamIsCapturing(s, &st)); }));
  }
  CHECK(cudaDeviceSynchronize());
  return 0;
}
