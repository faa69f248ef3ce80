#pragma once

// The private parts of reduce_cpu.h: one reduction group's run, shared by its
// schedules (Note [Reduction schedules]), each in a file of its own:
//   reduce_cpu.cpp             operands, dims, kernels; picks the schedule
//   reduce_cpu_inner.cpp       rows with the reduced run innermost
//   reduce_cpu_long_rows.cpp   one long normalized row split across workers
//   reduce_cpu_outer.cpp       statistics over blocks of kept positions
//   reduce_cpu_outer_norm.cpp  softmax / log_softmax over blocks of kept positions

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "jit/codegen_cpu/launch_cpu.h"
#include "jit/codegen_cpu/row_pass.h"
#include "jit/passes/fusion.h"

namespace kiln::jit::cpu::detail {

constexpr int64_t kChunk = 4096;       // elements per prologue call of an inner statistic
constexpr int64_t kGrain = 16384;      // elements per task
constexpr int64_t kOuterWidth = 512;   // results per block of an outer statistic
constexpr int64_t kLongRow = 65536;    // a softmax row at least this long is split across workers
constexpr int64_t kLongChunk = 16384;  // elements per task of a long row (a multiple of the lanes)

// Counters behind cpu_reductions_run() and the others in reduce_cpu.h.
extern std::atomic<int64_t> g_long_rows;

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

// The first NaN, else the largest (max) or smallest of `n` lanes.
float combine_lanes_extreme(const float* lanes, int n, bool max);

struct Operand {
  char* base = nullptr;
  int64_t item = 0;
  std::vector<int64_t> strides;  // over in_shape, elements
  bool output = false;
};

// The outer schedules' unit of work: a block of up to `width` neighbouring
// positions along the last kept dim (dense for every operand), at one
// position of the other kept dims; its reduced positions are visited in
// logical order.
struct OuterBlocks {
  int64_t kd = 0;            // the last kept dim
  int64_t width_all = 0;     // its size
  int64_t width = 0;         // positions per block
  int64_t blocks = 0;        // blocks along it
  int64_t units = 0;         // blocks in all
  std::vector<int64_t> red;  // the reduced dims of size > 1, in logical order

  // Where block u's first result is among the kept positions (row-major).
  int64_t first(int64_t u) const { return u / blocks * width_all + u % blocks * width; }
};

class ReductionRun {
 public:
  explicit ReductionRun(const ReductionGroup& r);
  bool run();

 private:
  // --- Setup (reduce_cpu.cpp) ---
  int add(const Tensor& t, bool output);
  void split_dims();
  bool inner_ok(bool strided) const;
  bool outer_ok(bool norm);
  RunLayout layout(int slot, bool inner) const;
  bool compile_kernels(bool inner, bool outer, bool norm);

  // --- Shared by the schedules (reduce_cpu.cpp) ---
  // Element offsets of every operand at kept position `row` (row-major over
  // the kept dims, size-1 ones left out), the last `skip_last` kept dims left out.
  void kept_offsets(int64_t row, int64_t* off, size_t skip_last = 0) const;
  // Offsets of run `j` of the reduced space (outer reduced dims only).
  void run_offsets(int64_t j, const int64_t* base, int64_t* off) const;
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
  void prologue(const int64_t* off, int64_t at, int64_t n, float* dst, bool store = true) const;
  void epilogue(const int64_t* off, int64_t n, float* src, int64_t at = 0) const;
  // The prologue's body is `load in0` of a float32 input dense along the run
  // (along the last kept dim for `outer`): passes then read the input itself.
  int direct_input(bool outer = false) const;
  // The epilogue stores the result unchanged as float32: passes write the output.
  int direct_output(bool outer = false) const;
  void pass(Pass p, const float* x, void* y, int64_t n, float c0, float c1, void* lanes,
            const float* z = nullptr, const float* w = nullptr) const;
  // A float64 sum pass (Note [Row passes]): full vectors generated, the tail here.
  double wide(Pass p, const float* x, float* y, int64_t n, float c0) const;
  void load_passes();
  // Blocks of up to `width` positions (Note [Reduction schedules]).
  OuterBlocks outer_blocks(int64_t width) const;
  // Block `u`'s offsets into `koff`; returns its width.
  int64_t block_offsets(const OuterBlocks& b, int64_t u, int64_t* koff) const;
  // The offsets at reduced position `pos` of the block at `koff`.
  void reduced_offsets(const OuterBlocks& b, int64_t pos, const int64_t* koff, int64_t* roff) const;

  // --- The schedules ---
  void run_inner();  // inner
  void normalize_row(const int64_t* koff, int64_t* roff, std::vector<float>* scratch) const;
  float static_row(const int64_t* koff, int64_t* roff, std::vector<float>* scratch) const;
  void normalize_long_row(const int64_t* koff, bool split) const;  // long_rows
  void run_outer();                                                // outer
  void run_outer_norm();                                           // outer_norm

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
  PointwiseKernel unstored_ir_;                   // its body (for its Params)
  const CpuPointwiseKernel* epilogue_ = nullptr;
  const RowPassKernel* passes_[static_cast<int>(Pass::kNumPasses)] = {};
  Tensor stats_;
  FusedGroup epi_group_;
};

}  // namespace kiln::jit::cpu::detail
