#include "jit/codegen_cpu/vecmath.h"

#include "kiln/error.h"

// Measured accuracy (tests/jit/codegen_cpu/vecmath_test.cpp; identical on AVX-512 and
// AVX2): max |y - ref| / max(|ref|, FLT_MIN) against double libm over >= 1M
// float32 inputs per op, specials included.
//   exp 9.9e-8    exp2 1.1e-7   expm1 1.5e-7  log 9.4e-8   log2 1.5e-7
//   log10 1.6e-7  log1p 1.3e-7  sigmoid 4.0e-7 tanh 2.2e-7 silu 2.2e-7
//   softplus 1.7e-7 erf 1.6e-7  erfc 5.1e-7   gelu 4.9e-7  sin 1.7e-7
//   cos 1.4e-7    sqrt, rsqrt, reciprocal, pow, pow_scalar <= 6.0e-8
//   gelu_tanh 1.3e-6 (absolute below 1e-5; 1.2e-5 relative there, from
//   rounding its argument 2y ~ -60 in float32)

namespace kiln::jit::cpu {

namespace {

struct OpInfo {
  const char* name;
  int arity;
  int scratch_avx512;  // math_scratch_vecs, checked by tests/jit/codegen_cpu/vecmath_test.cpp
  int scratch_avx2;
};

constexpr OpInfo kOps[] = {
    {"identity", 1, 0, 0},   {"exp", 1, 3, 4},   {"exp2", 1, 3, 4},         {"expm1", 1, 4, 4},
    {"log", 1, 5, 6},        {"log2", 1, 5, 6},  {"log10", 1, 5, 6},        {"log1p", 1, 8, 9},
    {"sigmoid", 1, 4, 6},    {"tanh", 1, 6, 6},  {"silu", 1, 5, 7},         {"softplus", 1, 9, 11},
    {"erf", 1, 8, 10},       {"erfc", 1, 8, 10}, {"gelu", 1, 9, 11},        {"gelu_tanh", 1, 7, 9},
    {"sin", 1, 11, 12},      {"cos", 1, 11, 12}, {"sqrt", 1, 0, 0},         {"rsqrt", 1, 1, 1},
    {"reciprocal", 1, 1, 1}, {"pow", 2, 9, 10},  {"pow_scalar", 1, 10, 11},
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == static_cast<size_t>(MathOp::kNumOps));

const OpInfo& info(MathOp op) {
  KILN_INTERNAL_ASSERT(op < MathOp::kNumOps, "unknown math op ", static_cast<int>(op));
  return kOps[static_cast<int>(op)];
}

}  // namespace

const char* math_name(MathOp op) {
  return info(op).name;
}
int math_arity(MathOp op) {
  return info(op).arity;
}
int math_scratch_vecs(MathOp op, Isa isa) {
  return isa == Isa::kAvx512 ? info(op).scratch_avx512 : info(op).scratch_avx2;
}

void emit_math(Emitter& e, MathOp op, const Vec& dst, const Vec& a, const Vec* b,
               const MathParams& params) {
  KILN_INTERNAL_ASSERT(math_arity(op) == 1 || b != nullptr, math_name(op), " needs two operands");
  switch (op) {
    case MathOp::kIdentity:
      return e.mov(dst, a);
    case MathOp::kExp:
      return emit_exp(e, dst, a);
    case MathOp::kExp2:
      return emit_exp2(e, dst, a);
    case MathOp::kExpm1:
      return emit_expm1(e, dst, a);
    case MathOp::kLog:
      return emit_log(e, dst, a);
    case MathOp::kLog2:
      return emit_log2(e, dst, a);
    case MathOp::kLog10:
      return emit_log10(e, dst, a);
    case MathOp::kLog1p:
      return emit_log1p(e, dst, a);
    case MathOp::kSigmoid:
      return emit_sigmoid(e, dst, a);
    case MathOp::kTanh:
      return emit_tanh(e, dst, a);
    case MathOp::kSilu:
      return emit_silu(e, dst, a);
    case MathOp::kSoftplus:
      return emit_softplus(e, dst, a, params.softplus_beta, params.softplus_threshold);
    case MathOp::kErf:
      return emit_erf(e, dst, a);
    case MathOp::kErfc:
      return emit_erfc(e, dst, a);
    case MathOp::kGelu:
      return emit_gelu(e, dst, a);
    case MathOp::kGeluTanh:
      return emit_gelu_tanh(e, dst, a);
    case MathOp::kSin:
      return emit_sin(e, dst, a);
    case MathOp::kCos:
      return emit_cos(e, dst, a);
    case MathOp::kSqrt:
      return emit_sqrt(e, dst, a);
    case MathOp::kRsqrt:
      return emit_rsqrt(e, dst, a);
    case MathOp::kReciprocal:
      return emit_reciprocal(e, dst, a);
    case MathOp::kPow:
      return emit_pow(e, dst, a, *b);
    case MathOp::kPowScalar:
      return emit_pow_scalar(e, dst, a, params.exponent);
    case MathOp::kNumOps:
      break;
  }
  KILN_INTERNAL_ASSERT(false, "unknown math op ", static_cast<int>(op));
}

}  // namespace kiln::jit::cpu
