// scaled_dot_product_attention on CUDA, inference only: two matmuls through
// the public op (cuBLASLt on CUDA) around the generated scaled, masked,
// causal softmax (Note [Softmax kernel]). As the CPU kernel: float16 and
// bfloat16 inputs compute in float32 and round once at the end; a row whose
// keys are all masked out is NaN. Shapes and errors come from the Meta kernel.

#include <cmath>

#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "jit/codegen_cuda/op_kernels/softmax.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::jit::cuda {
namespace {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const std::optional<Tensor>& attn_mask, double dropout_p,
                                    bool is_causal, std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  Tensor meta = kiln::scaled_dot_product_attention(meta_of(q), meta_of(k), meta_of(v),
                                                   meta_of(attn_mask), is_causal, scale);
  KILN_CHECK(dropout_p == 0.0, "[", op,
             "] expected dropout_p == 0 (kiln's attention is for inference), got ", dropout_p);
  check_device(k, q.device(), op, "key");
  check_device(v, q.device(), op, "value");
  if (attn_mask) check_device(*attn_mask, q.device(), op, "attn_mask");
  const DType ct = q.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor result = empty_tensor(meta.sizes(), q.dtype(), q.device());
  if (result.numel() == 0) return result;
  const Tensor qc = dense(q, ct), kc = dense(k, ct), vc = dense(v, ct);
  Tensor scores = dense(kiln::matmul(qc, kc.transpose(-2, -1)));
  Tensor probs = attention_softmax(scores, sc, attn_mask, is_causal);
  Tensor out = kiln::matmul(probs, vc);
  if (out.dtype() == q.dtype() && out.sizes() == meta.sizes()) return out;
  copy_into_cuda(result, out.expand(meta.sizes()));
  return result;
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("scaled_dot_product_attention", &scaled_dot_product_attention);
}

}  // namespace kiln::jit::cuda
