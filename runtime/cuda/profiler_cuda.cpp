#include "runtime/cuda/profiler_cuda.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/cuda/device_guard.h"
#include "runtime/profiler/recorder.h"

namespace kiln::cuda {
namespace {

namespace prof = kiln::profiler;

// One timed piece of work on a stream (Note [Profiler GPU timing]).
struct Item {
  int device = 0;
  cudaStream_t stream = nullptr;
  prof::EventKind kind = prof::EventKind::GpuOp;
  std::string name;
  cudaEvent_t before = nullptr;  // spans: their own; kernels: the stream's previous event (or none)
  cudaEvent_t after = nullptr;   // null: a span not ended
  int64_t host_ns = 0;           // kernels: when the launch returned on the host
  uint64_t correlation = 0;
};

bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;  // capture in another mode forbids asking: record nothing
  }
  return status != cudaStreamCaptureStatusNone;
}

class CudaTimer final : public prof::detail::GpuTimer {
 public:
  void start() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++generation_;
    recycle(items_);
    last_.clear();
  }

  int64_t begin_span(int device) override {
    if (device < 0) KILN_CUDA_CHECK(cudaGetDevice(&device));
    DeviceGuard guard(device);
    cudaStream_t s = raw(Stream::current(Device::cuda(device)));
    if (capturing(s)) return -1;
    std::lock_guard<std::mutex> lock(mu_);
    Item it;
    it.device = device;
    it.stream = s;
    it.before = record(s, device);
    last_[s] = it.before;
    items_.push_back(std::move(it));
    return static_cast<int64_t>(generation_ << 32 | (items_.size() - 1));
  }

  void end_span(int64_t token, prof::EventKind kind, std::string name,
                uint64_t correlation) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto index = static_cast<size_t>(token & 0xffffffff);
    if (static_cast<uint64_t>(token) >> 32 != generation_ || index >= items_.size()) return;
    Item& it = items_[index];
    DeviceGuard guard(it.device);
    it.after = record(it.stream, it.device);
    it.kind = kind;
    it.name = std::move(name);
    it.correlation = correlation;
    last_[it.stream] = it.after;
  }

  void kernel(cudaStream_t s, const void* func) {
    if (capturing(s)) return;
    int device = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&device));
    const uint64_t correlation = prof::detail::launch_point();
    const int64_t host = prof::detail::now_ns();
    std::lock_guard<std::mutex> lock(mu_);
    Item it;
    it.device = device;
    it.stream = s;
    it.kind = prof::EventKind::GpuKernel;
    it.name = kernel_name(func);
    auto last = last_.find(s);
    it.before = last == last_.end() ? nullptr : last->second;
    it.after = record(s, device);
    it.host_ns = host;
    it.correlation = correlation;
    last_[s] = it.after;
    items_.push_back(std::move(it));
  }

  std::vector<prof::Event> stop() override {
    std::lock_guard<std::mutex> lock(mu_);  // recording has stopped: nobody waits on it
    std::vector<Item> items;
    items.swap(items_);
    last_.clear();
    ++generation_;
    std::vector<prof::Event> out;
    std::map<int, std::vector<const Item*>> by_device;
    for (const Item& it : items) {
      if (it.after) by_device[it.device].push_back(&it);
    }
    for (const auto& [device, list] : by_device) {
      DeviceGuard guard(device);
      KILN_CUDA_CHECK_DEVICE(cudaDeviceSynchronize(), device);
      // The anchor: an event on an idle device, recorded and waited for
      // between two host clock reads.
      cudaEvent_t anchor = take(device);
      const int64_t h0 = prof::detail::now_ns();
      KILN_CUDA_CHECK_DEVICE(cudaEventRecord(anchor, list.back()->stream), device);
      KILN_CUDA_CHECK_DEVICE(cudaEventSynchronize(anchor), device);
      const int64_t h1 = prof::detail::now_ns();
      const int64_t anchor_ns = h0 + (h1 - h0) / 2;
      auto time_of = [&](cudaEvent_t e) {
        float ms = 0;
        KILN_CUDA_CHECK_DEVICE(cudaEventElapsedTime(&ms, e, anchor), device);
        return anchor_ns - static_cast<int64_t>(static_cast<double>(ms) * 1e6);
      };
      for (const Item* it : list) {
        prof::Event e;
        e.kind = it->kind;
        e.name = it->name;
        e.device = device;
        e.stream = reinterpret_cast<uint64_t>(it->stream);
        e.correlation = it->correlation;
        e.end_ns = time_of(it->after);
        if (it->kind == prof::EventKind::GpuKernel) {
          const int64_t before = it->before ? time_of(it->before) : it->host_ns;
          e.start_ns = std::max(before, it->host_ns);
          if (e.start_ns > e.end_ns) e.start_ns = std::min(before, e.end_ns);
        } else {
          e.start_ns = std::min(time_of(it->before), e.end_ns);
        }
        out.push_back(std::move(e));
      }
      pool_[device].push_back(anchor);
    }
    recycle(items);
    return out;
  }

 private:
  cudaEvent_t take(int device) {
    std::vector<cudaEvent_t>& free = pool_[device];
    if (!free.empty()) {
      cudaEvent_t e = free.back();
      free.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    KILN_CUDA_CHECK_DEVICE(cudaEventCreate(&e), device);
    return e;
  }

  // An event after the work queued on `s` so far (the device is current).
  cudaEvent_t record(cudaStream_t s, int device) {
    cudaEvent_t e = take(device);
    KILN_CUDA_CHECK_DEVICE(cudaEventRecord(e, s), device);
    return e;
  }

  // Gives the items' events back to the pool (a kernel's `before` is another item's event).
  void recycle(std::vector<Item>& items) {
    std::unordered_set<cudaEvent_t> seen;
    for (const Item& it : items) {
      for (cudaEvent_t e : {it.before, it.after}) {
        if (e && seen.insert(e).second) pool_[it.device].push_back(e);
      }
    }
    items.clear();
  }

  std::string kernel_name(const void* func) {
    auto it = names_.find(func);
    if (it != names_.end()) return it->second;
    const char* name = nullptr;
    std::string s;
    if (cudaFuncGetName(&name, func) == cudaSuccess && name) {
      s = name;
    } else {
      (void)cudaGetLastError();
      char buf[48];
      std::snprintf(buf, sizeof buf, "kernel %p", func);
      s = buf;
    }
    names_.emplace(func, s);
    return s;
  }

  std::mutex mu_;
  uint64_t generation_ = 1;
  std::vector<Item> items_;
  std::unordered_map<cudaStream_t, cudaEvent_t> last_;  // each stream's latest event
  std::map<int, std::vector<cudaEvent_t>> pool_;        // per device: events to reuse
  std::unordered_map<const void*, std::string> names_;
};

CudaTimer& timer() {
  static auto* t = new CudaTimer();  // leaked: events may be recorded during teardown
  return *t;
}

[[maybe_unused]] const bool g_registered = [] {
  prof::detail::set_gpu_timer(&timer());
  return true;
}();

}  // namespace

void profile_kernel_launch(cudaStream_t stream, const void* func) {
  try {
    timer().kernel(stream, func);
  } catch (const std::exception&) {
    // Profiling never fails the launch it observes; this kernel goes untimed.
  }
}

}  // namespace kiln::cuda
