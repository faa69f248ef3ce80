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

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cmath>
#include <limits>

#include "jit/codegen_cpu/reduce_cpu_impl.h"

namespace kiln::jit::cpu::detail {

// `split`: pieces run across workers (else in order on this one).
void ReductionRun::normalize_long_row(const int64_t* koff, bool split) const {
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
      last_sweep(Pass::kAffine, src, static_cast<float>(1.0 / std::sqrt(total() / count + r_.eps)),
                 0);
      break;
    }
    default:
      KILN_INTERNAL_ASSERT(false, "not a row normalization");
  }
}

}  // namespace kiln::jit::cpu::detail
