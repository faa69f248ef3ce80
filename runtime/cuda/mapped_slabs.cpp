#include "runtime/cuda/mapped_slabs.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "runtime/cuda/check.h"

namespace kiln::cuda {
namespace {

struct SlabPool {
  std::mutex mu;
  std::vector<int64_t*> free;
};

SlabPool& slab_pool() {
  static auto* p = new SlabPool();  // leaked: slabs may come back during exit
  return *p;
}

}  // namespace

int64_t* take_mapped_slab(int device) {
  {
    SlabPool& p = slab_pool();
    std::lock_guard<std::mutex> lock(p.mu);
    if (!p.free.empty()) {
      int64_t* s = p.free.back();
      p.free.pop_back();
      return s;
    }
  }
  void* s = nullptr;
  KILN_CUDA_CHECK_DEVICE(cudaHostAlloc(&s, kMappedSlabBytes, cudaHostAllocMapped), device);
  std::memset(s, 0, kMappedSlabBytes);
  return static_cast<int64_t*>(s);
}

void give_mapped_slab(int64_t* slab) {
  if (!slab) return;
  std::memset(slab, 0, kMappedSlabBytes);
  SlabPool& p = slab_pool();
  std::lock_guard<std::mutex> lock(p.mu);
  p.free.push_back(slab);
}

int64_t* mapped_device_address(int64_t* slab, int device) {
  void* d = nullptr;
  KILN_CUDA_CHECK_DEVICE(cudaHostGetDevicePointer(&d, slab, 0), device);
  return static_cast<int64_t*>(d);
}

}  // namespace kiln::cuda
