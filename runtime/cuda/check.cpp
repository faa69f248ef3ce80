#include "runtime/cuda/check.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include "kiln/error.h"

namespace kiln::cuda::detail {

void fail_cuda(int status, const char* call, const char* file, int line, int device) {
  const auto err = static_cast<cudaError_t>(status);
  // Clears the error when it is not sticky, so the process can go on.
  (void)cudaGetLastError();
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    device = -1;
  }
  KILN_FAIL("[cuda] ", call, " failed at ", file, ":", line, " on ",
            device >= 0 ? "cuda:" + std::to_string(device) : std::string("an unknown device"), ": ",
            cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

void fail_nvrtc(int status, const char* call, const char* file, int line) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) (void)cudaGetLastError();
  KILN_FAIL("[nvrtc] ", call, " failed at ", file, ":", line, " (current device cuda:", device,
            "): ", nvrtcGetErrorString(static_cast<nvrtcResult>(status)));
}

void fail_cublas(int status, const char* call, const char* file, int line, int device) {
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    device = -1;
  }
  const auto st = static_cast<cublasStatus_t>(status);
  KILN_FAIL("[cublasLt] ", call, " failed at ", file, ":", line, " on cuda:", device, ": ",
            cublasLtGetStatusName(st), " (", cublasLtGetStatusString(st), ")");
}

}  // namespace kiln::cuda::detail
