#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <ostream>
#include <type_traits>

#include "kiln/array_ref.h"

namespace kiln {

// A vector of trivially copyable elements that keeps up to N of them inline,
// so sizes and strides of ordinary tensors never touch the heap.
template <class T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  SmallVector() = default;
  explicit SmallVector(size_t n, T value = T()) { assign(n, value); }
  SmallVector(std::initializer_list<T> list) { assign(list.begin(), list.size()); }
  SmallVector(ArrayRef<T> a) { assign(a.data(), a.size()); }  // NOLINT(implicit)
  SmallVector(const SmallVector& o) { assign(o.data(), o.size()); }
  SmallVector(SmallVector&& o) noexcept { take(o); }
  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) assign(o.data(), o.size());
    return *this;
  }
  SmallVector& operator=(SmallVector&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  ~SmallVector() { release(); }

  T* data() { return heap_ ? heap_ : inline_; }
  const T* data() const { return heap_ ? heap_ : inline_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  T& back() { return data()[size_ - 1]; }
  const T& back() const { return data()[size_ - 1]; }
  operator ArrayRef<T>() const { return ArrayRef<T>(data(), size_); }  // NOLINT
  ArrayRef<T> ref() const { return ArrayRef<T>(data(), size_); }

  void push_back(T v) {
    if (size_ == capacity()) grow(size_ * 2);
    data()[size_++] = v;
  }
  void pop_back() { --size_; }
  void clear() { size_ = 0; }
  void resize(size_t n, T value = T()) {
    if (n > capacity()) grow(n);
    for (size_t i = size_; i < n; ++i) data()[i] = value;
    size_ = n;
  }
  void insert(size_t pos, T v) {
    push_back(v);
    T* d = data();
    for (size_t i = size_ - 1; i > pos; --i) d[i] = d[i - 1];
    d[pos] = v;
  }
  void erase(size_t pos) {
    T* d = data();
    for (size_t i = pos; i + 1 < size_; ++i) d[i] = d[i + 1];
    --size_;
  }
  void assign(size_t n, T value) {
    size_ = 0;
    resize(n, value);
  }
  void assign(const T* src, size_t n) {
    if (n > capacity()) grow(n);
    if (n) std::memmove(data(), src, n * sizeof(T));
    size_ = n;
  }

  bool operator==(const SmallVector& o) const { return ref() == o.ref(); }

 private:
  size_t capacity() const { return heap_ ? heap_capacity_ : N; }
  void grow(size_t want) {
    size_t cap = want < 2 * N ? 2 * N : want;
    T* fresh = new T[cap];
    if (size_) std::memcpy(fresh, data(), size_ * sizeof(T));
    delete[] heap_;
    heap_ = fresh;
    heap_capacity_ = cap;
  }
  void release() {
    delete[] heap_;
    heap_ = nullptr;
    size_ = 0;
  }
  void take(SmallVector& o) {
    size_ = o.size_;
    if (o.heap_) {
      heap_ = o.heap_;
      heap_capacity_ = o.heap_capacity_;
      o.heap_ = nullptr;
    } else {
      heap_ = nullptr;
      if (size_) std::memcpy(inline_, o.inline_, size_ * sizeof(T));
    }
    o.size_ = 0;
  }

  T inline_[N];
  T* heap_ = nullptr;
  size_t size_ = 0;
  size_t heap_capacity_ = 0;
};

template <class T, size_t N>
std::ostream& operator<<(std::ostream& os, const SmallVector<T, N>& v) {
  return os << v.ref();
}

// Sizes and strides: six dims inline covers every model kiln targets.
using DimVector = SmallVector<int64_t, 6>;

}  // namespace kiln
