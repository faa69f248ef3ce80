#pragma once

// Which x86 vector ISA kiln's CPU code uses.
//
// Note [CPU ISA choice]
// One rule decides it, for the code generator (jit/codegen_cpu), the skinny
// GEMM kernels (runtime/cpu/gemv.cpp), the dense 16-bit sums
// (runtime/cpu/reduce_sum16.cpp) and what kiln::cpu_isa() reports
// (kiln-info, kiln-bench). AVX-512 takes F, BW, DQ, VL and BMI2 (the
// generator's masked and byte/word forms need them all) on top of AVX2; AVX2
// takes FMA and F16C. KILN_CPU_ISA=avx2 or avx512 asks for one (to measure, or
// to test the narrower path); one this CPU lacks is an error. Another value
// warns once and keeps the default, as every switch does (Note [Environment
// switches]): it used to be an error raised by whichever op first generated
// code, unlike every other KILN_* name. It is read on each call, so a test
// may change it between calls.
// Before, cpu_isa() said avx512 for any CPU with AVX-512F and ignored
// KILN_CPU_ISA, and the GEMM kernels had a third rule.

#include <string_view>

namespace kiln {

enum class CpuIsa { kScalar, kAvx2, kAvx512 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, bmi2 = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
};

// This machine's features (read once).
const CpuFeatures& host_cpu_features();

// "scalar", "avx2" or "avx512".
const char* cpu_isa_name(CpuIsa isa);

// Whether a CPU with `f` runs `isa` (kScalar: always).
bool cpu_isa_supported(CpuIsa isa, const CpuFeatures& f);
bool cpu_isa_supported(CpuIsa isa);  // on this machine

// The ISA for a CPU with `f` when KILN_CPU_ISA is `requested` (empty: not
// set, so the widest `f` runs). A value other than avx2 or avx512 warns once
// and is taken as unset; one `f` lacks throws.
CpuIsa choose_cpu_isa(const CpuFeatures& f, std::string_view requested);

// choose_cpu_isa for this machine and the current KILN_CPU_ISA.
CpuIsa current_cpu_isa();

}  // namespace kiln
