#pragma once

// Every CUDA runtime, NVRTC and cuBLASLt call goes through one of these: a
// failure throws kiln::Error naming the call as written, file:line, the device
// and the library's own name and text for the status. Status codes pass as int,
// so this header needs no CUDA header; the decoding lives in check.cpp.
//
//   KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream));
//   KILN_CUDA_CHECK_DEVICE(cudaSetDevice(i), i);   // when the device is known
//   KILN_NVRTC_CHECK(nvrtcCompileProgram(prog, n, opts));
//   KILN_CUBLAS_CHECK(cublasLtMatmul(...));
//   KILN_CUBLAS_CHECK_DEVICE(cublasLtMatmul(...), i);  // when the device is known

#include "kiln/api.h"

namespace kiln::cuda::detail {

// `device` < 0: ask the runtime which device is current.
[[noreturn]] void fail_cuda(int status, const char* call, const char* file, int line, int device);
[[noreturn]] void fail_nvrtc(int status, const char* call, const char* file, int line);
// `device` < 0: ask the runtime which device is current.
[[noreturn]] void fail_cublas(int status, const char* call, const char* file, int line, int device);

}  // namespace kiln::cuda::detail

#define KILN_CUDA_CHECK_DEVICE(call, device)                                              \
  do {                                                                                    \
    const int kiln_status_ = static_cast<int>(call);                                      \
    if (KILN_UNLIKELY(kiln_status_ != 0)) {                                               \
      ::kiln::cuda::detail::fail_cuda(kiln_status_, #call, __FILE__, __LINE__, (device)); \
    }                                                                                     \
  } while (0)

#define KILN_CUDA_CHECK(call) KILN_CUDA_CHECK_DEVICE(call, -1)

#define KILN_NVRTC_CHECK(call)                                                   \
  do {                                                                           \
    const int kiln_status_ = static_cast<int>(call);                             \
    if (KILN_UNLIKELY(kiln_status_ != 0)) {                                      \
      ::kiln::cuda::detail::fail_nvrtc(kiln_status_, #call, __FILE__, __LINE__); \
    }                                                                            \
  } while (0)

#define KILN_CUBLAS_CHECK_DEVICE(call, device)                                              \
  do {                                                                                      \
    const int kiln_status_ = static_cast<int>(call);                                        \
    if (KILN_UNLIKELY(kiln_status_ != 0)) {                                                 \
      ::kiln::cuda::detail::fail_cublas(kiln_status_, #call, __FILE__, __LINE__, (device)); \
    }                                                                                       \
  } while (0)

#define KILN_CUBLAS_CHECK(call) KILN_CUBLAS_CHECK_DEVICE(call, -1)
