#include "jit/codegen_cuda/device_prelude.h"

#include "kiln/error.h"

namespace kiln::jit::cuda {

const char kDevicePrelude[] = R"(typedef long long i64;
__device__ __forceinline__ float kiln_h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short kiln_f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float kiln_bf2f(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ __forceinline__ unsigned short kiln_f2bf(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
// NaN from either side; a tie (+0 and -0) gives a, as the CPU kernels and PyTorch's do.
template <class T> __device__ __forceinline__ T kiln_max(T a, T b) { return a != a ? a : (b != b ? b : (a < b ? b : a)); }
template <class T> __device__ __forceinline__ T kiln_min(T a, T b) { return a != a ? a : (b != b ? b : (b < a ? b : a)); }
// A kernel's error: the offending value, then the flag, as plain stores with a
// fence to the system between (the flag may be mapped host memory: Note
// [Errors of replayed kernels]).
__device__ __forceinline__ void kiln_flag_error(i64* err, i64 value) {
  err[1] = value;
  __threadfence_system();
  *(volatile i64*)err = 1;
}
// Note [Early launch]: wait for the kernels before this one, then let the next one start.
__device__ __forceinline__ void kiln_grid_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
)";

const char* mem_type(DType t) {
  switch (t) {
    case kBool:
    case kUInt8:
      return "unsigned char";
    case kInt8:
      return "signed char";
    case kInt16:
      return "short";
    case kInt32:
      return "int";
    case kInt64:
      return "i64";
    case kFloat16:
    case kBFloat16:
      return "unsigned short";
    case kFloat32:
      return "float";
    case kFloat64:
      return "double";
  }
  KILN_INTERNAL_ASSERT(false, "unknown dtype");
  return "";
}

}  // namespace kiln::jit::cuda
