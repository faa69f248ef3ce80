// Device queries through the CUDA runtime.

#include <memory>
#include <mutex>
#include <vector>

#include "kiln/error.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/launch_record.h"

namespace kiln::cuda {

namespace {

// Note [CUDA availability]
// The first query asks the runtime for the device count once; a missing driver
// or device makes kiln CPU-only for the process's life instead of an error.
int query_device_count() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error from the failed query
    return 0;
  }
  return n;
}

int cached_device_count() {
  static const int n = query_device_count();
  return n;
}

struct PropertyCache {
  std::vector<std::once_flag> once;
  std::vector<cudaDeviceProp> props;
  explicit PropertyCache(int n) : once(static_cast<size_t>(n)), props(static_cast<size_t>(n)) {}
};

}  // namespace

bool built() {
  return true;
}
bool is_available() {
  return cached_device_count() > 0;
}
int device_count() {
  return cached_device_count();
}

void check_device(Device d, const char* op) {
  KILN_CHECK(d.is_cuda(), "[", op, "] expected a cuda device, got ", d);
  KILN_CHECK(cached_device_count() > 0, "[", op, "] expected a cuda device, got ", d,
             ", but no CUDA device is available (no driver or no GPU)");
  KILN_CHECK(d.index() >= 0 && d.index() < cached_device_count(), "[", op,
             "] expected a cuda device index below ", cached_device_count(), ", got ", d);
}

const cudaDeviceProp& device_properties(int device) {
  check_device(Device::cuda(device), "device_properties");
  static PropertyCache* cache = new PropertyCache(cached_device_count());  // leaked: used at exit
  std::call_once(cache->once[device], [&] {
    KILN_CUDA_CHECK_DEVICE(cudaGetDeviceProperties(&cache->props[device], device), device);
  });
  return cache->props[device];
}

std::string device_name(int index) {
  const cudaDeviceProp& p = device_properties(index);
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ")";
}

void device_capability(int index, int* major, int* minor) {
  const cudaDeviceProp& p = device_properties(index);
  *major = p.major;
  *minor = p.minor;
}

int64_t device_total_memory(int index) {
  return static_cast<int64_t>(device_properties(index).totalGlobalMem);
}

double device_memory_peak_gbps(int index) {
  check_device(Device::cuda(index), "device_memory_peak_gbps");
  int khz = 0, bits = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, index) != cudaSuccess ||
      cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, index) != cudaSuccess) {
    cudaGetLastError();  // an attribute the driver lacks is no error of the caller's
    return 0;
  }
  return 2.0 * khz * 1e3 * (bits / 8.0) / 1e9;
}

int64_t device_l2_bytes(int index) {
  check_device(Device::cuda(index), "device_l2_bytes");
  return device_properties(index).l2CacheSize;
}

int device_multiprocessors(int index) {
  check_device(Device::cuda(index), "device_multiprocessors");
  return device_properties(index).multiProcessorCount;
}

void synchronize(Device device) {
  check_device(device, "synchronize");
  DeviceGuard g(device.index());
  KILN_CUDA_CHECK_DEVICE(cudaDeviceSynchronize(), device.index());
  check_replay_errors(nullptr);  // Note [Errors of replayed kernels]
}

}  // namespace kiln::cuda
