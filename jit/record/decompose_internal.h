#pragma once

// Shared by the decompose*.cpp files only (decompose.h is the interface): the
// argument helpers, the templated decompositions (several files name them and
// compare them by address, so they are defined here), and what each file
// gives the others:
//   decompose.cpp            KernelBuilder, lookup, find_decomposition
//   decompose_pointwise.cpp  the decompositions of both devices, table()
//   decompose_cuda.cpp       the CUDA-only ones, cuda_table()
//   decompose_out.cpp        out= forms and in-place comparisons

#include <string>
#include <unordered_map>
#include <vector>

#include "jit/record/decompose.h"
#include "runtime/core/type_promotion.h"

namespace kiln::jit::decomp {

// The tensor and number arguments of a node, by schema position.
inline const IValue& arg(const Node& n, int i) {
  return n.args[i];
}
inline double number(const Node& n, int i) {
  return arg(n, i).to_scalar().to_double();
}
inline DType out_dtype(const Node& n) {
  return n.outputs.at(0).dtype();
}
inline DType out_compute(const Node& n) {
  return compute_dtype(out_dtype(n));
}

// The dtype the tensor arguments promote to (numbers and 0-dim tensors
// taking part by kind, as in PyTorch).
inline DType common_dtype(const Node& n) {
  ResultType rt;
  for (const IValue& v : n.args) {
    if (v.is_tensor() && v.to_tensor().defined()) rt.add(v.to_tensor());
  }
  return rt.result("fusion");
}

// The dtype the eager kernel computes a comparison or `where` in.
inline DType promoted(const Node& n) {
  return compute_dtype(common_dtype(n));
}

// isnan/isinf/isfinite test the input in its own compute dtype.
template <Prim P>
int32_t d_predicate(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  return b.cast(b.op(P, kBool, v[0]), out_compute(n));
}

// logical_xor is `!=` of the operands' truth values.
template <Prim P>
int32_t d_logical(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  return b.cast(b.op(P, kBool, b.cast(v[0], kBool), b.cast(v[1], kBool)), out_compute(n));
}

template <Prim P>
int32_t d_bitwise(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (is_floating(t)) return -1;
  return b.op(P, t, b.cast(v[0], t), b.cast(v[1], t));
}

// floor_divide/remainder/fmod: integers exactly (Note on FloorDiv in
// kernel_ir.h); floats in float32/float64 only, since the eager kernel rounds
// every step of floor_divide to a 16-bit grid (and remainder/fmod round
// once: those fuse for 16-bit floats too, computed in float32).
template <Prim P>
int32_t d_divmod(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (t == kBool) return -1;
  if (P == Prim::FloorDiv && is_reduced_float(out_dtype(n))) return -1;
  return b.op(P, t, b.cast(v[0], t), b.cast(v[1], t));
}

// self + value * t1 * t2 (or / t2), in that order, as the eager kernel.
// Integers (wrapping through uint64) stay eager.
template <Prim P>
int32_t d_addc(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  if (!is_floating(t)) return -1;
  int32_t x = b.op(Prim::Mul, t, b.param(number(n, 3), t), b.cast(v[1], t));
  x = b.op(P, t, x, b.cast(v[2], t));
  return b.op(Prim::Add, t, b.cast(v[0], t), x);
}

// Operand `i` (value `v`) of a binary op in its compute dtype `t`. On the
// CPU, as the eager kernel (and PyTorch 1.13's CPU TensorIterator), an
// operand of another dtype than a 16-bit float result (a C++ number, a 0-dim
// tensor) is converted to the result's dtype before the op computes in
// float32: x * 1e-8 in float16 multiplies by 0. (PyTorch's CUDA kernels keep
// such a number in float32, and so do kiln's.)
inline int32_t operand(KernelBuilder& b, const Node& n, size_t i, int32_t v, DType t) {
  const int32_t x = b.cast(v, t);
  if (n.device.is_cuda() || i >= n.args.size()) return x;
  const IValue& a = n.args[i];
  if (!a.is_tensor() || !a.to_tensor().defined()) return x;
  const DType common = common_dtype(n);
  if (!is_reduced_float(common) || a.to_tensor().dtype() == common) return x;
  return b.round_to(x, common);
}

// add/sub with alpha: a + alpha * b.
template <bool kSub>
int32_t d_add(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  const Scalar& a = arg(n, 2).to_scalar();
  // The recording checked alpha at the call; a trace built otherwise (a
  // decomposition's own add) is checked here.
  check_alpha(n.op->name().c_str(), common_dtype(n), a);
  double alpha = a.to_double();
  int32_t x = operand(b, n, 0, v[0], t), y = operand(b, n, 1, v[1], t);
  if (alpha != 1.0) {
    // The CPU eager kernel, as PyTorch's: alpha in the 16-bit type it
    // computes for, and alpha * y rounded to it. CUDA's kernels (fused, and
    // eager ones, which are one-node traces) do the same, so that a device
    // gives the answer another gives (PyTorch's CUDA kernels keep alpha in
    // float32 and round once: an inexact alpha moves a cancelling sum there).
    const DType common = common_dtype(n);
    if (is_reduced_float(common)) {
      const auto f = static_cast<float>(alpha);
      alpha = common == kFloat16 ? static_cast<float>(Half(f)) : static_cast<float>(BFloat16(f));
    }
    y = b.op(Prim::Mul, t, y, b.param(alpha, t));
    y = b.round_to(y, common);
  }
  return b.op(kSub ? Prim::Sub : Prim::Add, t, x, y);
}

template <Prim P>
int32_t d_binary(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = out_compute(n);
  // Integer pow is exact repeated multiplication: only the CUDA generator
  // has it (the CPU one refuses integer kernels); bool is refused eagerly.
  if (P == Prim::Pow && t == kBool) return -1;
  return b.op(P, t, operand(b, n, 0, v[0], t), operand(b, n, 1, v[1], t));
}

template <Prim P>
int32_t d_compare(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  DType t = promoted(n);
  return b.op(P, kBool, b.cast(v[0], t), b.cast(v[1], t));
}

// decompose_pointwise.cpp
const std::unordered_map<std::string, Decomposition>& table();
int32_t d_square(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);
int32_t d_sign(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);
int32_t d_erfc(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);
int32_t d_logical_not(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);
int32_t d_bitwise_not(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);
int32_t d_where(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);
int32_t d_pow_scalar(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);
int32_t d_clamp(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);
int32_t d_identity(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);
int32_t d_to_copy(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);

// decompose_cuda.cpp (Note [CUDA-only decompositions])
const std::unordered_map<std::string, Decomposition>& cuda_table();
int32_t d_div_mode(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);
int32_t d_clamp_tensor(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);
int32_t d_masked_fill(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);
int32_t d_nan_to_num(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);

// decompose_out.cpp (Note [Out forms])
struct OutForm {
  Decomposition functional = nullptr;
  bool to_float = false;  // integer inputs give a float32 result
};

OutForm out_form(const OperatorEntry* op);
DType functional_dtype(const Node& n, const OutForm& f);
int32_t d_out_form(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v);

// decompose.cpp
Decomposition lookup(const std::string& name, bool cuda);

}  // namespace kiln::jit::decomp
