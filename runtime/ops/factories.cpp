// Factories and copies that work the same on every device: they allocate with
// the device's allocator and fill through the device's fill_/copy_ kernels.

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"

namespace kiln {
namespace {

using OptD = std::optional<DType>;
using OptDev = std::optional<Device>;

Device device_or_cpu(OptDev d) {
  return d.value_or(Device::cpu());
}

Tensor empty_kernel(IntArrayRef size, OptD dtype, OptDev device) {
  checked_numel(size, "empty");
  return empty_tensor(size, dtype.value_or(kFloat32), device_or_cpu(device));
}

Tensor empty_strided_kernel(IntArrayRef size, IntArrayRef stride, OptD dtype, OptDev device) {
  checked_numel(size, "empty_strided");
  return empty_strided_tensor(size, stride, dtype.value_or(kFloat32), device_or_cpu(device));
}

Tensor full_kernel(IntArrayRef size, const Scalar& value, OptD dtype, OptDev device) {
  // PyTorch infers bool, int64 or the default float from the fill value.
  DType t = dtype ? *dtype : value.is_floating_point() ? kFloat32 : value.dtype();
  Tensor out = empty_kernel(size, t, device);
  fill_(out, value);
  return out;
}

Tensor zeros_kernel(IntArrayRef size, OptD dtype, OptDev device) {
  return full_kernel(size, 0, dtype.value_or(kFloat32), device);
}

Tensor ones_kernel(IntArrayRef size, OptD dtype, OptDev device) {
  return full_kernel(size, 1, dtype.value_or(kFloat32), device);
}

Tensor scalar_tensor_kernel(const Scalar& s, OptD dtype, OptDev device) {
  return full_kernel({}, s, dtype.value_or(s.is_floating_point() ? kFloat32 : s.dtype()), device);
}

// Note [Preserved layout]
// Copies keep the source's strides when they describe a dense, non-overlapping
// layout (a transposed matrix stays transposed), else come out row-major,
// as PyTorch's memory_format=preserve does.
Tensor empty_like_preserve(const Tensor& self, DType dtype, Device device) {
  IntArrayRef sizes = self.sizes(), strides = self.strides();
  const int64_t nd = self.dim();
  DimVector perm(nd);
  for (int64_t i = 0; i < nd; ++i) perm[i] = i;
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  int64_t expected = 1;
  bool dense = true;
  for (int64_t i = nd; i-- > 0;) {
    int64_t d = perm[i];
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) {
      dense = false;
      break;
    }
    expected *= sizes[d];
  }
  if (!dense || self.is_contiguous()) return empty_tensor(sizes, dtype, device);
  DimVector out_strides(nd);
  int64_t s = 1;
  for (int64_t i = nd; i-- > 0;) {
    out_strides[perm[i]] = s;
    s *= std::max<int64_t>(sizes[perm[i]], 1);
  }
  return empty_strided_tensor(sizes, out_strides, dtype, device);
}

Tensor to_copy_kernel(const Tensor& self, OptD dtype, OptDev device, bool non_blocking) {
  Tensor out =
      empty_like_preserve(self, dtype.value_or(self.dtype()), device.value_or(self.device()));
  copy_(out, self);
  return out;
}

Tensor clone_kernel(const Tensor& self) {
  Tensor out = empty_like_preserve(self, self.dtype(), self.device());
  copy_(out, self);
  return out;
}

Tensor contiguous_kernel(const Tensor& self) {
  if (self.is_contiguous()) return self;
  Tensor out = empty(self.sizes(), TensorOptions(self.dtype()).device(self.device()));
  copy_(out, self);
  return out;
}

Tensor fill_tensor_kernel(const Tensor& self, const Tensor& value) {
  KILN_CHECK(value.dim() == 0, "[fill_] expected a 0-dim value tensor, got one with ", value.dim(),
             " dims");
  Tensor s = self;
  fill_(s, value.item());
  return self;
}

Tensor zero_kernel(const Tensor& self) {
  Tensor s = self;
  fill_(s, 0);
  return self;
}

// Meta kernels: the same geometry and dtype, on the meta device whatever device
// the call names (the lazy tracer asks for shapes this way).
Tensor empty_meta(IntArrayRef size, OptD dtype, OptDev) {
  checked_numel(size, "empty");
  return empty_tensor(size, dtype.value_or(kFloat32), Device::meta());
}
Tensor empty_strided_meta(IntArrayRef size, IntArrayRef stride, OptD dtype, OptDev) {
  checked_numel(size, "empty_strided");
  return empty_strided_tensor(size, stride, dtype.value_or(kFloat32), Device::meta());
}
Tensor full_meta(IntArrayRef size, const Scalar& value, OptD dtype, OptDev) {
  DType t = dtype ? *dtype : value.is_floating_point() ? kFloat32 : value.dtype();
  return empty_meta(size, t, std::nullopt);
}
Tensor zeros_meta(IntArrayRef size, OptD dtype, OptDev) {
  return empty_meta(size, dtype, std::nullopt);
}
Tensor scalar_tensor_meta(const Scalar& s, OptD dtype, OptDev) {
  return empty_meta({}, dtype.value_or(s.is_floating_point() ? kFloat32 : s.dtype()), std::nullopt);
}
Tensor to_copy_meta(const Tensor& self, OptD dtype, OptDev, bool) {
  return empty_like_preserve(self, dtype.value_or(self.dtype()), Device::meta());
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("empty", &empty_meta);
  m.impl("empty_strided", &empty_strided_meta);
  m.impl("zeros", &zeros_meta);
  m.impl("ones", &zeros_meta);
  m.impl("full", &full_meta);
  m.impl("scalar_tensor", &scalar_tensor_meta);
  m.impl("_to_copy", &to_copy_meta);
}

// contiguous may return its argument itself, so it never becomes a trace node.
KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("contiguous", &contiguous_kernel);
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
  m.impl("fill_.Tensor", &fill_tensor_kernel);
  m.impl("zero_", &zero_kernel);
}

}  // namespace kiln
