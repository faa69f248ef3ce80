// Every built-in op's schema, in one place. Names and argument lists follow
// PyTorch's ATen where ATen has the op, so boxed calls and the PyTorch oracle
// use the same spelling ("add.Tensor"); kernels register against these in the
// files that implement them.

#include <string>

#include "kiln/dispatch.h"

namespace kiln {
namespace {

// Unary pointwise ops: functional, in-place and out= forms.
const char* const kUnary[] = {
    "neg",   "abs",   "sign",    "exp",   "exp2",  "expm1",       "log",
    "log2",  "log10", "log1p",   "sqrt",  "rsqrt", "reciprocal",  "square",
    "sin",   "cos",   "tan",     "asin",  "acos",  "atan",        "sinh",
    "cosh",  "tanh",  "sigmoid", "relu",  "silu",  "erf",         "erfc",
    "floor", "ceil",  "round",   "trunc", "frac",  "logical_not", "bitwise_not",
};

// Binary ops with a Tensor and a Scalar overload, in-place and out= forms.
// {name, extra kw-args after `other`, out overload name}
struct Binary {
  const char* name;
  const char* extra;
  const char* out_name;
};
const Binary kBinary[] = {
    {"add", ", *, Scalar alpha=1", "out"},
    {"sub", ", *, Scalar alpha=1", "out"},
    {"mul", "", "out"},
    {"div", "", "out"},
    {"remainder", "", "Tensor_out"},
    {"fmod", "", "Tensor_out"},
    {"bitwise_and", "", "Tensor_out"},
    {"bitwise_or", "", "Tensor_out"},
    {"bitwise_xor", "", "Tensor_out"},
    {"eq", "", "Tensor_out"},
    {"ne", "", "Tensor_out"},
    {"lt", "", "Tensor_out"},
    {"le", "", "Tensor_out"},
    {"gt", "", "Tensor_out"},
    {"ge", "", "Tensor_out"},
};

// Binary ops on two tensors only.
const char* const kBinaryTensorOnly[] = {"atan2",       "maximum",    "minimum",
                                         "logical_and", "logical_or", "logical_xor"};

void def_unary(Library& m, const std::string& n) {
  m.def(n + "(Tensor self) -> Tensor");
  m.def(n + "_(Tensor(a!) self) -> Tensor(a!)");
  m.def(n + ".out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)");
}

void def_binary(Library& m, const Binary& b) {
  std::string n = b.name;
  std::string scalar_extra = b.extra;
  // add.Scalar/sub.Scalar take alpha positionally in ATen.
  if (!scalar_extra.empty()) scalar_extra = ", Scalar alpha=1";
  m.def(n + ".Tensor(Tensor self, Tensor other" + b.extra + ") -> Tensor");
  m.def(n + ".Scalar(Tensor self, Scalar other" + scalar_extra + ") -> Tensor");
  m.def(n + "_.Tensor(Tensor(a!) self, Tensor other" + b.extra + ") -> Tensor(a!)");
  m.def(n + "_.Scalar(Tensor(a!) self, Scalar other" + scalar_extra + ") -> Tensor(a!)");
  std::string kw = std::string(b.extra).empty() ? ", *" : b.extra;
  m.def(n + "." + b.out_name + "(Tensor self, Tensor other" + kw +
        ", Tensor(a!) out) -> Tensor(a!)");
}

void def_binary_tensor_only(Library& m, const std::string& n) {
  m.def(n + "(Tensor self, Tensor other) -> Tensor");
  m.def(n + "_(Tensor(a!) self, Tensor other) -> Tensor(a!)");
  m.def(n + ".out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)");
}

}  // namespace

KILN_LIBRARY(kiln, m) {
  // --- Pointwise ---------------------------------------------------------------
  for (const char* n : kUnary) def_unary(m, n);
  m.def("round.decimals(Tensor self, *, int decimals) -> Tensor");
  m.def("isnan(Tensor self) -> Tensor");
  m.def("isinf(Tensor self) -> Tensor");
  m.def("isfinite(Tensor self) -> Tensor");
  m.def("gelu(Tensor self, *, str approximate=\"none\") -> Tensor");
  m.def("gelu_(Tensor(a!) self, *, str approximate=\"none\") -> Tensor(a!)");
  m.def("gelu.out(Tensor self, *, str approximate=\"none\", Tensor(a!) out) -> Tensor(a!)");
  m.def("softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor");
  m.def(
      "softplus.out(Tensor self, Scalar beta=1, Scalar threshold=20, *, Tensor(a!) out) -> "
      "Tensor(a!)");
  // Activations with arguments: functional, in-place and out= forms.
  for (const char* sig : {"leaky_relu(Tensor self, Scalar negative_slope=0.01",
                          "elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1",
                          "hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1",
                          "hardsigmoid(Tensor self", "hardswish(Tensor self", "mish(Tensor self"}) {
    std::string s = sig;
    const size_t paren = s.find('(');
    const std::string name = s.substr(0, paren), args = s.substr(paren + 1);
    m.def(s + ") -> Tensor");
    m.def(name + "_(Tensor(a!)" + args.substr(6) + ") -> Tensor(a!)");
    m.def(name + ".out(" + args + ", *, Tensor(a!) out) -> Tensor(a!)");
  }
  m.def("log_sigmoid(Tensor self) -> Tensor");
  m.def("log_sigmoid.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("dropout(Tensor input, float p, bool train) -> Tensor");
  m.def(
      "nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None) -> Tensor");
  m.def(
      "nan_to_num_(Tensor(a!) self, float? nan=None, float? posinf=None, float? neginf=None) -> "
      "Tensor(a!)");
  m.def(
      "nan_to_num.out(Tensor self, float? nan=None, float? posinf=None, float? neginf=None, *, "
      "Tensor(a!) out) -> Tensor(a!)");
  m.def("clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor");
  m.def("clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor");
  m.def("clamp_(Tensor(a!) self, Scalar? min=None, Scalar? max=None) -> Tensor(a!)");
  m.def("clamp_.Tensor(Tensor(a!) self, Tensor? min=None, Tensor? max=None) -> Tensor(a!)");
  m.def(
      "clamp.out(Tensor self, Scalar? min=None, Scalar? max=None, *, Tensor(a!) out) -> "
      "Tensor(a!)");
  m.def(
      "clamp.Tensor_out(Tensor self, Tensor? min=None, Tensor? max=None, *, Tensor(a!) out) -> "
      "Tensor(a!)");

  for (const Binary& b : kBinary) def_binary(m, b);
  for (const char* n : kBinaryTensorOnly) def_binary_tensor_only(m, n);
  m.def("div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor");
  m.def("div.Scalar_mode(Tensor self, Scalar other, *, str? rounding_mode) -> Tensor");
  m.def("div_.Tensor_mode(Tensor(a!) self, Tensor other, *, str? rounding_mode) -> Tensor(a!)");
  m.def(
      "div.out_mode(Tensor self, Tensor other, *, str? rounding_mode, Tensor(a!) out) -> "
      "Tensor(a!)");
  m.def("floor_divide(Tensor self, Tensor other) -> Tensor");
  m.def("floor_divide.Scalar(Tensor self, Scalar other) -> Tensor");
  m.def("floor_divide_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)");
  m.def("floor_divide.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor");
  m.def("pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor");
  m.def("pow.Scalar(Scalar self, Tensor exponent) -> Tensor");
  m.def("pow_.Tensor(Tensor(a!) self, Tensor exponent) -> Tensor(a!)");
  m.def("pow_.Scalar(Tensor(a!) self, Scalar exponent) -> Tensor(a!)");
  m.def("pow.Tensor_Tensor_out(Tensor self, Tensor exponent, *, Tensor(a!) out) -> Tensor(a!)");

  m.def("where.self(Tensor condition, Tensor self, Tensor other) -> Tensor");
  m.def(
      "where.self_out(Tensor condition, Tensor self, Tensor other, *, Tensor(a!) out) -> "
      "Tensor(a!)");
  m.def("lerp.Scalar(Tensor self, Tensor end, Scalar weight) -> Tensor");
  m.def("lerp.Tensor(Tensor self, Tensor end, Tensor weight) -> Tensor");
  m.def("lerp_.Scalar(Tensor(a!) self, Tensor end, Scalar weight) -> Tensor(a!)");
  m.def("lerp_.Tensor(Tensor(a!) self, Tensor end, Tensor weight) -> Tensor(a!)");
  m.def("lerp.Scalar_out(Tensor self, Tensor end, Scalar weight, *, Tensor(a!) out) -> Tensor(a!)");
  for (const char* n : {"addcmul", "addcdiv"}) {
    std::string s = n;
    m.def(s + "(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor");
    m.def(s +
          "_(Tensor(a!) self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor(a!)");
    m.def(s +
          ".out(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1, Tensor(a!) out) -> "
          "Tensor(a!)");
  }

  // --- Reductions --------------------------------------------------------------
  m.def("sum(Tensor self, *, ScalarType? dtype=None) -> Tensor");
  m.def(
      "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> "
      "Tensor");
  m.def(
      "sum.IntList_out(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None, "
      "Tensor(a!) out) -> Tensor(a!)");
  m.def("mean(Tensor self, *, ScalarType? dtype=None) -> Tensor");
  m.def(
      "mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> "
      "Tensor");
  m.def(
      "mean.out(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None, "
      "Tensor(a!) out) -> Tensor(a!)");
  m.def("prod(Tensor self, *, ScalarType? dtype=None) -> Tensor");
  m.def(
      "prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> "
      "Tensor");
  m.def("amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor");
  m.def("amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor");
  m.def(
      "amax.out(Tensor self, int[1] dim=[], bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)");
  m.def(
      "amin.out(Tensor self, int[1] dim=[], bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("max(Tensor self) -> Tensor");
  // max(a, b) / min(a, b): maximum / minimum under PyTorch's other name.
  m.def("max.other(Tensor self, Tensor other) -> Tensor");
  m.def("min.other(Tensor self, Tensor other) -> Tensor");
  m.def("max.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("min.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("min(Tensor self) -> Tensor");
  m.def("max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)");
  m.def("min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)");
  m.def("argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor");
  m.def("argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor");
  m.def(
      "var.correction(Tensor self, int[1]? dim=None, *, int? correction=None, bool keepdim=False) "
      "-> Tensor");
  m.def(
      "std.correction(Tensor self, int[1]? dim=None, *, int? correction=None, bool keepdim=False) "
      "-> Tensor");
  // unbiased= is correction 1 (true) or 0 (false).
  m.def("var(Tensor self, bool unbiased=True) -> Tensor");
  m.def("var.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor");
  m.def("std(Tensor self, bool unbiased=True) -> Tensor");
  m.def("std.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor");
  m.def("logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor");
  m.def("all(Tensor self) -> Tensor");
  m.def("all.dim(Tensor self, int dim, bool keepdim=False) -> Tensor");
  m.def("any(Tensor self) -> Tensor");
  m.def("any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor");
  m.def("norm.Scalar(Tensor self, Scalar p=2) -> Tensor");
  m.def("norm.ScalarOpt_dim(Tensor self, Scalar? p, int[1] dim, bool keepdim=False) -> Tensor");
  m.def("cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor");
  m.def("cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor");
  m.def(
      "cumsum.out(Tensor self, int dim, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)");
  m.def(
      "cumprod.out(Tensor self, int dim, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)");

  // --- Neural-network ops ------------------------------------------------------
  m.def("softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor");
  m.def("log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor");
  m.def(
      "layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "
      "float eps=1e-05, bool cudnn_enable=True) -> Tensor");
  m.def(
      "rms_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, float? eps=None) -> "
      "Tensor");
  m.def(
      "embedding(Tensor weight, Tensor indices, int padding_idx=-1, bool scale_grad_by_freq=False, "
      "bool sparse=False) -> Tensor");
  m.def(
      "embedding_renorm_(Tensor(a!) self, Tensor indices, float max_norm, float norm_type) -> "
      "Tensor(a!)");
  m.def("linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor");
  m.def(
      "conv1d(Tensor input, Tensor weight, Tensor? bias=None, int[1] stride=1, int[1] padding=0, "
      "int[1] dilation=1, int groups=1) -> Tensor");
  m.def(
      "conv1d.padding(Tensor input, Tensor weight, Tensor? bias=None, int[1] stride=1, "
      "str padding=\"valid\", int[1] dilation=1, int groups=1) -> Tensor");
  m.def(
      "conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, "
      "int[2] dilation=1, int groups=1) -> Tensor");
  m.def(
      "conv2d.padding(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, "
      "str padding=\"valid\", int[2] dilation=1, int groups=1) -> Tensor");
  // Note [pooling] in runtime/cpu/pooling.cpp; Note [interpolate] in runtime/cpu/interpolate.cpp.
  for (const char* nd : {"1", "2"}) {
    const std::string d = nd, ints = "int[" + d + "]";
    const std::string window = "(Tensor input, " + ints + " kernel_size, " + ints + " stride=[], " +
                               ints + " padding=0, " + ints + " dilation=1, bool ceil_mode=False)";
    m.def("max_pool" + d + "d" + window + " -> Tensor");
    m.def("max_pool" + d + "d_with_indices" + window + " -> (Tensor values, Tensor indices)");
    m.def("adaptive_avg_pool" + d + "d(Tensor input, " + ints + " output_size) -> Tensor");
    m.def("adaptive_max_pool" + d + "d(Tensor input, " + ints +
          " output_size) -> (Tensor values, Tensor indices)");
  }
  m.def(
      "avg_pool1d(Tensor input, int[1] kernel_size, int[1] stride=[], int[1] padding=0, bool "
      "ceil_mode=False, bool count_include_pad=True) -> Tensor");
  m.def(
      "avg_pool2d(Tensor input, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool "
      "ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor");
  m.def(
      "interpolate(Tensor input, int[]? size=None, float[]? scale_factor=None, str "
      "mode=\"nearest\", bool? align_corners=None, bool? recompute_scale_factor=None, bool "
      "antialias=False) -> Tensor");
  m.def(
      "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? "
      "attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, float? scale=None, bool "
      "enable_gqa=False) -> Tensor");
  // kiln's own: scaled_dot_product_attention(...).transpose(-3, -2), contiguous
  // (Note [Merged heads]): the heads' outputs side by side in each row.
  m.def(
      "attention_merged_heads(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, "
      "float dropout_p=0.0, bool is_causal=False, *, float? scale=None, bool enable_gqa=False) "
      "-> Tensor");
  // kiln's own: attention over a static KV cache up to a position held in a tensor.
  m.def(
      "kv_cache_attention(Tensor query, Tensor key_cache, Tensor value_cache, Tensor "
      "cache_position, *, float? scale=None) -> Tensor");
  // kiln's own: index_copy_ of key and value into the caches at the position
  // (dim 2), then kv_cache_attention (Note [Cache writes in the decode kernel]).
  m.def(
      "kv_cache_attention_write(Tensor query, Tensor(a!) key_cache, Tensor(b!) value_cache, "
      "Tensor cache_position, Tensor key, Tensor value, *, float? scale=None) -> Tensor");

  // --- Matrix products ---------------------------------------------------------
  m.def("matmul(Tensor self, Tensor other) -> Tensor");
  m.def("matmul.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("mm(Tensor self, Tensor mat2) -> Tensor");
  m.def("mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("bmm(Tensor self, Tensor mat2) -> Tensor");
  m.def("einsum(str equation, Tensor[] tensors) -> Tensor");
  m.def("bmm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("mv(Tensor self, Tensor vec) -> Tensor");
  m.def("addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor");
  m.def(
      "addmm_(Tensor(a!) self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> "
      "Tensor(a!)");
  m.def(
      "addmm.out(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1, "
      "Tensor(a!) out) -> Tensor(a!)");
  m.def(
      "baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> "
      "Tensor");
  m.def("outer(Tensor self, Tensor vec2) -> Tensor");
  // kiln's own: act(bias + mat1 @ mat2) (Note [Matmul epilogues]).
  m.def("addmm_act(Tensor bias, Tensor mat1, Tensor mat2, str act=\"none\") -> Tensor");
  // kiln's own: act(linear(norm(input), weight, bias)) + residual (Note [Matmul epilogues]).
  m.def(
      "linear_act(Tensor input, Tensor weight, Tensor? bias=None, str act=\"none\", "
      "Tensor? residual=None, str norm=\"none\", Tensor? norm_weight=None, "
      "Tensor? norm_bias=None, float norm_eps=0.0) -> Tensor");

  // --- Shape and indexing ------------------------------------------------------
  m.def("cat(Tensor[] tensors, int dim=0) -> Tensor");
  m.def("cat.out(Tensor[] tensors, int dim=0, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("stack(Tensor[] tensors, int dim=0) -> Tensor");
  m.def("stack.out(Tensor[] tensors, int dim=0, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("split.Tensor(Tensor(a) self, int split_size, int dim=0) -> Tensor[]");
  m.def("split_with_sizes(Tensor(a) self, int[] split_sizes, int dim=0) -> Tensor[]");
  m.def("chunk(Tensor(a) self, int chunks, int dim=0) -> Tensor[]");
  m.def("index_select(Tensor self, int dim, Tensor index) -> Tensor");
  m.def("unbind.int(Tensor(a) self, int dim=0) -> Tensor[]");
  m.def(
      "repeat_interleave.self_int(Tensor self, int repeats, int? dim=None, *, int? "
      "output_size=None) -> Tensor");
  m.def("index_select.out(Tensor self, int dim, Tensor index, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor");
  m.def(
      "gather.out(Tensor self, int dim, Tensor index, *, bool sparse_grad=False, Tensor(a!) out) "
      "-> Tensor(a!)");
  m.def("scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor");
  m.def("scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor");
  m.def("scatter_.src(Tensor(a!) self, int dim, Tensor index, Tensor src) -> Tensor(a!)");
  m.def("scatter_.value(Tensor(a!) self, int dim, Tensor index, Scalar value) -> Tensor(a!)");
  m.def("scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor");
  m.def("scatter_add_(Tensor(a!) self, int dim, Tensor index, Tensor src) -> Tensor(a!)");
  // Note [Scatter reductions]
  m.def("scatter.reduce(Tensor self, int dim, Tensor index, Tensor src, *, str reduce) -> Tensor");
  m.def(
      "scatter.value_reduce(Tensor self, int dim, Tensor index, Scalar value, *, str reduce) -> "
      "Tensor");
  m.def(
      "scatter_.reduce(Tensor(a!) self, int dim, Tensor index, Tensor src, *, str reduce) -> "
      "Tensor(a!)");
  m.def(
      "scatter_.value_reduce(Tensor(a!) self, int dim, Tensor index, Scalar value, *, str reduce) "
      "-> Tensor(a!)");
  m.def(
      "scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool "
      "include_self=True) -> Tensor");
  m.def(
      "scatter_reduce_.two(Tensor(a!) self, int dim, Tensor index, Tensor src, str reduce, *, "
      "bool include_self=True) -> Tensor(a!)");
  m.def("index_copy(Tensor self, int dim, Tensor index, Tensor source) -> Tensor");
  m.def("index_copy_(Tensor(a!) self, int dim, Tensor index, Tensor source) -> Tensor(a!)");
  m.def(
      "index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor");
  m.def(
      "index_add_(Tensor(a!) self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> "
      "Tensor(a!)");
  m.def("one_hot(Tensor self, int num_classes=-1) -> Tensor");
  m.def(
      "searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool "
      "right=False, str? side=None) -> Tensor");
  m.def(
      "searchsorted.Scalar(Tensor sorted_sequence, Scalar self, *, bool out_int32=False, bool "
      "right=False, str? side=None) -> Tensor");
  m.def(
      "bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, bool "
      "right=False) -> Tensor");
  m.def(
      "bucketize.Scalar(Scalar self, Tensor boundaries, *, bool out_int32=False, bool "
      "right=False) -> Tensor");
  m.def("masked_select(Tensor self, Tensor mask) -> Tensor");
  m.def("nonzero(Tensor self) -> Tensor");
  m.def("argwhere(Tensor self) -> Tensor");
  m.def("index_put(Tensor self, Tensor[] indices, Tensor values, bool accumulate=False) -> Tensor");
  m.def(
      "index_put_(Tensor(a!) self, Tensor[] indices, Tensor values, bool accumulate=False) -> "
      "Tensor(a!)");
  m.def("masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor");
  m.def("masked_fill.Tensor(Tensor self, Tensor mask, Tensor value) -> Tensor");
  m.def("masked_fill_.Scalar(Tensor(a!) self, Tensor mask, Scalar value) -> Tensor(a!)");
  m.def("masked_fill_.Tensor(Tensor(a!) self, Tensor mask, Tensor value) -> Tensor(a!)");
  m.def("tril(Tensor self, int diagonal=0) -> Tensor");
  m.def("triu(Tensor self, int diagonal=0) -> Tensor");
  m.def("tril_(Tensor(a!) self, int diagonal=0) -> Tensor(a!)");
  m.def("triu_(Tensor(a!) self, int diagonal=0) -> Tensor(a!)");
  m.def(
      "topk(Tensor self, int k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor "
      "values, Tensor indices)");
  m.def("sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)");
  m.def(
      "sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor "
      "values, Tensor indices)");
  m.def("argsort(Tensor self, int dim=-1, bool descending=False) -> Tensor");
  m.def("repeat(Tensor self, int[] repeats) -> Tensor");
  m.def("roll(Tensor self, int[1] shifts, int[1] dims=[]) -> Tensor");
  m.def("flip(Tensor self, int[] dims) -> Tensor");
  m.def("constant_pad_nd(Tensor self, int[] pad, Scalar value=0) -> Tensor");
  m.def("pad(Tensor self, int[] pad, str mode=\"constant\", float? value=None) -> Tensor");
  // pad's modes other than "constant" (Note [Pad modes]).
  for (const char* n : {"reflection_pad", "replication_pad"}) {
    for (int d = 1; d <= 3; ++d) {
      m.def(std::string(n) + std::to_string(d) + "d(Tensor self, int[" + std::to_string(2 * d) +
            "] padding) -> Tensor");
    }
  }
  m.def("_pad_circular(Tensor self, int[] pad) -> Tensor");
  m.def("copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)");
  m.def("fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)");
  m.def("fill_.Tensor(Tensor(a!) self, Tensor value) -> Tensor(a!)");
  m.def("zero_(Tensor(a!) self) -> Tensor(a!)");

  // --- Views (share storage with `self`) -----------------------------------------
  m.def("view(Tensor(a) self, int[] size) -> Tensor(a)");
  m.def("reshape(Tensor(a) self, int[] shape) -> Tensor(a)");
  m.def("permute(Tensor(a) self, int[] dims) -> Tensor(a)");
  m.def("transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)");
  m.def("t(Tensor(a) self) -> Tensor(a)");
  m.def("narrow(Tensor(a) self, int dim, int start, int length) -> Tensor(a)");
  m.def("narrow.Tensor(Tensor(a) self, int dim, Tensor start, int length) -> Tensor(a)");
  m.def(
      "slice.Tensor(Tensor(a) self, int dim=0, int? start=None, int? end=None, int step=1) -> "
      "Tensor(a)");
  m.def("select.int(Tensor(a) self, int dim, int index) -> Tensor(a)");
  m.def("expand(Tensor(a) self, int[] size, *, bool implicit=False) -> Tensor(a)");
  m.def("squeeze(Tensor(a) self) -> Tensor(a)");
  m.def("squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)");
  m.def("unsqueeze(Tensor(a) self, int dim) -> Tensor(a)");
  m.def("flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)");
  m.def("unflatten.int(Tensor(a) self, int dim, int[] sizes) -> Tensor(a)");
  m.def(
      "as_strided(Tensor(a) self, int[] size, int[] stride, int? storage_offset=None) -> "
      "Tensor(a)");
  m.def("diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)");
  m.def("unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)");
  m.def("contiguous(Tensor(a) self) -> Tensor(a)");

  // --- Copies and factories ----------------------------------------------------
  m.def("clone(Tensor self) -> Tensor");
  m.def(
      "_to_copy(Tensor self, *, ScalarType? dtype=None, Device? device=None, bool "
      "non_blocking=False) -> Tensor");
  m.def("empty(int[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def(
      "empty_strided(int[] size, int[] stride, *, ScalarType? dtype=None, Device? device=None) -> "
      "Tensor");
  m.def("zeros(int[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("ones(int[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def(
      "full(int[] size, Scalar fill_value, *, ScalarType? dtype=None, Device? device=None) -> "
      "Tensor");
  m.def("scalar_tensor(Scalar s, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("arange(Scalar end, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def(
      "arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, "
      "Device? device=None) -> Tensor");
  m.def(
      "linspace(Scalar start, Scalar end, int steps, *, ScalarType? dtype=None, Device? "
      "device=None) -> Tensor");
  m.def("eye(int n, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("eye.m(int n, int m, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("rand(int[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("randn(int[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("randint(int high, int[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("multinomial(Tensor self, int num_samples, bool replacement=False) -> Tensor");
  m.def(
      "randint.low(int low, int high, int[] size, *, ScalarType? dtype=None, Device? device=None) "
      "-> Tensor");
}

}  // namespace kiln
