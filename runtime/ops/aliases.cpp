// Ops that PyTorch spells two ways, under their second spelling: max(a, b)
// and min(a, b) (maximum and minimum), hardtanh (clamp), and narrow with a
// tensor start. Each is a Composite that forwards, so lazy traces record (and
// fuse) the op it forwards to. var / std with unbiased= live beside var.correction
// (runtime/cpu/reduce_stats.cpp).

#include <utility>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/composite_errors.h"
#include "runtime/core/tensor_utils.h"

namespace kiln {
namespace {

// Their errors name the spelling called (Note [Composite ops name themselves]).
Tensor max_other(const Tensor& self, const Tensor& other) {
  return rename_errors("max.other", "maximum", [&] { return kiln::maximum(self, other); });
}
Tensor min_other(const Tensor& self, const Tensor& other) {
  return rename_errors("min.other", "minimum", [&] { return kiln::minimum(self, other); });
}
Tensor max_out(const Tensor& self, const Tensor& other, const Tensor& out) {
  Tensor o = out;
  return rename_errors("max.out", "maximum.out", [&] { return kiln::maximum_out(o, self, other); });
}
Tensor min_out(const Tensor& self, const Tensor& other, const Tensor& out) {
  Tensor o = out;
  return rename_errors("min.out", "minimum.out", [&] { return kiln::minimum_out(o, self, other); });
}

// hardtanh is clamp to [min_val, max_val] in self's dtype, as PyTorch's
// (whose check it keeps): integer bounds are truncated to integers, so an
// integer self is not promoted by a floating bound; bool is refused, and so
// are negative bounds for uint8.
std::pair<Scalar, Scalar> hardtanh_bounds(const Tensor& self, const Scalar& min_val,
                                          const Scalar& max_val, const char* op) {
  check_defined(self, op, "self");
  KILN_CHECK(self.dtype() != kBool, "[", op, "] expected a non-bool self, got bool");
  if (!is_integral(self.dtype(), /*include_bool=*/false)) return {min_val, max_val};
  auto to_int = [op](const Scalar& v, const char* name) -> int64_t {
    if (!v.is_floating_point()) return v.to_int();
    const double d = v.to_double();
    KILN_CHECK(d >= -0x1p63 && d < 0x1p63, "[", op, "] expected ", name,
               " to fit in int64 for an integer self, got ", d);
    return static_cast<int64_t>(d);
  };
  const int64_t lo = to_int(min_val, "min_val"), hi = to_int(max_val, "max_val");
  KILN_CHECK(self.dtype() != kUInt8 || (lo >= 0 && hi >= 0), "[", op,
             "] expected min_val and max_val >= 0 for a uint8 self, got ", lo, " and ", hi);
  return {Scalar(lo), Scalar(hi)};
}

Tensor hardtanh_kernel(const Tensor& self, const Scalar& min_val, const Scalar& max_val) {
  auto [lo, hi] = hardtanh_bounds(self, min_val, max_val, "hardtanh");
  return rename_errors("hardtanh", "clamp", [&] {
    return kiln::clamp(self, std::optional<Scalar>(lo), std::optional<Scalar>(hi));
  });
}
Tensor hardtanh_inplace(const Tensor& self, const Scalar& min_val, const Scalar& max_val) {
  auto [lo, hi] = hardtanh_bounds(self, min_val, max_val, "hardtanh_");
  Tensor s = self;
  return rename_errors("hardtanh_", "clamp_", [&] {
    return kiln::clamp_(s, std::optional<Scalar>(lo), std::optional<Scalar>(hi));
  });
}
Tensor hardtanh_out_kernel(const Tensor& self, const Scalar& min_val, const Scalar& max_val,
                           const Tensor& out) {
  auto [lo, hi] = hardtanh_bounds(self, min_val, max_val, "hardtanh.out");
  check_defined(out, "hardtanh.out", "out");
  KILN_CHECK(out.dtype() == self.dtype(), "[hardtanh.out] expected out of dtype ", self.dtype(),
             " like self, got ", out.dtype());
  Tensor o = out;
  return rename_errors("hardtanh.out", "clamp.out", [&] {
    return kiln::clamp_out(o, self, std::optional<Scalar>(lo), std::optional<Scalar>(hi));
  });
}

// The start's value decides the view's offset, so it is read here (a pending
// start is computed first).
Tensor narrow_tensor(const Tensor& self, int64_t dim, const Tensor& start, int64_t length) {
  check_defined(start, "narrow", "start");
  KILN_CHECK(start.dim() == 0 && is_integral(start.dtype(), /*include_bool=*/false),
             "[narrow] expected start to be a 0-dim integer tensor, got a ", start.dim(),
             "-dim tensor of dtype ", start.dtype());
  return self.narrow(dim, start.item<int64_t>(), length);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("max.other", &max_other);
  m.impl("min.other", &min_other);
  m.impl("max.out", &max_out);
  m.impl("min.out", &min_out);
  m.impl("hardtanh", &hardtanh_kernel);
  m.impl("hardtanh_", &hardtanh_inplace);
  m.impl("hardtanh.out", &hardtanh_out_kernel);
  m.impl("narrow.Tensor", &narrow_tensor);
}

}  // namespace kiln
