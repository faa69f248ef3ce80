#pragma once

// Note [Kernel IR]
// A fused pointwise group, as both code generators (asmjit, NVRTC) consume it:
// a straight-line SSA body over one element, with loads from the group's
// inputs, constants, primitive math, and stores to its outputs. Sizes and
// strides are not part of it (they are launch arguments), so one compiled
// kernel serves every shape with the same structure and layout class.
// Arithmetic happens in the value's compute dtype (float32 for 16-bit floats);
// loads and stores convert from and to the memory dtypes. A node whose result
// is a 16-bit float rounds it to that grid (RoundF16/RoundBF16), as the eager
// kernel's store would: fused results then track eager ones closely, also
// through discontinuous ops (floor, round, comparisons) downstream.

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln::jit {

enum class Prim : uint8_t {
  Load,   // input `operand`
  Const,  // `imm`
  // unary
  Neg,
  Abs,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Sin,
  Cos,
  Tanh,
  Sigmoid,
  Relu,
  Erf,
  Floor,
  Ceil,
  Trunc,
  Round,
  GeluErf,
  GeluTanh,
  Silu,
  Expm1,
  Log1p,
  LogicalNot,
  Cast,
  // a float32 value rounded to the float16 / bfloat16 grid (it stays float32)
  RoundF16,
  RoundBF16,
  // Note [Prims without CPU code]: from Asin to BitNot, from Atan2 to BitXor
  // and Erfc only the CUDA generator has code; cpu_supports refuses them, so
  // a CPU group holding one runs node by node through the eager kernels.
  Asin,
  Acos,
  Atan,
  Sinh,
  Cosh,
  Tan,
  Exp2,
  Log2,
  Log10,
  Sign,      // (0 < x) - (x < 0): NaN gives 0
  Frac,      // x - trunc(x)
  IsNan,     // bool result; false for integers
  IsInf,     // bool result; false for integers
  IsFinite,  // bool result; true for integers
  BitNot,    // integers and bool (logical not)
  // binary
  Add,
  Sub,
  Mul,
  Div,
  Max,
  Min,
  Pow,
  Atan2,
  // Integer FloorDiv/Remainder/Fmod follow PyTorch (floor; the divisor's sign;
  // the dividend's sign; INT_MIN / -1 wraps); a zero divisor, which the eager
  // kernels reject, gives 0 and sets the kernel's error flag (Note [CUDA
  // integer division by zero]). Floating FloorDiv is PyTorch's formula for
  // float32/float64 values. Integer Div truncates (div's "trunc" mode) and
  // integer Pow is exact repeated multiplication; only the CUDA generator
  // meets those (the CPU one has no integer kernels).
  FloorDiv,
  Remainder,
  Fmod,
  BitAnd,  // integers and bool
  BitOr,
  BitXor,
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  LogicalAnd,
  LogicalOr,
  // ternary
  Where,
  // Appended so that the values (and kernel hashes) of the Prims above stay
  // put; CUDA only (Note [Prims without CPU code]).
  Erfc,  // unary
  // A number the kernel takes at launch (Note [Numbers as kernel arguments]):
  // `imm` holds this group's value, `operand` the argument's index.
  Param,
};

const char* prim_name(Prim p);
int prim_arity(Prim p);

struct Instr {
  Prim op;
  DType dtype;     // the result's compute dtype (float32, float64, int64, bool, ...)
  int32_t a = -1;  // operands: earlier instruction indices
  int32_t b = -1;
  int32_t c = -1;
  int32_t operand = -1;  // Load: input index; Param: argument index
  double imm = 0;        // Const, Param
};

// Note [Numbers as kernel arguments]
// A number a program passes to an op (`x * s`, `clamp(x, lo, hi)`,
// `leaky_relu(x, slope)`, `masked_fill(m, v)`) becomes a Param, not a Const:
// a kernel argument, read at launch from the group's own instruction, so the
// kernel's key (and its CUDA name) leaves the value out. A server that scales
// by a per-request temperature, or a loop over time steps, then compiles one
// kernel for all values, where a Const per value compiled (and kept) a kernel
// per value: an NVRTC compile of tens of milliseconds on CUDA, about a KB of
// machine code on the CPU. Structure may still depend on a value where the
// math does (pow's exponent picks sqrt, a multiply or pow: its Consts stay;
// a NaN clamp bound drops the clamp; alpha == 1 drops the multiply): a few
// kernels per op, not one per value. Consts remain for the numbers of the
// formulas themselves (gelu's 0.5, hardsigmoid's 3 and 6). Conversions of a
// Param (a cast, rounding to a 16-bit grid) are applied to the value when
// the group is built and give a new Param, so the kernel does the same
// arithmetic on every value. A kernel takes at most kMaxParams; numbers past
// them are Consts (a group of more than 32 numbers is rare, and the limit
// keeps CUDA's argument struct small). A reduction group's prologue and epilogue take
// theirs the same way (on CUDA after the operands, the prologue's first; on
// the CPU in each CpuRun), as its eps already was.

constexpr int kMaxParams = 32;

struct PointwiseKernel {
  std::vector<DType> inputs;    // memory dtypes of the inputs
  std::vector<DType> outputs;   // memory dtypes of the outputs
  std::vector<int32_t> stores;  // per output, the instruction whose value it stores
  std::vector<Instr> body;

  // Drops instructions no store depends on and renumbers the rest (in order).
  void compact();
  // A hash of the structure (ops, dtypes, wiring); equal kernels hash equal.
  uint64_t hash() const;
  // One line per instruction: "%3 = mul f32 %1, %2".
  std::string str() const;
  // The structure and constants as bytes: a cache key that is cheap to build
  // (no formatting) and exact (str() rounds constants to 6 digits). Params'
  // values are not part of it (nor of hash()).
  std::string key() const;
  // The number of Params (their `operand`s are 0 .. param_count() - 1).
  int param_count() const;
};

// An integer Div, FloorDiv, Remainder or Fmod: it may meet a zero divisor,
// which only a pointwise kernel reports (Note [CUDA integer division by zero]).
bool is_integer_division(const Instr& in);
bool divides_integers(const PointwiseKernel& k);

// The dtype arithmetic happens in for values stored as `t`.
constexpr DType compute_dtype(DType t) {
  return is_reduced_float(t) ? kFloat32 : t;
}

}  // namespace kiln::jit
