#include "runtime/core/cpu_isa.h"

#include <cstdlib>

#include "kiln/error.h"
#include "runtime/core/env.h"

namespace kiln {

const CpuFeatures& host_cpu_features() {
  static const CpuFeatures f = [] {
    __builtin_cpu_init();
    CpuFeatures r;
    r.avx2 = __builtin_cpu_supports("avx2");
    r.fma = __builtin_cpu_supports("fma");
    r.f16c = __builtin_cpu_supports("f16c");
    r.bmi2 = __builtin_cpu_supports("bmi2");
    r.avx512f = __builtin_cpu_supports("avx512f");
    r.avx512bw = __builtin_cpu_supports("avx512bw");
    r.avx512dq = __builtin_cpu_supports("avx512dq");
    r.avx512vl = __builtin_cpu_supports("avx512vl");
    return r;
  }();
  return f;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kScalar:
      break;
  }
  return "scalar";
}

bool cpu_isa_supported(CpuIsa isa, const CpuFeatures& f) {
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case CpuIsa::kAvx512:
      return avx2 && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.bmi2;
    case CpuIsa::kAvx2:
      return avx2;
    case CpuIsa::kScalar:
      break;
  }
  return true;
}

bool cpu_isa_supported(CpuIsa isa) {
  return cpu_isa_supported(isa, host_cpu_features());
}

CpuIsa choose_cpu_isa(const CpuFeatures& f, std::string_view requested) {
  if (requested.empty()) {
    if (cpu_isa_supported(CpuIsa::kAvx512, f)) return CpuIsa::kAvx512;
    return cpu_isa_supported(CpuIsa::kAvx2, f) ? CpuIsa::kAvx2 : CpuIsa::kScalar;
  }
  if (requested != "avx2" && requested != "avx512") {
    // Not a value it takes: the default, as Note [Environment switches] says.
    warn_env_value("KILN_CPU_ISA", requested, "avx2 or avx512; default the widest this CPU runs");
    return choose_cpu_isa(f, "");
  }
  const CpuIsa want = requested == "avx512" ? CpuIsa::kAvx512 : CpuIsa::kAvx2;
  KILN_CHECK(cpu_isa_supported(want, f), "[cpu_isa] KILN_CPU_ISA=", requested,
             " but this CPU lacks it");
  return want;
}

CpuIsa current_cpu_isa() {
  return choose_cpu_isa(host_cpu_features(), env_string("KILN_CPU_ISA").value_or(""));
}

}  // namespace kiln
