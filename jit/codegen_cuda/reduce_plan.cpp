#include "jit/codegen_cuda/reduce_plan.h"

#include <algorithm>
#include <cstring>

#include "jit/codegen_cuda/pointwise_source.h"
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

// The group's operands in ABI order (Note [CUDA reduction ABI]), each with
// its element strides over the input shape; a statistic's epilogue runs over
// the result, whose dims are the kept dims (keepdim gives the reduced ones
// size 1). False when one is undefined, on another device or of a shape the
// kernel cannot walk.
bool collect_operands(const ReductionGroup& g, std::vector<Slot>* slots, size_t* first_epi) {
  const bool norm = is_row_normalization(g.op);
  const IntArrayRef in_shape = g.in_shape;
  const size_t nd = in_shape.size();
  const Device device = g.epilogue.outputs[0].device();
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
  auto add = [&](const Tensor& t, bool output, bool epilogue) {
    Slot s;
    s.t = t;
    s.output = output;
    s.strides = epilogue && !norm ? epi_strides(t) : strides_in(in_shape, t);
    const bool ok = t.defined() && t.device() == device && s.strides.size() == nd;
    slots->push_back(std::move(s));
    return ok;
  };
  bool ok = true;
  for (size_t i = 1; i < g.prologue.outputs.size(); ++i)
    ok &= add(g.prologue.outputs[i], true, false);
  for (const Tensor& t : g.prologue.inputs) ok &= add(t, false, false);
  *first_epi = slots->size();
  for (const Tensor& t : g.epilogue.outputs) ok &= add(t, true, true);
  for (size_t i = 1; i < g.epilogue.inputs.size(); ++i)
    ok &= add(g.epilogue.inputs[i], false, true);
  return ok;
}

// Kept and reduced dims (size-1 dims dropped), each ordered by the primary
// operand's strides and merged; rows and n.
void merge_kept_and_reduced(const ReductionGroup& g, const std::vector<Slot>& slots, int primary,
                            ReducePlan* plan) {
  const IntArrayRef in_shape = g.in_shape;
  std::vector<int64_t> kept, red;
  for (size_t d = 0; d < in_shape.size(); ++d) {
    if (in_shape[d] == 1) continue;
    (g.reduced[d] ? red : kept).push_back(static_cast<int64_t>(d));
  }
  plan->ksizes.clear();
  plan->rsizes.clear();
  merge_dims(kept, in_shape, slots, primary, &plan->ksizes, &plan->kst);
  merge_dims(red, in_shape, slots, primary, &plan->rsizes, &plan->rst);
  plan->rows = 1;
  plan->n = 1;
  for (int64_t s : plan->ksizes) plan->rows *= s;
  for (int64_t s : plan->rsizes) plan->n *= s;
}

// Each operand's walk over the reduced dims, and whether 32-bit offsets
// reach every element. False when an output would be written once per
// reduced position (broadcast over the reduced dims).
bool choose_walks(bool norm, const std::vector<Slot>& slots, size_t first_epi, ReducePlan* plan) {
  ReduceSpec& spec = plan->spec;
  const std::vector<int64_t>&ksizes = plan->ksizes, &rsizes = plan->rsizes;
  int64_t max_offset = std::max(plan->rows, plan->n);
  for (size_t k = 0; k < slots.size(); ++k) {
    bool zero = true;
    for (size_t d = 0; d < rsizes.size(); ++d) zero = zero && plan->rst[k][d] == 0;
    const bool contig = rsizes.size() == 1 && plan->rst[k][0] == 1;
    // A statistic's epilogue operands are read once per row: Zero by construction.
    if (slots[k].output && zero && plan->n > 1 && (norm || k < first_epi)) return false;
    spec.walks.push_back(zero ? Walk::Zero : contig ? Walk::Contig : Walk::Strided);
    int64_t span = 0;
    for (size_t d = 0; d < ksizes.size(); ++d) span += (ksizes[d] - 1) * plan->kst[k][d];
    for (size_t d = 0; d < rsizes.size(); ++d) span += (rsizes[d] - 1) * plan->rst[k][d];
    max_offset = std::max(max_offset, span);
  }
  spec.index32 = max_offset + 16 * 1024 < kIndex32Limit;
  return true;
}

// Lanes per row, values kept per lane and, for a one-pass statistic over few
// long rows, the chunks (Note [CUDA reduction schedules for groups]).
void choose_schedule(RowOp op, int primary, int sm_count, ReducePlan* plan) {
  ReduceSpec& spec = plan->spec;
  const int64_t rows = plan->rows, n = plan->n;
  const bool multi_pass = is_row_normalization(op) || op == RowOp::Var;
  const int64_t red_inner = primary >= 0 ? plan->rst[primary].back() : 1;
  const int64_t kept_inner = primary >= 0 ? plan->kst[primary].back() : 0;
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
}

// 16-byte loads (Note [CUDA reduction schedules for groups]): each Contig
// prologue input's vectors stay aligned at every row and position; a row
// normalization kept in registers also reads and writes its epilogue's
// operands that way when each walks Zero (inputs only) or Contig, aligned.
void choose_vector_width(const ReductionGroup& g, const std::vector<Slot>& slots, size_t first_epi,
                         ReducePlan* plan) {
  ReduceSpec& spec = plan->spec;
  const int64_t n = plan->n;
  spec.vec = 1;
  spec.epi_vec = false;
  if (spec.threads <= 1 || plan->rsizes.size() != 1) return;
  const int v = reduce_vector_width(spec);
  bool aligned = v > 1 && n % v == 0;
  const size_t first_in = g.prologue.outputs.size() - 1;
  for (size_t i = 0; i < g.prologue.inputs.size() && aligned; ++i) {
    const size_t k = first_in + i;
    if (spec.walks[k] != Walk::Contig) continue;
    const uint64_t bytes = static_cast<uint64_t>(v) * itemsize(plan->kernel.prologue.inputs[i]);
    aligned = reinterpret_cast<uintptr_t>(slots[k].t.data_ptr()) % bytes == 0;
    for (int64_t s : plan->kst[k]) aligned = aligned && s % v == 0;
  }
  if (!aligned) return;
  spec.vec = v;
  if (spec.per_thread > 0) {
    const int64_t per_lane = v * static_cast<int64_t>(spec.threads);
    spec.per_thread = v * pow2_at_least((n + per_lane - 1) / per_lane);
  }
  if (!is_row_normalization(g.op) || spec.per_thread == 0) return;
  // An output not allocated yet (it is, after the plan) reads as its offset
  // from address 0: its storage will come from the caching allocator or a
  // graph arena, both aligned far past 32 bytes.
  bool epi = true;
  for (size_t k = first_epi; k < slots.size() && epi; ++k) {
    if (spec.walks[k] == Walk::Zero && !slots[k].output) continue;
    epi = spec.walks[k] == Walk::Contig &&
          reinterpret_cast<uintptr_t>(slots[k].t.data_ptr()) %
                  (static_cast<uint64_t>(v) * slots[k].t.element_size()) ==
              0;
    for (int64_t s : plan->kst[k]) epi = epi && s % v == 0;
  }
  spec.epi_vec = epi;
}

// Whether the prologue stores into the storage of one of its inputs.
bool prologue_writes_its_inputs(const std::vector<Slot>& slots, size_t first_epi) {
  for (size_t i = 0; i < first_epi; ++i) {
    if (!slots[i].output) continue;
    for (size_t j = 0; j < first_epi; ++j) {
      if (!slots[j].output &&
          slots[j].t.impl()->storage().get() == slots[i].t.impl()->storage().get()) {
        return true;
      }
    }
  }
  return false;
}

// The kernel's argument struct in 8-byte words (Note [CUDA reduction ABI]).
size_t argument_words(const ReducePlan& plan) {
  const ReduceSpec& spec = plan.spec;
  size_t words = 4 + (spec.split ? 2 : 0) + plan.ksizes.size() + plan.rsizes.size();
  for (Walk w : spec.walks) {
    words += 1 + plan.ksizes.size() + (w == Walk::Strided ? plan.rsizes.size() : 0);
  }
  return words + static_cast<size_t>(plan.kernel.prologue.param_count() +
                                     plan.kernel.epilogue.param_count());
}

}  // namespace

bool plan_reduction(const ReductionGroup& g, int sm_count, ReducePlan* plan, std::string* why) {
  auto refuse = [&](const std::string& reason) {
    *why = reason;
    return false;
  };
  plan->kernel = g.kernel();
  plan->spec = ReduceSpec{};
  const bool norm = is_row_normalization(g.op);
  if (g.reduced.size() != g.in_shape.size() || g.epilogue.outputs.empty() ||
      g.prologue.outputs.empty() || g.epilogue.inputs.empty()) {
    return refuse("unexpected group form");
  }
  if (norm && !(IntArrayRef(g.epilogue.shape) == IntArrayRef(g.in_shape))) {
    return refuse("a normalization's epilogue over another shape");
  }
  std::vector<Slot> slots;
  size_t first_epi = 0;
  if (!collect_operands(g, &slots, &first_epi)) {
    return refuse("an operand on another device or of another shape");
  }
  KILN_INTERNAL_ASSERT(static_cast<int>(slots.size()) == reduce_operand_count(plan->kernel),
                       "reduction group operands do not match its kernel");
  // The first loaded input orders the dims.
  int primary = -1;
  for (size_t k = 0; k < first_epi && primary < 0; ++k) {
    if (!slots[k].output) primary = static_cast<int>(k);
  }
  merge_kept_and_reduced(g, slots, primary, plan);
  if (plan->ksizes.size() > static_cast<size_t>(kMaxReduceDims) ||
      plan->rsizes.size() > static_cast<size_t>(kMaxReduceDims)) {
    return refuse(std::to_string(plan->ksizes.size()) + " kept and " +
                  std::to_string(plan->rsizes.size()) + " reduced dims after merging");
  }
  ReduceSpec& spec = plan->spec;
  spec.kernel = &plan->kernel;
  spec.kept_dims = static_cast<int>(plan->ksizes.size());
  spec.red_dims = static_cast<int>(plan->rsizes.size());
  if (!choose_walks(norm, slots, first_epi, plan)) {
    return refuse("an output broadcast over the reduced dims");
  }
  choose_schedule(g.op, primary, sm_count, plan);
  choose_vector_width(g, slots, first_epi, plan);
  // Passes after the first re-run the prologue from memory: it must not have
  // overwritten what it reads.
  const bool multi_pass = norm || g.op == RowOp::Var;
  if (multi_pass && spec.per_thread == 0 && prologue_writes_its_inputs(slots, first_epi)) {
    return refuse("a prologue writes what it reads and the row does not fit on chip");
  }
  plan->words = argument_words(*plan);
  if (plan->words * 8 > kMaxParamBytes) {
    return refuse("too many operands for one kernel's parameters");
  }
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
  args.push_back(bits(var_divisor(p.n, p.correction)));
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
  // Note [Numbers as kernel arguments]: the prologue's, then the epilogue's.
  for (const PointwiseKernel* k : {&p.kernel.prologue, &p.kernel.epilogue}) {
    for (const Instr& in : k->body) {
      if (in.op == Prim::Param) args.push_back(param_word(in));
    }
  }
  KILN_INTERNAL_ASSERT(args.size() == p.words, "reduction kernel arguments mis-sized");
  return args;
}

}  // namespace kiln::jit::cuda
