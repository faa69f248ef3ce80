// What recording costs per op: a 1-element eager add and one recorded lazy
// add, with no profile, with a Profile recording, and recording input shapes.
//
//   kiln-profiler-overhead [--iters N]
//
// Median ns per call of 15 repetitions of N calls. A Profile keeps every
// event, so each recorded repetition starts a fresh one (not timed). For
// instruction counts of the unprofiled path see kiln-overhead-kiln (the
// dispatcher's hook, Note [Dispatch observers]).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/profiler.h"

namespace {

using Clock = std::chrono::steady_clock;

enum class Recording { Off, On, Shapes };

// `after` runs after each repetition, untimed.
template <class F, class G>
double median_ns(int iters, Recording rec, F&& body, G&& after) {
  std::vector<double> samples;
  for (int r = 0; r < 15; ++r) {
    std::unique_ptr<kiln::profiler::Profile> prof;
    if (rec != Recording::Off) {
      prof = std::make_unique<kiln::profiler::Profile>(
          kiln::profiler::Options{.record_shapes = rec == Recording::Shapes});
    }
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) body();
    auto t1 = Clock::now();
    samples.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / iters);
    after();
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20000;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: kiln-profiler-overhead [--iters N]\n");
      return 2;
    }
  }
  float sum = 0;
  std::printf("per-op cost of profiling, median of 15 x %d calls, 1 thread\n", iters);
  std::printf("%-24s %12s %12s %12s\n", "case", "off ns", "on ns", "shapes ns");
  {
    kiln::EagerGuard eager;
    kiln::Tensor a = kiln::full({1}, 1.0f), b = kiln::full({1}, 2.0f);
    for (int i = 0; i < 1000; ++i) sum += kiln::add(a, b).data_ptr<float>()[0];
    double ns[3];
    for (Recording rec : {Recording::Off, Recording::On, Recording::Shapes}) {
      ns[static_cast<int>(rec)] = median_ns(
          iters, rec, [&] { sum += kiln::add(a, b).data_ptr<float>()[0]; }, [] {});
    }
    std::printf("%-24s %12.1f %12.1f %12.1f\n", "add 1-elem (eager)", ns[0], ns[1], ns[2]);
  }
  {
    kiln::Tensor a = kiln::full({1}, 1.0f), b = kiln::full({1}, 2.0f);
    kiln::sync();
    const int batch = std::min(iters, 1024);  // below the trace's size cap: flushed after each
    double ns[3];
    for (Recording rec : {Recording::Off, Recording::On, Recording::Shapes}) {
      ns[static_cast<int>(rec)] = median_ns(
          batch, rec, [&] { sum += static_cast<float>(kiln::add(a, b).dim()); },
          [] { kiln::jit::flush(); });
    }
    std::printf("%-24s %12.1f %12.1f %12.1f\n", "record add (lazy)", ns[0], ns[1], ns[2]);
  }
  if (sum == -1.0f) std::printf("%f\n", sum);
  return 0;
}
