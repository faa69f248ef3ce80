#include "jit/codegen_cpu/launch_cpu.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "jit/codegen_cpu/pointwise_cpu.h"
#include "kiln/logging.h"

namespace kiln::jit::cpu {
namespace {

constexpr int64_t kGrain = 32768;  // elements per task

std::atomic<int64_t> g_compiled{0};

struct Cache {
  std::mutex mu;
  JitRuntime runtime;
  std::unordered_map<std::string, std::unique_ptr<CpuPointwiseKernel>> kernels;
  std::unordered_map<std::string, std::string> refused;  // key -> why
};

Cache& cache() {
  static auto* c = new Cache();  // leaked: kernels may run during static teardown
  return *c;
}

// Returns the kernel for this structure and layout, compiling it once; null
// when the generator refused it (remembered, so it is not retried).
const CpuPointwiseKernel* get_kernel(const PointwiseKernel& k,
                                     const std::vector<RunLayout>& layouts) {
  std::string key = k.str();
  for (RunLayout l : layouts) key += l == RunLayout::Dense ? 'd' : 'b';
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.kernels.find(key);
  if (it != c.kernels.end()) return it->second.get();
  if (c.refused.count(key)) return nullptr;
  try {
    auto kernel = std::make_unique<CpuPointwiseKernel>(c.runtime, host_isa(), k, layouts);
    g_compiled.fetch_add(1, std::memory_order_relaxed);
    return c.kernels.emplace(key, std::move(kernel)).first->second.get();
  } catch (const Error& e) {
    KILN_LOG(Fusion, "CPU code generation refused a group, its nodes run one by one: ", e.what());
    c.refused.emplace(key, e.what());
    return nullptr;
  }
}

void give_memory(const Tensor& t) {
  StorageImpl* s = t.impl()->storage().get();
  if (s->data() == nullptr && s->nbytes() > 0) {
    auto fresh = StorageImpl::allocate(s->nbytes(), s->device());
    s->adopt_data(*fresh);
  }
}

}  // namespace

int64_t cpu_kernels_compiled() {
  return g_compiled.load();
}

bool run_pointwise_cpu(const FusedGroup& g) {
  std::string why;
  if (!cpu_supports(g.kernel, &why)) {
    KILN_LOG(Fusion, "group runs node by node on the CPU: unsupported ", why);
    return false;
  }
  std::vector<Tensor> ops = g.outputs;
  ops.insert(ops.end(), g.inputs.begin(), g.inputs.end());
  for (const Tensor& t : ops) {
    if (!t.device().is_cpu()) return false;
  }
  const int nops = static_cast<int>(ops.size());
  const int nout = static_cast<int>(g.outputs.size());
  const int64_t nd = static_cast<int64_t>(g.shape.size());
  int64_t numel = 1;
  for (int64_t s : g.shape) numel *= s;

  // Element strides over the iteration shape; 0 where an operand broadcasts.
  std::vector<DimVector> st(nops, DimVector(nd, 0));
  for (int k = 0; k < nops; ++k) {
    IntArrayRef s = ops[k].sizes(), t = ops[k].strides();
    int64_t off = nd - static_cast<int64_t>(s.size());
    for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
      st[k][off + d] = s[d] == 1 && g.shape[off + d] != 1 ? 0 : t[d];
    }
  }
  // Order dims outermost first by the first output's strides, then merge
  // neighbours that step as one for every operand.
  std::vector<int64_t> order(nd);
  for (int64_t d = 0; d < nd; ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return st[0][a] > st[0][b]; });
  DimVector sizes;
  std::vector<DimVector> strides(nops);
  for (int64_t d : order) {
    if (g.shape[d] == 1) continue;
    bool merge = !sizes.empty();
    for (int k = 0; k < nops && merge; ++k) {
      merge = strides[k].back() == st[k][d] * g.shape[d];
    }
    if (merge) {
      sizes.back() *= g.shape[d];
      for (int k = 0; k < nops; ++k) strides[k].back() = st[k][d];
    } else {
      sizes.push_back(g.shape[d]);
      for (int k = 0; k < nops; ++k) strides[k].push_back(st[k][d]);
    }
  }
  if (sizes.empty()) {  // 0-dim or all size-1 dims: one element
    sizes.push_back(1);
    for (int k = 0; k < nops; ++k) strides[k].push_back(k < nout ? 1 : 0);
  }
  // The innermost dim must be dense (or broadcast, for inputs) for every operand.
  std::vector<RunLayout> layouts(nops);
  for (int k = 0; k < nops; ++k) {
    int64_t s = strides[k].back();
    bool ok = s == 1 || (k >= nout && s == 0) || sizes.back() == 1;
    if (!ok) {
      KILN_LOG(Fusion, "group runs node by node on the CPU: operand ", k,
               " is strided in the innermost dim");
      return false;
    }
    layouts[k] = s == 0 && k >= nout ? RunLayout::Broadcast : RunLayout::Dense;
  }
  const CpuPointwiseKernel* kernel = get_kernel(g.kernel, layouts);
  if (!kernel) return false;

  for (const Tensor& t : g.outputs) give_memory(t);
  if (numel == 0) return true;
  char* base[kMaxRunOperands];
  int64_t item[kMaxRunOperands];
  for (int k = 0; k < nops; ++k) {
    base[k] = static_cast<char*>(ops[k].data_ptr());
    item[k] = static_cast<int64_t>(ops[k].element_size());
  }
  const int64_t inner = sizes.back();
  const int64_t rows = numel / inner;
  const int outer_dims = static_cast<int>(sizes.size()) - 1;
  // Calls the kernel on elements [begin, end) of the flattened iteration space.
  auto run_range = [&](int64_t begin, int64_t end) {
    CpuRun r;
    while (begin < end) {
      int64_t row = begin / inner, col = begin % inner;
      int64_t n = std::min(inner - col, end - begin);
      int64_t rem = row;
      for (int k = 0; k < nops; ++k) r.ptrs[k] = base[k];
      for (int d = outer_dims - 1; d >= 0; --d) {
        int64_t idx = rem % sizes[d];
        rem /= sizes[d];
        for (int k = 0; k < nops; ++k) r.ptrs[k] += idx * strides[k][d] * item[k];
      }
      for (int k = 0; k < nops; ++k) r.ptrs[k] += col * strides[k].back() * item[k];
      r.n = n;
      kernel->run(r);
      begin += n;
    }
  };
  (void)rows;
  if (numel < 2 * kGrain) {
    run_range(0, numel);
  } else {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, numel, kGrain),
                      [&](const tbb::blocked_range<int64_t>& r) { run_range(r.begin(), r.end()); });
  }
  for (const Tensor& t : g.outputs) t.impl()->bump_version();
  return true;
}

}  // namespace kiln::jit::cpu
