// CUDA graph capture and replay (Note [Graph addresses]).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "graphs/graph.h"
#include "kiln/cuda.h"
#include "kiln/error.h"
#include "kiln/logging.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/launch_record.h"
#include "runtime/profiler/recorder.h"

namespace kiln::graphs {
namespace {

std::atomic<alloc::PoolId> g_next_pool{1};

// One recorded kernel launch: its node and parameter bytes.
struct KernelRecord {
  cudaGraphNode_t node = nullptr;
  const void* func = nullptr;
  dim3 grid, block;
  size_t shared_bytes = 0;
  std::vector<unsigned char> bytes;  // every parameter, one after another
  std::vector<size_t> offsets;       // where each parameter starts in `bytes`
};

// A pointer inside a recorded parameter that follows a binding.
struct Slot {
  size_t record = 0;  // index into records
  size_t at = 0;      // byte offset in the record's bytes
  int64_t delta = 0;  // pointer - binding base at capture
};

struct BindingInfo {
  const unsigned char* base = nullptr;  // at capture
  size_t bytes = 0;
  std::string what;
  std::vector<size_t> slots;
};

// A memset or memcpy node (not ours to report) that points into a binding:
// its parameters, patched like a kernel's (Note [Graph addresses]).
struct OtherNode {
  cudaGraphNode_t node = nullptr;
  bool memset = false;
  cudaMemsetParams set{};
  cudaMemcpy3DParms copy{};
  int dst_binding = -1, src_binding = -1;
  int64_t dst_delta = 0, src_delta = 0;
};

struct CopyNode {
  cudaGraphNode_t node = nullptr;
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

// The node the last captured operation on `stream` added.
cudaGraphNode_t last_node(cudaStream_t stream, int device) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  size_t n = 0;
  KILN_CUDA_CHECK_DEVICE(
      cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, nullptr, &n), device);
  KILN_INTERNAL_ASSERT(status == cudaStreamCaptureStatusActive && n == 1, "a captured launch left ",
                       n, " dependencies on the capturing stream");
  return deps[0];
}

}  // namespace

struct Capture::Impl final : public kiln::cuda::LaunchRecorder {
  Device device;
  int index = 0;
  cudaStream_t stream = nullptr;
  alloc::PoolId pool = 0;
  bool routing = false, capturing = false;
  kiln::cuda::LaunchRecorder* previous = nullptr;
  std::vector<alloc::DataPtr> buffers;
  std::vector<KernelRecord> records;
  std::vector<BindingInfo> bindings;
  std::vector<CopyNode> copies;
  std::chrono::steady_clock::time_point t0;

  void on_launch(cudaStream_t s, const void* func, dim3 grid, dim3 block, size_t shared_bytes,
                 void* const* params, const size_t* sizes, int count) override {
    if (s != stream || !capturing) return;
    KernelRecord r;
    r.node = last_node(stream, index);
    r.func = func;
    r.grid = grid;
    r.block = block;
    r.shared_bytes = shared_bytes;
    for (int i = 0; i < count; ++i) {
      r.offsets.push_back(r.bytes.size());
      const auto* p = static_cast<const unsigned char*>(params[i]);
      r.bytes.insert(r.bytes.end(), p, p + sizes[i]);
      // Parameters start 8-byte aligned so pointers inside them can be found in place.
      r.bytes.resize((r.bytes.size() + 7) / 8 * 8);
    }
    records.push_back(std::move(r));
  }

  void abandon() noexcept {
    if (capturing) {
      cudaGraph_t g = nullptr;
      (void)cudaStreamEndCapture(stream, &g);
      if (g) (void)cudaGraphDestroy(g);
      (void)cudaGetLastError();
      capturing = false;
    }
    if (previous != this) {
      kiln::cuda::set_launch_recorder(previous);
      previous = this;
    }
    if (routing) {
      kiln::cuda::device_allocator(index).end_allocate_to_pool(pool);
      routing = false;
    }
  }
};

struct Graph::Impl {
  Device device;
  int index = 0;
  alloc::PoolId pool = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<alloc::DataPtr> buffers;
  std::vector<KernelRecord> records;
  std::vector<BindingInfo> bindings;
  std::vector<Slot> slots;
  std::vector<CopyNode> copies;
  std::vector<OtherNode> others;
  std::vector<const unsigned char*> current;  // per binding: its base now
  std::vector<bool> dirty_records, dirty_copies, dirty_others;
  size_t nodes = 0, patched = 0;
  double capture_ms = 0;

  ~Impl() {
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
    buffers.clear();  // back to the pool before it is released
    if (pool) kiln::cuda::device_allocator(index).release_pool(pool);
  }
};

Capture::Capture(Device device) : impl_(std::make_unique<Impl>()) {
  KILN_CHECK(device.is_cuda(), "[graphs] expected a CUDA device to capture on, got ", device);
  Impl& c = *impl_;
  c.device = device;
  c.index = device.index();
  c.stream = kiln::cuda::raw(kiln::cuda::Stream::current(device));
  c.previous = &c;
  c.pool = g_next_pool.fetch_add(1);
  c.t0 = std::chrono::steady_clock::now();
  kiln::cuda::device_allocator(c.index).begin_allocate_to_pool(
      c.pool, kiln::cuda::stream_id(kiln::cuda::Stream::current(device)));
  c.routing = true;
}

Capture::~Capture() {
  if (!impl_) return;
  impl_->abandon();
  if (impl_->pool) {
    impl_->buffers.clear();
    kiln::cuda::device_allocator(impl_->index).release_pool(impl_->pool);
  }
}

void* Capture::static_buffer(size_t bytes) {
  impl_->buffers.push_back(kiln::cuda::allocate(bytes, impl_->device));
  return impl_->buffers.back().ptr;
}

void Capture::begin() {
  Impl& c = *impl_;
  kiln::cuda::DeviceGuard guard(c.index);
  KILN_CUDA_CHECK_DEVICE(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeThreadLocal),
                         c.index);
  c.capturing = true;
  c.previous = kiln::cuda::set_launch_recorder(&c);
}

namespace {

int add_copy(Capture::Impl& c, void* dst, const void* src, size_t bytes) {
  KILN_CUDA_CHECK_DEVICE(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c.stream),
                         c.index);
  c.copies.push_back({last_node(c.stream, c.index), dst, src, bytes});
  return static_cast<int>(c.copies.size() - 1);
}

}  // namespace

int Capture::copy_in(void* dst, const void* src, size_t bytes) {
  return add_copy(*impl_, dst, src, bytes);
}

int Capture::copy_out(void* dst, const void* src, size_t bytes) {
  return add_copy(*impl_, dst, src, bytes);
}

int Capture::bind(const void* base, size_t bytes, std::string what) {
  impl_->bindings.push_back({static_cast<const unsigned char*>(base), bytes, std::move(what), {}});
  return static_cast<int>(impl_->bindings.size() - 1);
}

std::unique_ptr<Graph> Capture::finish() {
  Impl& c = *impl_;
  kiln::cuda::DeviceGuard guard(c.index);
  kiln::cuda::set_launch_recorder(c.previous);
  c.previous = &c;
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(c.stream, &graph);
  c.capturing = false;
  if (err != cudaSuccess || graph == nullptr) {
    (void)cudaGetLastError();
    if (graph) (void)cudaGraphDestroy(graph);
    KILN_FAIL("[graphs] the work could not be captured into a CUDA graph (",
              cudaGetErrorString(err),
              "): an op synchronized with the host or used another stream while captured");
  }
  auto g = std::make_unique<Graph::Impl>();
  g->device = c.device;
  g->index = c.index;
  g->graph = graph;
  // The pool moves to the graph: it lives as long as the graph does.
  kiln::cuda::device_allocator(c.index).end_allocate_to_pool(c.pool);
  c.routing = false;
  g->pool = c.pool;
  c.pool = 0;
  g->buffers = std::move(c.buffers);
  g->records = std::move(c.records);
  g->bindings = std::move(c.bindings);
  g->copies = std::move(c.copies);
  KILN_CUDA_CHECK_DEVICE(cudaGraphGetNodes(graph, nullptr, &g->nodes), c.index);

  // Copy and memset nodes that point into a binding follow it too.
  std::vector<cudaGraphNode_t> nodes(g->nodes);
  size_t n = g->nodes;
  KILN_CUDA_CHECK_DEVICE(cudaGraphGetNodes(graph, nodes.data(), &n), c.index);
  // The binding holding [p, p + len) and p's offset in it; -1 when none, and
  // an error when the range straddles one's end.
  auto binding_of = [&](const void* p, size_t len, int64_t* delta) {
    const auto* q = static_cast<const unsigned char*>(p);
    for (size_t b = 0; b < g->bindings.size(); ++b) {
      const BindingInfo& bi = g->bindings[b];
      if (!(q < bi.base + bi.bytes && bi.base < q + len)) continue;
      KILN_CHECK(q >= bi.base && q + len <= bi.base + bi.bytes,
                 "[graphs] a captured copy or memset node reaches past ", bi.what);
      *delta = q - bi.base;
      return static_cast<int>(b);
    }
    return -1;
  };
  for (cudaGraphNode_t node : nodes) {
    if (std::any_of(g->copies.begin(), g->copies.end(),
                    [&](const CopyNode& k) { return k.node == node; })) {
      continue;
    }
    cudaGraphNodeType type;
    KILN_CUDA_CHECK_DEVICE(cudaGraphNodeGetType(node, &type), c.index);
    OtherNode o;
    o.node = node;
    if (type == cudaGraphNodeTypeMemcpy) {
      KILN_CUDA_CHECK_DEVICE(cudaGraphMemcpyNodeGetParams(node, &o.copy), c.index);
      const cudaMemcpy3DParms& p = o.copy;
      const size_t len = p.extent.width * std::max<size_t>(p.extent.height, 1) *
                         std::max<size_t>(p.extent.depth, 1);
      KILN_CHECK(p.srcArray == nullptr && p.dstArray == nullptr && p.srcPos.x == 0 &&
                     p.dstPos.x == 0 && p.srcPos.y == 0 && p.dstPos.y == 0,
                 "[graphs] expected plain memory copies in a captured graph, got an array copy");
      const size_t src_len = std::max(len, p.srcPtr.pitch * std::max<size_t>(p.extent.height, 1));
      const size_t dst_len = std::max(len, p.dstPtr.pitch * std::max<size_t>(p.extent.height, 1));
      o.dst_binding = binding_of(p.dstPtr.ptr, dst_len, &o.dst_delta);
      o.src_binding = binding_of(p.srcPtr.ptr, src_len, &o.src_delta);
    } else if (type == cudaGraphNodeTypeMemset) {
      o.memset = true;
      KILN_CUDA_CHECK_DEVICE(cudaGraphMemsetNodeGetParams(node, &o.set), c.index);
      const cudaMemsetParams& p = o.set;
      const size_t len = std::max(p.pitch, p.width * p.elementSize) * std::max<size_t>(p.height, 1);
      o.dst_binding = binding_of(p.dst, len, &o.dst_delta);
    } else {
      continue;
    }
    if (o.dst_binding >= 0 || o.src_binding >= 0) {
      g->others.push_back(o);
      g->patched += 1;
    }
  }
  // Slots: recorded parameters pointing into a binding.
  for (size_t r = 0; r < g->records.size(); ++r) {
    const KernelRecord& rec = g->records[r];
    bool holds = false;
    for (size_t at = 0; at + 8 <= rec.bytes.size(); at += 8) {
      uintptr_t v;
      std::memcpy(&v, rec.bytes.data() + at, 8);
      const auto* p = reinterpret_cast<const unsigned char*>(v);
      for (size_t b = 0; b < g->bindings.size(); ++b) {
        BindingInfo& bi = g->bindings[b];
        if (p >= bi.base && p < bi.base + std::max<size_t>(bi.bytes, 1)) {
          bi.slots.push_back(g->slots.size());
          g->slots.push_back({r, at, p - bi.base});
          holds = true;
          break;
        }
      }
    }
    g->patched += holds ? 1 : 0;
  }
  for (const BindingInfo& b : g->bindings) g->current.push_back(b.base);
  g->dirty_records.assign(g->records.size(), false);
  g->dirty_copies.assign(g->copies.size(), false);
  g->dirty_others.assign(g->others.size(), false);
  KILN_CUDA_CHECK_DEVICE(cudaGraphInstantiate(&g->exec, graph, 0), c.index);
  g->capture_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c.t0).count();
  return std::make_unique<Graph>(std::move(g));
}

Graph::Graph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Graph::~Graph() = default;

void Graph::set_copy_source(int copy, const void* src) {
  Impl& g = *impl_;
  if (g.copies[copy].src == src) return;
  g.copies[copy].src = src;
  g.dirty_copies[copy] = true;
}

void Graph::set_copy_destination(int copy, void* dst) {
  Impl& g = *impl_;
  if (g.copies[copy].dst == dst) return;
  g.copies[copy].dst = dst;
  g.dirty_copies[copy] = true;
}

void Graph::set_binding(int binding, const void* base) {
  Impl& g = *impl_;
  const auto* b = static_cast<const unsigned char*>(base);
  if (g.current[binding] == b) return;
  g.current[binding] = b;
  for (size_t s : g.bindings[binding].slots) {
    const Slot& slot = g.slots[s];
    const uintptr_t v = reinterpret_cast<uintptr_t>(b + slot.delta);
    std::memcpy(g.records[slot.record].bytes.data() + slot.at, &v, 8);
    g.dirty_records[slot.record] = true;
  }
  for (size_t k = 0; k < g.others.size(); ++k) {
    OtherNode& o = g.others[k];
    void* dst = const_cast<unsigned char*>(b + o.dst_delta);
    void* src = const_cast<unsigned char*>(b + o.src_delta);
    if (o.dst_binding == binding) (o.memset ? o.set.dst : o.copy.dstPtr.ptr) = dst;
    if (o.src_binding == binding) o.copy.srcPtr.ptr = src;
    if (o.dst_binding == binding || o.src_binding == binding) g.dirty_others[k] = true;
  }
}

void Graph::launch() {
  Impl& g = *impl_;
  kiln::cuda::DeviceGuard guard(g.index);
  for (size_t r = 0; r < g.records.size(); ++r) {
    if (!g.dirty_records[r]) continue;
    KernelRecord& rec = g.records[r];
    std::vector<void*> params;
    params.reserve(rec.offsets.size());
    for (size_t off : rec.offsets) params.push_back(rec.bytes.data() + off);
    cudaKernelNodeParams p{};
    p.func = const_cast<void*>(rec.func);
    p.gridDim = rec.grid;
    p.blockDim = rec.block;
    p.sharedMemBytes = static_cast<unsigned>(rec.shared_bytes);
    p.kernelParams = params.data();
    KILN_CUDA_CHECK_DEVICE(cudaGraphExecKernelNodeSetParams(g.exec, rec.node, &p), g.index);
    g.dirty_records[r] = false;
  }
  for (size_t k = 0; k < g.copies.size(); ++k) {
    if (!g.dirty_copies[k]) continue;
    const CopyNode& c = g.copies[k];
    KILN_CUDA_CHECK_DEVICE(cudaGraphExecMemcpyNodeSetParams1D(g.exec, c.node, c.dst, c.src, c.bytes,
                                                              cudaMemcpyDeviceToDevice),
                           g.index);
    g.dirty_copies[k] = false;
  }
  for (size_t k = 0; k < g.others.size(); ++k) {
    if (!g.dirty_others[k]) continue;
    const OtherNode& o = g.others[k];
    if (o.memset) {
      KILN_CUDA_CHECK_DEVICE(cudaGraphExecMemsetNodeSetParams(g.exec, o.node, &o.set), g.index);
    } else {
      KILN_CUDA_CHECK_DEVICE(cudaGraphExecMemcpyNodeSetParams(g.exec, o.node, &o.copy), g.index);
    }
    g.dirty_others[k] = false;
  }
  cudaStream_t stream = kiln::cuda::raw(kiln::cuda::Stream::current(g.device));
  // Its kernels are timed as one span (Note [Profiler GPU timing]).
  kiln::profiler::detail::GpuSpan span(g.index, kiln::profiler::EventKind::GpuGraph, [&] {
    return "cuda graph (" + std::to_string(g.nodes) + " nodes)";
  });
  KILN_CUDA_CHECK_DEVICE(cudaGraphLaunch(g.exec, stream), g.index);
}

size_t Graph::nodes() const {
  return impl_->nodes;
}
size_t Graph::patched_nodes() const {
  return impl_->patched;
}
double Graph::capture_ms() const {
  return impl_->capture_ms;
}
size_t Graph::pool_bytes() const {
  size_t total = 0;
  for (const alloc::SegmentInfo& s : kiln::cuda::device_allocator(impl_->index).snapshot()) {
    if (s.pool == impl_->pool) total += s.size;
  }
  return total;
}

bool available() {
  return true;
}

}  // namespace kiln::graphs
