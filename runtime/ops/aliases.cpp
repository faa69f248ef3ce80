// Ops that PyTorch spells two ways, under their second spelling: max(a, b)
// and min(a, b) (maximum and minimum), and narrow with a tensor start. Each
// is a Composite that forwards, so lazy traces record (and fuse) the op it
// forwards to. var / std with unbiased= live beside var.correction
// (runtime/cpu/reduce_stats.cpp).

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"

namespace kiln {
namespace {

Tensor max_other(const Tensor& self, const Tensor& other) {
  return kiln::maximum(self, other);
}
Tensor min_other(const Tensor& self, const Tensor& other) {
  return kiln::minimum(self, other);
}
Tensor max_out(const Tensor& self, const Tensor& other, const Tensor& out) {
  Tensor o = out;
  return kiln::maximum_out(o, self, other);
}
Tensor min_out(const Tensor& self, const Tensor& other, const Tensor& out) {
  Tensor o = out;
  return kiln::minimum_out(o, self, other);
}

// The start's value decides the view's offset, so it is read here (a pending
// start is computed first).
Tensor narrow_tensor(const Tensor& self, int64_t dim, const Tensor& start, int64_t length) {
  check_defined(start, "narrow", "start");
  KILN_CHECK(start.dim() == 0 && is_integral(start.dtype(), /*include_bool=*/false),
             "[narrow] expected start to be a 0-dim integer tensor, got a ", start.dim(),
             "-dim tensor of dtype ", start.dtype());
  return self.narrow(dim, start.item<int64_t>(), length);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("max.other", &max_other);
  m.impl("min.other", &min_other);
  m.impl("max.out", &max_out);
  m.impl("min.out", &min_out);
  m.impl("narrow.Tensor", &narrow_tensor);
}

}  // namespace kiln
