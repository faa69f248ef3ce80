// max_pool1d/2d (and their _with_indices forms), avg_pool1d/2d and the
// adaptive pools: composites of pad, a strided window view or index_select,
// and reductions, so that every device and mode has them as those ops are.
//
// Note [pooling]
// PyTorch 1.13's torch.nn.functional pools over (N, C, L...) or unbatched
// (C, L...) inputs. A pool's windows are a view, as conv's are (Note
// [conv]): the input, padded where padding asks (-inf for max, 0 for avg)
// and past its end where ceil_mode adds a last, partial window, is viewed
// through as_strided as (N, C, out..., k...), a window step being stride
// times the input's stride and a tap step dilation times it. amax or a sum
// over the last dims reduces them; nothing is copied before the reduction.
// PyTorch's output size per dim is
//   floor((in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0)) / stride) + 1,
// less one when ceil_mode starts the last window at or past in + pad.
//
// avg divides each window's sum by PyTorch's count: with count_include_pad
// the window clipped to [-pad, in + pad) (all of it, unless ceil_mode's last
// window runs past the padding), else clipped to the input; divisor_override
// replaces both. The counts come from the same window sum over a tensor of
// ones padded with ones (or zeros) and then zeros: per dim, so the count
// tensor is (out...), not (N, C, out...). int64 inputs (PyTorch's CPU takes
// them) sum in int64 and divide truncating toward zero, as PyTorch's C++
// division does.
//
// Adaptive pools take PyTorch's window i = [floor(i * in / out),
// ceil((i + 1) * in / out)). Where out divides in, those are a plain pool
// (kernel and stride in / out). Else the windows differ in length: each is
// gathered by index_select at kmax = min(in, ceil(in / out) + 1) taps, the
// taps past a window's end repeat its last element (harmless to a max) and
// are masked out of a sum.
//
// _with_indices returns, as PyTorch, each maximum's flat position in its
// input plane (h * W + w). The window matrix (N, C, out..., K) is copied
// once and max.dim gives each window's first maximum; a second index over
// (out..., K) holds each tap's position, and gather picks it. A tap in the
// padding is given the window's first tap inside the input, which is where
// PyTorch starts and what it returns when every value is -inf. A NaN is the
// maximum, as in PyTorch, but kiln returns the first NaN's position where
// PyTorch returns the last's.
//
// 16-bit inputs: max is exact in any dtype; avg sums in float32 and divides
// there, rounding once at the end (as PyTorch's CPU and CUDA kernels do).
// Dtypes as PyTorch 1.13: max and adaptive pools take floating inputs, avg
// floating and int64 ones; float16, which PyTorch's CPU lacks and its CUDA
// has, is taken on every device.
//
// PyTorch's max_pool1d (its CPU path without indices) returns an empty
// result for a kernel larger than the padded input; kiln raises, as
// max_pool1d_with_indices and every other pool do.

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/checked_sizes.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/spatial_args.h"

namespace kiln::cpu {
namespace {

constexpr uint32_t kInt64Mask = 1u << 4;

const char* input_layout(int64_t nd) {
  return nd == 1 ? "(C, L) or (N, C, L)" : "(C, H, W) or (N, C, H, W)";
}

// PyTorch's checks of the input: rank, dtype and sizes. Every dim but the
// batch must be non-empty (the channels too, unless `empty_channels`).
void check_input(const char* op, int64_t nd, const Tensor& input, bool int64_too,
                 bool empty_channels = false) {
  check_defined(input, op, "input");
  KILN_CHECK(input.dim() == nd + 1 || input.dim() == nd + 2, "[", op, "] expected input of ",
             nd + 1, " or ", nd + 2, " dims ", input_layout(nd), ", got ", input.dim(),
             " dims (sizes ", input.sizes(), ")");
  const DType dt = input.dtype();
  KILN_CHECK(is_floating(dt) || (int64_too && dt == kInt64), "[", op,
             "] expected input of a floating dtype (float32, float64, float16 or bfloat16)",
             int64_too ? " or int64" : "", ", got ", dt);
  const int64_t first = input.dim() == nd + 2 ? 1 : 0;
  for (int64_t d = first; d < input.dim(); ++d) {
    if (d == first && empty_channels) continue;
    KILN_CHECK(input.size(d) > 0, "[", op, "] expected input with non-empty dims",
               first ? " except the batch (N)" : "", ", got sizes ", input.sizes());
  }
}

// One pool's geometry per spatial dim. `extra` pads past in + padding so
// that ceil_mode's last window fits in the view.
struct Pool {
  DimVector in, kernel, stride, padding, dilation, out, extra;
};

int64_t floor_div(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0);
}

Pool geometry(const char* op, const Tensor& x, IntArrayRef kernel_size, IntArrayRef stride,
              IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  const int64_t nd = x.dim() - 2;
  Pool g;
  g.kernel = spatial_per_dim(op, nd, kernel_size, "kernel_size", 1);
  g.stride = spatial_per_dim(op, nd, stride, "stride", 1, &g.kernel);
  g.padding = spatial_per_dim(op, nd, padding, "padding", 0);
  g.dilation = spatial_per_dim(op, nd, dilation, "dilation", 1);
  for (int64_t d = 0; d < nd; ++d) {
    const size_t i = static_cast<size_t>(d);
    KILN_CHECK(g.padding[i] <= g.kernel[i] / 2, "[", op,
               "] expected padding <= kernel_size / 2 in every spatial dim, got padding ",
               g.padding.ref(), " with kernel_size ", g.kernel.ref());
  }
  bool fits = true;
  for (int64_t d = 0; d < nd; ++d) {
    const size_t i = static_cast<size_t>(d);
    const int64_t in = x.size(2 + d), k = g.kernel[i], s = g.stride[i], p = g.padding[i];
    const int64_t span = checked_add(checked_mul(g.dilation[i], k - 1, op), 1, op);
    const int64_t padded = checked_add(in, checked_mul(p, 2, op), op);
    int64_t out =
        floor_div(checked_add(padded - span, ceil_mode ? s - 1 : 0, op), s) + 1;  // PyTorch's
    if (ceil_mode && out >= 1 && (out - 1) * s >= in + p) --out;
    g.in.push_back(in);
    g.out.push_back(out);
    fits = fits && out >= 1;
    g.extra.push_back(out >= 1 ? std::max<int64_t>(0, (out - 1) * s + span - padded) : 0);
  }
  KILN_CHECK(fits, "[", op,
             "] expected an output of at least 1 element per spatial dim, got input of spatial "
             "sizes ",
             g.in.ref(), " giving ", g.out.ref(), " (kernel_size ", g.kernel.ref(), ", stride ",
             g.stride.ref(), ", padding ", g.padding.ref(), ", dilation ", g.dilation.ref(),
             ", ceil_mode ", ceil_mode ? "true" : "false", ")");
  return g;
}

// x (N, C, in...) padded with `fill` as g asks, viewed as its windows
// (N, C, out..., k...) (Note [pooling]). A dim of size 1 keeps the input's
// stride, so no step multiplies past int64.
Tensor window_view(Tensor x, const Pool& g, double fill) {
  const int64_t nd = x.dim() - 2;
  bool any_pad = false;
  DimVector pads;  // pad's order: (lo, hi) from the last dim
  for (int64_t d = nd - 1; d >= 0; --d) {
    const size_t i = static_cast<size_t>(d);
    pads.push_back(g.padding[i]);
    pads.push_back(g.padding[i] + g.extra[i]);
    any_pad = any_pad || g.padding[i] != 0 || g.extra[i] != 0;
  }
  if (any_pad) x = kiln::pad(x, pads, "constant", fill);
  DimVector sizes{x.size(0), x.size(1)}, strides{x.stride(0), x.stride(1)};
  for (int64_t d = 0; d < nd; ++d) {
    const size_t i = static_cast<size_t>(d);
    sizes.push_back(g.out[i]);
    strides.push_back(g.out[i] == 1 ? x.stride(2 + d) : x.stride(2 + d) * g.stride[i]);
  }
  for (int64_t d = 0; d < nd; ++d) {
    const size_t i = static_cast<size_t>(d);
    sizes.push_back(g.kernel[i]);
    strides.push_back(g.kernel[i] == 1 ? x.stride(2 + d) : x.stride(2 + d) * g.dilation[i]);
  }
  return x.as_strided(sizes, strides);
}

TensorOptions int64_on(const Tensor& x) {
  return TensorOptions(kInt64).device(x.device());
}

// Per dim, the input position of each window's taps, (out, k), a tap in the
// padding moved to the window's first tap inside the input (Note [pooling]).
Tensor tap_positions(const Tensor& x, const Pool& g, int64_t d) {
  const size_t i = static_cast<size_t>(d);
  const int64_t out = g.out[i], k = g.kernel[i], s = g.stride[i], dil = g.dilation[i];
  Tensor start = kiln::arange(out, int64_on(x)).view({out, 1}) * s - g.padding[i];
  Tensor taps = start + kiln::arange(k, int64_on(x)).view({1, k}) * dil;
  Tensor inside = kiln::logical_and(kiln::ge(taps, int64_t{0}), kiln::lt(taps, g.in[i]));
  // PyTorch's first tap: start, stepped by dilation until it is >= 0.
  Tensor skip = kiln::clamp(kiln::div(kiln::neg(start) + (dil - 1), dil, "floor"), int64_t{0});
  return kiln::where(inside, taps, start + skip * dil);
}

// Adaptive windows along one dim (Note [pooling]): the (out, kmax) positions
// of their taps, those past a window's end repeating its last; which taps
// are the window's; and each window's length.
struct Bins {
  Tensor taps, inside, count;
};

Bins adaptive_bins(const char* op, const Tensor& x, int64_t in, int64_t out) {
  const int64_t kmax =
      std::min(in, in / out + 2);                // ceil(in / out) + 1 where out does not divide in
  checked_mul(checked_add(out, 1, op), in, op);  // (i + 1) * in below
  Tensor i = kiln::arange(out, int64_on(x));
  Tensor start = kiln::floor_divide(i * in, out).view({out, 1});
  Tensor end = kiln::floor_divide((i + 1) * in + (out - 1), out).view({out, 1});
  Tensor taps = start + kiln::arange(kmax, int64_on(x)).view({1, kmax});
  Bins b;
  b.inside = kiln::lt(taps, end);
  b.taps = kiln::minimum(taps, end - 1);
  b.count = (end - start).view({out});
  return b;
}

// x's windows gathered at the bins' taps: (N, C, out..., kmax...).
Tensor gathered(const Tensor& x, const std::vector<Bins>& bins) {
  Tensor g = x;
  DimVector sizes{x.size(0), x.size(1)};
  for (size_t d = 0; d < bins.size(); ++d) {
    g = kiln::index_select(g, static_cast<int64_t>(2 + d), bins[d].taps.reshape({-1}));
    sizes.push_back(bins[d].taps.size(0));
    sizes.push_back(bins[d].taps.size(1));
  }
  g = g.view(sizes);  // (N, C, out0, k0[, out1, k1])
  return bins.size() == 1 ? g : g.permute({0, 1, 2, 4, 3, 5});
}

// The last nd dims of a (N, C, out..., k...) tensor.
DimVector window_dims(int64_t nd) {
  DimVector dims;
  for (int64_t d = 0; d < nd; ++d) dims.push_back(2 + nd + d);
  return dims;
}

// The flat input-plane position (h * W + w) of every tap, (out..., k...),
// from per-dim (out, k) positions.
Tensor plane_positions(const std::vector<Tensor>& taps, const DimVector& in) {
  if (taps.size() == 1) return taps[0];
  const int64_t oh = taps[0].size(0), kh = taps[0].size(1);
  const int64_t ow = taps[1].size(0), kw = taps[1].size(1);
  return taps[0].view({oh, 1, kh, 1}) * in[1] + taps[1].view({1, ow, 1, kw});
}

// Each window's first maximum and its input-plane position (Note [pooling]).
std::tuple<Tensor, Tensor> max_with_positions(const Tensor& windows, const Tensor& positions) {
  const int64_t nd = positions.dim() / 2;
  DimVector flat{windows.size(0), windows.size(1)}, pos_flat,
      expanded{windows.size(0), windows.size(1)};
  int64_t k = 1;
  for (int64_t d = 0; d < nd; ++d) {
    flat.push_back(windows.size(2 + d));
    pos_flat.push_back(windows.size(2 + d));
    expanded.push_back(windows.size(2 + d));
    k *= windows.size(2 + nd + d);
  }
  flat.push_back(k);
  pos_flat.push_back(k);
  expanded.push_back(k);
  auto [values, arg] = kiln::max(windows.reshape(flat), -1);
  Tensor index =
      kiln::gather(positions.reshape(pos_flat).expand(expanded), -1, arg.unsqueeze(-1)).squeeze(-1);
  return {values.contiguous(), index.contiguous()};
}

Tensor batched(const Tensor& input, int64_t nd) {
  return input.dim() == nd + 2 ? input : input.unsqueeze(0);
}
Tensor unbatched_like(const Tensor& y, const Tensor& input, int64_t nd) {
  return input.dim() == nd + 2 ? y : y.squeeze(0);
}

// --- max_pool ------------------------------------------------------------------

std::tuple<Tensor, Tensor> max_pool(const char* op, int64_t nd, const Tensor& input,
                                    IntArrayRef kernel_size, IntArrayRef stride,
                                    IntArrayRef padding, IntArrayRef dilation, bool ceil_mode,
                                    bool with_indices) {
  check_input(op, nd, input, false);
  const Tensor x = batched(input, nd);
  const Pool g = geometry(op, x, kernel_size, stride, padding, dilation, ceil_mode);
  const Tensor windows = window_view(x, g, -std::numeric_limits<double>::infinity());
  if (!with_indices) {
    return {unbatched_like(kiln::amax(windows, window_dims(nd)).contiguous(), input, nd), {}};
  }
  std::vector<Tensor> taps;
  for (int64_t d = 0; d < nd; ++d) taps.push_back(tap_positions(x, g, d));
  auto [values, index] = max_with_positions(windows, plane_positions(taps, g.in));
  return {unbatched_like(values, input, nd), unbatched_like(index, input, nd)};
}

Tensor max_pool1d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                  IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  return std::get<0>(
      max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode, false));
}
Tensor max_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                  IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  return std::get<0>(
      max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode, false));
}
std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor& input, IntArrayRef kernel_size,
                                                   IntArrayRef stride, IntArrayRef padding,
                                                   IntArrayRef dilation, bool ceil_mode) {
  return max_pool("max_pool1d_with_indices", 1, input, kernel_size, stride, padding, dilation,
                  ceil_mode, true);
}
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, IntArrayRef kernel_size,
                                                   IntArrayRef stride, IntArrayRef padding,
                                                   IntArrayRef dilation, bool ceil_mode) {
  return max_pool("max_pool2d_with_indices", 2, input, kernel_size, stride, padding, dilation,
                  ceil_mode, true);
}

// --- avg_pool ------------------------------------------------------------------

// The divisor of each window, (out...): per dim, the window sum of ones
// over the input, padded with ones (count_include_pad) or zeros, then with
// zeros past in + padding (Note [pooling]).
Tensor window_counts(const Tensor& x, const Pool& g, bool count_include_pad, DType dt) {
  Tensor counts;
  const size_t nd = g.in.size();
  for (size_t i = 0; i < nd; ++i) {
    Tensor ones = kiln::ones({g.in[i]}, TensorOptions(dt).device(x.device()));
    if (g.padding[i] > 0) {
      ones = kiln::pad(ones, {g.padding[i], g.padding[i]}, "constant", count_include_pad ? 1 : 0);
    }
    if (g.extra[i] > 0) ones = kiln::pad(ones, {0, g.extra[i]});
    Tensor c = ones.as_strided({g.out[i], g.kernel[i]}, {g.stride[i], 1}).sum({1});
    counts = i == 0 ? c : counts.view({-1, 1}) * c.view({1, -1});
  }
  return counts;
}

// sum / divisor: truncated toward zero for int64, as PyTorch's C++ divides.
Tensor divide(const Tensor& sum, const Tensor& divisor) {
  return is_floating(sum.dtype()) ? sum / divisor : kiln::div(sum, divisor, "trunc");
}

Tensor avg_pool(const char* op, int64_t nd, const Tensor& input, IntArrayRef kernel_size,
                IntArrayRef stride, IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                std::optional<int64_t> divisor_override) {
  check_input(op, nd, input, true);
  KILN_CHECK(!divisor_override || *divisor_override != 0, "[", op,
             "] expected divisor_override to be unset or non-zero, got 0");
  const Tensor x = batched(input, nd);
  const Pool g = geometry(op, x, kernel_size, stride, padding, 1, ceil_mode);
  const DType dt = input.dtype(), compute = is_reduced_float(dt) ? kFloat32 : dt;
  Tensor sum = kiln::sum(window_view(x, g, 0), window_dims(nd), false, compute);
  Tensor y = divisor_override
                 ? divide(sum, kiln::scalar_tensor(*divisor_override,
                                                   TensorOptions(compute).device(x.device())))
                 : divide(sum, window_counts(x, g, count_include_pad, compute));
  return unbatched_like(y.to(dt).contiguous(), input, nd);
}

Tensor avg_pool1d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                  IntArrayRef padding, bool ceil_mode, bool count_include_pad) {
  return avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode,
                  count_include_pad, std::nullopt);
}
Tensor avg_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                  IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                  std::optional<int64_t> divisor_override) {
  return avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode,
                  count_include_pad, divisor_override);
}

// --- Adaptive pools ----------------------------------------------------------------

// The output sizes, checked; true when every window has the same length
// (out divides in), so the pool is a plain one (Note [pooling]).
bool adaptive_sizes(const char* op, int64_t nd, const Tensor& x, IntArrayRef output_size,
                    DimVector* out) {
  KILN_CHECK(static_cast<int64_t>(output_size.size()) == nd || output_size.size() == 1, "[", op,
             "] expected output_size to be one int or a list of ", nd,
             " (one per spatial dim), got ", output_size);
  bool uniform = true;
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t o = output_size[output_size.size() == 1 ? 0 : static_cast<size_t>(d)];
    KILN_CHECK(o >= 0, "[", op, "] expected output_size >= 0 in every spatial dim, got ",
               output_size);
    out->push_back(o);
    uniform = uniform && o > 0 && x.size(2 + d) % o == 0;
  }
  return uniform;
}

// The uniform case as a Pool: kernel and stride in / out.
Pool uniform_pool(const Tensor& x, const DimVector& out) {
  Pool g;
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t in = x.size(2 + static_cast<int64_t>(i));
    g.in.push_back(in);
    g.out.push_back(out[i]);
    g.kernel.push_back(in / out[i]);
    g.stride.push_back(in / out[i]);
    g.padding.push_back(0);
    g.dilation.push_back(1);
    g.extra.push_back(0);
  }
  return g;
}

// An empty output: (N, C, out...) with a zero among out.
bool empty_output(const Tensor& x, const DimVector& out, DimVector* sizes) {
  *sizes = {x.size(0), x.size(1)};
  bool empty = false;
  for (int64_t o : out) {
    sizes->push_back(o);
    empty = empty || o == 0;
  }
  return empty;
}

Tensor adaptive_avg_pool(const char* op, int64_t nd, const Tensor& input, IntArrayRef output_size) {
  check_input(op, nd, input, false, /*empty_channels=*/true);
  const Tensor x = batched(input, nd);
  DimVector out, sizes;
  const bool uniform = adaptive_sizes(op, nd, x, output_size, &out);
  const DType dt = input.dtype(), compute = is_reduced_float(dt) ? kFloat32 : dt;
  if (empty_output(x, out, &sizes)) {
    return unbatched_like(kiln::empty(sizes, TensorOptions(dt).device(x.device())), input, nd);
  }
  Tensor y;
  if (uniform) {
    const Pool g = uniform_pool(x, out);
    int64_t count = 1;
    for (int64_t k : g.kernel) count *= k;
    y = kiln::sum(window_view(x, g, 0), window_dims(nd), false, compute) / count;
  } else {
    std::vector<Bins> bins;
    for (int64_t d = 0; d < nd; ++d) {
      bins.push_back(adaptive_bins(op, x, x.size(2 + d), out[static_cast<size_t>(d)]));
    }
    Tensor inside = bins[0].inside, count = bins[0].count.to(compute);
    if (nd == 2) {
      const int64_t oh = out[0], ow = out[1];
      inside = kiln::logical_and(inside.view({oh, 1, -1, 1}), bins[1].inside.view({1, ow, 1, -1}));
      count = count.view({oh, 1}) * bins[1].count.to(compute).view({1, ow});
    }
    Tensor w = kiln::where(inside, gathered(x, bins), 0.0);
    y = kiln::sum(w, window_dims(nd), false, compute) / count;
  }
  return unbatched_like(y.to(dt).contiguous(), input, nd);
}

std::tuple<Tensor, Tensor> adaptive_max_pool(const char* op, int64_t nd, const Tensor& input,
                                             IntArrayRef output_size) {
  check_input(op, nd, input, false);
  const Tensor x = batched(input, nd);
  DimVector out, sizes;
  const bool uniform = adaptive_sizes(op, nd, x, output_size, &out);
  if (empty_output(x, out, &sizes)) {
    Tensor v = kiln::empty(sizes, TensorOptions(input.dtype()).device(x.device()));
    Tensor i = kiln::empty(sizes, int64_on(x));
    return {unbatched_like(v, input, nd), unbatched_like(i, input, nd)};
  }
  Tensor windows;
  std::vector<Tensor> taps;
  DimVector in;
  for (int64_t d = 0; d < nd; ++d) in.push_back(x.size(2 + d));
  if (uniform) {
    const Pool g = uniform_pool(x, out);
    windows = window_view(x, g, 0);
    for (int64_t d = 0; d < nd; ++d) taps.push_back(tap_positions(x, g, d));
  } else {
    std::vector<Bins> bins;
    for (int64_t d = 0; d < nd; ++d) {
      bins.push_back(adaptive_bins(op, x, in[static_cast<size_t>(d)], out[static_cast<size_t>(d)]));
      taps.push_back(bins.back().taps);
    }
    windows = gathered(x, bins);
  }
  auto [values, index] = max_with_positions(windows, plane_positions(taps, in));
  return {unbatched_like(values, input, nd), unbatched_like(index, input, nd)};
}

Tensor adaptive_avg_pool1d(const Tensor& input, IntArrayRef output_size) {
  return adaptive_avg_pool("adaptive_avg_pool1d", 1, input, output_size);
}
Tensor adaptive_avg_pool2d(const Tensor& input, IntArrayRef output_size) {
  return adaptive_avg_pool("adaptive_avg_pool2d", 2, input, output_size);
}
std::tuple<Tensor, Tensor> adaptive_max_pool1d(const Tensor& input, IntArrayRef output_size) {
  return adaptive_max_pool("adaptive_max_pool1d", 1, input, output_size);
}
std::tuple<Tensor, Tensor> adaptive_max_pool2d(const Tensor& input, IntArrayRef output_size) {
  return adaptive_max_pool("adaptive_max_pool2d", 2, input, output_size);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("max_pool1d", &max_pool1d);
  m.impl("max_pool2d", &max_pool2d);
  m.impl("max_pool1d_with_indices", &max_pool1d_with_indices);
  m.impl("max_pool2d_with_indices", &max_pool2d_with_indices);
  m.impl("avg_pool1d", &avg_pool1d);
  m.impl("avg_pool2d", &avg_pool2d);
  m.impl("adaptive_avg_pool1d", &adaptive_avg_pool1d);
  m.impl("adaptive_avg_pool2d", &adaptive_avg_pool2d);
  m.impl("adaptive_max_pool1d", &adaptive_max_pool1d);
  m.impl("adaptive_max_pool2d", &adaptive_max_pool2d);
}

}  // namespace kiln::cpu
