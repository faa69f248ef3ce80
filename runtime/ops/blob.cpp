// Tensors over memory the caller provides: from_blob (no copy) and from_data (copy).

#include <cstring>

#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cuda/cuda_runtime.h"

namespace kiln {

Tensor from_blob(void* data, IntArrayRef sizes, IntArrayRef strides, DType dtype,
                 std::function<void(void*)> deleter, Device device) {
  check_dtype("from_blob", "dtype", dtype);
  KILN_CHECK(sizes.size() == strides.size(), "[from_blob] expected as many strides as sizes (",
             sizes.size(), "), got ", strides.size());
  KILN_CHECK(!device.is_meta(), "[from_blob] expected a cpu or cuda device, got meta");
  const int64_t extent = checked_extent(sizes, strides, 0, dtype, "from_blob");
  KILN_CHECK(data != nullptr || extent == 0, "[from_blob] expected a data pointer, got null");
  auto storage = StorageImpl::from_blob(data, static_cast<size_t>(extent) * itemsize(dtype), device,
                                        std::move(deleter));
  return Tensor(
      IntrusivePtr<TensorImpl>::make(std::move(storage), dtype, device, sizes, strides, 0));
}

Tensor from_blob(void* data, IntArrayRef sizes, DType dtype, std::function<void(void*)> deleter,
                 Device device) {
  check_dtype("from_blob", "dtype", dtype);
  checked_bytes_numel(sizes, dtype, "from_blob");  // before the strides are computed
  return from_blob(data, sizes, contiguous_strides(sizes), dtype, std::move(deleter), device);
}

Tensor from_data(const void* data, IntArrayRef sizes, DType dtype, TensorOptions options) {
  check_dtype("from_data", "dtype", dtype);
  if (options.dtype_) check_dtype("from_data", "options.dtype", *options.dtype_);
  int64_t numel = checked_bytes_numel(sizes, dtype, "from_data");
  KILN_CHECK(data != nullptr || numel == 0, "[from_data] expected a data pointer, got null");
  Tensor host = empty_tensor(sizes, dtype, Device::cpu(), "from_data");
  // Fresh memory written, not a value read (Note [Host reads while tracing]).
  if (numel) std::memcpy(host.impl()->storage()->data(), data, host.nbytes());
  Tensor out = host;
  if (options.dtype_ && *options.dtype_ != dtype) out = out.to(*options.dtype_);
  if (!(options.device_ == Device::cpu())) out = out.to(options.device_);
  return out;
}

}  // namespace kiln
