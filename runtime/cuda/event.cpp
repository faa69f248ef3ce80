// Events: markers in a stream's work, for ordering streams and timing.

#include "kiln/error.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/cuda/device_guard.h"

namespace kiln::cuda {

namespace {
cudaEvent_t ev(void* e) {
  return static_cast<cudaEvent_t>(e);
}
}  // namespace

Event::Event(bool enable_timing) : timing_(enable_timing) {}

Event::~Event() {
  if (!event_) return;
  // Never throws: a failure here (a dying process) only leaks the event.
  int previous = 0;
  if (cudaGetDevice(&previous) == cudaSuccess && previous != device_.index()) {
    (void)cudaSetDevice(device_.index());
    (void)cudaEventDestroy(ev(event_));
    (void)cudaSetDevice(previous);
  } else {
    (void)cudaEventDestroy(ev(event_));
  }
  (void)cudaGetLastError();
}

Event::Event(Event&& o) noexcept : event_(o.event_), device_(o.device_), timing_(o.timing_) {
  o.event_ = nullptr;
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    Event dead(std::move(*this));
    event_ = o.event_;
    device_ = o.device_;
    timing_ = o.timing_;
    o.event_ = nullptr;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  const int d = stream.device().index();
  KILN_CHECK(!event_ || device_ == stream.device(), "[Event::record] expected a stream on ",
             device_, " (where the event was first recorded), got one on ", stream.device());
  DeviceGuard g(d);
  if (!event_) {
    cudaEvent_t e = nullptr;
    KILN_CUDA_CHECK_DEVICE(
        cudaEventCreateWithFlags(&e, timing_ ? cudaEventDefault : cudaEventDisableTiming), d);
    event_ = e;
    device_ = stream.device();
  }
  KILN_CUDA_CHECK_DEVICE(cudaEventRecord(ev(event_), raw(stream)), d);
}

void Event::wait(const Stream& stream) const {
  stream.wait(*this);
}

bool Event::query() const {
  if (!event_) return true;
  DeviceGuard g(device_.index());
  cudaError_t err = cudaEventQuery(ev(event_));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  KILN_CUDA_CHECK_DEVICE(err, device_.index());
  return true;
}

void Event::synchronize() const {
  if (!event_) return;
  DeviceGuard g(device_.index());
  KILN_CUDA_CHECK_DEVICE(cudaEventSynchronize(ev(event_)), device_.index());
}

float Event::elapsed_ms(const Event& end) const {
  KILN_CHECK(timing_ && end.timing_,
             "[Event::elapsed_ms] expected both events created with enable_timing=true, got ",
             timing_ ? "an end event" : "a start event", " without timing");
  KILN_CHECK(event_ && end.event_, "[Event::elapsed_ms] expected both events recorded, got ",
             event_ ? "an end event" : "a start event", " never recorded");
  KILN_CHECK(device_ == end.device_, "[Event::elapsed_ms] expected events on one device, got ",
             device_, " and ", end.device_);
  DeviceGuard g(device_.index());
  float ms = 0;
  KILN_CUDA_CHECK_DEVICE(cudaEventElapsedTime(&ms, ev(event_), ev(end.event_)), device_.index());
  return ms;
}

}  // namespace kiln::cuda
