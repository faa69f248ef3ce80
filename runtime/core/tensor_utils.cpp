#include "runtime/core/tensor_utils.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/hooks.h"

namespace kiln {

DimVector contiguous_strides(IntArrayRef sizes) {
  DimVector strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= sizes[i] > 1 ? sizes[i] : 1;
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = ndim > 0 ? ndim : 1;
  KILN_CHECK(dim >= -n && dim < n, "[", op, "] dimension out of range: expected a dim in [", -n,
             ", ", n - 1, "], got ", dim);
  return dim < 0 ? dim + n : dim;
}

uint64_t dim_mask(IntArrayRef dims, int64_t ndim, const char* op, bool empty_is_all) {
  KILN_CHECK(ndim <= 64, "[", op, "] expected at most 64 dims, got ", ndim);
  if (dims.empty() && empty_is_all) return ndim == 64 ? ~uint64_t{0} : (uint64_t{1} << ndim) - 1;
  uint64_t mask = 0;
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, ndim, op);
    if (ndim == 0) continue;
    KILN_CHECK(!((mask >> w) & 1), "[", op, "] dim ", w,
               " appears multiple times in the list of dims ", dims);
    mask |= uint64_t{1} << w;
  }
  return mask;
}

bool non_overlapping_and_dense(const Tensor& t) {
  if (t.is_contiguous()) return true;
  const int64_t nd = t.dim();
  DimVector perm(nd);
  for (int64_t i = 0; i < nd; ++i) perm[i] = i;
  IntArrayRef sizes = t.sizes(), strides = t.strides();
  std::sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    if (sizes[a] < 2) return false;
    if (sizes[b] < 2) return true;
    return strides[a] < strides[b];
  });
  int64_t expected = 1;
  for (int64_t i = 0; i < nd; ++i) {
    int64_t d = perm[i];
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

DimVector dims_by_stride(IntArrayRef strides) {
  DimVector order(strides.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  return order;
}

bool index_at_offset(IntArrayRef sizes, IntArrayRef strides, int64_t offset,
                     std::vector<int64_t>* index) {
  index->assign(sizes.size(), 0);
  if (offset < 0) return false;
  for (int64_t d : dims_by_stride(strides)) {
    if (sizes[d] <= 1) continue;
    if (strides[d] <= 0) return false;
    const int64_t i = offset / strides[d];
    if (i >= sizes[d]) return false;
    (*index)[static_cast<size_t>(d)] = i;
    offset -= i * strides[d];
  }
  return offset == 0;
}

bool may_overlap_itself(IntArrayRef sizes, IntArrayRef strides) {
  const DimVector order = dims_by_stride(strides);
  int64_t span = 0;  // the largest offset the dims inside reach
  for (size_t k = order.size(); k-- > 0;) {
    const int64_t d = order[k];
    if (sizes[d] <= 1) continue;
    if (strides[d] <= span) return true;
    span += (sizes[d] - 1) * strides[d];
  }
  return false;
}

bool compute_contiguous(IntArrayRef sizes, IntArrayRef strides) {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 0) return true;
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

Tensor empty_strided_tensor(IntArrayRef sizes, IntArrayRef strides, DType dtype, Device device,
                            const char* op) {
  // Storage spans the furthest element the strides reach.
  const int64_t extent = checked_extent(sizes, strides, 0, dtype, op);
  IntrusivePtr<StorageImpl> storage;
  if (!device.is_meta()) {
    storage = StorageImpl::allocate(static_cast<size_t>(extent) * itemsize(dtype), device);
  }
  return Tensor(
      IntrusivePtr<TensorImpl>::make(std::move(storage), dtype, device, sizes, strides, 0));
}

namespace {

// The tensor for row-major `strides` of `sizes` (numel elements); its storage
// gets memory when `allocate`, else only its size (a lazy output, given
// memory when its trace runs).
[[gnu::always_inline]] inline Tensor row_major_with(IntArrayRef sizes, IntArrayRef strides,
                                                    int64_t numel, DType dtype, Device device,
                                                    bool allocate) {
  const size_t nbytes = static_cast<size_t>(numel) * itemsize(dtype);
  IntrusivePtr<StorageImpl> storage;
  if (!device.is_meta()) {
    storage = allocate ? StorageImpl::allocate(nbytes, device)
                       : IntrusivePtr<StorageImpl>::make(nullptr, nbytes, device, nullptr, nullptr);
  }
  return Tensor(IntrusivePtr<TensorImpl>::make(std::move(storage), dtype, device, sizes, strides,
                                               TensorImpl::RowMajor{numel}));
}

[[gnu::always_inline]] inline Tensor row_major_tensor(IntArrayRef sizes, DType dtype, Device device,
                                                      bool allocate, const char* op) {
  // Row-major strides reach exactly numel elements: no stride checks or extent
  // walk, strides, count and the checks of Note [Checked size arithmetic] in
  // one pass (this makes every eager op's output).
  constexpr size_t kInline = 8;
  if (KILN_UNLIKELY(sizes.size() > kInline)) {
    const int64_t numel = checked_bytes_numel(sizes, dtype, op);
    DimVector strides = contiguous_strides(sizes);
    return row_major_with(sizes, strides, numel, dtype, device, allocate);
  }
  int64_t strides[kInline];
  int64_t step = 1, bytes;
  uint64_t numel = 1;  // at most step, which is checked
  bool ok = true;
  for (size_t i = sizes.size(); i-- > 0;) {
    const int64_t s = sizes[i];
    strides[i] = step;
    ok &= s >= 0 && !__builtin_mul_overflow(step, s > 1 ? s : 1, &step);
    numel *= static_cast<uint64_t>(s);
  }
  ok &= !__builtin_mul_overflow(step, static_cast<int64_t>(itemsize(dtype)), &bytes);
  if (KILN_UNLIKELY(!ok)) checked_bytes_numel(sizes, dtype, op);  // throws the precise error
  return row_major_with(sizes, IntArrayRef(strides, sizes.size()), static_cast<int64_t>(numel),
                        dtype, device, allocate);
}

}  // namespace

Tensor empty_tensor(IntArrayRef sizes, DType dtype, Device device, const char* op) {
  return row_major_tensor(sizes, dtype, device, true, op);
}

Tensor unallocated_tensor(IntArrayRef sizes, DType dtype, Device device, const char* op) {
  return row_major_tensor(sizes, dtype, device, false, op);
}

void grow_storage(const Tensor& t, size_t nbytes) {
  TensorImpl* impl = t.impl();
  const IntrusivePtr<StorageImpl> old = impl->storage();
  if (t.device().is_meta() || (old && old->nbytes() >= nbytes)) return;
  auto fresh = StorageImpl::allocate(nbytes, t.device());
  if (old && old->nbytes() > 0 && old->data()) {
    if (t.device().is_cpu()) {
      std::memcpy(fresh->data(), old->data(), old->nbytes());
    } else {
      const int64_t n = static_cast<int64_t>(old->nbytes()), one = 1;
      Tensor from(IntrusivePtr<TensorImpl>::make(old, kUInt8, t.device(), IntArrayRef(&n, 1),
                                                 IntArrayRef(&one, 1), 0));
      Tensor to(IntrusivePtr<TensorImpl>::make(fresh, kUInt8, t.device(), IntArrayRef(&n, 1),
                                               IntArrayRef(&one, 1), 0));
      ExcludeKeyGuard no_lazy(DispatchKey::Lazy);
      to.copy_(from);
    }
  }
  impl->set_storage(std::move(fresh));
}

void resize_out(const Tensor& out, IntArrayRef shape) {
  if (out.sizes() == shape) return;  // resize_ to the same shape keeps the strides
  checked_bytes_numel(shape, out.dtype(), "resize");
  const DimVector strides = contiguous_strides(shape);
  const int64_t extent =
      checked_extent(shape, strides, out.storage_offset(), out.dtype(), "resize");
  grow_storage(out, static_cast<size_t>(extent) * out.element_size());
  out.impl()->set_geometry(shape, strides, out.storage_offset());
}

Tensor empty_like_tensor(const Tensor& t) {
  return empty_tensor(t.sizes(), t.dtype(), t.device());
}

Tensor make_view(const Tensor& base, IntArrayRef sizes, IntArrayRef strides,
                 int64_t storage_offset) {
  TensorImpl* b = base.impl();
  auto impl = IntrusivePtr<TensorImpl>::make(b->storage(), b->dtype(), b->device(), sizes, strides,
                                             storage_offset);
  if (ViewHook hook = view_hook()) hook(b, impl.get());
  return Tensor(std::move(impl));
}

Tensor scalar_tensor(const Scalar& s, DType dtype, Device device) {
  Tensor t = empty_tensor({}, dtype, Device::cpu());
  // Fresh memory written, not a value read: no data(), which a trace watches
  // (Note [Host reads while tracing] in jit/compile/tracing.h).
  store_scalar(t.impl()->storage()->data(), dtype, s);
  return device.is_cpu() ? t : t.to(device);
}

Tensor meta_twin(const Tensor& t) {
  if (!t.defined()) return t;
  auto impl = IntrusivePtr<TensorImpl>::make(t.dtype(), Device::meta(), t.sizes(), t.strides(),
                                             t.storage_offset());
  impl->set_wrapped_number(t.impl()->is_wrapped_number());  // it changes type promotion
  impl->set_meta_origin(t.is_meta() ? t.impl()->meta_origin() : t.device());
  return Tensor(std::move(impl));
}

bool cpu_kernel_for(const Tensor& t) {
  return t.is_meta() ? t.impl()->meta_origin().is_cpu() : t.is_cpu();
}

Tensor wrap_scalar(const Scalar& s) {
  Tensor t = scalar_tensor(s, s.dtype());
  t.impl()->set_wrapped_number(true);
  return t;
}

void check_defined(const Tensor& t, const char* op, const char* name) {
  KILN_CHECK(t.defined(), "[", op, "] expected argument '", name,
             "' to be a defined tensor, got an undefined one");
}

uint32_t dtype_bit(DType t) {
  return 1u << static_cast<int>(t);
}

namespace {
std::string dtype_list(uint32_t allowed) {
  std::string list;
  for (int i = 0; i < kNumDTypes; ++i) {
    if (allowed & (1u << i)) {
      list += list.empty() ? "" : ", ";
      list += dtype_name(static_cast<DType>(i));
    }
  }
  return list;
}
}  // namespace

void check_dtype_in(const Tensor& t, uint32_t allowed, const char* op, const char* name) {
  if (KILN_LIKELY(allowed & dtype_bit(t.dtype()))) return;
  KILN_FAIL("[", op, "] expected '", name, "' of dtype ", dtype_list(allowed), ", got ", t.dtype());
}

void fail_dtype(DType t, uint32_t allowed, const char* op) {
  KILN_FAIL("[", op, "] expected a dtype among ", dtype_list(allowed), ", got ", t);
}

double load_as_double(const void* base, DType t, int64_t i) {
  switch (t) {
    case kBool:
      return static_cast<const bool*>(base)[i];
    case kUInt8:
      return static_cast<const uint8_t*>(base)[i];
    case kInt8:
      return static_cast<const int8_t*>(base)[i];
    case kInt16:
      return static_cast<const int16_t*>(base)[i];
    case kInt32:
      return static_cast<const int32_t*>(base)[i];
    case kInt64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case kFloat16:
      return static_cast<const Half*>(base)[i];
    case kBFloat16:
      return static_cast<const BFloat16*>(base)[i];
    case kFloat32:
      return static_cast<const float*>(base)[i];
    case kFloat64:
      return static_cast<const double*>(base)[i];
  }
  return 0;
}

Scalar load_scalar(const void* base, DType t, int64_t i) {
  if (t == kBool) return Scalar(static_cast<const bool*>(base)[i]);
  if (t == kInt64) return Scalar(static_cast<const int64_t*>(base)[i]);
  if (is_integral(t, false)) return Scalar(static_cast<int64_t>(load_as_double(base, t, i)));
  return Scalar(load_as_double(base, t, i));
}

void store_scalar(void* dst, DType t, const Scalar& s) {
  switch (t) {
    case kBool:
      *static_cast<bool*>(dst) = s.to_bool();
      break;
    case kUInt8:
      *static_cast<uint8_t*>(dst) = static_cast<uint8_t>(s.to_int());
      break;
    case kInt8:
      *static_cast<int8_t*>(dst) = static_cast<int8_t>(s.to_int());
      break;
    case kInt16:
      *static_cast<int16_t*>(dst) = static_cast<int16_t>(s.to_int());
      break;
    case kInt32:
      *static_cast<int32_t*>(dst) = static_cast<int32_t>(s.to_int());
      break;
    case kInt64:
      *static_cast<int64_t*>(dst) = s.to_int();
      break;
    case kFloat16:
      *static_cast<Half*>(dst) = Half(static_cast<float>(s.to_double()));
      break;
    case kBFloat16:
      *static_cast<BFloat16*>(dst) = BFloat16(static_cast<float>(s.to_double()));
      break;
    case kFloat32:
      *static_cast<float*>(dst) = static_cast<float>(s.to_double());
      break;
    case kFloat64:
      *static_cast<double*>(dst) = s.to_double();
      break;
  }
}

namespace {

template <class T>
bool int_overflows(int64_t v) {
  using L = std::numeric_limits<T>;
  if constexpr (!L::is_signed) {
    // As PyTorch: negative numbers wrap (two's complement) into unsigned types.
    return v > static_cast<int64_t>(L::max()) || (v < 0 && -static_cast<uint64_t>(v) > L::max());
  } else {
    return v < static_cast<int64_t>(L::lowest()) || v > static_cast<int64_t>(L::max());
  }
}

template <class T>
bool float_overflows_int(double v) {
  using L = std::numeric_limits<T>;
  // int64's max rounds up to 2^63 as a double, which int64 cannot hold
  // (PyTorch lets 2^63 through and wraps).
  return std::isnan(v) || v < static_cast<double>(L::lowest()) ||
         v > static_cast<double>(L::max()) ||
         (std::is_same_v<T, int64_t> && v >= 9223372036854775808.0);
}

}  // namespace

bool scalar_overflows(const Scalar& s, DType t) {
  if (t == kBool || s.is_bool()) return false;
  if (s.is_integral()) {
    const int64_t v = s.to_int();
    switch (t) {
      case kUInt8:
        return int_overflows<uint8_t>(v);
      case kInt8:
        return int_overflows<int8_t>(v);
      case kInt16:
        return int_overflows<int16_t>(v);
      case kInt32:
        return int_overflows<int32_t>(v);
      case kFloat16:
        return v < -65504 || v > 65504;
      default:
        return false;
    }
  }
  const double v = s.to_double();
  switch (t) {
    case kUInt8:
      return float_overflows_int<uint8_t>(v);
    case kInt8:
      return float_overflows_int<int8_t>(v);
    case kInt16:
      return float_overflows_int<int16_t>(v);
    case kInt32:
      return float_overflows_int<int32_t>(v);
    case kInt64:
      return float_overflows_int<int64_t>(v);
    case kFloat16:
      return std::isfinite(v) && std::fabs(v) > 65504.0;
    case kBFloat16:
      return std::isfinite(v) && std::fabs(v) > 3.38953138925153547590470800371487866880e38;
    case kFloat32:
      return std::isfinite(v) && std::fabs(v) > std::numeric_limits<float>::max();
    default:
      return false;
  }
}

void check_convertible(const Scalar& value, DType dtype, const char* op) {
  KILN_CHECK(!scalar_overflows(value, dtype), "[", op, "] value ", value,
             " cannot be converted to ", dtype, " without overflow");
}

double machine_epsilon(DType t) {
  switch (t) {
    case kFloat16:
      return 0.0009765625;  // 2^-10
    case kBFloat16:
      return 0.0078125;  // 2^-7
    case kFloat32:
      return std::numeric_limits<float>::epsilon();
    default:
      return std::numeric_limits<double>::epsilon();
  }
}

}  // namespace kiln
