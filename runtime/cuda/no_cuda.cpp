// Stub CUDA glue for builds without the CUDA toolkit.

#include "kiln/error.h"
#include "runtime/cuda/cuda_runtime.h"

namespace kiln::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  KILN_FAIL("[", what, "] kiln was built without CUDA: expected a cpu device, got a cuda one");
}
}  // namespace

bool built() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
std::string device_name(int) { no_cuda("cuda device_name"); }
void synchronize(Device) { no_cuda("cuda synchronize"); }
alloc::DataPtr allocate(size_t, Device) { no_cuda("cuda allocate"); }
void copy_bytes(void*, Device, const void*, Device, size_t) { no_cuda("cuda copy"); }

}  // namespace kiln::cuda
