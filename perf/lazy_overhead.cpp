// kiln-lazy-overhead: host cost per call of a small GPT-2 in lazy vs eager mode.
//
// The model is tiny (n_layer 2, d_model 64, T 8) so that the kernels are cheap
// and the count is dominated by recording, passes and dispatch: run under
//   valgrind --tool=callgrind kiln-lazy-overhead --mode lazy --iters 10
// The measured calls are dumped on their own (callgrind.out.PID.1, "measured
// calls"): divide by --iters, and by the nodes per call printed, for
// instructions per node.
#include <cstdio>
#include <cstring>
#include <string>

#include "kiln/kiln.h"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define KILN_COUNT_BEGIN() CALLGRIND_ZERO_STATS
#define KILN_COUNT_END() CALLGRIND_DUMP_STATS_AT("measured calls")
#else
#define KILN_COUNT_BEGIN() ((void)0)
#define KILN_COUNT_END() ((void)0)
#endif

int main(int argc, char** argv) {
  std::string mode = "lazy";
  int iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mode")) mode = argv[i + 1];
    if (!std::strcmp(argv[i], "--iters")) iters = std::stoi(argv[i + 1]);
  }
  kiln::nn::GPT2Config cfg;
  cfg.n_layer = 2;
  cfg.d_model = 64;
  cfg.n_head = 4;
  cfg.vocab = 128;
  cfg.n_positions = 16;
  kiln::Tensor h;
  kiln::nn::GPT2 model = [&] {
    kiln::EagerGuard setup;
    kiln::manual_seed(0);
    h = kiln::randn({1, 8, cfg.d_model}) * 0.5;
    return kiln::nn::GPT2::random(cfg, kiln::kFloat32, kiln::Device::cpu(), 0);
  }();
  auto step = [&] {
    kiln::Tensor out = model.forward_hidden(h);
    kiln::sync();
    return out;
  };
  auto run = [&] {
    for (int i = 0; i < 5; ++i) step();  // warm-up: kernels compiled, caches filled
    auto s0 = kiln::jit::trace_stats();
    KILN_COUNT_BEGIN();
    for (int i = 0; i < iters; ++i) step();
    KILN_COUNT_END();
    auto s1 = kiln::jit::trace_stats();
    std::printf("mode %s iters %d recorded/call %lld nodes/call %lld\n", mode.c_str(), iters,
                static_cast<long long>((s1.recorded_ops - s0.recorded_ops) / iters),
                static_cast<long long>((s1.executed_nodes - s0.executed_nodes) / iters));
  };
  if (mode == "eager") {
    kiln::EagerGuard eager;
    run();
  } else {
    run();
  }
  return 0;
}
