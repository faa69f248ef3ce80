#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

namespace kiln {

// Base of every refcounted object handed around by pointer (TensorImpl,
// StorageImpl, trace nodes). A new object starts with one reference, owned by
// the IntrusivePtr that adopts it.
class RefCounted {
 public:
  RefCounted() = default;
  RefCounted(const RefCounted&) = delete;
  RefCounted& operator=(const RefCounted&) = delete;
  virtual ~RefCounted() = default;

  void retain() const { refcount_.fetch_add(1, std::memory_order_relaxed); }
  void release() const {
    // A count of one means the caller holds the only reference: no other
    // thread can reach the object to change the count, so the last release
    // (every eager op's temporaries) skips the locked read-modify-write.
    if (refcount_.load(std::memory_order_acquire) == 1 ||
        refcount_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      delete this;
    }
  }
  int32_t use_count() const { return refcount_.load(std::memory_order_relaxed); }

 private:
  mutable std::atomic<int32_t> refcount_{1};
};

template <class T>
class IntrusivePtr {
 public:
  IntrusivePtr() = default;
  IntrusivePtr(std::nullptr_t) {}  // NOLINT(implicit)
  // Adopts the reference a fresh object starts with.
  static IntrusivePtr adopt(T* p) {
    IntrusivePtr r;
    r.p_ = p;
    return r;
  }
  // Takes a new reference to an object someone else owns.
  static IntrusivePtr retain(T* p) {
    if (p) p->retain();
    return adopt(p);
  }
  template <class... Args>
  static IntrusivePtr make(Args&&... args) {
    return adopt(new T(std::forward<Args>(args)...));
  }

  IntrusivePtr(const IntrusivePtr& o) : p_(o.p_) {
    if (p_) p_->retain();
  }
  IntrusivePtr(IntrusivePtr&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  template <class U>
  IntrusivePtr(IntrusivePtr<U>&& o) noexcept : p_(o.detach()) {}  // NOLINT(implicit)
  template <class U>
  IntrusivePtr(const IntrusivePtr<U>& o) : p_(o.get()) {  // NOLINT(implicit)
    if (p_) p_->retain();
  }
  IntrusivePtr& operator=(const IntrusivePtr& o) {
    IntrusivePtr(o).swap(*this);
    return *this;
  }
  IntrusivePtr& operator=(IntrusivePtr&& o) noexcept {
    IntrusivePtr(std::move(o)).swap(*this);
    return *this;
  }
  ~IntrusivePtr() {
    if (p_) p_->release();
  }

  T* get() const { return p_; }
  T* operator->() const { return p_; }
  T& operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }
  void reset() { IntrusivePtr().swap(*this); }
  void swap(IntrusivePtr& o) noexcept { std::swap(p_, o.p_); }
  // Gives up ownership without releasing.
  T* detach() {
    T* p = p_;
    p_ = nullptr;
    return p;
  }
  bool operator==(const IntrusivePtr& o) const { return p_ == o.p_; }

 private:
  T* p_ = nullptr;
};

}  // namespace kiln
