#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "kiln/api.h"
#include "kiln/array_ref.h"
#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/impl/intrusive_ptr.h"
#include "kiln/impl/small_vector.h"

// The layout behind kiln::Tensor. Not part of the stable API: reach it through
// Tensor's methods. Implemented in runtime/.

namespace kiln {

// A value not computed yet (a lazy trace's write to a storage). jit/ subclasses
// it; runtime only holds it and asks the registered hook to materialize it.
class KILN_API PendingValue : public RefCounted {};

// Refcounted bytes on one device. Views share one StorageImpl; its version
// counter is bumped by every write through any of them.
class KILN_API StorageImpl : public RefCounted {
 public:
  using Deleter = void (*)(void* ctx, void* ptr);
  StorageImpl(void* data, size_t nbytes, Device device, void* ctx, Deleter deleter)
      : data_(data), nbytes_(nbytes), ctx_(ctx), deleter_(deleter), device_(device) {}
  ~StorageImpl() override;
  // From a per-thread pool (Note [Impl pools]).
  static void* operator new(size_t nbytes);
  static void operator delete(void* p, size_t nbytes);

  // Allocates `nbytes` from the device's allocator.
  static IntrusivePtr<StorageImpl> allocate(size_t nbytes, Device device);
  // Wraps memory kiln does not own; `deleter` runs when the last view dies.
  static IntrusivePtr<StorageImpl> from_blob(void* data, size_t nbytes, Device device,
                                             std::function<void(void*)> deleter);

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  int64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

  // Note [Pending storage]
  // In lazy mode a storage's latest contents may be a recorded write not yet
  // computed: a marker is then set (by jit/), and a fresh lazy output has no
  // memory until its trace runs. Views share the storage, so they see pending
  // writes through it exactly as they see eager ones. Any thread may look at
  // the marker while another replaces it (Note [Pending state across
  // threads] in jit/record/trace_buffer.h): it is read without a lock, taken
  // hold of under one process-wide lock, and replaced under it or by a
  // compare-and-swap.
  bool has_pending() const { return pending_.load(std::memory_order_acquire) != nullptr; }
  // The marker's address, only to compare with a marker the caller holds.
  const PendingValue* pending_marker() const { return pending_.load(std::memory_order_acquire); }
  // A reference to the marker (null when none), taken under the pending lock.
  IntrusivePtr<PendingValue> pending() const;
  // Replaces the marker (null: none) under the pending lock.
  void set_pending(IntrusivePtr<PendingValue> p);
  // Replaces the marker only while it is `expected`, without the lock; true
  // when it did. The caller keeps `expected` alive until after
  // pending_barrier(), so a thread that just read it can still take hold of it.
  bool replace_pending(const PendingValue* expected, IntrusivePtr<PendingValue> p);
  // Returns once every thread that read a marker under the lock has taken hold of it.
  static void pending_barrier();
  // Gives this storage memory of at least nbytes() (a lazy storage being materialized).
  void set_data(void* data, void* ctx, Deleter deleter);
  // Takes `other`'s memory (same size or larger), leaving `other` empty.
  void adopt_data(StorageImpl& other);
  // Releases the memory (its deleter runs), leaving the storage without any.
  void reset_data();

  // Note [Memory wrapped twice]: another live from_blob storage wraps some of
  // the same bytes, so lazy mode cannot order this storage's reads and writes
  // by storage alone.
  bool shares_memory() const { return shares_memory_.load(std::memory_order_acquire); }
  // Whether this storage wraps memory the caller owns (from_blob): a write to
  // it is seen outside whether or not a tensor of it is still held.
  bool wraps_caller_memory() const;
  void mark_shares_memory() {
    any_shares_memory_.store(true, std::memory_order_release);
    shares_memory_.store(true, std::memory_order_release);
  }
  // Whether any storage was ever marked: hot paths test this first.
  static bool any_shares_memory() { return any_shares_memory_.load(std::memory_order_acquire); }

  // References to this storage that jit::compile's entries hold (their
  // tensors on it, their guards' own), so that a captured tensor's guard
  // tells them from the caller's (Note [Guards] in guards/guards.h).
  int32_t compiled_refs() const { return compiled_refs_.load(std::memory_order_acquire); }
  void add_compiled_refs(int32_t n) { compiled_refs_.fetch_add(n, std::memory_order_acq_rel); }

 private:
  void* data_;
  size_t nbytes_;
  void* ctx_;
  Deleter deleter_;
  Device device_;
  std::atomic<int64_t> version_{0};
  std::atomic<PendingValue*> pending_{nullptr};  // owns one reference
  std::atomic<int32_t> compiled_refs_{0};
  std::atomic<bool> shares_memory_{false};
  static std::atomic<bool> any_shares_memory_;
};

class KILN_API TensorImpl : public RefCounted {
 public:
  TensorImpl(IntrusivePtr<StorageImpl> storage, DType dtype, Device device, IntArrayRef sizes,
             IntArrayRef strides, int64_t storage_offset);
  // From a per-thread pool (Note [Impl pools]).
  static void* operator new(size_t nbytes);
  static void operator delete(void* p, size_t nbytes);

  // Row-major strides for `sizes` and their element count, both computed by
  // the caller (empty_tensor, behind every eager op's output): no geometry pass.
  struct RowMajor {
    int64_t numel;
  };
  TensorImpl(IntrusivePtr<StorageImpl> storage, DType dtype, Device device, IntArrayRef sizes,
             IntArrayRef strides, RowMajor row_major);
  // A tensor of the given geometry whose storage is not there yet (meta and lazy tensors).
  TensorImpl(DType dtype, Device device, IntArrayRef sizes, IntArrayRef strides,
             int64_t storage_offset);

  IntArrayRef sizes() const { return sizes_; }
  IntArrayRef strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t numel() const { return numel_; }
  int64_t storage_offset() const { return storage_offset_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_contiguous() const { return is_contiguous_; }
  uint64_t key_bits() const { return key_bits_; }

  // True for the 0-dim tensors kiln makes from C++ numbers (`x + 2.0`): they
  // take part in type promotion only by kind, as in PyTorch.
  bool is_wrapped_number() const { return wrapped_number_; }
  void set_wrapped_number(bool v) { wrapped_number_ = v; }

  // For a meta tensor, the device of the tensor it stands for (Note [Meta
  // twins]); cpu for one made as meta.
  Device meta_origin() const { return meta_origin_; }
  void set_meta_origin(Device d) { meta_origin_ = d; }

  const IntrusivePtr<StorageImpl>& storage() const { return storage_; }
  bool has_storage() const { return static_cast<bool>(storage_); }
  void set_storage(IntrusivePtr<StorageImpl> s) { storage_ = std::move(s); }
  // True while the storage's latest contents are a recorded, uncomputed value.
  bool is_pending() const { return storage_ && storage_->has_pending(); }

  // Replaces sizes and strides (views made in place, resize of outputs).
  void set_geometry(IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset);
  void set_dtype(DType t) { dtype_ = t; }

  // The data of element 0, materializing a pending value first. Throws for meta tensors.
  void* data() {
    if (KILN_LIKELY(storage_ && !storage_->has_pending() && !host_reads_watched())) {
      return static_cast<char*>(storage_->data()) +
             storage_offset_ * static_cast<int64_t>(itemsize(dtype_));
    }
    return data_slow();
  }
  int64_t version() const { return storage_ ? storage_->version() : 0; }
  void bump_version() {
    if (storage_) storage_->bump_version();
  }
  // References to this tensor object that jit::compile's guards hold, so
  // that a captured tensor's guard tells them from the caller's (Note
  // [Guards] in guards/guards.h).
  int32_t compiled_refs() const { return compiled_refs_.load(std::memory_order_acquire); }
  void add_compiled_refs(int32_t n) { compiled_refs_.fetch_add(n, std::memory_order_acq_rel); }

  // Note [Host reads while tracing] (jit/compile/tracing.h): nonzero while
  // some thread traces a compiled function; data() then takes its slow path,
  // which tells the host read hook. Outside tracing, one relaxed load.
  static bool host_reads_watched() { return reads_watched_.load(std::memory_order_relaxed) != 0; }
  static void watch_host_reads(int delta) {
    reads_watched_.fetch_add(delta, std::memory_order_relaxed);
  }

 private:
  void refresh();
  void* data_slow();

  DimVector sizes_;
  DimVector strides_;
  int64_t storage_offset_ = 0;
  int64_t numel_ = 1;
  IntrusivePtr<StorageImpl> storage_;
  uint64_t key_bits_ = 0;
  DType dtype_;
  Device device_;
  bool is_contiguous_ = true;
  bool wrapped_number_ = false;
  Device meta_origin_ = Device::cpu();
  std::atomic<int32_t> compiled_refs_{0};
  static std::atomic<int> reads_watched_;
};

}  // namespace kiln
