// index_add and one_hot: composites of scatter_add and scatter, so that every
// device and mode has them as those ops are (CPU and CUDA kernels, lazy
// recording, index checks in every mode: README, Compiled functions).
//
// index_add(self, dim, index, source, alpha) adds alpha * source's slice i
// into self's slice index[i]: scatter_add of alpha * source with the index
// broadcast over source's shape. Repeated indices accumulate in index order,
// as scatter_add's do (Note [Scatter reductions]); alpha * source is rounded
// to a 16-bit self's dtype first, as PyTorch's add_ with alpha. An index
// value out of range raises naming index_add, except from a lazy trace or a
// compiled plan that computed the index (Note [Composite ops name themselves]).

#include <cstdint>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/composite_errors.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/index_utils.h"

namespace kiln::cpu {
namespace {

// PyTorch's index_add checks that need no data; returns the wrapped dim.
int64_t check_index_add(const char* op, const Tensor& self, int64_t dim, const Tensor& index,
                        const Tensor& source, const Scalar& alpha) {
  check_defined(self, op, "self");
  check_defined(index, op, "index");
  check_defined(source, op, "source");
  dim = wrap_dim(dim, self.dim(), op);
  KILN_CHECK(index.dim() < 2, "[", op, "] expected a 0-dim or 1-D index, got one with ",
             index.dim(), " dims");
  KILN_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, "[", op,
             "] expected an index of dtype int64 or int32, got ", index.dtype());
  KILN_CHECK(self.dtype() == source.dtype(), "[", op, "] expected source of dtype ", self.dtype(),
             " like self, got ", source.dtype());
  KILN_CHECK(source.dim() == self.dim() || (source.dim() <= 1 && self.dim() <= 1), "[", op,
             "] expected source with as many dims as self (", self.dim(), "), got ", source.dim());
  const DimVector self_slice = self.dim() > 0 ? drop_dim(self.sizes(), dim) : DimVector();
  const DimVector src_slice = source.dim() > 0 ? drop_dim(source.sizes(), dim) : DimVector();
  KILN_CHECK(self_slice == src_slice, "[", op,
             "] expected source and self to have the same slice shape, got self slice ", self_slice,
             " at dim ", dim, " and source slice ", src_slice);
  const int64_t n = source.dim() > 0 ? source.sizes()[dim] : 1;
  KILN_CHECK(index.numel() == n, "[", op, "] expected ", n, " indices (source.size(", dim,
             ")), got ", index.numel());
  // As add's alpha: a value self's dtype cannot hold (1000 for int8, 1e20
  // or NaN for int64, 1e6 for float16) is refused, not wrapped or saturated.
  check_convertible(alpha, self.dtype(), op);
  return dim;
}

Tensor index_add_impl(const char* op, bool in_place, const Tensor& self, int64_t dim,
                      const Tensor& index, const Tensor& source, const Scalar& alpha) {
  dim = check_index_add(op, self, dim, index, source, alpha);
  if (auto v = host_indices(index)) check_indices(*v, self.dim() > 0 ? self.size(dim) : 1, dim, op);
  if (in_place) {
    check_no_internal_overlap(self, op);
    check_no_overlap(self, index, op);
    check_no_overlap(self, source, op);
  }
  // Everything as at least 1-D: a 0-dim self or source is one slice.
  Tensor dst = self.dim() == 0 ? self.view({1}) : self;
  Tensor src = source.dim() == 0 ? source.view({1}) : source;
  if (src.dim() < dst.dim()) src = src.view(dst.sizes());  // both have one element
  Tensor idx = index.dtype() == kInt64 ? index : index.to(kInt64);
  DimVector shape(static_cast<size_t>(src.dim()), 1);
  shape[static_cast<size_t>(dim)] = idx.numel();
  idx = idx.reshape(shape).expand(src.sizes());
  // alpha in self's dtype, as PyTorch converts it: truncated for integers
  // (2.5 adds twice), true or false for bool.
  if (self.dtype() == kBool) {
    if (!alpha.to_bool()) src = kiln::zeros_like(src);
  } else if (is_floating(self.dtype())) {
    if (alpha.to_double() != 1.0) src = kiln::mul(src, alpha);
  } else if (alpha.to_int() != 1) {
    src = kiln::mul(src, Scalar(alpha.to_int()));
  }
  if (in_place) {
    rename_errors(op, "scatter_add_", [&] { return kiln::scatter_add_(dst, dim, idx, src); });
    return self;
  }
  Tensor out =
      rename_errors(op, "scatter_add", [&] { return kiln::scatter_add(dst, dim, idx, src); });
  return self.dim() == 0 ? out.view({}) : out;
}

Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                 const Scalar& alpha) {
  return index_add_impl("index_add", false, self, dim, index, source, alpha);
}
Tensor index_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                  const Scalar& alpha) {
  return index_add_impl("index_add_", true, self, dim, index, source, alpha);
}

// Note [one_hot]
// An int64 tensor of self's sizes + [num_classes], 1 at each index: zeros
// with ones scattered in, so an index outside [0, num_classes) raises in
// every mode: here where self is on the host, else through scatter's index
// check, renamed (Note [Composite ops name themselves]). num_classes = -1 takes the
// largest index + 1, read on the host (a flush in lazy mode, a graph break in
// a compiled function: README), as PyTorch reads it; that read also refuses a
// negative index by name. An empty self needs num_classes given.
Tensor one_hot(const Tensor& self, int64_t num_classes) {
  const char* op = "one_hot";
  check_defined(self, op, "self");
  KILN_CHECK(self.dtype() == kInt64, "[one_hot] expected self (the class indices) of dtype int64, ",
             "got ", self.dtype());
  KILN_CHECK(num_classes == -1 || num_classes >= 1, "[one_hot] expected num_classes >= 1 or -1, ",
             "got ", num_classes);
  DimVector shape(self.sizes());
  if (self.numel() == 0) {
    KILN_CHECK(num_classes != -1,
               "[one_hot] expected num_classes for an empty self (it cannot be inferred), got -1");
    shape.push_back(num_classes);
    return rename_errors(op, "zeros", [&] {
      return kiln::zeros(shape, TensorOptions(kInt64).device(self.device()));
    });
  }
  if (num_classes == -1) {
    const int64_t lo = kiln::min(self).item<int64_t>();
    KILN_CHECK(lo >= 0, "[one_hot] expected class indices >= 0, got ", lo);
    const int64_t hi = kiln::max(self).item<int64_t>();
    KILN_CHECK(hi < INT64_MAX, "[one_hot] expected a largest class index below 2^63 - 1 ",
               "(num_classes is it + 1), got ", hi);
    num_classes = hi + 1;
  } else if (auto v = host_indices(self)) {
    for (int64_t c : *v) {
      KILN_CHECK(c >= 0 && c < num_classes, "[one_hot] expected class indices in [0, ", num_classes,
                 ") (num_classes ", num_classes, "), got ", c);
    }
  }
  shape.push_back(num_classes);
  // A num_classes too large for memory is refused by zeros, as one_hot.
  Tensor out = rename_errors(
      op, "zeros", [&] { return kiln::zeros(shape, TensorOptions(kInt64).device(self.device())); });
  return rename_errors(op, "scatter", [&] {
    return kiln::scatter(out, -1, self.unsqueeze(-1), Scalar(int64_t{1}));
  });
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("index_add", &index_add);
  m.impl("index_add_", &index_add_);
  m.impl("one_hot", &one_hot);
}

}  // namespace kiln::cpu
