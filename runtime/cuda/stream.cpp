// Streams: kiln's default stream per device, the per-thread current stream,
// a pool of extra streams, and adopted external ones.

#include <array>
#include <atomic>
#include <mutex>

#include "kiln/error.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/cuda/device_guard.h"

namespace kiln::cuda {

// Note [Default stream]
// Work kiln queues goes to the current stream of the tensor's device: by
// default one non-blocking stream per device that kiln creates and shares
// between threads, not CUDA's legacy default stream (0), because
//   - jit::compile captures CUDA graphs on the current stream, and capture on
//     the legacy stream is not allowed;
//   - the legacy stream synchronizes implicitly with every blocking stream, so
//     a server's streams would wait on kiln's work and each other's;
//   - a kiln-owned stream is the same object in every thread, so tensors made
//     by one thread are ordered for another without events, as in PyTorch.
// The cost: work the caller queues on the legacy stream is not ordered with
// kiln's. Such code adopts its stream (StreamGuard(Stream::legacy()) or
// Stream::from_external) or orders the two with events. Kiln's streams are
// never destroyed: blocks the caching allocator keeps per stream stay valid.

namespace {

constexpr int kMaxDevices = 64;
constexpr int kPoolSize = 32;

struct CurrentStreams {
  std::array<void*, kMaxDevices> handle{};
  std::array<bool, kMaxDevices> set{};
};
thread_local CurrentStreams t_current;

struct DeviceStreams {
  std::once_flag default_once;
  cudaStream_t default_stream = nullptr;
  std::once_flag pool_once;
  std::array<cudaStream_t, kPoolSize> pool{};
  std::atomic<uint32_t> next{0};
};

DeviceStreams& streams_of(int device) {
  static auto* all = new std::array<DeviceStreams, kMaxDevices>();  // leaked: used at exit
  return (*all)[device];
}

int checked_index(Device d, const char* op) {
  check_device(d, op);
  KILN_CHECK(d.index() < kMaxDevices, "[", op, "] expected a device index below ", kMaxDevices,
             ", got ", d);
  return d.index();
}

cudaStream_t new_stream(int device) {
  DeviceGuard g(device);
  cudaStream_t s = nullptr;
  KILN_CUDA_CHECK_DEVICE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), device);
  return s;
}

}  // namespace

Stream Stream::default_stream(Device device) {
  const int i = checked_index(device, "Stream::default_stream");
  DeviceStreams& ds = streams_of(i);
  std::call_once(ds.default_once, [&] { ds.default_stream = new_stream(i); });
  return Stream(ds.default_stream, device);
}

Stream Stream::current(Device device) {
  const int i = checked_index(device, "Stream::current");
  if (t_current.set[i]) return Stream(t_current.handle[i], device);
  return default_stream(device);
}

Stream Stream::legacy(Device device) {
  checked_index(device, "Stream::legacy");
  return Stream(nullptr, device);
}

Stream Stream::from_pool(Device device) {
  const int i = checked_index(device, "Stream::from_pool");
  DeviceStreams& ds = streams_of(i);
  std::call_once(ds.pool_once, [&] {
    for (auto& s : ds.pool) s = new_stream(i);
  });
  return Stream(ds.pool[ds.next.fetch_add(1, std::memory_order_relaxed) % kPoolSize], device);
}

Stream Stream::from_external(void* cuda_stream, Device device) {
  checked_index(device, "Stream::from_external");
  return Stream(cuda_stream, device);
}

bool Stream::query() const {
  DeviceGuard g(device_.index());
  cudaError_t err = cudaStreamQuery(raw(*this));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  KILN_CUDA_CHECK_DEVICE(err, device_.index());
  return true;
}

void Stream::synchronize() const {
  DeviceGuard g(device_.index());
  KILN_CUDA_CHECK_DEVICE(cudaStreamSynchronize(raw(*this)), device_.index());
}

void Stream::wait(const Event& event) const {
  if (!event.recorded()) return;
  DeviceGuard g(device_.index());
  KILN_CUDA_CHECK_DEVICE(
      cudaStreamWaitEvent(raw(*this), static_cast<cudaEvent_t>(event.handle()), 0),
      device_.index());
}

StreamGuard::StreamGuard(const Stream& stream)
    : previous_(stream), had_previous_(t_current.set[stream.device().index()]) {
  const int i = stream.device().index();
  previous_ = Stream::from_external(t_current.handle[i], stream.device());
  t_current.handle[i] = stream.handle();
  t_current.set[i] = true;
}

StreamGuard::~StreamGuard() {
  const int i = previous_.device().index();
  t_current.handle[i] = previous_.handle();
  t_current.set[i] = had_previous_;
}

alloc::StreamId stream_id(const Stream& s) {
  return alloc::StreamId{reinterpret_cast<uintptr_t>(s.handle()), s.device().index()};
}

bool capturing(Device device) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  KILN_CUDA_CHECK_DEVICE(cudaStreamIsCapturing(raw(Stream::current(device)), &status),
                         device.index());
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace kiln::cuda
