// The inner schedule (Note [Reduction schedules]): rows reduced with the
// reduced run innermost, a statistic's row in chunks of kChunk whose partial
// results combine in float64, a normalization's row through a float32 copy
// when the prologue or epilogue is more than a load or a store. Rows of
// kLongRow elements or more go to reduce_cpu_long_rows.cpp.

#include <tbb/task_arena.h>

#include <cmath>
#include <limits>

#include "jit/codegen_cpu/reduce_cpu_impl.h"

namespace kiln::jit::cpu::detail {

void ReductionRun::run_inner() {
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

void ReductionRun::normalize_row(const int64_t* koff, int64_t* roff,
                                 std::vector<float>* scratch) const {
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
      double sq =
          wide(Pass::kSqDev, src, nullptr, n, c) - static_cast<double>(n) * (mean - c) * (mean - c);
      const float rstd =
          static_cast<float>(1.0 / std::sqrt(std::max(sq, 0.0) / static_cast<double>(n) + r_.eps));
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

float ReductionRun::static_row(const int64_t* koff, int64_t* roff,
                               std::vector<float>* scratch) const {
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
    default: {
      const double var = std::max(m2, 0.0) / var_divisor(n, r_.correction);
      return static_cast<float>(r_.sqrt_result ? std::sqrt(var) : var);
    }
  }
}

}  // namespace kiln::jit::cpu::detail
