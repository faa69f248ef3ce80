#include "jit/codegen_cuda/op_kernels/op_sources.h"

#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "jit/codegen_cuda/op_kernels/softmax.h"

namespace kiln::jit::cuda {

NamedSources op_source_samples() {
  NamedSources out;
  for (NamedSources part :
       {support_source_samples(), softmax_source_samples(), norm_source_samples(),
        reduce_source_samples(), index_source_samples(), scan_source_samples(),
        sort_source_samples(), shape_source_samples(), int_matmul_source_samples(),
        attention_source_samples(), embedding_renorm_source_samples(), gemv_source_samples()}) {
    for (auto& s : part) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace kiln::jit::cuda
