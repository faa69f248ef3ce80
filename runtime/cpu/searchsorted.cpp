// searchsorted and bucketize on the CPU and Meta; the Scalar forms and
// bucketize are composites of searchsorted.Tensor.
//
// Note [searchsorted]
// Each value's index is a binary search of its row of sorted_sequence (the
// whole 1-D sequence, or the row with the value's leading indices), with
// PyTorch's comparisons: left steps right while !(row[mid] >= v), right
// while !(row[mid] > v), so a NaN value lands after every element, as in
// PyTorch. Both tensors are compared in their promoted dtype (int64 against
// 2.5 compares as floats). The sequence is not checked for order: an
// unsorted row gives some index, as in PyTorch. On CUDA the same search runs
// for every value at once as ops CUDA has: bit_width(n) rounds of a gather
// of each value's midpoint, one comparison and two selects, which take the
// same steps as the CPU loop (so NaN and unsorted rows give the same index),
// fused lazily and captured whole by a compiled function.

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/composite_errors.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/core/type_promotion.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/reduce.h"

namespace kiln::cpu {
namespace {

constexpr uint32_t kSearchMask = kAllMask & ~(1u << static_cast<int>(kBool));

// right, after checking that side agrees with it.
bool search_right(const char* op, bool right, std::optional<std::string_view> side) {
  if (!side) return right;
  KILN_CHECK(*side == "left" || *side == "right", "[", op,
             "] expected side 'left' or 'right', got '", *side, "'");
  KILN_CHECK(!(right && *side == "left"), "[", op,
             "] expected side and right to agree, got side 'left' with right=True");
  return *side == "right";
}

void check_shapes(const char* op, const Tensor& seq, const Tensor& values) {
  KILN_CHECK(seq.dim() > 0, "[", op, "] expected sorted_sequence with at least 1 dim, got a ",
             "0-dim tensor");
  if (seq.dim() == 1) return;
  KILN_CHECK(values.dim() > 0, "[", op, "] expected a values tensor with sorted_sequence's ",
             "leading dims (a scalar only for a 1-D sequence), got a 0-dim one for sorted ",
             "sequence of sizes ", seq.sizes());
  bool match = values.dim() == seq.dim();
  for (int64_t d = 0; match && d + 1 < seq.dim(); ++d) match = values.size(d) == seq.size(d);
  KILN_CHECK(match, "[", op, "] expected values whose leading dims are sorted_sequence's ",
             seq.sizes(), " but the last (a 1-D sequence, or one row per value row), got values ",
             "of sizes ", values.sizes());
}

template <class T, bool kRight>
int64_t search(const T* row, int64_t n, T v) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    const bool go_right = kRight ? !(row[mid] > v) : !(row[mid] >= v);
    if (go_right) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// What both devices' searches check and take: the side, the dtype the two
// tensors compare in, the result's dtype and the sequence's length.
struct SearchPlan {
  bool right;
  DType compare;
  DType out;
  int64_t n;
};
SearchPlan plan_search(const Tensor& sorted_sequence, const Tensor& self, bool out_int32,
                       bool right, std::optional<std::string_view> side) {
  const char* op = "searchsorted";
  const bool to_right = search_right(op, right, side);
  check_shapes(op, sorted_sequence, self);
  const DType t = result_type(sorted_sequence, self);
  KILN_CHECK(dtype_bit(t) & kSearchMask, "[", op, "] expected numbers to search, got ", t);
  const int64_t n = sorted_sequence.size(-1);
  KILN_CHECK(!out_int32 || n < std::numeric_limits<int32_t>::max(), "[", op,
             "] expected a sequence shorter than 2^31 - 1 for out_int32, got ", n, " elements");
  return {to_right, t, out_int32 ? kInt32 : kInt64, n};
}

Tensor searchsorted_tensor(const Tensor& sorted_sequence, const Tensor& self, bool out_int32,
                           bool right, std::optional<std::string_view> side) {
  const char* op = "searchsorted";
  check_defined(sorted_sequence, op, "sorted_sequence");
  check_defined(self, op, "self");
  check_cpu_or_meta(sorted_sequence, op, "sorted_sequence");
  check_cpu_or_meta(self, op, "self");
  const auto [to_right, t, out_t, n] = plan_search(sorted_sequence, self, out_int32, right, side);
  Tensor out = empty_tensor(self.sizes(), out_t, self.device(), op);
  if (self.is_meta() || out.numel() == 0) return out;
  const Tensor seq = sorted_sequence.to(t).contiguous();
  const Tensor vals = self.to(t).contiguous();
  const int64_t per_row = seq.dim() == 1 ? vals.numel() : vals.size(-1);
  visit_dtype(t, kSearchMask, op, [&]<class T>() {
    const T* s = seq.data_ptr<T>();
    const T* v = vals.data_ptr<T>();
    auto run = [&]<class O>(O* o) {
      parallel_range(vals.numel(), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const T* row = seq.dim() == 1 ? s : s + (i / per_row) * n;
          const int64_t k =
              to_right ? search<T, true>(row, n, v[i]) : search<T, false>(row, n, v[i]);
          o[i] = static_cast<O>(k);
        }
      });
    };
    if (out_int32) {
      run(out.data_ptr<int32_t>());
    } else {
      run(out.data_ptr<int64_t>());
    }
  });
  return out;
}

// Note [searchsorted]'s CUDA form: every value's [lo, hi) narrowed at once.
Tensor searchsorted_cuda(const Tensor& sorted_sequence, const Tensor& self, bool out_int32,
                         bool right, std::optional<std::string_view> side) {
  const char* op = "searchsorted";
  check_defined(sorted_sequence, op, "sorted_sequence");
  check_defined(self, op, "self");
  KILN_CHECK(sorted_sequence.device() == self.device(), "[", op,
             "] expected sorted_sequence and self on one device, got ", sorted_sequence.device(),
             " and ", self.device());
  const auto [to_right, t, out_t, n] = plan_search(sorted_sequence, self, out_int32, right, side);
  const TensorOptions index_options = TensorOptions(kInt64).device(self.device());
  if (self.numel() == 0 || n == 0) {
    return kiln::zeros(self.sizes(), TensorOptions(out_t).device(self.device()));
  }
  // Rows [R, n] of the sequence and [R, m] of values that search them.
  const bool one_row = sorted_sequence.dim() == 1;
  const Tensor rows = sorted_sequence.to(t).reshape({one_row ? 1 : -1, n});
  const Tensor vals = one_row ? self.to(t).reshape({1, self.numel()})
                              : self.to(t).reshape({rows.size(0), self.size(-1)});
  Tensor lo = kiln::zeros(vals.sizes(), index_options);
  Tensor hi = kiln::full(vals.sizes(), n, index_options);
  for (int64_t left = n; left > 0; left >>= 1) {  // bit_width(n) rounds empty every [lo, hi)
    const Tensor open = kiln::lt(lo, hi);
    const Tensor mid = kiln::add(lo, kiln::floor_divide(kiln::sub(hi, lo), Scalar(int64_t{2})));
    // mid is n only where lo = hi = n, a finished value: any row element will do.
    const Tensor at = kiln::gather(
        rows, 1, kiln::clamp(mid, std::optional<Scalar>(), std::optional<Scalar>(Scalar(n - 1))));
    const Tensor go_right = kiln::logical_not(to_right ? kiln::gt(at, vals) : kiln::ge(at, vals));
    lo = kiln::where(kiln::logical_and(open, go_right), kiln::add(mid, Scalar(int64_t{1})), lo);
    hi = kiln::where(kiln::logical_and(open, kiln::logical_not(go_right)), mid, hi);
  }
  return lo.reshape(self.sizes()).to(out_t);
}

// A Scalar value searches as a 0-dim tensor that promotes as a number does.
Tensor scalar_values(const Tensor& like, const Scalar& value) {
  const DType t = result_type(like, value);
  return kiln::scalar_tensor(value, TensorOptions(t).device(like.device()));
}

Tensor searchsorted_scalar(const Tensor& sorted_sequence, const Scalar& self, bool out_int32,
                           bool right, std::optional<std::string_view> side) {
  check_defined(sorted_sequence, "searchsorted", "sorted_sequence");
  return kiln::searchsorted(sorted_sequence, scalar_values(sorted_sequence, self), out_int32, right,
                            side);
}

void check_boundaries(const Tensor& boundaries) {
  check_defined(boundaries, "bucketize", "boundaries");
  KILN_CHECK(boundaries.dim() == 1, "[bucketize] expected 1-D boundaries, got ", boundaries.dim(),
             " dims (sizes ", boundaries.sizes(), ")");
}

// searchsorted's checks are bucketize's (Note [Composite ops name themselves]).
Tensor bucketize_tensor(const Tensor& self, const Tensor& boundaries, bool out_int32, bool right) {
  check_boundaries(boundaries);
  return rename_errors("bucketize", "searchsorted",
                       [&] { return kiln::searchsorted(boundaries, self, out_int32, right); });
}

Tensor bucketize_scalar(const Scalar& self, const Tensor& boundaries, bool out_int32, bool right) {
  check_boundaries(boundaries);
  return rename_errors("bucketize", "searchsorted", [&] {
    return kiln::searchsorted(boundaries, scalar_values(boundaries, self), out_int32, right);
  });
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("searchsorted.Tensor", &searchsorted_tensor);
}
KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("searchsorted.Tensor", &searchsorted_cuda);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("searchsorted.Tensor", &searchsorted_tensor);
}
KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("searchsorted.Scalar", &searchsorted_scalar);
  m.impl("bucketize.Tensor", &bucketize_tensor);
  m.impl("bucketize.Scalar", &bucketize_scalar);
}

}  // namespace kiln::cpu
