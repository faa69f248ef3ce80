// addmm_act(bias, mat1, mat2, act) = act(bias + mat1 @ mat2) and
// linear_act(input, weight, bias, act, residual, norm, norm_weight,
// norm_bias, norm_eps) = act(linear(norm(input), weight, bias)) + residual,
// on the CPU and for Meta: the unfused ops in order, so their checks and
// numerics are exactly those of the unfused form. `norm` normalizes the
// input over its last dim first: "layer_norm" (norm_weight, norm_bias) or
// "rms_norm" (norm_weight). The CUDA kernels fuse the activation and the
// residual into the product's epilogue, and for few rows the norm into its
// prologue (Note [Matmul epilogues], Note [Skinny matmuls]). And
// attention_merged_heads: attention, then the merge of heads as a copy
// (Note [Merged heads]: the CUDA kernel writes the merged layout itself).

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/matrix_view.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::cpu {
namespace {

void check_act(std::string_view act, const char* op) {
  KILN_CHECK(act == "none" || act == "relu" || act == "gelu_tanh", "[", op,
             "] expected act to be one of 'none', 'relu', 'gelu_tanh', got '", act, "'");
}

void apply_act(Tensor& r, std::string_view act) {
  if (act == "relu") kiln::relu_(r);
  if (act == "gelu_tanh") kiln::gelu_(r, "tanh");
}

// linear_act's input after its `norm` (the input itself for "none").
Tensor normalized(const Tensor& input, std::string_view norm,
                  const std::optional<Tensor>& norm_weight, const std::optional<Tensor>& norm_bias,
                  double eps) {
  KILN_CHECK(norm == "none" || norm == "layer_norm" || norm == "rms_norm",
             "[linear_act] expected norm to be one of 'none', 'layer_norm', 'rms_norm', got '",
             norm, "'");
  if (norm == "none") return input;
  KILN_CHECK(input.dim() >= 1, "[linear_act] expected an input of at least 1 dim to normalize");
  const int64_t k = input.size(-1);
  if (norm == "layer_norm") return kiln::layer_norm(input, {k}, norm_weight, norm_bias, eps);
  KILN_CHECK(!norm_bias || !norm_bias->defined(),
             "[linear_act] expected no norm_bias with norm 'rms_norm', got one");
  return kiln::rms_norm(input, {k}, norm_weight, eps);
}

Tensor addmm_act(const Tensor& bias, const Tensor& mat1, const Tensor& mat2, std::string_view act) {
  check_act(act, "addmm_act");
  Tensor r = kiln::addmm(bias, mat1, mat2);
  apply_act(r, act);
  return r;
}

Tensor linear_act(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                  std::string_view act, const std::optional<Tensor>& residual,
                  std::string_view norm, const std::optional<Tensor>& norm_weight,
                  const std::optional<Tensor>& norm_bias, double norm_eps) {
  check_act(act, "linear_act");
  Tensor r = kiln::linear(normalized(input, norm, norm_weight, norm_bias, norm_eps), weight, bias);
  apply_act(r, act);
  if (residual && residual->defined()) {
    // The residual is added to the product, never the other way round: the
    // result keeps the product's shape and dtype.
    KILN_CHECK(residual->dtype() == r.dtype(), "[linear_act] expected residual of dtype ",
               r.dtype(), " (the product's), got ", residual->dtype());
    KILN_CHECK(broadcasts_to(residual->sizes(), r.sizes()),
               "[linear_act] expected residual to broadcast to ", r.sizes(), ", got shape ",
               residual->sizes());
    kiln::add_(r, *residual);
  }
  return r;
}

Tensor attention_merged_heads(const Tensor& q, const Tensor& k, const Tensor& v,
                              const std::optional<Tensor>& attn_mask, double dropout_p,
                              bool is_causal, std::optional<double> scale, bool enable_gqa) {
  // Through the op, so that its checks (dropout_p among them) name it.
  Tensor a = call_op("scaled_dot_product_attention",
                     {q, k, v, attn_mask ? IValue(*attn_mask) : IValue(), dropout_p, is_causal},
                     {{"scale", scale ? IValue(*scale) : IValue()}, {"enable_gqa", enable_gqa}})[0]
                 .to_tensor();
  KILN_CHECK(a.dim() >= 3,
             "[attention_merged_heads] expected an output with a heads dim (at least "
             "3 dims), got shape ",
             a.sizes());
  Tensor t = a.transpose(-3, -2);
  if (a.is_meta()) return empty_tensor(t.sizes(), t.dtype(), t.device());
  return t.contiguous();
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("addmm_act", &addmm_act);
  m.impl("linear_act", &linear_act);
  m.impl("attention_merged_heads", &attention_merged_heads);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("addmm_act", &addmm_act);
  m.impl("linear_act", &linear_act);
  m.impl("attention_merged_heads", &attention_merged_heads);
}

}  // namespace kiln::cpu
