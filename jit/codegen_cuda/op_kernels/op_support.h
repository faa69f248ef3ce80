#pragma once

// What every generated op kernel (jit/codegen_cuda/op_kernels/) shares: the device
// prelude and per-dtype load/store spellings for sources, the argument list
// and launch on the current stream, meta twins (so shape, dtype and error
// rules come from the op's Meta kernel), and dense copies of inputs.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "jit/codegen_cuda/device_prelude.h"
#include "kiln/tensor.h"
#include "runtime/core/deferred_checks.h"

namespace kiln::jit::cuda {

// Note [CUDA op kernels]
// Each op kernel is a CUDA C++ source generated from a small spec (dtypes,
// op, compile-time choices such as block size), named by everything it
// depends on, compiled and loaded through load_kernel (Note [Kernel loader]).
// Kernels take plain parameters: pointers, i64 sizes, float/double scalars,
// and KilnDims (eight i64 by value) for sizes and strides. Most kernels read
// dense inputs: dense() first gathers a strided or differently typed input
// with one generated copy kernel (the copy engine path cannot convert dtypes
// on the device). Sources include no toolkit header.

constexpr int kMaxKernelDims = 8;
struct KilnDims {
  int64_t v[kMaxKernelDims] = {};
};

// The device code every op source starts with: i64, 16-bit conversions
// (inline PTX), NaN-propagating kiln_max/kiln_min, KilnDims, warp helpers.
const std::string& op_prelude();
// The accumulator spelling for a dtype's arithmetic: "double" for float64,
// "float" for other floats, "i64" for integers and bool.
const char* acc_type(DType t);
// `elem` (an lvalue of mem_type(t)) as a value of acc_type(t).
std::string load_expr(DType t, const std::string& elem);
// `value` (any arithmetic type) converted to mem_type(t).
std::string store_expr(DType t, const std::string& value);
// A short tag for names: "f32", "bf16", "i64", ...
const char* dtype_tag(DType t);

// A kernel's parameter list; addresses stay valid while the object lives.
class KernelArgs {
 public:
  KernelArgs& ptr(const void* p);
  KernelArgs& ptr(const Tensor& t);  // data_ptr, or null for an undefined tensor
  KernelArgs& i64(int64_t v);
  KernelArgs& i32(int32_t v);
  KernelArgs& f32(float v);
  KernelArgs& f64(double v);
  KernelArgs& dims(const KilnDims& d);
  void** data() { return params_.data(); }
  const size_t* sizes() const { return sizes_.data(); }  // each parameter's bytes
  int count() const { return static_cast<int>(params_.size()); }

 private:
  void* slot(const void* bytes, size_t n);
  std::deque<KilnDims> store_;  // each parameter's bytes (deque: stable addresses)
  std::vector<void*> params_;
  std::vector<size_t> sizes_;
};

// Launches `kernel` on the current stream of `device` and counts it.
void launch(cudaKernel_t kernel, Device device, dim3 grid, dim3 block, size_t shared_bytes,
            KernelArgs& args);
// Note [Device error flags]
// A kernel that finds an error in device data (an index out of range, an
// integer zero divisor, a cache position past the end) cannot raise. It sets
// two int64 words with kiln_flag_error: the offending value, then the flag.
// Run directly, the op reads them after the kernel (check(), which waits for
// the stream), raising `what` with "{}" replaced by the value, so no op
// returns garbage. The words are a slot of mapped host memory, zero when
// handed out (Note [Direct error slots] in op_support.cpp). While a graph is
// captured they are the capture's error slot (Note [Errors of replayed
// kernels] in runtime/cuda/launch_record.h): nothing is read back, and a
// replay that meets the error raises at the next read of its results. With
// no slot to be had the pointer is null, and the kernel only skips the bad
// element (memory stays safe; the error goes unreported).
class DeviceErrorFlag {
 public:
  DeviceErrorFlag(Device device, std::string what);
  ~DeviceErrorFlag();
  DeviceErrorFlag(const DeviceErrorFlag&) = delete;
  DeviceErrorFlag& operator=(const DeviceErrorFlag&) = delete;
  int64_t* ptr() const { return ptr_; }
  // Raises where a kernel set the flag, after waiting for the stream; inside
  // run_plan the wait and the error come after the plan's last step (Note
  // [Device checks at the end of a run]); nothing while captured.
  void check() const;

 private:
  mutable std::unique_ptr<kiln::detail::PendingCheck> direct_;  // the direct slot, until checked
  int64_t* ptr_ = nullptr;
};

// Raises `what` ("{}": the value) where an element of `values` (integers on
// a CUDA device) lies outside [lo, hi], through a DeviceErrorFlag: for ops
// whose kernels cannot check a value themselves (the unfused attention reads
// its cache position only through a mask).
void check_values_in_range(const Tensor& values, int64_t lo, int64_t hi, std::string what);

// Blocks for `n` work items at `per_block` each, capped by the grid limit.
unsigned grid_for(int64_t n, int64_t per_block);

// A meta tensor with `t`'s geometry (undefined stays undefined).
Tensor meta_of(const Tensor& t);
std::optional<Tensor> meta_of(const std::optional<Tensor>& t);
std::vector<Tensor> meta_of(TensorList ts);
// Throws "[op] expected 'name' on cuda:0 like the input, got cpu".
void check_device(const Tensor& t, Device device, const char* op, const char* name);

// `t` as a contiguous tensor of `dtype` on its device: `t` itself when it is
// already that, else a generated gather/convert copy.
Tensor dense(const Tensor& t, DType dtype);
inline Tensor dense(const Tensor& t) {
  return dense(t, t.dtype());
}
// Writes `src` (same shape, any dtype and layout, same device) into `dst`
// (any layout). The CUDA path for out=, in-place results and dtype casts.
void copy_into_cuda(const Tensor& dst, const Tensor& src);

// Sources of the support kernels for the NVRTC source test.
std::vector<std::pair<std::string, std::string>> support_source_samples();

}  // namespace kiln::jit::cuda

namespace kiln::jit::cuda {

// `value` (an acc_type(t) expression) rounded as if stored in dtype t and
// loaded back (16-bit floats round; other dtypes pass through).
std::string round_expr(DType t, const std::string& value);
// Block-wide reductions for sources: "kiln_block_sum<T, B>(v, scratch)" etc.
// are in op_prelude(); B is the block size, scratch a __shared__ T[32].

}  // namespace kiln::jit::cuda
