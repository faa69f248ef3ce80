#pragma once

// Note [Guards]
// A compiled function's cache entry holds when its guards do. They are built
// from the arguments of the call that traced it and from the thread's modes:
// - per tensor argument (list elements included): dtype, device, rank, every
//   static size, strides, storage offset (unless dynamic: Note [Dynamic
//   storage offsets]), and the alignment class of its data (kernels picked
//   vector widths for it); a dynamic dim accepts any size of 2 or more (0
//   and 1 stay specialized, as PyTorch's do), with the strides of the tensor
//   compared by pattern (zero; dense in the same order of dims and step, as
//   a transposed one or every other element of one is; row-major; exact;
//   dims of one element address nothing and are not compared);
// - which tensor arguments share a storage (the trace modeled that aliasing);
// - per list: its length; per scalar: its value, unless it is dynamic;
// - the thread's dispatch modes: the local include/exclude key sets (an
//   EagerGuard, the Lazy default) and the autocast dtype; and the process's
//   kiln::cuda::allow_tf32(), which a captured graph's matmuls keep from
//   their capture (PyTorch guards its allow_tf32 flag the same way);
// - per captured tensor (a weight, a KV cache: read by the trace, made before
//   it): identity. C++ has no attribute to watch, so identity is the
//   storage's reference count: at least one reference held outside every
//   compiled function, or as many as the traced function asked for
//   (jit::guard_held_references: views of one storage, each a parameter).
//   References the entries of any compiled function hold (their tensors on
//   the storage, their guards' own) are counted on the storage itself
//   (StorageImpl::compiled_refs) and left out: a second entry, or a second
//   function, capturing the same weight used to count as a holder outside,
//   so that replacing the weight failed no guard and both kept computing
//   with the old one. A weight replaced by another tensor (or released)
//   drops a reference held outside and fails the guard; a storage written
//   in place keeps it (later calls see the new values). The tensor object
//   the trace read it through is guarded the same way (CapturedObject,
//   TensorImpl::compiled_refs): a weight replaced by a view of its own
//   storage (`w = w.t()`) keeps the storage's count but not the object's.
//   What no count can see: a weight replaced while its old tensor is still
//   held somewhere else (a second handle, a dict of weights); a function
//   whose captured tensors change that way takes them as arguments (or is
//   compiled again). The count of a
//   compiled holder is raised before its reference is taken and lowered
//   after it is dropped where the code allows it, so a race reads too few
//   references outside (a needless recompile), not too many.
// check() is the fast path (no allocation, no strings); explain() rebuilds
// the reason a check failed, in PyTorch's recompile wording.

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ivalue.h"

// Note [Dynamic storage offsets]
// A decode loop that hands the step a slice of one buffer (ids[:, t:t+1])
// passes the same tensor at a new storage offset every call. An entry built
// for one offset would fail its guard each time, recompiling until the cache
// limit. So a storage offset that changed is dynamic on the next compile
// (with automatic_dynamic, as sizes are): that entry accepts any offset for
// the argument, and its instance reads the argument's memory shifted by the
// difference (Instance::run): the trace's views of the argument (slices,
// selects, transposes) keep their place relative to it. Arguments that share
// a storage move together (the trace modeled how they overlap): the first
// one's offset is dynamic when its argument's is, and each other's distance
// from it stays guarded, so all shift by the same bytes (x = buf[t:t+4] and
// y = buf[t+1:t+5] compile once for every t). An argument the trace made a
// view of at an explicit storage offset (as_strided(..., storage_offset): an
// absolute place, which a shift would move; tracing hears of it through a
// runtime hook, Note [Runtime hooks]) keeps its exact offset, and so do the
// others on its storage. Every offset (and size) a call moved turns
// dynamic in one recompile, not one per argument; the entry's alignment
// class for a moving offset is bounded by the step it moved (slices 96
// bytes apart are 32-byte aligned at some steps and 64 at others: an entry
// that took 64 from one address would fail at the next).

namespace kiln::guards {

// Which dims of which arguments are dynamic: bit d of `dims[input]`.
struct DynamicDims {
  std::vector<uint64_t> dims;  // per argument (tensors; for a list, its elements)
  std::vector<bool> scalars;   // per argument: a scalar not guarded as a constant
  // Per argument: a storage offset not guarded (Note [Dynamic storage offsets]).
  std::vector<bool> offsets;
  bool is_dynamic(size_t input, int64_t dim) const {
    return input < dims.size() && dim < 64 && ((dims[input] >> dim) & 1u);
  }
  bool offset_is_dynamic(size_t input) const { return input < offsets.size() && offsets[input]; }
  // Dynamic dims or scalars: what makes a plan per value (offsets do not).
  bool any() const;
};

// Why the guards of an entry failed for a call.
struct Failure {
  int input = -1;         // the argument, -1 when it is not one (a mode, a captured tensor)
  int64_t size_dim = -1;  // a dim whose size differs (automatic dynamic makes it dynamic)
  bool offset = false;    // the storage offset differs (automatic dynamic lifts that guard)
  std::string reason;     // "input 0 'ids' size mismatch at dim 0: expected 1, got 8"
};

// What automatic dynamic lifts after a size or offset failure: every static
// dim whose size moved and every guarded storage offset that moved, over all
// tensor arguments whose dtype, device and rank still match, so that one
// recompile covers a call that moved several (Note [Dynamic storage offsets]).
struct Moved {
  std::vector<std::pair<int, int64_t>> dims;  // (argument, dim)
  std::vector<int> offsets;                   // arguments
};

// A captured tensor's storage and the references held outside compiled
// functions that the guard counts on. Its own reference is a compiled one.
struct Captured {
  Captured(StorageImpl* s, int32_t outside, std::string w);
  Captured(Captured&& o) noexcept
      : storage(std::move(o.storage)), min_refs(o.min_refs.load()), what(std::move(o.what)) {}
  ~Captured();
  IntrusivePtr<StorageImpl> storage;
  std::atomic<int32_t> min_refs;  // held outside compiled functions, at least
  std::string what;               // "weight of op 5 'linear'"
  bool holds() const {
    return storage->use_count() - storage->compiled_refs() >=
           min_refs.load(std::memory_order_relaxed);
  }
};

// The tensor object a trace read a captured tensor through (the caller's
// Tensor, not only its storage), guarded where something outside compiled
// functions held it: `w = w.t()` or `w = w.narrow(...)` keeps the storage's
// count and fails only this one. Its own reference is a compiled one.
struct CapturedObject {
  CapturedObject(TensorImpl* t, std::string w);
  CapturedObject(CapturedObject&& o) noexcept : impl(std::move(o.impl)), what(std::move(o.what)) {}
  ~CapturedObject();
  IntrusivePtr<TensorImpl> impl;
  std::string what;  // "weight of op 5 'linear'"
  bool holds() const { return impl->use_count() - impl->compiled_refs() >= 1; }
};

class GuardSet {
 public:
  // The guards of a call with `args` in the thread's current modes.
  static GuardSet from_call(const std::vector<IValue>& args, const DynamicDims& dynamic);

  // Guards `storage`, captured by the entry (whose references on it are
  // counted in its compiled_refs()), when something outside compiled
  // functions holds it too (else it is a constant the function made while
  // traced, and nothing is guarded).
  // True when it did.
  bool guard_captured(StorageImpl* storage, std::string what);
  // Guards the tensor object `t` a captured tensor was read through when
  // something outside compiled functions holds it, beyond the `own`
  // references the caller of this holds on it itself.
  void guard_captured_object(TensorImpl* t, int32_t own, std::string what);
  // Tensor argument `k` (guard order) must be a view of `storage` itself: an
  // entry that runs uncompiled because that argument is a tensor the
  // function also captured (Note [Arguments that are captured tensors] in
  // jit/compile/compiled_function.cpp).
  void require_storage(size_t k, StorageImpl* storage, std::string what);
  // The entry's trace writes nothing its caller sees: an argument on a
  // captured storage no longer fails the guard (Note [Arguments that are
  // captured tensors] in jit/compile/compiled_function.cpp). Before the
  // entry is published.
  void allow_captured_arguments() { captured_arguments_fail_ = false; }
  bool captured_arguments_allowed() const { return !captured_arguments_fail_; }
  // Asks `storage`'s guard (if it has one) for at least `held` references
  // held outside compiled functions, where guard_captured asked for one.
  void require_held_references(const StorageImpl* storage, int32_t held);
  // Guards the exact offset of each tensor argument (guard order) marked in
  // `fixed` (its trace made a view of it at an explicit storage offset).
  // Before the entry is published: check() may not run meanwhile.
  void keep_offsets(const std::vector<bool>& fixed);
  // Whether `storage` is a guarded captured storage.
  bool is_captured(const StorageImpl* storage) const;

  // True when every guard holds for `args` in the current modes.
  bool check(const std::vector<IValue>& args) const;
  // Why check() failed (names: the arguments' names, possibly fewer).
  Failure explain(const std::vector<IValue>& args, const std::vector<std::string>& names) const;
  // Every size and offset `args` moved (Moved above).
  Moved moved(const std::vector<IValue>& args) const;
  // A new entry's alignment classes for arguments whose offset is dynamic:
  // no finer than `before`'s for the same tensor when its offset was dynamic
  // there too, and no finer than the distance it moved from `before`'s exact
  // offset. A slice stepping 96 bytes is 32-byte aligned at some steps and
  // 64 at others; the step bounds what later calls bring (Note [Dynamic
  // storage offsets]). Before the entry is published.
  void cap_alignment(const GuardSet& before);
  // One line per guard, for KILN_LOGS=guards.
  std::vector<std::string> describe(const std::vector<std::string>& names) const;

  const DynamicDims& dynamic() const { return dynamic_; }
  size_t captured_count() const { return captured_.size(); }

 private:
  struct TensorGuard {
    int input = 0;     // argument index
    int element = -1;  // index in a list argument, else -1
    bool defined = true;
    DType dtype = kFloat32;
    Device device;
    DimVector sizes, strides;
    // The dims that address memory, outermost first, where the strides lay
    // them out densely up to a step (row-major or another order: a
    // transpose; every other element); empty otherwise.
    DimVector dense_order;
    int64_t storage_offset = 0;
    bool dynamic_offset = false;  // the offset is not guarded (Note [Dynamic storage offsets])
    uint64_t dynamic = 0;         // bit d: dim d is dynamic
    uint8_t align_log2 = 0;
    int alias_of = -1;  // index of the first earlier tensor guard sharing the storage
    // With alias_of and a dynamic offset: this offset minus alias_of's, guarded.
    int64_t distance = 0;
  };
  struct ScalarGuard {
    int input = 0;
    IValue value;
    bool dynamic = false;
  };
  struct ListGuard {
    int input = 0;
    size_t length = 0;
  };
  struct ModeGuard {
    uint64_t included = 0, excluded = 0, default_keys = 0;
    std::optional<DType> autocast;
    bool tf32 = false;
  };

  // The tensors of `args` in guard order (list elements flattened); false
  // when the argument kinds or list lengths differ.
  bool gather(const std::vector<IValue>& args, std::vector<const Tensor*>& out) const;
  bool tensor_holds(const TensorGuard& g, const Tensor& t) const;
  // Whether `t`'s data is off the alignment class its kernels were picked for.
  static bool misaligned(const TensorGuard& g, const Tensor& t);

  std::vector<TensorGuard> tensors_;
  std::vector<ScalarGuard> scalars_;
  std::vector<ListGuard> lists_;
  std::vector<IValue::Tag> kinds_;  // per argument
  ModeGuard mode_;
  std::vector<Captured> captured_;
  std::vector<CapturedObject> objects_;
  std::vector<std::pair<size_t, Captured>> required_;  // require_storage
  std::vector<const StorageImpl*> captured_sorted_;    // for is_captured
  bool captured_arguments_fail_ = true;                // allow_captured_arguments
  DynamicDims dynamic_;
};

// The modes a guard set records, as one line ("autocast off, lazy").
std::string describe_modes();

}  // namespace kiln::guards
