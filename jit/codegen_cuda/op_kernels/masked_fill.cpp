// masked_fill with a value tensor on CUDA.
//
// Note [CUDA masked_fill value]
// PyTorch reads a 0-dim value tensor as a number (a synchronizing read when it
// is on the device) and rejects one that does not fit self's dtype ("value
// cannot be converted to type int8_t without overflow"). A generated kernel
// cannot raise, so where the value's dtype might not fit (int64 into int8,
// float into an integer...) the pointwise decomposition refuses the node and
// it comes here: the value is read, checked as the CPU checks it, and filled
// as a number through masked_fill.Scalar's generated kernel. A value dtype
// that always fits stays in the fused kernel, with no read back.

#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/cpu/index_utils.h"

namespace kiln::jit::cuda {
namespace {

Scalar fill_value(const char* op, const Tensor& self, const Tensor& value) {
  KILN_CHECK(self.defined() && value.defined(), "[", op,
             "] expected defined self and value tensors, got an undefined one");
  KILN_CHECK(value.dim() == 0, "[", op, "] expected a 0-dim value tensor, got one with ",
             value.dim(), " dims");
  Scalar v = value.item();
  cpu::check_convertible(v, self.dtype(), op);
  return v;
}

Tensor masked_fill_tensor(const Tensor& self, const Tensor& mask, const Tensor& value) {
  return kiln::masked_fill(self, mask, fill_value("masked_fill", self, value));
}

Tensor masked_fill_tensor_(const Tensor& self, const Tensor& mask, const Tensor& value) {
  Tensor s = self;
  kiln::masked_fill_(s, mask, fill_value("masked_fill_", self, value));
  return self;
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("masked_fill.Tensor", &masked_fill_tensor);
  m.impl("masked_fill_.Tensor", &masked_fill_tensor_);
}

}  // namespace kiln::jit::cuda
