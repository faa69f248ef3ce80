// Device queries through the CUDA runtime. The full device/stream/event layer
// grows here; these are the parts the rest of kiln needs from the start.

#include <cuda_runtime_api.h>

#include <mutex>

#include "kiln/error.h"
#include "runtime/cuda/cuda_runtime.h"

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

void check(cudaError_t err, const char* call, const char* file, int line, int device) {
  if (err == cudaSuccess) return;
  KILN_FAIL("[cuda] ", call, " failed at ", file, ":", line, " on cuda:", device, ": ",
            cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}
#define KILN_CUDA_CHECK_DEV(call, dev) check((call), #call, __FILE__, __LINE__, (dev))

void check_device(Device d, const char* op) {
  KILN_CHECK(d.is_cuda(), "[", op, "] expected a cuda device, got ", d);
  KILN_CHECK(d.index() < cached_device_count(), "[", op, "] expected a cuda device index below ",
             cached_device_count(), ", got ", d);
}

}  // namespace

bool built() { return true; }
bool is_available() { return cached_device_count() > 0; }
int device_count() { return cached_device_count(); }

std::string device_name(int index) {
  check_device(Device::cuda(index), "device_name");
  cudaDeviceProp p{};
  KILN_CUDA_CHECK_DEV(cudaGetDeviceProperties(&p, index), index);
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ")";
}

void synchronize(Device device) {
  check_device(device, "synchronize");
  KILN_CUDA_CHECK_DEV(cudaSetDevice(device.index()), device.index());
  KILN_CUDA_CHECK_DEV(cudaDeviceSynchronize(), device.index());
}

alloc::DataPtr allocate(size_t nbytes, Device device) {
  check_device(device, "cuda allocate");
  if (nbytes == 0) return alloc::DataPtr{nullptr, nullptr, [](void*, void*) {}};
  KILN_CUDA_CHECK_DEV(cudaSetDevice(device.index()), device.index());
  void* p = nullptr;
  KILN_CUDA_CHECK_DEV(cudaMalloc(&p, nbytes), device.index());
  return alloc::DataPtr{p, reinterpret_cast<void*>(static_cast<intptr_t>(device.index())),
                        [](void*, void* ptr) { (void)cudaFree(ptr); }};
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  Device d = dst_device.is_cuda() ? dst_device : src_device;
  KILN_CUDA_CHECK_DEV(cudaSetDevice(d.index()), d.index());
  KILN_CUDA_CHECK_DEV(cudaMemcpy(dst, src, nbytes, cudaMemcpyDefault), d.index());
}

}  // namespace kiln::cuda
