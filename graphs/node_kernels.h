#pragma once

// Copies and fills as kernels, for graphs made of kernel nodes only (Note
// [Kernel-only graphs]). CUDA-only (this header needs the toolkit).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::graphs {

// Note [Kernel-only graphs]
// cudaGraphLaunch of a graph whose nodes are all kernels costs the host a few
// microseconds; memcpy and memset nodes make it much dearer (on an H100: the
// 97-kernel gpt2 forward graph 2.3 us per launch, the decode step's graph of
// 124 steps plus copy and memset nodes 63.5 us, perf/RESULTS.md). Those
// nodes come from the graph's own copies (arguments into static buffers,
// results out of them), from fills, range caches and the counters some op
// kernels clear. So kiln keeps graphs kernel-only: its own copies launch
// kiln_graph_copy while capturing, and after capture every device-to-device
// memcpy node and every memset node is replaced by a kernel node doing the
// same (kiln_graph_copy, kiln_graph_fill) with the same dependencies. Their
// parameters are plain words (pointers, byte counts), so replay patches them
// like any recorded kernel's (Note [Graph addresses]). A copy moves 16, 8,
// 4, 2 or 1 bytes per thread, the widest its pointers, row width and pitches
// allow; replay recomputes that width when it moves a pointer. Nodes that
// are not plain device memory (arrays, host memory, 3-D copies) stay.

// A kernel launch standing for a copy or fill: its function, grid, and
// parameters (8-byte words, passed one per parameter, or all as one struct).
struct NodeKernel {
  const void* func = nullptr;
  dim3 grid, block;
  std::vector<uint64_t> words;
  bool one_parameter = false;  // the words are one struct parameter
};

// Parameter words of kiln_graph_copy.
enum CopyWord {
  kCopyDst,
  kCopySrc,
  kCopyWidth,
  kCopyHeight,
  kCopyDstPitch,
  kCopySrcPitch,
  kCopyUnit,
  kCopyWords
};

// Parameter words of kiln_graph_put (Note [Host values under capture] in
// runtime/cuda/launch_record.h): the destination, the byte count, then the
// bytes themselves; up to 64 bytes, one parameter per word. Larger values
// take kiln_graph_put_large, the same words as one 4 KiB struct parameter
// (a kernel's parameters may take 4 KiB on every architecture kiln runs on).
enum PutWord { kPutDst, kPutBytes, kPutValue, kPutWords = kPutValue + 8, kPutLargeWords = 512 };

// `bytes` from src to dst, or `height` rows of `width` bytes with pitches.
NodeKernel copy_kernel(int device, void* dst, const void* src, size_t width, size_t height = 1,
                       size_t dst_pitch = 0, size_t src_pitch = 0);
// The widest unit the copy's current words allow (written into kCopyUnit).
uint64_t copy_unit(const uint64_t* words);
// A kernel writing the `bytes` (at most (kPutLargeWords - kPutValue) * 8) now
// at host address `src` to `dst`.
NodeKernel put_kernel(int device, void* dst, const void* src, size_t bytes);
// A memset node's work as a kernel.
NodeKernel fill_kernel(int device, const cudaMemsetParams& p);
// A memcpy node's work as a kernel; false when it is not a plain
// device-to-device copy of at most two dimensions on `device`.
bool copy_node_kernel(int device, const cudaMemcpy3DParms& p, NodeKernel* out);

}  // namespace kiln::graphs
