// interpolate: a composite of index_select and pointwise ops (and of
// adaptive_avg_pool for mode "area"), so that every device and mode has it as
// those ops are.
//
// Note [interpolate]
// PyTorch 1.13's torch.nn.functional.interpolate for (N, C, L) and
// (N, C, H, W) inputs. The output size per dim is `size`, or floor(in *
// scale_factor). Each output position i reads source positions computed with
// PyTorch's CPU arithmetic, in float32 (float64 for float64 inputs):
//   scale = in / out, or 1 / scale_factor where scale_factor is given and
//           recompute_scale_factor is not true; (in - 1) / (out - 1) (0 for
//           out = 1) for align_corners;
//   nearest:       min(floor(i * scale), in - 1);
//   nearest-exact: min(floor((i + 0.5) * scale), in - 1);
//   linear:        x = i * scale (align_corners) or max((i + 0.5) * scale - 0.5, 0),
//                  i0 = floor(x), i1 = min(i0 + 1, in - 1), w1 = x - i0, w0 = 1 - w1,
//                  a dim whose size does not change copied as it is.
// A float64 input's nearest positions are computed in float64 and rounded to
// float32 before the floor, as PyTorch's floorf does. The positions are
// arange and pointwise ops on the input's device, so a trace records them
// with the rest. Nearest modes index_select each dim (any allowed dtype,
// exact); linear ones index_select both neighbours and blend, the last dim
// first, in float32 for 16-bit inputs, rounded once at the end. "area" is
// adaptive_avg_pool over the output size.
//
// Deviations from PyTorch 1.13: its CPU rounds the scale to bfloat16 for
// bfloat16 inputs (its CUDA kernels and later releases do not), which moves
// positions by up to a few input elements at large sizes; kiln computes the
// scale in float32 for every 16-bit input. A one-element size or
// scale_factor list applies to every spatial dim (PyTorch raises unless the
// input has one), as kiln's other ops read one-int lists. 5-D inputs,
// "bicubic", "trilinear" and antialias are not supported. float16 inputs,
// which PyTorch's CPU lacks and its CUDA has, are taken on every device.

#include <cmath>
#include <optional>
#include <string_view>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/checked_sizes.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::cpu {
namespace {

constexpr const char* kOp = "interpolate";

bool nearest_mode(std::string_view mode) {
  return mode == "nearest" || mode == "nearest-exact";
}

// PyTorch's checks, in F.interpolate's order where it has one.
void check_arguments(const Tensor& input, const std::optional<IntArrayRef>& size,
                     const std::optional<ArrayRef<double>>& scale_factor, std::string_view mode,
                     std::optional<bool> align_corners, std::optional<bool> recompute,
                     bool antialias) {
  check_defined(input, kOp, "input");
  KILN_CHECK(nearest_mode(mode) || mode == "area" || mode == "linear" || mode == "bilinear",
             "[interpolate] expected mode 'nearest', 'nearest-exact', 'area', 'linear' or "
             "'bilinear', got '",
             mode, "'");
  KILN_CHECK(!align_corners || mode == "linear" || mode == "bilinear",
             "[interpolate] expected align_corners unset for mode '", mode,
             "' (it applies to 'linear' and 'bilinear'), got ", *align_corners ? "true" : "false");
  KILN_CHECK(input.dim() == 3 || input.dim() == 4,
             "[interpolate] expected input of 3 or 4 dims (N, C, L) or (N, C, H, W), got ",
             input.dim(), " dims (sizes ", input.sizes(), ")");
  KILN_CHECK(mode != "linear" || input.dim() == 3,
             "[interpolate] expected input of 3 dims (N, C, L) for mode 'linear', got ",
             input.dim(), " dims (sizes ", input.sizes(), ")");
  KILN_CHECK(mode != "bilinear" || input.dim() == 4,
             "[interpolate] expected input of 4 dims (N, C, H, W) for mode 'bilinear', got ",
             input.dim(), " dims (sizes ", input.sizes(), ")");
  KILN_CHECK(size.has_value() != scale_factor.has_value(),
             "[interpolate] expected exactly one of size and scale_factor, got ",
             size ? "both" : "neither");
  KILN_CHECK(!(size && recompute.value_or(false)),
             "[interpolate] expected recompute_scale_factor unset or false with an explicit size, "
             "got true");
  KILN_CHECK(!antialias,
             "[interpolate] expected antialias false (kiln has no anti-aliased modes), got true");
  const DType dt = input.dtype();
  KILN_CHECK(is_floating(dt) || (nearest_mode(mode) && dt == kUInt8),
             "[interpolate] expected input",
             " of a floating dtype (float32, float64, float16 or bfloat16)",
             nearest_mode(mode) ? " or uint8" : "", " for mode '", mode, "', got ", dt);
  for (int64_t d = 1; d < input.dim(); ++d) {
    KILN_CHECK(input.size(d) > 0,
               "[interpolate] expected input with non-empty dims except the batch (N), got sizes ",
               input.sizes());
  }
}

// The output size per spatial dim, and the scale_factor the positions use
// (unset: in / out).
void output_sizes(const Tensor& input, const std::optional<IntArrayRef>& size,
                  const std::optional<ArrayRef<double>>& scale_factor, bool recompute,
                  DimVector* out, std::vector<std::optional<double>>* scales) {
  const int64_t nd = input.dim() - 2;
  const size_t given = size ? size->size() : scale_factor->size();
  KILN_CHECK(given == 1 || static_cast<int64_t>(given) == nd, "[interpolate] expected ",
             size ? "size" : "scale_factor", " to be one value or a list of ", nd,
             " (one per spatial dim), got ", size ? size->size() : scale_factor->size(),
             " values for input of sizes ", input.sizes());
  for (int64_t d = 0; d < nd; ++d) {
    const size_t i = given == 1 ? 0 : static_cast<size_t>(d);
    if (size) {
      KILN_CHECK((*size)[i] >= 1, "[interpolate] expected size >= 1 in every spatial dim, got ",
                 *size);
      out->push_back((*size)[i]);
      scales->push_back(std::nullopt);
      continue;
    }
    const double s = (*scale_factor)[i];
    KILN_CHECK(std::isfinite(s) && s > 0,
               "[interpolate] expected scale_factor finite and > 0 in every spatial dim, got ",
               *scale_factor);
    const double o = std::floor(static_cast<double>(input.size(2 + d)) * s);
    KILN_CHECK(o >= 1,
               "[interpolate] expected scale_factor to give an output of at least 1 "
               "element per spatial dim, got scale_factor ",
               *scale_factor, " for input of sizes ", input.sizes());
    KILN_CHECK(o < 0x1p62,
               "[interpolate] expected scale_factor to give an output size that fits "
               "int64, got scale_factor ",
               *scale_factor, " for input of sizes ", input.sizes());
    out->push_back(static_cast<int64_t>(o));
    scales->push_back(recompute ? std::nullopt : std::optional<double>(s));
  }
}

// PyTorch's scale in its dtype (Note [interpolate]).
double source_scale(int64_t in, int64_t out, std::optional<double> scale_factor, bool align_corners,
                    bool f64) {
  double scale;
  if (align_corners) {
    if (out <= 1) return 0;
    scale = f64 ? static_cast<double>(in - 1) / static_cast<double>(out - 1)
                : static_cast<double>(static_cast<float>(in - 1) / static_cast<float>(out - 1));
  } else if (scale_factor) {
    scale = 1.0 / *scale_factor;
  } else {
    scale = f64 ? static_cast<double>(in) / static_cast<double>(out)
                : static_cast<double>(static_cast<float>(in) / static_cast<float>(out));
  }
  return f64 ? scale : static_cast<double>(static_cast<float>(scale));
}

TensorOptions options(DType dt, const Tensor& x) {
  return TensorOptions(dt).device(x.device());
}

// The nearest source position of each output position, (out,) int64.
Tensor nearest_index(const Tensor& x, int64_t in, int64_t out, std::optional<double> scale_factor,
                     bool exact) {
  const bool f64 = x.dtype() == kFloat64;
  const double scale = source_scale(in, out, scale_factor, false, f64);
  Tensor i = kiln::arange(out, options(f64 ? kFloat64 : kFloat32, x));
  Tensor real = (exact ? i + 0.5 : i) * scale;
  if (f64) real = real.to(kFloat32);  // PyTorch's floorf
  return kiln::clamp(kiln::floor(real).to(kInt64), std::nullopt, in - 1);
}

// x blended along `dim` between its two neighbours of each output position.
Tensor lerp_along(const Tensor& x, int64_t dim, int64_t out, std::optional<double> scale_factor,
                  bool align_corners, DType compute) {
  const int64_t in = x.size(dim);
  const bool f64 = compute == kFloat64;
  const double scale = source_scale(in, out, scale_factor, align_corners, f64);
  Tensor i = kiln::arange(out, options(compute, x));
  Tensor real = align_corners ? i * scale : kiln::clamp((i + 0.5) * scale - 0.5, 0.0);
  Tensor i0 = kiln::clamp(real.to(kInt64), std::nullopt, in - 1);
  Tensor i1 = kiln::clamp(i0 + 1, std::nullopt, in - 1);
  Tensor w1 = real - i0.to(compute);
  DimVector shape{out};
  for (int64_t d = dim + 1; d < x.dim(); ++d) shape.push_back(1);
  w1 = w1.view(shape);
  Tensor a = kiln::index_select(x, dim, i0).to(compute);
  Tensor b = kiln::index_select(x, dim, i1).to(compute);
  return a * (1.0 - w1) + b * w1;
}

Tensor interpolate(const Tensor& input, std::optional<IntArrayRef> size,
                   std::optional<ArrayRef<double>> scale_factor, std::string_view mode,
                   std::optional<bool> align_corners, std::optional<bool> recompute_scale_factor,
                   bool antialias) {
  check_arguments(input, size, scale_factor, mode, align_corners, recompute_scale_factor,
                  antialias);
  DimVector out;
  std::vector<std::optional<double>> scales;
  // "area" always recomputes: its windows come from the sizes alone.
  output_sizes(input, size, scale_factor, recompute_scale_factor.value_or(false) || mode == "area",
               &out, &scales);
  const int64_t nd = input.dim() - 2;
  if (mode == "area") {
    return nd == 1 ? kiln::adaptive_avg_pool1d(input, out) : kiln::adaptive_avg_pool2d(input, out);
  }
  const DType dt = input.dtype();
  Tensor y = input;
  if (nearest_mode(mode)) {
    for (int64_t d = nd - 1; d >= 0; --d) {
      const size_t i = static_cast<size_t>(d);
      y = kiln::index_select(
          y, 2 + d,
          nearest_index(input, input.size(2 + d), out[i], scales[i], mode == "nearest-exact"));
    }
    return y;
  }
  const DType compute = is_reduced_float(dt) ? kFloat32 : dt;
  bool resized = false;
  for (int64_t d = nd - 1; d >= 0; --d) {
    const size_t i = static_cast<size_t>(d);
    if (out[i] == input.size(2 + d)) continue;  // copied, as PyTorch does
    y = lerp_along(y, 2 + d, out[i], scales[i], align_corners.value_or(false), compute);
    resized = true;
  }
  // A new tensor, never the input itself.
  return resized ? y.to(dt).contiguous() : kiln::clone(input).contiguous();
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("interpolate", &interpolate);
}

}  // namespace kiln::cpu
