#pragma once

// CUDA C++ for a fused pointwise group (Note [Kernel IR]). No toolkit header
// is included: 16-bit conversions are inline PTX, math is NVRTC's built-in set.

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "jit/ir/kernel_ir.h"

namespace kiln::jit::cuda {

// Note [CUDA pointwise ABI]
// Operands are outputs then inputs. Each has a layout class, part of the cache
// key: Dense (its elements in iteration order, offset = index), Scalar (one
// element, offset 0) or Strided (offset from the N-d index and its strides).
// The kernel takes one struct by value: the element count, the iteration
// sizes (innermost last, at most kMaxDims), per operand a pointer and, for
// Strided ones, strides in elements, then one 8-byte word per Param (Note
// [Numbers as kernel arguments]; param_word). Offsets are 32-bit when every one,
// plus a grid's stride (up to the element count), stays below 2^31.
constexpr int kMaxDims = 8;
enum class Layout : uint8_t { Dense, Scalar, Strided };

struct PointwiseSpec {
  const PointwiseKernel* kernel;
  std::vector<Layout> layouts;  // outputs then inputs
  int ndim = 1;                 // iteration dims (for Strided operands)
  bool index32 = true;          // every offset fits in 32 bits
  int vec = 1;                  // elements per vector access (Dense/Scalar operands only)
};

// The vector width for `kernel` when its operands allow one: 16 bytes of the
// widest memory dtype, at most 8 elements (Note [CUDA pointwise kernel shape]).
int vector_width(const PointwiseKernel& kernel);

// Note [CUDA integer division by zero]
// The eager kernels raise "ZeroDivisionError" on an integer zero divisor
// (div with a rounding mode, floor_divide, remainder, fmod); a kernel cannot
// raise. A kernel that divides integers therefore takes one more KilnArgs
// field, `i64* err` after the operands: a thread that meets a zero divisor
// (its result there is 0) sets it, and the launcher reads it back after the
// kernel and raises, so neither a one-op nor a fused group returns garbage.
// The read-back synchronizes the stream, which only such kernels pay; while a
// graph is captured the flag is the graph's error slot, read when the
// replay's results are (Note [Device error flags] in op_kernels/op_support.h).
// Reductions take no flag: an integer division joins no reduction's group
// (Note [Fusion groups] in jit/passes/fusion.h).

// The KilnArgs word of Param `in`: a float's bits in the low half for a
// float32 compute dtype, a double's for float64, else the value as an int64
// (bool 0 or 1), converted as a Const's literal would be.
int64_t param_word(const Instr& in);
// The KilnArgs fields of `k`'s Params, named `prefix` + index, in index order.
void declare_params(std::ostream& os, const PointwiseKernel& k, const std::string& prefix);

// The kernel's name: "kiln_pw_<hash>" (the hash covers layouts and index width).
std::string pointwise_name(const PointwiseSpec& spec);
// The complete translation unit.
std::string pointwise_source(const PointwiseSpec& spec);

// Pieces other generators share (reduce_source.cpp): the device prelude with
// the math helpers instr expressions call, and one element of a body.
std::string pointwise_prelude();
// The value of memory dtype `mem` at ptr[off], in its compute type.
std::string device_load(DType mem, const std::string& ptr, const std::string& off);
// Writes `k`'s body for one element to `os`, one `const T vN = ...;` per
// instruction: `load(i)` is input i's value (compute type), `store(o, v)` the
// statement storing `v` (already converted to output o's memory type); Param
// i reads the argument field `params` + i.
void emit_pointwise_body(std::ostream& os, const PointwiseKernel& k, const std::string& pad,
                         const std::string& params, const std::function<std::string(size_t)>& load,
                         const std::function<std::string(size_t, const std::string&)>& store);

}  // namespace kiln::jit::cuda
