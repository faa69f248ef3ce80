#include "jit/codegen_cpu/reduce_cpu.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "jit/codegen_cpu/launch_cpu.h"
#include "jit/codegen_cpu/row_pass.h"
#include "jit/ir/iteration.h"
#include "kiln/logging.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::jit::cpu {
namespace {

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
constexpr int64_t kChunk = 4096;       // elements per prologue call of an inner statistic
constexpr int64_t kGrain = 16384;      // elements per task
constexpr int64_t kOuterWidth = 512;   // results per block of an outer statistic
constexpr int64_t kOuterFlush = 64;    // reduced rows between float -> double flushes
constexpr int64_t kLongRow = 65536;    // a softmax row at least this long is split across workers
constexpr int64_t kLongChunk = 16384;  // elements per task of a long row (a multiple of the lanes)

// Runs body(begin, end) over `units` units of `per_unit` elements each: at
// once when they make one task's worth (kGrain elements), else split across
// TBB workers in tasks of about that size.
template <class Body>
void run_units(int64_t units, int64_t per_unit, const Body& body) {
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(per_unit, 1));
  if (units <= grain) {
    body(0, units);
  } else {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, units, grain),
                      [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); });
  }
}

// Note [Outer normalizations]
// softmax / log_softmax over a dim that is not the innermost one (dim 0 of
// [T, C], dim 1 of [B, H, T]) where the last kept dim is dense for every
// operand: a block of up to kOuterWidth neighbouring kept positions is
// normalized at once, lanes across the block, in three sweeps over the
// reduced positions (the running max, the float64 sum of exp(x - max), then
// exp(x - max) / sum or (x - max) - log(sum) into the epilogue), the
// prologue re-run per sweep (Note [Storing prologues]). Blocks are narrowed
// so that every worker gets one.
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
//
// Note [Long rows]
// One normalized row of kLongRow elements or more (when there are fewer rows
// than workers) is split into kLongChunk pieces: softmax takes per-piece
// maxima, then per-piece float64 sums of exp(x - max); layer_norm per-piece
// float64 sums, then per-piece float64 squared deviations from the mean's
// float rounding (as a row in one piece, normalize_row); rms_norm per-piece
// float64 sums of squares. Partial results combine in piece order (so the
// result does not depend on the worker count), then the normalization runs
// piece by piece too. Where there are enough rows to occupy the workers, a
// row that long still takes the pieces' arithmetic, one row per worker, so
// its bits do not depend on how many workers there are either. The prologue runs in the first sweep
// only, into a float32 copy of the row, so its stores happen once.

std::atomic<int64_t> g_runs{0};
std::atomic<int64_t> g_refused{0};       // for the layout
std::atomic<int64_t> g_long_rows{0};     // split across workers (Note [Long rows])
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

float combine_lanes_extreme(const float* lanes, int n, bool max) {
  float r = lanes[0];
  for (int i = 1; i < n; ++i) {
    if (std::isnan(r)) break;
    float v = lanes[i];
    if (std::isnan(v) || (max ? v > r : v < r)) r = v;
  }
  return r;
}

struct Operand {
  char* base = nullptr;
  int64_t item = 0;
  std::vector<int64_t> strides;  // over in_shape, elements
  bool output = false;
};

class ReductionRun {
 public:
  explicit ReductionRun(const ReductionGroup& r)
      : r_(r), isa_(host_isa()), lanes_(isa_lanes(isa_)) {}

  bool run() {
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

 private:
  int add(const Tensor& t, bool output) {
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
  void split_dims() {
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
  bool inner_ok(bool strided) const {
    if (red_sizes_.back() == 1) return true;
    for (size_t k = 0; k < ops_.size(); ++k) {
      int64_t s = red_strides_[k].back();
      if (s == 1 || (s == 0 && !ops_[k].output)) continue;
      if (!strided || s == 0 || std::abs(s) >= kMaxStridedBytes / ops_[k].item) return false;
    }
    return true;
  }

  bool outer_ok(bool norm) {
    if (kept_.empty()) return false;
    if (norm && r_.op != RowOp::Softmax && r_.op != RowOp::LogSoftmax) return false;
    const int64_t d = kept_.back();
    for (const Operand& o : ops_) {
      if (!(o.strides[d] == 1 || (o.strides[d] == 0 && !o.output))) return false;
    }
    return true;
  }

  RunLayout layout(int slot, bool inner) const {
    const Operand& o = ops_[slot];
    int64_t s = inner ? red_strides_[slot].back() : o.strides[kept_.back()];
    if (s == 0 && !o.output) return RunLayout::Broadcast;
    return s == 1 || (inner && red_sizes_.back() == 1) ? RunLayout::Dense : RunLayout::Strided;
  }

  // Element offsets of every operand at kept position `row` (row-major over
  // the kept dims, size-1 ones left out).
  void kept_offsets(int64_t row, int64_t* off, size_t skip_last = 0) const {
    for (size_t k = 0; k < ops_.size(); ++k) off[k] = 0;
    for (size_t i = kept_.size() - skip_last; i-- > 0;) {
      const int64_t d = kept_[i];
      const int64_t size = r_.in_shape[d];
      const int64_t idx = row % size;
      row /= size;
      for (size_t k = 0; k < ops_.size(); ++k) off[k] += idx * ops_[k].strides[d];
    }
  }

  // Offsets of run `j` of the reduced space (outer reduced dims only).
  void run_offsets(int64_t j, const int64_t* base, int64_t* off) const {
    for (size_t k = 0; k < ops_.size(); ++k) off[k] = base[k];
    for (size_t i = red_sizes_.size() - 1; i-- > 0;) {
      const int64_t idx = j % red_sizes_[i];
      j /= red_sizes_[i];
      for (size_t k = 0; k < ops_.size(); ++k) off[k] += idx * red_strides_[k][i];
    }
  }

  char* ptr(int slot, const int64_t* off, int64_t extra = 0) const {
    const Operand& o = ops_[slot];
    return o.base + (off[slot] + extra * red_strides_[slot].back()) * o.item;
  }

  // An operand's byte step along the run (read by the kernel for Strided ones).
  int64_t step(int slot) const { return red_strides_[slot].back() * ops_[slot].item; }

  // The prologue's outputs past the reduced value (the members it stores).
  int stores() const { return static_cast<int>(r_.prologue.outputs.size()) - 1; }

  // The prologue over `n` elements of the run at `off`, from element `at`, into
  // `dst`; with `store` false, its variant that stores nothing (unstored_).
  void prologue(const int64_t* off, int64_t at, int64_t n, float* dst, bool store = true) const {
    const CpuPointwiseKernel* k = store || unstored_ == nullptr ? prologue_ : unstored_;
    const size_t skip = k == prologue_ ? 0 : static_cast<size_t>(stores());
    CpuRun run;
    run.n = n;
    run.ptrs[0] = reinterpret_cast<char*>(dst);
    for (size_t i = skip; i < pro_slots_.size(); ++i) {
      run.ptrs[1 + i - skip] = ptr(pro_slots_[i], off, at);
      run.strides[1 + i - skip] = step(pro_slots_[i]);
    }
    k->run(run);
  }

  void epilogue(const int64_t* off, int64_t n, float* src, int64_t at = 0) const {
    CpuRun run;
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

  // The prologue's body is `load in0` of a float32 input dense along the run
  // (along the last kept dim for `outer`): passes then read the input itself.
  int direct_input(bool outer = false) const {
    const PointwiseKernel& k = r_.prologue.kernel;
    if ((!outer && red_sizes_.size() != 1) || k.outputs.size() != 1 || k.body.size() != 1 ||
        k.body[0].op != Prim::Load || k.inputs[k.body[0].operand] != kFloat32) {
      return -1;
    }
    int slot = pro_slots_[k.body[0].operand];
    if (outer) return ops_[slot].strides[kept_.back()] == 1 ? slot : -1;
    return red_strides_[slot].back() == 1 || red_sizes_.back() == 1 ? slot : -1;
  }

  // The epilogue stores the result unchanged as float32: passes write the output.
  int direct_output(bool outer = false) const {
    const PointwiseKernel& k = r_.epilogue.kernel;
    if ((!outer && red_sizes_.size() != 1) || k.outputs.size() != 1 || k.outputs[0] != kFloat32 ||
        k.body.size() != 1 || k.body[0].op != Prim::Load || k.body[0].operand != 0) {
      return -1;
    }
    const int slot = epi_slots_[0];
    if (outer) return slot;  // dense along the last kept dim (outer_ok)
    return red_strides_[slot].back() == 1 || red_sizes_.back() == 1 ? slot : -1;
  }

  void pass(Pass p, const float* x, void* y, int64_t n, float c0, float c1, void* lanes,
            const float* z = nullptr, const float* w = nullptr) const {
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

  // A float64 sum pass (Note [Row passes]): full vectors generated, the tail here.
  double wide(Pass p, const float* x, float* y, int64_t n, float c0) const {
    double lanes[16] = {};
    const int64_t full = n / lanes_ * lanes_;
    pass(p, x, y, full, c0, 0, lanes);
    double s = 0;
    for (int i = 0; i < lanes_; ++i) s += lanes[i];
    for (int64_t i = full; i < n; ++i) {
      float v = x[i];
      if (p == Pass::kSqDev) {
        v -= c0;
        v *= v;
      } else if (p == Pass::kExpSum || p == Pass::kExpSumStore) {
        v = std::exp(v - c0);
        if (p == Pass::kExpSumStore) y[i] = v;
      }
      s += v;
    }
    return s;
  }

  void load_passes() {
    for (int p = 0; p < static_cast<int>(Pass::kNumPasses); ++p) {
      passes_[p] = &row_pass(static_cast<Pass>(p), isa_);
    }
  }

  void run_inner() {
    load_passes();
    const int64_t numel = rows_ * row_len_;
    if (numel == 0 && is_row_normalization(r_.op)) return;
    const bool long_rows =
        is_row_normalization(r_.op) && red_sizes_.size() == 1 && row_len_ >= kLongRow;
    if (long_rows && rows_ < tbb::this_task_arena::max_concurrency()) {
      std::vector<int64_t> koff(ops_.size());
      for (int64_t row = 0; row < rows_; ++row) {
        kept_offsets(row, koff.data());
        normalize_long_row(koff.data(), true);
      }
      g_long_rows.fetch_add(rows_, std::memory_order_relaxed);
      return;
    }
    const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(row_len_, 1));
    auto body = [&](int64_t b, int64_t e) {
      std::vector<int64_t> koff(ops_.size()), roff(ops_.size());
      std::vector<float> scratch;
      for (int64_t row = b; row < e; ++row) {
        kept_offsets(row, koff.data());
        if (long_rows) {
          normalize_long_row(koff.data(), false);
        } else if (is_row_normalization(r_.op)) {
          normalize_row(koff.data(), roff.data(), &scratch);
        } else {
          stats_.data_ptr<float>()[row] = static_row(koff.data(), roff.data(), &scratch);
        }
      }
    };
    if (rows_ <= grain || rows_ * row_len_ < 2 * kGrain) {
      body(0, rows_);
    } else {
      tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows_, grain),
                        [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); });
    }
  }

  void normalize_row(const int64_t* koff, int64_t* roff, std::vector<float>* scratch) const {
    const int64_t n = row_len_, run = red_sizes_.back(), runs = run > 0 ? n / run : 0;
    const int in = direct_input(), out = direct_output();
    const float* src;
    if (in >= 0) {
      src = reinterpret_cast<const float*>(ptr(in, koff));
    } else {
      scratch->resize(static_cast<size_t>(n));
      for (int64_t j = 0; j < runs; ++j) {
        run_offsets(j, koff, roff);
        prologue(roff, 0, run, scratch->data() + j * run);
      }
      src = scratch->data();
    }
    float* dst;
    if (out >= 0) {
      dst = reinterpret_cast<float*>(ptr(out, koff));
    } else {
      scratch->resize(static_cast<size_t>(n));
      dst = scratch->data();
    }
    float lanes[16];
    auto reset = [&](float v) { std::fill(lanes, lanes + lanes_, v); };
    switch (r_.op) {
      case RowOp::Softmax:
      case RowOp::LogSoftmax: {
        reset(-std::numeric_limits<float>::infinity());
        pass(Pass::kMax, src, nullptr, n, 0, 0, lanes);
        const float mx = combine_lanes_extreme(lanes, lanes_, true);
        if (r_.op == RowOp::Softmax) {
          const double sum = wide(Pass::kExpSumStore, src, dst, n, mx);
          const float inv = static_cast<float>(1.0 / sum);
          pass(Pass::kAffine, dst, dst, n, inv, 0, nullptr);
        } else {
          const float ls = static_cast<float>(std::log(wide(Pass::kExpSum, src, nullptr, n, mx)));
          pass(Pass::kSubSub, src, dst, n, mx, ls, nullptr);
        }
        break;
      }
      case RowOp::LayerNorm: {
        const double mean = wide(Pass::kSum, src, nullptr, n, 0) / static_cast<double>(n);
        const float c = static_cast<float>(mean);
        double sq = wide(Pass::kSqDev, src, nullptr, n, c) -
                    static_cast<double>(n) * (mean - c) * (mean - c);
        const float rstd = static_cast<float>(
            1.0 / std::sqrt(std::max(sq, 0.0) / static_cast<double>(n) + r_.eps));
        const float shift = -(rstd * c);
        pass(Pass::kAffine, src, dst, n, rstd, shift, nullptr);
        break;
      }
      case RowOp::RmsNorm: {
        const float scale = static_cast<float>(
            1.0 /
            std::sqrt(wide(Pass::kSqDev, src, nullptr, n, 0) / static_cast<double>(n) + r_.eps));
        pass(Pass::kAffine, src, dst, n, scale, 0, nullptr);
        break;
      }
      default:
        KILN_INTERNAL_ASSERT(false, "not a row normalization");
    }
    if (out >= 0) return;
    for (int64_t j = 0; j < runs; ++j) {
      run_offsets(j, koff, roff);
      epilogue(roff, run, dst + j * run);
    }
  }

  // Note [Long rows].
  // `split`: pieces run across workers (else in order on this one).
  void normalize_long_row(const int64_t* koff, bool split) const {
    const int64_t n = row_len_, pieces = (n + kLongChunk - 1) / kLongChunk;
    const int in = direct_input(), out = direct_output();
    std::vector<float> scratch;
    if (in < 0 || out < 0) scratch.resize(static_cast<size_t>(n));
    const float* src = in >= 0 ? reinterpret_cast<const float*>(ptr(in, koff)) : scratch.data();
    float* dst = out >= 0 ? reinterpret_cast<float*>(ptr(out, koff)) : scratch.data();
    std::vector<float> maxima(static_cast<size_t>(pieces));
    std::vector<double> sums(static_cast<size_t>(pieces));
    auto each_piece = [&](auto&& f) {
      auto range = [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) {
          const int64_t at = c * kLongChunk;
          f(c, at, std::min(kLongChunk, n - at));
        }
      };
      if (!split) return range(0, pieces);
      tbb::parallel_for(tbb::blocked_range<int64_t>(0, pieces, 1),
                        [&](const tbb::blocked_range<int64_t>& r) { range(r.begin(), r.end()); });
    };
    // The pieces' float64 sums in piece order: the same for any worker count.
    auto total = [&] {
      double t = 0;
      for (double v : sums) t += v;
      return t;
    };
    // The first sweep runs the prologue (once per element, so its stores
    // happen once) and reduces with `p` about `c0`.
    auto first_sweep = [&](Pass p, float c0) {
      each_piece([&](int64_t c, int64_t at, int64_t len) {
        if (in < 0) prologue(koff, at, len, scratch.data() + at);
        if (p == Pass::kMax) {
          float lanes[16];
          std::fill(lanes, lanes + lanes_, -std::numeric_limits<float>::infinity());
          pass(Pass::kMax, src + at, nullptr, len, 0, 0, lanes);
          maxima[c] = combine_lanes_extreme(lanes, lanes_, true);
        } else {
          sums[c] = wide(p, src + at, nullptr, len, c0);
        }
      });
    };
    // The last sweep: y = x * c0 + c1 (softmax: in place over the exps), or
    // (x - c0) - c1 (log_softmax), then the epilogue.
    auto last_sweep = [&](Pass p, const float* x, float c0, float c1) {
      each_piece([&](int64_t, int64_t at, int64_t len) {
        pass(p, x + at, dst + at, len, c0, c1, nullptr);
        if (out < 0) epilogue(koff, len, dst + at, at);
      });
    };
    const double count = static_cast<double>(n);
    switch (r_.op) {
      case RowOp::Softmax:
      case RowOp::LogSoftmax: {
        first_sweep(Pass::kMax, 0);
        const float mx = combine_lanes_extreme(maxima.data(), static_cast<int>(pieces), true);
        const bool softmax = r_.op == RowOp::Softmax;
        each_piece([&](int64_t c, int64_t at, int64_t len) {
          sums[c] = softmax ? wide(Pass::kExpSumStore, src + at, dst + at, len, mx)
                            : wide(Pass::kExpSum, src + at, nullptr, len, mx);
        });
        const double sum = total();
        if (softmax) {
          last_sweep(Pass::kAffine, dst, static_cast<float>(1.0 / sum), 0);
        } else {
          last_sweep(Pass::kSubSub, src, mx, static_cast<float>(std::log(sum)));
        }
        break;
      }
      case RowOp::LayerNorm: {
        // As normalize_row: the mean, then squared deviations from its float
        // rounding, corrected by the rounding's share.
        first_sweep(Pass::kSum, 0);
        const double mean = total() / count;
        const float c = static_cast<float>(mean);
        each_piece([&](int64_t k, int64_t at, int64_t len) {
          sums[k] = wide(Pass::kSqDev, src + at, nullptr, len, c);
        });
        const double sq = total() - count * (mean - c) * (mean - c);
        const float rstd = static_cast<float>(1.0 / std::sqrt(std::max(sq, 0.0) / count + r_.eps));
        last_sweep(Pass::kAffine, src, rstd, -(rstd * c));
        break;
      }
      case RowOp::RmsNorm: {
        first_sweep(Pass::kSqDev, 0);
        last_sweep(Pass::kAffine, src,
                   static_cast<float>(1.0 / std::sqrt(total() / count + r_.eps)), 0);
        break;
      }
      default:
        KILN_INTERNAL_ASSERT(false, "not a row normalization");
    }
  }

  // Note [Outer normalizations].
  void run_outer_norm() {
    load_passes();
    if (rows_ == 0 || row_len_ == 0) return;
    const int64_t kd = kept_.back();
    const int64_t width_all = r_.in_shape[kd];
    const int64_t outer_rows = rows_ / width_all;
    const int workers = std::max(1, tbb::this_task_arena::max_concurrency());
    int64_t width = (width_all + workers - 1) / workers;
    width = (width + lanes_ - 1) / lanes_ * lanes_;
    width = std::min({std::max<int64_t>(width, 4 * lanes_), kOuterWidth, width_all});
    const int64_t blocks = (width_all + width - 1) / width;
    std::vector<int64_t> red;
    for (size_t d = 0; d < r_.in_shape.size(); ++d) {
      if (r_.reduced[d] && r_.in_shape[d] != 1) red.push_back(static_cast<int64_t>(d));
    }
    const int64_t n = row_len_;
    const int in = direct_input(true), out = direct_output(true);
    const bool softmax = r_.op == RowOp::Softmax;
    auto body = [&](int64_t ub, int64_t ue) {
      std::vector<int64_t> koff(ops_.size()), roff(ops_.size());
      std::vector<float> xbuf(width), ybuf(width), mx(width), c(width);
      std::vector<double> total(width);
      for (int64_t u = ub; u < ue; ++u) {
        const int64_t orow = u / blocks, j0 = (u % blocks) * width;
        const int64_t w = std::min(width, width_all - j0);
        const int64_t full = w / lanes_ * lanes_;
        kept_offsets(orow, koff.data(), 1);
        for (size_t k = 0; k < ops_.size(); ++k) koff[k] += j0 * ops_[k].strides[kd];
        // roff = the offsets at reduced position `pos`; the prologue's values there.
        auto at = [&](int64_t pos) {
          for (size_t k = 0; k < ops_.size(); ++k) roff[k] = koff[k];
          for (size_t i = red.size(); i-- > 0;) {
            const int64_t idx = pos % r_.in_shape[red[i]];
            pos /= r_.in_shape[red[i]];
            for (size_t k = 0; k < ops_.size(); ++k) roff[k] += idx * ops_[k].strides[red[i]];
          }
        };
        // Only the last sweep stores (Note [Storing prologues]).
        auto values = [&](int64_t pos, bool store) -> const float* {
          at(pos);
          if (in >= 0) return reinterpret_cast<const float*>(ptr(in, roff.data()));
          prologue(roff.data(), 0, w, xbuf.data(), store);
          return xbuf.data();
        };
        std::fill(mx.begin(), mx.end(), -std::numeric_limits<float>::infinity());
        for (int64_t pos = 0; pos < n; ++pos) {
          pass(Pass::kAccMax, values(pos, false), mx.data(), w, 0, 0, nullptr);
        }
        std::fill(total.begin(), total.end(), 0.0);
        for (int64_t pos = 0; pos < n; ++pos) {
          const float* x = values(pos, false);
          pass(Pass::kAccExpSum, x, total.data(), full, 0, 0, nullptr, mx.data());
          for (int64_t j = full; j < w; ++j) total[j] += std::exp(x[j] - mx[j]);
        }
        for (int64_t j = 0; j < w; ++j) {
          c[j] = static_cast<float>(softmax ? 1.0 / total[j] : std::log(total[j]));
        }
        for (int64_t pos = 0; pos < n; ++pos) {
          const float* x = values(pos, true);
          float* y = out >= 0 ? reinterpret_cast<float*>(ptr(out, roff.data())) : ybuf.data();
          pass(softmax ? Pass::kExpSubMul : Pass::kSubSubZ, x, y, w, 0, 0, nullptr, mx.data(),
               c.data());
          if (out < 0) epilogue(roff.data(), w, ybuf.data());
        }
      }
    };
    run_units(outer_rows * blocks, n * width, body);
  }

  float static_row(const int64_t* koff, int64_t* roff, std::vector<float>* scratch) const {
    const int64_t n = row_len_, run = red_sizes_.back(), runs = run > 0 ? n / run : 0;
    const int in = direct_input();
    const bool extreme = r_.op == RowOp::Max || r_.op == RowOp::Min;
    float lanes[16];
    std::fill(lanes, lanes + lanes_,
              r_.op == RowOp::Max   ? -std::numeric_limits<float>::infinity()
              : r_.op == RowOp::Min ? std::numeric_limits<float>::infinity()
                                    : 0.0f);
    double sum = 0, mean = 0, m2 = 0;
    int64_t count = 0;
    if (in < 0) scratch->resize(static_cast<size_t>(std::min(run, kChunk)));
    for (int64_t j = 0; j < runs; ++j) {
      run_offsets(j, koff, roff);
      for (int64_t at = 0; at < run; at += kChunk) {
        const int64_t len = std::min(kChunk, run - at);
        const float* x;
        if (in >= 0) {
          x = reinterpret_cast<const float*>(ptr(in, roff, at));
        } else {
          prologue(roff, at, len, scratch->data());
          x = scratch->data();
        }
        if (extreme) {
          pass(r_.op == RowOp::Max ? Pass::kMax : Pass::kMin, x, nullptr, len, 0, 0, lanes);
          continue;
        }
        const double s = wide(Pass::kSum, x, nullptr, len, 0);
        if (r_.op != RowOp::Var) {
          sum += s;
          continue;
        }
        // Chan et al.: merge this chunk's mean and squared deviations.
        const double cmean = s / static_cast<double>(len);
        const float c = static_cast<float>(cmean);
        const double cm2 = wide(Pass::kSqDev, x, nullptr, len, c) -
                           static_cast<double>(len) * (cmean - c) * (cmean - c);
        const double total = static_cast<double>(count + len);
        const double delta = cmean - mean;
        mean += delta * static_cast<double>(len) / total;
        m2 += cm2 + delta * delta * static_cast<double>(count) * static_cast<double>(len) / total;
        count += len;
      }
    }
    switch (r_.op) {
      case RowOp::Max:
        return combine_lanes_extreme(lanes, lanes_, true);
      case RowOp::Min:
        return combine_lanes_extreme(lanes, lanes_, false);
      case RowOp::Sum:
        return static_cast<float>(sum);
      case RowOp::Mean:
        return static_cast<float>(sum / static_cast<double>(n));
      default:
        return static_cast<float>(std::max(m2, 0.0) /
                                  std::max(0.0, static_cast<double>(n - r_.correction)));
    }
  }

  // Outer statistics (Note [Reduction schedules]).
  void run_outer() {
    load_passes();
    const int64_t kd = kept_.back();
    const int64_t width_all = r_.in_shape[kd];
    const int64_t outer_rows = rows_ / width_all;
    const int64_t width = std::min(kOuterWidth, width_all);
    const int64_t blocks = (width_all + width - 1) / width;
    // Every reduced position, in logical order.
    std::vector<int64_t> red;
    for (size_t d = 0; d < r_.in_shape.size(); ++d) {
      if (r_.reduced[d] && r_.in_shape[d] != 1) red.push_back(static_cast<int64_t>(d));
    }
    const int64_t n = row_len_;
    auto body = [&](int64_t ub, int64_t ue) {
      std::vector<int64_t> koff(ops_.size()), roff(ops_.size());
      std::vector<float> scratch(width), acc(width), meanf(width);
      std::vector<double> total(width), mean(width);
      for (int64_t u = ub; u < ue; ++u) {
        const int64_t orow = u / blocks, j0 = (u % blocks) * width;
        const int64_t w = std::min(width, width_all - j0);
        kept_offsets(orow, koff.data(), 1);
        for (size_t k = 0; k < ops_.size(); ++k) koff[k] += j0 * ops_[k].strides[kd];
        // One sweep over the reduced space: acc op= prologue(x), flushed to `total`.
        // `store`: the last sweep (Note [Storing prologues]).
        auto sweep = [&](Pass p, const float* z, bool store) {
          const float id = p == Pass::kAccMax   ? -std::numeric_limits<float>::infinity()
                           : p == Pass::kAccMin ? std::numeric_limits<float>::infinity()
                                                : 0.0f;
          std::fill(acc.begin(), acc.end(), id);
          std::fill(total.begin(), total.end(), 0.0);
          const bool sums = p == Pass::kAccSum || p == Pass::kAccSqDev;
          const int64_t full = sums ? w / lanes_ * lanes_ : w;
          for (int64_t pos = 0; pos < n; ++pos) {
            int64_t rem = pos;
            for (size_t k = 0; k < ops_.size(); ++k) roff[k] = koff[k];
            for (size_t i = red.size(); i-- > 0;) {
              const int64_t idx = rem % r_.in_shape[red[i]];
              rem /= r_.in_shape[red[i]];
              for (size_t k = 0; k < ops_.size(); ++k) roff[k] += idx * ops_[k].strides[red[i]];
            }
            prologue(roff.data(), 0, w, scratch.data(), store);
            if (!sums) {
              pass(p, scratch.data(), acc.data(), w, 0, 0, nullptr, z);
              continue;
            }
            // Sums accumulate in float64 (`total`); the tail past full vectors here.
            pass(p, scratch.data(), total.data(), full, 0, 0, nullptr, z);
            for (int64_t j = full; j < w; ++j) {
              float v = scratch[j];
              if (p == Pass::kAccSqDev) {
                v -= z[j];
                v *= v;
              }
              total[j] += v;
            }
          }
        };
        float* out = stats_.data_ptr<float>() + orow * width_all + j0;
        switch (r_.op) {
          case RowOp::Max:
          case RowOp::Min:
            sweep(r_.op == RowOp::Max ? Pass::kAccMax : Pass::kAccMin, nullptr, true);
            std::copy(acc.begin(), acc.begin() + w, out);
            break;
          case RowOp::Sum:
          case RowOp::Mean:
            sweep(Pass::kAccSum, nullptr, true);
            for (int64_t j = 0; j < w; ++j) {
              out[j] = static_cast<float>(r_.op == RowOp::Sum ? total[j]
                                                              : total[j] / static_cast<double>(n));
            }
            break;
          default: {  // Var: sum, then squared deviations from the mean
            sweep(Pass::kAccSum, nullptr, false);
            for (int64_t j = 0; j < w; ++j) {
              mean[j] = total[j] / static_cast<double>(n);
              meanf[j] = static_cast<float>(mean[j]);
            }
            sweep(Pass::kAccSqDev, meanf.data(), true);
            const double div = std::max(0.0, static_cast<double>(n - r_.correction));
            for (int64_t j = 0; j < w; ++j) {
              const double d = mean[j] - meanf[j];
              out[j] = static_cast<float>(std::max(total[j] - static_cast<double>(n) * d * d, 0.0) /
                                          div);
            }
          }
        }
      }
    };
    run_units(outer_rows * blocks, n * width, body);
  }

  const ReductionGroup& r_;
  const Isa isa_;
  const int lanes_;
  std::vector<Tensor> tensors_;
  std::vector<Operand> ops_;
  std::vector<int> pro_slots_, epi_slots_;
  std::vector<int64_t> kept_;
  int64_t rows_ = 1, row_len_ = 1;
  std::vector<int64_t> red_sizes_;
  std::vector<std::vector<int64_t>> red_strides_;
  const CpuPointwiseKernel* prologue_ = nullptr;
  const CpuPointwiseKernel* unstored_ = nullptr;  // Note [Storing prologues]
  const CpuPointwiseKernel* epilogue_ = nullptr;
  const RowPassKernel* passes_[static_cast<int>(Pass::kNumPasses)] = {};
  Tensor stats_;
  FusedGroup epi_group_;
};

}  // namespace

bool run_reduction_cpu(const ReductionGroup& group) {
  return ReductionRun(group).run();
}

int64_t cpu_reductions_refused() {
  return g_refused.load();
}

int64_t cpu_reductions_run() {
  return g_runs.load();
}

int64_t cpu_long_rows_split() {
  return g_long_rows.load();
}

int64_t cpu_outer_storing_runs() {
  return g_outer_stored.load();
}

}  // namespace kiln::jit::cpu
