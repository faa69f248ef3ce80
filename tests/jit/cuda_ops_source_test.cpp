// Every generated op kernel source compiles to SASS for sm_90 and sm_80 with
// NVRTC. This needs the toolkit, not a GPU, so CI checks it on every run.

#include <gtest/gtest.h>

#include <set>

#include "jit/codegen_cuda/nvrtc.h"
#include "jit/codegen_cuda/ops/op_sources.h"
#include "runtime/cuda/cuda_runtime.h"

namespace {

namespace kc = kiln::jit::cuda;

class CudaOpsSource : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kiln::cuda::built()) GTEST_SKIP() << "kiln was built without the CUDA toolkit (no NVRTC)";
  }
};

TEST_F(CudaOpsSource, EveryOpKernelCompilesForHopperAndAmpere) {
  const kc::NamedSources sources = kc::op_source_samples();
  ASSERT_GT(sources.size(), 50u);
  int compiled = 0;
  for (const auto& [name, src] : sources) {
    for (int arch : {90, 80}) {
      kc::CompiledKernel ck;
      ASSERT_NO_THROW(ck = kc::nvrtc_compile(src, name, arch)) << name << ":\n" << src;
      EXPECT_FALSE(ck.is_ptx);
      EXPECT_GT(ck.image.size(), 1000u) << name;
      ++compiled;
    }
  }
  EXPECT_EQ(compiled, static_cast<int>(2 * sources.size()));
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

}  // namespace
