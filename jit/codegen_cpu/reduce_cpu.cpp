// A reduction group on the CPU: its operands and dims, its kernels, and the
// choice of schedule (Note [Reduction schedules]); the schedules themselves
// are in reduce_cpu_*.cpp (reduce_cpu_impl.h lists them).

#include "jit/codegen_cpu/reduce_cpu.h"

#include <cmath>
#include <limits>

#include "jit/codegen_cpu/reduce_cpu_impl.h"
#include "jit/ir/iteration.h"
#include "kiln/logging.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/profiler/recorder.h"

namespace kiln::jit::cpu {
namespace detail {

// Note [Reduction schedules]
// The reduced dims (ordered by the first loaded input's strides, merged where
// every operand steps as one) end in a run. Where that run is dense or
// broadcast for every operand, rows are reduced with the run innermost
// ("inner"), a statistic's long row in chunks whose partial results combine
// in double. Otherwise a statistic whose last kept dim is dense is reduced
// "outer": blocks of up to kOuterWidth neighbouring results accumulate
// together, row by row of the reduced space; a softmax or log_softmax
// likewise (Note [Outer normalizations]). Failing both, rows are reduced
// "inner" with the prologue gathering (and the epilogue scattering) the
// strided operands (Note [Strided operands]); steps too long for that run
// node by node.
//
// Note [Storing prologues]
// The outer schedules of softmax, log_softmax and var re-run the prologue
// once per sweep over the reduced positions. Where the prologue also stores
// group members (`h = x * 2 + 1` kept for later, `softmax(h, 0)`), the sweeps
// before the last run a variant of it without its stores (the same body,
// its store-only instructions dropped, so the reduced values are the same
// bits) and only the last sweep runs it whole: every element is stored once,
// and an in-place store (the member's buffer is an input of the prologue)
// lands only after every read of its old value, each element being read
// and written by the same lane of the same call.

namespace {

std::atomic<int64_t> g_runs{0};
std::atomic<int64_t> g_refused{0};       // for the layout
std::atomic<int64_t> g_outer_stored{0};  // Note [Storing prologues]

// Refusals for the layout (cpu_reductions_refused counts them).
bool refuse(const char* why) {
  KILN_LOG(Fusion, "reduction group runs node by node on the CPU: ", why);
  g_refused.fetch_add(1, std::memory_order_relaxed);
  return false;
}

// Element strides of `t` broadcast into `shape` (0 where it broadcasts).
std::vector<int64_t> strides_in(IntArrayRef shape, const Tensor& t) {
  const size_t nd = shape.size();
  std::vector<int64_t> st(nd, 0);
  IntArrayRef s = t.sizes(), tt = t.strides();
  const size_t off = nd - s.size();
  for (size_t d = 0; d < s.size(); ++d) st[off + d] = s[d] == 1 && shape[off + d] != 1 ? 0 : tt[d];
  return st;
}

}  // namespace

std::atomic<int64_t> g_long_rows{0};  // split across workers (Note [Long rows])

float combine_lanes_extreme(const float* lanes, int n, bool max) {
  float r = lanes[0];
  for (int i = 1; i < n; ++i) {
    if (std::isnan(r)) break;
    float v = lanes[i];
    if (std::isnan(v) || (max ? v > r : v < r)) r = v;
  }
  return r;
}

ReductionRun::ReductionRun(const ReductionGroup& r)
    : r_(r), isa_(host_isa()), lanes_(isa_lanes(isa_)) {}

bool ReductionRun::run() {
  const bool norm = is_row_normalization(r_.op);
  std::string why;
  if (!cpu_supports(r_.prologue.kernel, &why) || !cpu_supports(r_.epilogue.kernel, &why)) {
    KILN_LOG(Fusion, "reduction group runs node by node on the CPU: unsupported ", why);
    return false;
  }
  // Operands: prologue outputs (after the reduced value) and inputs; a
  // normalization's epilogue outputs and inputs (after the result).
  for (size_t k = 1; k < r_.prologue.outputs.size(); ++k) {
    pro_slots_.push_back(add(r_.prologue.outputs[k], true));
  }
  for (const Tensor& t : r_.prologue.inputs) pro_slots_.push_back(add(t, false));
  if (norm) {
    for (const Tensor& t : r_.epilogue.outputs) epi_slots_.push_back(add(t, true));
    for (size_t k = 1; k < r_.epilogue.inputs.size(); ++k) {
      epi_slots_.push_back(add(r_.epilogue.inputs[k], false));
    }
  }
  for (const Tensor& t : tensors_) {
    if (!t.device().is_cpu()) return false;
  }
  if (static_cast<int>(pro_slots_.size()) + 1 > kMaxRunOperands ||
      static_cast<int>(epi_slots_.size()) + 1 > kMaxRunOperands) {
    return refuse("too many operands");
  }
  split_dims();
  // Dense rows first, then blocks of kept positions, then rows gathered.
  bool inner = inner_ok(false);
  bool outer = !inner && outer_ok(norm);
  inner = inner || (!outer && inner_ok(true));
  if (!inner && !outer) return refuse("no dense run over the reduced or the last kept dims");
  // Kernels (compiled or found) before anything is written.
  if (!compile_kernels(inner, outer, norm)) return false;
  for (size_t k = 1; k < r_.prologue.outputs.size(); ++k) ensure_memory(r_.prologue.outputs[k]);
  for (const Tensor& t : r_.epilogue.outputs) ensure_memory(t);
  for (size_t k = 0; k < tensors_.size(); ++k) {
    ops_[k].base = static_cast<char*>(tensors_[k].data_ptr());
    ops_[k].item = static_cast<int64_t>(tensors_[k].element_size());
  }
  if (unstored_ != nullptr) g_outer_stored.fetch_add(1, std::memory_order_relaxed);
  if (inner) {
    run_inner();
  } else if (norm) {
    run_outer_norm();
  } else {
    run_outer();
  }
  if (!norm) {
    KILN_INTERNAL_ASSERT(run_pointwise_cpu(epi_group_), "a checked epilogue did not run");
  }
  for (size_t k = 1; k < r_.prologue.outputs.size(); ++k) {
    r_.prologue.outputs[k].impl()->bump_version();
  }
  if (norm) {
    for (const Tensor& t : r_.epilogue.outputs) t.impl()->bump_version();
  }
  g_runs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool ReductionRun::compile_kernels(bool inner, bool outer, bool norm) {
  std::vector<RunLayout> layouts{RunLayout::Dense};
  for (int s : pro_slots_) layouts.push_back(layout(s, inner));
  prologue_ = cpu_pointwise_kernel(r_.prologue.kernel, layouts);
  if (!prologue_) return false;
  if (outer && stores() > 0 && (norm || r_.op == RowOp::Var)) {
    // Note [Storing prologues]: the sweeps before the last run it without its stores.
    PointwiseKernel k = r_.prologue.kernel;
    k.outputs.resize(1);
    k.stores.resize(1);
    k.compact();
    layouts.erase(layouts.begin() + 1, layouts.begin() + 1 + stores());
    unstored_ = cpu_pointwise_kernel(k, layouts);
    unstored_ir_ = std::move(k);
    if (!unstored_) return false;
  }
  if (norm) {
    layouts.clear();
    for (size_t k = 0; k < r_.epilogue.outputs.size(); ++k)
      layouts.push_back(layout(epi_slots_[k], inner));
    layouts.push_back(RunLayout::Dense);
    for (size_t k = r_.epilogue.outputs.size(); k < epi_slots_.size(); ++k) {
      layouts.push_back(layout(epi_slots_[k], inner));
    }
    epilogue_ = cpu_pointwise_kernel(r_.epilogue.kernel, layouts);
    if (!epilogue_) return false;
  } else {
    stats_ = empty_tensor(r_.epilogue.shape.ref(), kFloat32, Device::cpu());
    epi_group_ = r_.epilogue;
    epi_group_.inputs[0] = stats_;
    if (!pointwise_cpu_ready(epi_group_)) return false;
  }
  return true;
}

int ReductionRun::add(const Tensor& t, bool output) {
  Operand o;
  o.strides = strides_in(r_.in_shape, t);
  o.item = static_cast<int64_t>(t.element_size());
  o.output = output;
  tensors_.push_back(t);
  ops_.push_back(std::move(o));
  return static_cast<int>(ops_.size() - 1);
}

// Kept dims in logical order; reduced dims ordered by the first loaded
// input's strides and merged where every operand steps as one.
void ReductionRun::split_dims() {
  const IntArrayRef shape = r_.in_shape;
  std::vector<int64_t> red;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (r_.reduced[d]) {
      row_len_ *= shape[d];
      if (shape[d] != 1) red.push_back(static_cast<int64_t>(d));
    } else {
      rows_ *= shape[d];
      if (shape[d] != 1) kept_.push_back(static_cast<int64_t>(d));
    }
  }
  int primary = -1;
  for (size_t k = 0; k < ops_.size() && primary < 0; ++k) {
    if (!ops_[k].output) primary = static_cast<int>(k);
  }
  if (primary >= 0) {
    const auto& st = ops_[primary].strides;
    std::stable_sort(red.begin(), red.end(), [&](int64_t a, int64_t b) { return st[a] > st[b]; });
  }
  red_strides_.assign(ops_.size(), {});
  for (int64_t d : red) {
    bool merge = !red_sizes_.empty();
    for (size_t k = 0; k < ops_.size() && merge; ++k) {
      merge = red_strides_[k].back() == ops_[k].strides[d] * shape[d];
    }
    if (merge) {
      red_sizes_.back() *= shape[d];
      for (size_t k = 0; k < ops_.size(); ++k) red_strides_[k].back() = ops_[k].strides[d];
    } else {
      red_sizes_.push_back(shape[d]);
      for (size_t k = 0; k < ops_.size(); ++k) red_strides_[k].push_back(ops_[k].strides[d]);
    }
  }
  if (red_sizes_.empty()) {
    red_sizes_.push_back(1);
    for (size_t k = 0; k < ops_.size(); ++k) red_strides_[k].push_back(0);
  }
}

// `strided`: operands may step through the run (Note [Strided operands]).
bool ReductionRun::inner_ok(bool strided) const {
  if (red_sizes_.back() == 1) return true;
  for (size_t k = 0; k < ops_.size(); ++k) {
    int64_t s = red_strides_[k].back();
    if (s == 1 || (s == 0 && !ops_[k].output)) continue;
    if (!strided || s == 0 || std::abs(s) >= kMaxStridedBytes / ops_[k].item) return false;
  }
  return true;
}

bool ReductionRun::outer_ok(bool norm) {
  if (kept_.empty()) return false;
  if (norm && r_.op != RowOp::Softmax && r_.op != RowOp::LogSoftmax) return false;
  const int64_t d = kept_.back();
  for (const Operand& o : ops_) {
    if (!(o.strides[d] == 1 || (o.strides[d] == 0 && !o.output))) return false;
  }
  return true;
}

RunLayout ReductionRun::layout(int slot, bool inner) const {
  const Operand& o = ops_[slot];
  int64_t s = inner ? red_strides_[slot].back() : o.strides[kept_.back()];
  if (s == 0 && !o.output) return RunLayout::Broadcast;
  return s == 1 || (inner && red_sizes_.back() == 1) ? RunLayout::Dense : RunLayout::Strided;
}

void ReductionRun::kept_offsets(int64_t row, int64_t* off, size_t skip_last) const {
  for (size_t k = 0; k < ops_.size(); ++k) off[k] = 0;
  for (size_t i = kept_.size() - skip_last; i-- > 0;) {
    const int64_t d = kept_[i];
    const int64_t size = r_.in_shape[d];
    const int64_t idx = row % size;
    row /= size;
    for (size_t k = 0; k < ops_.size(); ++k) off[k] += idx * ops_[k].strides[d];
  }
}

void ReductionRun::run_offsets(int64_t j, const int64_t* base, int64_t* off) const {
  for (size_t k = 0; k < ops_.size(); ++k) off[k] = base[k];
  for (size_t i = red_sizes_.size() - 1; i-- > 0;) {
    const int64_t idx = j % red_sizes_[i];
    j /= red_sizes_[i];
    for (size_t k = 0; k < ops_.size(); ++k) off[k] += idx * red_strides_[k][i];
  }
}

void ReductionRun::prologue(const int64_t* off, int64_t at, int64_t n, float* dst,
                            bool store) const {
  const CpuPointwiseKernel* k = store || unstored_ == nullptr ? prologue_ : unstored_;
  const size_t skip = k == prologue_ ? 0 : static_cast<size_t>(stores());
  CpuRun run;
  set_params(k == prologue_ ? r_.prologue.kernel : unstored_ir_, run);
  run.n = n;
  run.ptrs[0] = reinterpret_cast<char*>(dst);
  for (size_t i = skip; i < pro_slots_.size(); ++i) {
    run.ptrs[1 + i - skip] = ptr(pro_slots_[i], off, at);
    run.strides[1 + i - skip] = step(pro_slots_[i]);
  }
  k->run(run);
}

void ReductionRun::epilogue(const int64_t* off, int64_t n, float* src, int64_t at) const {
  CpuRun run;
  set_params(r_.epilogue.kernel, run);
  run.n = n;
  const size_t nout = r_.epilogue.outputs.size();
  for (size_t i = 0; i < nout; ++i) {
    run.ptrs[i] = ptr(epi_slots_[i], off, at);
    run.strides[i] = step(epi_slots_[i]);
  }
  run.ptrs[nout] = reinterpret_cast<char*>(src);
  for (size_t i = nout; i < epi_slots_.size(); ++i) {
    run.ptrs[i + 1] = ptr(epi_slots_[i], off, at);
    run.strides[i + 1] = step(epi_slots_[i]);
  }
  epilogue_->run(run);
}

int ReductionRun::direct_input(bool outer) const {
  const PointwiseKernel& k = r_.prologue.kernel;
  if ((!outer && red_sizes_.size() != 1) || k.outputs.size() != 1 || k.body.size() != 1 ||
      k.body[0].op != Prim::Load || k.inputs[k.body[0].operand] != kFloat32) {
    return -1;
  }
  int slot = pro_slots_[k.body[0].operand];
  if (outer) return ops_[slot].strides[kept_.back()] == 1 ? slot : -1;
  return red_strides_[slot].back() == 1 || red_sizes_.back() == 1 ? slot : -1;
}

int ReductionRun::direct_output(bool outer) const {
  const PointwiseKernel& k = r_.epilogue.kernel;
  if ((!outer && red_sizes_.size() != 1) || k.outputs.size() != 1 || k.outputs[0] != kFloat32 ||
      k.body.size() != 1 || k.body[0].op != Prim::Load || k.body[0].operand != 0) {
    return -1;
  }
  const int slot = epi_slots_[0];
  if (outer) return slot;  // dense along the last kept dim (outer_ok)
  return red_strides_[slot].back() == 1 || red_sizes_.back() == 1 ? slot : -1;
}

void ReductionRun::pass(Pass p, const float* x, void* y, int64_t n, float c0, float c1, void* lanes,
                        const float* z, const float* w) const {
  PassArgs a;
  a.w = w;
  a.x = x;
  a.y = static_cast<float*>(y);
  a.z = z;
  a.n = n;
  a.c0 = c0;
  a.c1 = c1;
  a.lanes = lanes;
  passes_[static_cast<int>(p)]->run(a);
}

double ReductionRun::wide(Pass p, const float* x, float* y, int64_t n, float c0) const {
  double lanes[16] = {};
  const int64_t full = n / lanes_ * lanes_;
  pass(p, x, y, full, c0, 0, lanes);
  double s = 0;
  for (int i = 0; i < lanes_; ++i) s += lanes[i];
  for (int64_t i = full; i < n; ++i) {
    float v = x[i];
    if (p == Pass::kSqDev) {
      const double d = v - c0;  // squared in float64, as the pass does
      s += d * d;
      continue;
    }
    if (p == Pass::kExpSum || p == Pass::kExpSumStore) {
      v = std::exp(v - c0);
      if (p == Pass::kExpSumStore) y[i] = v;
    }
    s += v;
  }
  return s;
}

void ReductionRun::load_passes() {
  for (int p = 0; p < static_cast<int>(Pass::kNumPasses); ++p) {
    passes_[p] = &row_pass(static_cast<Pass>(p), isa_);
  }
}

OuterBlocks ReductionRun::outer_blocks(int64_t width) const {
  OuterBlocks b;
  b.kd = kept_.back();
  b.width_all = r_.in_shape[b.kd];
  b.width = width;
  // No kept position (a kept dim of size 0, so no result): no unit, and no
  // division by that extent or by a width made from it.
  if (rows_ == 0 || width <= 0 || b.width_all <= 0) return b;
  b.blocks = (b.width_all + width - 1) / width;
  b.units = rows_ / b.width_all * b.blocks;
  for (size_t d = 0; d < r_.in_shape.size(); ++d) {
    if (r_.reduced[d] && r_.in_shape[d] != 1) b.red.push_back(static_cast<int64_t>(d));
  }
  return b;
}

int64_t ReductionRun::block_offsets(const OuterBlocks& b, int64_t u, int64_t* koff) const {
  const int64_t orow = u / b.blocks, j0 = (u % b.blocks) * b.width;
  kept_offsets(orow, koff, 1);
  for (size_t k = 0; k < ops_.size(); ++k) koff[k] += j0 * ops_[k].strides[b.kd];
  return std::min(b.width, b.width_all - j0);
}

void ReductionRun::reduced_offsets(const OuterBlocks& b, int64_t pos, const int64_t* koff,
                                   int64_t* roff) const {
  for (size_t k = 0; k < ops_.size(); ++k) roff[k] = koff[k];
  for (size_t i = b.red.size(); i-- > 0;) {
    const int64_t idx = pos % r_.in_shape[b.red[i]];
    pos /= r_.in_shape[b.red[i]];
    for (size_t k = 0; k < ops_.size(); ++k) roff[k] += idx * ops_[k].strides[b.red[i]];
  }
}

}  // namespace detail

bool run_reduction_cpu(const ReductionGroup& group) {
  profiler::detail::Scope event(profiler::EventKind::CpuKernel, [&] {
    return std::string("cpu_fused_reduction (") + row_op_name(group.op) + ") " +
           profiler::detail::dims_str(group.in_shape);
  });
  return detail::ReductionRun(group).run();
}

int64_t cpu_reductions_refused() {
  return detail::g_refused.load();
}

int64_t cpu_reductions_run() {
  return detail::g_runs.load();
}

int64_t cpu_long_rows_split() {
  return detail::g_long_rows.load();
}

int64_t cpu_outer_storing_runs() {
  return detail::g_outer_stored.load();
}

}  // namespace kiln::jit::cpu
