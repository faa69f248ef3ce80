// The outer schedule of statistics (Note [Reduction schedules]): blocks of
// up to kOuterWidth neighbouring results accumulate together, one reduced
// position at a time; sums in float64, var as sum then squared deviations
// from the mean (Note [Storing prologues]).

#include <cmath>
#include <limits>

#include "jit/codegen_cpu/reduce_cpu_impl.h"

namespace kiln::jit::cpu::detail {

void ReductionRun::run_outer() {
  load_passes();
  const int64_t width = std::min(kOuterWidth, r_.in_shape[kept_.back()]);
  const OuterBlocks b = outer_blocks(width);
  const int64_t n = row_len_;
  auto body = [&](int64_t ub, int64_t ue) {
    std::vector<int64_t> koff(ops_.size()), roff(ops_.size());
    std::vector<float> scratch(width), acc(width), meanf(width);
    std::vector<double> total(width), mean(width);
    for (int64_t u = ub; u < ue; ++u) {
      const int64_t w = block_offsets(b, u, koff.data());
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
          reduced_offsets(b, pos, koff.data(), roff.data());
          prologue(roff.data(), 0, w, scratch.data(), store);
          if (!sums) {
            pass(p, scratch.data(), acc.data(), w, 0, 0, nullptr, z);
            continue;
          }
          // Sums accumulate in float64 (`total`); the tail past full vectors here.
          pass(p, scratch.data(), total.data(), full, 0, 0, nullptr, z);
          for (int64_t j = full; j < w; ++j) {
            if (p == Pass::kAccSqDev) {
              const double d = scratch[j] - z[j];  // squared in float64, as the pass does
              total[j] += d * d;
            } else {
              total[j] += scratch[j];
            }
          }
        }
      };
      float* out = stats_.data_ptr<float>() + b.first(u);
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
          const double div = var_divisor(n, r_.correction);
          for (int64_t j = 0; j < w; ++j) {
            const double d = mean[j] - meanf[j];
            const double var = std::max(total[j] - static_cast<double>(n) * d * d, 0.0) / div;
            out[j] = static_cast<float>(r_.sqrt_result ? std::sqrt(var) : var);
          }
        }
      }
    }
  };
  run_units(b.units, n * width, body);
}

}  // namespace kiln::jit::cpu::detail
