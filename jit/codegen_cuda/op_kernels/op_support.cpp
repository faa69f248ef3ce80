#include "jit/codegen_cuda/op_kernels/op_support.h"

#include <cstring>
#include <mutex>
#include <vector>

#include "jit/codegen_cuda/device_prelude.h"
#include "jit/codegen_cuda/kernel_loader.h"
#include "jit/ir/iteration.h"
#include "kiln/error.h"
#include "runtime/core/composite_errors.h"
#include "runtime/core/deferred_checks.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/launch_record.h"
#include "runtime/cuda/mapped_slabs.h"

// GCC 12 reports false stringop-overflow warnings for std::string
// concatenation inlined at -O3; this file builds strings.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

const char kPreludeRest[] =
    R"(__device__ __forceinline__ float kiln_inf(float) { return __int_as_float(0x7f800000); }
__device__ __forceinline__ double kiln_inf(double) { return __longlong_as_double(0x7ff0000000000000ll); }
__device__ __forceinline__ float kiln_nan(float) { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double kiln_nan(double) { return __longlong_as_double(0x7ff8000000000000ll); }
__device__ __forceinline__ float kiln_exp(float x) { return expf(x); }
__device__ __forceinline__ double kiln_exp(double x) { return exp(x); }
__device__ __forceinline__ float kiln_log(float x) { return logf(x); }
__device__ __forceinline__ double kiln_log(double x) { return log(x); }
__device__ __forceinline__ float kiln_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double kiln_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float kiln_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double kiln_abs(double x) { return fabs(x); }
__device__ __forceinline__ float kiln_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double kiln_pow(double x, double y) { return pow(x, y); }
struct KilnDims { i64 v[8]; };
// Offset of flat index `i` (row-major over sizes[0..nd), innermost last).
__device__ __forceinline__ i64 kiln_offset(i64 i, int nd, const KilnDims& sizes, const KilnDims& strides) {
  i64 off = 0;
  for (int d = nd - 1; d >= 0; --d) { const i64 s = sizes.v[d]; off += (i % s) * strides.v[d]; i /= s; }
  return off;
}
template <class T> __device__ __forceinline__ T kiln_shfl_xor(T v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
// Sum over a block of B threads (B a multiple of 32); every thread gets the result.
template <class T, int B> __device__ __forceinline__ T kiln_block_sum(T v, T* scratch) {
  for (int m = 16; m > 0; m >>= 1) v += kiln_shfl_xor(v, m);
  if (B == 32) return v;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (T)0;
  for (int w = 0; w < B / 32; ++w) v += scratch[w];
  return v;
}
)";

}  // namespace

const std::string& op_prelude() {
  static const std::string s = std::string(kDevicePrelude) + kPreludeRest;
  return s;
}

const char* acc_type(DType t) {
  return t == kFloat64 ? "double" : is_floating(t) ? "float" : "i64";
}

const char* dtype_tag(DType t) {
  static const char* const tags[kNumDTypes] = {"b8",  "u8",  "i8",   "i16", "i32",
                                               "i64", "f16", "bf16", "f32", "f64"};
  return tags[static_cast<int>(t)];
}

std::string load_expr(DType t, const std::string& elem) {
  switch (t) {
    case kFloat16:
      return "kiln_h2f(" + elem + ")";
    case kBFloat16:
      return "kiln_bf2f(" + elem + ")";
    case kBool:
      return "(i64)(" + elem + " != 0)";
    case kFloat32:
    case kFloat64:
      return "(" + elem + ")";
    default:
      return "(i64)(" + elem + ")";
  }
}

std::string round_expr(DType t, const std::string& value) {
  switch (t) {
    case kFloat16:
      return "kiln_h2f(kiln_f2h(" + value + "))";
    case kBFloat16:
      return "kiln_bf2f(kiln_f2bf(" + value + "))";
    default:
      return "(" + value + ")";
  }
}

std::string store_expr(DType t, const std::string& value) {
  switch (t) {
    case kFloat16:
      return "kiln_f2h((float)(" + value + "))";
    case kBFloat16:
      return "kiln_f2bf((float)(" + value + "))";
    case kBool:
      return "(unsigned char)((" + value + ") != 0)";
    default:
      return "(" + std::string(mem_type(t)) + ")(" + value + ")";
  }
}

void* KernelArgs::slot(const void* bytes, size_t n) {
  KILN_INTERNAL_ASSERT(n <= sizeof(KilnDims), "kernel parameter too large");
  store_.emplace_back();
  std::memcpy(&store_.back(), bytes, n);
  params_.push_back(&store_.back());
  sizes_.push_back(n);
  return &store_.back();
}
KernelArgs& KernelArgs::ptr(const void* p) {
  slot(&p, sizeof p);
  return *this;
}
KernelArgs& KernelArgs::ptr(const Tensor& t) {
  return ptr(t.defined() && t.numel() > 0 ? t.data_ptr() : nullptr);
}
KernelArgs& KernelArgs::i64(int64_t v) {
  slot(&v, sizeof v);
  return *this;
}
KernelArgs& KernelArgs::i32(int32_t v) {
  slot(&v, sizeof v);
  return *this;
}
KernelArgs& KernelArgs::f32(float v) {
  slot(&v, sizeof v);
  return *this;
}
KernelArgs& KernelArgs::f64(double v) {
  slot(&v, sizeof v);
  return *this;
}
KernelArgs& KernelArgs::dims(const KilnDims& d) {
  slot(&d, sizeof d);
  return *this;
}

void launch(cudaKernel_t kernel, Device device, dim3 grid, dim3 block, size_t shared_bytes,
            KernelArgs& args) {
  const int index = device.index();
  kiln::cuda::DeviceGuard guard(index);
  cudaStream_t stream = kiln::cuda::raw(kiln::cuda::Stream::current(device));
  // Dynamic shared memory past 48 KiB would need an opt-in per kernel; rows cached in
  // shared memory are capped below that.
  KILN_INTERNAL_ASSERT(shared_bytes <= 48 * 1024, "kernel asks for too much shared memory");
  KILN_CUDA_CHECK_DEVICE(launch_generated(reinterpret_cast<const void*>(kernel), grid, block,
                                          shared_bytes, args.data(), stream, index),
                         index);
  kiln::cuda::note_launch(stream, reinterpret_cast<const void*>(kernel), grid, block, shared_bytes,
                          args.data(), args.sizes(), args.count());
  record_launch();
}

// Note [Direct error slots]
// A flag in device memory cost a direct launch two more calls into the
// driver besides the wait: a memset before the kernel and a copy back after
// it (each about as much host time as the launch itself, on an H200's host
// 2-3 us). Direct flags are now two words of pinned host memory mapped into
// the device's address space, as a replay's error slots are: the kernel
// writes them only when it finds an error, check() waits for the stream and
// reads them on the host, and a slot goes back to the pool zeroed. The
// slots come from the slabs graphs take theirs from (runtime/cuda/
// mapped_slabs.h), split into two-word slots and never given back. A
// flag destroyed unchecked (its op raised between the launch and the check)
// waits for its stream before its slot is reused, since the kernel may still
// write it; where that wait fails the slot is not reused.
namespace {

struct DirectSlot {
  volatile int64_t* host = nullptr;
  int64_t* device = nullptr;
};

struct DirectSlotPool {
  std::mutex mu;
  std::vector<DirectSlot> free;
};

DirectSlotPool& direct_slots() {
  static auto* p = new DirectSlotPool();  // leaked: flags may be destroyed during exit
  return *p;
}

DirectSlot take_direct_slot(int device) {
  DirectSlotPool& p = direct_slots();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.free.empty()) {
    int64_t* host = kiln::cuda::take_mapped_slab(device);
    int64_t* dev = nullptr;
    try {
      dev = kiln::cuda::mapped_device_address(host, device);
    } catch (...) {
      kiln::cuda::give_mapped_slab(host);
      throw;
    }
    for (size_t i = 0; i < kiln::cuda::kMappedSlabWords; i += 2)
      p.free.push_back({host + i, dev + i});
  }
  const DirectSlot s = p.free.back();
  p.free.pop_back();
  return s;
}

void give_direct_slot(volatile int64_t* host, int64_t* device) {
  host[1] = 0;
  host[0] = 0;
  DirectSlotPool& p = direct_slots();
  std::lock_guard<std::mutex> lock(p.mu);
  p.free.push_back({host, device});
}

// A direct flag's slot, and the check that waits for its kernel and reads
// it: run by DeviceErrorFlag::check, or at the end of the plan's run (Note
// [Device checks at the end of a run] in runtime/core/deferred_checks.h).
class SlotCheck final : public kiln::detail::PendingCheck {
 public:
  SlotCheck(Device device, std::string what) : device_(device), what_(std::move(what)) {
    const DirectSlot s = take_direct_slot(device.index());
    host_ = s.host;
    words_ = s.device;
    stream_ = kiln::cuda::raw(kiln::cuda::Stream::current(device));
  }
  ~SlotCheck() override {
    if (!synced_) {  // the kernel may still write the slot: wait, or keep it out of the pool
      try {
        kiln::cuda::DeviceGuard guard(device_.index());
        if (cudaStreamSynchronize(stream_) != cudaSuccess) return;
      } catch (...) {
        return;
      }
    }
    give_direct_slot(host_, words_);
  }
  SlotCheck(const SlotCheck&) = delete;
  SlotCheck& operator=(const SlotCheck&) = delete;

  int64_t* words() const { return words_; }

  void run() override {
    // No tensor op: the fused kernels' launcher checks while the trace runs,
    // where an op would be recorded.
    const int index = device_.index();
    kiln::cuda::DeviceGuard guard(index);
    KILN_CUDA_CHECK_DEVICE(cudaStreamSynchronize(stream_), index);
    synced_ = true;
    if (host_[0] == 0) return;
    KILN_CHECK(false,
               kiln::cuda::error_text(what_, host_[1]));  // the slot is cleared when given back
  }

 private:
  Device device_;
  std::string what_;
  volatile int64_t* host_ = nullptr;
  int64_t* words_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool synced_ = false;
};

}  // namespace

DeviceErrorFlag::DeviceErrorFlag(Device device, std::string what) {
  // Named now for the op the user called: the check may raise after the run
  // (Note [Composite ops name themselves]).
  what = renamed_by_open_scopes(std::move(what));
  if (kiln::cuda::capturing(device)) {
    ptr_ = kiln::cuda::error_slot(device.index(), std::move(what));
    return;
  }
  auto direct = std::make_unique<SlotCheck>(device, std::move(what));
  ptr_ = direct->words();
  direct_ = std::move(direct);
}

DeviceErrorFlag::~DeviceErrorFlag() = default;

void DeviceErrorFlag::check() const {
  if (!direct_) return;
  if (kiln::detail::DeferredChecks* later = kiln::detail::DeferredChecks::current();
      later && later->has_room()) {
    later->add(std::move(direct_));
    return;
  }
  const std::unique_ptr<kiln::detail::PendingCheck> now = std::move(direct_);
  now->run();
}

namespace {

const char kRangeCheckName[] = "kiln_check_range";

std::string range_check_source() {
  return op_prelude() + "extern \"C\" __global__ void __launch_bounds__(256) " + kRangeCheckName +
         "(const i64* __restrict__ v, i64 n, i64 lo, i64 hi, i64* err) {\n"
         "  kiln_grid_enter();\n"
         "  for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < n; i += (i64)gridDim.x * 256) {\n"
         "    const i64 x = v[i];\n"
         "    if ((x < lo || x > hi) && err) kiln_flag_error(err, x);\n"
         "  }\n}\n";
}

}  // namespace

void check_values_in_range(const Tensor& values, int64_t lo, int64_t hi, std::string what) {
  KILN_INTERNAL_ASSERT(values.is_cuda(), "check_values_in_range on ", values.device().str());
  if (values.numel() == 0) return;
  const Tensor v = dense(values, kInt64);
  const DeviceErrorFlag flag(v.device(), std::move(what));
  cudaKernel_t k = load_kernel(
      kRangeCheckName, [] { return range_check_source(); }, v.device().index());
  KernelArgs a;
  a.ptr(v).i64(v.numel()).i64(lo).i64(hi).ptr(flag.ptr());
  launch(k, v.device(), grid_for(v.numel(), 256), 256, 0, a);
  flag.check();
}

unsigned grid_for(int64_t n, int64_t per_block) {
  const int64_t blocks = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 30));
}

Tensor meta_of(const Tensor& t) {
  return meta_twin(t);  // Note [Meta twins]
}
std::optional<Tensor> meta_of(const std::optional<Tensor>& t) {
  if (!t) return std::nullopt;
  return meta_of(*t);
}
std::vector<Tensor> meta_of(TensorList ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(meta_of(t));
  return out;
}

void check_device(const Tensor& t, Device device, const char* op, const char* name) {
  if (!t.defined()) return;
  KILN_CHECK(t.device() == device, "[", op, "] expected '", name, "' on ", device,
             " like the input, got ", t.device());
}

namespace {

// dst[i] = src[i] over a coalesced N-d space, converting dtypes.
std::string copy_name(DType dst, DType src, int nd) {
  return std::string("kiln_copy_") + dtype_tag(dst) + "_" + dtype_tag(src) + "_d" +
         std::to_string(nd);
}

std::string copy_source(DType dst, DType src, int nd) {
  const std::string acc = acc_type(src);
  std::string s = op_prelude();
  s += "extern \"C\" __global__ void __launch_bounds__(256) " + copy_name(dst, src, nd) + "(" +
       mem_type(dst) + "* __restrict__ y, const " + mem_type(src) +
       "* __restrict__ x, i64 n, KilnDims sizes, KilnDims ys, KilnDims xs) {\n"
       "  kiln_grid_enter();\n"
       "  for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < n; i += (i64)gridDim.x * 256) {\n"
       "    const " +
       acc + " v = " + load_expr(src, "x[kiln_offset(i, " + std::to_string(nd) + ", sizes, xs)]") +
       ";\n"
       "    y[kiln_offset(i, " +
       std::to_string(nd) + ", sizes, ys)] = " + store_expr(dst, "v") +
       ";\n"
       "  }\n}\n";
  return s;
}

}  // namespace

void copy_into_cuda(const Tensor& dst, const Tensor& src) {
  KILN_CHECK(dst.sizes() == src.sizes(), "[copy] expected src of shape ", dst.sizes(), ", got ",
             src.sizes());
  KILN_INTERNAL_ASSERT(dst.device() == src.device() && dst.is_cuda(), "copy_into_cuda devices");
  if (dst.numel() == 0) return;
  Iteration it = coalesce(dst.sizes(), {dst, src}, 1);
  const int nd = static_cast<int>(it.sizes.size());
  KILN_CHECK(nd <= kMaxKernelDims, "[copy] expected at most ", kMaxKernelDims,
             " dims after merging, got ", nd);
  KilnDims sizes, ys, xs;
  for (int d = 0; d < nd; ++d) {
    sizes.v[d] = it.sizes[d];
    ys.v[d] = it.strides[0][d];
    xs.v[d] = it.strides[1][d];
  }
  const DType dt = dst.dtype(), st = src.dtype();
  cudaKernel_t k = load_kernel(
      copy_name(dt, st, nd), [&] { return copy_source(dt, st, nd); }, dst.device().index());
  KernelArgs a;
  a.ptr(dst).ptr(src).i64(it.numel).dims(sizes).dims(ys).dims(xs);
  launch(k, dst.device(), grid_for(it.numel, 256 * 4), 256, 0, a);
  dst.impl()->bump_version();
}

Tensor dense(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype && t.is_contiguous()) return t;
  Tensor out = empty_tensor(t.sizes(), dtype, t.device());
  copy_into_cuda(out, t);
  return out;
}

std::vector<std::pair<std::string, std::string>> support_source_samples() {
  std::vector<std::pair<std::string, std::string>> out;
  for (DType d : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kBool, kInt8}) {
    out.emplace_back(copy_name(d, kFloat32, 3), copy_source(d, kFloat32, 3));
    out.emplace_back(copy_name(kFloat32, d, 2), copy_source(kFloat32, d, 2));
  }
  out.emplace_back(copy_name(kBFloat16, kFloat16, 8), copy_source(kBFloat16, kFloat16, 8));
  out.emplace_back(kRangeCheckName, range_check_source());
  return out;
}

}  // namespace kiln::jit::cuda
