#pragma once

// CUDA graph capture and replay for jit::compile's instances (Note [Graph
// addresses]). The interface carries no CUDA types: jit/ drives it the same
// way whether or not kiln was built with CUDA (without it, Capture throws).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/device.h"

namespace kiln::graphs {

class Graph;

// Note [Graph addresses]
// A captured graph holds every pointer its nodes were captured with; a
// compiled function's arguments and fresh results live elsewhere on every
// call. kiln moves them without copying where it can:
// - Kernels kiln generated report each launch while capturing (Note [Launch
//   records]), parameters included. A range of memory that changes per
//   replay (an argument, a result) is a binding: every recorded parameter
//   that points into it is rewritten on replay (one
//   cudaGraphExecKernelNodeSetParams per node that holds one, and only when
//   the address changed).
// - Library kernels (cuBLASLt matmuls) keep their parameters to themselves.
//   A binding such a call reads or writes is copied instead: an argument into
//   a static buffer by a copy node at the start of the graph, a result out of
//   the graph's own buffer by a copy node at the end; the copy node's source
//   or destination is what replay patches. jit/ decides which bindings those
//   are from the plan (an extern step touching the storage); for decode steps
//   they are the token ids, the position and the logits, a few kilobytes.
// - Captured copy and memset nodes (fills, contiguous copies) that point into
//   a binding are patched the same way, through their own node parameters.
// What extern steps allocate while captured, and static buffers, come from a
// private pool of the caching allocator (Note [Private pools]) that lives as
// long as the graph. Patching tells memory apart by address alone, so no two
// allocations of one capture may share one: the pool holds back what is
// freed during the capture (scratch a library call used, then a result
// placed at the same address, would have the scratch's writes patched into
// each replay's fresh result). The plan's arena is the instance's own: allocated once
// from the device's caching allocator when the instance is built (before any
// capture, so its warm-up run uses it too), counted in memory_summary() like
// any block, and freed with the instance (the compiled function, or its
// cache entry, going away).

// A capture in progress on the current stream of `device`. Allocations on
// that stream go to the graph's private pool from construction until
// finish() or destruction (which abandons the capture and releases the pool).
class Capture {
 public:
  explicit Capture(Device device);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // Device memory from the graph's pool, alive as long as the graph.
  void* static_buffer(size_t bytes);
  // Starts capturing: work launched on the stream from here on is recorded, not run.
  void begin();
  // A copy node (device to device) whose source replay sets (set_copy_source).
  int copy_in(void* dst, const void* src, size_t bytes);
  // A copy node whose destination replay sets (set_copy_destination).
  int copy_out(void* dst, const void* src, size_t bytes);
  // Memory whose address changes per replay: recorded kernel parameters
  // pointing into [base, base + bytes) follow it.
  int bind(const void* base, size_t bytes, std::string what);
  // Ends the capture and instantiates the graph. Throws kiln::Error when the
  // stream's work could not be captured (an op synchronized with the host).
  std::unique_ptr<Graph> finish();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

class Graph {
 public:
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  void set_copy_source(int copy, const void* src);
  void set_copy_destination(int copy, void* dst);
  void set_binding(int binding, const void* base);
  // Applies the parameter changes made since the last launch (launch() does
  // it too; separate to time it).
  void update();
  // Launches on the current stream of the graph's device.
  void launch();

  size_t nodes() const;
  size_t patched_nodes() const;  // kernel nodes holding a binding
  // Edges along which a kernel starts before the one it follows has finished
  // (Note [Early launch] in jit/codegen_cuda/kernel_loader.h).
  size_t early_edges() const;
  size_t pool_bytes() const;  // memory reserved by the graph's private pool
  double capture_ms() const;

  struct Impl;
  explicit Graph(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// Whether this build can capture graphs (built with CUDA).
bool available();

// The CUDA source of the copy and fill kernels that stand for memcpy and
// memset nodes (Note [Kernel-only graphs], graphs/node_kernels.h); empty
// without CUDA.
std::string node_kernels_source();

}  // namespace kiln::graphs
