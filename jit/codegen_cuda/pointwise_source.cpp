#include "jit/codegen_cuda/pointwise_source.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "jit/codegen_cuda/device_prelude.h"
#include "kiln/error.h"
#include "kiln/half.h"
#include "runtime/core/env.h"

// GCC 12 reports false stringop-overflow warnings for std::string
// concatenation inlined at -O3 (a known GCC 12 issue); this file only builds
// strings.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

// The C++ type a dtype's values have in the kernel's arithmetic: its memory
// type, except that bool computes as bool and the 16-bit floats in float.
const char* ctype(DType t) {
  if (t == kBool) return "bool";
  if (is_reduced_float(t)) return "float";
  return mem_type(t);
}

// Note [CUDA literals]
// Every constant must be a literal NVRTC accepts and that means the value
// itself: a float constant is the double rounded to float first (1e300 is
// inf, as the eager kernel's static_cast makes it), and what has no exact
// short decimal spelling in range (inf, NaN, subnormals) is written as its
// bit pattern.
std::string literal(double v, DType t) {
  char buf[64];
  if (t == kBool) return v != 0 ? "true" : "false";
  if (is_integral(t, false)) {
    std::snprintf(buf, sizeof buf, "((%s)%lldll)", ctype(t), static_cast<long long>(v));
    return buf;
  }
  if (t == kFloat64) {
    if (std::isfinite(v) && (v == 0 || std::fabs(v) >= DBL_MIN)) {
      std::snprintf(buf, sizeof buf, "%.17g", v);
      std::string s = buf;
      if (s.find_first_of(".en") == std::string::npos) s += ".0";
      return s;
    }
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    std::snprintf(buf, sizeof buf, "__longlong_as_double(0x%016llxll)",
                  static_cast<unsigned long long>(bits));
    return buf;
  }
  const float f = static_cast<float>(v);
  if (std::isfinite(f) && (f == 0 || std::fabs(f) >= FLT_MIN)) {
    std::snprintf(buf, sizeof buf, "%.9gf", static_cast<double>(f));
    std::string s = buf;
    if (s.find_first_of(".en") == std::string::npos) s.insert(s.size() - 1, ".0");
    return s;
  }
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  std::snprintf(buf, sizeof buf, "__uint_as_float(0x%08xu)", bits);
  return buf;
}

// Functions with a float and a double spelling.
std::string fn(const char* name, DType t) {
  return t == kFloat64 ? std::string(name) : std::string(name) + "f";
}

// Note [CUDA vector math]
// exp, log, erf and friends are NVRTC's built-in single-precision functions
// (a few ulp). Division stays IEEE. sigmoid, silu, tanh and gelu(tanh) are
// kiln's own: a pointwise chain of them is bound by the special-function unit
// (MUFU: 16 results per SM per clock, an eighth of the FMA rate), and the
// library forms spend two or three MUFU ops and a dozen FMAs each where two
// MUFU ops suffice (perf/RESULTS.md counts chain16). Both take
// e = 2^(-|x| log2 e) from ex2.approx (2^-22 relative; rounding |x| log2 e
// adds |x| * 6e-8) and a reciprocal from rcp.approx (1 ulp) of 1 + e, in
// [1, 2], so nothing overflows or meets a denormal:
//   sigmoid(x) = 1/(1+e) for x >= 0, e/(1+e) below: relative error under 1e-6
//     wherever the result is above 1e-5 (|x| < 11.5), absolute below;
//   tanh(x) = sign(x) (1-e)/(1+e) with e = exp(-2|x|) from |x| = 0.1, where
//     1 - e loses at most a factor 5 of e's error; below 0.1 the odd Taylor
//     series through x^7 (error < 1e-7 relative);
//   gelu_tanh(x) = x * sigmoid(2u), which is 0.5 x (1 + tanh(u)) without the
//     cancellation where tanh(u) nears -1.
// DESIGN.md's bars are 4e-6 (sigmoid) and 4e-5 (tanh, gelu);
// tests/jit/codegen_cuda/fused_cuda_test.cpp sweeps all four against float64, with 0,
// +-inf and NaN.
const char kPreludeRest[] =
    R"(// Note [16-bit pairs]: two floats rounded to float16 in one word (a low,
// b high), the halves back, and float16 arithmetic on such words.
__device__ __forceinline__ unsigned kiln_pack_h2(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  return r;
#else
  return (unsigned)kiln_f2h(a) | ((unsigned)kiln_f2h(b) << 16);
#endif
}
__device__ __forceinline__ float kiln_lo2f(unsigned h) { return kiln_h2f((unsigned short)(h & 0xffffu)); }
__device__ __forceinline__ float kiln_hi2f(unsigned h) { return kiln_h2f((unsigned short)(h >> 16)); }
__device__ __forceinline__ unsigned kiln_add_h2(unsigned a, unsigned b) { unsigned r; asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ unsigned kiln_sub_h2(unsigned a, unsigned b) { unsigned r; asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ unsigned kiln_mul_h2(unsigned a, unsigned b) { unsigned r; asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
// The same for bfloat16 (a NaN becomes the canonical NaN, where kiln_f2bf
// keeps its sign and payload); the pair instructions are sm_90's (before
// it, float arithmetic rounded once gives the same results).
__device__ __forceinline__ unsigned kiln_pack_bf2(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  return r;
#else
  return (unsigned)kiln_f2bf(a) | ((unsigned)kiln_f2bf(b) << 16);
#endif
}
__device__ __forceinline__ float kiln_lo_bf2f(unsigned h) { return __uint_as_float(h << 16); }
__device__ __forceinline__ float kiln_hi_bf2f(unsigned h) { return __uint_as_float(h & 0xffff0000u); }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned kiln_add_bf2(unsigned a, unsigned b) { unsigned r; asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ unsigned kiln_sub_bf2(unsigned a, unsigned b) { unsigned r; asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ unsigned kiln_mul_bf2(unsigned a, unsigned b) { unsigned r; asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
#else
__device__ __forceinline__ unsigned kiln_add_bf2(unsigned a, unsigned b) { return kiln_pack_bf2(kiln_lo_bf2f(a) + kiln_lo_bf2f(b), kiln_hi_bf2f(a) + kiln_hi_bf2f(b)); }
__device__ __forceinline__ unsigned kiln_sub_bf2(unsigned a, unsigned b) { return kiln_pack_bf2(kiln_lo_bf2f(a) - kiln_lo_bf2f(b), kiln_hi_bf2f(a) - kiln_hi_bf2f(b)); }
__device__ __forceinline__ unsigned kiln_mul_bf2(unsigned a, unsigned b) { return kiln_pack_bf2(kiln_lo_bf2f(a) * kiln_lo_bf2f(b), kiln_hi_bf2f(a) * kiln_hi_bf2f(b)); }
#endif
__device__ __forceinline__ double kiln_fmod(double a, double b) { return fmod(a, b); }
__device__ __forceinline__ float kiln_fmod(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ double kiln_floor(double a) { return floor(a); }
__device__ __forceinline__ float kiln_floor(float a) { return floorf(a); }
__device__ __forceinline__ double kiln_copysign(double a, double b) { return copysign(a, b); }
__device__ __forceinline__ float kiln_copysign(float a, float b) { return copysignf(a, b); }
template <class T> __device__ __forceinline__ T kiln_remainder(T a, T b) {
  T m = kiln_fmod(a, b);
  if (m != 0 && (b < 0) != (m < 0)) m += b;
  return m;
}
template <class T> __device__ __forceinline__ T kiln_floordiv(T a, T b) {
  if (b == 0) return a / b;
  const T mod = kiln_fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= T(1);
  if (div == 0) return kiln_copysign(T(0), a / b);
  T fl = kiln_floor(div);
  if (div - fl > T(0.5)) fl += T(1);
  return fl;
}
template <class T> __device__ __forceinline__ T kiln_idiv_trunc(T a, T b) {
  if (b == 0) return 0;
  if ((T)-1 < 0 && b == (T)-1) return (T)(0ull - (unsigned long long)a);
  return (T)(a / b);
}
template <class T> __device__ __forceinline__ T kiln_idiv_floor(T a, T b) {
  T q = kiln_idiv_trunc(a, b);
  if (b != 0 && b != (T)-1 && (a < 0) != (b < 0) && (T)(a % b) != 0) --q;
  return q;
}
template <class T> __device__ __forceinline__ T kiln_ifmod(T a, T b) {
  if (b == 0 || ((T)-1 < 0 && b == (T)-1)) return 0;
  return (T)(a % b);
}
template <class T> __device__ __forceinline__ T kiln_iremainder(T a, T b) {
  T r = kiln_ifmod(a, b);
  if (r != 0 && (r < 0) != (b < 0)) r = (T)(r + b);
  return r;
}
template <class T> __device__ __forceinline__ T kiln_ipow(T a, T b) {
  if ((T)-1 < 0 && b < 0) {
    if (a == 1) return 1;
    if (a == (T)-1) return (b & 1) ? (T)-1 : (T)1;
    return 0;
  }
  unsigned long long r = 1, x = (unsigned long long)(long long)a, e = (unsigned long long)b;
  while (e) {
    if (e & 1) r *= x;
    x *= x;
    e >>= 1;
  }
  return (T)r;
}
template <class T, int N> struct alignas(sizeof(T) * N) KilnVec { T v[N]; };
__device__ __forceinline__ float kiln_rcpf(float x) { float r; asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
__device__ __forceinline__ float kiln_ex2f(float x) { float r; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
__device__ __forceinline__ float kiln_sigmoidf(float x) {
  const float e = kiln_ex2f(fabsf(x) * -1.4426950408889634f);
  const float r = kiln_rcpf(1.0f + e);
  return x >= 0.0f ? r : e * r;
}
__device__ __forceinline__ float kiln_tanhf(float x) {
  const float ax = fabsf(x), x2 = x * x;
  float q = fmaf(x2, -0.053968253968253968f, 0.13333333333333333f);
  q = fmaf(q, x2, -0.33333333333333333f);
  const float small = fmaf(x * x2, q, x);
  const float e = kiln_ex2f(ax * -2.8853900817779268f);
  const float big = copysignf((1.0f - e) * kiln_rcpf(1.0f + e), x);
  return ax < 0.1f ? small : big;
}
)";

// A value of memory dtype `mem`, as read (`e`), in its compute type.
std::string from_memory(DType mem, const std::string& e) {
  switch (mem) {
    case kFloat16:
      return "kiln_h2f(" + e + ")";
    case kBFloat16:
      return "kiln_bf2f(" + e + ")";
    case kBool:
      return "(" + e + " != 0)";
    default:
      return e;
  }
}

std::string load_expr(DType mem, const std::string& ptr, const std::string& off) {
  return from_memory(mem, "((const " + std::string(mem_type(mem)) + "*)" + ptr + ")[" + off + "]");
}

std::string store_value(DType mem, DType value_type, const std::string& v) {
  switch (mem) {
    case kFloat16:
      return "kiln_f2h((float)(" + v + "))";
    case kBFloat16:
      return "kiln_f2bf((float)(" + v + "))";
    case kBool:
      return "(unsigned char)((" + v + ") != 0)";
    default:
      return "(" + std::string(mem_type(mem)) + ")(" + v + ")";
  }
}

// Integer arithmetic wraps as in PyTorch: int32/int64 go through their
// unsigned types (signed overflow is undefined in C++); narrower types
// compute in int, which cannot overflow, and wrap on conversion.
std::string wrapping(DType t, const std::string& a, const char* op, const std::string& b) {
  if (t != kInt32 && t != kInt64) return a + " " + op + " " + b;
  const std::string u = t == kInt64 ? "unsigned long long" : "unsigned";
  return "(" + std::string(ctype(t)) + ")((" + u + ")" + a + " " + op + " (" + u + ")" + b + ")";
}

// `in` as an expression over the earlier values vN (vN_lane in the pair
// body's lane `lane`: Note [16-bit pairs]).
std::string instr_expr(const PointwiseKernel& k, const Instr& in, int lane = -1) {
  auto v = [lane](int32_t i) {
    return "v" + std::to_string(i) + (lane < 0 ? "" : "_" + std::to_string(lane));
  };
  DType t = in.dtype;
  std::string a = in.a >= 0 ? v(in.a) : "", b = in.b >= 0 ? v(in.b) : "",
              c = in.c >= 0 ? v(in.c) : "";
  std::string one = t == kFloat64 ? "1.0" : "1.0f", half = t == kFloat64 ? "0.5" : "0.5f";
  switch (in.op) {
    case Prim::Load:
    case Prim::Const:
    case Prim::Param:
      break;
    case Prim::Neg:
      if (t == kInt32 || t == kInt64) return wrapping(t, "0", "-", a);
      return "-" + a;
    case Prim::Abs:
      if (!is_floating(t)) return "(" + a + " < 0 ? -" + a + " : " + a + ")";
      return fn("fabs", t) + "(" + a + ")";
    case Prim::Exp:
      return fn("exp", t) + "(" + a + ")";
    case Prim::Log:
      return fn("log", t) + "(" + a + ")";
    case Prim::Sqrt:
      return fn("sqrt", t) + "(" + a + ")";
    case Prim::Rsqrt:
      return fn("rsqrt", t) + "(" + a + ")";
    case Prim::Reciprocal:
      return one + " / " + a;
    case Prim::Sin:
      return fn("sin", t) + "(" + a + ")";
    case Prim::Cos:
      return fn("cos", t) + "(" + a + ")";
    case Prim::Tanh:
      return (t == kFloat32 ? "kiln_tanhf(" : "tanh(") + a + ")";
    case Prim::Sigmoid:
      if (t == kFloat32) return "kiln_sigmoidf(" + a + ")";
      return one + " / (" + one + " + exp(-" + a + "))";
    case Prim::Relu:
      return "(" + a + " != " + a + " ? " + a + " : (" + a + " > 0 ? " + a + " : 0))";
    case Prim::Erf:
      return fn("erf", t) + "(" + a + ")";
    case Prim::Floor:
      if (!is_floating(t)) return a;
      return fn("floor", t) + "(" + a + ")";
    case Prim::Ceil:
      if (!is_floating(t)) return a;
      return fn("ceil", t) + "(" + a + ")";
    case Prim::Trunc:
      if (!is_floating(t)) return a;
      return fn("trunc", t) + "(" + a + ")";
    case Prim::Round:
      if (!is_floating(t)) return a;
      return fn("rint", t) + "(" + a + ")";
    case Prim::GeluErf:
      return half + " * " + a + " * (" + one + " + " + fn("erf", t) + "(" + a + " * " +
             literal(0.70710678118654752440, t) + "))";
    case Prim::GeluTanh:
      // x * sigmoid(2u) is 0.5 * x * (1 + tanh(u)) without the cancellation
      // where tanh(u) is near -1.
      if (t == kFloat32) {
        return a + " * kiln_sigmoidf(1.5957691216057308f * (" + a + " + 0.044715f * " + a + " * " +
               a + " * " + a + "))";
      }
      return half + " * " + a + " * (" + one + " + tanh(" + literal(0.79788456080286535588, t) +
             " * (" + a + " + " + literal(0.044715, t) + " * " + a + " * " + a + " * " + a + ")))";
    case Prim::Silu:
      if (t == kFloat32) return a + " * kiln_sigmoidf(" + a + ")";
      return a + " / (1.0 + exp(-" + a + "))";
    case Prim::Expm1:
      return fn("expm1", t) + "(" + a + ")";
    case Prim::Log1p:
      return fn("log1p", t) + "(" + a + ")";
    case Prim::LogicalNot:
      return "!" + a;
    case Prim::RoundF16:
      return "kiln_h2f(kiln_f2h(" + a + "))";
    case Prim::RoundBF16:
      return "kiln_bf2f(kiln_f2bf(" + a + "))";
    case Prim::Cast:
      if (t == kBool) return "(" + a + " != 0)";
      // Floats reach narrow integers through int64, as the CPU conversion does.
      if (is_integral(t, false) && is_floating(k.body[in.a].dtype)) {
        return "(" + std::string(ctype(t)) + ")(i64)" + a;
      }
      return "(" + std::string(ctype(t)) + ")" + a;
    case Prim::Asin:
      return fn("asin", t) + "(" + a + ")";
    case Prim::Acos:
      return fn("acos", t) + "(" + a + ")";
    case Prim::Atan:
      return fn("atan", t) + "(" + a + ")";
    case Prim::Sinh:
      return fn("sinh", t) + "(" + a + ")";
    case Prim::Cosh:
      return fn("cosh", t) + "(" + a + ")";
    case Prim::Tan:
      return fn("tan", t) + "(" + a + ")";
    case Prim::Exp2:
      return fn("exp2", t) + "(" + a + ")";
    case Prim::Log2:
      return fn("log2", t) + "(" + a + ")";
    case Prim::Log10:
      return fn("log10", t) + "(" + a + ")";
    case Prim::Sign:
      if (t == kBool) return a;
      return "(" + std::string(ctype(t)) + ")((" + a + " > 0) - (" + a + " < 0))";
    case Prim::Frac:
      if (!is_floating(t)) return "(" + std::string(ctype(t)) + ")0";
      return a + " - " + fn("trunc", t) + "(" + a + ")";
    case Prim::IsNan:
      if (!is_floating(k.body[in.a].dtype)) return "false";
      return a + " != " + a;
    case Prim::IsInf: {
      DType s = k.body[in.a].dtype;
      if (!is_floating(s)) return "false";
      return fn("fabs", s) + "(" + a + ") == " + literal(__builtin_inf(), s);
    }
    case Prim::IsFinite: {
      DType s = k.body[in.a].dtype;
      if (!is_floating(s)) return "true";
      return fn("fabs", s) + "(" + a + ") < " + literal(__builtin_inf(), s);
    }
    case Prim::BitNot:
      if (t == kBool) return "!" + a;
      return "(" + std::string(ctype(t)) + ")~" + a;
    case Prim::Atan2:
      return fn("atan2", t) + "(" + a + ", " + b + ")";
    case Prim::FloorDiv:
      if (!is_floating(t)) return "kiln_idiv_floor(" + a + ", " + b + ")";
      return "kiln_floordiv(" + a + ", " + b + ")";
    case Prim::Remainder:
      if (!is_floating(t)) return "kiln_iremainder(" + a + ", " + b + ")";
      return "kiln_remainder(" + a + ", " + b + ")";
    case Prim::Fmod:
      if (!is_floating(t)) return "kiln_ifmod(" + a + ", " + b + ")";
      return "kiln_fmod(" + a + ", " + b + ")";
    case Prim::BitAnd:
      return "(" + std::string(ctype(t)) + ")(" + a + " & " + b + ")";
    case Prim::BitOr:
      return "(" + std::string(ctype(t)) + ")(" + a + " | " + b + ")";
    case Prim::BitXor:
      return "(" + std::string(ctype(t)) + ")(" + a + " ^ " + b + ")";
    case Prim::Add:
      return wrapping(t, a, "+", b);
    case Prim::Sub:
      return wrapping(t, a, "-", b);
    case Prim::Mul:
      return wrapping(t, a, "*", b);
    case Prim::Div:
      // Integer division truncates (div's rounding_mode="trunc"); a zero divisor gives 0.
      if (!is_floating(t)) return "kiln_idiv_trunc(" + a + ", " + b + ")";
      return a + " / " + b;
    case Prim::Max:
      return "kiln_max(" + a + ", " + b + ")";
    case Prim::Min:
      return "kiln_min(" + a + ", " + b + ")";
    case Prim::Pow:
      if (t == kBool) return a + " || !" + b;
      if (!is_floating(t)) return "kiln_ipow(" + a + ", " + b + ")";
      return fn("pow", t) + "(" + a + ", " + b + ")";
    case Prim::Eq:
      return a + " == " + b;
    case Prim::Ne:
      return a + " != " + b;
    case Prim::Lt:
      return a + " < " + b;
    case Prim::Le:
      return a + " <= " + b;
    case Prim::Gt:
      return a + " > " + b;
    case Prim::Ge:
      return a + " >= " + b;
    case Prim::LogicalAnd:
      return a + " && " + b;
    case Prim::LogicalOr:
      return a + " || " + b;
    case Prim::Where:
      return a + " ? " + b + " : " + c;
    case Prim::Erfc:
      return fn("erfc", t) + "(" + a + ")";
  }
  KILN_FAIL("[cuda codegen] no CUDA expression for ", prim_name(in.op));
}

// Param `in` read from its KilnArgs field (declare_params), in its compute type.
std::string param_expr(const Instr& in, const std::string& prefix) {
  const std::string field = prefix + std::to_string(in.operand);
  return in.dtype == kFloat32 ? field : "(" + std::string(ctype(in.dtype)) + ")" + field;
}

// Note [16-bit pairs]
// A float16 or bfloat16 kernel rounds after every op (RoundF16, RoundBF16:
// the eager ops round each result), and each rounding was two conversions
// per element, float to the 16-bit type and back (bfloat16's first one
// five integer instructions): axpy8 in float16 (x * a + b four times) ran
// 31 instructions per element and, under Nsight Compute, was bound by issue
// (86% of issue slots, DRAM at 52%). Where the vector loop holds an even
// number of elements, it now takes them two at a time: a rounding converts
// both lanes with one instruction into a pair (kiln_pack_h2, kiln_pack_bf2),
// and an add, subtract or multiply of two values that are values of the
// 16-bit type already (loads from its memory, earlier roundings, constants
// it represents), rounded to it, runs as one pair instruction. That is
// exact, not close: float's 24 bits are at least 2p + 2 (p = 11 for
// float16, 8 for bfloat16), so rounding the float result to the 16-bit type
// gives its correctly rounded result for +, - and * (the product is exact
// in float); the pair instructions round correctly, keep subnormals (no
// .ftz) and do not fuse with a neighbour (.rn). bfloat16's are sm_90's;
// before it the same helpers compute in float and round once. A bfloat16
// NaN comes out of a pair as the canonical NaN (as PyTorch's CUDA kernels
// round), not with the sign and payload kiln_f2bf keeps: keeping them cost
// a test and a select per lane, and axpy8 in bfloat16 ran at 44% of a copy
// with them. A 16-bit result is stored from its pair.
// KILN_CUDA_PAIRS=0 turns the pairs off, to measure.
bool pairs_pay(const PointwiseKernel& k) {
  static const bool on = env_flag("KILN_CUDA_PAIRS", true);
  if (!on) return false;
  for (DType t : k.outputs) {
    if (is_reduced_float(t)) return true;
  }
  for (const Instr& in : k.body) {
    if (in.op == Prim::RoundF16 || in.op == Prim::RoundBF16) return true;
  }
  return false;
}

// Whether `v` is a value of 16-bit float `t`, and its bits.
bool short_constant(double v, DType t, uint16_t* bits) {
  const auto f = static_cast<float>(v);
  if (static_cast<double>(f) != v) return false;  // NaN too
  const uint16_t h =
      t == kFloat16 ? kiln::detail::float_to_half_bits(f) : kiln::detail::float_to_bfloat16_bits(f);
  const float back =
      t == kFloat16 ? kiln::detail::half_bits_to_float(h) : kiln::detail::bfloat16_bits_to_float(h);
  if (back != f) return false;
  *bits = h;
  return true;
}

// The pair instruction (float16 or bfloat16) for `op`, or null.
const char* half_pair_op(Prim op) {
  switch (op) {
    case Prim::Add:
      return "add";
    case Prim::Sub:
      return "sub";
    case Prim::Mul:
      return "mul";
    default:
      return nullptr;
  }
}

uint64_t spec_hash(const PointwiseSpec& s) {
  uint64_t h = s.kernel->hash();
  for (Layout l : s.layouts) h = (h ^ static_cast<uint64_t>(l)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(s.ndim)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(s.index32)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(s.vec)) * 1099511628211ull;
  return h;
}

}  // namespace

std::string pointwise_name(const PointwiseSpec& spec) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "kiln_pw_%016llx",
                static_cast<unsigned long long>(spec_hash(spec)));
  return buf;
}

int vector_width(const PointwiseKernel& k) {
  size_t widest = 1;
  for (DType t : k.inputs) widest = std::max(widest, itemsize(t));
  for (DType t : k.outputs) widest = std::max(widest, itemsize(t));
  return static_cast<int>(std::min<size_t>(8, 16 / widest));
}

// Note [CUDA pointwise kernel shape]
// A grid-stride loop over the elements; the launch gives each thread one
// vector (or a capped grid loops, for tuning: launch_cuda.cpp). When every
// operand's vectors stay aligned, each step moves `vec` elements per operand
// with one vector access (16 bytes for the widest dtype): fewer memory
// instructions per byte, which is what gets a memory-bound group near copy
// bandwidth. That holds for Dense and Scalar operands with aligned pointers,
// and for Strided ones dense along the innermost dim when that dim's size and
// their other strides are multiples of `vec` (a transposing copy such as
// GPT-2's merge of heads, a row broadcast such as a bias): the N-d index is
// then taken once per vector, not once per element. The last numel % vec
// elements take a scalar loop. Scalar operands are read once per thread,
// before the loop.
std::string pointwise_source(const PointwiseSpec& spec) {
  const PointwiseKernel& k = *spec.kernel;
  const size_t nout = k.outputs.size(), nops = nout + k.inputs.size();
  KILN_CHECK(spec.layouts.size() == nops, "[cuda codegen] expected ", nops, " layouts, got ",
             spec.layouts.size());
  KILN_CHECK(spec.ndim >= 1 && spec.ndim <= kMaxDims, "[cuda codegen] expected 1..", kMaxDims,
             " iteration dims, got ", spec.ndim);
  bool strided = false;
  for (Layout l : spec.layouts) strided = strided || l == Layout::Strided;
  KILN_CHECK(spec.vec == 1 || spec.vec == vector_width(k),
             "[cuda codegen] expected vector width 1 or ", vector_width(k), ", got ", spec.vec);
  const std::string idx = spec.index32 ? "int" : "i64";
  std::ostringstream os;
  os << kDevicePrelude << kPreludeRest;
  os << "struct KilnArgs {\n  i64 numel;\n  i64 sizes[" << kMaxDims << "];\n";
  for (size_t o = 0; o < nops; ++o) {
    os << "  void* p" << o << ";\n";
    if (spec.layouts[o] == Layout::Strided) os << "  i64 s" << o << "[" << kMaxDims << "];\n";
  }
  declare_params(os, k, "k");
  const bool flag = divides_integers(k);
  if (flag) os << "  i64* err;\n";
  os << "};\n";
  os << "extern \"C\" __global__ void __launch_bounds__(256) " << pointwise_name(spec)
     << "(const __grid_constant__ KilnArgs a) {\n";
  os << "  kiln_grid_enter();\n";  // Note [Early launch]
  os << "  const " << idx << " n = (" << idx << ")a.numel;\n";
  os << "  const " << idx << " step = (" << idx << ")gridDim.x * 256;\n";
  os << "  const " << idx << " first = (" << idx << ")blockIdx.x * 256 + threadIdx.x;\n";
  if (flag) os << "  bool zero_divisor = false;\n";
  for (size_t o = nout; o < nops; ++o) {
    if (spec.layouts[o] != Layout::Scalar) continue;
    DType mem = k.inputs[o - nout];
    os << "  const " << ctype(compute_dtype(mem)) << " c" << o << " = "
       << load_expr(mem, "a.p" + std::to_string(o), "0") << ";\n";
  }
  auto offset = [&](size_t o) -> std::string {
    switch (spec.layouts[o]) {
      case Layout::Dense:
        return "i";
      case Layout::Scalar:
        return "0";
      case Layout::Strided: {
        std::string e;
        for (int d = 0; d < spec.ndim; ++d) {
          if (d) e += " + ";
          e += "i" + std::to_string(d) + " * (" + idx + ")a.s" + std::to_string(o) + "[" +
               std::to_string(d) + "]";
        }
        return e;
      }
    }
    return "0";
  };
  // The body over one element: `load(o)` reads input operand o, `store(o, v)`
  // writes output o.
  auto body = [&](const std::string& pad, auto&& load, auto&& store) {
    for (size_t n = 0; n < k.body.size(); ++n) {
      const Instr& in = k.body[n];
      if (is_integer_division(in)) os << pad << "zero_divisor |= v" << in.b << " == 0;\n";
      os << pad << "const " << ctype(in.dtype) << " v" << n << " = ";
      if (in.op == Prim::Load) {
        const size_t o = nout + static_cast<size_t>(in.operand);
        os << "(" << ctype(in.dtype) << ")"
           << (spec.layouts[o] == Layout::Scalar ? "c" + std::to_string(o) : load(o));
      } else if (in.op == Prim::Const) {
        os << literal(in.imm, in.dtype);
      } else if (in.op == Prim::Param) {
        os << param_expr(in, "a.k");
      } else {
        os << instr_expr(k, in);
      }
      os << ";\n";
    }
    for (size_t o = 0; o < nout; ++o) {
      os << pad
         << store(o, store_value(k.outputs[o], k.body[k.stores[o]].dtype,
                                 "v" + std::to_string(k.stores[o])))
         << ";\n";
    }
  };
  // The body over elements e and e + 1 of the vector loop (Note [Float16
  // pairs]): value n is vN_0 and vN_1, and hN where it is a float16 pair.
  auto pair_body = [&](const std::string& pad) {
    // Per value: whether it has a float16 pair (hN) and a bfloat16 pair (hNb).
    std::vector<char> pair16(k.body.size(), 0), pair_bf(k.body.size(), 0);
    auto pairs_of = [&](DType t) -> std::vector<char>& { return t == kFloat16 ? pair16 : pair_bf; };
    auto word = [](DType t, size_t n) {
      return "h" + std::to_string(n) + (t == kFloat16 ? "" : "b");
    };
    auto suffix = [](DType t) { return std::string(t == kFloat16 ? "h2" : "bf2"); };
    for (size_t n = 0; n < k.body.size(); ++n) {
      const Instr& in = k.body[n];
      const std::string v = "v" + std::to_string(n);
      auto lanes = [&](const std::string& e0, const std::string& e1) {
        os << pad << "const " << ctype(in.dtype) << " " << v << "_0 = " << e0 << ", " << v
           << "_1 = " << e1 << ";\n";
      };
      if (in.op == Prim::RoundF16 || in.op == Prim::RoundBF16) {
        const DType t = in.op == Prim::RoundF16 ? kFloat16 : kBFloat16;
        const std::string h = word(t, n);
        const Instr& src = k.body[in.a];
        const char* native = src.dtype == kFloat32 && src.a >= 0 && src.b >= 0 && src.c < 0 &&
                                     pairs_of(t)[src.a] && pairs_of(t)[src.b]
                                 ? half_pair_op(src.op)
                                 : nullptr;
        os << pad << "const unsigned " << h << " = ";
        if (native) {
          os << "kiln_" << native << "_" << suffix(t) << "(" << word(t, src.a) << ", "
             << word(t, src.b) << ");\n";
        } else {
          os << "kiln_pack_" << suffix(t) << "(v" << in.a << "_0, v" << in.a << "_1);\n";
        }
        if (t == kFloat16) {
          lanes("kiln_lo2f(" + h + ")", "kiln_hi2f(" + h + ")");
        } else {
          lanes("kiln_lo_bf2f(" + h + ")", "kiln_hi_bf2f(" + h + ")");
        }
        pairs_of(t)[n] = 1;
        continue;
      }
      if (is_integer_division(in)) {
        os << pad << "zero_divisor |= v" << in.b << "_0 == 0 || v" << in.b << "_1 == 0;\n";
      }
      const std::string cast = "(" + std::string(ctype(in.dtype)) + ")";
      if (in.op == Prim::Load) {
        const size_t o = nout + static_cast<size_t>(in.operand);
        const DType mem = k.inputs[in.operand];
        if (spec.layouts[o] == Layout::Scalar) {
          lanes(cast + "c" + std::to_string(o), cast + "c" + std::to_string(o));
          continue;
        }
        const std::string l = "l" + std::to_string(o);
        lanes(cast + from_memory(mem, l + ".v[e]"), cast + from_memory(mem, l + ".v[e + 1]"));
        if (is_reduced_float(mem) && in.dtype == kFloat32) {
          os << pad << "const unsigned " << word(mem, n) << " = (unsigned)" << l
             << ".v[e] | ((unsigned)" << l << ".v[e + 1] << 16);\n";
          pairs_of(mem)[n] = 1;
        }
      } else if (in.op == Prim::Const) {
        lanes(literal(in.imm, in.dtype), literal(in.imm, in.dtype));
        // Its pair in each 16-bit float that represents it.
        for (DType t : {kFloat16, kBFloat16}) {
          uint16_t bits = 0;
          if (in.dtype != kFloat32 || !short_constant(in.imm, t, &bits)) continue;
          char hex[16];
          std::snprintf(hex, sizeof hex, "0x%08xu", (uint32_t{bits} << 16) | bits);
          os << pad << "const unsigned " << word(t, n) << " = " << hex << ";\n";
          pairs_of(t)[n] = 1;
        }
      } else if (in.op == Prim::Param) {
        lanes(param_expr(in, "a.k"), param_expr(in, "a.k"));
      } else {
        lanes(instr_expr(k, in, 0), instr_expr(k, in, 1));
      }
    }
    for (size_t o = 0; o < nout; ++o) {
      const size_t n = static_cast<size_t>(k.stores[o]);
      const std::string v = "v" + std::to_string(n), so = "s" + std::to_string(o);
      const DType t = k.outputs[o];
      if (is_reduced_float(t)) {
        const std::string w = pairs_of(t)[n] ? word(t, n)
                                             : "kiln_pack_" + suffix(t) + "((float)(" + v +
                                                   "_0), (float)(" + v + "_1))";
        os << pad << "{\n"
           << pad << "  const unsigned w = " << w << ";\n"
           << pad << "  " << so << ".v[e] = (unsigned short)(w & 0xffffu);\n"
           << pad << "  " << so << ".v[e + 1] = (unsigned short)(w >> 16);\n"
           << pad << "}\n";
        continue;
      }
      for (int lane = 0; lane < 2; ++lane) {
        os << pad << so << ".v[e" << (lane ? " + 1" : "")
           << "] = " << store_value(t, k.body[n].dtype, v + "_" + std::to_string(lane)) << ";\n";
      }
    }
  };
  auto scalar_load = [&](size_t o) {
    return load_expr(k.inputs[o - nout], "a.p" + std::to_string(o), offset(o));
  };
  auto scalar_store = [&](size_t o, const std::string& v) {
    return "((" + std::string(mem_type(k.outputs[o])) + "*)a.p" + std::to_string(o) + ")[" +
           offset(o) + "] = " + v;
  };
  std::string tail_start = "first";
  if (spec.vec > 1) {
    const std::string w = std::to_string(spec.vec);
    auto vtype = [&](DType mem) {
      return "KilnVec<" + std::string(mem_type(mem)) + ", " + w + ">";
    };
    // Restrict-qualified pointers let the compiler hoist the next
    // iterations' loads above this one's stores when it unrolls: more bytes
    // in flight per thread. An output may be an input (in-place ops), but
    // only with the same geometry (Note [Fusion groups]), so no iteration
    // reads what another writes.
    for (size_t o = 0; o < nops; ++o) {
      if (spec.layouts[o] != Layout::Dense) continue;
      const bool in = o >= nout;
      const std::string t = vtype(in ? k.inputs[o - nout] : k.outputs[o]);
      os << "  " << (in ? "const " : "") << t << "* __restrict__ q" << o << " = ("
         << (in ? "const " : "") << t << "*)a.p" << o << ";\n";
    }
    os << "  const " << idx << " nv = n / " << w << ";\n";
    const std::string last = std::to_string(spec.ndim - 1);
    if (strided) {
      os << "  const " << idx << " inner_v = (" << idx << ")a.sizes[" << last << "] / " << w
         << ";\n";
    }
    os << "#pragma unroll 4\n";
    os << "  for (" << idx << " j = first; j < nv; j += step) {\n";
    if (strided) {
      // The N-d index of element j * w: the innermost dim counts vectors
      // (its size is a multiple of w, and every strided operand is dense
      // along it, with its other strides multiples of w).
      os << "    " << idx << " rem = j;\n";
      os << "    const " << idx << " i" << last << " = rem % inner_v * " << w
         << "; rem /= inner_v;\n";
      for (int d = spec.ndim - 2; d >= 0; --d) {
        os << "    const " << idx << " i" << d << " = rem % (" << idx << ")a.sizes[" << d
           << "]; rem /= (" << idx << ")a.sizes[" << d << "];\n";
      }
    }
    for (size_t o = nout; o < nops; ++o) {
      if (spec.layouts[o] == Layout::Dense) {
        os << "    const " << vtype(k.inputs[o - nout]) << " l" << o << " = q" << o << "[j];\n";
      } else if (spec.layouts[o] == Layout::Strided) {
        const std::string t = vtype(k.inputs[o - nout]);
        os << "    const " << t << " l" << o << " = *(const " << t << "*)((const "
           << mem_type(k.inputs[o - nout]) << "*)a.p" << o << " + " << offset(o) << ");\n";
      }
    }
    for (size_t o = 0; o < nout; ++o) os << "    " << vtype(k.outputs[o]) << " s" << o << ";\n";
    if (spec.vec % 2 == 0 && pairs_pay(k)) {
      os << "#pragma unroll\n    for (int e = 0; e < " << w << "; e += 2) {\n";
      pair_body("      ");
    } else {
      os << "#pragma unroll\n    for (int e = 0; e < " << w << "; ++e) {\n";
      body(
          "      ",
          [&](size_t o) {
            return from_memory(k.inputs[o - nout], "l" + std::to_string(o) + ".v[e]");
          },
          [&](size_t o, const std::string& v) { return "s" + std::to_string(o) + ".v[e] = " + v; });
    }
    os << "    }\n";
    for (size_t o = 0; o < nout; ++o) {
      if (spec.layouts[o] == Layout::Strided) {
        os << "    *(" << vtype(k.outputs[o]) << "*)((" << mem_type(k.outputs[o]) << "*)a.p" << o
           << " + " << offset(o) << ") = s" << o << ";\n";
      } else {
        os << "    q" << o << "[j] = s" << o << ";\n";
      }
    }
    os << "  }\n";
    tail_start = "nv * " + w + " + first";
  }
  os << "  for (" << idx << " i = " << tail_start << "; i < n; i += step) {\n";
  if (strided) {
    // N-d index, innermost dim last.
    os << "    " << idx << " rem = i;\n";
    for (int d = spec.ndim - 1; d >= 0; --d) {
      os << "    const " << idx << " i" << d << " = rem % (" << idx << ")a.sizes[" << d
         << "]; rem /= (" << idx << ")a.sizes[" << d << "];\n";
    }
  }
  body("    ", scalar_load, scalar_store);
  os << "  }\n";
  if (flag) os << "  if (zero_divisor && a.err) kiln_flag_error(a.err, 0);\n";
  os << "}\n";
  return os.str();
}

// A float32 Param is a float in its word's low half, read as it is (a
// double read and converted per use cost chain16 10% on an H200).
void declare_params(std::ostream& os, const PointwiseKernel& k, const std::string& prefix) {
  for (const Instr& in : k.body) {
    if (in.op != Prim::Param) continue;
    const std::string name = prefix + std::to_string(in.operand);
    if (in.dtype == kFloat32) {
      os << "  float " << name << ";\n  float " << name << "_pad;\n";
    } else {
      os << "  " << (in.dtype == kFloat64 ? "double " : "i64 ") << name << ";\n";
    }
  }
}

int64_t param_word(const Instr& in) {
  if (in.dtype == kFloat32) return std::bit_cast<uint32_t>(static_cast<float>(in.imm));
  if (is_floating(in.dtype)) return std::bit_cast<int64_t>(in.imm);
  if (in.dtype == kBool) return in.imm != 0;
  return static_cast<int64_t>(in.imm);
}

std::string pointwise_prelude() {
  return std::string(kDevicePrelude) + kPreludeRest;
}

std::string device_load(DType mem, const std::string& ptr, const std::string& off) {
  return load_expr(mem, ptr, off);
}

void emit_pointwise_body(std::ostream& os, const PointwiseKernel& k, const std::string& pad,
                         const std::string& params, const std::function<std::string(size_t)>& load,
                         const std::function<std::string(size_t, const std::string&)>& store) {
  for (size_t n = 0; n < k.body.size(); ++n) {
    const Instr& in = k.body[n];
    os << pad << "const " << ctype(in.dtype) << " v" << n << " = ";
    if (in.op == Prim::Load) {
      os << "(" << ctype(in.dtype) << ")" << load(static_cast<size_t>(in.operand));
    } else if (in.op == Prim::Const) {
      os << literal(in.imm, in.dtype);
    } else if (in.op == Prim::Param) {
      os << param_expr(in, params);
    } else {
      os << instr_expr(k, in);
    }
    os << ";\n";
  }
  for (size_t o = 0; o < k.outputs.size(); ++o) {
    os << pad
       << store(o, store_value(k.outputs[o], k.body[k.stores[o]].dtype,
                               "v" + std::to_string(k.stores[o])))
       << ";\n";
  }
}

}  // namespace kiln::jit::cuda
