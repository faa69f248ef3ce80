// kiln-norm-rows: the CPU normalization schedules that have a path of their
// own (Note [Outer normalizations], [Long rows], [Storing prologues] in
// jit/codegen_cpu/reduce_cpu.cpp), eager against lazy, float32.
//
//   kiln-norm-rows [--runs N]
//
// Each row: the fastest of N calls (default 20) in each mode, a lazy call
// including the kiln::sync() that runs its trace; and how many reduction
// groups the lazy calls ran fused (0 would mean the rows ran node by node).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "jit/codegen_cpu/reduce_cpu.h"
#include "kiln/kiln.h"

namespace {

using kiln::Tensor;

double fastest_us(int runs, const std::function<void()>& f) {
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(
        best,
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: kiln-norm-rows [--runs N]\n");
      return 2;
    }
  }
  const int64_t n = int64_t{1} << 20;
  Tensor square, row;
  {
    kiln::EagerGuard g;
    kiln::manual_seed(1);
    square = kiln::randn({1024, 1024});
    row = kiln::randn({1, n});
  }
  struct Case {
    const char* name;
    std::function<Tensor()> op;
  };
  const Case cases[] = {
      {"softmax dim 0 [1024, 1024]", [&] { return kiln::softmax(square, 0); }},
      {"softmax one row [1, 1<<20]", [&] { return kiln::softmax(row, 1); }},
      {"layer_norm one row [1, 1<<20]", [&] { return kiln::layer_norm(row, {n}); }},
      {"rms_norm one row [1, 1<<20]", [&] { return kiln::rms_norm(row, {n}); }},
      {"h = a*2+1; softmax(h, 0) + h [1024, 1024]",
       [&] {
         Tensor h = square * 2.0 + 1.0;
         return kiln::softmax(h, 0) + h;
       }},
  };
  std::printf("kiln-norm-rows on cpu (%s), float32, fastest of %d calls\n", kiln::cpu_isa(), runs);
  std::printf("%-44s %12s %12s %8s %8s\n", "case", "eager us", "lazy us", "ratio", "fused");
  for (const Case& c : cases) {
    const double eager = fastest_us(runs, [&] {
      kiln::EagerGuard g;
      c.op();
    });
    const int64_t before = kiln::jit::cpu::cpu_reductions_run();
    const double lazy = fastest_us(runs, [&] {
      Tensor r = c.op();
      kiln::sync();
    });
    std::printf("%-44s %12.1f %12.1f %7.2fx %8lld\n", c.name, eager, lazy, eager / lazy,
                static_cast<long long>(kiln::jit::cpu::cpu_reductions_run() - before));
  }
  return 0;
}
