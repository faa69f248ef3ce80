// Note [Outer normalizations]
// softmax / log_softmax over a dim that is not the innermost one (dim 0 of
// [T, C], dim 1 of [B, H, T]) where the last kept dim is dense for every
// operand: a block of up to kOuterWidth neighbouring kept positions is
// normalized at once, lanes across the block, in three sweeps over the
// reduced positions (the running max, the float64 sum of exp(x - max), then
// exp(x - max) / sum or (x - max) - log(sum) into the epilogue), the
// prologue re-run per sweep (Note [Storing prologues]). Blocks are narrowed
// so that every worker gets one.

#include <tbb/task_arena.h>

#include <cmath>
#include <limits>

#include "jit/codegen_cpu/reduce_cpu_impl.h"

namespace kiln::jit::cpu::detail {

void ReductionRun::run_outer_norm() {
  load_passes();
  if (rows_ == 0 || row_len_ == 0) return;
  // Narrower blocks where there are few: every worker gets one.
  const int64_t width_all = r_.in_shape[kept_.back()];
  const int workers = std::max(1, tbb::this_task_arena::max_concurrency());
  int64_t width = (width_all + workers - 1) / workers;
  width = (width + lanes_ - 1) / lanes_ * lanes_;
  width = std::min({std::max<int64_t>(width, 4 * lanes_), kOuterWidth, width_all});
  const OuterBlocks b = outer_blocks(width);
  const int64_t n = row_len_;
  const int in = direct_input(true), out = direct_output(true);
  const bool softmax = r_.op == RowOp::Softmax;
  auto body = [&](int64_t ub, int64_t ue) {
    std::vector<int64_t> koff(ops_.size()), roff(ops_.size());
    std::vector<float> xbuf(width), ybuf(width), mx(width), c(width);
    std::vector<double> total(width);
    for (int64_t u = ub; u < ue; ++u) {
      const int64_t w = block_offsets(b, u, koff.data());
      const int64_t full = w / lanes_ * lanes_;
      // The prologue's values at reduced position `pos` (roff: its offsets).
      // Only the last sweep stores (Note [Storing prologues]).
      auto values = [&](int64_t pos, bool store) -> const float* {
        reduced_offsets(b, pos, koff.data(), roff.data());
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
  run_units(b.units, n * width, body);
}

}  // namespace kiln::jit::cpu::detail
