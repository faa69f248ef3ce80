#include "runtime/cuda/blas_lt.h"

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>

#include "kiln/logging.h"
#include "kiln/ops.h"
#include "runtime/core/hooks.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/blas.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/cuda/device_guard.h"

namespace kiln::cuda {

namespace {

std::atomic<bool> g_allow_tf32{false};
constexpr int kMaxDevices = 64;

// One handle per (thread, device): cuBLASLt handles are cheap, and a handle
// of its own spares each thread a lock. Destroyed when the thread ends.
struct ThreadHandles {
  std::array<cublasLtHandle_t, kMaxDevices> handles{};
  ~ThreadHandles() {
    for (cublasLtHandle_t h : handles) {
      if (h) (void)cublasLtDestroy(h);
    }
  }
};

cublasLtHandle_t handle_for(int device) {
  thread_local ThreadHandles t;
  KILN_INTERNAL_ASSERT(device >= 0 && device < kMaxDevices, "cuBLASLt: device index ", device,
                       " out of range");
  cublasLtHandle_t& h = t.handles[static_cast<size_t>(device)];
  if (!h) KILN_CUBLAS_CHECK_DEVICE(cublasLtCreate(&h), device);
  return h;
}

// Hopper's fastest kernels want more scratch than older parts (PyTorch uses
// the same split); the block comes from the caching allocator per call.
size_t workspace_bytes(int device) {
  return device_properties(device).major >= 9 ? size_t{32} << 20 : size_t{4} << 20;
}

// A matrix as cuBLASLt takes it: column-major rows x cols with leading
// dimension ld, read transposed when `trans` (Note [cuBLASLt layouts]).
struct LtMatrix {
  bool trans = false;
  int64_t rows = 0, cols = 0, ld = 0;
};

// The column-major layout of a [r, c] matrix with strides (rs, cs), as stored.
std::optional<LtMatrix> column_major(int64_t r, int64_t c, int64_t rs, int64_t cs) {
  if (rs < 0 || cs < 0) return std::nullopt;
  const int64_t min_ld = std::max<int64_t>(r, 1);
  if ((r <= 1 || rs == 1) && (c <= 1 || cs >= min_ld)) {
    return LtMatrix{false, r, c, c <= 1 ? min_ld : cs};
  }
  return std::nullopt;
}

// An operand: as stored, or as the transpose of its column-major transpose.
std::optional<LtMatrix> operand(int64_t r, int64_t c, int64_t rs, int64_t cs) {
  if (auto m = column_major(r, c, rs, cs)) return m;
  if (auto m = column_major(c, r, cs, rs)) return LtMatrix{true, m->rows, m->cols, m->ld};
  return std::nullopt;
}

int64_t alignment_of(const void* p, int64_t stride_bytes = 0) {
  const auto bits = reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(stride_bytes) | 256u;
  return static_cast<int64_t>(bits & (~bits + 1));
}

struct Types {
  cudaDataType_t data;
  cudaDataType_t scale;
  cublasComputeType_t compute;
};

Types types_for(DType dtype) {
  const bool tf32 = g_allow_tf32.load(std::memory_order_relaxed);
  switch (dtype) {
    case kFloat32:
      return {CUDA_R_32F, CUDA_R_32F, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    case kFloat16:
      return {CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case kBFloat16:
      return {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case kFloat64:
      return {CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F};
    default:
      KILN_INTERNAL_ASSERT(false, "lt_matmul called with dtype ", dtype);
  }
}

cublasLtEpilogue_t epilogue_for(Activation act, bool bias) {
  switch (act) {
    case Activation::None:
      return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case Activation::Relu:
      return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case Activation::GeluTanh:
      return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// --- Heuristic cache --------------------------------------------------------------------

// Everything the algorithm choice depends on: problem, layouts, types,
// epilogue, alignments, workspace and device.
using AlgoKey = std::array<int64_t, 24>;

struct AlgoKeyHash {
  size_t operator()(const AlgoKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct AlgoEntry {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;  // bytes the algorithm needs
};

struct AlgoCache {
  std::mutex mu;
  std::unordered_map<AlgoKey, AlgoEntry, AlgoKeyHash> entries;
  std::atomic<int64_t> hits{0}, misses{0}, disk_hits{0};
  std::atomic<int64_t> miss_ns{0};
};

AlgoCache& algo_cache() {
  static auto* cache = new AlgoCache();  // leaked: used until exit
  return *cache;
}

// Note [cuBLASLt algorithm disk cache]
// A heuristic query costs from under a millisecond to over 100 ms (the first
// queries of a process for skinny shapes), and its answer is the same in the
// next process: cublasLt.h documents cublasLtMatmulAlgo_t as trivially
// serializable for use with the same cuBLAS version. Choices are therefore kept
// in the persistent cache (Note [Persistent cache hook]) under a key naming the
// library version, the device's name and compute capability and the problem
// (AlgoKey without the device index). A restored algorithm is still checked
// against the problem with cublasLtMatmulAlgoCheck before use; one that fails
// the check is asked for again and replaced. "No algorithm" is kept too.
std::string disk_key(const AlgoKey& key, int device) {
  const cudaDeviceProp& prop = device_properties(device);
  std::ostringstream k;
  k << "cublaslt-algo-1|" << cublasLtGetVersion() << "|" << prop.name << "|sm" << prop.major
    << prop.minor;
  for (size_t i = 1; i < key.size(); ++i) k << "|" << key[i];
  return k.str();
}

constexpr size_t kAlgoBytes = sizeof(cublasLtMatmulAlgo_t);

void save_algo(const std::string& disk, const AlgoEntry& e) {
  std::vector<char> payload(1 + kAlgoBytes + sizeof(uint64_t));
  payload[0] = e.found ? 1 : 0;
  std::memcpy(payload.data() + 1, &e.algo, kAlgoBytes);
  const uint64_t ws = e.workspace;
  std::memcpy(payload.data() + 1 + kAlgoBytes, &ws, sizeof ws);
  persistent_store(disk, payload);
}

std::optional<AlgoEntry> restore_algo(const std::string& disk, cublasLtHandle_t handle,
                                      cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                      cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t d,
                                      size_t ws_bytes) {
  std::optional<std::vector<char>> payload = persistent_load(disk);
  if (!payload || payload->size() != 1 + kAlgoBytes + sizeof(uint64_t)) return std::nullopt;
  AlgoEntry e;
  e.found = (*payload)[0] != 0;
  if (!e.found) return e;
  std::memcpy(&e.algo, payload->data() + 1, kAlgoBytes);
  cublasLtMatmulHeuristicResult_t check{};
  if (cublasLtMatmulAlgoCheck(handle, desc, a, b, d, d, &e.algo, &check) != CUBLAS_STATUS_SUCCESS ||
      check.workspaceSize > ws_bytes) {
    KILN_LOG(Perf, "cuBLASLt: a stored algorithm failed its check; asking the heuristic again");
    return std::nullopt;
  }
  e.workspace = check.workspaceSize;
  return e;
}

// --- Descriptors (RAII over the create/destroy pairs) -----------------------------------

struct MatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  int device;
  MatmulDesc(cublasComputeType_t compute, cudaDataType_t scale, int dev) : device(dev) {
    KILN_CUBLAS_CHECK_DEVICE(cublasLtMatmulDescCreate(&desc, compute, scale), device);
  }
  ~MatmulDesc() {
    if (desc) (void)cublasLtMatmulDescDestroy(desc);
  }
  template <class T>
  void set(cublasLtMatmulDescAttributes_t attr, const T& value) {
    KILN_CUBLAS_CHECK_DEVICE(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(T)), device);
  }
};

struct Layout {
  cublasLtMatrixLayout_t layout = nullptr;
  Layout(cudaDataType_t type, const LtMatrix& m, int32_t batch, int64_t batch_stride, int device) {
    KILN_CUBLAS_CHECK_DEVICE(
        cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(m.rows),
                                   static_cast<uint64_t>(m.cols), m.ld),
        device);
    if (batch > 1) {
      KILN_CUBLAS_CHECK_DEVICE(
          cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                           sizeof(batch)),
          device);
      KILN_CUBLAS_CHECK_DEVICE(
          cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                           &batch_stride, sizeof(batch_stride)),
          device);
    }
  }
  ~Layout() {
    if (layout) (void)cublasLtMatrixLayoutDestroy(layout);
  }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  int device;
  explicit Preference(int dev) : device(dev) {
    KILN_CUBLAS_CHECK_DEVICE(cublasLtMatmulPreferenceCreate(&pref), device);
  }
  ~Preference() {
    if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
  }
  template <class T>
  void set(cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
    KILN_CUBLAS_CHECK_DEVICE(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(T)),
                             device);
  }
};

// --- One cuBLASLt call ------------------------------------------------------------------

// A column-major problem D[m, n] = act(alpha * op(A)[m, k] @ op(B)[k, n] + beta * D + bias)
// over `batch` strided entries; C is D.
struct Problem {
  LtMatrix a, b, d;
  int64_t m = 0, n = 0, k = 0;
  int32_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;
  bool swapped = false;  // A is the tensor b, B the tensor a, D out^T
  // Element offsets (A, B, D) of the outer batch entries (dims that did not collapse).
  std::vector<std::array<int64_t, 3>> offsets{{0, 0, 0}};
};

// Note [cuBLASLt under graph capture]
// A call is safe to capture: alpha and beta are host values (read when the
// call is made, so baked into the captured kernels), the heuristic is a host
// query whose answer is cached before capture usually begins, and the
// workspace comes from the caching allocator on the current stream, which
// during capture hands out blocks of the graph's private pool.

// --- Warm-up (Note [cuBLASLt warm-up]) ---------------------------------------------------

struct Warmup {
  std::once_flag started;
  std::mutex mu;
  std::condition_variable cv;
  bool running = false;
};

Warmup& warmup_for(int device) {
  static auto* all = new std::array<Warmup, kMaxDevices>();  // leaked: a thread may outlive main
  KILN_INTERNAL_ASSERT(device >= 0 && device < kMaxDevices, "cuBLASLt: device index ", device,
                       " out of range");
  return (*all)[static_cast<size_t>(device)];
}

// One heuristic query for a small half-precision problem: what initializes cuBLASLt.
void warm_up(int device) {
  DeviceGuard guard(device);
  MatmulDesc desc(CUBLAS_COMPUTE_32F, CUDA_R_32F, device);
  const LtMatrix m{false, 64, 64, 64};
  Layout a(CUDA_R_16F, m, 1, 0, device), b(CUDA_R_16F, m, 1, 0, device),
      d(CUDA_R_16F, m, 1, 0, device);
  Preference pref(device);
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
           static_cast<uint64_t>(workspace_bytes(device)));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  (void)cublasLtMatmulAlgoGetHeuristic(handle_for(device), desc.desc, a.layout, b.layout, d.layout,
                                       d.layout, pref.pref, 1, &result, &count);
}

void wait_for_warmup(int device) {
  Warmup& w = warmup_for(device);
  std::unique_lock<std::mutex> lock(w.mu);
  w.cv.wait(lock, [&] { return !w.running; });
}

// A process that exits while a warm-up runs waits for it first: the CUDA
// runtime's own exit handlers, registered before this object was made, run
// after its destructor, so cuBLASLt is never torn down under the thread.
struct WaitAtExit {
  ~WaitAtExit() {
    for (int d = 0; d < kMaxDevices; ++d) wait_for_warmup(d);
  }
};

// Runs `p`; false (nothing queued) when cuBLASLt has no algorithm for it.
bool run_problem(const Problem& p, DType dtype, char* a, char* b, char* d, double alpha,
                 double beta, Activation act, const void* bias, int device) {
  // The heuristic reads the current device's properties; the kernels launch on it.
  DeviceGuard guard(device);
  const Types t = types_for(dtype);
  const auto isz = static_cast<int64_t>(itemsize(dtype));
  const cublasLtEpilogue_t epilogue = epilogue_for(act, bias != nullptr);
  const size_t ws_bytes = workspace_bytes(device);

  // Alignment over every pointer the outer loop visits.
  int64_t outer_a = 0, outer_b = 0, outer_d = 0;
  for (const auto& o : p.offsets) {
    outer_a |= o[0] * isz;
    outer_b |= o[1] * isz;
    outer_d |= o[2] * isz;
  }
  const int64_t align_a = alignment_of(a, outer_a | p.stride_a * isz);
  const int64_t align_b = alignment_of(b, outer_b | p.stride_b * isz);
  const int64_t align_d = alignment_of(d, outer_d | p.stride_d * isz);
  const int64_t align_bias = bias ? alignment_of(bias) : 0;

  MatmulDesc desc(t.compute, t.scale, device);
  const cublasOperation_t op_a = p.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = p.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  if (bias) desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  Layout la(t.data, p.a, p.batch, p.stride_a, device);
  Layout lb(t.data, p.b, p.batch, p.stride_b, device);
  Layout ld(t.data, p.d, p.batch, p.stride_d, device);

  const AlgoKey key{device,
                    static_cast<int64_t>(dtype),
                    t.compute,
                    p.m,
                    p.n,
                    p.k,
                    p.a.trans,
                    p.b.trans,
                    p.a.ld,
                    p.b.ld,
                    p.d.ld,
                    p.batch,
                    p.stride_a,
                    p.stride_b,
                    p.stride_d,
                    epilogue,
                    align_a,
                    align_b,
                    align_d,
                    align_bias,
                    static_cast<int64_t>(ws_bytes),
                    p.a.rows,
                    p.b.rows,
                    0};
  AlgoCache& cache = algo_cache();
  AlgoEntry entry;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.entries.find(key);
    if (it != cache.entries.end()) {
      entry = it->second;
      cached = true;
    }
  }
  cublasLtHandle_t handle = handle_for(device);
  if (cached) {
    cache.hits.fetch_add(1, std::memory_order_relaxed);
  } else {
    cache.misses.fetch_add(1, std::memory_order_relaxed);
    const auto t0 = std::chrono::steady_clock::now();
    wait_for_warmup(device);
    const std::string stored_key = disk_key(key, device);
    std::optional<AlgoEntry> restored =
        restore_algo(stored_key, handle, desc.desc, la.layout, lb.layout, ld.layout, ws_bytes);
    if (restored) {
      entry = *restored;
      cache.disk_hits.fetch_add(1, std::memory_order_relaxed);
    } else {
      Preference pref(device);
      pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(ws_bytes));
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(align_a));
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(align_b));
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(align_d));
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(align_d));
      cublasLtMatmulHeuristicResult_t result{};
      int count = 0;
      const cublasStatus_t st =
          cublasLtMatmulAlgoGetHeuristic(handle, desc.desc, la.layout, lb.layout, ld.layout,
                                         ld.layout, pref.pref, 1, &result, &count);
      // NOT_SUPPORTED is an answer (no algorithm), not a failure.
      if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
        detail::fail_cublas(st, "cublasLtMatmulAlgoGetHeuristic(...)", __FILE__, __LINE__, device);
      }
      if (st == CUBLAS_STATUS_SUCCESS && count > 0) {
        entry.found = true;
        entry.algo = result.algo;
        entry.workspace = result.workspaceSize;
      }
      save_algo(stored_key, entry);
    }
    cache.miss_ns.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count(),
        std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(cache.mu);
    cache.entries.emplace(key, entry);
  }
  if (!entry.found) return false;

  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const void* alpha_p = t.scale == CUDA_R_64F ? static_cast<const void*>(&alpha) : &alpha_f;
  const void* beta_p = t.scale == CUDA_R_64F ? static_cast<const void*>(&beta) : &beta_f;
  const Device dev = Device::cuda(device);
  // From the caching allocator on the current stream: freed after the calls
  // are queued, reused only by work ordered after them.
  Tensor workspace;
  if (entry.workspace > 0) {
    workspace = empty_tensor({static_cast<int64_t>(entry.workspace)}, kUInt8, dev);
  }
  void* ws = entry.workspace > 0 ? workspace.data_ptr() : nullptr;
  const Stream stream = Stream::current(dev);
  for (const auto& o : p.offsets) {
    char* pa = a + o[0] * isz;
    char* pb = b + o[1] * isz;
    char* pd = d + o[2] * isz;
    KILN_CUBLAS_CHECK_DEVICE(
        cublasLtMatmul(handle, desc.desc, alpha_p, pa, la.layout, pb, lb.layout, beta_p, pd,
                       ld.layout, pd, ld.layout, &entry.algo, ws, entry.workspace, raw(stream)),
        device);
  }
  return true;
}

// --- From tensors to a Problem ----------------------------------------------------------

struct BatchDim {
  int64_t size, out, a, b;  // size and the three strides
};

// Batch dims of size > 1, adjacent ones merged where all three tensors step evenly.
std::vector<BatchDim> collapse_batch(const Tensor& out, const Tensor& a, const Tensor& b) {
  std::vector<BatchDim> dims;
  for (int64_t d = 0; d + 2 < out.dim(); ++d) {
    if (out.size(d) == 1) continue;
    BatchDim cur{out.size(d), out.stride(d), a.stride(d), b.stride(d)};
    if (!dims.empty()) {
      BatchDim& prev = dims.back();
      if (prev.out == cur.out * cur.size && prev.a == cur.a * cur.size &&
          prev.b == cur.b * cur.size) {
        prev = {prev.size * cur.size, cur.out, cur.a, cur.b};
        continue;
      }
    }
    dims.push_back(cur);
  }
  return dims;
}

// When dims [0, nd - 1) of `t` form one evenly strided run of rows, its stride.
std::optional<int64_t> folded_row_stride(const Tensor& t) {
  std::optional<int64_t> stride;
  int64_t expected = 0;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (!stride) {
      stride = t.stride(d);
    } else if (t.stride(d) != expected) {
      return std::nullopt;
    }
    expected = t.stride(d) * t.size(d);
  }
  return stride ? stride : std::optional<int64_t>(1);
}

bool batch_is_broadcast(const Tensor& t) {
  for (int64_t d = 0; d + 2 < t.dim(); ++d) {
    if (t.size(d) != 1 && t.stride(d) != 0) return false;
  }
  return true;
}

// Builds the cuBLASLt problem for out = a @ b (Note [cuBLASLt layouts]), with
// `swap` computing out^T = b^T a^T. Empty when some layout cannot be expressed.
std::optional<Problem> plan(const Tensor& out, const Tensor& a, const Tensor& b, bool swap) {
  const int64_t nd = out.dim();
  int64_t m = out.size(nd - 2), n = out.size(nd - 1);
  const int64_t k = a.size(nd - 1);
  int64_t ors = out.stride(nd - 2), ocs = out.stride(nd - 1);
  int64_t ars = a.stride(nd - 2), acs = a.stride(nd - 1);
  const int64_t brs = b.stride(nd - 2), bcs = b.stride(nd - 1);
  std::vector<BatchDim> batch = collapse_batch(out, a, b);
  // A batch times one shared matrix is one product with more rows (matmul of
  // [B, T, K] by [K, N]); with one row per entry the row stride is the batch's.
  if (!batch.empty() && batch_is_broadcast(b)) {
    std::optional<int64_t> ra = folded_row_stride(a), ro = folded_row_stride(out);
    int64_t count = 1;
    for (const BatchDim& d : batch) count *= d.size;
    if (ra && ro && m * count <= std::numeric_limits<int32_t>::max()) {
      m *= count;
      ars = *ra;
      ors = *ro;
      batch.clear();
    }
  }
  Problem p;
  std::optional<LtMatrix> ma, mb, md;
  if (!swap) {
    md = column_major(m, n, ors, ocs);
    ma = operand(m, k, ars, acs);
    mb = operand(k, n, brs, bcs);
    p.m = m;
    p.n = n;
  } else {
    md = column_major(n, m, ocs, ors);
    ma = operand(n, k, bcs, brs);
    mb = operand(k, m, acs, ars);
    p.m = n;
    p.n = m;
  }
  if (!ma || !mb || !md) return std::nullopt;
  p.a = *ma;
  p.b = *mb;
  p.d = *md;
  p.k = k;
  p.swapped = swap;
  if (!batch.empty()) {
    const BatchDim inner = batch.back();
    if (inner.out == 0) return std::nullopt;  // entries would write the same memory
    KILN_CHECK(inner.size <= std::numeric_limits<int32_t>::max(),
               "[matmul] expected fewer than 2^31 matrices in a batch on CUDA, got ", inner.size);
    p.batch = static_cast<int32_t>(inner.size);
    p.stride_d = inner.out;
    p.stride_a = swap ? inner.b : inner.a;
    p.stride_b = swap ? inner.a : inner.b;
    batch.pop_back();
    for (const BatchDim& d : batch) {
      if (d.out == 0) return std::nullopt;
    }
    // Offsets (slot a, slot b, d) of every outer entry, in row-major order.
    p.offsets.clear();
    int64_t outer = 1;
    for (const BatchDim& d : batch) outer *= d.size;
    std::vector<int64_t> index(batch.size(), 0);
    std::array<int64_t, 3> off{0, 0, 0};
    for (int64_t e = 0; e < outer; ++e) {
      p.offsets.push_back(swap ? std::array<int64_t, 3>{off[1], off[0], off[2]}
                               : std::array<int64_t, 3>{off[0], off[1], off[2]});
      for (size_t i = batch.size(); i-- > 0;) {
        const BatchDim& d = batch[i];
        if (++index[i] < d.size) {
          off[0] += d.a;
          off[1] += d.b;
          off[2] += d.out;
          break;
        }
        index[i] = 0;
        off[0] -= d.a * (d.size - 1);
        off[1] -= d.b * (d.size - 1);
        off[2] -= d.out * (d.size - 1);
      }
    }
  }
  return p;
}

bool shares_storage(const Tensor& x, const Tensor& y) {
  return x.numel() > 0 && y.numel() > 0 && x.impl()->storage().get() == y.impl()->storage().get();
}

char* bytes(const Tensor& t) {
  return static_cast<char*>(t.data_ptr());
}

Tensor dense_copy(const Tensor& t) {
  Tensor c = empty_tensor(t.sizes(), t.dtype(), t.device());
  c.copy_(t);
  return c;
}

void apply_activation(Tensor& out, Activation act) {
  if (act == Activation::Relu) kiln::relu_(out);
  if (act == Activation::GeluTanh) kiln::gelu_(out, "tanh");
}

}  // namespace

Activation parse_activation(std::string_view act, const char* op) {
  if (act == "none") return Activation::None;
  if (act == "relu") return Activation::Relu;
  if (act == "gelu_tanh") return Activation::GeluTanh;
  KILN_FAIL("[", op, "] expected act to be one of 'none', 'relu', 'gelu_tanh', got '", act, "'");
}

namespace {

// `may_retry`: when cuBLASLt has no algorithm for these operands (a stride-0
// batch, an odd alignment), try once more with dense copies of them.
void lt_matmul_impl(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& beta,
                    const Scalar& alpha, Activation act, const Tensor* bias, bool may_retry) {
  const int64_t nd = out.dim();
  KILN_INTERNAL_ASSERT(nd >= 2 && a.dim() == nd && b.dim() == nd, "lt_matmul ranks differ");
  if (out.numel() == 0) return;
  const DType dtype = out.dtype();
  const int device = out.device().index();
  const bool beta_is_zero = cpu::scalar_is_zero(beta, dtype);
  const double beta_d = beta_is_zero ? 0.0 : beta.to<double>();
  const double alpha_d = alpha.to<double>();
  Tensor target = out;
  if (a.size(nd - 1) == 0) {  // an empty sum: beta * out (+ bias, act)
    if (beta_is_zero) {
      target.zero_();
    } else if (beta_d != 1.0) {
      target.mul_(beta);
    }
    if (bias) target.add_(*bias);
    apply_activation(target, act);
    return;
  }
  const int64_t limit = std::numeric_limits<int32_t>::max();
  KILN_CHECK(out.size(nd - 2) <= limit && out.size(nd - 1) <= limit && a.size(nd - 1) <= limit,
             "[matmul] expected matrix sizes below 2^31 on CUDA, got a product of ", a.sizes(),
             " and ", b.sizes());
  // Layouts cuBLASLt cannot read become dense copies; an output it cannot
  // write, or one that overlaps an operand, becomes a dense scratch tensor.
  auto try_plan = [](const Tensor& o, const Tensor& x, const Tensor& y) {
    std::optional<Problem> p = plan(o, x, y, /*swap=*/true);
    return p ? p : plan(o, x, y, /*swap=*/false);
  };
  const bool overlaps = shares_storage(out, a) || shares_storage(out, b);
  Tensor da = a, db = b, dst = out;
  std::optional<Problem> p;
  if (!overlaps) p = try_plan(out, a, b);
  if (!p && overlaps) {
    dst = empty_tensor(out.sizes(), dtype, out.device());
    p = try_plan(dst, a, b);
  }
  if (!p) {
    da = dense_copy(a);
    db = dense_copy(b);
    p = try_plan(dst, da, db);
  }
  if (!p && dst.is_same(out)) {
    dst = empty_tensor(out.sizes(), dtype, out.device());
    p = try_plan(dst, da, db);
  }
  KILN_INTERNAL_ASSERT(p, "lt_matmul: no cuBLASLt layout for dense operands of ", a.sizes(),
                       " and ", b.sizes());
  if (!dst.is_same(out) && !beta_is_zero) dst.copy_(out);
  // The bias epilogue adds a vector along D's rows: the output's columns in
  // the swapped form. Any other bias is added by its own kernel.
  const bool bias_epilogue = bias && p->swapped && p->batch == 1 && p->offsets.size() == 1 &&
                             bias->dim() == 1 && bias->size(0) == out.size(nd - 1) &&
                             (bias->stride(0) == 1 || bias->size(0) == 1);
  char* slot_a = bytes(p->swapped ? db : da);
  char* slot_b = bytes(p->swapped ? da : db);
  // RELU/GELU epilogues only alongside the bias (Note [Matmul epilogues]).
  bool fused = bias_epilogue;
  bool ran =
      run_problem(*p, dtype, slot_a, slot_b, bytes(dst), alpha_d, beta_d,
                  fused ? act : Activation::None, fused ? bias->data_ptr() : nullptr, device);
  if (!ran && fused) {
    fused = false;
    ran = run_problem(*p, dtype, slot_a, slot_b, bytes(dst), alpha_d, beta_d, Activation::None,
                      nullptr, device);
  }
  if (!ran && may_retry) {
    lt_matmul_impl(out, dense_copy(a), dense_copy(b), beta, alpha, act, bias, false);
    return;
  }
  KILN_CHECK(ran, "[matmul] cuBLASLt found no algorithm for a ", dtype, " product of ", a.sizes(),
             " and ", b.sizes(), " on ", out.device());
  if (!fused) {
    if (bias) dst.add_(*bias);
    apply_activation(dst, act);
  }
  if (!dst.is_same(out)) target.copy_(dst);
}

}  // namespace

void lt_matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& beta,
               const Scalar& alpha, Activation act, const Tensor* bias) {
  lt_matmul_impl(out, a, b, beta, alpha, act, bias, /*may_retry=*/true);
}

void start_blas_warmup(int device) {
  Warmup& w = warmup_for(device);
  static WaitAtExit wait_at_exit;
  std::call_once(w.started, [&] {
    const char* env = std::getenv("KILN_BLAS_WARMUP");
    if (env && std::string(env) == "0") return;
    {
      std::lock_guard<std::mutex> lock(w.mu);
      w.running = true;
    }
    std::thread([device, &w] {
      try {
        warm_up(device);
      } catch (const std::exception& e) {
        KILN_LOG(Perf, "cuBLASLt warm-up on cuda:", device, " failed: ", e.what());
      }
      std::lock_guard<std::mutex> lock(w.mu);
      w.running = false;
      w.cv.notify_all();
    }).detach();
  });
}

LtCacheStats lt_cache_stats() {
  AlgoCache& c = algo_cache();
  return {c.hits.load(), c.misses.load(), c.disk_hits.load(),
          static_cast<double>(c.miss_ns.load()) / 1e6};
}

void set_allow_tf32(bool allow) {
  g_allow_tf32.store(allow, std::memory_order_relaxed);
}
bool allow_tf32() {
  return g_allow_tf32.load(std::memory_order_relaxed);
}

}  // namespace kiln::cuda
