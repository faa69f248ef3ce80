#pragma once

// Note [Row passes]
// The fixed loops of reduction groups (Note [Reduction kernels]) over float32
// rows in cache: accumulating passes leave lanes() partial results in
// `lanes` (read and written, so a row can come in chunks) and the caller
// combines them in a fixed order; elementwise passes write `y`. Sums
// accumulate in float64 (float32 values widened), as the eager kernels do,
// so long rows with cancellation agree with them; those passes (kSum,
// kSqDev, kExpSum*, kAccSum, kAccSqDev) stop at the last full vector and
// leave the n % lanes() tail to the caller (kAccExpSum too). The group's
// prologue and epilogue are ordinary fused pointwise kernels run on the same
// rows (reduce_cpu.h), so these passes are generated once per ISA.
//
//   void f(const PassArgs* a)

#include <cstdint>
#include <string>

#include "jit/codegen_cpu/emitter.h"
#include "jit/codegen_cpu/jit_runtime.h"

namespace kiln::jit::cpu {

struct PassArgs {
  const float* x = nullptr;
  float* y = nullptr;
  const float* z = nullptr;
  int64_t n = 0;
  float c0 = 0, c1 = 0;
  void* lanes = nullptr;  // lanes() floats (max, min) or doubles (sums)
  const float* w = nullptr;
};

enum class Pass : uint8_t {
  // accumulating: lanes op= f(x[i])
  kSum,          // x
  kMax,          // x; NaN sticks
  kMin,          // x; NaN sticks
  kSqDev,        // (x - c0)^2
  kExpSum,       // exp(x - c0)
  kExpSumStore,  // e = exp(x - c0); y[i] = e
  // elementwise
  kAffine,  // y = x * c0 + c1 (two roundings, as eager)
  kSubSub,  // y = (x - c0) - c1
  kAccSum,  // y += x, y float64
  kAccMax,  // y = max(y, x); NaN sticks
  kAccMin,
  kAccSqDev,  // y += (x - z)^2, y float64
  // per-position constants z, w (softmax over an outer dim, Note [Outer normalizations])
  kAccExpSum,  // y += exp(x - z), y float64
  kExpSubMul,  // y = exp(x - z) * w
  kSubSubZ,    // y = (x - z) - w
  kNumPasses,
};

const char* pass_name(Pass p);
constexpr bool is_accumulating(Pass p) {
  return p <= Pass::kExpSumStore;
}
// Float64 accumulation, no tail (see above).
constexpr bool is_wide(Pass p) {
  return p == Pass::kSum || p == Pass::kSqDev || p == Pass::kExpSum || p == Pass::kExpSumStore ||
         p == Pass::kAccSum || p == Pass::kAccSqDev || p == Pass::kAccExpSum;
}

class RowPassKernel {
 public:
  RowPassKernel(JitRuntime& rt, Isa isa, Pass pass);
  void run(const PassArgs& a) const { code_.as<void (*)(const PassArgs*)>()(&a); }
  const std::string& listing() const { return listing_; }

 private:
  JitCode code_;
  std::string listing_;
};

// The pass for `isa` (a caller's host_isa(), read once so that its lane count
// and its passes agree even if KILN_CPU_ISA changes), generated on first use.
const RowPassKernel& row_pass(Pass pass, Isa isa);

}  // namespace kiln::jit::cpu
