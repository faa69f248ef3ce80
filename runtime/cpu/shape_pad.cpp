// constant_pad_nd and pad (mode "constant"). Pads come in (left, right) pairs
// from the last dim backwards; negative pads crop. As PyTorch: when no pad is
// positive the result is a copy of the cropped input (no fill, so no check of
// the value, and an empty dim is fine); otherwise every padded dim must come
// out with a positive size.

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/cpu/copy.h"
#include "runtime/cpu/index_utils.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

Tensor constant_pad_nd(const Tensor& self, IntArrayRef pad, const Scalar& value) {
  const char* op = "constant_pad_nd";
  check_defined(self, op, "self");
  KILN_CHECK(pad.size() % 2 == 0, "[", op, "] expected an even number of pads, got ", pad.size());
  const int64_t nd = self.dim();
  const int64_t npad = static_cast<int64_t>(pad.size()) / 2;
  KILN_CHECK(npad <= nd, "[", op, "] expected at most 2 pads per dim (", 2 * nd,
             " for this input), got ", pad.size());
  const int64_t first = nd - npad;  // the first padded dim

  // The cropped input: begin and size per dim.
  DimVector begin(nd, 0), cropped(self.sizes());
  bool any_positive = false;
  for (int64_t d = first; d < nd; ++d) {
    const int64_t left = pad[2 * (nd - d - 1)], right = pad[2 * (nd - d - 1) + 1];
    const int64_t size = self.sizes()[d];
    // Each bound first, so that no sum overflows.
    const bool crop_fits = left >= -size && right >= -size &&
                           std::min<int64_t>(left, 0) >= -size - std::min<int64_t>(right, 0);
    KILN_CHECK(crop_fits, "[", op, "] expected negative pads to crop at most the ", size,
               " elements of dim ", d, ", got pads ", left, " and ", right);
    if (left < 0) {
      begin[d] = -left;
      cropped[d] += left;
    }
    if (right < 0) cropped[d] += right;
    any_positive = any_positive || left > 0 || right > 0;
  }
  int64_t offset = self.storage_offset();
  for (int64_t d = 0; d < nd; ++d) offset += begin[d] * self.strides()[d];
  Tensor input = make_view(self, cropped, self.strides(), offset);
  if (!any_positive) return kiln::clone(input).contiguous();

  DimVector sizes(self.sizes()), inner_begin(nd, 0);
  for (int64_t d = first; d < nd; ++d) {
    const int64_t left = pad[2 * (nd - d - 1)], right = pad[2 * (nd - d - 1) + 1];
    sizes[d] = checked_add(checked_add(self.sizes()[d], left, op), right, op);
    KILN_CHECK(sizes[d] > 0, "[", op, "] expected a positive output size at dim ", d, ", got ",
               sizes[d], " (input size ", self.sizes()[d], ", pads ", left, " and ", right, ")");
    inner_begin[d] = std::max<int64_t>(left, 0);
  }
  check_convertible(value, self.dtype(), op);
  checked_bytes_numel(sizes, self.dtype(), op);
  Tensor out =
      empty_tensor(sizes, self.dtype(), self.is_meta() ? Device::meta() : Device::cpu(), op);
  if (self.is_meta()) return out;
  check_cpu(self, op, "self");
  kiln::fill_(out, value);
  int64_t inner_offset = 0;
  for (int64_t d = 0; d < nd; ++d) inner_offset += inner_begin[d] * out.strides()[d];
  copy_into(make_view(out, cropped, out.strides(), inner_offset), input);
  return out;
}

// Composite: checks the mode and forwards to constant_pad_nd.
Tensor pad(const Tensor& self, IntArrayRef pad, std::string_view mode,
           std::optional<double> value) {
  check_defined(self, "pad", "self");
  KILN_CHECK(pad.size() % 2 == 0, "[pad] expected an even number of pads, got ", pad.size());
  KILN_CHECK(static_cast<int64_t>(pad.size()) <= 2 * self.dim(),
             "[pad] expected at most 2 pads per dim (", 2 * self.dim(), " for this input), got ",
             pad.size());
  KILN_CHECK(mode == "constant",
             "[pad] only constant padding is implemented: expected mode "
             "'constant', got '",
             mode, "'");
  static const TypedOp<Tensor(const Tensor&, IntArrayRef, const Scalar&)> constant_pad(
      "constant_pad_nd");
  return constant_pad(self, pad, Scalar(value.value_or(0.0)));
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("constant_pad_nd", &constant_pad_nd);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("constant_pad_nd", &constant_pad_nd);
}
KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("pad", &pad);
}

}  // namespace kiln::cpu
