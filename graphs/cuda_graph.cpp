// CUDA graph capture and replay (Note [Graph addresses]).

#include <cuda.h>  // CU_LAUNCH_PARAM_*: a library node's packed parameters
#include <cuda_runtime_api.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "graphs/graph.h"
#include "graphs/node_kernels.h"
#include "kiln/cuda.h"
#include "kiln/error.h"
#include "kiln/logging.h"
#include "runtime/core/env.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/launch_record.h"
#include "runtime/cuda/mapped_slabs.h"
#include "runtime/profiler/recorder.h"

namespace kiln::graphs {
namespace {

std::atomic<alloc::PoolId> g_next_pool{1};

// Note [Errors of replayed kernels]: each capture takes its slab of mapped
// host memory (runtime/cuda/mapped_slabs.h) before it begins, as
// cudaHostAlloc is refused while a stream captures; it goes back, cleared,
// when the capture or its graph ends.
constexpr size_t kErrorSlots =
    kiln::cuda::kMappedSlabWords / 2;  // per capture; later sites get none

void* take_slab(int device) {
  return kiln::cuda::take_mapped_slab(device);
}

void give_slab(void* s) {
  kiln::cuda::give_mapped_slab(static_cast<int64_t*>(s));
}

// One recorded kernel launch: its node and parameter bytes.
struct KernelRecord {
  cudaGraphNode_t node = nullptr;
  const void* func = nullptr;
  dim3 grid, block;
  size_t shared_bytes = 0;
  std::vector<unsigned char> bytes;  // every parameter, one after another
  std::vector<size_t> offsets;       // where each parameter starts in `bytes`
  bool copy = false;                 // kiln_graph_copy: its unit follows its pointers
  bool put = false;                  // kiln_graph_put: only its first word is a pointer
  // A library kernel's node (Note [Library node addresses]): `bytes` is its
  // parameter buffer as the device lays it out (one buffer where `packed`),
  // and only the words at `movable` may be patched.
  bool library = false, packed = false;
  std::vector<size_t> movable;
  void* driver_func = nullptr;  // library: the driver's CUfunction, CUkernel and CUcontext
  void* driver_kernel = nullptr;
  void* driver_context = nullptr;
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
  bool library = false;  // a library kernel's word points into it
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

// Note [Host values under capture]: a kiln_graph_put launch whose bytes
// replay reads from the host, where `src` (at capture) has moved with its
// binding, if any.
struct HostValue {
  size_t record = 0;  // index into records
  const unsigned char* src = nullptr;
  size_t bytes = 0;
  int binding = -1;
  int64_t delta = 0;  // src - the binding's base at capture
};

// The parameter bytes of a launch whose parameters are 8-byte words.
KernelRecord record_of(const NodeKernel& k) {
  KernelRecord r;
  r.func = k.func;
  r.grid = k.grid;
  r.block = k.block;
  r.bytes.resize(k.words.size() * 8);
  std::memcpy(r.bytes.data(), k.words.data(), r.bytes.size());
  const size_t parameters = k.one_parameter ? 1 : k.words.size();
  for (size_t i = 0; i < parameters; ++i) r.offsets.push_back(i * 8);
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

// Launch parameters for `k`, pointing into `words` (a copy of its words).
std::vector<void*> parameters_of(const NodeKernel& k, std::vector<uint64_t>& words) {
  std::vector<void*> params;
  for (uint64_t& w : words) params.push_back(&w);
  if (k.one_parameter) params.resize(1);
  return params;
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
  std::vector<void*> params = parameters_of(k, words);
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

// Driver entry points for what the runtime cannot say of a library's kernel
// (loaded through the runtime: kiln does not link the driver library).
template <class F>
F driver_entry(const char* symbol, unsigned version) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &f, version, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<F>(f);
}

// A library launches its kernels through the driver, and the runtime's
// queries do not know those functions: a library node is read and updated
// through the driver's entry points.
struct DriverGraphs {
  using NodeParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
  using ExecSetParams = CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS*);
  using FuncInfo = CUresult (*)(CUfunction, size_t, size_t*, size_t*);
  using KernelInfo = CUresult (*)(CUkernel, size_t, size_t*, size_t*);
  NodeParams node_params = driver_entry<NodeParams>("cuGraphKernelNodeGetParams", 12000);
  ExecSetParams exec_set_params =
      driver_entry<ExecSetParams>("cuGraphExecKernelNodeSetParams", 12000);
  FuncInfo func_info = driver_entry<FuncInfo>("cuFuncGetParamInfo", 12040);
  KernelInfo kernel_info = driver_entry<KernelInfo>("cuKernelGetParamInfo", 12040);

  bool usable() const { return node_params && exec_set_params && func_info && kernel_info; }
  static const DriverGraphs& get() {
    static const DriverGraphs d;
    return d;
  }
};

// A library kernel node's launch and parameter bytes (as a KernelRecord); an
// empty string, or why they cannot be read in full.
std::string library_record(cudaGraphNode_t node, KernelRecord* r) {
  const DriverGraphs& d = DriverGraphs::get();
  if (!d.usable()) return "the driver does not offer the entry points to read it";
  CUDA_KERNEL_NODE_PARAMS p{};
  if (d.node_params(reinterpret_cast<CUgraphNode>(node), &p) != CUDA_SUCCESS) {
    return "its parameters could not be read";
  }
  r->node = node;
  r->func = p.func ? static_cast<const void*>(p.func) : static_cast<const void*>(p.kern);
  r->driver_func = p.func;
  r->driver_kernel = p.kern;
  r->driver_context = p.ctx;
  r->grid = dim3(p.gridDimX, p.gridDimY, p.gridDimZ);
  r->block = dim3(p.blockDimX, p.blockDimY, p.blockDimZ);
  r->shared_bytes = p.sharedMemBytes;
  r->library = true;
  if (p.extra) {
    const void* buffer = nullptr;
    size_t bytes = 0;
    bool sized = false;
    for (void** e = p.extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
      if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = e[1];
      if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        bytes = *static_cast<const size_t*>(e[1]);
        sized = true;
      }
    }
    if (!buffer || !sized) return "its parameter buffer has no pointer or size";
    const auto* b = static_cast<const unsigned char*>(buffer);
    r->bytes.assign(b, b + bytes);
    r->packed = true;
    return {};
  }
  if (!p.kernelParams) return {};  // no parameters
  for (size_t i = 0;; ++i) {
    size_t offset = 0, size = 0;
    const CUresult err =
        p.func ? d.func_info(p.func, i, &offset, &size) : d.kernel_info(p.kern, i, &offset, &size);
    if (err == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
    if (err != CUDA_SUCCESS) return "the layout of its parameters is unknown";
    r->offsets.push_back(offset);
    if (r->bytes.size() < offset + size) r->bytes.resize(offset + size);
    std::memcpy(r->bytes.data() + offset, p.kernelParams[i], size);
  }
  if (r->offsets.empty()) return "the layout of its parameters is unknown";
  return {};
}

// Sets a library node's parameters in `exec` from its record.
void set_library_params(cudaGraphExec_t exec, KernelRecord& rec, int device) {
  std::vector<void*> params;
  for (size_t off : rec.offsets) params.push_back(rec.bytes.data() + off);
  size_t packed_bytes = rec.bytes.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, rec.bytes.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &packed_bytes, CU_LAUNCH_PARAM_END};
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = static_cast<CUfunction>(rec.driver_func);
  p.kern = static_cast<CUkernel>(rec.driver_kernel);
  p.ctx = static_cast<CUcontext>(rec.driver_context);
  p.gridDimX = rec.grid.x;
  p.gridDimY = rec.grid.y;
  p.gridDimZ = rec.grid.z;
  p.blockDimX = rec.block.x;
  p.blockDimY = rec.block.y;
  p.blockDimZ = rec.block.z;
  p.sharedMemBytes = static_cast<unsigned>(rec.shared_bytes);
  if (rec.packed) {
    p.extra = extra;
  } else {
    p.kernelParams = params.data();
  }
  const CUresult err = DriverGraphs::get().exec_set_params(
      reinterpret_cast<CUgraphExec>(exec), reinterpret_cast<CUgraphNode>(rec.node), &p);
  KILN_CHECK(err == CUDA_SUCCESS, "[graphs] on cuda:", device,
             ": updating a library kernel's node failed (driver error ", static_cast<int>(err),
             ")");
}

// Whether `v` is an address on the calling thread's stack (never a device
// address: host and device share one virtual address space).
bool on_this_stack(uint64_t v) {
  thread_local uintptr_t lo = 0, hi = 0;
  if (hi == 0) {
    pthread_attr_t attr;
    void* base = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      if (pthread_attr_getstack(&attr, &base, &size) == 0) {
        lo = reinterpret_cast<uintptr_t>(base);
        hi = lo + size;
      }
      pthread_attr_destroy(&attr);
    }
  }
  return v >= lo && v < hi;
}

// Whether `p` is device memory (not host memory, pinned or not).
bool on_device(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
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
  std::vector<HostValue> host_values;
  std::vector<std::pair<const unsigned char*, size_t>> host_ranges;  // allow_host_values
  std::chrono::steady_clock::time_point t0;
  // opaque_nodes(): the nodes looked at so far (in the order found), those
  // records stand for, and the others kiln cannot see into.
  std::unordered_set<cudaGraphNode_t> seen, recorded;
  std::vector<cudaGraphNode_t> found, opaque;
  size_t step_opaque = 0;  // opaque.size() where the step began
  // A probe (Note [Library node addresses]): where it began in `found`,
  // `opaque` and `records`, and the stream's dependencies before it.
  size_t probe_found = 0, probe_opaque = 0, probe_records = 0, step_records = 0;
  std::vector<cudaGraphNode_t> probe_deps;
  std::vector<cudaGraphEdgeData> probe_edges;
  std::vector<cudaGraphNode_t> doomed;  // probes' nodes, removed when the capture ends

  void on_launch(cudaStream_t s, const void* func, dim3 grid, dim3 block, size_t shared_bytes,
                 void* const* params, const size_t* sizes, int count) override {
    if (s != stream || !capturing) return;
    KernelRecord r;
    r.node = last_node(stream, index);
    r.func = func;
    r.grid = grid;
    r.block = block;
    r.shared_bytes = shared_bytes;
    recorded.insert(r.node);
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

  // Note [Host values under capture].
  bool host_value(cudaStream_t s, void* dst, const void* src, size_t bytes) override;

  // Note [Errors of replayed kernels]: slots in a slab of mapped host memory.
  void* error_slab = nullptr;
  void* error_slab_device = nullptr;
  std::vector<kiln::cuda::ErrorSlot> error_slots;
  int64_t* error_slot(cudaStream_t s, std::string what) override;
  // Set when a kernel that checks device data found no slot: the capture
  // then fails (its replays could not report that kernel's errors).
  std::string unchecked;

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
  std::vector<HostValue> host_values;
  void* error_slab = nullptr;  // Note [Errors of replayed kernels]
  std::vector<kiln::cuda::ErrorSlot> error_slots;
  std::vector<OtherNode> others;
  std::vector<const unsigned char*> current;  // per binding: its base now
  std::vector<bool> dirty_records, dirty_others;
  size_t nodes = 0, patched = 0;
  double capture_ms = 0;
  double instantiate_ms = 0;  // the part of capture_ms spent in cudaGraphInstantiate

  ~Impl() {
    kiln::cuda::unwatch_errors(this);
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
    give_slab(error_slab);
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
  give_slab(impl_->error_slab);
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
  // Note [Errors of replayed kernels]: pinned memory only before capturing.
  // Without it (host memory short) the kernels run without error slots.
  try {
    c.error_slab = take_slab(c.index);
    c.error_slab_device =
        kiln::cuda::mapped_device_address(static_cast<int64_t*>(c.error_slab), c.index);
  } catch (const Error&) {
    give_slab(c.error_slab);
    c.error_slab = nullptr;
  }
  KILN_CUDA_CHECK_DEVICE(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeThreadLocal),
                         c.index);
  c.capturing = true;
  c.previous = kiln::cuda::set_launch_recorder(&c);
}

namespace {

// Launches `k` on the capturing stream and records it; its record's index.
size_t add_node_kernel(Capture::Impl& c, const NodeKernel& k) {
  std::vector<uint64_t> words = k.words;
  std::vector<void*> params = parameters_of(k, words);
  KILN_CUDA_CHECK_DEVICE(cudaLaunchKernel(k.func, k.grid, k.block, params.data(), 0, c.stream),
                         c.index);
  KernelRecord r = record_of(k);
  r.node = last_node(c.stream, c.index);
  c.recorded.insert(r.node);
  c.records.push_back(std::move(r));
  return c.records.size() - 1;
}

int add_copy(Capture::Impl& c, void* dst, const void* src, size_t bytes) {
  const size_t r = add_node_kernel(c, copy_kernel(c.index, dst, src, bytes));
  c.records[r].copy = true;
  c.copies.push_back({r});
  return static_cast<int>(c.copies.size() - 1);
}

}  // namespace

bool Capture::Impl::host_value(cudaStream_t s, void* dst, const void* src, size_t bytes) {
  if (s != stream || !capturing || bytes > kiln::cuda::kHostValueLimit) return false;
  const auto* p = static_cast<const unsigned char*>(src);
  const bool allowed = std::any_of(host_ranges.begin(), host_ranges.end(), [&](const auto& r) {
    return p >= r.first && p + bytes <= r.first + r.second;
  });
  if (!allowed) return false;
  // One put node per kHostValueBytes (each compared and updated on its own).
  for (size_t at = 0; at < bytes; at += kiln::cuda::kHostValueBytes) {
    const size_t n = std::min(bytes - at, kiln::cuda::kHostValueBytes);
    const size_t r =
        add_node_kernel(*this, put_kernel(index, static_cast<char*>(dst) + at, p + at, n));
    records[r].put = true;
    host_values.push_back({r, p + at, n});
  }
  return true;
}

int64_t* Capture::Impl::error_slot(cudaStream_t s, std::string what) {
  if (s != stream || !capturing) return nullptr;
  const size_t i = error_slots.size();
  if (!error_slab || i == kErrorSlots) {
    if (unchecked.empty()) {
      unchecked = !error_slab ? "no memory for the capture's error slots could be had"
                              : "more kernels check device data than a capture has error slots (" +
                                    std::to_string(kErrorSlots) + ")";
      // The op, from the error the kernel reports ("[index_select] index {} is ...").
      unchecked += "; the first without one: a kernel of " + what.substr(0, what.find(']') + 1);
    }
    return nullptr;
  }
  // No CUDA call here: the stream captures (the slab's device address was
  // taken with it).
  auto* words = static_cast<int64_t*>(error_slab) + 2 * i;
  error_slots.push_back({words, std::move(what)});
  return static_cast<int64_t*>(error_slab_device) + 2 * i;
}

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

void Capture::allow_host_values(const void* base, size_t bytes) {
  impl_->host_ranges.emplace_back(static_cast<const unsigned char*>(base), bytes);
}

size_t Capture::opaque_nodes() {
  Impl& c = *impl_;
  if (!c.capturing) return c.opaque.size();
  kiln::cuda::DeviceGuard guard(c.index);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  KILN_CUDA_CHECK_DEVICE(
      cudaStreamGetCaptureInfo(c.stream, &status, nullptr, &graph, nullptr, nullptr, nullptr),
      c.index);
  if (status != cudaStreamCaptureStatusActive || !graph) return c.opaque.size();
  size_t n = 0;
  KILN_CUDA_CHECK_DEVICE(cudaGraphGetNodes(graph, nullptr, &n), c.index);
  if (n == c.seen.size()) return c.opaque.size();
  std::vector<cudaGraphNode_t> nodes(n);
  KILN_CUDA_CHECK_DEVICE(cudaGraphGetNodes(graph, nodes.data(), &n), c.index);
  for (size_t i = 0; i < n; ++i) {
    if (!c.seen.insert(nodes[i]).second) continue;
    c.found.push_back(nodes[i]);
    cudaGraphNodeType type;
    KILN_CUDA_CHECK_DEVICE(cudaGraphNodeGetType(nodes[i], &type), c.index);
    bool visible = type == cudaGraphNodeTypeMemset;
    if (type == cudaGraphNodeTypeKernel) visible = c.recorded.count(nodes[i]) > 0;
    if (type == cudaGraphNodeTypeMemcpy) {
      // Bytes from the host may be a table of device pointers (Note [Opaque steps]).
      cudaMemcpy3DParms p{};
      KILN_CUDA_CHECK_DEVICE(cudaGraphMemcpyNodeGetParams(nodes[i], &p), c.index);
      visible = p.kind == cudaMemcpyDeviceToDevice ||
                (p.kind == cudaMemcpyDefault && on_device(p.srcPtr.ptr) && on_device(p.dstPtr.ptr));
    }
    if (!visible) c.opaque.push_back(nodes[i]);
  }
  return c.opaque.size();
}

void Capture::begin_step() {
  Impl& c = *impl_;
  c.step_opaque = opaque_nodes();
  c.step_records = c.records.size();
}

bool Capture::step_added_opaque() {
  return opaque_nodes() > impl_->step_opaque;
}

void Capture::begin_probe() {
  Impl& c = *impl_;
  kiln::cuda::DeviceGuard guard(c.index);
  opaque_nodes();
  c.probe_found = c.found.size();
  c.probe_opaque = c.opaque.size();
  c.probe_records = c.records.size();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  size_t n = 0;
  KILN_CUDA_CHECK_DEVICE(
      cudaStreamGetCaptureInfo(c.stream, &status, nullptr, nullptr, &deps, &edges, &n), c.index);
  c.probe_deps.assign(deps, deps + n);
  c.probe_edges.assign(n, cudaGraphEdgeData{});
  if (edges) c.probe_edges.assign(edges, edges + n);
}

namespace {

// Note [Library node addresses]: checks `step` (a step's library nodes)
// against `probe` (the same work with `moves` applied) word by word, and marks
// the words that follow the moved memory. False where anything else differs,
// or where some moved range is referenced by no word kiln can see.
std::string follows_moves(std::vector<KernelRecord>& step, const std::vector<KernelRecord>& probe,
                          const std::vector<KernelRecord>& kiln_records,
                          const std::vector<Capture::Move>& moves) {
  if (step.empty() || step.size() != probe.size()) {
    return "the probe added " + std::to_string(probe.size()) + " library nodes, the step " +
           std::to_string(step.size());
  }
  std::vector<bool> referenced(moves.size(), false);
  auto move_of = [&](uint64_t v) {
    const auto* q = reinterpret_cast<const unsigned char*>(v);
    for (size_t m = 0; m < moves.size(); ++m) {
      const auto* from = static_cast<const unsigned char*>(moves[m].from);
      if (q >= from && q < from + std::max<size_t>(moves[m].bytes, 1)) return static_cast<int>(m);
    }
    return -1;
  };
  for (size_t i = 0; i < step.size(); ++i) {
    KernelRecord& a = step[i];
    const KernelRecord& b = probe[i];
    if (a.func != b.func || a.grid.x != b.grid.x || a.grid.y != b.grid.y || a.grid.z != b.grid.z ||
        a.block.x != b.block.x || a.block.y != b.block.y || a.block.z != b.block.z ||
        a.shared_bytes != b.shared_bytes || a.packed != b.packed ||
        a.bytes.size() != b.bytes.size() || a.offsets != b.offsets) {
      return "library node " + std::to_string(i) + " of the probe launched differently";
    }
    const size_t words = a.bytes.size() / 8 * 8;
    if (std::memcmp(a.bytes.data() + words, b.bytes.data() + words, a.bytes.size() - words)) {
      return "the last bytes of library node " + std::to_string(i) + " differ";
    }
    for (size_t at = 0; at < words; at += 8) {
      uint64_t va, vb;
      std::memcpy(&va, a.bytes.data() + at, 8);
      std::memcpy(&vb, b.bytes.data() + at, 8);
      const int m = move_of(va);
      if (m < 0) {
        // A host pointer the library passes along unread (cuBLASLt's alpha
        // and beta in host pointer mode): on this thread's stack both times.
        if (va != vb && on_this_stack(va) && on_this_stack(vb)) continue;
        if (va != vb) {
          char values[64];
          std::snprintf(values, sizeof values, " (%#llx, then %#llx)",
                        static_cast<unsigned long long>(va), static_cast<unsigned long long>(vb));
          return "word " + std::to_string(at) + " of library node " + std::to_string(i) +
                 " changed but points into no moved memory" + values;
        }
        continue;
      }
      const auto delta = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(moves[m].to) -
                                               reinterpret_cast<uintptr_t>(moves[m].from));
      if (vb - va != delta) {
        return "word " + std::to_string(at) + " of library node " + std::to_string(i) +
               " points into moved memory but did not follow it";
      }
      a.movable.push_back(at);
      referenced[m] = true;
    }
  }
  // Moved memory the library nodes do not point at must be what kiln's own
  // kernels of the step point at; otherwise some pointer is out of sight.
  for (const KernelRecord& r : kiln_records) {
    for (size_t at = 0; at + 8 <= r.bytes.size(); at += 8) {
      uint64_t v;
      std::memcpy(&v, r.bytes.data() + at, 8);
      if (const int m = move_of(v); m >= 0) referenced[m] = true;
    }
  }
  for (size_t m = 0; m < moves.size(); ++m) {
    if (!referenced[m]) return "no parameter points into moved range " + std::to_string(m);
  }
  return {};
}

}  // namespace

bool Capture::end_probe(const std::vector<Move>& given, std::string* why) {
  Impl& c = *impl_;
  kiln::cuda::DeviceGuard guard(c.index);
  opaque_nodes();
  // One move per range (an in-place op's result is its argument); ranges
  // that overlap otherwise would make a word's move ambiguous.
  std::vector<Move> moves;
  for (const Move& m : given) {
    bool same = false;
    for (const Move& k : moves) {
      const auto* a = static_cast<const unsigned char*>(m.from);
      const auto* b = static_cast<const unsigned char*>(k.from);
      if (a == b && m.bytes == k.bytes && m.to == k.to) {
        same = true;
      } else if (a < b + std::max<size_t>(k.bytes, 1) && b < a + std::max<size_t>(m.bytes, 1)) {
        *why = "two moved ranges overlap";
      }
    }
    if (!same) moves.push_back(m);
  }
  std::vector<KernelRecord> step, probe;
  for (size_t i = c.step_opaque; why->empty() && i < c.opaque.size(); ++i) {
    KernelRecord r;
    cudaGraphNodeType type;
    KILN_CUDA_CHECK_DEVICE(cudaGraphNodeGetType(c.opaque[i], &type), c.index);
    *why = type == cudaGraphNodeTypeKernel ? library_record(c.opaque[i], &r)
                                           : "a library added a node other than a kernel";
    (i < c.probe_opaque ? step : probe).push_back(std::move(r));
  }
  const std::vector<KernelRecord> kiln_records(c.records.begin() + c.step_records,
                                               c.records.begin() + c.probe_records);
  if (why->empty()) *why = follows_moves(step, probe, kiln_records, moves);
  if (!why->empty()) {
    char where[96];
    std::snprintf(where, sizeof where, "; library scratch at %p, %zu bytes", c.scratch,
                  c.scratch_bytes);
    *why += where;
    for (const Move& m : moves) {
      std::snprintf(where, sizeof where, "; moved %p +%zu to %p", m.from, m.bytes, m.to);
      *why += where;
    }
  }
  // The probe leaves the graph: the stream goes on from where the step ended,
  // and the probe's nodes are removed when the capture ends.
  KILN_CUDA_CHECK_DEVICE(
      cudaStreamUpdateCaptureDependencies(c.stream, c.probe_deps.data(), c.probe_edges.data(),
                                          c.probe_deps.size(), cudaStreamSetCaptureDependencies),
      c.index);
  c.doomed.insert(c.doomed.end(), c.found.begin() + c.probe_found, c.found.end());
  c.opaque.resize(c.probe_opaque);
  c.records.resize(c.probe_records);
  if (!why->empty()) return false;
  for (KernelRecord& r : step) c.records.push_back(std::move(r));
  return true;
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
  if (!c.unchecked.empty()) {
    (void)cudaGraphDestroy(graph);
    KILN_FAIL(
        "[graphs] the work was not kept as a CUDA graph, whose replays would leave a kernel's ",
        "errors unreported (", c.unchecked, "): it runs directly, where every kernel is checked");
  }
  // Probes' nodes (Note [Library node addresses]) never run.
  for (cudaGraphNode_t node : c.doomed) {
    KILN_CUDA_CHECK_DEVICE(cudaGraphDestroyNode(node), c.index);
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
  g->host_values = std::move(c.host_values);
  g->error_slab = c.error_slab;
  c.error_slab = nullptr;
  g->error_slots = std::move(c.error_slots);
  if (!g->error_slots.empty()) kiln::cuda::watch_errors(g.get(), &g->error_slots);
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
                 "[graphs] a captured copy, memset or host value reaches past ", bi.what);
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
  // Host values read where their binding (a host argument) is at replay.
  for (HostValue& h : g->host_values) {
    h.binding = binding_of(h.src, h.bytes, &h.delta);
    g->patched += 1;
  }
  // Slots: recorded parameters pointing into a binding.
  for (size_t r = 0; r < g->records.size(); ++r) {
    const KernelRecord& rec = g->records[r];
    bool holds = false;
    std::vector<size_t> words;
    // A put node's value words are data, whatever they look like.
    const size_t ends = rec.put ? 8 : rec.bytes.size();
    for (size_t at = 0; at + 8 <= ends; at += 8) words.push_back(at);
    for (size_t at : rec.library ? rec.movable : words) {
      uintptr_t v;
      std::memcpy(&v, rec.bytes.data() + at, 8);
      const auto* p = reinterpret_cast<const unsigned char*>(v);
      for (size_t b = 0; b < g->bindings.size(); ++b) {
        BindingInfo& bi = g->bindings[b];
        if (p >= bi.base && p < bi.base + std::max<size_t>(bi.bytes, 1)) {
          bi.slots.push_back(g->slots.size());
          g->slots.push_back({r, at, p - bi.base});
          bi.library = bi.library || rec.library;
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
  const auto instantiating = std::chrono::steady_clock::now();
  KILN_CUDA_CHECK_DEVICE(cudaGraphInstantiate(&g->exec, graph, 0), c.index);
  const auto now = std::chrono::steady_clock::now();
  g->capture_ms = std::chrono::duration<double, std::milli>(now - c.t0).count();
  g->instantiate_ms = std::chrono::duration<double, std::milli>(now - instantiating).count();
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

bool Graph::holds_library_pointers(int binding) const {
  return impl_->bindings[binding].library;
}

bool Graph::keeps_alignment(int binding, const void* base) const {
  const BindingInfo& b = impl_->bindings[binding];
  const auto moved = reinterpret_cast<uintptr_t>(base) - reinterpret_cast<uintptr_t>(b.base);
  return !b.library || moved % kLibraryAlignment == 0;
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
  if (!g.error_slots.empty()) kiln::cuda::note_replay(&g, stream);
}

void Graph::check_errors() const {
  if (!impl_->error_slots.empty()) kiln::cuda::check_errors(impl_->error_slots);
}

void Graph::update() {
  Impl& g = *impl_;
  kiln::cuda::DeviceGuard guard(g.index);
  for (const HostValue& h : g.host_values) {
    const unsigned char* src = h.binding >= 0 ? g.current[h.binding] + h.delta : h.src;
    unsigned char* held = g.records[h.record].bytes.data() + kPutValue * 8;
    if (std::memcmp(held, src, h.bytes) == 0) continue;
    std::memcpy(held, src, h.bytes);
    g.dirty_records[h.record] = true;
  }
  for (size_t r = 0; r < g.records.size(); ++r) {
    if (!g.dirty_records[r]) continue;
    KernelRecord& rec = g.records[r];
    if (rec.copy) {
      uint64_t words[kCopyWords];
      for (int w = 0; w < kCopyWords; ++w) words[w] = word_at(rec, w);
      set_word(rec, kCopyUnit, copy_unit(words));
    }
    if (rec.library) {
      set_library_params(g.exec, rec, g.index);
      g.dirty_records[r] = false;
      continue;
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

double Graph::instantiate_ms() const {
  return impl_->instantiate_ms;
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

namespace {

std::atomic<size_t>& probe_bytes() {
  static std::atomic<size_t> bytes{[] {
    const std::optional<std::string> v = env_string("KILN_GRAPH_PROBE_BYTES");
    if (v && *v == "off") return SIZE_MAX;
    if (v && v->find_first_not_of("0123456789") != std::string::npos) {
      warn_env_value("KILN_GRAPH_PROBE_BYTES", *v, "a number of bytes or off");
      return kDefaultProbeBytes;
    }
    const std::optional<int64_t> n = env_int("KILN_GRAPH_PROBE_BYTES", 0, INT64_MAX);
    return n ? static_cast<size_t>(*n) : kDefaultProbeBytes;
  }()};
  return bytes;
}

}  // namespace

size_t library_probe_bytes() {
  return probe_bytes().load(std::memory_order_relaxed);
}

size_t set_library_probe_bytes(size_t bytes) {
  return probe_bytes().exchange(bytes);
}

}  // namespace kiln::graphs
