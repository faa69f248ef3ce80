#pragma once

// Source + name -> a kernel loaded on a device, for every generated CUDA
// kernel (pointwise groups and the op kernels of jit/codegen_cuda/op_kernels/).
// This header needs the toolkit (cudaKernel_t).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>

namespace kiln::jit::cuda {

// Note [Kernel loader]
// Kernels are cached in memory per (device, name) and on disk per (arch,
// NVRTC version, kiln version, source) (Note [Kernel disk cache]). A name
// must identify its source: generators hash or spell every choice into it.
// The global lock only guards the map of entries; compiling happens under the
// entry's own lock, so independent kernels compile in parallel while a second
// caller of the same kernel waits for the first. A failed compile or load
// leaves the entry empty (the next call retries), never half built.
//
// `make_source` runs only on a memory-cache miss. KILN_LOGS=output_code prints
// each source NVRTC compiles.
cudaKernel_t load_kernel(const std::string& name, const std::function<std::string()>& make_source,
                         int device);

struct KernelLoaderStats {
  int64_t compiled = 0;   // NVRTC compiles
  int64_t disk_hits = 0;  // loaded from the disk cache
  int64_t launches = 0;   // launches counted through record_launch()
  double compile_ms = 0;  // total NVRTC time
  // Wall time of memory-cache misses: source generation, NVRTC or the disk
  // cache, and loading the module (what a first call pays for its kernels).
  double ready_ms = 0;
};
KernelLoaderStats kernel_loader_stats();
// Counts a launch of a loaded kernel (the op kernels call it).
void record_launch();

}  // namespace kiln::jit::cuda
