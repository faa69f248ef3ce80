// The CUDA / NVRTC / cuBLASLt check macros name the call, file:line and the
// library's status. Runs without a GPU.

#include "runtime/cuda/check.h"

#include <gtest/gtest.h>

#include <string>

#include "kiln/error.h"
#include "kiln/jit.h"
#include "runtime/cuda/cuda_runtime.h"

namespace {

int fake_call(int status) {
  return status;
}

std::string message_of(void (*f)()) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "";
}

TEST(CudaCheck, NamesCallFileLineAndStatus) {
  kiln::EagerGuard eager;         // runtime behaviour, run at once
  KILN_CUDA_CHECK(fake_call(0));  // success passes
  std::string m = message_of([] { KILN_CUDA_CHECK_DEVICE(fake_call(2), 3); });
  EXPECT_NE(m.find("[cuda] fake_call(2) failed at "), std::string::npos) << m;
  EXPECT_NE(m.find("check_test.cpp:"), std::string::npos) << m;
  EXPECT_NE(m.find("cuda:3"), std::string::npos) << m;
  if (kiln::cuda::built()) {
    EXPECT_NE(m.find("cudaErrorMemoryAllocation"), std::string::npos) << m;
  }

  m = message_of([] { KILN_NVRTC_CHECK(fake_call(6)); });
  EXPECT_NE(m.find("[nvrtc] fake_call(6) failed at "), std::string::npos) << m;
  if (kiln::cuda::built()) {
    EXPECT_NE(m.find("NVRTC_ERROR_COMPILATION"), std::string::npos) << m;
  }

  m = message_of([] { KILN_CUBLAS_CHECK(fake_call(7)); });
  EXPECT_NE(m.find("[cublasLt] fake_call(7) failed at "), std::string::npos) << m;
  if (kiln::cuda::built()) {
    EXPECT_NE(m.find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << m;
  }
}

}  // namespace
