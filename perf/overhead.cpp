// Per-op eager overhead: a 1-element add through kiln's dispatcher and kernel,
// beside the same add through libtorch (Debian's libtorch 1.13), in one run;
// and the cost of recording one op in lazy mode (kiln only).
//
//   kiln-overhead [--iters N] [--json] [--case NAME]
//
// Each side runs N calls per repetition, 15 repetitions; the table shows the
// median ns per call and the ratio. Results are consumed (a running sum of one
// element) so nothing is optimized away. `--case` runs only the rows whose
// name starts with NAME. Instruction counts of the timed loops alone:
//   valgrind --tool=callgrind --collect-atstart=no kiln-overhead-kiln --case NAME
// then divide the total by 15 x N.
// Built without libtorch (kiln-overhead-kiln, KILN_OVERHEAD_NO_TORCH), the
// libtorch column is left out.

#ifndef KILN_OVERHEAD_NO_TORCH
#include <torch/torch.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/kiln.h"

// Under callgrind (--collect-atstart=no), only the timed loops are counted.
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define KILN_COUNT_BEGIN() CALLGRIND_TOGGLE_COLLECT
#define KILN_COUNT_END() CALLGRIND_TOGGLE_COLLECT
#else
#define KILN_COUNT_BEGIN()
#define KILN_COUNT_END()
#endif

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double median_ns_per_call(int iters, int reps, F&& body) {
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    KILN_COUNT_BEGIN();
    for (int i = 0; i < iters; ++i) body();
    KILN_COUNT_END();
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
  const char* only = "";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else if (!std::strcmp(argv[i], "--case") && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: kiln-overhead [--iters N] [--json] [--case NAME]\n");
      return 2;
    }
  }
  const int reps = 15;
  auto wanted = [&](const char* name) { return std::strncmp(name, only, std::strlen(only)) == 0; };
  float ksum = 0, tsum = 0;
  std::vector<Row> rows;
#ifndef KILN_OVERHEAD_NO_TORCH
  torch::set_num_threads(1);
  torch::InferenceMode inference;
  torch::Tensor ta = torch::full({1}, 1.0f), tb = torch::full({1}, 2.0f);
  torch::Tensor tout = torch::empty({1});
#define KILN_TORCH_NS(...) median_ns_per_call(iters, reps, [&] { __VA_ARGS__; })
#else
#define KILN_TORCH_NS(...) 0.0
#endif

  {
    // Eager rows: ops run at once through the CPU kernels.
    kiln::EagerGuard eager;
    kiln::Tensor ka = kiln::full({1}, 1.0f), kb = kiln::full({1}, 2.0f);
    kiln::Tensor kout = kiln::empty({1});
    // Warm both: first calls resolve op handles and fill allocator caches.
    for (int i = 0; i < 1000; ++i) {
      ksum += kiln::add(ka, kb).data_ptr<float>()[0];
#ifndef KILN_OVERHEAD_NO_TORCH
      tsum += torch::add(ta, tb).data_ptr<float>()[0];
#endif
    }
    if (wanted("add 1-elem (functional)")) {
      rows.push_back(
          {"add 1-elem (functional)",
           median_ns_per_call(iters, reps, [&] { ksum += kiln::add(ka, kb).data_ptr<float>()[0]; }),
           KILN_TORCH_NS(tsum += torch::add(ta, tb).data_ptr<float>()[0])});
    }
    if (wanted("add_ 1-elem (in place)")) {
      rows.push_back({"add_ 1-elem (in place)",
                      median_ns_per_call(iters, reps, [&] { kiln::add_(ka, kb); }),
                      KILN_TORCH_NS(ta.add_(tb))});
    }
    if (wanted("add.out 1-elem")) {
      rows.push_back({"add.out 1-elem",
                      median_ns_per_call(iters, reps, [&] { kiln::add_out(kout, ka, kb); }),
                      KILN_TORCH_NS(torch::add_out(tout, ta, tb))});
    }
    if (wanted("view [1] -> [1, 1]")) {
      rows.push_back({"view [1] -> [1, 1]",
                      median_ns_per_call(iters, reps,
                                         [&] {
                                           ksum += ka.view({1, 1}).dim();
                                         }),
                      KILN_TORCH_NS(tsum += ta.view({1, 1}).dim())});
    }
    ksum += ka.data_ptr<float>()[0] + kout.data_ptr<float>()[0];
  }
  {
    // Lazy mode: the cost of recording one op (its node, its output's geometry),
    // not of running the trace. Batches stay below the trace's size cap; the
    // flush after each batch is not timed (its nodes are dead and dropped).
    kiln::Tensor la = kiln::full({1}, 1.0f), lb = kiln::full({1}, 2.0f);
    kiln::Tensor lmask = kiln::full({1}, true, kiln::TensorOptions(kiln::kBool));
    kiln::sync();
    const int batch = 1024;
    auto record_ns = [&](auto&& op) {
      std::vector<double> samples;
      for (int r = 0; r < reps; ++r) {
        double total = 0;
        for (int done = 0; done < iters; done += batch) {
          const int n = std::min(batch, iters - done);
          auto t0 = Clock::now();
          KILN_COUNT_BEGIN();
          for (int i = 0; i < n; ++i) ksum += static_cast<float>(op().dim());
          KILN_COUNT_END();
          auto t1 = Clock::now();
          total += std::chrono::duration<double, std::nano>(t1 - t0).count();
          kiln::jit::flush();
        }
        samples.push_back(total / iters);
      }
      std::sort(samples.begin(), samples.end());
      return samples[samples.size() / 2];
    };
    for (int i = 0; i < 1000; ++i) ksum += static_cast<float>(kiln::add(la, lb).dim());
    kiln::jit::flush();
    if (wanted("record add (lazy)")) {
      rows.push_back({"record add (lazy)", record_ns([&] { return kiln::add(la, lb); }), 0.0});
    }
    if (wanted("record add 2.0 (lazy)")) {
      rows.push_back({"record add 2.0 (lazy)", record_ns([&] { return kiln::add(la, 2.0); }), 0.0});
    }
    if (wanted("record mul 0.5 (lazy)")) {
      rows.push_back({"record mul 0.5 (lazy)", record_ns([&] { return kiln::mul(la, 0.5); }), 0.0});
    }
    if (wanted("record gt 0 (lazy)")) {
      rows.push_back({"record gt 0 (lazy)", record_ns([&] { return kiln::gt(la, 0); }), 0.0});
    }
    if (wanted("record pow 2 (lazy)")) {
      rows.push_back({"record pow 2 (lazy)", record_ns([&] { return kiln::pow(la, 2); }), 0.0});
    }
    if (wanted("record masked_fill (lazy)")) {
      rows.push_back({"record masked_fill (lazy)",
                      record_ns([&] { return kiln::masked_fill(la, lmask, -1e4); }), 0.0});
    }
    if (wanted("record sigmoid (lazy)")) {
      rows.push_back({"record sigmoid (lazy)", record_ns([&] { return kiln::sigmoid(la); }), 0.0});
    }
  }
#ifndef KILN_OVERHEAD_NO_TORCH
  tsum += ta.data_ptr<float>()[0] + tout.data_ptr<float>()[0];
  const char* torch_version = TORCH_VERSION;
#else
  const char* torch_version = "not linked";
#endif

  if (json) {
    for (const Row& r : rows) {
      std::printf(
          "{\"bench\":\"overhead\",\"case\":\"%s\",\"kiln_ns\":%.1f,\"libtorch_ns\":%.1f,"
          "\"ratio\":%.3f}\n",
          r.name, r.kiln_ns, r.torch_ns, r.torch_ns > 0 ? r.kiln_ns / r.torch_ns : 0.0);
    }
  } else {
    std::printf("per-op overhead, median of %d x %d calls, 1 thread (libtorch %s)\n", reps, iters,
                torch_version);
    std::printf("%-28s %12s %12s %10s\n", "case", "kiln ns", "libtorch ns", "kiln/torch");
    for (const Row& r : rows) {
      if (r.torch_ns > 0) {
        std::printf("%-28s %12.1f %12.1f %10.3f\n", r.name, r.kiln_ns, r.torch_ns,
                    r.kiln_ns / r.torch_ns);
      } else {
        std::printf("%-28s %12.1f %12s %10s\n", r.name, r.kiln_ns, "-", "-");
      }
    }
  }
  // Keep the sums observable.
  if (ksum == -1.0f || tsum == -1.0f) std::printf("%f %f\n", ksum, tsum);
  return 0;
}
