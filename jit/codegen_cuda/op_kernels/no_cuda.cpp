// Stub for builds without the CUDA toolkit: no op kernel sources to offer.

#include "jit/codegen_cuda/op_kernels/op_sources.h"
#include "kiln/error.h"

namespace kiln::jit::cuda {

NamedSources op_source_samples() {
  KILN_FAIL("[cuda codegen] kiln was built without CUDA: expected a cpu device, got a cuda one");
}

}  // namespace kiln::jit::cuda
