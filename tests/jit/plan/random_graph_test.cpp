// Random fused graphs: random programs of pointwise ops, reductions and row
// normalizations over broadcast,
// non-contiguous, mixed-dtype inputs, run eagerly and lazily (traced, fused,
// compiled) and compared, with small sizes and wide ones (a long innermost
// dim: random_program.h). A failure prints the seed and the program.
//   KILN_RANDOM_GRAPHS=N   runs N graphs (default 1000 small, 150 wide)
//   KILN_RANDOM_GRAPH_FIRST=S  starts from seed S (default 1)
//   KILN_RANDOM_GRAPH_SEED=S  replays one graph

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <utility>

#include "jit/codegen_cpu/launch_cpu.h"
#include "jit/codegen_cpu/reduce_cpu.h"
#include "jit/codegen_cuda/launch_cuda.h"
#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/random_program.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

using kiln::testing::Program;

kiln::testing::Tolerance tolerance(kiln::DType t) {
  return kiln::testing::program_tolerance(t);
}

// How many programs from which seed: `count` from 1 unless the environment says.
std::pair<int, uint64_t> programs(int count) {
  const auto [first, n] = kiln::testing::seeds_from_env("KILN_RANDOM_GRAPH", 1, count);
  return {n, first};
}

// Runs `count` programs eagerly and lazily on the CPU and compares them.
void lazy_fused_matches_eager(int count, uint64_t first, bool wide) {
  int64_t compiled_before = kiln::jit::cpu::cpu_kernels_compiled();
  int64_t reductions_before = kiln::jit::cpu::cpu_reductions_run();
  int64_t refused_before = kiln::jit::cpu::cpu_pointwise_groups_refused();
  int64_t reductions_refused_before = kiln::jit::cpu::cpu_reductions_refused();
  int failures = 0;
  for (uint64_t seed = first; seed < first + static_cast<uint64_t>(count); ++seed) {
    Program p(seed, kiln::Device::cpu(), wide);
    p.generate();
    std::string text;
    std::vector<Tensor> eager, lazy;
    try {
      {
        kiln::EagerGuard g;
        eager = p.run(&text);
      }
      lazy = p.run(&text);
      kiln::sync();
    } catch (const kiln::Error& e) {
      ADD_FAILURE() << "seed " << seed << " raised: " << e.what() << "\nprogram:\n" << text;
      if (++failures > 5) break;
      continue;
    }
    for (size_t i = 0; i < eager.size(); ++i) {
      std::string msg = kiln::testing::compare(lazy[i], eager[i], tolerance(p.loosest()));
      if (!msg.empty()) {
        ADD_FAILURE() << "seed " << seed << " output " << i << ": " << msg << "\nprogram:\n"
                      << text << "replay: KILN_RANDOM_GRAPH_SEED=" << seed;
        if (++failures > 5) return;
      }
    }
  }
  // The graphs really went through generated kernels.
  int64_t compiled = kiln::jit::cpu::cpu_kernels_compiled() - compiled_before;
  int64_t reductions = kiln::jit::cpu::cpu_reductions_run() - reductions_before;
  int64_t refused = kiln::jit::cpu::cpu_pointwise_groups_refused() - refused_before;
  int64_t reductions_refused = kiln::jit::cpu::cpu_reductions_refused() - reductions_refused_before;
  std::printf(
      "%d random graphs%s; %lld CPU kernels compiled; %lld reduction groups ran fused; refused: "
      "%lld pointwise groups, %lld reduction groups\n",
      count, wide ? " (wide)" : "", static_cast<long long>(compiled),
      static_cast<long long>(reductions), static_cast<long long>(refused),
      static_cast<long long>(reductions_refused));
  // Strided outputs and softmax over any dim run fused (KILN_LOGS=fusion names a refusal).
  EXPECT_EQ(refused, 0);
  EXPECT_EQ(reductions_refused, 0);
  EXPECT_GT(compiled, count / 10);
  if (count >= 100) {
    EXPECT_GT(reductions, count / 4);
  }
}

TEST(RandomGraphs, LazyFusedMatchesEager) {
  const auto [count, first] = programs(1000);
  lazy_fused_matches_eager(count, first, false);
}

// Long rows: vector bodies and their tails, rows held in registers in
// several runs per lane, rows past the on-chip limit.
TEST(RandomGraphs, WideLazyFusedMatchesEager) {
  const auto [count, first] = programs(150);
  lazy_fused_matches_eager(count, first, true);
}

// The same programs with their inputs on CUDA: groups run as generated CUDA
// kernels (pointwise and reduction groups), compared with eager CPU.
void cuda_fused_matches_eager_cpu(int count, uint64_t first, bool wide) {
  const auto launches_before = kiln::jit::cuda::cuda_kernel_stats().launches;
  const int64_t reductions_before = kiln::jit::cuda::cuda_reductions_run();
  int failures = 0;
  for (uint64_t seed = first; seed < first + static_cast<uint64_t>(count); ++seed) {
    Program cpu(seed, kiln::Device::cpu(), wide), gpu(seed, kiln::Device::cuda(), wide);
    cpu.generate();
    gpu.generate();
    std::string text;
    std::vector<Tensor> eager, lazy;
    try {
      {
        kiln::EagerGuard g;
        eager = cpu.run(&text);
      }
      lazy = gpu.run(&text);
      for (Tensor& t : lazy) t = t.cpu();
      kiln::sync();
    } catch (const kiln::Error& e) {
      ADD_FAILURE() << "seed " << seed << " raised: " << e.what() << "\nprogram:\n" << text;
      if (++failures > 5) break;
      continue;
    }
    for (size_t i = 0; i < eager.size(); ++i) {
      kiln::testing::Tolerance tol = tolerance(gpu.loosest());
      tol.rtol *= 2;  // CUDA math library vs kiln's CPU vector math
      std::string msg = kiln::testing::compare(lazy[i], eager[i], tol);
      if (!msg.empty()) {
        ADD_FAILURE() << "seed " << seed << " output " << i << ": " << msg << "\nprogram:\n"
                      << text << "replay: KILN_RANDOM_GRAPH_SEED=" << seed;
        if (++failures > 5) return;
      }
    }
  }
  const int64_t launches = kiln::jit::cuda::cuda_kernel_stats().launches - launches_before;
  const int64_t reductions = kiln::jit::cuda::cuda_reductions_run() - reductions_before;
  std::printf(
      "%d random graphs%s on CUDA; %lld generated kernel launches, of which %lld fused "
      "reduction groups (the rest pointwise groups and op kernels)\n",
      count, wide ? " (wide)" : "", static_cast<long long>(launches),
      static_cast<long long>(reductions));
  EXPECT_GT(launches, count / 2);
  if (count >= 100) {
    EXPECT_GT(reductions, count / 4);
  }
}

TEST(RandomGraphs, CudaFusedMatchesEagerCpu) {
  KILN_REQUIRE_CUDA();
  const auto [count, first] = programs(300);
  cuda_fused_matches_eager_cpu(count, first, false);
}

TEST(RandomGraphs, WideCudaFusedMatchesEagerCpu) {
  KILN_REQUIRE_CUDA();
  const auto [count, first] = programs(150);
  cuda_fused_matches_eager_cpu(count, first, true);
}

}  // namespace
