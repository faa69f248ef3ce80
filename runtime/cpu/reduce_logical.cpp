// all and any on the CPU and Meta, through the reduction engine (Note
// [Reduction engine]). As PyTorch 1.13: the result is bool, except for uint8
// input, which gives uint8 (0 or 1); NaN counts as true.

#include "kiln/dispatch.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/cpu/reduce.h"
#include "runtime/cpu/reduce_math.h"

namespace kiln::cpu {
namespace {

template <class T, bool kAll>
struct LogicalOps {
  using in_t = T;
  using acc_t = bool;
  bool identity() const { return kAll; }
  static bool truth(T x) {
    if constexpr (kIsReducedFloat<T>) {
      return static_cast<float>(x) != 0.0f;
    } else {
      return x != T(0);
    }
  }
  bool step(bool a, T x, int64_t) const { return kAll ? a && truth(x) : a || truth(x); }
  bool combine(bool a, bool b) const { return kAll ? a && b : a || b; }
  bool contig(bool a, const T* p, int64_t n, int64_t) const {
    // Stops at the first element that decides the result.
    if (a != kAll) return a;
    for (int64_t i = 0; i < n; ++i) {
      if (truth(p[i]) != kAll) return !kAll;
    }
    return kAll;
  }
  void write(char* const* out, bool a) const {
    // bool and uint8 results are both one byte holding 0 or 1.
    *reinterpret_cast<uint8_t*>(out[0]) = a ? 1 : 0;
  }
};

template <bool kAll>
Tensor logical(const char* op, const Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  check_cpu_or_meta(self, op, "self");
  uint64_t mask =
      dim ? reduction_dims(IntArrayRef(*dim), self.dim(), op) : reduction_dims({}, self.dim(), op);
  DType dtype = self.dtype() == kUInt8 ? kUInt8 : kBool;
  Tensor result =
      reduction_result(self, reduced_sizes(self.sizes(), mask, keepdim), dtype, nullptr, op);
  if (self.is_meta()) return result;
  ReducePlan plan(self, mask, {result}, false);
  visit_dtype(self.dtype(), kAllMask, op, [&]<class T>() { reduce(plan, LogicalOps<T, kAll>{}); });
  return result;
}

Tensor all(const Tensor& s) {
  return logical<true>("all", s, std::nullopt, false);
}
Tensor all_dim(const Tensor& s, int64_t dim, bool keepdim) {
  return logical<true>("all.dim", s, dim, keepdim);
}
Tensor any(const Tensor& s) {
  return logical<false>("any", s, std::nullopt, false);
}
Tensor any_dim(const Tensor& s, int64_t dim, bool keepdim) {
  return logical<false>("any.dim", s, dim, keepdim);
}

void register_kernels(Library& m) {
  m.impl("all", &all);
  m.impl("all.dim", &all_dim);
  m.impl("any", &any);
  m.impl("any.dim", &any_dim);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
