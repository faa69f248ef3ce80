// CUDA graph capture and replay (Note [Graph addresses]).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "graphs/graph.h"
#include "graphs/node_kernels.h"
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
  bool copy = false;                 // kiln_graph_copy: its unit follows its pointers
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

// A copy of the graph's own (Capture::copy_in / copy_out): a kiln_graph_copy
// launch whose source or destination replay sets.
struct CopyNode {
  size_t record = 0;  // index into records
};

// The parameter bytes of a launch whose parameters are 8-byte words.
KernelRecord record_of(const NodeKernel& k) {
  KernelRecord r;
  r.func = k.func;
  r.grid = k.grid;
  r.block = k.block;
  r.bytes.resize(k.words.size() * 8);
  std::memcpy(r.bytes.data(), k.words.data(), r.bytes.size());
  for (size_t i = 0; i < k.words.size(); ++i) r.offsets.push_back(i * 8);
  return r;
}

uint64_t word_at(const KernelRecord& r, int w) {
  uint64_t v;
  std::memcpy(&v, r.bytes.data() + r.offsets[w], 8);
  return v;
}

void set_word(KernelRecord& r, int w, uint64_t v) {
  std::memcpy(r.bytes.data() + r.offsets[w], &v, 8);
}

// Replaces `node` of `graph` by a kernel node running `k`, with the same
// dependencies and dependents (Note [Kernel-only graphs]).
cudaGraphNode_t replace_with_kernel(cudaGraph_t graph, cudaGraphNode_t node, const NodeKernel& k,
                                    int device) {
  size_t n_deps = 0, n_next = 0;
  KILN_CUDA_CHECK_DEVICE(cudaGraphNodeGetDependencies(node, nullptr, nullptr, &n_deps), device);
  KILN_CUDA_CHECK_DEVICE(cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &n_next), device);
  std::vector<cudaGraphNode_t> deps(n_deps), next(n_next);
  if (n_deps) {
    KILN_CUDA_CHECK_DEVICE(cudaGraphNodeGetDependencies(node, deps.data(), nullptr, &n_deps),
                           device);
  }
  if (n_next) {
    KILN_CUDA_CHECK_DEVICE(cudaGraphNodeGetDependentNodes(node, next.data(), nullptr, &n_next),
                           device);
  }
  std::vector<uint64_t> words = k.words;
  std::vector<void*> params;
  for (uint64_t& w : words) params.push_back(&w);
  cudaKernelNodeParams p{};
  p.func = const_cast<void*>(k.func);
  p.gridDim = k.grid;
  p.blockDim = k.block;
  p.kernelParams = params.data();
  cudaGraphNode_t added = nullptr;
  KILN_CUDA_CHECK_DEVICE(cudaGraphAddKernelNode(&added, graph, deps.data(), n_deps, &p), device);
  for (cudaGraphNode_t d : next) {
    KILN_CUDA_CHECK_DEVICE(cudaGraphAddDependencies(graph, &added, &d, nullptr, 1), device);
  }
  KILN_CUDA_CHECK_DEVICE(cudaGraphDestroyNode(node), device);
  return added;
}

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

  // Note [Library scratch under capture]: one workspace for all of a capture's
  // cuBLASLt calls. Each call used to take its own block of the private pool,
  // which holds back what is freed during a capture (Note [Private pools]), so
  // a forward of 48 matmuls replayed with 48 distinct workspaces, up to 32 MiB
  // apart, where eager calls reuse one block that stays in L2. The calls run
  // one after another on the capture's stream, so they can share one; it is
  // the graph's (kept with its buffers) and no kernel kiln patches points into
  // it. A larger request takes a larger block; the smaller one stays alive.
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  void* library_scratch(cudaStream_t s, size_t bytes) override {
    if (s != stream || !capturing) return nullptr;
    if (bytes > scratch_bytes) {
      scratch = own(bytes);
      scratch_bytes = bytes;
    }
    return scratch;
  }

  // Memory from the graph's pool that lives as long as the graph.
  void* own(size_t bytes) {
    buffers.push_back(kiln::cuda::allocate(bytes, device));
    return buffers.back().ptr;
  }

  // Note [Counters that reset themselves]: cleared once, when the capture
  // ends, instead of by a memset node on every replay.
  std::vector<std::pair<void*, size_t>> zeroed;
  void* zeroed_scratch(cudaStream_t s, size_t bytes) override {
    if (s != stream || !capturing) return nullptr;
    zeroed.emplace_back(own(bytes), bytes);
    return zeroed.back().first;
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
  std::vector<bool> dirty_records, dirty_others;
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
  return impl_->own(bytes);
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
  const NodeKernel k = copy_kernel(c.index, dst, src, bytes);
  std::vector<uint64_t> words = k.words;
  std::vector<void*> params;
  for (uint64_t& w : words) params.push_back(&w);
  KILN_CUDA_CHECK_DEVICE(cudaLaunchKernel(k.func, k.grid, k.block, params.data(), 0, c.stream),
                         c.index);
  KernelRecord r = record_of(k);
  r.node = last_node(c.stream, c.index);
  r.copy = true;
  c.records.push_back(std::move(r));
  c.copies.push_back({c.records.size() - 1});
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
  // Counters that reset themselves start at zero (the stream no longer captures).
  for (const auto& [p, bytes] : c.zeroed) {
    KILN_CUDA_CHECK_DEVICE(cudaMemsetAsync(p, 0, bytes, c.stream), c.index);
  }
  if (!c.zeroed.empty()) KILN_CUDA_CHECK_DEVICE(cudaStreamSynchronize(c.stream), c.index);
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
    cudaGraphNodeType type;
    KILN_CUDA_CHECK_DEVICE(cudaGraphNodeGetType(node, &type), c.index);
    OtherNode o;
    o.node = node;
    // Note [Kernel-only graphs]: copies and fills become kernels when they can.
    NodeKernel k;
    bool as_kernel = false;
    if (type == cudaGraphNodeTypeMemcpy) {
      KILN_CUDA_CHECK_DEVICE(cudaGraphMemcpyNodeGetParams(node, &o.copy), c.index);
      as_kernel = copy_node_kernel(c.index, o.copy, &k);
    } else if (type == cudaGraphNodeTypeMemset) {
      KILN_CUDA_CHECK_DEVICE(cudaGraphMemsetNodeGetParams(node, &o.set), c.index);
      k = fill_kernel(c.index, o.set);
      as_kernel = true;
    }
    if (as_kernel) {
      KernelRecord r = record_of(k);
      r.node = replace_with_kernel(graph, node, k, c.index);
      r.copy = type == cudaGraphNodeTypeMemcpy;
      g->records.push_back(std::move(r));
      continue;
    }
    if (type == cudaGraphNodeTypeMemcpy) {
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
  g->dirty_others.assign(g->others.size(), false);
  KILN_CUDA_CHECK_DEVICE(cudaGraphInstantiate(&g->exec, graph, 0), c.index);
  g->capture_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c.t0).count();
  return std::make_unique<Graph>(std::move(g));
}

Graph::Graph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Graph::~Graph() = default;

namespace {

void set_copy_word(Graph::Impl& g, int copy, int w, const void* p) {
  const size_t r = g.copies[copy].record;
  const auto v = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
  if (word_at(g.records[r], w) == v) return;
  set_word(g.records[r], w, v);
  g.dirty_records[r] = true;
}

}  // namespace

void Graph::set_copy_source(int copy, const void* src) {
  set_copy_word(*impl_, copy, kCopySrc, src);
}

void Graph::set_copy_destination(int copy, void* dst) {
  set_copy_word(*impl_, copy, kCopyDst, dst);
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
  update();
  Impl& g = *impl_;
  kiln::cuda::DeviceGuard guard(g.index);
  cudaStream_t stream = kiln::cuda::raw(kiln::cuda::Stream::current(g.device));
  // Its kernels are timed as one span (Note [Profiler GPU timing]).
  kiln::profiler::detail::GpuSpan span(g.index, kiln::profiler::EventKind::GpuGraph, [&] {
    return "cuda graph (" + std::to_string(g.nodes) + " nodes)";
  });
  KILN_CUDA_CHECK_DEVICE(cudaGraphLaunch(g.exec, stream), g.index);
}

void Graph::update() {
  Impl& g = *impl_;
  kiln::cuda::DeviceGuard guard(g.index);
  for (size_t r = 0; r < g.records.size(); ++r) {
    if (!g.dirty_records[r]) continue;
    KernelRecord& rec = g.records[r];
    if (rec.copy) {
      uint64_t words[kCopyWords];
      for (int w = 0; w < kCopyWords; ++w) words[w] = word_at(rec, w);
      set_word(rec, kCopyUnit, copy_unit(words));
    }
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
}

size_t Graph::nodes() const {
  return impl_->nodes;
}
size_t Graph::patched_nodes() const {
  return impl_->patched;
}
size_t Graph::early_edges() const {
  const Impl& g = *impl_;
  kiln::cuda::DeviceGuard guard(g.index);
  size_t n = 0;
  KILN_CUDA_CHECK_DEVICE(cudaGraphGetEdges(g.graph, nullptr, nullptr, nullptr, &n), g.index);
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  if (n) {
    KILN_CUDA_CHECK_DEVICE(cudaGraphGetEdges(g.graph, from.data(), to.data(), data.data(), &n),
                           g.index);
  }
  size_t early = 0;
  for (const cudaGraphEdgeData& e : data) early += e.type == cudaGraphDependencyTypeProgrammatic;
  return early;
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
