// Whether cuBLASLt's kernels can start early behind a kiln kernel (Note
// [Early launch] in jit/codegen_cuda/kernel_loader.h): a captured cuBLASLt
// node is always entered by an ordinary edge, so it starts only after the
// kernel before it has finished and flushed. If its kernels wait for their
// predecessor themselves (griddepcontrol.wait), that edge may be made
// programmatic after capture. Not part of the build: a probe, compiled by
// hand with
//   nvcc -O2 -arch=sm_90 -o lt_early perf/probes/lt_early.cu -lcublasLt -lcuda
// A chain of 12 layers: a small kiln-like kernel (launched early) writes X
// from the previous product, then cuBLASLt computes D = X W^T + bias.
// Printed per shape: the cuBLASLt kernels' names, µs per layer with ordinary
// and with programmatic edges into them, and a test of the second form: the
// small kernel lets its successor start at once, then spins 20 µs before it
// writes X, over an X full of NaN; a cuBLASLt kernel that does not wait reads
// the NaN.
#include <cublasLt.h>
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lt_probe.h"
#include "probe.h"

namespace {

constexpr int kLayers = 12;

// Early: lets the next kernel start before anything else (the test's worst
// case); otherwise after its own wait, as kiln's kernels do.
__global__ void prep(const __half* src, size_t src_n, __half* x, size_t n, long long spin_ns,
                     int early) {
  if (early) let_next();
  wait_prior();
  if (!early) let_next();
  if (spin_ns > 0) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < (unsigned long long)spin_ns);
  }
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    x[i] = __float2half(__half2float(src[i % src_n]) * 0.01f + 0.1f);
  }
}

using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
using FuncName = CUresult (*)(const char**, CUfunction);
using KernelName = CUresult (*)(const char**, CUkernel);

template <class F>
F driver(const char* name) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion(name, &f, 12030, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "no driver entry point %s\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(f);
}

struct Shape {
  int m, n, k;
  cublasLtEpilogue_t epilogue;
};

// Turns every edge from a `prep` node into an early one; returns how many.
int make_early(cudaGraph_t g) {
  size_t n = 0;
  CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  CHECK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &n));
  int changed = 0;
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType ta, tb;
    CHECK(cudaGraphNodeGetType(from[i], &ta));
    CHECK(cudaGraphNodeGetType(to[i], &tb));
    if (ta != cudaGraphNodeTypeKernel || tb != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeParams pa{};
    if (cudaGraphKernelNodeGetParams(from[i], &pa) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;  // a library node: not ours
    }
    if (pa.func != reinterpret_cast<void*>(prep)) continue;
    cudaKernelNodeParams pb{};
    if (cudaGraphKernelNodeGetParams(to[i], &pb) == cudaSuccess) continue;  // ours
    (void)cudaGetLastError();
    if (data[i].type == cudaGraphDependencyTypeProgrammatic) continue;
    CHECK(cudaGraphRemoveDependencies(g, &from[i], &to[i], &data[i], 1));
    cudaGraphEdgeData e{};
    e.type = cudaGraphDependencyTypeProgrammatic;
    e.from_port = cudaGraphKernelNodePortProgrammatic;
    CHECK(cudaGraphAddDependencies(g, &from[i], &to[i], &e, 1));
    ++changed;
  }
  return changed;
}

void names(cudaGraph_t g) {
  static GetParams get = driver<GetParams>("cuGraphKernelNodeGetParams");
  static FuncName func_name = driver<FuncName>("cuFuncGetName");
  static KernelName kernel_name = driver<KernelName>("cuKernelGetName");
  size_t n = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  CHECK(cudaGraphGetNodes(g, nodes.data(), &n));
  std::vector<std::string> seen;
  for (cudaGraphNode_t node : nodes) {
    CUDA_KERNEL_NODE_PARAMS p{};
    if (get(reinterpret_cast<CUgraphNode>(node), &p) != CUDA_SUCCESS) continue;
    const char* s = nullptr;
    const CUresult got = p.func   ? func_name(&s, p.func)
                         : p.kern ? kernel_name(&s, p.kern)
                                  : CUDA_ERROR_INVALID_VALUE;
    if (got != CUDA_SUCCESS || !s) continue;
    if (std::strstr(s, "prep")) continue;
    bool dup = false;
    for (const std::string& x : seen) dup |= x == s;
    if (!dup) {
      seen.push_back(s);
      std::printf("  kernel: %s\n", s);
    }
  }
}

void measure(const Shape& sh, cublasLtHandle_t handle, cudaStream_t s) {
  const size_t xs = (size_t)sh.m * sh.k, ws = (size_t)sh.n * sh.k, ds = (size_t)sh.m * sh.n;
  __half *x, *w, *d, *bias, *seed;
  void* scratch;
  const size_t scratch_bytes = size_t{32} << 20;
  CHECK(cudaMalloc(&x, kLayers * xs * 2));
  CHECK(cudaMalloc(&w, kLayers * ws * 2));
  CHECK(cudaMalloc(&d, kLayers * ds * 2));
  CHECK(cudaMalloc(&bias, kLayers * (size_t)sh.n * 2));
  CHECK(cudaMalloc(&seed, ds * 2));
  CHECK(cudaMalloc(&scratch, scratch_bytes));
  fill<<<264, 256, 0, s>>>(w, kLayers * ws, 1, 0.1f);
  fill<<<264, 256, 0, s>>>(bias, kLayers * (size_t)sh.n, 2, 1.f);
  fill<<<264, 256, 0, s>>>(seed, ds, 3, 1.f);

  LtProblem prob(sh.m, sh.n, sh.k, CUDA_R_16F, sh.epilogue);
  const cublasLtMatmulHeuristicResult_t r = lt_first_answer(handle, prob, scratch_bytes);
  const float alpha = 1, beta = 0;
  const int blocks = 132;

  auto capture = [&](long long spin_ns, int early, bool programmatic) {
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int l = 0; l < kLayers; ++l) {
      const __half* src = l == 0 ? seed : d + (l - 1) * ds;
      __half* xl = x + l * xs;
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(blocks);
      cfg.blockDim = dim3(256);
      cfg.stream = s;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      CHECK(cudaLaunchKernelEx(&cfg, prep, src, ds, xl, xs, spin_ns, early));
      const __half* bl = bias + (size_t)l * sh.n;
      prob.set_bias(bl);
      LT(cublasLtMatmul(handle, prob.desc, &alpha, w + l * ws, prob.a, xl, prob.b, &beta,
                        d + l * ds, prob.c, d + l * ds, prob.c, &r.algo, scratch, r.workspaceSize,
                        s));
    }
    CHECK(cudaStreamEndCapture(s, &g));
    if (programmatic) {
      const int changed = make_early(g);
      if (changed != kLayers)
        std::printf("  (%d edges made early, expected %d)\n", changed, kLayers);
    }
    return g;
  };

  std::printf("\nM %d N %d K %d epilogue %d, workspace %zu\n", sh.m, sh.n, sh.k,
              static_cast<int>(sh.epilogue), r.workspaceSize);
  {
    cudaGraph_t g = capture(0, 0, false);
    names(g);
    CHECK(cudaGraphDestroy(g));
  }
  float plain = 1e30f, early = 1e30f;
  for (int round = 0; round < 3; ++round) {
    plain = std::fmin(plain, replay_us(capture(0, 0, false), s, 200) / kLayers);
    early = std::fmin(early, replay_us(capture(0, 0, true), s, 200) / kLayers);
  }
  std::printf("  ordinary edges %.2f us per layer, programmatic %.2f (%+.2f)\n", plain, early,
              early - plain);

  // The reference, then the test: X full of NaN, the writer 20 us late.
  auto last = [&] {
    std::vector<__half> h(ds);
    CHECK(cudaMemcpy(h.data(), d + (kLayers - 1) * ds, ds * 2, cudaMemcpyDeviceToHost));
    std::vector<float> f(ds);
    for (size_t i = 0; i < ds; ++i) f[i] = __half2float(h[i]);
    return f;
  };
  auto once = [&](cudaGraph_t g) {
    cudaGraphExec_t e;
    CHECK(cudaMemset(x, 0xff, kLayers * xs * 2));
    CHECK(cudaMemset(d, 0, kLayers * ds * 2));
    CHECK(cudaGraphInstantiate(&e, g, 0));
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
    return last();
  };
  const std::vector<float> ref = once(capture(0, 0, false));
  for (int trial = 0; trial < 3; ++trial) {
    const std::vector<float> got = once(capture(20000, 1, true));
    size_t nans = 0;
    double diff = 0;
    for (size_t i = 0; i < ds; ++i) {
      if (std::isnan(got[i]))
        ++nans;
      else
        diff = std::fmax(diff, std::fabs(got[i] - ref[i]));
    }
    std::printf("  late writer, early cuBLASLt: %zu NaN of %zu, largest difference %g\n", nans, ds,
                diff);
  }
  cudaFree(x), cudaFree(w), cudaFree(d), cudaFree(bias), cudaFree(seed), cudaFree(scratch);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasLtHandle_t handle;
  LT(cublasLtCreate(&handle));
  std::printf("cuBLASLt %zu\n", cublasLtGetVersion());
  const Shape shapes[] = {
      {128, 2304, 768, CUBLASLT_EPILOGUE_BIAS},      {128, 768, 768, CUBLASLT_EPILOGUE_BIAS},
      {128, 3072, 768, CUBLASLT_EPILOGUE_GELU_BIAS}, {128, 768, 3072, CUBLASLT_EPILOGUE_BIAS},
      {1024, 2304, 768, CUBLASLT_EPILOGUE_BIAS},     {1024, 768, 3072, CUBLASLT_EPILOGUE_BIAS},
      {32, 4096, 1024, CUBLASLT_EPILOGUE_RELU_BIAS}, {32, 1024, 4096, CUBLASLT_EPILOGUE_BIAS},
  };
  for (const Shape& sh : shapes) measure(sh, handle, s);
  return 0;
}
