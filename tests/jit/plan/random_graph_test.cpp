// Random fused graphs: random programs of pointwise ops, reductions and row
// normalizations over broadcast,
// non-contiguous, mixed-dtype inputs, run eagerly and lazily (traced, fused,
// compiled) and compared. A failure prints the seed and the program.
//   KILN_RANDOM_GRAPHS=N   runs N graphs (default 1000)
//   KILN_RANDOM_GRAPH_SEED=S  replays one graph

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>

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

TEST(RandomGraphs, LazyFusedMatchesEager) {
  int count = 1000;
  uint64_t first = 1;
  if (const char* n = std::getenv("KILN_RANDOM_GRAPHS")) count = std::atoi(n);
  if (const char* s = std::getenv("KILN_RANDOM_GRAPH_SEED")) {
    first = std::strtoull(s, nullptr, 10);
    count = 1;
  }
  int64_t compiled_before = kiln::jit::cpu::cpu_kernels_compiled();
  int64_t reductions_before = kiln::jit::cpu::cpu_reductions_run();
  int64_t refused_before = kiln::jit::cpu::cpu_pointwise_groups_refused();
  int64_t reductions_refused_before = kiln::jit::cpu::cpu_reductions_refused();
  int failures = 0;
  for (uint64_t seed = first; seed < first + static_cast<uint64_t>(count); ++seed) {
    Program p(seed);
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
      "%d random graphs; %lld CPU kernels compiled; %lld reduction groups ran fused; refused: "
      "%lld pointwise groups, %lld reduction groups\n",
      count, static_cast<long long>(compiled), static_cast<long long>(reductions),
      static_cast<long long>(refused), static_cast<long long>(reductions_refused));
  // Strided outputs and softmax over any dim run fused (KILN_LOGS=fusion names a refusal).
  EXPECT_EQ(refused, 0);
  EXPECT_EQ(reductions_refused, 0);
  EXPECT_GT(compiled, count / 10);
  if (count >= 100) {
    EXPECT_GT(reductions, count / 4);
  }
}

// The same programs with their inputs on CUDA: groups run as generated CUDA
// kernels (pointwise and reduction groups), compared with eager CPU.
TEST(RandomGraphs, CudaFusedMatchesEagerCpu) {
  KILN_REQUIRE_CUDA();
  int count = 300;
  uint64_t first = 1;
  if (const char* n = std::getenv("KILN_RANDOM_GRAPHS")) count = std::atoi(n);
  if (const char* s = std::getenv("KILN_RANDOM_GRAPH_SEED")) {
    first = std::strtoull(s, nullptr, 10);
    count = 1;
  }
  const auto launches_before = kiln::jit::cuda::cuda_kernel_stats().launches;
  const int64_t reductions_before = kiln::jit::cuda::cuda_reductions_run();
  int failures = 0;
  for (uint64_t seed = first; seed < first + static_cast<uint64_t>(count); ++seed) {
    Program cpu(seed), gpu(seed, kiln::Device::cuda());
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
      "%d random graphs on CUDA; %lld generated kernel launches, of which %lld fused "
      "reduction groups (the rest pointwise groups and op kernels)\n",
      count, static_cast<long long>(launches), static_cast<long long>(reductions));
  EXPECT_GT(launches, count / 2);
  if (count >= 100) {
    EXPECT_GT(reductions, count / 4);
  }
}

}  // namespace
