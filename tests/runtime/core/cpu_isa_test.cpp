#include "runtime/core/cpu_isa.h"

#include <gtest/gtest.h>

#include <cstring>

#include "kiln/info.h"
#include "tests/support/testing.h"

namespace kiln {
namespace {

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
  EXPECT_KILN_ERROR(choose_cpu_isa(avx512_features(), "sse2"),
                    "KILN_CPU_ISA: expected avx2 or avx512, got 'sse2'");
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
  testing::IsaScope isa("sse2");
  EXPECT_KILN_ERROR(cpu_isa(), "expected avx2 or avx512, got 'sse2'");
}

}  // namespace
}  // namespace kiln
