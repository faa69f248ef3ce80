#include "jit/passes/memory_plan.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <numeric>

#include "jit/passes/dead_code.h"
#include "kiln/logging.h"
#include "runtime/core/thread_cache.h"

namespace kiln::jit {
namespace {

// CPU: the cpu allocator's own alignment (a full AVX-512 vector or cache line),
// so a slice is as aligned as a fresh allocation. CUDA: what cudaMalloc
// guarantees and vectorized loads assume.
constexpr size_t kCpuAlignment = 64;
constexpr size_t kCudaAlignment = 256;

size_t alignment_for(Device d) {
  return d.is_cuda() ? kCudaAlignment : kCpuAlignment;
}

size_t round_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

// The last plan, for tests (Note [Thread caches at thread exit]).
using LastPlan = ThreadCache<MemoryPlan, struct LastPlanTag>;

// The out= overload of `op` taking the same arguments plus `out`, when the
// CPU has a kernel for it; else null. Cached per op.
const OperatorEntry* find_out_variant(const OperatorEntry& op) {
  static std::mutex mu;
  static std::unordered_map<const OperatorEntry*, const OperatorEntry*> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(&op);
  if (it != cache.end()) return it->second;
  const FunctionSchema& s = op.schema();
  std::string base = s.ns == "kiln" ? s.name : s.ns + "::" + s.name;
  std::vector<std::string> names;
  // ATen's spellings: add.Tensor -> add.out, sum.dim_IntList -> sum.IntList_out.
  if (!s.overload.empty()) {
    names.push_back(base + "." + s.overload + "_out");
    size_t cut = s.overload.rfind('_');
    if (cut != std::string::npos) names.push_back(base + "." + s.overload.substr(cut + 1) + "_out");
  }
  names.push_back(base + ".out");
  const OperatorEntry* found = nullptr;
  bool single_tensor_return = s.returns.size() == 1 && s.returns[0].type == ArgType::Tensor;
  for (const std::string& name : names) {
    if (found || !single_tensor_return || s.is_mutable()) break;
    const OperatorEntry* cand = nullptr;
    try {
      cand = &find_op(name).entry();
    } catch (const Error&) {
      continue;  // no such overload
    }
    const auto& a = s.arguments;
    const auto& b = cand->schema().arguments;
    bool ok = b.size() == a.size() + 1 && b.back().name == "out" && b.back().is_write &&
              b.back().type == ArgType::Tensor &&
              (cand->kernel_mask() & key_bit(DispatchKey::CPU)) != 0;
    for (size_t i = 0; ok && i < a.size(); ++i) {
      ok = a[i].name == b[i].name && a[i].type == b[i].type && a[i].optional == b[i].optional &&
           !b[i].is_write;
    }
    if (ok) found = cand;
  }
  cache.emplace(&op, found);
  return found;
}

// empty and empty_strided: their result is uninitialized memory of the
// output's geometry, which a slice already is.
bool only_allocates(const OperatorEntry& op) {
  const FunctionSchema& s = op.schema();
  return s.ns == "kiln" && (s.name == "empty" || s.name == "empty_strided");
}

void release_arena(void* ctx, void* /*data*/) {
  static_cast<StorageImpl*>(ctx)->release();
}

}  // namespace

size_t assign_offsets(std::vector<PlannedBuffer>& buffers, size_t alignment) {
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].first < buffers[b].first;
  });
  std::vector<size_t> placed;
  std::vector<size_t> overlapping;
  size_t arena = 0;
  for (size_t i : order) {
    PlannedBuffer& b = buffers[i];
    b.bytes = round_up(b.bytes, alignment);
    overlapping.clear();
    for (size_t j : placed) {
      const PlannedBuffer& o = buffers[j];
      if (o.first <= b.last && b.first <= o.last) overlapping.push_back(j);
    }
    std::sort(overlapping.begin(), overlapping.end(),
              [&](size_t x, size_t y) { return buffers[x].offset < buffers[y].offset; });
    // Best fit: the smallest gap between time-overlapping buffers that holds b.
    size_t best = std::numeric_limits<size_t>::max(), best_gap = best, end = 0;
    for (size_t j : overlapping) {
      const PlannedBuffer& o = buffers[j];
      if (o.offset > end) {
        size_t gap = o.offset - end;
        if (gap >= b.bytes && gap < best_gap) {
          best_gap = gap;
          best = end;
        }
      }
      end = std::max(end, o.offset + o.bytes);
    }
    b.offset = best != std::numeric_limits<size_t>::max() ? best : end;
    arena = std::max(arena, b.offset + b.bytes);
    placed.push_back(i);
  }
  return arena;
}

MemoryPlan plan_memory(const std::vector<Node>& nodes, const std::vector<Step>& steps,
                       const std::unordered_set<const StorageImpl*>& external) {
  struct Range {
    StorageImpl* storage;
    size_t first, last;
    bool plannable;
  };
  std::unordered_map<const StorageImpl*, size_t> index;
  std::vector<Range> ranges;
  // Only storages whose first touch is a write of fresh memory are candidates.
  auto touch = [&](StorageImpl* s, size_t step, bool fresh_write, bool plannable) {
    if (!s) return;
    auto [it, inserted] = index.emplace(s, ranges.size());
    if (inserted) {
      bool candidate = fresh_write && s->data() == nullptr && s->nbytes() > 0 &&
                       !external.count(s) && (s->device().is_cpu() || s->device().is_cuda());
      ranges.push_back({s, step, step, candidate && plannable});
      return;
    }
    Range& r = ranges[it->second];
    r.last = step;
    if (fresh_write && !plannable) r.plannable = false;
  };
  auto storage = [](const Tensor& t) -> StorageImpl* {
    return t.defined() ? t.impl()->storage().get() : nullptr;
  };

  MemoryPlan plan;
  std::vector<const StorageImpl*> inputs;
  for (size_t k = 0; k < steps.size(); ++k) {
    const Step& step = steps[k];
    // A group's undefined inputs and outputs (a reduction's float32 input and
    // result) live in registers and have no storage.
    auto touch_group = [&](const FusedGroup& g) {
      for (const Tensor& t : g.inputs) touch(storage(t), k, false, true);
      for (const Tensor& t : g.outputs) touch(storage(t), k, true, true);
    };
    if (step.kind == Step::Kind::Fused) {
      touch_group(step.group);
      continue;
    }
    if (step.kind == Step::Kind::Reduction) {
      // The epilogue runs after the prologue, row by row: what it reads of the
      // prologue's stores was written first in this step.
      touch_group(step.reduction.prologue);
      touch_group(step.reduction.epilogue);
      continue;
    }
    const Node& n = nodes[step.node];
    inputs.clear();
    for_each_input(n, [&](const Tensor& t) {
      touch(storage(t), k, false, true);
      if (storage(t)) inputs.push_back(storage(t));
    });
    auto is_input = [&](const StorageImpl* s) {
      return std::find(inputs.begin(), inputs.end(), s) != inputs.end();
    };
    // A fresh output is plannable when the node can write it where told, or
    // when allocating it is all the node does.
    const OperatorEntry* out_op = nullptr;
    bool plannable = false;
    if (n.outputs.size() == 1 && n.written.empty() && !is_input(storage(n.outputs[0]))) {
      plannable = only_allocates(*n.op);
      if (!plannable && n.device.is_cpu()) {
        out_op = find_out_variant(*n.op);
        plannable = out_op != nullptr;
      }
    }
    for (const Tensor& t : n.outputs) {
      StorageImpl* s = storage(t);
      touch(s, k, !is_input(s), plannable);
    }
    if (plannable) plan.out_variants.emplace(step.node, out_op);
  }

  // One arena per device.
  std::vector<Device> devices;
  for (const Range& r : ranges) {
    if (!r.plannable) continue;
    Device d = r.storage->device();
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  }
  for (Device d : devices) {
    std::vector<PlannedBuffer> bufs;
    std::vector<StorageImpl*> storages;
    for (const Range& r : ranges) {
      if (!r.plannable || !(r.storage->device() == d)) continue;
      bufs.push_back({r.storage, r.storage->nbytes(), r.first, r.last, 0, d});
      storages.push_back(r.storage);
    }
    const size_t align = alignment_for(d);
    size_t naive = 0;
    for (const PlannedBuffer& b : bufs) naive += round_up(b.bytes, align);
    size_t bytes = assign_offsets(bufs, align);
    IntrusivePtr<StorageImpl> arena = StorageImpl::allocate(bytes, d);
    char* base = static_cast<char*>(arena->data());
    for (size_t i = 0; i < bufs.size(); ++i) {
      arena->retain();  // dropped by the slice's deleter
      storages[i]->set_data(base + bufs[i].offset, arena.get(), &release_arena);
    }
    plan.arenas.push_back({d, bytes, base});
    plan.planned_bytes += bytes;
    plan.naive_bytes += naive;
    plan.buffers.insert(plan.buffers.end(), bufs.begin(), bufs.end());
  }
  // Keep only the nodes whose output got a slice: the rest run as usual.
  for (auto it = plan.out_variants.begin(); it != plan.out_variants.end();) {
    auto r = index.find(storage(nodes[it->first].outputs[0]));
    bool planned = r != index.end() && ranges[r->second].plannable;
    it = planned ? std::next(it) : plan.out_variants.erase(it);
  }
  if (!plan.buffers.empty()) {
    KILN_LOG(Fusion, "memory plan: ", plan.buffers.size(), " buffers, planned ", plan.planned_bytes,
             " bytes (arena) vs ", plan.naive_bytes, " bytes one buffer per node");
  }
  // What tests look at, without the per-node table.
  if (MemoryPlan* last = LastPlan::get()) {
    last->buffers = plan.buffers;
    last->arenas = plan.arenas;
    last->planned_bytes = plan.planned_bytes;
    last->naive_bytes = plan.naive_bytes;
  }
  return plan;
}

const MemoryPlan& last_memory_plan() {
  static const MemoryPlan kNone;
  const MemoryPlan* last = LastPlan::get();
  return last ? *last : kNone;
}

}  // namespace kiln::jit
