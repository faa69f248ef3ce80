#pragma once

// Note [TensorIter]
// Elementwise kernels describe their operands to a TensorIter; build() does
// what every such kernel needs, in PyTorch's order and by its rules:
//   - overlap checks: a given output may not have elements sharing memory nor
//     partly overlap an input;
//   - broadcasting; type promotion (0-dim tensors and wrapped numbers ranking
//     below dimensioned tensors) and casting of inputs to the compute dtype,
//     the copies keeping a dense input's layout;
//   - the output: allocated laid out like the inputs, or a given one checked
//     (dtype per OutCast; resized, then restrided like an allocated one, when
//     its shape differs);
//   - a reordering of dims so the innermost loop runs over the smallest
//     strides, with mergeable dims coalesced.
// The common eager call (inputs of one dtype and shape, row-major, outputs
// absent or alike) skips all of that: see Note [TensorIter fast build].
// The iterator refers to the tensors it is given (no copies, no refcount
// traffic): they must outlive it.
// for_each() then calls the kernel's inner loop over 1-D runs, splitting the
// range across TBB workers above a grain size. Meta operands get the same
// shapes, strides and dtypes, and no loops.

#include <cstdint>
#include <new>

#include "kiln/tensor.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::cpu {

enum class ComputeType : uint8_t {
  Common,    // the promoted dtype of the inputs
  Floating,  // the promoted dtype, integers and bool going to float32
  Given,     // set by compute_dtype()
};

// What a given out= (or in-place) tensor of another dtype than the result gets.
enum class OutCast : uint8_t {
  Safe,  // the result is converted when can_cast(result, out) allows (default)
  Same,  // no conversion: out must have the result's dtype
  Any,   // any conversion, as copy_ does
};

class TensorIter {
 public:
  static constexpr int kMaxOperands = 8;
  static constexpr int64_t kGrain = 32768;

  explicit TensorIter(const char* op) : op_(op) {}
  ~TensorIter() {
    for (int k = 0; k < num_ops_; ++k) ops_[k].~Operand();
  }
  TensorIter(const TensorIter&) = delete;
  TensorIter& operator=(const TensorIter&) = delete;

  // The output: undefined tensors are allocated by build() (into `out`);
  // defined ones are written (their shape must be the broadcast shape, or
  // empty to be resized).
  TensorIter& output(Tensor& out) {
    if (KILN_LIKELY(num_ops_ == num_outputs_ && num_ops_ < kMaxOperands &&
                    (!out.defined() || out.device().is_cpu()))) {
      Operand* o = new (&ops_[num_ops_]) Operand();
      o->tensor = &out;
      o->target = &out;
      ++num_ops_;
      ++num_outputs_;
    } else {
      add_output_slow(out);
    }
    return *this;
  }
  // A defined output (in place, out=): written, never replaced.
  // An undefined one is the caller's Tensor() (self of an in-place op, out=).
  TensorIter& output_into(const Tensor& out) {
    KILN_CHECK(out.defined(), "[", op_,
               "] expected a defined tensor to write into, got an undefined one (Tensor())");
    return output(const_cast<Tensor&>(out));
  }
  TensorIter& input(const Tensor& t) {
    // Inline for the common CPU tensor; checks and meta operands out of line.
    if (KILN_LIKELY(num_ops_ < kMaxOperands && t.defined() && t.device().is_cpu())) {
      new (&ops_[num_ops_++]) Operand();
      ops_[num_ops_ - 1].tensor = &t;
    } else {
      add_input_slow(t);
    }
    return *this;
  }
  // An input that takes no part in type promotion and is never cast (where's
  // condition): the kernel reads it in its own dtype.
  TensorIter& input_keep_dtype(const Tensor& t);
  TensorIter& compute(ComputeType c) {
    compute_ = c;
    return *this;
  }
  TensorIter& compute_dtype(DType t) {
    compute_ = ComputeType::Given;
    given_ = t;
    return *this;
  }
  // dtype of an allocated output (default: the compute dtype), e.g. bool for comparisons.
  TensorIter& output_dtype(DType t) {
    out_dtype_ = t;
    has_out_dtype_ = true;
    return *this;
  }
  // Inputs keep their own dtypes (the kernel converts as it reads).
  TensorIter& keep_input_dtypes() {
    cast_inputs_ = false;
    return *this;
  }
  TensorIter& out_cast(OutCast c) {
    out_cast_ = c;
    return *this;
  }
  // Admits outputs whose elements share memory (stride-0 dims), which build()
  // otherwise refuses when there are inputs, as PyTorch does; for kernels that
  // accumulate through a broadcast view of their output.
  TensorIter& allow_output_overlap() {
    allow_output_overlap_ = true;
    return *this;
  }
  // The output is written in place into an input, so it may not broadcast.
  TensorIter& in_place() {
    in_place_ = true;
    return *this;
  }
  // Also broadcast to (and check against) this shape (fill, copy_).
  TensorIter& shape(IntArrayRef s) {
    declared_shape_ = s;
    has_declared_shape_ = true;
    return *this;
  }
  TensorIter& build();

  // True when an operand is a meta tensor: build() then computes the output's
  // geometry and dtype only (Meta kernels share the CPU kernels' rules this way).
  bool is_meta() const { return meta_; }
  DType dtype() const { return compute_dtype_; }
  DType input_dtype(int i) const { return ops_[num_outputs_ + i].tensor->dtype(); }
  // Input i as the loops read it (after casting; meta tensors stay meta).
  const Tensor& input_tensor(int i) const { return *ops_[num_outputs_ + i].tensor; }
  DType output_dtype() const { return ops_[0].tensor->dtype(); }
  int64_t numel() const { return numel_; }
  IntArrayRef shape() const { return shape_; }
  int ntensors() const { return num_ops_; }

  // Calls loop(data, strides, n) over 1-D runs: data[k] points at operand k's
  // element (output first), strides[k] is its byte stride along the run.
  // Does nothing for meta operands, so kernels may run their dtype and
  // argument checks for Meta too and call the loops unconditionally.
  template <class F>
  void for_each(F&& loop, int64_t grain = kGrain) {
    auto thunk = [](void* ctx, char** data, const int64_t* strides, int64_t n) {
      (*static_cast<std::remove_reference_t<F>*>(ctx))(data, strides, n);
    };
    run(thunk, &loop, grain);
  }
  // Copies a temporary output back into the caller's out= tensor when their
  // dtypes differed. Kernels call it after the loops.
  void finish();

 private:
  using Thunk = void (*)(void* ctx, char** data, const int64_t* strides, int64_t n);
  void run(Thunk thunk, void* ctx, int64_t grain);
  void run_range(Thunk thunk, void* ctx, int64_t begin, int64_t end) const;
  void check_overlaps() const;
  void compute_shape();
  void allocate_or_check_output(DType result);
  void reorder_and_coalesce();
  bool dense_layout();
  bool fast_build();
  void add_output_slow(Tensor& out);
  void add_input_slow(const Tensor& t);
  void set_owned(int k, Tensor t) {
    ops_[k].owned = std::move(t);
    ops_[k].tensor = &ops_[k].owned;
  }

  struct Operand {
    const Tensor* tensor = nullptr;  // what the loops read or write: the caller's or `owned`
    Tensor owned;                    // a cast input, or an output's temporary
    Tensor* target = nullptr;        // the caller's output, for outputs
    bool needs_copy_back = false;
    bool keep_dtype = false;  // inputs: excluded from promotion and casting
    bool resized = false;     // outputs: an out= tensor build() resized
    char* data = nullptr;
    DimVector strides;  // bytes, per iteration dim (innermost first after build)
  };

  const char* op_;
  // Note in tensor_iter.cpp: meta and data tensors do not meet in one op.
  void check_one_device() const;
  // Constructed as operands are added (the first num_ops_): most ops have
  // three, and this object is built on every eager call.
  union {
    Operand ops_[kMaxOperands];
  };
  int num_ops_ = 0;
  int num_outputs_ = 0;
  ComputeType compute_ = ComputeType::Common;
  DType given_ = kFloat32;
  DType compute_dtype_ = kFloat32;
  DType out_dtype_ = kFloat32;
  bool has_out_dtype_ = false;
  bool cast_inputs_ = true;
  bool in_place_ = false;
  OutCast out_cast_ = OutCast::Safe;
  bool allow_output_overlap_ = false;
  bool has_declared_shape_ = false;
  bool meta_ = false;
  bool one_run_ = false;                    // fast_build(): one dense run, strides below
  int64_t run_strides_[kMaxOperands] = {};  // bytes, per operand, for one_run_
  DimVector declared_shape_;
  DimVector shape_;       // the broadcast shape, outermost first
  DimVector iter_sizes_;  // iteration sizes, innermost first
  int64_t numel_ = 0;
};

// Returns `t` converted to `dtype`: a new tensor, laid out like `t` (Note
// [Preserved layout]), when the dtypes differ; meta in, meta out.
Tensor cast(const Tensor& t, DType dtype);
// Throws unless `t` lives on the CPU (0-dim wrapped numbers count as CPU values).
void check_cpu(const Tensor& t, const char* op, const char* name);

}  // namespace kiln::cpu
