#pragma once

// CUDA graph capture and replay for jit::compile's instances (Note [Graph
// addresses]). The interface carries no CUDA types: jit/ drives it the same
// way whether or not kiln was built with CUDA (without it, Capture throws).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/device.h"

namespace kiln::graphs {

class Graph;

// The alignment (bytes) within which memory a library kernel points at may
// move between replays: cuBLASLt picks kernels for the alignment of its
// pointers up to 256 bytes.
inline constexpr uintptr_t kLibraryAlignment = 256;

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
// - Library kernels (cuBLASLt matmuls) do not say what their parameters
//   mean. Where a probe shows which of their words are pointers into a
//   binding (Note [Library node addresses]), those are patched the same way.
//   Where it cannot, a binding such a call reads or writes is copied instead:
//   an argument into a static buffer by a copy node at the start of the
//   graph, a result out of the graph's own buffer by a copy node at the end;
//   the copy node's source or destination is what replay patches. jit/
//   learns which bindings those are while capturing (Capture::opaque_nodes(),
//   Note [Opaque steps] in jit/compile/instance.cpp).
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

// Note [Library node addresses]
// A library kernel's node has parameter bytes that kiln can read
// (cudaGraphKernelNodeGetParams, laid out by cudaFuncGetParamInfo) but whose
// meaning it does not know: a word equal to an address inside an argument
// may be that argument's pointer, or a number that happens to match, and an
// argument's address may also sit out of sight (encoded in a descriptor, or
// in device memory). So a word is patched only where a probe proves it is a
// pointer. Right after a step whose library nodes touch per-call memory, the
// capture runs the same call once more with that memory moved (arguments to
// buffers of the graph's pool, at the same offset modulo 256 bytes; results
// fresh, so elsewhere) and then sets the stream back, so the probe's nodes
// hang off the graph and are removed before it is instantiated. The step's
// library nodes and the probe's must then match launch for launch (function,
// grid, block, shared memory, parameter layout), every word that differs must
// differ by exactly the move of the range the step's word points into (or be
// an address on the capturing thread's stack both times: cuBLASLt passes its
// host-side alpha and beta pointers along, unread, to its split-K reduction;
// host and device addresses never overlap), every
// word pointing into a moved range must move, and every moved range must be
// pointed at by some word kiln can see. Anything else (another count of
// nodes, a word that changed for another reason, a moved range nobody points
// at) keeps the copies. cuBLASLt chooses its kernel for the alignment of its
// pointers (up to 256 bytes), so replay moves a patched library pointer only
// by multiples of 256 (Graph::keeps_alignment); a call whose argument breaks
// that runs its plan directly. Cost: the probe's host launches once per
// capture, and its results' memory held in the graph's pool (the size of the
// static buffers the copies would have needed). Which calls are probed:
// Note [Which library calls are probed].

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
  // Host memory that small host to device copies may read again at every
  // replay (Note [Host values under capture] in runtime/cuda/launch_record.h):
  // the compiled function's host arguments and captured host tensors. A copy
  // from anywhere else ends the capture.
  void allow_host_values(const void* base, size_t bytes);
  // Nodes captured so far that kiln cannot see into: kernels that no launch
  // record stands for (a library's) and nodes other than kernels, copies and
  // fills (Note [Opaque steps] in jit/compile/instance.cpp).
  size_t opaque_nodes();
  // A step of the captured work begins; whether it added opaque nodes.
  void begin_step();
  bool step_added_opaque();
  // Note [Library node addresses]: work captured from begin_probe() to
  // end_probe() is the step run again with some memory moved (`moves`); it
  // never runs. end_probe() compares the step's opaque nodes with the
  // probe's: where every difference is a moved pointer and every moved range
  // is pointed at, those words are patched on replay like those of kiln's
  // kernels (true); otherwise nothing changes and `why` says what differed
  // (false).
  struct Move {
    const void* from = nullptr;
    size_t bytes = 0;
    const void* to = nullptr;
  };
  void begin_probe();
  bool end_probe(const std::vector<Move>& moves, std::string* why);
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
  // Whether `binding` may move to `base`: a library kernel picked for the
  // alignment its memory had at capture may take no less (Note [Library
  // node addresses]).
  bool keeps_alignment(int binding, const void* base) const;
  // Whether a library kernel's patched word points into `binding`.
  bool holds_library_pointers(int binding) const;
  // Applies the parameter changes made since the last launch (launch() does
  // it too; separate to time it).
  void update();
  // Launches on the current stream of the graph's device.
  void launch();
  // Raises an error a replay's kernel left (Note [Errors of replayed kernels]
  // in runtime/cuda/launch_record.h), if this graph has error slots.
  void check_errors() const;

  size_t nodes() const;
  size_t patched_nodes() const;  // kernel nodes holding a binding
  // Edges along which a kernel starts before the one it follows has finished
  // (Note [Early launch] in jit/codegen_cuda/kernel_loader.h).
  size_t early_edges() const;
  size_t pool_bytes() const;      // memory reserved by the graph's private pool
  double capture_ms() const;      // capture to executable graph, host time
  double instantiate_ms() const;  // the part of it spent instantiating

  struct Impl;
  explicit Graph(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// Whether this build can capture graphs (built with CUDA).
bool available();

// Note [Which library calls are probed]
// Patching is not free where copying is: a replay that moves a library
// node's memory updates the node through the driver, about 2-3 us of host
// time on an H200's host (a node of kiln's costs about 1), while a copy node
// of b bytes costs the GPU about 1.3 us + 2b / (4 TB/s). With a fresh result
// every replay, mlp 32x1024 (whose result two library nodes write) spent 4
// us more on the host per call and gained nothing (H200, 2026-11-28), so
// calls touching under 1 MiB of per-call memory kept their copies. Since
// replays write a result where the last one was whenever the caller let go
// of it (Note [Results handed back] in jit/compile/instance.cpp), a library
// node's result pointer stays put from call to call, and so does an
// argument the caller keeps in one buffer, or one the caching allocator
// hands out again at the same address: nothing to update. Measured (H200,
// 2026-11-30, compile p50, four rounds): mlp 32x1024 16.9-18.3 us probed
// against 20.0-21.6 with the copies. So every library call is probed by
// default (library_probe_bytes() = 0); a call whose argument moves every
// time pays the update on the host instead of the copy on the GPU.
// KILN_GRAPH_PROBE_BYTES sets the threshold (bytes of per-call memory from
// which a call is probed; "off": none). set_library_probe_bytes returns the
// previous value.
inline constexpr size_t kDefaultProbeBytes = 0;
size_t library_probe_bytes();
size_t set_library_probe_bytes(size_t bytes);

// The CUDA source of the copy and fill kernels that stand for memcpy and
// memset nodes (Note [Kernel-only graphs], graphs/node_kernels.h); empty
// without CUDA.
std::string node_kernels_source();

}  // namespace kiln::graphs
