// CPU kernels for fill_ and copy_, and the Meta kernels beside them.

#include "kiln/dispatch.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/copy.h"
#include "runtime/cpu/index_utils.h"
#include "runtime/cpu/loops.h"

namespace kiln::cpu {
namespace {

Tensor fill_kernel(const Tensor& self, const Scalar& value) {
  check_defined(self, "fill_", "self");
  check_convertible(value, self.dtype(), "fill_");
  Tensor out = self;
  TensorIter it("fill_");
  it.output(out).compute_dtype(self.dtype()).shape(self.sizes()).build();
  visit_dtype(self.dtype(), kAllMask, "fill_", [&]<class T>() {
    const T v = value.to<opmath_t<T>>();
    it.for_each([v](char** data, const int64_t* strides, int64_t n) {
      if (strides[0] == sizeof(T)) {
        T* o = reinterpret_cast<T*>(data[0]);
        for (int64_t i = 0; i < n; ++i) o[i] = v;
        return;
      }
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(data[0] + i * strides[0]) = v;
    });
  });
  self.impl()->bump_version();
  return self;
}

// True when writing `dst` could change elements of `src` still to be read:
// views of one storage that check_copy let through (a layout its overlap check
// cannot judge), but not the same view, whose elements each map to themselves.
bool may_overlap(const Tensor& dst, const Tensor& src) {
  const auto& a = dst.impl()->storage();
  const auto& b = src.impl()->storage();
  if (!a || !b || a.get() != b.get()) return false;
  return !(dst.storage_offset() == src.storage_offset() && dst.sizes() == src.sizes() &&
           dst.strides() == src.strides() && dst.dtype() == src.dtype());
}

Tensor copy_kernel(const Tensor& self, const Tensor& src, bool non_blocking) {
  check_copy(self, src);
  KILN_CHECK(src.device().is_cpu(), "[copy_] expected src on cpu for a cpu destination, got ",
             src.device());
  Tensor from = may_overlap(self, src) ? src.clone() : src;
  copy_into(self, from);
  self.impl()->bump_version();
  return self;
}

Tensor meta_fill(const Tensor& self, const Scalar& value) {
  check_defined(self, "fill_", "self");
  check_convertible(value, self.dtype(), "fill_");
  return self;
}
Tensor meta_copy(const Tensor& self, const Tensor& src, bool) {
  check_copy(self, src);  // twins share no storage: Note [Overlaps raised at the call]
  return self;
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("fill_.Scalar", &fill_kernel);
  m.impl("copy_", &copy_kernel);
}

KILN_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("fill_.Scalar", &meta_fill);
  m.impl("copy_", &meta_copy);
}

}  // namespace kiln::cpu
