#include "jit/codegen_cpu/launch_cpu.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "jit/codegen_cpu/pointwise_cpu.h"
#include "jit/ir/iteration.h"
#include "kiln/logging.h"
#include "runtime/profiler/recorder.h"

namespace kiln::jit::cpu {
namespace {

// Note [Task grain]
// A fused kernel splits its elements over TBB workers only where each task is
// worth handing over (waking a worker and joining it cost a microsecond or
// two). Cheap bodies (a few instructions per vector: memory-bound adds,
// casts, a GELU) keep PyTorch's fixed grain of 32,768 elements. Costly ones
// (chains of exp, sigmoid, tanh, pow: hundreds of instructions per vector)
// would run 4,096 elements alone for 10 us while the other core idles, so the
// grain shrinks with the work per element, estimated by the machine code of
// the kernel's vector body: kTaskWork code bytes x elements is a task of
// about 4 us on a core of this class (chain16's body, 77 bytes an element,
// ran 4,096 elements in 10.5 us). Results do not depend on the split: every
// element is computed by the same code wherever its task runs.
constexpr int64_t kGrain = 32768;     // elements per task, at most
constexpr int64_t kMinGrain = 1024;   // elements per task, at least
constexpr double kTaskWork = 131072;  // code bytes x elements per task
constexpr double kCheapBytes = 4;     // a body this small per element keeps kGrain

int64_t task_grain(const CpuPointwiseKernel& kernel) {
  const double per_element = std::max(kernel.code_bytes_per_element(), kCheapBytes);
  const auto grain = static_cast<int64_t>(kTaskWork / per_element) & ~int64_t{63};
  return std::clamp(grain, kMinGrain, kGrain);
}

std::atomic<int64_t> g_compiled{0};
std::atomic<int64_t> g_groups_run{0};
std::atomic<int64_t> g_groups_refused{0};

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

}  // namespace

const CpuPointwiseKernel* cpu_pointwise_kernel(const PointwiseKernel& k,
                                               const std::vector<RunLayout>& layouts) {
  const Isa isa = host_isa();  // KILN_CPU_ISA may change between calls
  std::string key = k.key() + isa_name(isa);
  for (RunLayout l : layouts) {
    key += l == RunLayout::Dense ? 'd' : l == RunLayout::Broadcast ? 'b' : 's';
  }
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.kernels.find(key);
  if (it != c.kernels.end()) return it->second.get();
  if (c.refused.count(key)) return nullptr;
  try {
    auto kernel = std::make_unique<CpuPointwiseKernel>(c.runtime, isa, k, layouts);
    g_compiled.fetch_add(1, std::memory_order_relaxed);
    return c.kernels.emplace(key, std::move(kernel)).first->second.get();
  } catch (const Error& e) {
    KILN_LOG(Fusion, "CPU code generation refused a group, its nodes run one by one: ", e.what());
    c.refused.emplace(key, e.what());
    g_groups_refused.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
}

int64_t cpu_kernels_compiled() {
  return g_compiled.load();
}

int64_t cpu_pointwise_groups_run() {
  return g_groups_run.load();
}

int64_t cpu_pointwise_groups_refused() {
  return g_groups_refused.load();
}

namespace {

// Counts a layout refusal (cpu_pointwise_groups_refused).
const CpuPointwiseKernel* refused() {
  g_groups_refused.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

// Note [Output overlap]
// A fused kernel writes each output vector by vector, loading every operand
// of a vector before storing it; node by node, each node finishes before the
// next starts. The two agree when every output's elements are touched by no
// other operand, or by one of the same view (an in-place op reads and writes
// each element at the same index). The group builder keeps a member from
// writing memory the group reads through another view; this check also
// covers outputs (two in-place writes of one storage) and is cheap: byte
// ranges that do not intersect are certainly disjoint.
bool same_view(const Tensor& a, const Tensor& b) {
  return a.impl()->storage().get() == b.impl()->storage().get() &&
         a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

// [first, last] bytes of t's elements in its storage (t not empty).
std::pair<int64_t, int64_t> byte_range(const Tensor& t) {
  int64_t lo = t.storage_offset(), hi = lo;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t span = (t.sizes()[d] - 1) * t.strides()[d];
    (span < 0 ? lo : hi) += span;
  }
  const int64_t item = static_cast<int64_t>(t.element_size());
  return {lo * item, hi * item + item - 1};
}

bool overlaps_another_view(const std::vector<Tensor>& ops, int nout) {
  for (int o = 0; o < nout; ++o) {
    if (ops[o].numel() == 0) continue;
    for (size_t k = 0; k < ops.size(); ++k) {
      if (k == static_cast<size_t>(o) || ops[k].numel() == 0 ||
          ops[k].impl()->storage().get() != ops[o].impl()->storage().get() ||
          (k >= static_cast<size_t>(nout) && same_view(ops[k], ops[o]))) {
        continue;
      }
      auto a = byte_range(ops[o]), b = byte_range(ops[k]);
      if (a.first <= b.second && b.first <= a.second) return true;
    }
  }
  return false;
}

// Checks a group against what the generator handles and finds its kernel;
// Note [Launch memo] on the CPU: the kernel and the coalesced iteration of
// a group, kept while its shape, its operands' sizes and strides and the ISA
// are what they were (a compiled instance runs the same group every call).
// The overlap check depends on which storages the operands are, so it runs
// every time.
struct CpuPointwiseMemo : LaunchMemo {
  Isa isa = Isa::kAvx2;
  DimVector shape;
  OperandGeometry operands;
  Iteration iter;
  const CpuPointwiseKernel* kernel = nullptr;
};

bool memo_holds(const CpuPointwiseMemo& m, const FusedGroup& g) {
  return m.isa == host_isa() && IntArrayRef(m.shape) == IntArrayRef(g.shape) &&
         m.operands.matches(g);
}

// A group's operands: outputs, then inputs.
std::vector<Tensor> operands(const FusedGroup& g) {
  std::vector<Tensor> ops = g.outputs;
  ops.insert(ops.end(), g.inputs.begin(), g.inputs.end());
  return ops;
}

// The kernel for `g` over `ops` (operands(g)) and its iteration; null
// (logged) when it cannot run fused.
const CpuPointwiseKernel* prepare(const FusedGroup& g, const std::vector<Tensor>& ops,
                                  Iteration* iter) {
  for (const Tensor& t : ops) {
    if (!t.device().is_cpu()) return nullptr;
  }
  const int nops = static_cast<int>(ops.size());
  const int nout = static_cast<int>(g.outputs.size());
  auto* memo = dynamic_cast<CpuPointwiseMemo*>(g.launch.memo.get());
  if (memo && !memo_holds(*memo, g)) memo = nullptr;
  if (!memo) {
    std::string why;
    if (!cpu_supports(g.kernel, &why)) {
      KILN_LOG(Fusion, "group runs node by node on the CPU: unsupported ", why);
      return nullptr;
    }
  }
  if (overlaps_another_view(ops, nout)) {
    KILN_LOG(Fusion,
             "group runs node by node on the CPU: an output overlaps another operand "
             "through another view");
    return refused();
  }
  if (memo) {
    *iter = memo->iter;
    return memo->kernel;
  }
  *iter = coalesce(g.shape, ops, nout);
  const DimVector& sizes = iter->sizes;
  const std::vector<DimVector>& strides = iter->strides;
  // In the innermost dim, operands are dense or step by a stride (Note
  // [Strided operands]); inputs may also broadcast.
  std::vector<RunLayout> layouts(nops);
  for (int k = 0; k < nops; ++k) {
    int64_t s = strides[k].back();
    if (s == 1 || sizes.back() == 1) {
      layouts[k] = RunLayout::Dense;
    } else if (s == 0 && k < nout) {
      KILN_LOG(Fusion, "group runs node by node on the CPU: output ", k,
               " repeats elements in the innermost dim");
      return refused();
    } else if (s == 0) {
      layouts[k] = RunLayout::Broadcast;
    } else if (std::abs(s) >= kMaxStridedBytes / static_cast<int64_t>(ops[k].element_size())) {
      KILN_LOG(Fusion, "group runs node by node on the CPU: ", k < nout ? "output " : "input ",
               k < nout ? k : k - nout, " steps too far in the innermost dim (", s, " elements)");
      return refused();
    } else {
      layouts[k] = RunLayout::Strided;
    }
  }
  const CpuPointwiseKernel* kernel = cpu_pointwise_kernel(g.kernel, layouts);
  if (kernel) {
    auto m = std::make_unique<CpuPointwiseMemo>();
    m->isa = host_isa();
    m->shape = g.shape;
    m->operands.record(g);
    m->iter = *iter;
    m->kernel = kernel;
    g.launch.memo = std::move(m);
  }
  return kernel;
}

}  // namespace

bool pointwise_cpu_ready(const FusedGroup& g) {
  Iteration iter;
  return prepare(g, operands(g), &iter) != nullptr;
}

bool run_pointwise_cpu(const FusedGroup& g) {
  Iteration iter;
  const std::vector<Tensor> ops = operands(g);
  const CpuPointwiseKernel* kernel = prepare(g, ops, &iter);
  if (!kernel) return false;
  profiler::detail::Scope event(profiler::EventKind::CpuKernel, [&] {
    return "cpu_fused_pointwise " + profiler::detail::dims_str(g.shape);
  });
  const int nops = static_cast<int>(ops.size());
  const DimVector& sizes = iter.sizes;
  const std::vector<DimVector>& strides = iter.strides;
  const int64_t numel = iter.numel;

  for (const Tensor& t : g.outputs) ensure_memory(t);
  g_groups_run.fetch_add(1, std::memory_order_relaxed);
  if (numel == 0) return true;
  char* base[kMaxRunOperands];
  int64_t item[kMaxRunOperands];
  for (int k = 0; k < nops; ++k) {
    base[k] = static_cast<char*>(ops[k].data_ptr());
    item[k] = static_cast<int64_t>(ops[k].element_size());
  }
  const int64_t inner = sizes.back();
  const int outer_dims = static_cast<int>(sizes.size()) - 1;
  // Calls the kernel on elements [begin, end) of the flattened iteration space.
  auto run_range = [&](int64_t begin, int64_t end) {
    CpuRun r;
    set_params(g.kernel, r);
    for (int k = 0; k < nops; ++k) r.strides[k] = strides[k].back() * item[k];
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
  const int64_t grain = task_grain(*kernel);
  if (numel < 2 * grain) {
    run_range(0, numel);
  } else {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, numel, grain),
                      [&](const tbb::blocked_range<int64_t>& r) { run_range(r.begin(), r.end()); });
  }
  for (const Tensor& t : g.outputs) t.impl()->bump_version();
  return true;
}

}  // namespace kiln::jit::cpu
