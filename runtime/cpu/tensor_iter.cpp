#include "runtime/cpu/tensor_iter.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>

#include "runtime/core/preserved_layout.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/core/type_promotion.h"
#include "runtime/cpu/copy.h"
#include "runtime/cpu/index_utils.h"

namespace kiln::cpu {

void check_cpu(const Tensor& t, const char* op, const char* name) {
  KILN_CHECK(t.device().is_cpu() || (t.dim() == 0 && t.impl()->is_wrapped_number()), "[", op,
             "] expected '", name, "' on cpu, got ", t.device());
}

// A meta operand makes the whole iteration a meta one (sizes and dtypes,
// no data): with a tensor that holds data among its operands, nothing would
// be computed into it (an out= tensor kept its old bytes). As PyTorch, meta
// and data tensors do not meet in one op, except a 0-dim tensor, which reads
// as a scalar on any device. Calls through the dispatcher are checked there
// first (Note [One device per op]); this catches kernels that build an
// iteration over tensors of their own.
void TensorIter::check_one_device() const {
  for (int i = 0; i < num_ops_; ++i) {
    const Tensor& t = *ops_[i].tensor;
    KILN_CHECK(!t.defined() || t.device().is_meta() || t.dim() == 0, "[", op_,
               "] expected all tensors on one device, got meta and ", t.device(), " (",
               i < num_outputs_ ? "an output" : "an input", " of ", t.sizes(), ")");
  }
}

Tensor cast(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = empty_like_preserve(t, dtype, t.device(), "cast");
  if (t.device().is_meta()) return out;
  copy_into(out, t);
  if (t.impl()->is_wrapped_number()) out.impl()->set_wrapped_number(true);
  return out;
}

void TensorIter::add_output_slow(Tensor& out) {
  KILN_INTERNAL_ASSERT(num_ops_ == num_outputs_ && num_ops_ < kMaxOperands,
                       "outputs must be added before inputs");
  new (&ops_[num_ops_]) Operand();
  ops_[num_ops_].tensor = &out;
  ops_[num_ops_].target = &out;
  if (out.defined() && out.device().is_meta()) meta_ = true;
  ++num_ops_;
  ++num_outputs_;
}

void TensorIter::add_input_slow(const Tensor& t) {
  KILN_INTERNAL_ASSERT(num_ops_ < kMaxOperands, "too many operands");
  check_defined(t, op_, "input");
  if (t.device().is_meta()) {
    meta_ = true;
  } else {
    check_cpu(t, op_, "input");
  }
  new (&ops_[num_ops_]) Operand();
  ops_[num_ops_++].tensor = &t;
}

TensorIter& TensorIter::input_keep_dtype(const Tensor& t) {
  input(t);
  ops_[num_ops_ - 1].keep_dtype = true;
  return *this;
}

void TensorIter::compute_shape() {
  bool first = true;
  if (has_declared_shape_) {
    shape_ = declared_shape_;
    first = false;
  }
  for (int i = num_outputs_; i < num_ops_; ++i) {
    IntArrayRef s = ops_[i].tensor->sizes();
    if (first) {
      shape_ = s;
      first = false;
    } else if (!(shape_.ref() == s)) {
      shape_ = broadcast_shapes(shape_, s, op_);
    }
  }
  if (in_place_) {
    // An in-place output fixes the shape: inputs may broadcast to it, not it to them.
    IntArrayRef self = ops_[0].tensor->sizes();
    KILN_CHECK(shape_.ref() == self || broadcast_shapes(shape_, self, op_).ref() == self, "[", op_,
               "] output with shape ", self, " doesn't match the broadcast shape ", shape_.ref());
    shape_ = self;
  }
  if (has_declared_shape_) {
    KILN_CHECK(shape_.ref() == declared_shape_.ref(), "[", op_, "] expected a source of shape ",
               declared_shape_.ref(), " or one that broadcasts to it, got ", shape_.ref());
  }
}

void TensorIter::allocate_or_check_output(DType result) {
  for (int i = 0; i < num_outputs_; ++i) {
    Operand& o = ops_[i];
    if (!o.tensor->defined()) {
      continue;  // allocated after the dims are ordered
    }
    const Tensor& out = *o.tensor;
    if (!meta_) check_cpu(out, op_, "out");
    if (!(out.sizes() == shape_.ref())) {
      // As PyTorch: an output that is also an input (in place, or an out=
      // argument passed as an input too) is never resized, which would read
      // the input from the resized, uninitialized memory.
      bool read_write = in_place_;
      for (int k = num_outputs_; k < num_ops_ && !read_write; ++k) {
        read_write = ops_[k].tensor->defined() && ops_[k].tensor->impl() == out.impl();
      }
      KILN_CHECK(!read_write, "[", op_, "] output with shape ", out.sizes(),
                 " doesn't match the broadcast shape ", shape_.ref());
      resize_out(out, shape_);
      o.resized = true;  // restrided like an allocated output once dims are ordered
    }
    if (out.dtype() != result) {
      KILN_CHECK(out_cast_ != OutCast::Same, "[", op_, "] expected an output of dtype ", result,
                 ", got ", out.dtype());
      KILN_CHECK(out_cast_ == OutCast::Any || can_cast(result, out.dtype()), "[", op_,
                 "] result type ", result, " can't be cast to the desired output type ",
                 out.dtype());
      o.needs_copy_back = !meta_;
      if (!meta_) set_owned(i, empty_tensor(shape_, result, Device::cpu()));
    }
  }
}

void TensorIter::check_overlaps() const {
  // As PyTorch: an output computed from inputs may not have elements that
  // share memory (a broadcast view) unless the kernel allows it (fill_, which
  // has no inputs, may), nor partly overlap an input.
  if (num_ops_ == num_outputs_) return;
  for (int i = 0; i < num_outputs_; ++i) {
    const Tensor& out = *ops_[i].tensor;
    if (!out.defined()) continue;
    if (!allow_output_overlap_) {
      IntArrayRef sz = out.sizes(), st = out.strides();
      for (size_t d = 0; d < sz.size(); ++d) {
        KILN_CHECK(sz[d] <= 1 || st[d] != 0, "[", op_,
                   "] expected an output whose elements do not share memory, got sizes ", sz,
                   " and strides ", st, "; clone() it first");
      }
    }
    for (int k = num_outputs_; k < num_ops_; ++k) {
      KILN_CHECK(!partly_overlaps(out, *ops_[k].tensor), "[", op_,
                 "] expected an output that is an input or shares no memory with it, got one "
                 "that partly overlaps input ",
                 k - num_outputs_, "; clone() it first");
    }
  }
}

TensorIter& TensorIter::build() {
  KILN_INTERNAL_ASSERT(num_outputs_ >= 1, "a TensorIter needs an output");
  if (KILN_UNLIKELY(meta_)) check_one_device();
  if (fast_build()) return *this;
  check_overlaps();
  compute_shape();
  // A broadcast of valid inputs may still not fit ([2^40, 1] + [1, 2^40]).
  numel_ = checked_numel(shape_, op_);

  // Dtypes.
  if (num_ops_ > num_outputs_ && compute_ != ComputeType::Given) {
    ResultType rt;
    for (int i = num_outputs_; i < num_ops_; ++i) {
      if (!ops_[i].keep_dtype) rt.add(*ops_[i].tensor);
    }
    DType common = rt.result(op_);
    compute_dtype_ = compute_ == ComputeType::Floating ? to_floating(common) : common;
  } else {
    compute_dtype_ = compute_ == ComputeType::Given ? given_ : ops_[0].tensor->dtype();
  }
  if (cast_inputs_) {  // meta inputs too, so the layouts below match the CPU's
    for (int i = num_outputs_; i < num_ops_; ++i) {
      const Tensor& t = *ops_[i].tensor;
      if (!ops_[i].keep_dtype && t.dtype() != compute_dtype_) set_owned(i, cast(t, compute_dtype_));
    }
  }
  DType result = has_out_dtype_ ? out_dtype_ : compute_dtype_;
  allocate_or_check_output(result);
  if (!dense_layout()) reorder_and_coalesce();
  return *this;
}

// Note [TensorIter fast build]
// Most eager calls give inputs of one dtype and one shape, contiguous, and
// outputs that are absent or contiguous with that shape and the result's
// dtype (no wrapped numbers: they promote by kind). For them every step of the general build is
// known in advance: the broadcast shape is the inputs' shape, no input is cast, no output resized
// or converted, the elements of a contiguous non-empty output cannot share
// memory, and the layout is one dense run. What is left to check is overlap
// between an output and an input of another view of the same storage, which
// sends the call to the general path (as does anything else: empty tensors,
// declared shapes, mixed dtypes or shapes), so both paths raise the same
// errors. This path is the per-op overhead budget (perf/overhead.cpp).
bool TensorIter::fast_build() {
  if (has_declared_shape_ || num_ops_ == num_outputs_) return false;
  const Operand& in0 = ops_[num_outputs_];
  const TensorImpl* first = in0.tensor->impl();
  if (in0.keep_dtype || first->numel() == 0 || !first->is_contiguous() ||
      first->is_wrapped_number()) {
    return false;
  }
  const DType dtype = first->dtype();
  const IntArrayRef shape = first->sizes();
  for (int k = num_outputs_ + 1; k < num_ops_; ++k) {
    const TensorImpl* t = ops_[k].tensor->impl();
    if (ops_[k].keep_dtype || t->dtype() != dtype || !t->is_contiguous() ||
        t->is_wrapped_number() || !(t->sizes() == shape)) {
      return false;
    }
  }
  DType compute = dtype;
  if (compute_ == ComputeType::Floating) compute = to_floating(dtype);
  if (compute_ == ComputeType::Given) compute = given_;
  if (cast_inputs_ && compute != dtype) return false;
  const DType result = has_out_dtype_ ? out_dtype_ : compute;
  for (int k = 0; k < num_outputs_; ++k) {
    const Tensor& out = *ops_[k].target;
    if (!out.defined()) continue;
    const TensorImpl* o = out.impl();
    if (!o->is_contiguous() || o->dtype() != result || !(o->sizes() == shape)) return false;
    if (!meta_ && !o->device().is_cpu()) return false;
    for (int i = num_outputs_; i < num_ops_; ++i) {
      const TensorImpl* t = ops_[i].tensor->impl();
      if (t != o && o->has_storage() && t->storage().get() == o->storage().get()) return false;
    }
  }
  compute_dtype_ = compute;
  shape_.assign(shape.data(), shape.size());
  numel_ = first->numel();
  const Device device = meta_ ? Device::meta() : Device::cpu();
  for (int k = 0; k < num_outputs_; ++k) {
    if (!ops_[k].target->defined()) *ops_[k].target = empty_tensor(shape, result, device);
  }
  one_run_ = true;
  for (int k = 0; k < num_ops_; ++k) {
    Operand& o = ops_[k];
    run_strides_[k] = static_cast<int64_t>(itemsize(o.tensor->dtype()));
    o.data = meta_ ? nullptr : static_cast<char*>(o.tensor->data_ptr());
  }
  return true;
}

// The common eager case: every operand is contiguous with exactly the
// iteration shape. The general ordering and merging would give one dense run
// of numel elements; lay that out directly (the per-op overhead budget lives here).
bool TensorIter::dense_layout() {
  for (int k = 0; k < num_ops_; ++k) {
    const Operand& o = ops_[k];
    if (o.resized) return false;
    if (!o.tensor->defined()) {
      if (k >= num_outputs_) return false;
      continue;
    }
    if (!o.tensor->is_contiguous() || !(o.tensor->sizes() == shape_.ref())) return false;
  }
  for (int k = 0; k < num_outputs_; ++k) {
    Operand& o = ops_[k];
    if (o.tensor->defined()) continue;
    DType t = has_out_dtype_ ? out_dtype_ : compute_dtype_;
    *o.target = empty_tensor(shape_, t, meta_ ? Device::meta() : Device::cpu());
  }
  iter_sizes_.assign(1, numel_ > 0 ? numel_ : 0);
  if (shape_.empty()) iter_sizes_[0] = 1;
  for (int k = 0; k < num_ops_; ++k) {
    Operand& o = ops_[k];
    o.strides.assign(1, static_cast<int64_t>(itemsize(o.tensor->dtype())));
    o.data = numel_ && !meta_ ? static_cast<char*>(o.tensor->data_ptr()) : nullptr;
  }
  return true;
}

void TensorIter::reorder_and_coalesce() {
  const int64_t nd = static_cast<int64_t>(shape_.size());
  // Element strides aligned to the broadcast shape; 0 where an operand broadcasts.
  for (int k = 0; k < num_ops_; ++k) {
    Operand& o = ops_[k];
    o.strides.assign(nd, 0);
    if (!o.tensor->defined()) continue;
    IntArrayRef s = o.tensor->sizes(), st = o.tensor->strides();
    int64_t off = nd - static_cast<int64_t>(s.size());
    for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
      o.strides[off + d] = (s[d] == 1 && shape_[off + d] != 1) ? 0 : st[d];
    }
  }
  // perm[i]: the i-th dim counting from the innermost. Insertion sort by stride,
  // asking operands in order (outputs first) until one has an opinion.
  const DimVector perm = dims_inner_first(nd, [&](int64_t d0, int64_t d1) {
    for (int k = 0; k < num_ops_; ++k) {
      if (!ops_[k].tensor->defined() || ops_[k].resized) continue;  // outputs still to lay out
      int64_t s0 = ops_[k].strides[d0], s1 = ops_[k].strides[d1];
      if (s0 == 0 || s1 == 0) continue;
      if (s0 < s1) return -1;
      if (s0 > s1) return 1;
      if (shape_[d0] > shape_[d1]) return 1;
    }
    return 0;
  });
  // Allocate missing outputs dense in that order. Resized out= tensors get the
  // same strides, as PyTorch restrides an output it resized.
  DimVector dense(nd);
  int64_t step = 1;
  for (int64_t i = 0; i < nd; ++i) {
    dense[perm[i]] = step;
    step *= std::max<int64_t>(shape_[perm[i]], 1);
  }
  for (int k = 0; k < num_outputs_; ++k) {
    Operand& o = ops_[k];
    if (o.resized) {
      TensorImpl* target = o.target->impl();
      target->set_geometry(shape_, dense, target->storage_offset());
      for (int64_t d = 0; d < nd; ++d) o.strides[d] = o.tensor->strides()[d];
    }
    if (o.tensor->defined()) continue;
    DType t = has_out_dtype_ ? out_dtype_ : compute_dtype_;
    *o.target = empty_strided_tensor(shape_, dense, t, meta_ ? Device::meta() : Device::cpu());
    for (int64_t d = 0; d < nd; ++d) o.strides[d] = dense[d];
  }
  // Permute to innermost-first and convert to bytes.
  iter_sizes_.resize(nd);
  for (int64_t i = 0; i < nd; ++i) iter_sizes_[i] = shape_[perm[i]];
  for (int k = 0; k < num_ops_; ++k) {
    Operand& o = ops_[k];
    DimVector bytes(nd);
    int64_t item = static_cast<int64_t>(itemsize(o.tensor->dtype()));
    // A dim of one element never steps (its stride may be anything a view
    // made, up to int64's limit: slice with a huge step), and nothing steps
    // when there are no elements; other strides must fit in bytes.
    for (int64_t i = 0; i < nd; ++i) {
      const int64_t st = o.strides[perm[i]];
      if (iter_sizes_[i] == 1 || numel_ == 0) {
        bytes[i] = 0;
      } else if (__builtin_mul_overflow(st, item, &bytes[i])) {
        KILN_FAIL("[", op_, "] expected strides whose byte steps fit in int64, got stride ", st,
                  " of ", itemsize(o.tensor->dtype()), "-byte elements at dim ", perm[i]);
      }
    }
    o.strides = bytes;
    o.data = numel_ && !meta_ ? static_cast<char*>(o.tensor->data_ptr()) : nullptr;
  }
  // Coalesce neighbours that step as one.
  if (nd == 0) {
    iter_sizes_.assign(1, 1);
    for (int k = 0; k < num_ops_; ++k) ops_[k].strides.assign(1, 0);
    return;
  }
  int64_t prev = 0;
  for (int64_t d = 1; d < nd; ++d) {
    bool can = iter_sizes_[prev] == 1 || iter_sizes_[d] == 1;
    if (!can) {
      can = true;
      for (int k = 0; k < num_ops_ && can; ++k) {
        can = ops_[k].strides[prev] * iter_sizes_[prev] == ops_[k].strides[d];
      }
    }
    if (can) {
      if (iter_sizes_[prev] == 1) {
        for (int k = 0; k < num_ops_; ++k) ops_[k].strides[prev] = ops_[k].strides[d];
      }
      iter_sizes_[prev] *= iter_sizes_[d];
    } else {
      ++prev;
      iter_sizes_[prev] = iter_sizes_[d];
      for (int k = 0; k < num_ops_; ++k) ops_[k].strides[prev] = ops_[k].strides[d];
    }
  }
  iter_sizes_.resize(prev + 1);
  for (int k = 0; k < num_ops_; ++k) ops_[k].strides.resize(prev + 1);
}

void TensorIter::run_range(Thunk thunk, void* ctx, int64_t begin, int64_t end) const {
  const int nd = static_cast<int>(iter_sizes_.size());
  int64_t counter[64];
  char* ptrs[kMaxOperands];
  int64_t inner[kMaxOperands];
  int64_t rem = begin;
  for (int d = 0; d < nd; ++d) {
    counter[d] = rem % iter_sizes_[d];
    rem /= iter_sizes_[d];
  }
  for (int k = 0; k < num_ops_; ++k) {
    char* p = ops_[k].data;
    for (int d = 0; d < nd; ++d) p += counter[d] * ops_[k].strides[d];
    ptrs[k] = p;
    inner[k] = ops_[k].strides[0];
  }
  while (begin < end) {
    int64_t n = std::min(iter_sizes_[0] - counter[0], end - begin);
    char* run_ptrs[kMaxOperands];
    for (int k = 0; k < num_ops_; ++k) run_ptrs[k] = ptrs[k];
    thunk(ctx, run_ptrs, inner, n);
    begin += n;
    if (begin >= end) break;
    counter[0] += n;
    for (int k = 0; k < num_ops_; ++k) ptrs[k] += n * ops_[k].strides[0];
    for (int d = 0; d + 1 < nd && counter[d] == iter_sizes_[d]; ++d) {
      for (int k = 0; k < num_ops_; ++k) {
        ptrs[k] += ops_[k].strides[d + 1] - iter_sizes_[d] * ops_[k].strides[d];
      }
      counter[d] = 0;
      ++counter[d + 1];
    }
  }
}

void TensorIter::run(Thunk thunk, void* ctx, int64_t grain) {
  if (meta_ || numel_ == 0) return;  // meta tensors have no data to loop over
  if (one_run_) {
    char* ptrs[kMaxOperands];
    for (int k = 0; k < num_ops_; ++k) ptrs[k] = ops_[k].data;
    if (numel_ < 2 * grain) {
      thunk(ctx, ptrs, run_strides_, numel_);
      return;
    }
    // Large: the general loop below splits the run across workers.
    iter_sizes_.assign(1, numel_);
    for (int k = 0; k < num_ops_; ++k) ops_[k].strides.assign(1, run_strides_[k]);
  }
  KILN_CHECK(iter_sizes_.size() <= 64, "[", op_, "] expected at most 64 dims, got ",
             iter_sizes_.size());
  if (iter_sizes_.size() == 1 && numel_ < 2 * grain) {
    // One run: no counters to step.
    char* ptrs[kMaxOperands];
    int64_t strides[kMaxOperands];
    for (int k = 0; k < num_ops_; ++k) {
      ptrs[k] = ops_[k].data;
      strides[k] = ops_[k].strides[0];
    }
    thunk(ctx, ptrs, strides, numel_);
    return;
  }
  if (numel_ < 2 * grain) {
    run_range(thunk, ctx, 0, numel_);
    return;
  }
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, numel_, grain),
      [&](const tbb::blocked_range<int64_t>& r) { run_range(thunk, ctx, r.begin(), r.end()); });
}

void TensorIter::finish() {
  if (meta_) return;
  for (int k = 0; k < num_outputs_; ++k) {
    Operand& o = ops_[k];
    if (o.needs_copy_back) {
      copy_into(*o.target, *o.tensor);
      o.needs_copy_back = false;
    }
    if (o.target && o.target->defined()) o.target->impl()->bump_version();
  }
}

}  // namespace kiln::cpu
