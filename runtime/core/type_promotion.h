#pragma once

// PyTorch's type promotion and broadcasting rules.

#include <optional>

#include "kiln/tensor.h"

namespace kiln {

// Accumulates operands the way PyTorch's result_type does: dimensioned tensors
// outrank 0-dim tensors, which outrank wrapped numbers, except that a lower
// category of a higher kind (bool < integer < floating) lifts the result.
class ResultType {
 public:
  void add(const Tensor& t);
  void add(const Scalar& s);
  // Throws when nothing was added.
  DType result(const char* op) const;

 private:
  std::optional<DType> dim_;
  std::optional<DType> zero_dim_;
  std::optional<DType> wrapped_;
};

DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, const Scalar& b);
// True when a value of dtype `from` may be written into an out= tensor of `to`
// (PyTorch's can_cast: no floating into integer, no number into bool).
bool can_cast(DType from, DType to);
// add/sub's alpha for operands of common dtype `t`, as PyTorch's: a bool
// alpha only for bool results, an integral one (or bool) for integral
// inputs, and one that converts to `t` without overflow. check_alpha throws "[op] expected ..."
// where alpha_ok is false. The eager kernels (and so the Meta kernel that lazy recording calls),
// the lazy fast path and the CPU decomposition share them.
bool alpha_ok(DType t, const Scalar& alpha);
void check_alpha(const char* op, DType t, const Scalar& alpha);

// The broadcast of two shapes; throws "[op] cannot broadcast sizes [3, 4] and [5] at dim 1".
DimVector broadcast_shapes(IntArrayRef a, IntArrayRef b, const char* op);

}  // namespace kiln
