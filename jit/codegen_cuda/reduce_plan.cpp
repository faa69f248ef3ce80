#include "jit/codegen_cuda/reduce_plan.h"

#include <algorithm>
#include <cstring>

#include "kiln/error.h"

namespace kiln::jit::cuda {
namespace {

constexpr size_t kMaxParamBytes = 4000;  // under the 4 KiB every arch takes
constexpr int64_t kIndex32Limit = (int64_t{1} << 30);

// Element strides of `t` broadcast into `shape` (0 where it broadcasts).
std::vector<int64_t> strides_in(IntArrayRef shape, const Tensor& t) {
  const size_t nd = shape.size();
  std::vector<int64_t> st(nd, 0);
  IntArrayRef s = t.sizes(), tt = t.strides();
  if (s.size() > nd) return {};
  const size_t off = nd - s.size();
  for (size_t d = 0; d < s.size(); ++d) st[off + d] = s[d] == 1 && shape[off + d] != 1 ? 0 : tt[d];
  return st;
}

int pow2_at_least(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

struct Slot {
  Tensor t;
  bool output = false;
  std::vector<int64_t> strides;  // over in_shape
};

// Dims (outer to inner) ordered by `order`'s strides, largest first, and
// merged where every slot steps as one. Out: sizes and per-slot strides.
void merge_dims(std::vector<int64_t> dims, IntArrayRef shape, const std::vector<Slot>& slots,
                int primary, std::vector<int64_t>* sizes, std::vector<std::vector<int64_t>>* st) {
  if (primary >= 0) {
    const auto& ps = slots[primary].strides;
    std::stable_sort(dims.begin(), dims.end(), [&](int64_t a, int64_t b) { return ps[a] > ps[b]; });
  }
  st->assign(slots.size(), {});
  for (int64_t d : dims) {
    bool merge = !sizes->empty();
    for (size_t k = 0; k < slots.size() && merge; ++k) {
      merge = (*st)[k].back() == slots[k].strides[d] * shape[d];
    }
    if (merge) {
      sizes->back() *= shape[d];
      for (size_t k = 0; k < slots.size(); ++k) (*st)[k].back() = slots[k].strides[d];
    } else {
      sizes->push_back(shape[d]);
      for (size_t k = 0; k < slots.size(); ++k) (*st)[k].push_back(slots[k].strides[d]);
    }
  }
  if (sizes->empty()) {
    sizes->push_back(1);
    for (auto& s : *st) s.push_back(0);
  }
}

}  // namespace

bool plan_reduction(const ReductionGroup& g, int sm_count, ReducePlan* plan, std::string* why) {
  auto refuse = [&](const std::string& reason) {
    *why = reason;
    return false;
  };
  ReductionKernel& kernel = plan->kernel;
  kernel = g.kernel();
  ReduceSpec& spec = plan->spec;
  spec = ReduceSpec{};
  const bool norm = is_row_normalization(g.op);
  const IntArrayRef in_shape = g.in_shape;
  const size_t nd = in_shape.size();
  if (g.reduced.size() != nd || g.epilogue.outputs.empty() || g.prologue.outputs.empty() ||
      g.epilogue.inputs.empty()) {
    return refuse("unexpected group form");
  }
  if (norm && !(IntArrayRef(g.epilogue.shape) == in_shape)) {
    return refuse("a normalization's epilogue over another shape");
  }
  const Device device = g.epilogue.outputs[0].device();
  std::vector<int64_t> kept, red;
  for (size_t d = 0; d < nd; ++d) {
    if (in_shape[d] == 1) continue;
    (g.reduced[d] ? red : kept).push_back(static_cast<int64_t>(d));
  }
  // A statistic's epilogue runs over the result: its dims are the kept dims
  // (keepdim drops nothing but gives reduced dims size 1).
  const IntArrayRef es = g.epilogue.shape;
  size_t n_kept_all = 0;
  for (bool r : g.reduced) n_kept_all += r ? 0 : 1;
  auto epi_strides = [&](const Tensor& t) -> std::vector<int64_t> {
    std::vector<int64_t> e = strides_in(es, t);
    if (e.size() != es.size()) return {};
    std::vector<int64_t> st(nd, 0);
    if (es.size() == nd) {
      for (size_t d = 0; d < nd; ++d) {
        if (g.reduced[d] ? es[d] != 1 : es[d] != in_shape[d]) return {};
        if (!g.reduced[d]) st[d] = e[d];
      }
    } else if (es.size() == n_kept_all) {
      size_t i = 0;
      for (size_t d = 0; d < nd; ++d) {
        if (g.reduced[d]) continue;
        if (es[i] != in_shape[d]) return {};
        st[d] = e[i++];
      }
    } else {
      return {};
    }
    return st;
  };
  std::vector<Slot> slots;
  auto add = [&](const Tensor& t, bool output, bool epilogue) {
    Slot s;
    s.t = t;
    s.output = output;
    s.strides = epilogue && !norm ? epi_strides(t) : strides_in(in_shape, t);
    const bool ok = t.defined() && t.device() == device && s.strides.size() == nd;
    slots.push_back(std::move(s));
    return ok;
  };
  bool ok = true;
  for (size_t i = 1; i < g.prologue.outputs.size(); ++i)
    ok &= add(g.prologue.outputs[i], true, false);
  for (const Tensor& t : g.prologue.inputs) ok &= add(t, false, false);
  const size_t first_epi = slots.size();
  for (const Tensor& t : g.epilogue.outputs) ok &= add(t, true, true);
  for (size_t i = 1; i < g.epilogue.inputs.size(); ++i)
    ok &= add(g.epilogue.inputs[i], false, true);
  if (!ok) return refuse("an operand on another device or of another shape");
  KILN_INTERNAL_ASSERT(static_cast<int>(slots.size()) == reduce_operand_count(kernel),
                       "reduction group operands do not match its kernel");
  int primary = -1;
  for (size_t k = 0; k < first_epi && primary < 0; ++k) {
    if (!slots[k].output) primary = static_cast<int>(k);
  }
  std::vector<int64_t>&ksizes = plan->ksizes, &rsizes = plan->rsizes;
  std::vector<std::vector<int64_t>>&kst = plan->kst, &rst = plan->rst;
  ksizes.clear();
  rsizes.clear();
  merge_dims(kept, in_shape, slots, primary, &ksizes, &kst);
  merge_dims(red, in_shape, slots, primary, &rsizes, &rst);
  if (ksizes.size() > static_cast<size_t>(kMaxReduceDims) ||
      rsizes.size() > static_cast<size_t>(kMaxReduceDims)) {
    return refuse(std::to_string(ksizes.size()) + " kept and " + std::to_string(rsizes.size()) +
                  " reduced dims after merging");
  }
  int64_t& rows = plan->rows;
  int64_t& n = plan->n;
  rows = 1;
  n = 1;
  for (int64_t s : ksizes) rows *= s;
  for (int64_t s : rsizes) n *= s;
  spec.kernel = &kernel;
  spec.kept_dims = static_cast<int>(ksizes.size());
  spec.red_dims = static_cast<int>(rsizes.size());
  int64_t max_offset = std::max(rows, n);
  for (size_t k = 0; k < slots.size(); ++k) {
    bool zero = true;
    for (size_t d = 0; d < rsizes.size(); ++d) zero = zero && rst[k][d] == 0;
    const bool contig = rsizes.size() == 1 && rst[k][0] == 1;
    // A statistic's epilogue operands are read once per row: Zero by construction.
    if (slots[k].output && zero && n > 1 && (norm || k < first_epi)) {
      return refuse("an output broadcast over the reduced dims");
    }
    spec.walks.push_back(zero ? Walk::Zero : contig ? Walk::Contig : Walk::Strided);
    int64_t span = 0;
    for (size_t d = 0; d < ksizes.size(); ++d) span += (ksizes[d] - 1) * kst[k][d];
    for (size_t d = 0; d < rsizes.size(); ++d) span += (rsizes[d] - 1) * rst[k][d];
    max_offset = std::max(max_offset, span);
  }
  spec.index32 = max_offset + 16 * 1024 < kIndex32Limit;

  // Schedule (Note [CUDA reduction schedules for groups]).
  const bool multi_pass = norm || g.op == RowOp::Var;
  const int64_t red_inner = primary >= 0 ? rst[primary].back() : 1;
  const int64_t kept_inner = primary >= 0 ? kst[primary].back() : 0;
  // Few rows of many elements take lanes (and chunks) even when the reduced
  // dims are the outer ones: a thread per row would walk millions serially.
  const bool few_long = n > 4096 && rows < 2 * static_cast<int64_t>(sm_count);
  const bool outer = rows > 1 && n > 1 && red_inner != 1 && kept_inner == 1 && !few_long;
  auto lanes = [&](int t) {
    spec.threads = t;
    spec.per_thread = multi_pass ? pow2_at_least((n + t - 1) / t) : 0;
  };
  if (outer || n <= 8) {
    // A short row stays in the lane's registers: passes that re-ran the
    // prologue could round it differently (an fma contracted only where a
    // store does not keep the product), and a row of one value must have a
    // deviation of exactly 0.
    spec.threads = 1;
    spec.per_thread = multi_pass && n <= 8 ? pow2_at_least(n) : 0;
  } else if (n <= 256) {
    lanes(32);
  } else if (n <= 1024) {
    lanes(128);
  } else if (n <= 4096) {
    lanes(256);
  } else {
    spec.threads = few_long ? 1024 : 256;
    spec.per_thread = 0;
  }
  // A one-pass statistic over few long rows: chunks of at least kSplitMin
  // elements, about two blocks per multiprocessor in all.
  plan->splits = 1;
  plan->chunk = 0;
  if (few_long && !multi_pass) {
    constexpr int64_t kSplitMin = 16 * 1024, kChunkAlign = 8 * 1024;
    const int64_t want = std::min<int64_t>((n + kSplitMin - 1) / kSplitMin,
                                           std::max<int64_t>(1, 2 * int64_t{sm_count} / rows));
    if (want >= 2) {
      int64_t chunk = (n + want - 1) / want;
      chunk = (chunk + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
      plan->splits = (n + chunk - 1) / chunk;
      plan->chunk = chunk;
      spec.split = plan->splits > 1;
    }
  }
  // 16-byte loads (Note [CUDA reduction schedules for groups]): each Contig
  // prologue input's vectors stay aligned at every row and position.
  spec.vec = 1;
  if (spec.threads > 1 && rsizes.size() == 1) {
    const int v = reduce_vector_width(spec);
    bool aligned = v > 1 && n % v == 0;
    const size_t first_in = g.prologue.outputs.size() - 1;
    for (size_t i = 0; i < g.prologue.inputs.size() && aligned; ++i) {
      const size_t k = first_in + i;
      if (spec.walks[k] != Walk::Contig) continue;
      const uint64_t bytes = static_cast<uint64_t>(v) * itemsize(kernel.prologue.inputs[i]);
      aligned = reinterpret_cast<uintptr_t>(slots[k].t.data_ptr()) % bytes == 0;
      for (int64_t s : kst[k]) aligned = aligned && s % v == 0;
    }
    if (aligned) {
      spec.vec = v;
      if (spec.per_thread > 0) {
        const int64_t per_lane = v * static_cast<int64_t>(spec.threads);
        spec.per_thread = v * pow2_at_least((n + per_lane - 1) / per_lane);
      }
    }
  }
  // Passes after the first re-run the prologue from memory: it must not have
  // overwritten what it reads.
  if (multi_pass && spec.per_thread == 0) {
    for (size_t i = 0; i < first_epi; ++i) {
      if (!slots[i].output) continue;
      for (size_t j = 0; j < first_epi; ++j) {
        if (!slots[j].output &&
            slots[j].t.impl()->storage().get() == slots[i].t.impl()->storage().get()) {
          return refuse("a prologue writes what it reads and the row does not fit on chip");
        }
      }
    }
  }
  size_t words = 4 + (spec.split ? 2 : 0) + ksizes.size() + rsizes.size();
  for (Walk w : spec.walks) words += 1 + ksizes.size() + (w == Walk::Strided ? rsizes.size() : 0);
  if (words * 8 > kMaxParamBytes) return refuse("too many operands for one kernel's parameters");
  plan->words = words;
  plan->eps = g.eps;
  plan->correction = g.correction;
  plan->tensors.clear();
  plan->outputs.clear();
  for (const Slot& s : slots) {
    plan->tensors.push_back(s.t);
    plan->outputs.push_back(s.output);
  }
  return true;
}

size_t reduce_counter_offset(const ReducePlan& p) {
  return static_cast<size_t>(p.rows * p.splits) * sizeof(double);
}

size_t reduce_workspace_bytes(const ReducePlan& p) {
  if (!p.spec.split) return 0;
  return reduce_counter_offset(p) + static_cast<size_t>(p.rows) * sizeof(uint32_t);
}

std::vector<int64_t> reduce_args(const ReducePlan& p, void* workspace) {
  std::vector<int64_t> args;
  auto bits = [](auto v) {
    int64_t b;
    static_assert(sizeof v == sizeof b);
    std::memcpy(&b, &v, sizeof b);
    return b;
  };
  args.push_back(p.rows);
  args.push_back(p.n);
  args.push_back(bits(p.eps));
  args.push_back(bits(std::max(0.0, static_cast<double>(p.n - p.correction))));
  if (p.spec.split) {
    KILN_INTERNAL_ASSERT(workspace != nullptr, "a split reduction without its workspace");
    args.push_back(p.chunk);
    args.push_back(bits(workspace));
  }
  for (int64_t s : p.ksizes) args.push_back(s);
  for (int64_t s : p.rsizes) args.push_back(s);
  for (size_t k = 0; k < p.tensors.size(); ++k) {
    args.push_back(bits(p.tensors[k].data_ptr()));
    for (int64_t s : p.kst[k]) args.push_back(s);
    if (p.spec.walks[k] == Walk::Strided) {
      for (int64_t s : p.rst[k]) args.push_back(s);
    }
  }
  KILN_INTERNAL_ASSERT(args.size() == p.words, "reduction kernel arguments mis-sized");
  return args;
}

}  // namespace kiln::jit::cuda
