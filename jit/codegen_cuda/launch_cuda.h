#pragma once

#include <cstdint>
#include <memory>

#include "jit/passes/fusion.h"

namespace kiln::jit::cuda {

// Runs a fused group whose tensors are on one CUDA device as one generated
// kernel on the device's current stream: NVRTC-compiled to SASS for the
// device's arch (through the memory and disk kernel caches), loaded with
// cudaLibraryLoadData, launched with the iteration's sizes and strides as
// arguments (Note [CUDA pointwise ABI]). Returns false, having done nothing,
// when the group is outside what the generator handles.
bool run_pointwise_cuda(const FusedGroup& group);

// Runs a reduction group (Note [Reduction kernels]) whose tensors are on one
// CUDA device as one generated kernel: prologue, reduction and epilogue
// (Note [CUDA reduction ABI]), through the same kernel caches. Returns false,
// having done nothing, when the group is outside what the generator handles
// (logged under KILN_LOGS=fusion); the caller then runs its nodes one by one.
bool run_reduction_cuda(const ReductionGroup& group);
// Reduction groups run fused on CUDA so far in this process (tests, logs).
int64_t cuda_reductions_run();

// Note [Kernels compiled side by side]
// A plan's first run used to build its missing kernels one at a time, as
// each step launched, on one core: NVRTC and ptxas take from 20 ms (a small
// pointwise kernel) to over 300 ms (the decode attention) a kernel, so
// gpt2-decode's first call with an empty kernel cache spent 0.53 s on an
// H200's host of sixteen cores. jit::compile now runs an instance's first
// call twice over: once under a stream capture that is thrown away, in
// which load_kernel, instead of building a kernel it lacks, keeps its name
// and source and hands back a placeholder (a kernel with no parameters that
// only waits, Note [Early launch]) whose launches are recorded and never
// run; then it builds every kernel kept, side by side on
// the host's cores (through the disk cache), and runs the call for real,
// every kernel now ready. Nothing of the first pass reaches memory the
// caller can see: it ran nothing. Where it cannot go through (an op that
// reads a value on the host, a library call that fails while captured),
// what it kept so far is built the same way and the rest as before, one by
// one. Measured (H200 host, empty kernel cache; perf/RESULTS.md, nineteenth
// session): gpt2-decode b1's first call 531 -> 209 ms; gpt2 1x1's, whose
// six kernels are small, 105-141 -> 164-201 ms (the placeholder is one
// more kernel to build, and kernels built at once each take several times
// longer than alone). KILN_PARALLEL_BUILD=0 leaves the first pass out.
//
// While a KernelDiscovery is alive on a thread (until stop()), load_kernel
// on that thread keeps the kernels it lacks instead of building them.
class KernelDiscovery {
 public:
  KernelDiscovery();
  ~KernelDiscovery();
  KernelDiscovery(const KernelDiscovery&) = delete;
  KernelDiscovery& operator=(const KernelDiscovery&) = delete;
  // load_kernel builds again on this thread.
  void stop();
  // Builds every kernel kept (each once), side by side; returns how many.
  // A kernel that fails to build is left for its step to build again, and
  // to report.
  size_t build_kept();
  size_t kept() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};
// Whether jit::compile takes the first pass (not KILN_PARALLEL_BUILD=0).
bool parallel_build_enabled();

struct CudaKernelStats {
  int64_t compiled = 0;   // NVRTC compiles
  int64_t disk_hits = 0;  // loaded from the disk cache
  int64_t launches = 0;
  double compile_ms = 0;  // total NVRTC time
  double ready_ms = 0;    // total time making kernels ready (KernelLoaderStats::ready_ms)
};
CudaKernelStats cuda_kernel_stats();

}  // namespace kiln::jit::cuda
