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
// Whether load_kernel on this thread keeps the kernels it lacks and hands
// back a placeholder (Note [Kernels compiled side by side] in launch_cuda.h):
// nothing may hold on to a kernel it returns meanwhile.
bool keeping_kernels();

// Note [Early launch]
// A graph (or a stream) of small kernels pays, between two kernels, the time
// the GPU takes to schedule the second one's blocks and, for a matmul, the
// DRAM latency of its first weight loads: a few microseconds each, about as
// long as a decode step's skinny matmuls take to stream their weights.
// Hopper's programmatic dependent launch overlaps that with the kernel
// before: kiln launches every kernel it generates with
// cudaLaunchAttributeProgrammaticStreamSerialization (sm_90 and newer), and
// every generated kernel calls kiln_grid_enter() (the device prelude) before
// it reads or writes any memory another kernel may touch, and before it can
// return. kiln_grid_enter waits until the kernels before it in the stream
// have finished and their writes are visible (griddepcontrol.wait), then lets
// the next kernel's blocks be scheduled (griddepcontrol.launch_dependents):
// at most two kernels overlap, the running one and the next one up to its
// own wait. Because every kernel waits before it finishes, "finished" is
// transitive, and a kernel two or more launches back is finished too. The
// only work before the wait is prefetch.global.L2 of a matmul's weights
// (Note [Skinny matmul kernel]) and of the decode attention's cache slice
// (Note [Decode cache prefetched early], whose position, read before the
// wait, only picks the lines): a prefetch moves no value into a register,
// so it cannot read anything stale. Other nodes (memsets, copies, library
// kernels) are launched without the attribute and keep full ordering; inside
// a captured graph the attribute becomes a programmatic edge. load_kernel
// refuses a source without kiln_grid_enter(), so no generated kernel can run
// unordered. KILN_PDL=0 launches without the attribute (the kernels' waits
// then return at once), to measure what it gains.

// Launches a kernel load_kernel returned on `stream`, early where the device
// allows (Note [Early launch]). Returns what the launch returned.
cudaError_t launch_generated(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                             void** params, cudaStream_t stream, int device);
// Whether launch_generated launches early on `device` (sm_90+, KILN_PDL not 0).
bool launches_early(int device);

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
