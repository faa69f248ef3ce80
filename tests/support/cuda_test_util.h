#pragma once

// GPU suites skip, saying why, where no device can be used (CI has none);
// helpers the CUDA suites share.

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "kiln/cuda.h"
#include "kiln/kiln.h"
#include "runtime/cuda/cuda_runtime.h"

#define KILN_REQUIRE_CUDA()                                                          \
  do {                                                                               \
    if (!::kiln::cuda::built()) {                                                    \
      GTEST_SKIP() << "no CUDA device: kiln was built without the CUDA toolkit";     \
    }                                                                                \
    if (!::kiln::cuda::is_available()) {                                             \
      GTEST_SKIP() << "no CUDA device: no driver or no GPU visible to this process"; \
    }                                                                                \
  } while (0)

#define KILN_REQUIRE_CUDA_DEVICES(n)                                                  \
  do {                                                                                \
    KILN_REQUIRE_CUDA();                                                              \
    if (::kiln::cuda::device_count() < (n)) {                                         \
      GTEST_SKIP() << "no CUDA device: this test needs " << (n) << " devices, found " \
                   << ::kiln::cuda::device_count();                                   \
    }                                                                                 \
  } while (0)

namespace kiln::testing {

// The same values in the same geometry (sizes, strides, offset) on cuda:0.
Tensor to_cuda(const Tensor& x);

// The message of the kiln::Error `f` throws, or "no error".
std::string error_message(const std::function<void()>& f);

// Errors match the CPU: `op(on)` runs an op on operands passed through `on`,
// once with `on` the identity and once with `on` = to_cuda. Succeeds when the
// CPU run throws a kiln::Error and the CUDA run throws one with the same
// message (the CUDA kernels check through the CPU's Meta kernels).
using OnDevice = std::function<Tensor(const Tensor&)>;
::testing::AssertionResult cuda_error_matches_cpu(const std::function<Tensor(const OnDevice&)>& op);

}  // namespace kiln::testing

#define EXPECT_CUDA_ERROR_MATCHES_CPU(op) EXPECT_TRUE(::kiln::testing::cuda_error_matches_cpu(op))
