// linear: input @ weight.T + bias as one GEMM. The bias is broadcast into the
// output first and the product accumulates onto it (beta = 1), so there is no
// second pass; the weight is read through its transposed layout, not copied.

#include "kiln/dispatch.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/blas_tensor.h"
#include "runtime/cpu/copy.h"

namespace kiln::cpu {
namespace {

Tensor linear(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias) {
  const char* op = "linear";
  check_defined(input, op, "input");
  check_defined(weight, op, "weight");
  const bool has_bias = bias && bias->defined();
  KILN_CHECK(input.dim() >= 1, "[linear] expected an input of at least 1 dim, got a 0-dim tensor");
  KILN_CHECK(weight.dim() == 2 || (weight.dim() == 1 && !has_bias), "[linear] expected a ",
             has_bias ? "2-D weight when bias is given" : "1-D or 2-D weight", ", got shape ",
             weight.sizes());
  check_product_dtypes(op, input, "input", weight, "weight");
  const int64_t in_features = weight.size(-1);
  KILN_CHECK(input.size(-1) == in_features, "[linear] input of shape ", input.sizes(),
             " and weight of shape ", weight.sizes(),
             " cannot be multiplied: expected input.size(-1) == weight.size(-1), got ",
             input.size(-1), " and ", in_features);
  DimVector shape(input.sizes().slice(0, input.dim() - 1));
  if (weight.dim() == 2) shape.push_back(weight.size(0));
  if (has_bias) {
    KILN_CHECK(bias->dtype() == input.dtype(), "[linear] expected bias of dtype ", input.dtype(),
               " like input, got ", bias->dtype());
    KILN_CHECK(broadcasts_to(bias->sizes(), shape), "[linear] expected bias to broadcast to ",
               shape.ref(), ", got shape ", bias->sizes());
  }
  Device dev = product_device(op, {&input, &weight, has_bias ? &*bias : &weight});
  Tensor out = empty_tensor(shape, input.dtype(), dev);
  if (dev.is_meta() || out.numel() == 0) return out;
  if (has_bias) copy_into(out, *bias);
  const LinearMatrices m = linear_matrices(out, input, weight);
  matmul_into(m.out2, m.in2, m.w2, has_bias ? 1 : 0, 1);
  return out;
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("linear", &linear);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("linear", &linear);
}

}  // namespace kiln::cpu
