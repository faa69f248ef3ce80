#include "runtime/core/cpu_isa.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kiln/info.h"
#include "tests/support/testing.h"

namespace kiln {
namespace {

using testing::ChildRun;
using testing::run_test_in_child;

CpuFeatures avx2_features() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = f.bmi2 = true;
  return f;
}

CpuFeatures avx512_features() {
  CpuFeatures f = avx2_features();
  f.avx512f = f.avx512bw = f.avx512dq = f.avx512vl = true;
  return f;
}

TEST(CpuIsa, WidestTheFeaturesAllow) {
  EXPECT_EQ(choose_cpu_isa(avx512_features(), ""), CpuIsa::kAvx512);
  EXPECT_EQ(choose_cpu_isa(avx2_features(), ""), CpuIsa::kAvx2);
  EXPECT_EQ(choose_cpu_isa(CpuFeatures{}, ""), CpuIsa::kScalar);
  // AVX-512F alone is not enough for the code generator (Note [CPU ISA choice]).
  CpuFeatures f_only = avx2_features();
  f_only.avx512f = true;
  EXPECT_EQ(choose_cpu_isa(f_only, ""), CpuIsa::kAvx2);
  CpuFeatures no_f16c = avx2_features();
  no_f16c.f16c = false;
  EXPECT_EQ(choose_cpu_isa(no_f16c, ""), CpuIsa::kScalar);
}

TEST(CpuIsa, KilnCpuIsaIsHonouredAndChecked) {
  EXPECT_EQ(choose_cpu_isa(avx512_features(), "avx2"), CpuIsa::kAvx2);
  EXPECT_EQ(choose_cpu_isa(avx512_features(), "avx512"), CpuIsa::kAvx512);
  EXPECT_KILN_ERROR(choose_cpu_isa(avx2_features(), "avx512"),
                    "KILN_CPU_ISA=avx512 but this CPU lacks it");
  CpuFeatures f_only = avx2_features();
  f_only.avx512f = true;
  EXPECT_KILN_ERROR(choose_cpu_isa(f_only, "avx512"), "this CPU lacks it");
}

// kiln::cpu_isa() (kiln-info, kiln-bench) reports what the code generator
// uses: before, it said avx512 on any CPU with AVX-512F, KILN_CPU_ISA or not.
TEST(CpuIsa, ReportedIsaFollowsKilnCpuIsa) {
  if (!cpu_isa_supported(CpuIsa::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2";
  {
    testing::IsaScope isa("avx2");
    EXPECT_STREQ(cpu_isa(), "avx2");
  }
  if (cpu_isa_supported(CpuIsa::kAvx512)) {
    testing::IsaScope isa("avx512");
    EXPECT_STREQ(cpu_isa(), "avx512");
  }
}

// Note [Environment switches]: a value KILN_CPU_ISA does not take keeps the
// default (the widest ISA the CPU runs) and warns; it used to raise from the
// first op that generated code.
TEST(CpuIsa, AnUnknownValueKeepsTheDefault) {
  ::testing::internal::CaptureStderr();  // the warning, where this process has not given it yet
  for (const char* bad : {"sse2", "AVX2", "avx-512", "scalar", "avx2 avx512"}) {
    EXPECT_EQ(choose_cpu_isa(avx512_features(), bad), CpuIsa::kAvx512) << bad;
    EXPECT_EQ(choose_cpu_isa(avx2_features(), bad), CpuIsa::kAvx2) << bad;
    EXPECT_EQ(choose_cpu_isa(CpuFeatures{}, bad), CpuIsa::kScalar) << bad;
  }
  (void)::testing::internal::GetCapturedStderr();
  // What the rest of kiln sees: the default, and one warning naming the value.
  const ChildRun r =
      run_test_in_child("CpuIsaChild.UnknownValueWarnsOnce",
                        {"KILN_CPU_ISA_CHILD=1", "KILN_CPU_ISA=sse2"}, std::chrono::seconds(60));
  EXPECT_TRUE(r.error.empty()) << r.error << ":\n" << r.output;
  EXPECT_NE(r.output.find("[  PASSED  ] 1 test"), std::string::npos) << r.output;
}

// The child of AnUnknownValueKeepsTheDefault: skipped unless run by it.
TEST(CpuIsaChild, UnknownValueWarnsOnce) {
  if (std::getenv("KILN_CPU_ISA_CHILD") == nullptr) GTEST_SKIP() << "run by CpuIsa tests";
  ::testing::internal::CaptureStderr();
  EXPECT_STREQ(cpu_isa(), cpu_isa_name(choose_cpu_isa(host_cpu_features(), "")));
  EXPECT_STREQ(cpu_isa(), cpu_isa_name(choose_cpu_isa(host_cpu_features(), "")));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("KILN_CPU_ISA='sse2' is not understood (expected avx2 or avx512"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("KILN_CPU_ISA", err.find("KILN_CPU_ISA") + 1), std::string::npos)
      << "warned twice: " << err;
}

}  // namespace
}  // namespace kiln
