// The generated kernel behind device-to-device copy_ where memory copies do
// not reach (Note [Device copies through generated kernels]): one load, one
// conversion, one store, through the pointwise generator and its caches.

#include "jit/codegen_cuda/launch_cuda.h"
#include "jit/record/decompose.h"
#include "runtime/core/hooks.h"

namespace kiln::jit::cuda {
namespace {

void generated_copy(const Tensor& dst, const Tensor& src) {
  KernelBuilder b;
  const int32_t v = b.cast(b.load(0, src.dtype()), compute_dtype(dst.dtype()));
  FusedGroup g;
  g.kernel = b.kernel();
  g.kernel.inputs = {src.dtype()};
  g.kernel.outputs = {dst.dtype()};
  g.kernel.stores = {v};
  g.shape = DimVector(dst.sizes());
  g.inputs = {src.expand(dst.sizes())};
  g.outputs = {dst};
  KILN_CHECK(run_pointwise_cuda(g), "[copy_] the generated copy kernel cannot take ", src.dtype(),
             " ", src.sizes(), " into ", dst.dtype(), " ", dst.sizes(), " on ", dst.device());
}

[[maybe_unused]] const bool g_registered = [] {
  kiln::cuda::set_device_copy_kernel(&generated_copy);
  return true;
}();

}  // namespace
}  // namespace kiln::jit::cuda
