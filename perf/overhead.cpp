// Per-op eager overhead: a 1-element add through kiln's dispatcher and kernel,
// beside the same add through libtorch (Debian's libtorch 1.13), in one run.
//
//   kiln-overhead [--iters N] [--json]
//
// Each side runs N calls per repetition, 15 repetitions; the table shows the
// median ns per call and the ratio. Results are consumed (a running sum of one
// element) so nothing is optimized away.

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double median_ns_per_call(int iters, int reps, F&& body) {
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) body();
    auto t1 = Clock::now();
    samples.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / iters);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

struct Row {
  const char* name;
  double kiln_ns;
  double torch_ns;
};

}  // namespace

int main(int argc, char** argv) {
  int iters = 200000;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else {
      std::fprintf(stderr, "usage: kiln-overhead [--iters N] [--json]\n");
      return 2;
    }
  }
  const int reps = 15;
  torch::set_num_threads(1);
  torch::InferenceMode inference;

  kiln::Tensor ka = kiln::full({1}, 1.0f), kb = kiln::full({1}, 2.0f);
  torch::Tensor ta = torch::full({1}, 1.0f), tb = torch::full({1}, 2.0f);
  float ksum = 0, tsum = 0;

  std::vector<Row> rows;
  // Warm both: first calls resolve op handles and fill allocator caches.
  for (int i = 0; i < 1000; ++i) {
    ksum += kiln::add(ka, kb).data_ptr<float>()[0];
    tsum += torch::add(ta, tb).data_ptr<float>()[0];
  }
  rows.push_back(
      {"add 1-elem (functional)",
       median_ns_per_call(iters, reps, [&] { ksum += kiln::add(ka, kb).data_ptr<float>()[0]; }),
       median_ns_per_call(iters, reps, [&] { tsum += torch::add(ta, tb).data_ptr<float>()[0]; })});
  rows.push_back({"add_ 1-elem (in place)",
                  median_ns_per_call(iters, reps, [&] { kiln::add_(ka, kb); }),
                  median_ns_per_call(iters, reps, [&] { ta.add_(tb); })});
  kiln::Tensor kout = kiln::empty({1});
  torch::Tensor tout = torch::empty({1});
  rows.push_back({"add.out 1-elem",
                  median_ns_per_call(iters, reps, [&] { kiln::add_out(kout, ka, kb); }),
                  median_ns_per_call(iters, reps, [&] { torch::add_out(tout, ta, tb); })});
  rows.push_back({"view [1] -> [1, 1]",
                  median_ns_per_call(iters, reps,
                                     [&] {
                                       ksum += ka.view({1, 1}).dim();
                                     }),
                  median_ns_per_call(iters, reps, [&] {
                    tsum += ta.view({1, 1}).dim();
                  })});
  ksum += ka.data_ptr<float>()[0] + kout.data_ptr<float>()[0];
  tsum += ta.data_ptr<float>()[0] + tout.data_ptr<float>()[0];

  if (json) {
    for (const Row& r : rows) {
      std::printf(
          "{\"bench\":\"overhead\",\"case\":\"%s\",\"kiln_ns\":%.1f,\"libtorch_ns\":%.1f,"
          "\"ratio\":%.3f}\n",
          r.name, r.kiln_ns, r.torch_ns, r.kiln_ns / r.torch_ns);
    }
  } else {
    std::printf("per-op eager overhead, median of %d x %d calls, 1 thread (libtorch %s)\n", reps,
                iters, TORCH_VERSION);
    std::printf("%-28s %12s %12s %10s\n", "case", "kiln ns", "libtorch ns", "kiln/torch");
    for (const Row& r : rows) {
      std::printf("%-28s %12.1f %12.1f %10.3f\n", r.name, r.kiln_ns, r.torch_ns,
                  r.kiln_ns / r.torch_ns);
    }
  }
  // Keep the sums observable.
  if (ksum == -1.0f || tsum == -1.0f) std::printf("%f %f\n", ksum, tsum);
  return 0;
}
