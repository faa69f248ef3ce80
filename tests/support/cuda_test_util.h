#pragma once

// GPU suites skip, saying why, where no device can be used (CI has none).

#include <gtest/gtest.h>

#include "kiln/cuda.h"
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
