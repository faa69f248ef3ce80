// Factories and copies that work the same on every device: they allocate with
// the device's allocator and fill through the device's fill_/copy_ kernels.

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/preserved_layout.h"
#include "runtime/core/tensor_utils.h"

namespace kiln {
namespace {

using OptD = std::optional<DType>;
using OptDev = std::optional<Device>;

Device device_or_cpu(OptDev d) {
  return d.value_or(Device::cpu());
}

// Note [Uninitialized bools]
// Memory fresh from an allocator holds any bytes, and a bool element of any
// byte but 0 or 1 is undefined behaviour to load as C++'s bool (kiln's
// kernels load bools as bool; the sanitizer build stops at the load). So
// empty and empty_strided hand out bool tensors zeroed (false): a bool
// tensor's bytes are 0 or 1 wherever it came from. Other dtypes stay
// uninitialized, as in PyTorch.
Tensor zeroed_if_bool(Tensor t) {
  if (t.dtype() == kBool && t.numel() > 0 && !t.device().is_meta()) kiln::fill_(t, false);
  return t;
}

Tensor empty_kernel(IntArrayRef size, OptD dtype, OptDev device) {
  return zeroed_if_bool(
      empty_tensor(size, dtype.value_or(kFloat32), device_or_cpu(device), "empty"));
}

Tensor empty_strided_kernel(IntArrayRef size, IntArrayRef stride, OptD dtype, OptDev device) {
  return zeroed_if_bool(empty_strided_tensor(size, stride, dtype.value_or(kFloat32),
                                             device_or_cpu(device), "empty_strided"));
}

// PyTorch infers bool, int64 or the default float from the fill value.
DType full_dtype(const Scalar& value, OptD dtype) {
  return dtype ? *dtype : value.is_floating_point() ? kFloat32 : value.dtype();
}

// full, zeros, ones and scalar_tensor: refuses a value the dtype cannot hold
// before allocating ("[full] value 300 cannot be converted to int8 without
// overflow", as PyTorch's fill_ refuses it).
Tensor filled(IntArrayRef size, const Scalar& value, DType dtype, Device device, const char* op) {
  check_convertible(value, dtype, op);
  Tensor out = empty_tensor(size, dtype, device, op);
  fill_(out, value);
  return out;
}

Tensor full_kernel(IntArrayRef size, const Scalar& value, OptD dtype, OptDev device) {
  return filled(size, value, full_dtype(value, dtype), device_or_cpu(device), "full");
}

Tensor zeros_kernel(IntArrayRef size, OptD dtype, OptDev device) {
  return filled(size, 0, dtype.value_or(kFloat32), device_or_cpu(device), "zeros");
}

Tensor ones_kernel(IntArrayRef size, OptD dtype, OptDev device) {
  return filled(size, 1, dtype.value_or(kFloat32), device_or_cpu(device), "ones");
}

// scalar_tensor's dtype is float32 unless given, whatever the value (as
// PyTorch's: torch.scalar_tensor(3) is a float); full infers it instead.
Tensor scalar_tensor_kernel(const Scalar& s, OptD dtype, OptDev device) {
  return filled({}, s, dtype.value_or(kFloat32), device_or_cpu(device), "scalar_tensor");
}

// _to_copy and clone keep self's layout (Note [Preserved layout]). To the
// meta device there is nothing to copy (as PyTorch's x.to("meta")).
Tensor to_copy_kernel(const Tensor& self, OptD dtype, OptDev device, bool non_blocking) {
  check_defined(self, "_to_copy", "self");
  Tensor out = empty_like_preserve(self, dtype.value_or(self.dtype()),
                                   device.value_or(self.device()), "_to_copy");
  if (!out.device().is_meta()) copy_(out, self);
  return out;
}

Tensor clone_kernel(const Tensor& self) {
  check_defined(self, "clone", "self");
  Tensor out = empty_like_preserve(self, self.dtype(), self.device(), "clone");
  copy_(out, self);
  return out;
}

Tensor contiguous_kernel(const Tensor& self) {
  if (self.is_contiguous()) return self;
  Tensor out = empty(self.sizes(), TensorOptions(self.dtype()).device(self.device()));
  copy_(out, self);
  return out;
}

void check_fill_value(const Tensor& self, const Tensor& value) {
  check_defined(self, "fill_", "self");
  check_defined(value, "fill_", "value");
  KILN_CHECK(value.dim() == 0, "[fill_] expected a 0-dim value tensor, got one with ", value.dim(),
             " dims");
}

// Composite, so that in lazy mode the value is read (and checked) at the call
// and the fill is recorded as fill_.Scalar. A meta value has no number: the
// meta self only has its geometry checked.
Tensor fill_tensor_kernel(const Tensor& self, const Tensor& value) {
  check_fill_value(self, value);
  if (value.is_meta()) return self;
  Tensor s = self;
  fill_(s, value.item());
  return self;
}

Tensor zero_kernel(const Tensor& self) {
  check_defined(self, "zero_", "self");  // not fill_'s name (Note [Composite ops name themselves])
  Tensor s = self;
  fill_(s, 0);
  return self;
}

// Meta kernels: the same geometry and dtype, on the meta device whatever device
// the call names (the lazy tracer asks for shapes this way).
Tensor empty_meta(IntArrayRef size, OptD dtype, OptDev) {
  return empty_tensor(size, dtype.value_or(kFloat32), Device::meta(), "empty");
}
Tensor empty_strided_meta(IntArrayRef size, IntArrayRef stride, OptD dtype, OptDev) {
  return empty_strided_tensor(size, stride, dtype.value_or(kFloat32), Device::meta(),
                              "empty_strided");
}
Tensor full_meta(IntArrayRef size, const Scalar& value, OptD dtype, OptDev) {
  const DType t = full_dtype(value, dtype);
  check_convertible(value, t, "full");
  return empty_tensor(size, t, Device::meta(), "full");
}
Tensor zeros_meta(IntArrayRef size, OptD dtype, OptDev) {
  return empty_tensor(size, dtype.value_or(kFloat32), Device::meta(), "zeros");
}
Tensor ones_meta(IntArrayRef size, OptD dtype, OptDev) {
  return empty_tensor(size, dtype.value_or(kFloat32), Device::meta(), "ones");
}
Tensor scalar_tensor_meta(const Scalar& s, OptD dtype, OptDev) {
  const DType t = dtype.value_or(kFloat32);
  check_convertible(s, t, "scalar_tensor");
  return empty_tensor({}, t, Device::meta(), "scalar_tensor");
}
Tensor to_copy_meta(const Tensor& self, OptD dtype, OptDev, bool) {
  return empty_like_preserve(self, dtype.value_or(self.dtype()), Device::meta(), "_to_copy");
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("empty", &empty_meta);
  m.impl("empty_strided", &empty_strided_meta);
  m.impl("zeros", &zeros_meta);
  m.impl("ones", &ones_meta);
  m.impl("full", &full_meta);
  m.impl("scalar_tensor", &scalar_tensor_meta);
  m.impl("_to_copy", &to_copy_meta);
}

// contiguous may return its argument itself, so it never becomes a trace node.
KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("contiguous", &contiguous_kernel);
  m.impl("fill_.Tensor", &fill_tensor_kernel);
}

KILN_LIBRARY_IMPL(kiln, AllBackends, m) {
  m.impl("empty", &empty_kernel);
  m.impl("empty_strided", &empty_strided_kernel);
  m.impl("zeros", &zeros_kernel);
  m.impl("ones", &ones_kernel);
  m.impl("full", &full_kernel);
  m.impl("scalar_tensor", &scalar_tensor_kernel);
  m.impl("_to_copy", &to_copy_kernel);
  m.impl("clone", &clone_kernel);
  m.impl("zero_", &zero_kernel);
}

}  // namespace kiln
