#pragma once

// Every built-in op as a C++ function. Semantics, dtype rules and broadcasting
// are PyTorch's; each function dispatches through the op named beside it, which
// `kiln-info --ops` lists with its schema.

#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "kiln/api.h"
#include "kiln/tensor.h"

namespace kiln {

using TensorPair = std::tuple<Tensor, Tensor>;

// --- Factories -----------------------------------------------------------------
// An unset dtype means float32, except where noted.
KILN_API Tensor empty(IntArrayRef size, TensorOptions options = {});
KILN_API Tensor empty_strided(IntArrayRef size, IntArrayRef stride, TensorOptions options = {});
KILN_API Tensor zeros(IntArrayRef size, TensorOptions options = {});
KILN_API Tensor ones(IntArrayRef size, TensorOptions options = {});
// dtype from the fill value when unset (bool, int64 or float32), as PyTorch.
KILN_API Tensor full(IntArrayRef size, const Scalar& fill_value, TensorOptions options = {});
KILN_API Tensor scalar_tensor(const Scalar& value, TensorOptions options = {});
// Same geometry as `self`; dtype and device from `self` unless given.
KILN_API Tensor empty_like(const Tensor& self, std::optional<DType> dtype = std::nullopt);
KILN_API Tensor zeros_like(const Tensor& self, std::optional<DType> dtype = std::nullopt);
KILN_API Tensor ones_like(const Tensor& self, std::optional<DType> dtype = std::nullopt);
KILN_API Tensor full_like(const Tensor& self, const Scalar& fill_value,
                          std::optional<DType> dtype = std::nullopt);
// dtype int64 when every bound is an integer, else float32, unless given.
KILN_API Tensor arange(const Scalar& end, TensorOptions options = {});
KILN_API Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1,
                       TensorOptions options = {});
KILN_API Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps,
                         TensorOptions options = {});
KILN_API Tensor eye(int64_t n, TensorOptions options = {});
KILN_API Tensor eye(int64_t n, int64_t m, TensorOptions options = {});

// Random numbers from a counter-based Philox generator: the same seed and
// shape give the same values on every device.
KILN_API void manual_seed(uint64_t seed);
KILN_API Tensor rand(IntArrayRef size, TensorOptions options = {});
KILN_API Tensor randn(IntArrayRef size, TensorOptions options = {});
// Integers in [low, high); dtype int64 unless given. [low, high) must fit the
// dtype: for bool, [0, 2) or a part of it, as PyTorch.
KILN_API Tensor randint(int64_t low, int64_t high, IntArrayRef size, TensorOptions options = {});
KILN_API Tensor randint(int64_t high, IntArrayRef size, TensorOptions options = {});
// num_samples category indices per row of probs (1-D or 2-D, weights that
// need not sum to 1), int64, drawn from the default generator at the call;
// without replacement each row's indices are distinct.
KILN_API Tensor multinomial(const Tensor& self, int64_t num_samples, bool replacement = false);

// Wraps memory without copying; `deleter` (optional) runs when the last view dies.
KILN_API Tensor from_blob(void* data, IntArrayRef sizes, DType dtype,
                          std::function<void(void*)> deleter = {}, Device device = Device::cpu());
KILN_API Tensor from_blob(void* data, IntArrayRef sizes, IntArrayRef strides, DType dtype,
                          std::function<void(void*)> deleter = {}, Device device = Device::cpu());
// Copies `numel(sizes)` values of `dtype` from host memory into a new tensor.
KILN_API Tensor from_data(const void* data, IntArrayRef sizes, DType dtype,
                          TensorOptions options = {});

// kiln::tensor({1.f, 2.f}), kiln::tensor({{1, 2}, {3, 4}}), kiln::tensor(vec, {2, 3}).
template <class T>
Tensor tensor(std::initializer_list<T> values, TensorOptions options = {}) {
  int64_t n = static_cast<int64_t>(values.size());
  return from_data(values.begin(), IntArrayRef(&n, 1), dtype_of<T>, options);
}
template <class T>
Tensor tensor(std::initializer_list<std::initializer_list<T>> rows, TensorOptions options = {}) {
  std::vector<T> flat;
  int64_t cols = rows.size() ? static_cast<int64_t>(rows.begin()->size()) : 0;
  for (const auto& r : rows) {
    KILN_CHECK(static_cast<int64_t>(r.size()) == cols, "[tensor] expected rows of equal length ",
               cols, ", got one of ", r.size());
    flat.insert(flat.end(), r.begin(), r.end());
  }
  int64_t sizes[2] = {static_cast<int64_t>(rows.size()), cols};
  return from_data(flat.data(), IntArrayRef(sizes, 2), dtype_of<T>, options);
}
template <class T>
Tensor tensor(const std::vector<T>& values, IntArrayRef sizes, TensorOptions options = {}) {
  static_assert(!std::is_same_v<T, bool>, "use a std::vector<uint8_t> and .to(kBool)");
  int64_t count = 1;
  bool fits = true;
  for (int64_t s : sizes) fits = fits && s >= 0 && !__builtin_mul_overflow(count, s, &count);
  KILN_CHECK(fits && count == static_cast<int64_t>(values.size()), "[tensor] expected ",
             fits ? std::to_string(count) : std::string("a count of"), " values for sizes ", sizes,
             ", got ", values.size());
  return from_data(values.data(), sizes, dtype_of<T>, options);
}

// --- Unary pointwise ---------------------------------------------------------------
// name(x), name_(x) in place, name_out(out, x).
#define KILN_DECLARE_UNARY(name)            \
  KILN_API Tensor name(const Tensor& self); \
  KILN_API Tensor& name##_(Tensor& self);   \
  KILN_API Tensor& name##_out(Tensor& out, const Tensor& self);
KILN_DECLARE_UNARY(neg)
KILN_DECLARE_UNARY(abs)
KILN_DECLARE_UNARY(sign)
KILN_DECLARE_UNARY(exp)
KILN_DECLARE_UNARY(exp2)
KILN_DECLARE_UNARY(expm1)
KILN_DECLARE_UNARY(log)
KILN_DECLARE_UNARY(log2)
KILN_DECLARE_UNARY(log10)
KILN_DECLARE_UNARY(log1p)
KILN_DECLARE_UNARY(sqrt)
KILN_DECLARE_UNARY(rsqrt)
KILN_DECLARE_UNARY(reciprocal)
KILN_DECLARE_UNARY(square)
KILN_DECLARE_UNARY(sin)
KILN_DECLARE_UNARY(cos)
KILN_DECLARE_UNARY(tan)
KILN_DECLARE_UNARY(asin)
KILN_DECLARE_UNARY(acos)
KILN_DECLARE_UNARY(atan)
KILN_DECLARE_UNARY(sinh)
KILN_DECLARE_UNARY(cosh)
KILN_DECLARE_UNARY(tanh)
KILN_DECLARE_UNARY(sigmoid)
KILN_DECLARE_UNARY(relu)
KILN_DECLARE_UNARY(silu)
KILN_DECLARE_UNARY(erf)
KILN_DECLARE_UNARY(erfc)
KILN_DECLARE_UNARY(floor)
KILN_DECLARE_UNARY(ceil)
KILN_DECLARE_UNARY(round)
KILN_DECLARE_UNARY(trunc)
KILN_DECLARE_UNARY(frac)
KILN_DECLARE_UNARY(logical_not)
KILN_DECLARE_UNARY(bitwise_not)
#undef KILN_DECLARE_UNARY

KILN_API Tensor round(const Tensor& self, int64_t decimals);
KILN_API Tensor isnan(const Tensor& self);
KILN_API Tensor isinf(const Tensor& self);
KILN_API Tensor isfinite(const Tensor& self);
// approximate: "none" (erf) or "tanh".
KILN_API Tensor gelu(const Tensor& self, std::string_view approximate = "none");
KILN_API Tensor& gelu_(Tensor& self, std::string_view approximate = "none");
KILN_API Tensor softplus(const Tensor& self, const Scalar& beta = 1, const Scalar& threshold = 20);
// Activations of torch.nn.functional, floating inputs only (hardtanh: also
// integers, as the clamp it is).
KILN_API Tensor leaky_relu(const Tensor& self, const Scalar& negative_slope = 0.01);
KILN_API Tensor& leaky_relu_(Tensor& self, const Scalar& negative_slope = 0.01);
// scale * x for x > 0, else scale * alpha * (exp(input_scale * x) - 1).
KILN_API Tensor elu(const Tensor& self, const Scalar& alpha = 1, const Scalar& scale = 1,
                    const Scalar& input_scale = 1);
KILN_API Tensor& elu_(Tensor& self, const Scalar& alpha = 1, const Scalar& scale = 1,
                      const Scalar& input_scale = 1);
KILN_API Tensor hardtanh(const Tensor& self, const Scalar& min_val = -1, const Scalar& max_val = 1);
KILN_API Tensor& hardtanh_(Tensor& self, const Scalar& min_val = -1, const Scalar& max_val = 1);
KILN_API Tensor hardsigmoid(const Tensor& self);
KILN_API Tensor& hardsigmoid_(Tensor& self);
KILN_API Tensor hardswish(const Tensor& self);
KILN_API Tensor& hardswish_(Tensor& self);
KILN_API Tensor mish(const Tensor& self);
KILN_API Tensor& mish_(Tensor& self);
// log(sigmoid(x)) = -softplus(-x), finite for every finite x. logsigmoid is
// torch.nn.functional's name for it.
KILN_API Tensor log_sigmoid(const Tensor& self);
KILN_API Tensor logsigmoid(const Tensor& self);
// x itself when train is false; else zeros with probability p and x / (1 - p)
// elsewhere, drawn from the default generator at the call (Note [Random ops
// run at the call]).
KILN_API Tensor dropout(const Tensor& input, double p, bool train);
KILN_API Tensor nan_to_num(const Tensor& self, std::optional<double> nan = std::nullopt,
                           std::optional<double> posinf = std::nullopt,
                           std::optional<double> neginf = std::nullopt);
KILN_API Tensor& nan_to_num_(Tensor& self, std::optional<double> nan = std::nullopt,
                             std::optional<double> posinf = std::nullopt,
                             std::optional<double> neginf = std::nullopt);
KILN_API Tensor clamp(const Tensor& self, const std::optional<Scalar>& min,
                      const std::optional<Scalar>& max = std::nullopt);
KILN_API Tensor clamp(const Tensor& self, const std::optional<Tensor>& min,
                      const std::optional<Tensor>& max);
KILN_API Tensor& clamp_(Tensor& self, const std::optional<Scalar>& min,
                        const std::optional<Scalar>& max = std::nullopt);
KILN_API Tensor& clamp_out(Tensor& out, const Tensor& self, const std::optional<Scalar>& min,
                           const std::optional<Scalar>& max = std::nullopt);

// --- Binary pointwise --------------------------------------------------------------
KILN_API Tensor add(const Tensor& self, const Tensor& other, const Scalar& alpha = 1);
KILN_API Tensor add(const Tensor& self, const Scalar& other, const Scalar& alpha = 1);
KILN_API Tensor& add_(Tensor& self, const Tensor& other, const Scalar& alpha = 1);
KILN_API Tensor& add_out(Tensor& out, const Tensor& self, const Tensor& other,
                         const Scalar& alpha = 1);
KILN_API Tensor sub(const Tensor& self, const Tensor& other, const Scalar& alpha = 1);
KILN_API Tensor sub(const Tensor& self, const Scalar& other, const Scalar& alpha = 1);
KILN_API Tensor& sub_(Tensor& self, const Tensor& other, const Scalar& alpha = 1);
KILN_API Tensor& sub_out(Tensor& out, const Tensor& self, const Tensor& other,
                         const Scalar& alpha = 1);
// rounding_mode: unset (true division), "trunc" or "floor".
KILN_API Tensor div(const Tensor& self, const Tensor& other,
                    std::optional<std::string_view> rounding_mode = std::nullopt);
KILN_API Tensor div(const Tensor& self, const Scalar& other,
                    std::optional<std::string_view> rounding_mode = std::nullopt);
KILN_API Tensor& div_(Tensor& self, const Tensor& other,
                      std::optional<std::string_view> rounding_mode = std::nullopt);
KILN_API Tensor& div_out(Tensor& out, const Tensor& self, const Tensor& other,
                         std::optional<std::string_view> rounding_mode = std::nullopt);

// name(a, b), name(a, scalar), name_(a, b), name_out(out, a, b).
#define KILN_DECLARE_BINARY(name)                                \
  KILN_API Tensor name(const Tensor& self, const Tensor& other); \
  KILN_API Tensor name(const Tensor& self, const Scalar& other); \
  KILN_API Tensor& name##_(Tensor& self, const Tensor& other);   \
  KILN_API Tensor& name##_out(Tensor& out, const Tensor& self, const Tensor& other);
KILN_DECLARE_BINARY(mul)
KILN_DECLARE_BINARY(remainder)
KILN_DECLARE_BINARY(fmod)
KILN_DECLARE_BINARY(floor_divide)
KILN_DECLARE_BINARY(pow)
KILN_DECLARE_BINARY(bitwise_and)
KILN_DECLARE_BINARY(bitwise_or)
KILN_DECLARE_BINARY(bitwise_xor)
KILN_DECLARE_BINARY(eq)
KILN_DECLARE_BINARY(ne)
KILN_DECLARE_BINARY(lt)
KILN_DECLARE_BINARY(le)
KILN_DECLARE_BINARY(gt)
KILN_DECLARE_BINARY(ge)
#undef KILN_DECLARE_BINARY
KILN_API Tensor pow(const Scalar& self, const Tensor& exponent);

#define KILN_DECLARE_BINARY_TENSOR(name)                         \
  KILN_API Tensor name(const Tensor& self, const Tensor& other); \
  KILN_API Tensor& name##_(Tensor& self, const Tensor& other);   \
  KILN_API Tensor& name##_out(Tensor& out, const Tensor& self, const Tensor& other);
KILN_DECLARE_BINARY_TENSOR(atan2)
KILN_DECLARE_BINARY_TENSOR(maximum)
KILN_DECLARE_BINARY_TENSOR(minimum)
// max(a, b) and min(a, b): PyTorch's other spelling of maximum and minimum.
KILN_API Tensor max(const Tensor& self, const Tensor& other);
KILN_API Tensor min(const Tensor& self, const Tensor& other);
KILN_DECLARE_BINARY_TENSOR(logical_and)
KILN_DECLARE_BINARY_TENSOR(logical_or)
KILN_DECLARE_BINARY_TENSOR(logical_xor)
#undef KILN_DECLARE_BINARY_TENSOR

// --- Ternary -------------------------------------------------------------------
KILN_API Tensor where(const Tensor& condition, const Tensor& self, const Tensor& other);
KILN_API Tensor where(const Tensor& condition, const Scalar& self, const Tensor& other);
KILN_API Tensor where(const Tensor& condition, const Tensor& self, const Scalar& other);
KILN_API Tensor lerp(const Tensor& self, const Tensor& end, const Scalar& weight);
KILN_API Tensor lerp(const Tensor& self, const Tensor& end, const Tensor& weight);
KILN_API Tensor addcmul(const Tensor& self, const Tensor& tensor1, const Tensor& tensor2,
                        const Scalar& value = 1);
KILN_API Tensor addcdiv(const Tensor& self, const Tensor& tensor1, const Tensor& tensor2,
                        const Scalar& value = 1);

// --- Reductions ----------------------------------------------------------------
// An empty `dim` list reduces over every dim. dtype: accumulate and return in it.
KILN_API Tensor sum(const Tensor& self, std::optional<DType> dtype = std::nullopt);
KILN_API Tensor sum(const Tensor& self, IntArrayRef dim, bool keepdim = false,
                    std::optional<DType> dtype = std::nullopt);
KILN_API Tensor mean(const Tensor& self, std::optional<DType> dtype = std::nullopt);
KILN_API Tensor mean(const Tensor& self, IntArrayRef dim, bool keepdim = false,
                     std::optional<DType> dtype = std::nullopt);
KILN_API Tensor prod(const Tensor& self, std::optional<DType> dtype = std::nullopt);
KILN_API Tensor prod(const Tensor& self, int64_t dim, bool keepdim = false,
                     std::optional<DType> dtype = std::nullopt);
KILN_API Tensor amax(const Tensor& self, IntArrayRef dim = {}, bool keepdim = false);
KILN_API Tensor amin(const Tensor& self, IntArrayRef dim = {}, bool keepdim = false);
KILN_API Tensor max(const Tensor& self);
KILN_API Tensor min(const Tensor& self);
// (values, indices)
KILN_API TensorPair max(const Tensor& self, int64_t dim, bool keepdim = false);
KILN_API TensorPair min(const Tensor& self, int64_t dim, bool keepdim = false);
KILN_API Tensor argmax(const Tensor& self, std::optional<int64_t> dim = std::nullopt,
                       bool keepdim = false);
KILN_API Tensor argmin(const Tensor& self, std::optional<int64_t> dim = std::nullopt,
                       bool keepdim = false);
// correction: 1 (Bessel) when unset.
KILN_API Tensor var(const Tensor& self, IntArrayRef dim = {},
                    std::optional<int64_t> correction = std::nullopt, bool keepdim = false);
KILN_API Tensor std(const Tensor& self, IntArrayRef dim = {},
                    std::optional<int64_t> correction = std::nullopt, bool keepdim = false);
// unbiased: PyTorch's older spelling of correction (true: 1, false: 0). Only a
// bool selects these overloads, so var(x, {0}, 2) stays correction 2.
KILN_API Tensor var_unbiased(const Tensor& self, std::optional<IntArrayRef> dim, bool unbiased,
                             bool keepdim);
KILN_API Tensor std_unbiased(const Tensor& self, std::optional<IntArrayRef> dim, bool unbiased,
                             bool keepdim);
template <std::same_as<bool> B>
Tensor var(const Tensor& self, B unbiased) {
  return var_unbiased(self, std::nullopt, unbiased, false);
}
template <std::same_as<bool> B>
Tensor var(const Tensor& self, IntArrayRef dim, B unbiased, bool keepdim = false) {
  return var_unbiased(self, dim, unbiased, keepdim);
}
template <std::same_as<bool> B>
Tensor std(const Tensor& self, B unbiased) {
  return std_unbiased(self, std::nullopt, unbiased, false);
}
template <std::same_as<bool> B>
Tensor std(const Tensor& self, IntArrayRef dim, B unbiased, bool keepdim = false) {
  return std_unbiased(self, dim, unbiased, keepdim);
}
KILN_API Tensor logsumexp(const Tensor& self, IntArrayRef dim, bool keepdim = false);
KILN_API Tensor all(const Tensor& self);
KILN_API Tensor all(const Tensor& self, int64_t dim, bool keepdim = false);
KILN_API Tensor any(const Tensor& self);
KILN_API Tensor any(const Tensor& self, int64_t dim, bool keepdim = false);
KILN_API Tensor norm(const Tensor& self, const Scalar& p = 2);
KILN_API Tensor norm(const Tensor& self, const std::optional<Scalar>& p, IntArrayRef dim,
                     bool keepdim = false);
KILN_API Tensor cumsum(const Tensor& self, int64_t dim, std::optional<DType> dtype = std::nullopt);
KILN_API Tensor cumprod(const Tensor& self, int64_t dim, std::optional<DType> dtype = std::nullopt);

// --- Neural-network functions ----------------------------------------------------
KILN_API Tensor softmax(const Tensor& self, int64_t dim, std::optional<DType> dtype = std::nullopt);
KILN_API Tensor log_softmax(const Tensor& self, int64_t dim,
                            std::optional<DType> dtype = std::nullopt);
KILN_API Tensor layer_norm(const Tensor& input, IntArrayRef normalized_shape,
                           const std::optional<Tensor>& weight = std::nullopt,
                           const std::optional<Tensor>& bias = std::nullopt, double eps = 1e-5);
// eps: the dtype's machine epsilon when unset, as PyTorch.
KILN_API Tensor rms_norm(const Tensor& input, IntArrayRef normalized_shape,
                         const std::optional<Tensor>& weight = std::nullopt,
                         std::optional<double> eps = std::nullopt);
// max_norm: the rows `indices` names whose norm_type-norm exceeds max_norm are
// first scaled down to it, in `weight` itself (embedding_renorm_), as
// torch.nn.functional.embedding does. padding_idx, scale_grad_by_freq and
// sparse only matter for gradients, which kiln does not take: accepted, no effect.
KILN_API Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1,
                          std::optional<double> max_norm = std::nullopt, double norm_type = 2.0,
                          bool scale_grad_by_freq = false, bool sparse = false);
// Scales each row of `self` that `indices` names, once, by max_norm / (norm + 1e-7)
// where its norm_type-norm exceeds max_norm.
KILN_API Tensor& embedding_renorm_(Tensor& self, const Tensor& indices, double max_norm,
                                   double norm_type);
// input @ weight.T + bias
KILN_API Tensor linear(const Tensor& input, const Tensor& weight,
                       const std::optional<Tensor>& bias = std::nullopt);
// torch.nn.functional.conv1d / conv2d (cross-correlation): input (N, C, L...)
// or unbatched (C, L...), weight (out_channels, C / groups, k...), bias
// (out_channels); one spatial dim for conv1d, two for conv2d. stride, padding
// (zeros at both ends) and dilation: one int for every spatial dim or one
// per dim. Floating dtypes only. Note [conv] in runtime/cpu/conv.cpp.
KILN_API Tensor conv1d(const Tensor& input, const Tensor& weight,
                       const std::optional<Tensor>& bias = std::nullopt, IntArrayRef stride = 1,
                       IntArrayRef padding = 0, IntArrayRef dilation = 1, int64_t groups = 1);
KILN_API Tensor conv2d(const Tensor& input, const Tensor& weight,
                       const std::optional<Tensor>& bias = std::nullopt, IntArrayRef stride = 1,
                       IntArrayRef padding = 0, IntArrayRef dilation = 1, int64_t groups = 1);
// padding "valid" (none) or "same" (an output as large as the input, stride 1
// only; an odd total pads one more at the end). Only a string selects these
// overloads, so conv2d(x, w, b, 1, 0) and {0, 1} stay padding by ints.
KILN_API Tensor conv1d_padding(const Tensor& input, const Tensor& weight,
                               const std::optional<Tensor>& bias, IntArrayRef stride,
                               std::string_view padding, IntArrayRef dilation, int64_t groups);
KILN_API Tensor conv2d_padding(const Tensor& input, const Tensor& weight,
                               const std::optional<Tensor>& bias, IntArrayRef stride,
                               std::string_view padding, IntArrayRef dilation, int64_t groups);
template <std::convertible_to<std::string_view> S>
Tensor conv1d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
              IntArrayRef stride, const S& padding, IntArrayRef dilation = 1, int64_t groups = 1) {
  return conv1d_padding(input, weight, bias, stride, padding, dilation, groups);
}
template <std::convertible_to<std::string_view> S>
Tensor conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
              IntArrayRef stride, const S& padding, IntArrayRef dilation = 1, int64_t groups = 1) {
  return conv2d_padding(input, weight, bias, stride, padding, dilation, groups);
}
// torch.nn.functional's pools: input (N, C, L...) or unbatched (C, L...), one
// spatial dim for the 1d forms, two for the 2d ones. kernel_size, stride
// (empty: kernel_size), padding (-inf for max, zeros for avg; at most half
// the kernel) and dilation: one int for every spatial dim or one per dim.
// Floating dtypes; avg also int64 (PyTorch's CPU: truncating division).
// Note [pooling] in runtime/cpu/pooling.cpp.
KILN_API Tensor max_pool1d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {},
                           IntArrayRef padding = 0, IntArrayRef dilation = 1,
                           bool ceil_mode = false);
KILN_API Tensor max_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {},
                           IntArrayRef padding = 0, IntArrayRef dilation = 1,
                           bool ceil_mode = false);
// (values, indices): each maximum's flat position in its input plane (h * W + w).
KILN_API TensorPair max_pool1d_with_indices(const Tensor& input, IntArrayRef kernel_size,
                                            IntArrayRef stride = {}, IntArrayRef padding = 0,
                                            IntArrayRef dilation = 1, bool ceil_mode = false);
KILN_API TensorPair max_pool2d_with_indices(const Tensor& input, IntArrayRef kernel_size,
                                            IntArrayRef stride = {}, IntArrayRef padding = 0,
                                            IntArrayRef dilation = 1, bool ceil_mode = false);
KILN_API Tensor avg_pool1d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {},
                           IntArrayRef padding = 0, bool ceil_mode = false,
                           bool count_include_pad = true);
KILN_API Tensor avg_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {},
                           IntArrayRef padding = 0, bool ceil_mode = false,
                           bool count_include_pad = true,
                           std::optional<int64_t> divisor_override = std::nullopt);
// Window i of `in` per dim: [floor(i * in / out), ceil((i + 1) * in / out)).
KILN_API Tensor adaptive_avg_pool1d(const Tensor& input, IntArrayRef output_size);
KILN_API Tensor adaptive_avg_pool2d(const Tensor& input, IntArrayRef output_size);
KILN_API TensorPair adaptive_max_pool1d(const Tensor& input, IntArrayRef output_size);
KILN_API TensorPair adaptive_max_pool2d(const Tensor& input, IntArrayRef output_size);
// torch.nn.functional.interpolate of a (N, C, L) or (N, C, H, W) input: one
// of size and scale_factor (one value for every spatial dim or one per dim);
// mode "nearest", "nearest-exact", "area", "linear" (3-D) or "bilinear"
// (4-D), align_corners for the last two. Note [interpolate] in
// runtime/cpu/interpolate.cpp. By scale: interpolate(x, std::nullopt, 2.0).
KILN_API Tensor interpolate(const Tensor& input, std::optional<IntArrayRef> size,
                            std::optional<ArrayRef<double>> scale_factor,
                            std::string_view mode = "nearest",
                            std::optional<bool> align_corners = std::nullopt,
                            std::optional<bool> recompute_scale_factor = std::nullopt,
                            bool antialias = false);
// By size: interpolate(x, {64, 64}, "bilinear").
inline Tensor interpolate(const Tensor& input, IntArrayRef size, std::string_view mode = "nearest",
                          std::optional<bool> align_corners = std::nullopt) {
  return interpolate(input, std::optional<IntArrayRef>(size), std::nullopt, mode, align_corners);
}
// softmax(q @ k.T * scale + mask) @ v; a bool mask keeps True positions.
// enable_gqa: key and value may have fewer heads (dim -3) than the query, a
// divisor of them; each key/value head serves that many consecutive query
// heads (PyTorch's enable_gqa, key.repeat_interleave(Hq / Hkv, -3)).
KILN_API Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key,
                                             const Tensor& value,
                                             const std::optional<Tensor>& attn_mask = std::nullopt,
                                             bool is_causal = false,
                                             std::optional<double> scale = std::nullopt,
                                             bool enable_gqa = false);
// Attention of query [B, Hq, L, D] over a static KV cache, key_cache
// [B, Hkv, S, D] and value_cache [B, Hkv, S, Dv], Hq a multiple of Hkv
// (grouped-query attention as above). Query row i sits at position p + i and
// sees cache slots 0..p+i, where p = cache_position: an int64 tensor of one
// element (every batch row) or [B], on the query's device, each in [0, S - L]
// (else kiln::Error; L <= S). The position is read on the device, so one
// recorded step (or captured CUDA graph) serves every position. The same as
// scaled_dot_product_attention with the mask arange(S) <= p + arange(L)[:, None].
KILN_API Tensor kv_cache_attention(const Tensor& query, const Tensor& key_cache,
                                   const Tensor& value_cache, const Tensor& cache_position,
                                   std::optional<double> scale = std::nullopt);

// --- Matrix products ---------------------------------------------------------------
KILN_API Tensor matmul(const Tensor& self, const Tensor& other);
KILN_API Tensor& matmul_out(Tensor& out, const Tensor& self, const Tensor& other);
KILN_API Tensor mm(const Tensor& self, const Tensor& mat2);
KILN_API Tensor bmm(const Tensor& self, const Tensor& mat2);
KILN_API Tensor mv(const Tensor& self, const Tensor& vec);
KILN_API Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2,
                      const Scalar& beta = 1, const Scalar& alpha = 1);
KILN_API Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2,
                        const Scalar& beta = 1, const Scalar& alpha = 1);
// act(bias + mat1 @ mat2), act in {"none", "relu", "gelu_tanh"}: addmm with an
// activation, one cuBLASLt call with a fused epilogue on CUDA.
KILN_API Tensor addmm_act(const Tensor& bias, const Tensor& mat1, const Tensor& mat2,
                          std::string_view act = "none");
KILN_API Tensor outer(const Tensor& self, const Tensor& vec2);
// Einstein summation, torch.einsum's equation language: "ij,jk->ik", implicit
// output ("ij,jk": the subscripts seen once, A-Z then a-z), a repeated
// index in one operand for its diagonal ("ii->i"), "..." for broadcast dims.
// Three or more operands are contracted pairwise, left to right.
KILN_API Tensor einsum(std::string_view equation, TensorList tensors);

// --- Shape and indexing ----------------------------------------------------------
KILN_API Tensor cat(TensorList tensors, int64_t dim = 0);
KILN_API Tensor stack(TensorList tensors, int64_t dim = 0);
KILN_API std::vector<Tensor> split(const Tensor& self, int64_t split_size, int64_t dim = 0);
KILN_API std::vector<Tensor> split(const Tensor& self, IntArrayRef split_sizes, int64_t dim = 0);
KILN_API std::vector<Tensor> chunk(const Tensor& self, int64_t chunks, int64_t dim = 0);
KILN_API Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index);
// Views of self, one per index along dim, that dim removed.
KILN_API std::vector<Tensor> unbind(const Tensor& self, int64_t dim = 0);
// Each element repeated `repeats` times along dim (of the flattened self when unset).
KILN_API Tensor repeat_interleave(const Tensor& self, int64_t repeats,
                                  std::optional<int64_t> dim = std::nullopt);
KILN_API Tensor gather(const Tensor& self, int64_t dim, const Tensor& index);
KILN_API Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
KILN_API Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value);
KILN_API Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
KILN_API Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index,
                            const Tensor& src);
KILN_API Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// Combines src (or value) into self at the index instead of writing it: reduce
// "add" or "multiply" (scatter.reduce; Note [Scatter reductions]).
KILN_API Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                        std::string_view reduce);
KILN_API Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value,
                        std::string_view reduce);
KILN_API Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                          std::string_view reduce);
KILN_API Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Scalar& value,
                          std::string_view reduce);
// reduce: "sum", "prod", "mean", "amax" or "amin"; include_self: whether self's
// values at the indexed places take part.
KILN_API Tensor scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index,
                               const Tensor& src, std::string_view reduce,
                               bool include_self = true);
KILN_API Tensor& scatter_reduce_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                                 std::string_view reduce, bool include_self = true);
KILN_API Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index,
                           const Tensor& source);
KILN_API Tensor& index_copy_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& source);
// self with alpha * source's slices added at the index along dim (repeated
// indices accumulate).
KILN_API Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index,
                          const Tensor& source, const Scalar& alpha = 1);
KILN_API Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                            const Scalar& alpha = 1);
// int64 one-hot rows of num_classes (the largest index + 1 when -1, read on
// the host) for an int64 index tensor.
KILN_API Tensor one_hot(const Tensor& self, int64_t num_classes = -1);
// For each value, the index in sorted_sequence's last dim (1-D, or with the
// values' leading dims) where it would be inserted to keep the order: before
// equal elements, or after them when right (or side "right"). int64 indices,
// int32 when out_int32.
KILN_API Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& self,
                             bool out_int32 = false, bool right = false,
                             std::optional<std::string_view> side = std::nullopt);
KILN_API Tensor searchsorted(const Tensor& sorted_sequence, const Scalar& self,
                             bool out_int32 = false, bool right = false,
                             std::optional<std::string_view> side = std::nullopt);
// searchsorted(boundaries, self): the bucket of each element of self, for 1-D
// sorted boundaries.
KILN_API Tensor bucketize(const Tensor& self, const Tensor& boundaries, bool out_int32 = false,
                          bool right = false);
KILN_API Tensor bucketize(const Scalar& self, const Tensor& boundaries, bool out_int32 = false,
                          bool right = false);
// The elements of self where mask (broadcast with it) is true, as a 1-D
// tensor. Its size depends on the values: read on the host (README, graph
// breaks).
KILN_API Tensor masked_select(const Tensor& self, const Tensor& mask);
// The indices of self's nonzero elements, [count, self.dim()] int64 in row-major
// order; argwhere is the same. Sizes read on the host, as masked_select.
KILN_API Tensor nonzero(const Tensor& self);
KILN_API Tensor argwhere(const Tensor& self);
// self[indices] = values (+= when accumulate), indices one int64 or bool
// tensor per leading dim of self, broadcast together; values broadcast to the
// indexed shape. Every index must be defined: for a full slice of a leading
// dim pass arange(size) shaped to broadcast (Note [index_put]).
KILN_API Tensor index_put(const Tensor& self, TensorList indices, const Tensor& values,
                          bool accumulate = false);
KILN_API Tensor& index_put_(Tensor& self, TensorList indices, const Tensor& values,
                            bool accumulate = false);
KILN_API Tensor masked_fill(const Tensor& self, const Tensor& mask, const Scalar& value);
KILN_API Tensor masked_fill(const Tensor& self, const Tensor& mask, const Tensor& value);
KILN_API Tensor& masked_fill_(Tensor& self, const Tensor& mask, const Scalar& value);
KILN_API Tensor& masked_fill_(Tensor& self, const Tensor& mask, const Tensor& value);
KILN_API Tensor tril(const Tensor& self, int64_t diagonal = 0);
KILN_API Tensor triu(const Tensor& self, int64_t diagonal = 0);
KILN_API TensorPair topk(const Tensor& self, int64_t k, int64_t dim = -1, bool largest = true,
                         bool sorted = true);
KILN_API TensorPair sort(const Tensor& self, int64_t dim = -1, bool descending = false,
                         bool stable = false);
KILN_API Tensor argsort(const Tensor& self, int64_t dim = -1, bool descending = false);
KILN_API Tensor repeat(const Tensor& self, IntArrayRef repeats);
KILN_API Tensor roll(const Tensor& self, IntArrayRef shifts, IntArrayRef dims = {});
KILN_API Tensor flip(const Tensor& self, IntArrayRef dims);
// pad: (left, right) pairs starting from the last dim, negative ones crop; mode
// "constant" (filled with value, 0 when unset), "reflect", "replicate" or
// "circular" (1 to 3 padded dims after 1 or 2 others, as torch.nn.functional.pad).
KILN_API Tensor pad(const Tensor& self, IntArrayRef pad, std::string_view mode = "constant",
                    std::optional<double> value = std::nullopt);

// --- Copies ------------------------------------------------------------------------
KILN_API Tensor clone(const Tensor& self);
// non_blocking: see Note [Host-device copies] (runtime/cuda/copy.cpp).
KILN_API Tensor& copy_(Tensor& self, const Tensor& src, bool non_blocking = false);
KILN_API Tensor& fill_(Tensor& self, const Scalar& value);
KILN_API Tensor& zero_(Tensor& self);

// Blocks until every queued op (lazy trace, CUDA stream) is done.
KILN_API void sync();

}  // namespace kiln
