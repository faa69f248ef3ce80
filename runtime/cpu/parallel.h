#pragma once

// TBB-parallel loops over index ranges, serial below a grain size.

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cstdint>

namespace kiln::cpu {

constexpr int64_t kDefaultGrain = 32768;

// Calls f(begin, end) over [0, n) in chunks of at least `grain` indices.
template <class F>
void parallel_range(int64_t n, F&& f, int64_t grain = kDefaultGrain) {
  if (n <= 0) return;
  if (n < 2 * grain) {
    f(int64_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) { f(r.begin(), r.end()); });
}

}  // namespace kiln::cpu
