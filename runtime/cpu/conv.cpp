// conv1d and conv2d: composites of pad, a strided view, two copies and one
// batched product, so that every device and mode has them as those ops are.
//
// Note [conv]
// PyTorch 1.13's torch.nn.functional.conv1d / conv2d (cross-correlation), as
// im2col: the input, padded with zeros where padding asks, is viewed through
// as_strided as its sliding windows, (N, G, C/G, out..., k...), where a
// window step is stride times the input's stride and a tap step dilation
// times it, so the view works on any input layout and copies nothing. One
// copy (a reshape) makes each group's windows an (N * out..., C/G * k...)
// matrix, and one bmm times the weight, (G, C/G * k..., O/G), gives every
// output; a bias is baddbmm's row vector per group, added with the product
// (a row vector is what cuBLASLt's bias epilogue takes on CUDA). A second
// copy takes the (G, N, out..., O/G) product to a contiguous (N, O, out...).
// There is no convolution kernel of kiln's own: CPU and CUDA, eager, lazy and
// compiled, each runs what pad, the view, the copies and bmm run there, and a
// lazy trace records those ops. The price is the window matrix, C/G * k...
// elements per output position and group, which direct or Winograd kernels
// would not materialize. 16-bit inputs are multiplied in float32 (the window
// matrix converted as it is copied), so the sums and the bias are rounded
// once, at the end, on every device.
//
// Floating dtypes only: PyTorch 1.13's CPU also convolves integers (its slow
// reference path) but its CUDA does not; kiln refuses integers and bool on
// every device, so that the op means one thing everywhere. input, weight and
// bias must share dtype and device, as in PyTorch.
// padding "same" pads dilation * (k - 1) in total per dim, half on each side
// and the odd one at the end (right, bottom), as PyTorch does; it needs stride 1.

#include <string_view>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/checked_sizes.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/spatial_args.h"

namespace kiln::cpu {
namespace {

// The input's spatial dims padded at their start (lo) and end (hi), with the
// step between windows (stride) and between a window's taps (dilation).
struct Geometry {
  DimVector stride, dilation, lo, hi;
};

// The names of a spatial op's dims, for messages.
const char* input_layout(int64_t nd) {
  return nd == 1 ? "(C, L) or (N, C, L)" : "(C, H, W) or (N, C, H, W)";
}
const char* weight_layout(int64_t nd) {
  return nd == 1 ? "(out_channels, in_channels / groups, k)"
                 : "(out_channels, in_channels / groups, kH, kW)";
}

// PyTorch's checks of the tensors and groups.
void check_operands(const char* op, int64_t nd, const Tensor& input, const Tensor& weight,
                    const std::optional<Tensor>& bias, int64_t groups) {
  check_defined(input, op, "input");
  check_defined(weight, op, "weight");
  const bool has_bias = bias && bias->defined();
  KILN_CHECK(input.dim() == nd + 1 || input.dim() == nd + 2, "[", op, "] expected input of ",
             nd + 1, " or ", nd + 2, " dims ", input_layout(nd), ", got ", input.dim(),
             " dims (sizes ", input.sizes(), ")");
  KILN_CHECK(weight.dim() == nd + 2, "[", op, "] expected weight of ", nd + 2, " dims ",
             weight_layout(nd), ", got ", weight.dim(), " dims (sizes ", weight.sizes(), ")");
  KILN_CHECK(is_floating(input.dtype()), "[", op,
             "] expected input of a floating dtype (float32, float64, float16 or bfloat16), got ",
             input.dtype());
  KILN_CHECK(weight.dtype() == input.dtype(), "[", op, "] expected weight of dtype ", input.dtype(),
             " like input, got ", weight.dtype());
  KILN_CHECK(weight.device() == input.device(), "[", op, "] expected weight on ", input.device(),
             " like input, got ", weight.device());
  KILN_CHECK(groups >= 1, "[", op, "] expected groups >= 1, got ", groups);
  const int64_t out_channels = weight.size(0);
  KILN_CHECK(out_channels >= groups && out_channels % groups == 0, "[", op,
             "] expected out_channels (weight.size(0)) to be a positive multiple of groups (",
             groups, "), got ", out_channels);
  const int64_t in_channels = input.size(input.dim() - nd - 1);
  KILN_CHECK(in_channels % groups == 0, "[", op, "] expected input channels divisible by groups (",
             groups, "), got ", in_channels, " (input of sizes ", input.sizes(), ")");
  KILN_CHECK(in_channels == weight.size(1) * groups, "[", op, "] expected input with ",
             weight.size(1) * groups, " channels (weight.size(1) * groups = ", weight.size(1),
             " * ", groups, "), got ", in_channels, " (input of sizes ", input.sizes(), ")");
  for (int64_t d = 2; d < weight.dim(); ++d) {
    KILN_CHECK(weight.size(d) >= 1, "[", op,
               "] expected a kernel of at least 1 element per spatial dim, got weight of sizes ",
               weight.sizes());
  }
  if (!has_bias) return;
  KILN_CHECK(bias->dtype() == input.dtype(), "[", op, "] expected bias of dtype ", input.dtype(),
             " like input, got ", bias->dtype());
  KILN_CHECK(bias->device() == input.device(), "[", op, "] expected bias on ", input.device(),
             " like input, got ", bias->device());
  KILN_CHECK(bias->dim() == 1 && bias->size(0) == out_channels, "[", op,
             "] expected bias of sizes [", out_channels, "] (out_channels), got ", bias->sizes());
}

Geometry steps(const char* op, int64_t nd, IntArrayRef stride, IntArrayRef dilation) {
  Geometry g;
  g.stride = spatial_per_dim(op, nd, stride, "stride", 1);
  g.dilation = spatial_per_dim(op, nd, dilation, "dilation", 1);
  return g;
}

// The convolution of checked operands over the padded input.
Tensor convolve(const char* op, const Tensor& input, const Tensor& weight,
                const std::optional<Tensor>& bias, const Geometry& g, int64_t groups) {
  const int64_t nd = weight.dim() - 2;
  const bool batched = input.dim() == nd + 2;
  Tensor x = batched ? input : input.unsqueeze(0);

  // Output sizes; a window must fit in the padded input.
  DimVector padded, span, out;
  for (int64_t d = 0; d < nd; ++d) {
    const size_t i = static_cast<size_t>(d);
    padded.push_back(checked_add(checked_add(x.size(2 + d), g.lo[i], op), g.hi[i], op));
    span.push_back(checked_add(checked_mul(g.dilation[i], weight.size(2 + d) - 1, op), 1, op));
  }
  for (int64_t d = 0; d < nd; ++d) {
    const size_t i = static_cast<size_t>(d);
    KILN_CHECK(span[i] <= padded[i], "[", op,
               "] expected a kernel no larger than the padded input, got a kernel spanning ",
               span.ref(), " (dilation included) over a padded input of ", padded.ref());
    out.push_back((padded[i] - span[i]) / g.stride[i] + 1);
  }

  bool any_pad = false;
  DimVector pads;  // pad's order: (lo, hi) from the last dim
  for (int64_t d = nd - 1; d >= 0; --d) {
    const size_t i = static_cast<size_t>(d);
    pads.push_back(g.lo[i]);
    pads.push_back(g.hi[i]);
    any_pad = any_pad || g.lo[i] != 0 || g.hi[i] != 0;
  }
  if (any_pad) x = kiln::pad(x, pads);

  // The windows: (N, G, C/G, out..., k...), a view (Note [conv]). A dim of
  // size 1 keeps the input's stride, so no step multiplies past int64.
  const int64_t n = x.size(0), c = x.size(1), cg = c / groups;
  const int64_t o = weight.size(0), og = o / groups;
  DimVector sizes{n, groups, cg};
  DimVector strides{x.stride(0), groups == 1 ? x.stride(1) : cg * x.stride(1), x.stride(1)};
  for (int64_t d = 0; d < nd; ++d) {
    const size_t i = static_cast<size_t>(d);
    sizes.push_back(out[i]);
    strides.push_back(out[i] == 1 ? x.stride(2 + d) : x.stride(2 + d) * g.stride[i]);
  }
  int64_t k = cg;
  for (int64_t d = 0; d < nd; ++d) {
    const size_t i = static_cast<size_t>(d);
    const int64_t taps = weight.size(2 + d);
    k *= taps;
    sizes.push_back(taps);
    strides.push_back(taps == 1 ? x.stride(2 + d) : x.stride(2 + d) * g.dilation[i]);
  }
  Tensor windows = x.as_strided(sizes, strides);  // checks its element count
  int64_t positions = n;                          // N * out...
  for (int64_t s : out) positions *= s;

  // Per group, an (N * out..., C/G * k...) matrix: one copy.
  DimVector order{1, 0};
  for (int64_t d = 0; d < nd; ++d) order.push_back(3 + d);
  order.push_back(2);
  for (int64_t d = 0; d < nd; ++d) order.push_back(3 + nd + d);
  // 16-bit inputs convert here and the product runs in float32: its sums and
  // the bias meet in float32 and are rounded once, at the end, as PyTorch's
  // convolutions round, whatever form a 16-bit product takes on the device.
  const DType dt = input.dtype(), compute = is_reduced_float(dt) ? kFloat32 : dt;
  Tensor columns = windows.permute(order).reshape({groups, positions, k}).to(compute);

  // Times the weight, (G, C/G * k..., O/G); the bias, a row per group.
  Tensor w = weight.reshape({groups, og, k}).transpose(1, 2).to(compute);
  Tensor y = bias && bias->defined()
                 ? kiln::baddbmm(bias->reshape({groups, 1, og}).to(compute), columns, w)
                 : kiln::bmm(columns, w);

  // (G, N, out..., O/G) to (N, O, out...): the second copy.
  DimVector grouped{groups, n}, result{n, o}, back{1, 0, 2 + nd};
  for (int64_t d = 0; d < nd; ++d) {
    grouped.push_back(out[static_cast<size_t>(d)]);
    result.push_back(out[static_cast<size_t>(d)]);
    back.push_back(2 + d);
  }
  grouped.push_back(og);
  y = y.view(grouped).permute(back).reshape(result).to(dt).contiguous();
  return batched ? y : y.squeeze(0);
}

Tensor conv_ints(const char* op, int64_t nd, const Tensor& input, const Tensor& weight,
                 const std::optional<Tensor>& bias, IntArrayRef stride, IntArrayRef padding,
                 IntArrayRef dilation, int64_t groups) {
  check_operands(op, nd, input, weight, bias, groups);
  Geometry g = steps(op, nd, stride, dilation);
  g.lo = spatial_per_dim(op, nd, padding, "padding", 0);
  g.hi = g.lo;
  return convolve(op, input, weight, bias, g, groups);
}

Tensor conv_str(const char* op, int64_t nd, const Tensor& input, const Tensor& weight,
                const std::optional<Tensor>& bias, IntArrayRef stride, std::string_view padding,
                IntArrayRef dilation, int64_t groups) {
  check_operands(op, nd, input, weight, bias, groups);
  Geometry g = steps(op, nd, stride, dilation);
  KILN_CHECK(padding == "valid" || padding == "same", "[", op,
             "] expected padding 'valid' or 'same' (or ints), got '", padding, "'");
  for (int64_t d = 0; d < nd; ++d) {
    const size_t i = static_cast<size_t>(d);
    int64_t total = 0;
    if (padding == "same") {
      KILN_CHECK(g.stride[i] == 1, "[", op, "] expected stride 1 with padding 'same', got ",
                 stride);
      total = checked_mul(g.dilation[i], weight.size(2 + d) - 1, op);
    }
    g.lo.push_back(total / 2);
    g.hi.push_back(total - total / 2);
  }
  return convolve(op, input, weight, bias, g, groups);
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
              IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, int64_t groups) {
  return conv_ints("conv1d", 1, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv1d_padding(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                      IntArrayRef stride, std::string_view padding, IntArrayRef dilation,
                      int64_t groups) {
  return conv_str("conv1d", 1, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
              IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, int64_t groups) {
  return conv_ints("conv2d", 2, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv2d_padding(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                      IntArrayRef stride, std::string_view padding, IntArrayRef dilation,
                      int64_t groups) {
  return conv_str("conv2d", 2, input, weight, bias, stride, padding, dilation, groups);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("conv1d", &conv1d);
  m.impl("conv1d.padding", &conv1d_padding);
  m.impl("conv2d", &conv2d);
  m.impl("conv2d.padding", &conv2d_padding);
}

}  // namespace kiln::cpu
