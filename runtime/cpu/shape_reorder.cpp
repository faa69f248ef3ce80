// repeat, roll and flip: outputs whose elements are self's, moved. Each is a
// few strided copies (copy_strided) read straight from self's layout: repeat
// as one copy from a view with stride-0 repeat dims, flip as one copy from a
// view with negated strides, roll as one block copy per combination of the
// two halves of every rolled dim. repeat_interleave (an integer count) is a
// composite: self with a stride-0 dim after `dim`, cloned, so lazy traces
// record one copy and every device has it.

#include <map>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/preserved_layout.h"
#include "runtime/cpu/index_utils.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

Device fresh_device(const Tensor& self) {
  return self.is_meta() ? Device::meta() : Device::cpu();
}

Tensor fresh_like(const Tensor& self, IntArrayRef sizes) {
  return empty_tensor(sizes, self.dtype(), fresh_device(self));
}

// --- repeat --------------------------------------------------------------------------

Tensor repeat(const Tensor& self, IntArrayRef repeats) {
  const char* op = "repeat";
  check_defined(self, op, "self");
  const int64_t nd = self.dim();
  const int64_t nr = static_cast<int64_t>(repeats.size());
  KILN_CHECK(nr >= nd, "[repeat] expected at least as many repeats as self has dims (", nd,
             "), got ", repeats);
  // self read as nr dims: new leading dims of size 1.
  DimVector sizes(nr, 1), strides(nr, 0), target(nr);
  for (int64_t d = 0; d < nd; ++d) {
    sizes[nr - nd + d] = self.sizes()[d];
    strides[nr - nd + d] = self.strides()[d];
  }
  for (int64_t d = 0; d < nr; ++d) target[d] = checked_mul(sizes[d], repeats[d], op);
  checked_bytes_numel(target, self.dtype(), op);
  Tensor out = fresh_like(self, target);
  if (self.is_meta() || out.numel() == 0) return out;
  check_cpu(self, op, "self");
  // out viewed as [r0, s0, r1, s1, ...]; self read with stride 0 on each r.
  const DimVector out_st = contiguous_strides(target);
  DimVector split(2 * nr), dst_st(2 * nr), src_st(2 * nr);
  for (int64_t d = 0; d < nr; ++d) {
    split[2 * d] = repeats[d];
    split[2 * d + 1] = sizes[d];
    dst_st[2 * d] = sizes[d] * out_st[d];
    dst_st[2 * d + 1] = out_st[d];
    src_st[2 * d] = 0;
    src_st[2 * d + 1] = strides[d];
  }
  copy_strided(static_cast<char*>(out.data_ptr()), dst_st,
               static_cast<const char*>(self.data_ptr()), src_st, split, self.element_size());
  return out;
}

// --- flip ----------------------------------------------------------------------------

Tensor flip(const Tensor& self, IntArrayRef dims) {
  const char* op = "flip";
  check_defined(self, op, "self");
  const uint64_t mask = dim_mask(dims, self.dim(), op, /*empty_is_all=*/false);
  // Laid out as self (Note [Preserved layout]), as PyTorch's flip; roll and
  // repeat come out row-major, as PyTorch's do.
  Tensor out = empty_like_preserve(self, self.dtype(), fresh_device(self), op);
  if (self.is_meta() || out.numel() == 0) return out;
  check_cpu(self, op, "self");
  DimVector src_st(self.strides());
  int64_t start = 0;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if ((mask >> d) & 1) {
      start += (self.sizes()[d] - 1) * src_st[d];
      src_st[d] = -src_st[d];
    }
  }
  const int64_t e = static_cast<int64_t>(self.element_size());
  copy_strided(static_cast<char*>(out.data_ptr()), out.strides(),
               static_cast<const char*>(self.data_ptr()) + start * e, src_st, self.sizes(),
               self.element_size());
  return out;
}

// --- roll ----------------------------------------------------------------------------

// Rolls along `shift` (dim -> shift in [1, size)) with one block copy per
// combination of halves: along a rolled dim, source [0, n - s) lands at [s, n)
// and source [n - s, n) at [0, s).
void roll_blocks(const Tensor& self, const Tensor& out, const std::map<int64_t, int64_t>& shift) {
  const size_t elem = self.element_size();
  const int64_t e = static_cast<int64_t>(elem);
  std::vector<std::pair<int64_t, int64_t>> rolled(shift.begin(), shift.end());
  const uint64_t combos = uint64_t{1} << rolled.size();
  for (uint64_t c = 0; c < combos; ++c) {
    DimVector sizes(self.sizes());
    int64_t src_off = 0, dst_off = 0;
    for (size_t k = 0; k < rolled.size(); ++k) {
      const auto [d, s] = rolled[k];
      const int64_t n = self.sizes()[d];
      const bool tail = (c >> k) & 1;  // the source's last s elements
      sizes[d] = tail ? s : n - s;
      src_off += (tail ? n - s : 0) * self.strides()[d];
      dst_off += (tail ? 0 : s) * out.strides()[d];
    }
    copy_strided(static_cast<char*>(out.data_ptr()) + dst_off * e, out.strides(),
                 static_cast<const char*>(self.data_ptr()) + src_off * e, self.strides(), sizes,
                 elem);
  }
}

constexpr size_t kMaxRollDims = 12;  // 2^12 block copies at most per pass

Tensor roll_kernel(const Tensor& self, IntArrayRef shifts, IntArrayRef dims) {
  const char* op = "roll";
  check_defined(self, op, "self");
  KILN_CHECK(!shifts.empty(), "[roll] expected at least one shift, got none");
  if (dims.empty()) {
    KILN_CHECK(shifts.size() == 1,
               "[roll] expected one shift when no dims are given (the "
               "tensor is rolled flattened), got ",
               shifts.size(), " shifts");
    if (self.numel() == 0) return kiln::clone(self);
    const int64_t n = self.numel();
    Tensor flat = self.reshape({n});
    const int64_t d0 = 0;
    return roll_kernel(flat, shifts, IntArrayRef(&d0, 1)).view(self.sizes());
  }
  KILN_CHECK(shifts.size() == dims.size(), "[roll] expected as many shifts as dims, got ",
             shifts.size(), " shifts and ", dims.size(), " dims");
  // As PyTorch, an empty tensor is returned (copied) before its dims are checked.
  if (self.numel() == 0) return self.is_meta() ? fresh_like(self, self.sizes()) : kiln::clone(self);
  KILN_CHECK(self.dim() > 0, "[roll] expected a tensor with at least 1 dim to roll along dims ",
             dims, ", got a 0-dim tensor");
  std::map<int64_t, int64_t> shift;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], self.dim(), op);
    const int64_t n = self.sizes()[d];
    shift[d] = ((shift[d] + shifts[i] % n) % n + n) % n;
  }
  for (auto it = shift.begin(); it != shift.end();) {
    it = it->second == 0 ? shift.erase(it) : std::next(it);
  }
  Tensor out = fresh_like(self, self.sizes());
  if (self.is_meta()) return out;
  check_cpu(self, op, "self");
  if (shift.size() > kMaxRollDims) {
    // Roll the first dims, then the rest from that result.
    std::map<int64_t, int64_t> first, rest;
    for (const auto& [d, s] : shift) (first.size() < kMaxRollDims ? first : rest)[d] = s;
    roll_blocks(self, out, first);
    DimVector rs, rd;
    for (const auto& [d, s] : rest) {
      rs.push_back(s);
      rd.push_back(d);
    }
    return roll_kernel(out, rs, rd);
  }
  roll_blocks(self, out, shift);
  return out;
}

void register_kernels(Library& m) {
  m.impl("repeat", &repeat);
  m.impl("flip", &flip);
  m.impl("roll", &roll_kernel);
}

// --- repeat_interleave ---------------------------------------------------------------

Tensor repeat_interleave(const Tensor& self, int64_t repeats, std::optional<int64_t> dim,
                         std::optional<int64_t> output_size) {
  const char* op = "repeat_interleave";
  check_defined(self, op, "self");
  KILN_CHECK(repeats >= 0, "[repeat_interleave] expected repeats >= 0, got ", repeats);
  KILN_CHECK(!dim || self.dim() > 0,
             "[repeat_interleave] expected self with at least 1 dim for dim ", dim.value_or(0),
             ", got a 0-dim tensor");
  // Without a dim, the flattened self (PyTorch's rule).
  const Tensor in = dim ? self : self.reshape({-1});
  const int64_t d = wrap_dim(dim.value_or(0), in.dim(), op);
  DimVector expanded(in.sizes()), target(in.sizes());
  expanded.insert(static_cast<size_t>(d + 1), repeats);
  target[d] = checked_mul(target[d], repeats, op);
  KILN_CHECK(!output_size || *output_size == target[d], "[repeat_interleave] expected output_size ",
             target[d], " (the size of dim ", d, " repeated), got ", *output_size);
  checked_bytes_numel(target, self.dtype(), op);
  // The clone is fresh memory (also for repeats 1); dense, so the view is free.
  return in.unsqueeze(d + 1).expand(expanded).clone().reshape(target);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("repeat_interleave.self_int", &repeat_interleave);
}

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
