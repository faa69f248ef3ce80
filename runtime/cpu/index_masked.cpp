// masked_fill: writes a number wherever a bool mask is set. In place, the mask
// broadcasts to self (never self to the mask); the functional form, as
// PyTorch's, broadcasts both and returns a fresh contiguous tensor.

#include "kiln/dispatch.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/core/type_promotion.h"
#include "runtime/cpu/copy.h"
#include "runtime/cpu/index_utils.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

void check_mask(const char* op, const Tensor& self, const Tensor& mask, const Scalar& value) {
  check_defined(self, op, "self");
  check_defined(mask, op, "mask");
  KILN_CHECK(mask.dtype() == kBool, "[", op, "] expected a mask of dtype bool, got ", mask.dtype());
  check_convertible(value, self.dtype(), op);
}

// Fills `self` where `mask` (broadcast to self's shape) is true.
void fill_where(const char* op, const Tensor& self, const Tensor& mask, const Scalar& value) {
  Tensor out = self;
  TensorIter it(op);
  // PyTorch 1.13 writes masked_fill_ through expanded (stride-0) targets too
  // (a deprecation warning, no error; the oracle has such a case): every
  // alias receives the same value, so the order of writes cannot matter.
  it.output(out).input(mask).keep_input_dtypes().compute_dtype(self.dtype()).in_place();
  it.allow_output_overlap().build();
  if (it.is_meta()) return;
  visit_dtype(self.dtype(), kAllMask, op, [&]<class T>() {
    const T v = value.to<opmath_t<T>>();
    it.for_each([v](char** data, const int64_t* strides, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        if (*reinterpret_cast<const bool*>(data[1] + i * strides[1])) {
          *reinterpret_cast<T*>(data[0] + i * strides[0]) = v;
        }
      }
    });
  });
  self.impl()->bump_version();
}

Tensor masked_fill_scalar_(const Tensor& self, const Tensor& mask, const Scalar& value) {
  check_mask("masked_fill_", self, mask, value);
  fill_where("masked_fill_", self, mask, value);
  return self;
}

Tensor masked_fill_scalar(const Tensor& self, const Tensor& mask, const Scalar& value) {
  const char* op = "masked_fill";
  check_defined(self, op, "self");
  check_defined(mask, op, "mask");
  DimVector shape = broadcast_shapes(self.sizes(), mask.sizes(), op);
  check_mask(op, self, mask, value);
  const bool meta = self.is_meta() || mask.is_meta();
  Tensor out = empty_tensor(shape, self.dtype(), meta ? Device::meta() : Device::cpu());
  if (meta) return out;
  check_cpu(self, op, "self");
  copy_into(out, self);
  fill_where(op, out, mask, value);
  return out;
}

// The number held by a 0-dim value tensor (none for a meta one: nothing is written).
Scalar value_of(const char* op, const Tensor& value) {
  check_defined(value, op, "value");
  KILN_CHECK(value.dim() == 0, "[", op, "] expected a 0-dim value tensor, got one with ",
             value.dim(), " dims");
  return value.is_meta() ? Scalar(0) : value.item();
}

Tensor masked_fill_tensor_(const Tensor& self, const Tensor& mask, const Tensor& value) {
  return masked_fill_scalar_(self, mask, value_of("masked_fill_", value));
}

Tensor masked_fill_tensor(const Tensor& self, const Tensor& mask, const Tensor& value) {
  return masked_fill_scalar(self, mask, value_of("masked_fill", value));
}

void register_kernels(Library& m) {
  m.impl("masked_fill.Scalar", &masked_fill_scalar);
  m.impl("masked_fill.Tensor", &masked_fill_tensor);
  m.impl("masked_fill_.Scalar", &masked_fill_scalar_);
  m.impl("masked_fill_.Tensor", &masked_fill_tensor_);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
