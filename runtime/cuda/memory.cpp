// The CUDA backends of the caching allocators (cudaMalloc, cudaHostAlloc,
// events from a pool), one device allocator per device, and the public memory API.

#include <unistd.h>

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "allocator/memory_snapshot.h"
#include "allocator/memory_summary.h"
#include "kiln/error.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/cuda/device_guard.h"

namespace kiln::cuda {

namespace {

constexpr int kMaxDevices = 64;

// Events the allocators record at free(): creating one costs microseconds, so
// finished events are kept per device and reused.
struct PooledEvent {
  cudaEvent_t event;
  int device;
};

class EventPool {
 public:
  PooledEvent* take(int device) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& list = free_[device];
      if (!list.empty()) {
        PooledEvent* e = list.back();
        list.pop_back();
        return e;
      }
    }
    DeviceGuard g(device);
    cudaEvent_t e = nullptr;
    KILN_CUDA_CHECK_DEVICE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), device);
    return new PooledEvent{e, device};
  }
  void give_back(PooledEvent* e) {
    std::lock_guard<std::mutex> lock(mu_);
    free_[e->device].push_back(e);
  }

 private:
  std::mutex mu_;
  std::array<std::vector<PooledEvent*>, kMaxDevices> free_;
};

EventPool& event_pool() {
  static auto* pool = new EventPool();  // leaked: allocators free at exit
  return *pool;
}

// Note [Allocating during capture]
// A CUDA graph capture in progress on this thread prohibits "unsafe" calls
// such as cudaMalloc, cudaFree and event queries (thread-local capture mode:
// they would invalidate the capture). The allocator's raw calls are not
// stream work and the graph's private pool keeps what they allocate (Note
// [Private pools]), so they run in relaxed mode for their duration.
class RelaxedCapture {
 public:
  RelaxedCapture() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// The event half of both backends.
class CudaEvents : public alloc::DeviceMemory {
 public:
  alloc::EventId record_event(alloc::StreamId stream) override {
    PooledEvent* e = event_pool().take(stream.device);
    DeviceGuard g(stream.device);
    cudaError_t err = cudaEventRecord(e->event, reinterpret_cast<cudaStream_t>(stream.handle));
    if (err != cudaSuccess) {
      event_pool().give_back(e);
      KILN_CUDA_CHECK_DEVICE(err, stream.device);
    }
    return e;
  }
  bool query_event(alloc::EventId id) override {
    auto* e = static_cast<PooledEvent*>(id);
    DeviceGuard g(e->device);
    RelaxedCapture relaxed;
    cudaError_t err = cudaEventQuery(e->event);
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    KILN_CUDA_CHECK_DEVICE(err, e->device);
    return true;
  }
  void synchronize_event(alloc::EventId id) override {
    auto* e = static_cast<PooledEvent*>(id);
    DeviceGuard g(e->device);
    KILN_CUDA_CHECK_DEVICE(cudaEventSynchronize(e->event), e->device);
  }
  void release_event(alloc::EventId id) override {
    event_pool().give_back(static_cast<PooledEvent*>(id));
  }
};

class CudaDeviceMemory final : public CudaEvents {
 public:
  explicit CudaDeviceMemory(int device) : device_(device) {}
  void* raw_alloc(size_t nbytes) override {
    DeviceGuard g(device_);
    RelaxedCapture relaxed;
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, nbytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    KILN_CUDA_CHECK_DEVICE(err, device_);
    return p;
  }
  void raw_free(void* ptr) override {
    DeviceGuard g(device_);
    RelaxedCapture relaxed;
    KILN_CUDA_CHECK_DEVICE(cudaFree(ptr), device_);
  }
  void mem_info(size_t* free_bytes, size_t* total_bytes) override {
    DeviceGuard g(device_);
    RelaxedCapture relaxed;
    KILN_CUDA_CHECK_DEVICE(cudaMemGetInfo(free_bytes, total_bytes), device_);
  }
  std::string name() const override { return "cuda:" + std::to_string(device_); }

 private:
  int device_;
};

class CudaHostMemory final : public CudaEvents {
 public:
  void* raw_alloc(size_t nbytes) override {
    void* p = nullptr;
    // Portable: pinned for every device's context, so any device's copies use it.
    cudaError_t err = cudaHostAlloc(&p, nbytes, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    KILN_CUDA_CHECK(err);
    return p;
  }
  void raw_free(void* ptr) override { KILN_CUDA_CHECK(cudaFreeHost(ptr)); }
  void mem_info(size_t* free_bytes, size_t* total_bytes) override {
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    *total_bytes = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * page;
    *free_bytes = static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)) * page;
  }
  std::string name() const override { return "pinned host"; }
};

struct DeviceAllocators {
  std::array<std::once_flag, kMaxDevices> once;
  std::array<std::atomic<alloc::DeviceCachingAllocator*>, kMaxDevices> allocators{};
};

// Leaked on purpose: tensors in static objects may die after main returns.
DeviceAllocators& allocators() {
  static auto* a = new DeviceAllocators();
  return *a;
}

// Null when the device's allocator was never used.
alloc::DeviceCachingAllocator* created_allocator(int device) {
  return allocators().allocators[device].load(std::memory_order_acquire);
}

int device_index(Device device, const char* op) {
  check_device(device, op);
  KILN_CHECK(device.index() < kMaxDevices, "[", op, "] expected a device index below ", kMaxDevices,
             ", got ", device);
  return device.index();
}

MemoryStat convert(const alloc::Stat& s) {
  return MemoryStat{s.current, s.peak, s.allocated, s.freed};
}

}  // namespace

alloc::DeviceCachingAllocator& device_allocator(int device) {
  const int i = device_index(Device::cuda(device), "cuda allocator");
  DeviceAllocators& a = allocators();
  std::call_once(a.once[i], [&] {
    a.allocators[i].store(new alloc::DeviceCachingAllocator(std::make_unique<CudaDeviceMemory>(i)),
                          std::memory_order_release);
  });
  return *a.allocators[i].load(std::memory_order_acquire);
}

alloc::HostCachingAllocator& pinned_allocator() {
  static auto* a = new alloc::HostCachingAllocator(std::make_unique<CudaHostMemory>());
  return *a;
}

alloc::DataPtr allocate(size_t nbytes, Device device) {
  const int i = device_index(device, "cuda allocate");
  return device_allocator(i).allocate_data(nbytes, stream_id(Stream::current(device)));
}

MemoryStats memory_stats(Device device) {
  alloc::CachingStats s = device_allocator(device_index(device, "memory_stats")).stats();
  MemoryStats out;
  for (int k = 0; k < 3; ++k) {
    out.allocated_bytes[k] = convert(s.allocated_bytes[k]);
    out.reserved_bytes[k] = convert(s.reserved_bytes[k]);
    out.active_bytes[k] = convert(s.active_bytes[k]);
    out.allocations[k] = convert(s.allocations[k]);
    out.segments[k] = convert(s.segments[k]);
    out.active_blocks[k] = convert(s.active_blocks[k]);
    out.inactive_split_bytes[k] = convert(s.inactive_split_bytes[k]);
    out.inactive_split[k] = convert(s.inactive_split[k]);
  }
  out.num_alloc_retries = s.num_alloc_retries;
  out.num_ooms = s.num_ooms;
  for (const alloc::PoolStats& p : s.pools) {
    MemoryStats::Pool q;
    q.pool = p.pool;
    q.is_small = p.is_small;
    q.name = p.name();
    q.allocated_bytes = convert(p.allocated_bytes);
    q.reserved_bytes = convert(p.reserved_bytes);
    q.active_bytes = convert(p.active_bytes);
    q.inactive_split_bytes = convert(p.inactive_split_bytes);
    q.allocations = convert(p.allocations);
    q.segments = convert(p.segments);
    q.alloc_retries = p.alloc_retries;
    q.ooms = p.ooms;
    out.pools.push_back(std::move(q));
  }
  return out;
}

MemorySnapshot memory_snapshot() {
  MemorySnapshot out;
  if (!is_available()) return out;
  for (int i = 0; i < device_count() && i < kMaxDevices; ++i) {
    // Only allocators that exist: a snapshot must not create CUDA contexts.
    if (alloc::DeviceCachingAllocator* a = created_allocator(i)) {
      alloc::append_snapshot(out, a->snapshot(), i);
    }
  }
  return out;
}

std::string memory_summary(Device device) {
  std::string table = device_allocator(device_index(device, "memory_summary")).memory_summary();
  alloc::MemoryStats p = pinned_allocator().stats();
  return table + "pinned host staging: " + alloc::format_bytes(p.allocated_bytes.current) +
         " in use, " + alloc::format_bytes(p.reserved_bytes.current) + " held\n";
}

void empty_cache() {
  if (!is_available()) return;
  for (int i = 0; i < device_count() && i < kMaxDevices; ++i) {
    // Only allocators that exist: empty_cache must not create CUDA contexts.
    if (alloc::DeviceCachingAllocator* a = created_allocator(i)) a->empty_cache();
  }
  pinned_allocator().empty_cache();
}

void set_memory_fraction(double fraction, Device device) {
  device_allocator(device_index(device, "set_memory_fraction")).set_memory_fraction(fraction);
}

void reset_peak_memory_stats(Device device) {
  device_allocator(device_index(device, "reset_peak_memory_stats")).reset_peak_stats();
}

void record_stream(const Tensor& tensor, const Stream& stream) {
  check_defined(tensor, "record_stream", "tensor");
  const auto& storage = tensor.impl()->storage();
  if (!storage || !storage->data()) return;
  if (tensor.is_cuda()) {
    KILN_CHECK(tensor.device() == stream.device(), "[record_stream] expected a stream on ",
               tensor.device(), ", got one on ", stream.device());
    device_allocator(tensor.device().index()).record_stream(storage->data(), stream_id(stream));
  } else if (tensor.is_cpu()) {
    pinned_allocator().record_stream(storage->data(), stream_id(stream));
  }
}

Tensor pin_memory(const Tensor& tensor) {
  check_defined(tensor, "pin_memory", "tensor");
  KILN_CHECK(tensor.is_cpu(), "[pin_memory] expected a cpu tensor, got one on ", tensor.device());
  KILN_CHECK(is_available(),
             "[pin_memory] expected a CUDA device (page-locking needs the "
             "driver), got none");
  alloc::DataPtr d = pinned_allocator().allocate(tensor.nbytes());
  Tensor out = from_blob(
      d.ptr, tensor.sizes(), tensor.dtype(), [d](void* p) { d.deleter(d.ctx, p); }, Device::cpu());
  out.copy_(tensor);
  return out;
}

bool is_pinned(const Tensor& tensor) {
  if (!tensor.defined() || !tensor.is_cpu() || !is_available()) return false;
  const auto& storage = tensor.impl()->storage();
  if (!storage || !storage->data()) return false;
  if (pinned_allocator().owns(storage->data())) return true;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, storage->data()) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

}  // namespace kiln::cuda
