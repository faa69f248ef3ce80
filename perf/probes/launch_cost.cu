// What one direct kernel launch costs the host, by the way it is made
// (perf/RESULTS.md, thirty-seventh session). Not part of the build: a probe,
// compiled by hand with
//   nvcc -O3 -arch=sm_90 -o launch_cost perf/probes/launch_cost.cu -lcuda
// kiln launches its generated kernels as cudaKernel_t handles of a loaded
// library through cudaLaunchKernelExC, with the early-launch attribute on
// sm_90 (jit/codegen_cuda/kernel_loader.cpp). Each form below launches the
// same one-block kernel; "host" is the CPU time of one launch call (bursts of
// 100 launches, synchronized between bursts and not timed), "latency" the
// wall time of one launch and a stream synchronize (p50 over the calls).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "probe.h"


__global__ void body(float* y, const float* x0, const float* x1, const float* x2,
                     const float* x3, const float* x4, const float* x5, const float* x6,
                     long long n, int a, int b, int c, int d, int e, int f) {
  wait_prior();
  let_next();
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x0[i] * 2.f + (float)(a + b + c + d + e + f) + x1[0] * 0.f;
}

using Clock = std::chrono::steady_clock;

static double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Host µs per launch, and p50 µs of launch + synchronize.
static void measure(const char* name, cudaStream_t s, const std::function<void()>& launch) {
  for (int i = 0; i < 200; ++i) launch();
  CHECK(cudaStreamSynchronize(s));
  double host = 0;
  const int bursts = 50, per = 100;
  for (int b = 0; b < bursts; ++b) {
    const auto t0 = Clock::now();
    for (int i = 0; i < per; ++i) launch();
    host += us_since(t0);
    CHECK(cudaStreamSynchronize(s));
  }
  std::vector<double> lat;
  for (int i = 0; i < 2000; ++i) {
    const auto t0 = Clock::now();
    launch();
    CHECK(cudaStreamSynchronize(s));
    lat.push_back(us_since(t0));
  }
  std::sort(lat.begin(), lat.end());
  std::printf("%-44s host %6.2f us   launch+sync p50 %6.2f p10 %6.2f p90 %6.2f\n", name,
              host / (bursts * per), lat[lat.size() / 2], lat[lat.size() / 10],
              lat[lat.size() * 9 / 10]);
}

int main() {
  CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  long long n = 4096;
  float *y, *x;
  CHECK(cudaMalloc(&y, n * 4));
  CHECK(cudaMalloc(&x, n * 4));
  CHECK(cudaMemset(x, 0, n * 4));
  int a = 1, b = 2, c = 3, d = 4, e = 5, f = 6;
  void* params[] = {&y, &x, &x, &x, &x, &x, &x, &x, &n, &a, &b, &c, &d, &e, &f};
  const dim3 grid(16), block(256);

  cudaLaunchAttribute early{};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  auto config = [&](bool attr) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = s;
    if (attr) {
      cfg.attrs = &early;
      cfg.numAttrs = 1;
    }
    return cfg;
  };

  cudaKernel_t kernel = nullptr;
  CHECK(cudaGetKernel(&kernel, body));
  cudaFunction_t fn = nullptr;
  CHECK(cudaGetFuncBySymbol(&fn, (const void*)body));
  CUfunction cufn = reinterpret_cast<CUfunction>(fn);

  measure("<<<>>> (host stub)", s, [&] { body<<<grid, block, 0, s>>>(y, x, x, x, x, x, x, x, n, a, b, c, d, e, f); });
  measure("cudaLaunchKernel (host stub)", s,
          [&] { CHECK(cudaLaunchKernel((const void*)body, grid, block, params, 0, s)); });
  for (bool attr : {false, true}) {
    cudaLaunchConfig_t cfg = config(attr);
    measure(attr ? "ExC stub, early attr" : "ExC stub, no attr", s,
            [&] { CHECK(cudaLaunchKernelExC(&cfg, (const void*)body, params)); });
    measure(attr ? "ExC cudaKernel_t, early attr (kiln)" : "ExC cudaKernel_t, no attr", s,
            [&] { CHECK(cudaLaunchKernelExC(&cfg, (const void*)kernel, params)); });
  }
  measure("cuLaunchKernel CUfunction", s, [&] {
    if (cuLaunchKernel(cufn, grid.x, 1, 1, block.x, 1, 1, 0, s, params, nullptr) != CUDA_SUCCESS)
      std::exit(1);
  });
  CUlaunchAttribute cu_early{};
  cu_early.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  cu_early.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig cucfg{};
  cucfg.gridDimX = grid.x;
  cucfg.gridDimY = cucfg.gridDimZ = 1;
  cucfg.blockDimX = block.x;
  cucfg.blockDimY = cucfg.blockDimZ = 1;
  cucfg.hStream = s;
  cucfg.attrs = &cu_early;
  cucfg.numAttrs = 1;
  measure("cuLaunchKernelEx CUfunction, early attr", s, [&] {
    if (cuLaunchKernelEx(&cucfg, cufn, params, nullptr) != CUDA_SUCCESS) std::exit(1);
  });
  // A memset and an event, for the floor of launch + synchronize.
  measure("cudaMemsetAsync 16 KB", s, [&] { CHECK(cudaMemsetAsync(y, 0, n * 4, s)); });
  // The same kernel on the legacy default stream and on a blocking stream.
  cudaStream_t blocking;
  CHECK(cudaStreamCreate(&blocking));
  cudaLaunchConfig_t bcfg = config(true);
  bcfg.stream = blocking;
  measure("ExC cudaKernel_t, early attr, blocking stream", blocking,
          [&] { CHECK(cudaLaunchKernelExC(&bcfg, (const void*)kernel, params)); });
  // A one-node graph of the kernel.
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  body<<<grid, block, 0, s>>>(y, x, x, x, x, x, x, x, n, a, b, c, d, e, f);
  CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge;
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  measure("cudaGraphLaunch, one node", s, [&] { CHECK(cudaGraphLaunch(ge, s)); });
  CHECK(cudaDeviceSynchronize());
  std::printf("done\n");
  return 0;
}
