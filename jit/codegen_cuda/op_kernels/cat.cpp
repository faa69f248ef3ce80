// cat on CUDA: one generated copy kernel per input (converting to the
// promoted dtype) into its slice of the result. Shapes, dtypes and errors come
// from the Meta kernel, including Note [Legacy cat skipping].

#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::jit::cuda {
namespace {

Tensor cat(TensorList tensors, int64_t dim) {
  const std::vector<Tensor> metas = meta_of(tensors);
  Tensor meta = kiln::cat(metas, dim);
  KILN_CHECK(!tensors.empty(), "[cat] expected a non-empty list of tensors");
  Device device = tensors[0].device();
  for (const Tensor& t : tensors) {
    if (t.is_cuda()) device = t.device();
  }
  for (const Tensor& t : tensors) check_device(t, device, "cat", "tensors");
  Tensor out = empty_tensor(meta.sizes(), meta.dtype(), device);
  if (out.numel() == 0) return out;
  const int64_t d = wrap_dim(dim, out.dim(), "cat");
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (t.dim() == 1 && t.numel() == 0) continue;  // Note [Legacy cat skipping]
    const int64_t n = t.size(d);
    if (n > 0 && t.numel() > 0) {
      DimVector sizes(out.sizes());
      sizes[d] = n;
      Tensor slice =
          make_view(out, sizes, out.strides(), out.storage_offset() + offset * out.stride(d));
      copy_into_cuda(slice, t);
    }
    offset += n;
  }
  out.impl()->bump_version();
  return out;
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("cat", &cat);
}

}  // namespace kiln::jit::cuda
