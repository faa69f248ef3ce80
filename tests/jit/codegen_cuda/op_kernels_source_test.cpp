// Every generated op kernel source compiles to SASS with NVRTC. This needs the
// toolkit, not a GPU, so CI checks it on every run.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "jit/codegen_cuda/nvrtc.h"
#include "jit/codegen_cuda/op_kernels/op_sources.h"
#include "runtime/cuda/cuda_runtime.h"

namespace {

namespace kc = kiln::jit::cuda;

class CudaOpsSource : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kiln::cuda::built()) GTEST_SKIP() << "kiln was built without the CUDA toolkit (no NVRTC)";
  }
};

// Every sample for sm_90, every tenth also for sm_80; compiles run on all
// cores (NVRTC is thread-safe), which keeps this within CI's time.
TEST_F(CudaOpsSource, EveryOpKernelCompilesForHopperAndAmpere) {
  const kc::NamedSources sources = kc::op_source_samples();
  ASSERT_GT(sources.size(), 50u);
  struct Job {
    size_t source;
    int arch;
  };
  std::vector<Job> jobs;
  for (size_t i = 0; i < sources.size(); ++i) {
    jobs.push_back({i, 90});
    if (i % 10 == 0) jobs.push_back({i, 80});
  }
  std::vector<std::string> failures(jobs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t j; (j = next.fetch_add(1)) < jobs.size();) {
      const auto& [name, src] = sources[jobs[j].source];
      try {
        kc::CompiledKernel ck = kc::nvrtc_compile(src, name, jobs[j].arch);
        if (ck.is_ptx || ck.image.size() <= 1000u) failures[j] = "no SASS image";
      } catch (const kiln::Error& e) {
        failures[j] = e.what() + std::string("\nsource:\n") + src;
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t) {
    threads.emplace_back(work);
  }
  for (std::thread& t : threads) t.join();
  for (size_t j = 0; j < jobs.size(); ++j) {
    EXPECT_TRUE(failures[j].empty())
        << sources[jobs[j].source].first << " sm_" << jobs[j].arch << ": " << failures[j];
  }
}

TEST_F(CudaOpsSource, NamesIdentifySources) {
  // A name is the memory-cache key (Note [Kernel loader]): one name, one source.
  std::map<std::string, std::string> seen;
  for (const auto& [name, src] : kc::op_source_samples()) {
    auto [it, fresh] = seen.emplace(name, src);
    EXPECT_TRUE(fresh || it->second == src) << "two sources named " << name;
    EXPECT_NE(src.find("void __launch_bounds__"), std::string::npos) << name;
    EXPECT_NE(src.find(name + "("), std::string::npos) << name;
  }
}

// Note [Early launch]: a kernel launched early waits for the kernels before it
// (kiln_grid_enter) before it can return; only prefetches may come first.
TEST_F(CudaOpsSource, EveryKernelWaitsForTheOneBeforeBeforeItCanReturn) {
  for (const auto& [name, src] : kc::op_source_samples()) {
    const size_t body = src.find(name + "(");
    ASSERT_NE(body, std::string::npos) << name;
    const size_t enter = src.find("kiln_grid_enter();", body);
    ASSERT_NE(enter, std::string::npos) << name << " never calls kiln_grid_enter()";
    const std::string before = src.substr(body, enter - body);
    EXPECT_EQ(before.find("return"), std::string::npos) << name;
    EXPECT_EQ(before.find("atomic"), std::string::npos) << name;
    // Statements before the wait, if any, are prefetches and pointer
    // arithmetic; the decode attention also reads its position once, with a
    // relaxed load that only picks the lines it prefetches (Note [Decode
    // cache prefetched early]).
    const bool reads_position =
        name.rfind("kiln_attn_dec_", 0) == 0 && name.find("_np") == std::string::npos;
    if (reads_position) {
      EXPECT_NE(before.find("ld.relaxed.gpu.global.s64"), std::string::npos) << name;
      EXPECT_NE(before.find("prefetch.global.L2"), std::string::npos) << name;
    }
    size_t loads = 0;
    for (size_t at = before.find("ld."); at != std::string::npos; at = before.find("ld.", at + 1)) {
      ++loads;
    }
    EXPECT_EQ(loads, reads_position ? 1u : 0u) << name << " loads before kiln_grid_enter():\n"
                                               << before;
  }
}

}  // namespace
