#pragma once

// Float32 vector math emitted inline through an Emitter: one call writes the
// instructions for one op on one vector register. The same code serves AVX-512
// and AVX2. Polynomials come from tools/fit_vecmath.py.
//
// Contract of every emit function: `dst` may alias any input; inputs are left
// unchanged unless aliased; scratch registers come from the emitter's pools and
// are released before returning (math_scratch_vecs() says how many). Accuracy, measured by
// tests/jit/codegen_cpu/vecmath_test.cpp over dense sweeps against double-precision libm,
// is listed per op in vecmath.cpp.

#include <cstdint>

#include "jit/codegen_cpu/emitter.h"

namespace kiln::jit::cpu {

enum class MathOp : uint8_t {
  kIdentity,
  kExp,
  kExp2,
  kExpm1,
  kLog,
  kLog2,
  kLog10,
  kLog1p,
  kSigmoid,
  kTanh,
  kSilu,
  kSoftplus,  // params: softplus_beta, softplus_threshold
  kErf,
  kErfc,
  kGelu,      // 0.5 x (1 + erf(x / sqrt 2))
  kGeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  kSin,
  kCos,
  kSqrt,
  kRsqrt,
  kReciprocal,
  kPow,        // binary: a ^ b
  kPowScalar,  // a ^ params.exponent
  kNumOps,
};

// Compile-time parameters of parameterized ops.
struct MathParams {
  float softplus_beta = 1.0f;
  float softplus_threshold = 20.0f;
  float exponent = 2.0f;
};

const char* math_name(MathOp op);
int math_arity(MathOp op);
// Vector registers an op acquires at most besides its operands (on AVX2 its
// masks are vector registers too): the generator keeps that many free.
int math_scratch_vecs(MathOp op, Isa isa);

// dst = op(a) or op(a, b); `b` is required for binary ops and ignored otherwise.
void emit_math(Emitter& e, MathOp op, const Vec& dst, const Vec& a, const Vec* b = nullptr,
               const MathParams& params = {});

void emit_exp(Emitter& e, const Vec& dst, const Vec& x);
void emit_exp2(Emitter& e, const Vec& dst, const Vec& x);
void emit_expm1(Emitter& e, const Vec& dst, const Vec& x);
void emit_log(Emitter& e, const Vec& dst, const Vec& x);
void emit_log2(Emitter& e, const Vec& dst, const Vec& x);
void emit_log10(Emitter& e, const Vec& dst, const Vec& x);
void emit_log1p(Emitter& e, const Vec& dst, const Vec& x);
void emit_sigmoid(Emitter& e, const Vec& dst, const Vec& x);
void emit_tanh(Emitter& e, const Vec& dst, const Vec& x);
void emit_silu(Emitter& e, const Vec& dst, const Vec& x);
// PyTorch's softplus: x where beta*x > threshold, else log1p(exp(beta*x)) / beta.
void emit_softplus(Emitter& e, const Vec& dst, const Vec& x, float beta, float threshold);
void emit_erf(Emitter& e, const Vec& dst, const Vec& x);
void emit_erfc(Emitter& e, const Vec& dst, const Vec& x);
void emit_gelu(Emitter& e, const Vec& dst, const Vec& x);
void emit_gelu_tanh(Emitter& e, const Vec& dst, const Vec& x);
void emit_sin(Emitter& e, const Vec& dst, const Vec& x);
void emit_cos(Emitter& e, const Vec& dst, const Vec& x);
void emit_sqrt(Emitter& e, const Vec& dst, const Vec& x);
// 1 / sqrt(x) as two correctly rounded steps (PyTorch's vectorized rsqrt).
void emit_rsqrt(Emitter& e, const Vec& dst, const Vec& x);
void emit_reciprocal(Emitter& e, const Vec& dst, const Vec& x);
// C99 pow (std::pow special cases), computed in double precision.
void emit_pow(Emitter& e, const Vec& dst, const Vec& x, const Vec& y);
// x ^ y for a compile-time y: the cases PyTorch special-cases (0, ±0.5, 1, ±1,
// 2, 3, -2) in a few instructions; any other y as emit_pow.
void emit_pow_scalar(Emitter& e, const Vec& dst, const Vec& x, float y);

}  // namespace kiln::jit::cpu
