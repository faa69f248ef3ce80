// gather, scatter, scatter_add and the scatter reductions (scatter.reduce,
// scatter_reduce.two: Note [Scatter reductions]): elementwise indexing along
// one dim, with an index tensor of the same rank as self. The loops walk the
// index's shape; self, src and out are read and written through their own
// strides, so no operand is made contiguous. Loops run serially in row-major
// index order, so scatter_add and the reductions combine repeated indices in
// a fixed order.

#include <cmath>
#include <limits>

#include "kiln/dispatch.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/core/wrapping.h"
#include "runtime/cpu/copy.h"
#include "runtime/cpu/index_scatter_reduce.h"
#include "runtime/cpu/index_utils.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {

ScatterReduce parse_scatter_reduce(const char* op, std::string_view reduce, bool two) {
  if (!two) {
    if (reduce == "add") return ScatterReduce::Sum;
    KILN_CHECK(reduce == "multiply", "[", op, "] expected reduce 'add' or 'multiply', got '",
               reduce, "'");
    return ScatterReduce::Prod;
  }
  for (ScatterReduce r : {ScatterReduce::Sum, ScatterReduce::Prod, ScatterReduce::Mean,
                          ScatterReduce::Max, ScatterReduce::Min}) {
    if (reduce == scatter_reduce_name(r)) return r;
  }
  KILN_CHECK(false, "[", op, "] expected reduce 'sum', 'prod', 'mean', 'amax' or 'amin', got '",
             reduce, "'");
  return ScatterReduce::Sum;
}

const char* scatter_reduce_name(ScatterReduce r) {
  static const char* const names[] = {"sum", "prod", "mean", "amax", "amin"};
  return names[static_cast<int>(r)];
}

namespace {

constexpr int kMaxOps = 3;

// Calls f(off[0], off[1], off[2]) (element offsets) for every position of
// `sizes` in row-major order; strides[k] are operand k's element strides.
template <class F>
void for_each_position(IntArrayRef sizes, const DimVector (&strides)[kMaxOps], F&& f) {
  const int64_t nd = static_cast<int64_t>(sizes.size());
  for (int64_t s : sizes) {
    if (s == 0) return;
  }
  DimVector counter(nd, 0);
  int64_t off[kMaxOps] = {0, 0, 0};
  const int64_t inner = nd > 0 ? sizes[nd - 1] : 1;
  int64_t inner_st[kMaxOps];
  for (int k = 0; k < kMaxOps; ++k) inner_st[k] = nd > 0 ? strides[k][nd - 1] : 0;
  while (true) {
    for (int64_t i = 0; i < inner; ++i) {
      f(off[0] + i * inner_st[0], off[1] + i * inner_st[1], off[2] + i * inner_st[2]);
    }
    int64_t d = nd - 2;
    for (; d >= 0; --d) {
      for (int k = 0; k < kMaxOps; ++k) off[k] += strides[k][d];
      if (++counter[d] < sizes[d]) break;
      for (int k = 0; k < kMaxOps; ++k) off[k] -= sizes[d] * strides[k][d];
      counter[d] = 0;
    }
    if (d < 0) return;
  }
}

bool any_meta(const Tensor& a, const Tensor& b, const Tensor* c = nullptr) {
  return a.is_meta() || b.is_meta() || (c && c->defined() && c->is_meta());
}

// Checks every index value against `size` before any write.
void check_index_values(const char* op, const Tensor& index, int64_t dim, int64_t size) {
  const DimVector sizes = nonempty_sizes(index);
  const DimVector st[kMaxOps] = {nonempty_strides(index), DimVector(sizes.size(), 0),
                                 DimVector(sizes.size(), 0)};
  const int64_t* p = static_cast<const int64_t*>(index.data_ptr());
  for_each_position(sizes, st, [&](int64_t i, int64_t, int64_t) {
    const int64_t v = p[i];
    KILN_CHECK(v >= 0 && v < size, "[", op, "] index ", v, " is out of bounds for dimension ", dim,
               " with size ", size);
  });
}

// The strides with which a loop over the index's positions walks `t`: its
// own, except along `dim`, where the index value chooses the position.
DimVector strides_except(const Tensor& t, int64_t dim) {
  DimVector st = nonempty_strides(t);
  st[dim] = 0;
  return st;
}

template <class Bits>
void move_elements(const Tensor& index, char* dst, const DimVector& dst_st, int64_t dst_dim_stride,
                   const char* src, const DimVector& src_st, int64_t src_dim_stride) {
  const DimVector sizes = nonempty_sizes(index);
  const DimVector st[kMaxOps] = {nonempty_strides(index), dst_st, src_st};
  const int64_t* ip = static_cast<const int64_t*>(index.data_ptr());
  Bits* d = reinterpret_cast<Bits*>(dst);
  const Bits* s = reinterpret_cast<const Bits*>(src);
  for_each_position(sizes, st, [&](int64_t i, int64_t o, int64_t x) {
    const int64_t v = ip[i];
    d[o + v * dst_dim_stride] = s[x + v * src_dim_stride];
  });
}

// dst[pos, dim <- index] = src[pos, dim <- index] over the index's positions,
// where either side may ignore the index (dim stride 0 and own stride used).
void move(const Tensor& index, const Tensor& dst, const DimVector& dst_st, int64_t dst_dim_stride,
          const char* src, const DimVector& src_st, int64_t src_dim_stride) {
  char* d = static_cast<char*>(dst.data_ptr());
  switch (dst.element_size()) {
    case 1:
      return move_elements<uint8_t>(index, d, dst_st, dst_dim_stride, src, src_st, src_dim_stride);
    case 2:
      return move_elements<uint16_t>(index, d, dst_st, dst_dim_stride, src, src_st, src_dim_stride);
    case 4:
      return move_elements<uint32_t>(index, d, dst_st, dst_dim_stride, src, src_st, src_dim_stride);
    default:
      return move_elements<uint64_t>(index, d, dst_st, dst_dim_stride, src, src_st, src_dim_stride);
  }
}

// --- gather --------------------------------------------------------------------------

Tensor gather_impl(const char* op, const Tensor& self, int64_t dim, const Tensor& index,
                   const Tensor* out_arg) {
  check_defined(self, op, "self");
  check_defined(index, op, "index");
  dim = wrap_dim(dim, self.dim(), op);
  if (out_arg) {
    check_no_internal_overlap(*out_arg, op);
    check_no_overlap(*out_arg, self, op);
    check_no_overlap(*out_arg, index, op);
  }
  const bool has_indices = index.numel() != 0;
  if (has_indices) {
    KILN_CHECK(index.dtype() == kInt64, "[", op, "] expected an index of dtype int64, got ",
               index.dtype());
    const DimVector ss = nonempty_sizes(self), is = nonempty_sizes(index);
    KILN_CHECK(ss.size() == is.size(), "[", op, "] expected an index with as many dims as self (",
               ss.size(), "), got ", is.size());
    for (int64_t d = 0; d < static_cast<int64_t>(ss.size()); ++d) {
      KILN_CHECK(d == dim || is[d] <= ss[d], "[", op, "] expected index size ", is[d], " at dim ",
                 d, " to be at most self's size ", ss[d], " (index sizes ", index.sizes(),
                 ", self sizes ", self.sizes(), ", gathering along dim ", dim, ")");
    }
  }
  const bool meta = any_meta(self, index, out_arg);
  Tensor out;
  if (out_arg) {
    out = *out_arg;
    KILN_CHECK(out.dtype() == self.dtype(), "[", op, "] expected out of dtype ", self.dtype(),
               " like self, got ", out.dtype());
    if (!(out.sizes() == index.sizes())) resize_out(out, index.sizes());
  } else {
    out = empty_tensor(index.sizes(), self.dtype(), meta ? Device::meta() : Device::cpu());
  }
  if (meta || !has_indices) return out;
  check_cpu(self, op, "self");
  check_cpu(index, op, "index");
  if (out_arg) check_cpu(out, op, "out");
  const int64_t size = nonempty_sizes(self)[dim];
  check_index_values(op, index, dim, size);
  // See Note [Writes into shared storage].
  const Tensor src = same_storage(out, self) ? self.clone() : self;
  move(index, out, nonempty_strides(out), 0, static_cast<const char*>(src.data_ptr()),
       strides_except(src, dim), nonempty_strides(src)[dim]);
  out.impl()->bump_version();
  return out;
}

Tensor gather(const Tensor& self, int64_t dim, const Tensor& index, bool /*sparse_grad*/) {
  return gather_impl("gather", self, dim, index, nullptr);
}
Tensor gather_out(const Tensor& self, int64_t dim, const Tensor& index, bool /*sparse_grad*/,
                  const Tensor& out) {
  return gather_impl("gather.out", self, dim, index, &out);
}

// --- scatter / scatter_add -----------------------------------------------------------

// PyTorch's scatter checks (dtype, then shapes, skipped for an empty index).
void check_scatter(const char* op, const Tensor& self, int64_t dim, const Tensor& index,
                   const Tensor* src) {
  check_defined(index, op, "index");
  if (index.numel() != 0) {
    KILN_CHECK(index.dtype() == kInt64, "[", op, "] expected an index of dtype int64, got ",
               index.dtype());
  }
  if (src) {
    check_defined(*src, op, "src");
    KILN_CHECK(src->dtype() == self.dtype(), "[", op, "] expected src of dtype ", self.dtype(),
               " like self, got ", src->dtype());
  }
  if (index.numel() == 0) return;
  const DimVector ss = nonempty_sizes(self), is = nonempty_sizes(index);
  KILN_CHECK(ss.size() == is.size(), "[", op, "] expected an index with as many dims as self (",
             ss.size(), "), got ", is.size());
  if (src) {
    const DimVector rs = nonempty_sizes(*src);
    KILN_CHECK(rs.size() == is.size(), "[", op, "] expected an index with as many dims as src (",
               rs.size(), "), got ", is.size());
  }
  for (int64_t d = 0; d < static_cast<int64_t>(ss.size()); ++d) {
    KILN_CHECK(d == dim || is[d] <= ss[d], "[", op, "] expected index size ", is[d], " at dim ", d,
               " to be at most self's size ", ss[d], " (index sizes ", index.sizes(),
               ", self sizes ", self.sizes(), ", scattering along dim ", dim, ")");
    if (src) {
      const int64_t r = nonempty_sizes(*src)[d];
      KILN_CHECK(is[d] <= r, "[", op, "] expected index size ", is[d], " at dim ", d,
                 " to be at most src's size ", r, " (index sizes ", index.sizes(), ", src sizes ",
                 src->sizes(), ")");
    }
  }
}

enum class Scatter { Src, Value, Add, Reduce };

// A scatter reduction's choices (Note [Scatter reductions]).
struct Reduction {
  ScatterReduce op = ScatterReduce::Sum;
  bool include_self = true;
};

// a (the element of self) combined with b.
template <class T>
inline T combine(ScatterReduce r, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return r == ScatterReduce::Sum || r == ScatterReduce::Max ? (a || b) : (a && b);
  } else if constexpr (std::is_integral_v<T>) {
    // Wraps on overflow (Note [Integer wrap-around]).
    switch (r) {
      case ScatterReduce::Sum:
      case ScatterReduce::Mean:
        return wrap_add(a, b);
      case ScatterReduce::Prod:
        return wrap_mul(a, b);
      case ScatterReduce::Max:
        return a < b ? b : a;
      case ScatterReduce::Min:
        return b < a ? b : a;
    }
    return a;
  } else {
    using M = opmath_t<T>;
    const M x = static_cast<M>(a), y = static_cast<M>(b);
    switch (r) {
      case ScatterReduce::Sum:
      case ScatterReduce::Mean:
        return static_cast<T>(x + y);
      case ScatterReduce::Prod:
        return static_cast<T>(x * y);
      case ScatterReduce::Max:  // NaN wins, from either side
        return std::isnan(y) || x < y ? b : a;
      case ScatterReduce::Min:
        return std::isnan(y) || y < x ? b : a;
    }
    return a;
  }
}

template <class T>
T reduce_identity(ScatterReduce r) {
  switch (r) {
    case ScatterReduce::Sum:
    case ScatterReduce::Mean:
      return T(0);
    case ScatterReduce::Prod:
      return T(1);
    case ScatterReduce::Max:
      if constexpr (std::is_floating_point_v<opmath_t<T>>) {
        return T(-std::numeric_limits<float>::infinity());
      } else {
        return std::numeric_limits<T>::lowest();
      }
    case ScatterReduce::Min:
      if constexpr (std::is_floating_point_v<opmath_t<T>>) {
        return T(std::numeric_limits<float>::infinity());
      } else {
        return std::numeric_limits<T>::max();
      }
  }
  return T(0);
}

// dst[pos, dim <- index] combined with src[pos] (or *value when `value`), over
// the index's positions in row-major order; then the mean's division.
template <class T>
void scatter_reduce_loop(const Tensor& index, int64_t dim, const Tensor& dst, const Tensor* src,
                         const T* value, Reduction red) {
  const DimVector sizes = nonempty_sizes(index);
  const DimVector zeros(sizes.size(), 0);
  const DimVector st[kMaxOps] = {nonempty_strides(index), strides_except(dst, dim),
                                 src ? nonempty_strides(*src) : zeros};
  const int64_t dim_stride = nonempty_strides(dst)[dim];
  const int64_t* ip = static_cast<const int64_t*>(index.data_ptr());
  T* d = static_cast<T*>(dst.data_ptr());
  const T* s = src ? static_cast<const T*>(src->data_ptr()) : value;
  if (!red.include_self) {
    const T init = reduce_identity<T>(red.op);
    for_each_position(sizes, st,
                      [&](int64_t i, int64_t o, int64_t) { d[o + ip[i] * dim_stride] = init; });
  }
  const ScatterReduce r = red.op;
  for_each_position(sizes, st, [&](int64_t i, int64_t o, int64_t x) {
    T& target = d[o + ip[i] * dim_stride];
    target = combine<T>(r, target, s[x]);
  });
  if (r != ScatterReduce::Mean) return;
  // Values combined per element (dense, dst's shape), then the division.
  Tensor count = empty_tensor(nonempty_sizes(dst), kInt64, Device::cpu());
  count.zero_();
  int64_t* c = count.data_ptr<int64_t>();
  const DimVector cst[kMaxOps] = {nonempty_strides(index), strides_except(count, dim), zeros};
  const int64_t c_dim_stride = count.stride(dim);
  for_each_position(sizes, cst,
                    [&](int64_t i, int64_t o, int64_t) { ++c[o + ip[i] * c_dim_stride]; });
  const DimVector all = nonempty_sizes(dst);
  const DimVector dst_st[kMaxOps] = {nonempty_strides(dst), nonempty_strides(count),
                                     DimVector(all.size(), 0)};
  const int64_t self_count = red.include_self ? 1 : 0;
  for_each_position(all, dst_st, [&](int64_t o, int64_t k, int64_t) {
    const int64_t n = std::max<int64_t>(c[k] + self_count, 1);
    if (n == 1) return;
    if constexpr (std::is_integral_v<T>) {
      const int64_t a = static_cast<int64_t>(d[o]);
      int64_t q = a / n;
      if (a % n != 0 && a < 0) --q;  // floor
      d[o] = static_cast<T>(q);
    } else {
      using M = opmath_t<T>;
      d[o] = static_cast<T>(static_cast<M>(d[o]) / static_cast<M>(n));
    }
  });
}

template <class T>
void scatter_add_loop(const Tensor& index, int64_t dim, const Tensor& dst, const Tensor& src) {
  const DimVector sizes = nonempty_sizes(index);
  const DimVector st[kMaxOps] = {nonempty_strides(index), strides_except(dst, dim),
                                 nonempty_strides(src)};
  const int64_t dim_stride = nonempty_strides(dst)[dim];
  const int64_t* ip = static_cast<const int64_t*>(index.data_ptr());
  T* d = static_cast<T*>(dst.data_ptr());
  const T* s = static_cast<const T*>(src.data_ptr());
  for_each_position(sizes, st, [&](int64_t i, int64_t o, int64_t x) {
    T& target = d[o + ip[i] * dim_stride];
    if constexpr (std::is_same_v<T, bool>) {
      target = target || s[x];
    } else if constexpr (std::is_integral_v<T>) {
      target = wrap_add(target, s[x]);  // Note [Integer wrap-around]
    } else {
      target = static_cast<T>(static_cast<opmath_t<T>>(target) + static_cast<opmath_t<T>>(s[x]));
    }
  });
}

// Writes into `dst` (self, or a copy of it) over the index's positions.
void scatter_into(const char* op, Scatter kind, const Tensor& dst, int64_t dim, const Tensor& index,
                  const Tensor* src, const Scalar* value, Reduction red = {}) {
  if (index.numel() == 0) return;
  check_cpu(index, op, "index");
  check_index_values(op, index, dim, nonempty_sizes(dst)[dim]);
  const int64_t dim_stride = nonempty_strides(dst)[dim];
  if (kind == Scatter::Reduce) {
    Tensor s;
    if (src) {
      check_cpu(*src, op, "src");
      // See Note [Writes into shared storage].
      s = same_storage(dst, *src) ? src->clone() : *src;
    }
    visit_dtype(dst.dtype(), kAllMask, op, [&]<class T>() {
      uint64_t bits = 0;
      if (value) store_scalar(&bits, dst.dtype(), *value);
      scatter_reduce_loop<T>(index, dim, dst, src ? &s : nullptr, reinterpret_cast<const T*>(&bits),
                             red);
    });
  } else if (kind == Scatter::Value) {
    uint64_t bits = 0;
    store_scalar(&bits, dst.dtype(), *value);
    move(index, dst, strides_except(dst, dim), dim_stride, reinterpret_cast<const char*>(&bits),
         DimVector(nonempty_sizes(index).size(), 0), 0);
  } else {
    check_cpu(*src, op, "src");
    // See Note [Writes into shared storage].
    Tensor s = same_storage(dst, *src) ? src->clone() : *src;
    if (kind == Scatter::Src) {
      move(index, dst, strides_except(dst, dim), dim_stride, static_cast<const char*>(s.data_ptr()),
           nonempty_strides(s), 0);
    } else {
      visit_dtype(dst.dtype(), kAllMask, op,
                  [&]<class T>() { scatter_add_loop<T>(index, dim, dst, s); });
    }
  }
  dst.impl()->bump_version();
}

Tensor scatter_impl(const char* op, Scatter kind, bool in_place, const Tensor& self, int64_t dim,
                    const Tensor& index, const Tensor* src, const Scalar* value,
                    Reduction red = {}) {
  check_defined(self, op, "self");
  dim = wrap_dim(dim, self.dim(), op);
  check_scatter(op, self, dim, index, src);
  if (value) check_convertible(*value, self.dtype(), op);
  KILN_CHECK(kind != Scatter::Reduce || red.op != ScatterReduce::Mean || self.dtype() != kBool, "[",
             op, "] expected a self of a numeric dtype for reduce 'mean', got bool");
  const bool meta = any_meta(self, index, src);
  if (in_place) {
    check_no_internal_overlap(self, op);
    check_no_overlap(self, index, op);
    if (src) check_no_overlap(self, *src, op);
    if (meta) return self;
    check_cpu(self, op, "self");
    scatter_into(op, kind, self, dim, index, src, value, red);
    return self;
  }
  Tensor out = empty_tensor(self.sizes(), self.dtype(), meta ? Device::meta() : Device::cpu());
  if (meta) return out;
  check_cpu(self, op, "self");
  copy_into(out, self);
  scatter_into(op, kind, out, dim, index, src, value, red);
  return out;
}

Tensor scatter_src(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_impl("scatter", Scatter::Src, false, self, dim, index, &src, nullptr);
}
Tensor scatter_value(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value) {
  return scatter_impl("scatter", Scatter::Value, false, self, dim, index, nullptr, &value);
}
Tensor scatter_src_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_impl("scatter_", Scatter::Src, true, self, dim, index, &src, nullptr);
}
Tensor scatter_value_(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value) {
  return scatter_impl("scatter_", Scatter::Value, true, self, dim, index, nullptr, &value);
}
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_impl("scatter_add", Scatter::Add, false, self, dim, index, &src, nullptr);
}
Tensor scatter_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_impl("scatter_add_", Scatter::Add, true, self, dim, index, &src, nullptr);
}

Tensor scatter_reduce_src(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                          std::string_view reduce) {
  const Reduction r{parse_scatter_reduce("scatter", reduce, false), true};
  return scatter_impl("scatter", Scatter::Reduce, false, self, dim, index, &src, nullptr, r);
}
Tensor scatter_reduce_value(const Tensor& self, int64_t dim, const Tensor& index,
                            const Scalar& value, std::string_view reduce) {
  const Reduction r{parse_scatter_reduce("scatter", reduce, false), true};
  return scatter_impl("scatter", Scatter::Reduce, false, self, dim, index, nullptr, &value, r);
}
Tensor scatter_reduce_src_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                           std::string_view reduce) {
  const Reduction r{parse_scatter_reduce("scatter_", reduce, false), true};
  return scatter_impl("scatter_", Scatter::Reduce, true, self, dim, index, &src, nullptr, r);
}
Tensor scatter_reduce_value_(const Tensor& self, int64_t dim, const Tensor& index,
                             const Scalar& value, std::string_view reduce) {
  const Reduction r{parse_scatter_reduce("scatter_", reduce, false), true};
  return scatter_impl("scatter_", Scatter::Reduce, true, self, dim, index, nullptr, &value, r);
}
Tensor scatter_reduce_two(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                          std::string_view reduce, bool include_self) {
  const Reduction r{parse_scatter_reduce("scatter_reduce", reduce, true), include_self};
  return scatter_impl("scatter_reduce", Scatter::Reduce, false, self, dim, index, &src, nullptr, r);
}
Tensor scatter_reduce_two_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                           std::string_view reduce, bool include_self) {
  const Reduction r{parse_scatter_reduce("scatter_reduce_", reduce, true), include_self};
  return scatter_impl("scatter_reduce_", Scatter::Reduce, true, self, dim, index, &src, nullptr, r);
}

void register_kernels(Library& m) {
  m.impl("gather", &gather);
  m.impl("gather.out", &gather_out);
  m.impl("scatter.src", &scatter_src);
  m.impl("scatter.value", &scatter_value);
  m.impl("scatter_.src", &scatter_src_);
  m.impl("scatter_.value", &scatter_value_);
  m.impl("scatter_add", &scatter_add);
  m.impl("scatter_add_", &scatter_add_);
  m.impl("scatter.reduce", &scatter_reduce_src);
  m.impl("scatter.value_reduce", &scatter_reduce_value);
  m.impl("scatter_.reduce", &scatter_reduce_src_);
  m.impl("scatter_.value_reduce", &scatter_reduce_value_);
  m.impl("scatter_reduce.two", &scatter_reduce_two);
  m.impl("scatter_reduce_.two", &scatter_reduce_two_);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
