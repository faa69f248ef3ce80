// CUDA kernels for copy_ (host <-> device, device <-> device) and fill_, made
// of memory copies and memsets only (Note [Copies without kernels]).

#include "runtime/cpu/copy.h"

#include <cstring>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/hooks.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cuda/blas_lt.h"
#include "runtime/cuda/copy_plan.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/launch_record.h"

namespace kiln::cuda {

// Note [Copies without kernels]
// Copies touching a device use the copy engines where they can:
//   - the host side does all the work it can: dtype conversion, broadcasting
//     and layout changes happen on the CPU (runtime/cpu/copy.h), into or out of
//     a pinned staging buffer laid out like the device tensor where that is
//     dense (a transposed tensor goes up as one copy), else row-major;
//   - a device tensor with gaps (a slice) is reached with cudaMemcpy2DAsync,
//     `width` contiguous bytes per row and pitches for one more dim, looping
//     over the dims left (copy_plan.h), up to kMaxCopies calls;
//   - device to device: the same 2D plan when the dtypes agree; a dtype change,
//     or a layout needing more than kMaxCopies calls, runs a generated kernel
//     (Note [Device copies through generated kernels]);
//   - fill_: cudaMemsetAsync when all bytes of the value are equal (0, any
//     1-byte dtype), else one H2D copy of a 64 KiB pattern doubled by D2D
//     copies (log2 calls); a tensor with gaps is filled through a dense
//     temporary and the 2D plan.
//
// Note [Host-device copies]
// Host to device from pageable memory stages through pinned memory and
// returns once the bytes are staged: later work on the stream sees them, and
// the caller may reuse its buffer at once. From pinned memory the DMA reads the
// caller's buffer, so copy_ waits for it unless non_blocking (the caller then
// keeps the buffer unchanged until the stream passes the copy). Device to host
// always waits, unless non_blocking into a pinned tensor laid out like the source.

namespace {

constexpr size_t kMaxCopies = 1024;
constexpr int64_t kMaxPitch = (int64_t{1} << 31) - 1;  // cudaMemcpy2D's pitch limit

char* byte_ptr(const Tensor& t) {
  return static_cast<char*>(t.data_ptr());
}

// src's strides seen through a broadcast to `sizes` (0 on broadcast dims).
DimVector broadcast_strides(const Tensor& src, IntArrayRef sizes, const char* op) {
  const int64_t nd = static_cast<int64_t>(sizes.size());
  KILN_CHECK(src.dim() <= nd, "[", op, "] expected src of shape ", sizes,
             " or one that broadcasts to it, got ", src.sizes());
  DimVector out(nd, 0);
  for (int64_t i = 0; i < src.dim(); ++i) {
    const int64_t d = nd - src.dim() + i;
    KILN_CHECK(src.size(i) == sizes[d] || src.size(i) == 1, "[", op, "] expected src of shape ",
               sizes, " or one that broadcasts to it, got ", src.sizes());
    out[d] = src.size(i) == 1 ? 0 : src.stride(i);
  }
  return out;
}

void check_no_overlap(const Tensor& self, const char* op) {
  for (int64_t i = 0; i < self.dim(); ++i) {
    KILN_CHECK(self.stride(i) != 0 || self.size(i) <= 1, "[", op,
               "] expected a destination whose elements do not share memory, got sizes ",
               self.sizes(), " and strides ", self.strides());
  }
}

// A CPU tensor of `sizes` and `strides` whose span lives in a pinned staging
// block. The block returns to the cache when the tensor dies; record_stream
// on it first when a queued copy still reads or writes it.
Tensor staging_tensor(IntArrayRef sizes, IntArrayRef strides, DType dtype) {
  const int64_t span = span_elements(sizes, strides);
  alloc::DataPtr d = pinned_allocator().allocate(static_cast<size_t>(span) * itemsize(dtype));
  return from_blob(
      d.ptr, sizes, strides, dtype, [d](void* p) { d.deleter(d.ctx, p); }, Device::cpu());
}

void run_plan(char* dst, const char* src, const std::vector<Copy2D>& plan, cudaMemcpyKind kind,
              cudaStream_t stream, int device) {
  for (const Copy2D& c : plan) {
    if (c.height == 1) {
      KILN_CUDA_CHECK_DEVICE(cudaMemcpyAsync(dst + c.dst_offset, src + c.src_offset,
                                             static_cast<size_t>(c.width), kind, stream),
                             device);
    } else {
      KILN_CUDA_CHECK_DEVICE(cudaMemcpy2DAsync(dst + c.dst_offset, static_cast<size_t>(c.dst_pitch),
                                               src + c.src_offset, static_cast<size_t>(c.src_pitch),
                                               static_cast<size_t>(c.width),
                                               static_cast<size_t>(c.height), kind, stream),
                             device);
    }
  }
}

// Whether the copy engines do a device-to-device copy well: one call, whole
// (a single run) or with rows of at least kMinEngineRow bytes. Narrow rows
// (a head dim of 64 halfs is 128 bytes) run far below bandwidth on the copy
// engines; a generated kernel moves them at full speed
// (Note [Device copies through generated kernels]).
constexpr int64_t kMinEngineRow = 2048;

bool engine_copy_fits(IntArrayRef sizes, IntArrayRef dst_strides, IntArrayRef src_strides,
                      DType dtype) {
  std::vector<Copy2D> plan;
  if (!plan_strided_copy(sizes, dst_strides, src_strides, static_cast<int64_t>(itemsize(dtype)),
                         kMaxCopies, kMaxPitch, &plan)) {
    return false;
  }
  return plan.size() <= 1 &&
         (plan.empty() || plan[0].height <= 1 || plan[0].width >= kMinEngineRow);
}

// Copies between two layouts of the same elements (same dtype, sizes of dst);
// throws when the plan needs too many calls.
void strided_copy(char* dst, IntArrayRef sizes, IntArrayRef dst_strides, const char* src,
                  IntArrayRef src_strides, DType dtype, cudaMemcpyKind kind, const Stream& stream,
                  const char* op) {
  std::vector<Copy2D> plan;
  const bool ok =
      plan_strided_copy(sizes, dst_strides, src_strides, static_cast<int64_t>(itemsize(dtype)),
                        kMaxCopies, kMaxPitch, &plan);
  KILN_CHECK(
      ok, "[", op, "] copying ", sizes, " elements from strides ", src_strides, " to strides ",
      dst_strides, " on ", stream.device(), " needs a generated copy kernel (more than ",
      kMaxCopies,
      " memory copies), which kiln does not have yet; copy through the host (.cpu()) for now");
  DeviceGuard g(stream.device().index());
  run_plan(dst, src, plan, kind, raw(stream), stream.device().index());
}

bool may_overlap(const Tensor& a, const Tensor& b) {
  const auto& x = a.impl()->storage();
  const auto& y = b.impl()->storage();
  return x && y && x.get() == y.get();
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

// ---------------------------------------------------------------------------
// Host to device

// Note [Host copies under capture]
// A host to device copy captured into a CUDA graph would read the same host
// bytes at every replay (a staging block reused by then, or a host tensor
// the graph does not own); a device to host copy synchronizes. Either one
// while the stream is captured is an error, which makes jit::compile run
// that plan without a graph (Note [Graph replay]), except a small host to
// device copy the capture takes as a value (Note [Host values under capture]
// in runtime/cuda/launch_record.h).
static void check_not_capturing(const Stream& stream, const char* what) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  KILN_CUDA_CHECK_DEVICE(cudaStreamIsCapturing(raw(stream), &status), stream.device().index());
  KILN_CHECK(status == cudaStreamCaptureStatusNone, "[copy_] expected no ", what,
             " copy while a CUDA graph is captured, got one (it cannot be replayed)");
}

void copy_h2d(const Tensor& self, const Tensor& src, bool non_blocking) {
  start_blas_warmup(self.device().index());  // Note [cuBLASLt warm-up]
  const Stream stream = Stream::current(self.device());
  check_no_overlap(self, "copy_");
  const bool dense = is_dense(self.sizes(), self.strides());
  const DimVector host_strides =
      dense ? DimVector(self.strides()) : contiguous_strides(self.sizes());
  const bool usable = src.dtype() == self.dtype() && src.sizes() == self.sizes() &&
                      src.strides() == IntArrayRef(host_strides) &&
                      is_dense(src.sizes(), src.strides());
  // Note [Host values under capture]: a small copy laid out as it lands.
  if (LaunchRecorder* r = launch_recorder();
      r && usable && dense && self.nbytes() <= kHostValueLimit && self.nbytes() > 0) {
    DeviceGuard g(self.device().index());
    if (r->host_value(raw(stream), byte_ptr(self), byte_ptr(src), self.nbytes())) return;
  }
  check_not_capturing(stream, "host to device");
  // The values in self's dtype and sizes, laid out as they go up.
  Tensor host;
  bool staged = false;
  if (usable && is_pinned(src)) {
    host = src;
  } else {
    host = staging_tensor(self.sizes(), host_strides, self.dtype());
    cpu::copy_into(host, src);
    staged = true;
  }
  strided_copy(byte_ptr(self), self.sizes(), self.strides(), byte_ptr(host), host.strides(),
               self.dtype(), cudaMemcpyHostToDevice, stream, "copy_");
  if (staged) {
    record_stream(host, stream);  // the block is reused only after the copy ran
  } else if (non_blocking) {
    record_stream(src, stream);
  } else {
    stream.synchronize();
  }
}

// ---------------------------------------------------------------------------
// Device to host

void copy_d2h(const Tensor& self, const Tensor& src, bool non_blocking) {
  const Stream stream = Stream::current(src.device());
  check_not_capturing(stream, "device to host");
  const int64_t span = span_elements(src.sizes(), src.strides());
  const bool direct = self.dtype() == src.dtype() && self.sizes() == src.sizes() &&
                      self.strides() == src.strides() && is_dense(src.sizes(), src.strides());
  if (direct) {
    DeviceGuard g(src.device().index());
    KILN_CUDA_CHECK_DEVICE(cudaMemcpyAsync(byte_ptr(self), byte_ptr(src), src.nbytes(),
                                           cudaMemcpyDeviceToHost, raw(stream)),
                           src.device().index());
    if (non_blocking && is_pinned(self)) {
      record_stream(self, stream);
    } else {
      stream.synchronize();
      check_replay_errors(raw(stream));  // Note [Errors of replayed kernels]
    }
    return;
  }
  // Fetch into staging: the whole span when the gaps are small (one copy, and
  // broadcast sources come back small), else row-major through the 2D plan.
  const bool whole_span =
      static_cast<size_t>(span) * src.element_size() <= 2 * src.nbytes() + (size_t{64} << 10);
  Tensor host;
  if (whole_span) {
    Tensor block = staging_tensor({span}, {1}, src.dtype());
    DeviceGuard g(src.device().index());
    KILN_CUDA_CHECK_DEVICE(cudaMemcpyAsync(byte_ptr(block), byte_ptr(src),
                                           static_cast<size_t>(span) * src.element_size(),
                                           cudaMemcpyDeviceToHost, raw(stream)),
                           src.device().index());
    host = block.as_strided(src.sizes(), src.strides(), 0);
  } else {
    host = staging_tensor(src.sizes(), contiguous_strides(src.sizes()), src.dtype());
    strided_copy(byte_ptr(host), src.sizes(), host.strides(), byte_ptr(src), src.strides(),
                 src.dtype(), cudaMemcpyDeviceToHost, stream, "copy_");
  }
  stream.synchronize();
  check_replay_errors(raw(stream));  // Note [Errors of replayed kernels]
  cpu::copy_into(self, host);
}

// ---------------------------------------------------------------------------
// Device to device

void copy_d2d_same_device(const Tensor& self, const Tensor& src) {
  const Stream stream = Stream::current(self.device());
  Tensor from = src;
  if (may_overlap(self, src)) {
    if (same_view(self, src)) return;
    from = empty_tensor(src.sizes(), src.dtype(), src.device());
    copy_d2d_same_device(from, src);
  }
  const DimVector src_strides = broadcast_strides(from, self.sizes(), "copy_");
  DeviceCopyKernel kernel = device_copy_kernel();
  if (self.dtype() != from.dtype() ||
      (kernel && !engine_copy_fits(self.sizes(), self.strides(), src_strides, self.dtype()))) {
    KILN_CHECK(kernel, "[copy_] copying ", from.dtype(), " ", src.sizes(), " into ", self.dtype(),
               " ", self.sizes(), " on ", self.device(),
               " needs a generated kernel, and kiln's CUDA code generator is not linked in");
    kernel(self, from);
    return;
  }
  strided_copy(byte_ptr(self), self.sizes(), self.strides(), byte_ptr(from), src_strides,
               self.dtype(), cudaMemcpyDeviceToDevice, stream, "copy_");
}

void copy_d2d(const Tensor& self, const Tensor& src) {
  check_no_overlap(self, "copy_");
  if (self.device() == src.device()) {
    copy_d2d_same_device(self, src);
    return;
  }
  if (self.dtype() != src.dtype()) {
    // Move first, then convert on the destination device.
    Tensor moved = empty_tensor(src.sizes(), src.dtype(), self.device());
    copy_d2d(moved, src);
    copy_d2d_same_device(self, moved);
    return;
  }
  // Across devices: dense row-major on both ends, one peer copy on the
  // destination's stream, ordered after the source's stream and before its
  // later work (the source's memory may be reused there only after the copy).
  Tensor from = src.expand(self.sizes());
  if (!from.is_contiguous()) {
    Tensor packed = empty_tensor(self.sizes(), src.dtype(), src.device());
    copy_d2d_same_device(packed, from);
    from = packed;
  }
  Tensor to = self.is_contiguous() ? self : empty_tensor(self.sizes(), self.dtype(), self.device());
  const Stream src_stream = Stream::current(src.device());
  const Stream dst_stream = Stream::current(self.device());
  Event ready;
  ready.record(src_stream);
  dst_stream.wait(ready);
  {
    DeviceGuard g(self.device().index());
    KILN_CUDA_CHECK_DEVICE(
        cudaMemcpyPeerAsync(byte_ptr(to), self.device().index(), byte_ptr(from),
                            src.device().index(), self.nbytes(), raw(dst_stream)),
        self.device().index());
  }
  Event done;
  done.record(dst_stream);
  src_stream.wait(done);
  if (!to.is_same(self)) copy_d2d_same_device(self, to);
}

Tensor copy_kernel(const Tensor& self, const Tensor& src, bool non_blocking) {
  cpu::check_copy(self, src);  // shapes and overlaps, as on the CPU
  KILN_CHECK(!self.is_meta() && !src.is_meta(),
             "[copy_] expected cpu or cuda tensors, got a meta one with a cuda one");
  if (self.numel() > 0) {
    if (self.is_cuda() && src.is_cpu()) {
      copy_h2d(self, src, non_blocking);
    } else if (self.is_cpu() && src.is_cuda()) {
      copy_d2h(self, src.expand(self.sizes()), non_blocking);
    } else if (self.is_cuda() && src.is_cuda()) {
      copy_d2d(self, src);
    } else {
      cpu::copy_into(self, may_overlap(self, src) ? src.clone() : src);
    }
  }
  self.impl()->bump_version();
  return self;
}

// ---------------------------------------------------------------------------
// fill_

// Note [Fills without host memory]
// A fill is a memset: of bytes when the pattern's bytes are all equal, else of
// 16- or 32-bit words through the driver's memset (an 8-byte pattern as two
// 2-D memsets of 32-bit words, one per half). No host memory is involved, so
// a fill captured into a CUDA graph replays as it ran. Wider patterns (none of
// kiln's dtypes) would need a staging copy and are refused while captured.
using MemsetD16 = int (*)(unsigned long long, unsigned short, size_t, cudaStream_t);
using MemsetD32 = int (*)(unsigned long long, unsigned int, size_t, cudaStream_t);
using MemsetD2D32 = int (*)(unsigned long long, size_t, unsigned int, size_t, size_t, cudaStream_t);

template <class F>
F driver_entry(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  KILN_CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &found));
  KILN_CHECK(fn != nullptr && found == cudaDriverEntryPointSuccess,
             "[fill_] expected the CUDA driver to provide ", symbol, ", got none");
  return reinterpret_cast<F>(fn);
}

void check_driver(int result, const char* call, int device) {
  KILN_CHECK(result == 0, "[fill_] ", call, " failed on cuda:", device, " with CUDA driver error ",
             result);
}

// Writes `count` copies of the `size`-byte `pattern` from `dst` on.
void fill_span(char* dst, int64_t count, const unsigned char* pattern, size_t size,
               const Stream& stream) {
  const int device = stream.device().index();
  DeviceGuard g(device);
  const size_t n = static_cast<size_t>(count);
  const auto address = reinterpret_cast<unsigned long long>(dst);
  cudaStream_t s = raw(stream);
  if (std::all_of(pattern, pattern + size, [&](unsigned char b) { return b == pattern[0]; })) {
    KILN_CUDA_CHECK_DEVICE(cudaMemsetAsync(dst, pattern[0], n * size, s), device);
    return;
  }
  if (size == 2) {
    static const auto d16 = driver_entry<MemsetD16>("cuMemsetD16Async");
    unsigned short v;
    std::memcpy(&v, pattern, 2);
    check_driver(d16(address, v, n, s), "cuMemsetD16Async", device);
    return;
  }
  if (size == 4) {
    static const auto d32 = driver_entry<MemsetD32>("cuMemsetD32Async");
    unsigned int v;
    std::memcpy(&v, pattern, 4);
    check_driver(d32(address, v, n, s), "cuMemsetD32Async", device);
    return;
  }
  KILN_INTERNAL_ASSERT(size == 8, "a fill pattern of ", size, " bytes");
  static const auto d2d32 = driver_entry<MemsetD2D32>("cuMemsetD2D32Async");
  unsigned int lo, hi;
  std::memcpy(&lo, pattern, 4);
  std::memcpy(&hi, pattern + 4, 4);
  check_driver(d2d32(address, 8, lo, 1, n, s), "cuMemsetD2D32Async", device);
  check_driver(d2d32(address + 4, 8, hi, 1, n, s), "cuMemsetD2D32Async", device);
}

Tensor fill_kernel(const Tensor& self, const Scalar& value) {
  KILN_CHECK(self.is_cuda(), "[fill_] expected a cuda tensor, got one on ", self.device());
  check_convertible(value, self.dtype(), "fill_");
  if (self.numel() > 0) {
    unsigned char pattern[16] = {};
    store_scalar(pattern, self.dtype(), value);
    const Stream stream = Stream::current(self.device());
    // Dims that repeat memory (stride 0) are written once.
    DimVector sizes, strides;
    for (int64_t i = 0; i < self.dim(); ++i) {
      if (self.size(i) != 1 && self.stride(i) != 0) {
        sizes.push_back(self.size(i));
        strides.push_back(self.stride(i));
      }
    }
    if (is_dense(sizes, strides)) {
      fill_span(byte_ptr(self), span_elements(sizes, strides), pattern, self.element_size(),
                stream);
    } else {
      Tensor dense = empty_tensor(sizes, self.dtype(), self.device());
      fill_span(byte_ptr(dense), dense.numel(), pattern, self.element_size(), stream);
      strided_copy(byte_ptr(self), sizes, strides, byte_ptr(dense), dense.strides(), self.dtype(),
                   cudaMemcpyDeviceToDevice, stream, "fill_");
    }
  }
  self.impl()->bump_version();
  return self;
}

}  // namespace

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  const Device d = dst_device.is_cuda() ? dst_device : src_device;
  check_device(d, "copy_bytes");
  const Stream stream = Stream::current(d);
  DeviceGuard g(d.index());
  KILN_CUDA_CHECK_DEVICE(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, raw(stream)),
                         d.index());
  if (dst_device.is_cpu() || src_device.is_cpu()) stream.synchronize();
}

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("copy_", &copy_kernel);
  m.impl("fill_.Scalar", &fill_kernel);
}

}  // namespace kiln::cuda
