// Padding: constant_pad_nd, the reflect / replicate / circular kernels
// (reflection_pad1d..3d, replication_pad1d..3d, _pad_circular: Note [Pad
// modes] in shape_pad.h), and pad, which picks one by mode as
// torch.nn.functional.pad does. Pads come in (left, right) pairs from the last
// dim backwards; negative pads crop. constant_pad_nd, as PyTorch: when no pad
// is positive the result is a copy of the cropped input (no fill, so no check
// of the value, and an empty dim is fine); otherwise every padded dim must
// come out with a positive size.

#include "runtime/cpu/shape_pad.h"

#include <algorithm>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/composite_errors.h"
#include "runtime/cpu/copy.h"
#include "runtime/cpu/index_utils.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {

PadGeometry pad_mode_geometry(const char* op, PadMode mode, const Tensor& self, IntArrayRef pad,
                              int64_t spatial) {
  check_defined(self, op, "self");
  if (spatial == 0) {
    KILN_CHECK(!pad.empty() && pad.size() % 2 == 0, "[", op,
               "] expected a positive, even number of pads, got ", pad.size());
    spatial = static_cast<int64_t>(pad.size()) / 2;
  }
  KILN_CHECK(static_cast<int64_t>(pad.size()) == 2 * spatial, "[", op, "] expected ", 2 * spatial,
             " pads, got ", pad.size());
  const int64_t nd = self.dim();
  KILN_CHECK(nd == spatial + 1 || nd == spatial + 2, "[", op, "] expected a ", spatial + 1,
             "-D input or a ", spatial + 2, "-D (batched) one, got shape ", self.sizes());
  if (mode != PadMode::Circular) {
    // A batched input may have an empty batch; no other dim may be empty.
    for (int64_t d = nd - spatial - 1; d < nd; ++d) {
      KILN_CHECK(self.size(d) != 0, "[", op,
                 "] expected no empty dim but the batch dim, got shape ", self.sizes());
    }
  }
  PadGeometry g;
  g.sizes = DimVector(self.sizes());
  for (int64_t d = nd - spatial; d < nd; ++d) {
    const int64_t k = nd - 1 - d;
    const int64_t left = pad[2 * k], right = pad[2 * k + 1], n = self.size(d);
    const int64_t size = checked_add(checked_add(n, left, op), right, op);
    PadDim p;
    p.dim = d;
    p.left = left;
    p.n = n;
    if (mode == PadMode::Circular) {
      KILN_CHECK(-std::min<int64_t>(left, 0) - std::min<int64_t>(right, 0) <= n, "[", op,
                 "] expected negative pads to crop at most the ", n, " elements of dim ", d,
                 ", got pads ", left, " and ", right);
      KILN_CHECK(size >= 0, "[", op, "] expected a non-negative output size at dim ", d, ", got ",
                 size, " (input size ", n, ", pads ", left, " and ", right, ")");
      p.lo = std::max<int64_t>(-left, 0);
      p.n = n - p.lo - std::max<int64_t>(-right, 0);
      KILN_CHECK(left <= p.n && right <= p.n, "[", op, "] expected pads of at most ", p.n,
                 " at dim ", d, " (the input size ", n,
                 " less the cropped part: circular padding wraps once), got ", left, " and ",
                 right);
    } else {
      if (mode == PadMode::Reflect) {
        KILN_CHECK(left < n && right < n, "[", op, "] expected pads smaller than the input size ",
                   n, " at dim ", d, ", got ", left, " and ", right);
      }
      KILN_CHECK(size > 0, "[", op, "] expected a positive output size at dim ", d, ", got ", size,
                 " (input size ", n, ", pads ", left, " and ", right, ")");
    }
    g.sizes[d] = size;
    g.dims.push_back(p);
  }
  checked_bytes_numel(g.sizes, self.dtype(), op);
  return g;
}

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
  // A clone keeps self's layout (Note [Preserved layout]), as PyTorch's.
  if (!any_positive) return kiln::clone(input);

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

// --- reflect, replicate, circular ---------------------------------------------------

// out[r, j] = src[row_base(r) + inner[j]]: `table[d][c]` is the input offset
// (in elements) that output coordinate c of dim d reads.
template <class Bits>
void gather_padded(const Tensor& out, const Tensor& self,
                   const std::vector<std::vector<int64_t>>& table) {
  const int64_t nd = out.dim();
  const int64_t w = out.size(nd - 1);
  const int64_t rows = out.numel() / w;
  Bits* dst = static_cast<Bits*>(out.data_ptr());
  const Bits* src = static_cast<const Bits*>(self.data_ptr());
  const int64_t* inner = table[nd - 1].data();
  parallel_range(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          int64_t rem = r, base = 0;
          for (int64_t d = nd - 2; d >= 0; --d) {
            base += table[d][rem % out.size(d)];
            rem /= out.size(d);
          }
          Bits* o = dst + r * w;
          for (int64_t j = 0; j < w; ++j) o[j] = src[base + inner[j]];
        }
      },
      std::max<int64_t>(1, kDefaultGrain / w));
}

Tensor pad_by_mode(const char* op, PadMode mode, const Tensor& self, IntArrayRef pad,
                   int64_t spatial) {
  const PadGeometry g = pad_mode_geometry(op, mode, self, pad, spatial);
  const bool meta = self.is_meta();
  Tensor out = empty_tensor(g.sizes, self.dtype(), meta ? Device::meta() : Device::cpu());
  if (meta || out.numel() == 0) return out;
  check_cpu(self, op, "self");
  std::vector<std::vector<int64_t>> table(out.dim());
  for (int64_t d = 0; d < out.dim(); ++d) {
    table[d].resize(out.size(d));
    for (int64_t j = 0; j < out.size(d); ++j) table[d][j] = j * self.stride(d);
  }
  for (const PadDim& p : g.dims) {
    for (int64_t j = 0; j < out.size(p.dim); ++j) {
      table[p.dim][j] = pad_source(mode, p, j) * self.stride(p.dim);
    }
  }
  switch (out.element_size()) {
    case 1:
      gather_padded<uint8_t>(out, self, table);
      break;
    case 2:
      gather_padded<uint16_t>(out, self, table);
      break;
    case 4:
      gather_padded<uint32_t>(out, self, table);
      break;
    default:
      gather_padded<uint64_t>(out, self, table);
  }
  return out;
}

Tensor reflection_pad1d(const Tensor& self, IntArrayRef pad) {
  return pad_by_mode("reflection_pad1d", PadMode::Reflect, self, pad, 1);
}
Tensor reflection_pad2d(const Tensor& self, IntArrayRef pad) {
  return pad_by_mode("reflection_pad2d", PadMode::Reflect, self, pad, 2);
}
Tensor reflection_pad3d(const Tensor& self, IntArrayRef pad) {
  return pad_by_mode("reflection_pad3d", PadMode::Reflect, self, pad, 3);
}
Tensor replication_pad1d(const Tensor& self, IntArrayRef pad) {
  return pad_by_mode("replication_pad1d", PadMode::Replicate, self, pad, 1);
}
Tensor replication_pad2d(const Tensor& self, IntArrayRef pad) {
  return pad_by_mode("replication_pad2d", PadMode::Replicate, self, pad, 2);
}
Tensor replication_pad3d(const Tensor& self, IntArrayRef pad) {
  return pad_by_mode("replication_pad3d", PadMode::Replicate, self, pad, 3);
}
Tensor pad_circular(const Tensor& self, IntArrayRef pad) {
  return pad_by_mode("_pad_circular", PadMode::Circular, self, pad, 0);
}

// --- pad -----------------------------------------------------------------------------

using PadOp = TypedOp<Tensor(const Tensor&, IntArrayRef)>;

// Composite: checks the mode and forwards to constant_pad_nd or to the
// mode's kernel for 1, 2 or 3 padded dims.
Tensor pad(const Tensor& self, IntArrayRef pad, std::string_view mode,
           std::optional<double> value) {
  check_defined(self, "pad", "self");
  KILN_CHECK(pad.size() % 2 == 0, "[pad] expected an even number of pads, got ", pad.size());
  KILN_CHECK(static_cast<int64_t>(pad.size()) <= 2 * self.dim(),
             "[pad] expected at most 2 pads per dim (", 2 * self.dim(), " for this input), got ",
             pad.size());
  if (mode == "constant") {
    static const TypedOp<Tensor(const Tensor&, IntArrayRef, const Scalar&)> constant_pad(
        "constant_pad_nd");
    return rename_errors("pad", "constant_pad_nd",
                         [&] { return constant_pad(self, pad, Scalar(value.value_or(0.0))); });
  }
  static const PadOp kernels[3][3] = {
      {PadOp("reflection_pad1d"), PadOp("reflection_pad2d"), PadOp("reflection_pad3d")},
      {PadOp("replication_pad1d"), PadOp("replication_pad2d"), PadOp("replication_pad3d")},
      {PadOp("_pad_circular"), PadOp("_pad_circular"), PadOp("_pad_circular")}};
  int m = 0;
  if (mode == "reflect") {
    m = 0;
  } else if (mode == "replicate") {
    m = 1;
  } else {
    KILN_CHECK(mode == "circular",
               "[pad] expected mode 'constant', 'reflect', 'replicate' or 'circular', got '", mode,
               "'");
    m = 2;
  }
  KILN_CHECK(!value || *value == 0.0, "[pad] expected no value with mode '", mode,
             "' (only constant padding fills), got ", *value);
  const int64_t n = static_cast<int64_t>(pad.size()) / 2;
  KILN_CHECK(n >= 1 && n <= 3 && (self.dim() == n + 1 || self.dim() == n + 2),
             "[pad] expected mode '", mode,
             "' to pad 1, 2 or 3 trailing dims after 1 or 2 others (an unbatched or batched "
             "input), got ",
             pad.size(), " pads for an input of shape ", self.sizes());
  // The mode kernel's checks are pad's (Note [Composite ops name themselves]).
  const PadOp& kernel = kernels[m][n - 1];
  return rename_errors("pad", kernel.entry().name(), [&] { return kernel(self, pad); });
}

void register_kernels(Library& m) {
  m.impl("constant_pad_nd", &constant_pad_nd);
  m.impl("reflection_pad1d", &reflection_pad1d);
  m.impl("reflection_pad2d", &reflection_pad2d);
  m.impl("reflection_pad3d", &reflection_pad3d);
  m.impl("replication_pad1d", &replication_pad1d);
  m.impl("replication_pad2d", &replication_pad2d);
  m.impl("replication_pad3d", &replication_pad3d);
  m.impl("_pad_circular", &pad_circular);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("pad", &pad);
}

}  // namespace kiln::cpu
