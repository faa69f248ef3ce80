#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/api.h"
#include "kiln/array_ref.h"
#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/impl/tensor_impl.h"
#include "kiln/scalar.h"

namespace kiln {

// dtype and device of a new tensor. An unset dtype means "the default for the
// call" (float32 for most factories; arange and full infer it from their numbers).
struct TensorOptions {
  std::optional<DType> dtype_;
  Device device_ = Device::cpu();

  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t) {}    // NOLINT(implicit)
  TensorOptions(Device d) : device_(d) {}  // NOLINT(implicit)
  TensorOptions dtype(DType t) const {
    TensorOptions o = *this;
    o.dtype_ = t;
    return o;
  }
  TensorOptions device(Device d) const {
    TensorOptions o = *this;
    o.device_ = d;
    return o;
  }
};

class Tensor;
using TensorList = ArrayRef<Tensor>;

// A handle to a TensorImpl: copies are cheap and share data. Views share
// storage with their base. Most math lives in kiln/ops.h as free functions;
// the methods here are the common ones, spelled as in PyTorch.
class KILN_API Tensor {
 public:
  Tensor() = default;
  explicit Tensor(IntrusivePtr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return static_cast<bool>(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  const IntrusivePtr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  int32_t use_count() const { return impl_ ? impl_->use_count() : 0; }

  // Geometry. Negative dims count from the end. Every accessor below throws
  // "[Tensor::sizes] expected a defined tensor, got an undefined one" on a
  // default-constructed Tensor.
  IntArrayRef sizes() const { return checked("sizes")->sizes(); }
  IntArrayRef strides() const { return checked("strides")->strides(); }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return checked("dim")->dim(); }
  int64_t numel() const { return checked("numel")->numel(); }
  int64_t storage_offset() const { return checked("storage_offset")->storage_offset(); }
  bool is_contiguous() const { return checked("is_contiguous")->is_contiguous(); }
  DType dtype() const { return checked("dtype")->dtype(); }
  Device device() const { return checked("device")->device(); }
  TensorOptions options() const { return TensorOptions(dtype()).device(device()); }
  size_t element_size() const { return itemsize(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_meta() const { return device().is_meta(); }
  bool is_floating_point() const { return is_floating(dtype()); }
  // True while the tensor is a recorded value not computed yet.
  bool is_pending() const { return checked("is_pending")->is_pending(); }
  // Bumped by every in-place write to this tensor's storage, through any view.
  int64_t version() const { return checked("version")->version(); }

  // Element 0's address; computes a pending value first. `data_ptr<T>()`
  // checks that T is the tensor's dtype.
  void* data_ptr() const { return checked("data_ptr")->data(); }
  template <class T>
  T* data_ptr() const {
    check_dtype(dtype_of<T>, "data_ptr");
    return static_cast<T*>(impl_->data());
  }
  // The value of a one-element tensor (copied to the host if needed).
  Scalar item() const;
  // As T, where T holds it: an integer T refuses NaN, infinities and values
  // past its range, a floating T finite values past its range (as
  // PyTorch's item<T>()).
  template <class T>
  T item() const {
    const Scalar v = item();
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      bool fits;
      if (v.is_floating_point()) {
        const double d = v.to_double();
        fits = d == d && d >= static_cast<double>(std::numeric_limits<T>::min()) &&
               d < static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
      } else {
        const int64_t i = v.to_int();
        fits =
            std::is_signed_v<T>
                ? i >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                      (sizeof(T) >= 8 || i <= static_cast<int64_t>(std::numeric_limits<T>::max()))
                : i >= 0 &&
                      (sizeof(T) >= 8 || static_cast<uint64_t>(i) <= std::numeric_limits<T>::max());
      }
      if (!fits) fail_item_range(v, sizeof(T) * 8, std::is_signed_v<T>);
    } else if constexpr (std::is_floating_point_v<T>) {
      const double d = v.to_double();
      if (d == d && std::abs(d) != std::numeric_limits<double>::infinity() &&
          std::abs(d) > static_cast<double>(std::numeric_limits<T>::max())) {
        fail_item_range(v, sizeof(T) * 8, true);
      }
    }
    return v.to<T>();
  }

  // Views (share storage). reshape and flatten copy only when strides cannot express the result.
  Tensor view(IntArrayRef sizes) const;
  Tensor reshape(IntArrayRef sizes) const;
  Tensor permute(IntArrayRef dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  // start: a 0-dim integer tensor (its value is read, which computes it).
  Tensor narrow(int64_t dim, const Tensor& start, int64_t length) const;
  Tensor slice(int64_t dim, std::optional<int64_t> start = std::nullopt,
               std::optional<int64_t> end = std::nullopt, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor expand(IntArrayRef sizes) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, IntArrayRef sizes) const;
  Tensor as_strided(IntArrayRef sizes, IntArrayRef strides,
                    std::optional<int64_t> storage_offset = std::nullopt) const;
  Tensor diagonal(int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1) const;
  // Windows of `size` elements along `dimension`, `step` apart: a view with
  // one more dim (PyTorch's Tensor.unfold).
  Tensor unfold(int64_t dimension, int64_t size, int64_t step) const;
  Tensor contiguous() const;

  // Copies and conversions.
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }

  // In place (return *this).
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(const Scalar& value);
  Tensor& zero_();
  Tensor& add_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& sub_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& mul_(const Tensor& other);
  Tensor& div_(const Tensor& other);
  Tensor& add_(const Scalar& other);
  Tensor& mul_(const Scalar& other);

  // Common math, the same as the free functions in kiln/ops.h.
  Tensor sum() const;
  Tensor sum(IntArrayRef dims, bool keepdim = false) const;
  Tensor mean(IntArrayRef dims, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor exp() const;
  Tensor abs() const;
  Tensor neg() const;
  Tensor sqrt() const;
  // x.where(condition, y) is kiln::where(condition, x, y), PyTorch's method form.
  Tensor where(const Tensor& condition, const Tensor& other) const;
  Tensor where(const Tensor& condition, const Scalar& other) const;

  // The values, formatted as PyTorch prints them: "tensor([1., 2.])".
  std::string str() const;
  // Copies the elements, converted to T, in row-major order.
  template <class T>
  std::vector<T> tolist() const {
    Tensor c = to(Device::cpu()).to(dtype_of<T>).contiguous();
    const T* p = c.data_ptr<T>();
    return std::vector<T>(p, p + c.numel());
  }

 private:
  void check_dtype(DType expected, const char* what) const;
  // The impl, or the error for an undefined tensor naming `what` was asked.
  TensorImpl* checked(const char* what) const {
    if (KILN_UNLIKELY(!impl_)) fail_undefined(what);
    return impl_.get();
  }
  [[noreturn]] static void fail_undefined(const char* what);
  [[noreturn]] static void fail_item_range(const Scalar& v, size_t bits, bool is_signed);
  IntrusivePtr<TensorImpl> impl_;
};

KILN_API std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Operators, as in PyTorch: elementwise, broadcasting, with type promotion.
KILN_API Tensor operator+(const Tensor& a, const Tensor& b);
KILN_API Tensor operator-(const Tensor& a, const Tensor& b);
KILN_API Tensor operator*(const Tensor& a, const Tensor& b);
KILN_API Tensor operator/(const Tensor& a, const Tensor& b);
KILN_API Tensor operator%(const Tensor& a, const Tensor& b);
KILN_API Tensor operator+(const Tensor& a, const Scalar& b);
KILN_API Tensor operator-(const Tensor& a, const Scalar& b);
KILN_API Tensor operator*(const Tensor& a, const Scalar& b);
KILN_API Tensor operator/(const Tensor& a, const Scalar& b);
KILN_API Tensor operator+(const Scalar& a, const Tensor& b);
KILN_API Tensor operator-(const Scalar& a, const Tensor& b);
KILN_API Tensor operator*(const Scalar& a, const Tensor& b);
KILN_API Tensor operator/(const Scalar& a, const Tensor& b);
KILN_API Tensor operator-(const Tensor& a);
KILN_API Tensor operator~(const Tensor& a);
KILN_API Tensor operator&(const Tensor& a, const Tensor& b);
KILN_API Tensor operator|(const Tensor& a, const Tensor& b);
KILN_API Tensor operator^(const Tensor& a, const Tensor& b);
KILN_API Tensor operator==(const Tensor& a, const Tensor& b);
KILN_API Tensor operator!=(const Tensor& a, const Tensor& b);
KILN_API Tensor operator<(const Tensor& a, const Tensor& b);
KILN_API Tensor operator<=(const Tensor& a, const Tensor& b);
KILN_API Tensor operator>(const Tensor& a, const Tensor& b);
KILN_API Tensor operator>=(const Tensor& a, const Tensor& b);
KILN_API Tensor operator==(const Tensor& a, const Scalar& b);
KILN_API Tensor operator!=(const Tensor& a, const Scalar& b);
KILN_API Tensor operator<(const Tensor& a, const Scalar& b);
KILN_API Tensor operator<=(const Tensor& a, const Scalar& b);
KILN_API Tensor operator>(const Tensor& a, const Scalar& b);
KILN_API Tensor operator>=(const Tensor& a, const Scalar& b);
KILN_API Tensor& operator+=(Tensor& a, const Tensor& b);
KILN_API Tensor& operator-=(Tensor& a, const Tensor& b);
KILN_API Tensor& operator*=(Tensor& a, const Tensor& b);
KILN_API Tensor& operator/=(Tensor& a, const Tensor& b);
KILN_API Tensor& operator+=(Tensor& a, const Scalar& b);
KILN_API Tensor& operator-=(Tensor& a, const Scalar& b);
KILN_API Tensor& operator*=(Tensor& a, const Scalar& b);
KILN_API Tensor& operator/=(Tensor& a, const Scalar& b);

}  // namespace kiln
