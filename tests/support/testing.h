#pragma once

// Comparison helpers every suite uses: a mismatch reports the index, the
// expected value, the actual value, the shape and the dtype; EnvScope and
// IsaScope; temp_path; run_test_in_child.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::testing {

struct Tolerance {
  double rtol;
  double atol;
};

// PyTorch's assert_close defaults per dtype (exact for integers and bool).
Tolerance default_tolerance(DType t);

// "" when `actual` matches `expected` (same sizes, values within tolerance,
// NaN where NaN; dtypes may differ only when `check_dtype` is false); else a
// description of the first mismatch and how many elements differ.
std::string compare(const Tensor& actual, const Tensor& expected, Tolerance tol,
                    bool check_dtype = true);
inline std::string compare(const Tensor& actual, const Tensor& expected) {
  return compare(actual, expected, default_tolerance(expected.dtype()));
}

// A seeded tensor of `sizes`, values uniform in [low, high) (integers: [low, high)),
// laid out as `layout`: "contiguous", "transposed", "strided", "offset", "expanded".
Tensor random_tensor(IntArrayRef sizes, DType dtype, const char* layout, uint64_t seed,
                     double low = -3, double high = 3);

// Index in row-major order -> "[i, j, k]" for `sizes`.
std::string index_string(int64_t flat, IntArrayRef sizes);

// Every element of `t`'s storage, as one 1-D view from its start.
Tensor whole_storage(const Tensor& t);

// A copy of `t` on `device` (the same device too) with its sizes, strides
// and storage offset: the whole storage is copied, then viewed as `t` is (a
// plain copy would be contiguous).
Tensor same_layout_copy(const Tensor& t, Device device);

// A path in a folder that belongs to this test process alone, removed when it
// exits: ctest runs every test as its own process, several at once, so a fixed
// file name would be written and removed by two tests at the same time.
std::string temp_path(const std::string& name);

// Sets (or, with a null value, unsets) an environment variable for a scope
// and restores the caller's value after.
class EnvScope {
 public:
  EnvScope(const char* name, const char* value) : name_(name) {
    if (const char* v = std::getenv(name)) {
      saved_ = v;
      had_ = true;
    }
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~EnvScope() {
    if (had_) {
      setenv(name_, saved_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  EnvScope(const EnvScope&) = delete;
  EnvScope& operator=(const EnvScope&) = delete;

 private:
  const char* name_;
  std::string saved_;
  bool had_ = false;
};

// Sets KILN_CPU_ISA for a scope (generated CPU kernels read it when they
// are compiled) and restores the caller's value after.
class IsaScope : public EnvScope {
 public:
  explicit IsaScope(const char* isa) : EnvScope("KILN_CPU_ISA", isa) {}
};

// Runs the test `filter` (a --gtest_filter) of this binary in a child
// process, with `env` ("NAME=value", ahead of the parent's environment so
// they win) and without the parent's shard variables, killing it after
// `timeout`. `error` is "" when it exited 0, else what happened; `output` is
// what it printed.
struct ChildRun {
  std::string error;
  std::string output;
};
ChildRun run_test_in_child(const std::string& filter, const std::vector<std::string>& env,
                           std::chrono::seconds timeout);

// Captures stderr with the given log channels on (kiln::set_logs) until
// take() or the scope's end, then turns the logs off.
class Logs {
 public:
  explicit Logs(const char* channels) {
    kiln::set_logs(channels);
    ::testing::internal::CaptureStderr();
  }
  ~Logs() {
    if (!taken_) (void)take();
  }
  Logs(const Logs&) = delete;
  Logs& operator=(const Logs&) = delete;
  std::string take() {
    taken_ = true;
    std::string s = ::testing::internal::GetCapturedStderr();
    kiln::set_logs("");
    return s;
  }

 private:
  bool taken_ = false;
};

}  // namespace kiln::testing

#define EXPECT_TENSOR_CLOSE(actual, expected)                               \
  do {                                                                      \
    std::string kiln_msg_ = ::kiln::testing::compare((actual), (expected)); \
    EXPECT_TRUE(kiln_msg_.empty()) << kiln_msg_;                            \
  } while (0)

#define EXPECT_TENSOR_CLOSE_TOL(actual, expected, rtol, atol)                                   \
  do {                                                                                          \
    std::string kiln_msg_ =                                                                     \
        ::kiln::testing::compare((actual), (expected), ::kiln::testing::Tolerance{rtol, atol}); \
    EXPECT_TRUE(kiln_msg_.empty()) << kiln_msg_;                                                \
  } while (0)

// Expects a kiln::Error whose message contains `substring`.
#define EXPECT_KILN_ERROR(stmt, substring)                                      \
  do {                                                                          \
    try {                                                                       \
      stmt;                                                                     \
      ADD_FAILURE() << "expected kiln::Error containing '" << (substring)       \
                    << "', got no error from: " #stmt;                          \
    } catch (const ::kiln::Error& kiln_e_) {                                    \
      EXPECT_NE(std::string(kiln_e_.what()).find(substring), std::string::npos) \
          << "error message: " << kiln_e_.what();                               \
    }                                                                           \
  } while (0)
