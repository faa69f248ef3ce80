#include "runtime/core/type_promotion.h"

#include "runtime/core/tensor_utils.h"

namespace kiln {

namespace {

std::optional<DType> promote_opt(std::optional<DType> a, DType b) {
  return a ? promote_types(*a, b) : b;
}

// PyTorch's combine_categories: `higher` from a higher-priority category.
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (is_floating(*higher)) return higher;
  if (lower && (*higher == kBool || is_floating(*lower))) return promote_types(*higher, *lower);
  return higher;
}

}  // namespace

void ResultType::add(const Tensor& t) {
  if (t.impl()->is_wrapped_number()) {
    // A wrapped float takes the default dtype; ints and bools keep theirs.
    DType d = is_floating(t.dtype()) ? kFloat32 : t.dtype();
    wrapped_ = promote_opt(wrapped_, d);
  } else if (t.dim() == 0) {
    zero_dim_ = promote_opt(zero_dim_, t.dtype());
  } else {
    dim_ = promote_opt(dim_, t.dtype());
  }
}

void ResultType::add(const Scalar& s) {
  DType d = s.is_floating_point() ? kFloat32 : s.dtype();
  wrapped_ = promote_opt(wrapped_, d);
}

DType ResultType::result(const char* op) const {
  std::optional<DType> r = combine(dim_, combine(zero_dim_, wrapped_));
  KILN_CHECK(r.has_value(), "[", op, "] expected at least one operand to type-promote, got none");
  return *r;
}

DType result_type(const Tensor& a, const Tensor& b) {
  ResultType r;
  r.add(a);
  r.add(b);
  return r.result("result_type");
}

DType result_type(const Tensor& a, const Scalar& b) {
  ResultType r;
  r.add(a);
  r.add(b);
  return r.result("result_type");
}

bool can_cast(DType from, DType to) {
  if (is_floating(from) && is_integral(to, /*include_bool=*/true)) return false;
  if (from != kBool && to == kBool) return false;
  return true;
}

DimVector broadcast_shapes(IntArrayRef a, IntArrayRef b, const char* op) {
  size_t n = a.size() > b.size() ? a.size() : b.size();
  DimVector out(n);
  for (size_t i = 0; i < n; ++i) {
    // Align from the right.
    int64_t da = i + a.size() >= n ? a[i + a.size() - n] : 1;
    int64_t db = i + b.size() >= n ? b[i + b.size() - n] : 1;
    KILN_CHECK(da == db || da == 1 || db == 1, "[", op, "] cannot broadcast sizes ", a, " and ", b,
               " at dim ", i);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool alpha_ok(DType t, const Scalar& alpha) {
  if (alpha.is_bool()) return t == kBool;
  return (is_floating(t) || alpha.is_integral()) && !scalar_overflows(alpha, t);
}

void check_alpha(const char* op, DType t, const Scalar& alpha) {
  KILN_CHECK(is_floating(t) || alpha.is_integral() || alpha.is_bool(), "[", op,
             "] expected an integral alpha for integral inputs, got ", alpha);
  KILN_CHECK(!alpha.is_bool() || t == kBool, "[", op,
             "] expected a bool alpha only for bool results, got ", alpha, " for ", t, " inputs");
  check_convertible(alpha, t, op);
}

}  // namespace kiln
