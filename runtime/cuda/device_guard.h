#pragma once

// Helpers for the CUDA-only sources of runtime/cuda/ (this header needs the toolkit).

#include <cuda_runtime_api.h>

#include "kiln/cuda.h"
#include "runtime/cuda/check.h"

namespace kiln::cuda {

// Makes `device` the runtime's current device for a scope, and restores the
// previous one. Cheap when it is current already (the usual case).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    KILN_CUDA_CHECK_DEVICE(cudaGetDevice(&previous_), device);
    if (previous_ != device_) KILN_CUDA_CHECK_DEVICE(cudaSetDevice(device_), device_);
  }
  ~DeviceGuard() {
    if (previous_ != device_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

inline cudaStream_t raw(const Stream& s) {
  return static_cast<cudaStream_t>(s.handle());
}

// The properties of `device`, queried once.
const cudaDeviceProp& device_properties(int device);

}  // namespace kiln::cuda
