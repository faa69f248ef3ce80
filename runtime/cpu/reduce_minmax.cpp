// amax/amin, max/min (whole tensor and .dim with indices) and argmax/argmin on
// the CPU and Meta, through the reduction engine (Note [Reduction engine]).
// As PyTorch: NaN wins (max and min both return it, and the first NaN's
// index), ties return the first index, and reducing an empty dim is an error.

#include <limits>

#include "kiln/dispatch.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/cpu/reduce.h"
#include "runtime/cpu/reduce_math.h"

namespace kiln::cpu {
namespace {

// x beats a: larger (smaller), or NaN over a number.
template <bool kMax, class V>
inline bool better(V x, V a) {
  if constexpr (kMax) {
    return x > a || (is_nan(x) && !is_nan(a));
  } else {
    return x < a || (is_nan(x) && !is_nan(a));
  }
}

// amax, amin, max(), min(): the extreme value, NaN propagating.
template <class T, bool kMax>
struct ExtremeOps {
  using in_t = T;
  using acc_t = compare_t<T>;

  acc_t identity() const {
    if constexpr (std::is_same_v<T, bool>) {
      return !kMax;
    } else if constexpr (kIsFloat<T>) {
      return kMax ? -std::numeric_limits<acc_t>::infinity()
                  : std::numeric_limits<acc_t>::infinity();
    } else {
      return kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    }
  }
  acc_t step(acc_t a, T x, int64_t) const { return pick<kMax>(a, static_cast<acc_t>(x)); }
  acc_t combine(acc_t a, acc_t b) const { return pick<kMax>(a, b); }
  acc_t contig(acc_t a, const T* p, int64_t n, int64_t) const {
    return n > 0 ? pick<kMax>(a, run_extreme<kMax>(p, n)) : a;
  }
  void write(char* const* out, acc_t a) const { *reinterpret_cast<T*>(out[0]) = T(a); }
};

// max.dim, min.dim (values and indices), argmax, argmin (indices). Positions
// increase along the walk, so keeping the earlier of equals returns the first.
template <class T, bool kMax, bool kValues>
struct ArgOps {
  using in_t = T;
  using V = compare_t<T>;
  struct acc_t {
    V v{};
    int64_t i = -1;
  };

  acc_t identity() const { return acc_t{}; }
  acc_t step(acc_t a, T x, int64_t pos) const {
    auto v = static_cast<V>(x);
    return a.i < 0 || better<kMax>(v, a.v) ? acc_t{v, pos} : a;
  }
  acc_t combine(acc_t a, acc_t b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    return better<kMax>(b.v, a.v) ? b : a;
  }
  // Dense runs: the extreme in a vectorized pass, then its first position.
  acc_t contig(acc_t a, const T* p, int64_t n, int64_t pos) const {
    if (n == 0) return a;
    V m = run_extreme<kMax>(p, n);
    if (a.i >= 0 && !better<kMax>(m, a.v)) return a;
    int64_t i = 0;
    if (is_nan(m)) {
      while (!is_nan(static_cast<V>(p[i]))) ++i;
    } else {
      while (static_cast<V>(p[i]) != m) ++i;
    }
    // The element itself, not m: -0.0 and 0.0 compare equal.
    return acc_t{static_cast<V>(p[i]), pos + i};
  }
  void write(char* const* out, acc_t a) const {
    if constexpr (kValues) {
      *reinterpret_cast<T*>(out[0]) = T(a.v);
      *reinterpret_cast<int64_t*>(out[1]) = a.i;
    } else {
      *reinterpret_cast<int64_t*>(out[0]) = a.i;
    }
  }
};

constexpr uint32_t kNoBoolMask = kAllMask & ~1u;

template <bool kMax>
Tensor extreme(const char* op, const Tensor& self, uint64_t mask, bool keepdim, const Tensor* out) {
  if (out != nullptr) {
    KILN_CHECK(out->dtype() == self.dtype(), "[", op,
               "] expected the dtypes of input and out to match, got ", self.dtype(), " and ",
               out->dtype());
  }
  Tensor result =
      reduction_result(self, reduced_sizes(self.sizes(), mask, keepdim), self.dtype(), out, op);
  if (self.is_meta()) return result;
  ReducePlan plan(self, mask, {result}, false);
  visit_dtype(self.dtype(), kAllMask, op, [&]<class T>() { reduce(plan, ExtremeOps<T, kMax>{}); });
  return result;
}

template <bool kMax>
Tensor amax_impl(const char* op, const Tensor& self, IntArrayRef dim, bool keepdim,
                 const Tensor* out) {
  check_cpu_or_meta(self, op, "self");
  uint64_t mask = reduction_dims(dim, self.dim(), op);
  check_reduced_nonempty(self.sizes(), mask, op);
  return extreme<kMax>(op, self, mask, keepdim, out);
}

template <bool kMax>
Tensor max_all(const char* op, const Tensor& self) {
  check_cpu_or_meta(self, op, "self");
  KILN_CHECK(self.numel() > 0, "[", op,
             "] expected a non-empty input, or a reduction dim (the 'dim' argument), got sizes ",
             self.sizes());
  return extreme<kMax>(op, self, reduction_dims({}, self.dim(), op), false, nullptr);
}

// Indices (and values when kValues) of the extreme along `dim`, or over the
// flattened tensor when `dim` is unset.
template <bool kMax, bool kValues>
std::tuple<Tensor, Tensor> arg_impl(const char* op, const Tensor& self, std::optional<int64_t> dim,
                                    bool keepdim) {
  check_cpu_or_meta(self, op, "self");
  uint64_t mask;
  DimVector shape;
  if (dim) {
    mask = reduction_dims(IntArrayRef(*dim), self.dim(), op);
    check_reduced_nonempty(self.sizes(), mask, op);
    shape = reduced_sizes(self.sizes(), mask, keepdim);
  } else {
    KILN_CHECK(self.numel() > 0, "[", op,
               "] expected a non-empty input, or a reduction dim (the 'dim' argument), got sizes ",
               self.sizes());
    mask = reduction_dims({}, self.dim(), op);
    shape = reduced_sizes(self.sizes(), mask, keepdim);
  }
  // As PyTorch 1.13: no bool kernel, which only matters when there is data.
  KILN_CHECK(kValues || self.dtype() != kBool || self.numel() == 0, "[", op,
             "] not implemented for bool (as PyTorch 1.13)");
  Tensor indices = empty_tensor(shape, kInt64, self.device());
  Tensor values = kValues ? empty_tensor(shape, self.dtype(), self.device()) : Tensor();
  if (self.is_meta() || self.numel() == 0) return {values, indices};
  if (kValues) {
    ReducePlan plan(self, mask, {values, indices}, true);
    visit_dtype(self.dtype(), kAllMask, op,
                [&]<class T>() { reduce(plan, ArgOps<T, kMax, true>{}); });
  } else {
    ReducePlan plan(self, mask, {indices}, true);
    visit_dtype(self.dtype(), kNoBoolMask, op, [&]<class T>() {
      if constexpr (!std::is_same_v<T, bool>) reduce(plan, ArgOps<T, kMax, false>{});
    });
  }
  return {values, indices};
}

Tensor amax(const Tensor& s, IntArrayRef dim, bool keepdim) {
  return amax_impl<true>("amax", s, dim, keepdim, nullptr);
}
Tensor amin(const Tensor& s, IntArrayRef dim, bool keepdim) {
  return amax_impl<false>("amin", s, dim, keepdim, nullptr);
}
Tensor amax_out(const Tensor& s, IntArrayRef dim, bool keepdim, const Tensor& out) {
  return amax_impl<true>("amax.out", s, dim, keepdim, &out);
}
Tensor amin_out(const Tensor& s, IntArrayRef dim, bool keepdim, const Tensor& out) {
  return amax_impl<false>("amin.out", s, dim, keepdim, &out);
}
Tensor max(const Tensor& s) {
  return max_all<true>("max", s);
}
Tensor min(const Tensor& s) {
  return max_all<false>("min", s);
}
std::tuple<Tensor, Tensor> max_dim(const Tensor& s, int64_t dim, bool keepdim) {
  return arg_impl<true, true>("max.dim", s, dim, keepdim);
}
std::tuple<Tensor, Tensor> min_dim(const Tensor& s, int64_t dim, bool keepdim) {
  return arg_impl<false, true>("min.dim", s, dim, keepdim);
}
Tensor argmax(const Tensor& s, std::optional<int64_t> dim, bool keepdim) {
  return std::get<1>(arg_impl<true, false>("argmax", s, dim, keepdim));
}
Tensor argmin(const Tensor& s, std::optional<int64_t> dim, bool keepdim) {
  return std::get<1>(arg_impl<false, false>("argmin", s, dim, keepdim));
}

void register_kernels(Library& m) {
  m.impl("amax", &amax);
  m.impl("amin", &amin);
  m.impl("amax.out", &amax_out);
  m.impl("amin.out", &amin_out);
  m.impl("max", &max);
  m.impl("min", &min);
  m.impl("max.dim", &max_dim);
  m.impl("min.dim", &min_dim);
  m.impl("argmax", &argmax);
  m.impl("argmin", &argmin);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
