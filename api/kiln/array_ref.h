#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <vector>

namespace kiln {

// A non-owning view of contiguous elements. Unlike std::span it binds to a
// braced list (`x.view({2, 3})`), which lives until the end of the full expression.
template <class T>
class ArrayRef {
 public:
  constexpr ArrayRef() = default;
  constexpr ArrayRef(const T& one) : data_(&one), size_(1) {}  // NOLINT(implicit)
  constexpr ArrayRef(const T* data, size_t size) : data_(data), size_(size) {}
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
  // Valid until the end of the full expression that holds the braced list.
  constexpr ArrayRef(std::initializer_list<T> list)  // NOLINT(implicit)
      : data_(list.begin()), size_(list.size()) {}
#pragma GCC diagnostic pop
  template <class A>
  ArrayRef(const std::vector<T, A>& v) : data_(v.data()), size_(v.size()) {}  // NOLINT
  template <size_t N>
  constexpr ArrayRef(const std::array<T, N>& a) : data_(a.data()), size_(N) {}  // NOLINT
  // Any container with data() and size() of T (SmallVector).
  template <class C>
  requires requires(const C& c) {
    { c.data() } -> std::convertible_to<const T*>;
    { c.size() } -> std::convertible_to<size_t>;
  }
  ArrayRef(const C& c) : data_(c.data()), size_(c.size()) {}  // NOLINT(implicit)

  constexpr const T* data() const {
    return data_;
  }
  constexpr size_t size() const {
    return size_;
  }
  constexpr bool empty() const {
    return size_ == 0;
  }
  constexpr const T* begin() const {
    return data_;
  }
  constexpr const T* end() const {
    return data_ + size_;
  }
  constexpr const T& operator[](size_t i) const {
    return data_[i];
  }
  constexpr const T& front() const {
    return data_[0];
  }
  constexpr const T& back() const {
    return data_[size_ - 1];
  }
  ArrayRef slice(size_t start, size_t n) const {
    return ArrayRef(data_ + start, n);
  }
  ArrayRef slice(size_t start) const {
    return ArrayRef(data_ + start, size_ - start);
  }
  std::vector<T> vec() const {
    return std::vector<T>(begin(), end());
  }

  bool operator==(ArrayRef other) const {
    if (size_ != other.size_) return false;
    for (size_t i = 0; i < size_; ++i) {
      if (!(data_[i] == other.data_[i])) return false;
    }
    return true;
  }

 private:
  const T* data_ = nullptr;
  size_t size_ = 0;
};

using IntArrayRef = ArrayRef<int64_t>;

template <class T>
std::ostream& operator<<(std::ostream& os, ArrayRef<T> a) {
  os << '[';
  for (size_t i = 0; i < a.size(); ++i) os << (i ? ", " : "") << a[i];
  return os << ']';
}

}  // namespace kiln
