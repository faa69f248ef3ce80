// Must-fail cases of the pools and interpolate: each raises a kiln::Error that
// names the op, the argument, what was expected and what came, in lazy mode
// as in eager (the composites check their arguments when they are called).

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();

TEST(PoolErrors, Dims) {
  EXPECT_KILN_ERROR(kiln::max_pool2d(kiln::ones({5, 5}), 2),
                    "[max_pool2d] expected input of 3 or 4 dims (C, H, W) or (N, C, H, W), got 2 "
                    "dims (sizes [5, 5])");
  EXPECT_KILN_ERROR(kiln::max_pool1d(kiln::ones({2, 3, 5, 5}), 2),
                    "[max_pool1d] expected input of 2 or 3 dims (C, L) or (N, C, L), got 4 dims");
  EXPECT_KILN_ERROR(kiln::avg_pool2d(kiln::ones({1, 2, 3, 5, 5}), 2),
                    "[avg_pool2d] expected input of 3 or 4 dims (C, H, W) or (N, C, H, W), got 5 "
                    "dims");
  EXPECT_KILN_ERROR(kiln::adaptive_avg_pool1d(kiln::ones({5}), 2),
                    "[adaptive_avg_pool1d] expected input of 2 or 3 dims (C, L) or (N, C, L), got "
                    "1 dims (sizes [5])");
  EXPECT_KILN_ERROR(kiln::adaptive_max_pool2d(kiln::ones({5, 5}), {2, 2}),
                    "[adaptive_max_pool2d] expected input of 3 or 4 dims");
  // Every dim but the batch holds elements (adaptive_avg_pool: the channels may be empty).
  EXPECT_KILN_ERROR(kiln::max_pool2d(kiln::ones({2, 0, 5, 5}), 2),
                    "[max_pool2d] expected input with non-empty dims except the batch (N), got "
                    "sizes [2, 0, 5, 5]");
  EXPECT_KILN_ERROR(kiln::max_pool2d(kiln::ones({3, 0, 5}), 1),
                    "[max_pool2d] expected input with non-empty dims, got sizes [3, 0, 5]");
  EXPECT_KILN_ERROR(
      kiln::adaptive_avg_pool2d(kiln::ones({2, 3, 0, 5}), {2, 2}),
      "[adaptive_avg_pool2d] expected input with non-empty dims except the batch (N), "
      "got sizes [2, 3, 0, 5]");
  EXPECT_KILN_ERROR(kiln::adaptive_max_pool2d(kiln::ones({2, 0, 5, 5}), {2, 2}),
                    "[adaptive_max_pool2d] expected input with non-empty dims except the batch");
  EXPECT_EQ(kiln::adaptive_avg_pool2d(kiln::ones({2, 0, 5, 5}), {2, 2}).sizes(),
            kiln::IntArrayRef({2, 0, 2, 2}));
  EXPECT_KILN_ERROR(
      kiln::max_pool2d(Tensor(), 2),
      "[max_pool2d] expected argument 'input' to be a defined tensor, got an undefined one");
}

TEST(PoolErrors, Dtypes) {
  Tensor x = kiln::ones({2, 3, 6, 6});
  // PyTorch 1.13 pools floating inputs, and its CPU averages int64 ones
  // (Note [pooling]); its max pools take no integers on any device.
  EXPECT_KILN_ERROR(kiln::max_pool2d(x.to(kiln::kInt64), 2),
                    "[max_pool2d] expected input of a floating dtype (float32, float64, float16 or "
                    "bfloat16), got int64");
  EXPECT_KILN_ERROR(kiln::max_pool1d_with_indices(x[0].to(kiln::kInt32), 2),
                    "[max_pool1d_with_indices] expected input of a floating dtype (float32, "
                    "float64, float16 or bfloat16), got int32");
  EXPECT_KILN_ERROR(kiln::avg_pool2d(x.to(kiln::kInt32), 2),
                    "[avg_pool2d] expected input of a floating dtype (float32, float64, float16 or "
                    "bfloat16) or int64, got int32");
  EXPECT_KILN_ERROR(kiln::avg_pool1d(x[0].to(kiln::kBool), 2),
                    "[avg_pool1d] expected input of a floating dtype (float32, float64, float16 or "
                    "bfloat16) or int64, got bool");
  EXPECT_KILN_ERROR(kiln::adaptive_avg_pool2d(x.to(kiln::kInt64), {2, 2}),
                    "[adaptive_avg_pool2d] expected input of a floating dtype (float32, float64, "
                    "float16 or bfloat16), got int64");
  EXPECT_KILN_ERROR(kiln::adaptive_max_pool1d(x[0].to(kiln::kUInt8), 2),
                    "[adaptive_max_pool1d] expected input of a floating dtype");
}

TEST(PoolErrors, KernelStridePaddingDilation) {
  Tensor x = kiln::ones({2, 3, 5, 5});
  EXPECT_KILN_ERROR(kiln::max_pool2d(x, {0, 2}),
                    "[max_pool2d] expected kernel_size >= 1 in every spatial dim, got [0, 2]");
  EXPECT_KILN_ERROR(kiln::max_pool2d(x, {2, 2, 2}),
                    "[max_pool2d] expected kernel_size to be one int or a list of 2 (one per "
                    "spatial dim), got [2, 2, 2]");
  EXPECT_KILN_ERROR(kiln::avg_pool2d(x, std::vector<int64_t>{}),
                    "[avg_pool2d] expected kernel_size to be one int or a list of 2");
  EXPECT_KILN_ERROR(kiln::max_pool2d(x, 2, {1, 0}),
                    "[max_pool2d] expected stride >= 1 in every spatial dim, got [1, 0]");
  EXPECT_KILN_ERROR(kiln::max_pool2d(x, 2, {1, 1, 1}),
                    "[max_pool2d] expected stride to be empty (kernel_size), one int or a list of "
                    "2 (one per spatial dim), got [1, 1, 1]");
  EXPECT_KILN_ERROR(kiln::max_pool1d(x[0], 2, -1),
                    "[max_pool1d] expected stride >= 1 in every spatial dim, got [-1]");
  EXPECT_KILN_ERROR(kiln::avg_pool2d(x, 2, 1, -1),
                    "[avg_pool2d] expected padding >= 0 in every spatial dim, got [-1]");
  EXPECT_KILN_ERROR(kiln::max_pool2d(x, 3, 1, {2, 0}),
                    "[max_pool2d] expected padding <= kernel_size / 2 in every spatial dim, got "
                    "padding [2, 0] with kernel_size [3, 3]");
  EXPECT_KILN_ERROR(kiln::avg_pool1d(x[0], 3, 1, 2),
                    "[avg_pool1d] expected padding <= kernel_size / 2 in every spatial dim, got "
                    "padding [2] with kernel_size [3]");
  EXPECT_KILN_ERROR(kiln::max_pool2d(x, 2, 1, 0, {0, 1}),
                    "[max_pool2d] expected dilation >= 1 in every spatial dim, got [0, 1]");
  EXPECT_KILN_ERROR(kiln::avg_pool2d(x, 2, 1, 0, false, true, 0),
                    "[avg_pool2d] expected divisor_override to be unset or non-zero, got 0");
  // Sizes whose arithmetic does not fit int64.
  EXPECT_KILN_ERROR(kiln::max_pool2d(x, kHuge), "[max_pool2d]");
  EXPECT_KILN_ERROR(kiln::max_pool2d(x, 3, 1, 1, kHuge), "[max_pool2d]");
}

TEST(PoolErrors, OutputTooSmall) {
  Tensor x = kiln::ones({2, 3, 7, 6});
  EXPECT_KILN_ERROR(kiln::max_pool2d(x, {2, 7}),
                    "[max_pool2d] expected an output of at least 1 element per spatial dim, got "
                    "input of spatial sizes [7, 6] giving [3, 0] (kernel_size [2, 7], stride [2, "
                    "7], padding [0, 0], dilation [1, 1], ceil_mode false)");
  EXPECT_KILN_ERROR(kiln::max_pool2d_with_indices(x, 3, 1, 0, 4),
                    "[max_pool2d_with_indices] expected an output of at least 1 element per "
                    "spatial dim, got input of spatial sizes [7, 6] giving [-1, -2]");
  EXPECT_KILN_ERROR(kiln::avg_pool2d(x, {8, 2}),
                    "[avg_pool2d] expected an output of at least 1 element per spatial dim, got "
                    "input of spatial sizes [7, 6] giving [0, 3]");
  // PyTorch 1.13's max_pool1d (without indices) returns an empty (7, 0)
  // here; kiln raises as max_pool1d_with_indices and PyTorch's other pools do.
  EXPECT_KILN_ERROR(kiln::max_pool1d(x[0][0], 7),
                    "[max_pool1d] expected an output of at least 1 element per spatial dim, got "
                    "input of spatial sizes [6] giving [0]");
}

TEST(PoolErrors, AdaptiveOutputSize) {
  Tensor x = kiln::ones({2, 3, 5, 5});
  EXPECT_KILN_ERROR(kiln::adaptive_avg_pool2d(x, {-1, 2}),
                    "[adaptive_avg_pool2d] expected output_size >= 0 in every spatial dim, got "
                    "[-1, 2]");
  EXPECT_KILN_ERROR(kiln::adaptive_max_pool2d(x, {2, 2, 2}),
                    "[adaptive_max_pool2d] expected output_size to be one int or a list of 2 (one "
                    "per spatial dim), got [2, 2, 2]");
  EXPECT_KILN_ERROR(kiln::adaptive_avg_pool1d(x[0], {2, 2}),
                    "[adaptive_avg_pool1d] expected output_size to be one int or a list of 1");
  EXPECT_KILN_ERROR(kiln::adaptive_max_pool1d(x[0], kHuge), "[adaptive_max_pool1d]");
  // An output size of 0 is an empty result, as in PyTorch.
  auto [values, indices] = kiln::adaptive_max_pool2d(x, {0, 2});
  EXPECT_EQ(values.sizes(), kiln::IntArrayRef({2, 3, 0, 2}));
  EXPECT_EQ(indices.dtype(), kiln::kInt64);
}

TEST(InterpolateErrors, SizeAndScaleFactor) {
  Tensor x = kiln::ones({2, 3, 5, 5});
  EXPECT_KILN_ERROR(kiln::interpolate(x, std::nullopt, std::nullopt),
                    "[interpolate] expected exactly one of size and scale_factor, got neither");
  EXPECT_KILN_ERROR(kiln::interpolate(x, std::vector<int64_t>{3, 3}, 2.0),
                    "[interpolate] expected exactly one of size and scale_factor, got both");
  EXPECT_KILN_ERROR(kiln::interpolate(x, std::vector<int64_t>{3, 3, 3}),
                    "[interpolate] expected size to be one value or a list of 2 (one per spatial "
                    "dim), got 3 values for input of sizes [2, 3, 5, 5]");
  EXPECT_KILN_ERROR(kiln::interpolate(x, std::nullopt, std::vector<double>{2, 2, 2}),
                    "[interpolate] expected scale_factor to be one value or a list of 2");
  EXPECT_KILN_ERROR(kiln::interpolate(x, std::vector<int64_t>{0, 3}),
                    "[interpolate] expected size >= 1 in every spatial dim, got [0, 3]");
  EXPECT_KILN_ERROR(kiln::interpolate(x, std::nullopt, 0.1),
                    "[interpolate] expected scale_factor to give an output of at least 1 element "
                    "per spatial dim, got scale_factor [0.1] for input of sizes [2, 3, 5, 5]");
  EXPECT_KILN_ERROR(kiln::interpolate(x, std::nullopt, -2.0),
                    "[interpolate] expected scale_factor finite and > 0 in every spatial dim, got "
                    "[-2]");
  EXPECT_KILN_ERROR(kiln::interpolate(x, std::nullopt, std::numeric_limits<double>::quiet_NaN()),
                    "[interpolate] expected scale_factor finite and > 0");
  EXPECT_KILN_ERROR(kiln::interpolate(x, std::nullopt, 1e300),
                    "[interpolate] expected scale_factor to give an output size that fits int64");
  EXPECT_KILN_ERROR(
      kiln::interpolate(x, std::vector<int64_t>{3, 3}, std::nullopt, "nearest", std::nullopt, true),
      "[interpolate] expected recompute_scale_factor unset or false with an explicit size, got "
      "true");
}

TEST(InterpolateErrors, Modes) {
  Tensor x = kiln::ones({2, 3, 5, 5});
  const std::vector<int64_t> size{3, 3};
  EXPECT_KILN_ERROR(kiln::interpolate(x, size, "cubic"),
                    "[interpolate] expected mode 'nearest', 'nearest-exact', 'area', 'linear' or "
                    "'bilinear', got 'cubic'");
  // PyTorch's bicubic and trilinear modes are not kiln's (Note [interpolate]).
  EXPECT_KILN_ERROR(kiln::interpolate(x, size, "bicubic"), "got 'bicubic'");
  EXPECT_KILN_ERROR(kiln::interpolate(x, size, "linear"),
                    "[interpolate] expected input of 3 dims (N, C, L) for mode 'linear', got 4 "
                    "dims (sizes [2, 3, 5, 5])");
  EXPECT_KILN_ERROR(kiln::interpolate(x[0], 3, "bilinear"),
                    "[interpolate] expected input of 4 dims (N, C, H, W) for mode 'bilinear', got "
                    "3 dims");
  EXPECT_KILN_ERROR(kiln::interpolate(x, size, "nearest", true),
                    "[interpolate] expected align_corners unset for mode 'nearest' (it applies to "
                    "'linear' and 'bilinear'), got true");
  EXPECT_KILN_ERROR(kiln::interpolate(x, size, "area", false),
                    "[interpolate] expected align_corners unset for mode 'area'");
  // PyTorch has antialias for bilinear; kiln has none.
  EXPECT_KILN_ERROR(
      kiln::interpolate(x, size, std::nullopt, "bilinear", false, std::nullopt, true),
      "[interpolate] expected antialias false (kiln has no anti-aliased modes), got true");
  EXPECT_KILN_ERROR(kiln::interpolate(x[0][0], 3),
                    "[interpolate] expected input of 3 or 4 dims (N, C, L) or (N, C, H, W), got 2 "
                    "dims (sizes [5, 5])");
  EXPECT_KILN_ERROR(kiln::interpolate(x.unsqueeze(0), 3),
                    "[interpolate] expected input of 3 or 4 dims");
  EXPECT_KILN_ERROR(kiln::interpolate(kiln::ones({2, 0, 5, 5}), 3),
                    "[interpolate] expected input with non-empty dims except the batch (N), got "
                    "sizes [2, 0, 5, 5]");
}

TEST(InterpolateErrors, Dtypes) {
  Tensor x = kiln::ones({2, 3, 5, 5});
  EXPECT_KILN_ERROR(kiln::interpolate(x.to(kiln::kInt64), 3),
                    "[interpolate] expected input of a floating dtype (float32, float64, float16 "
                    "or bfloat16) or uint8 for mode 'nearest', got int64");
  EXPECT_KILN_ERROR(kiln::interpolate(x.to(kiln::kUInt8), 3, "bilinear"),
                    "[interpolate] expected input of a floating dtype (float32, float64, float16 "
                    "or bfloat16) for mode 'bilinear', got uint8");
  EXPECT_KILN_ERROR(kiln::interpolate(x.to(kiln::kBool), 3),
                    "[interpolate] expected input of a floating dtype");
}

// The same checks run when the call is recorded: the composite checks its
// arguments before it records anything.
TEST(PoolErrors, LazyCallsRaiseAtTheCall) {
  ASSERT_TRUE(kiln::jit::is_lazy());
  Tensor x = kiln::ones({2, 3, 6, 6}) * 2.0;
  ASSERT_TRUE(x.is_pending());
  EXPECT_KILN_ERROR(kiln::max_pool2d(x, 3, 1, 2),
                    "[max_pool2d] expected padding <= kernel_size / 2");
  EXPECT_KILN_ERROR(kiln::avg_pool2d(x, 7), "[avg_pool2d] expected an output of at least 1");
  EXPECT_KILN_ERROR(kiln::interpolate(x, std::nullopt, 0.1),
                    "[interpolate] expected scale_factor to give an output of at least 1");
  EXPECT_KILN_ERROR(kiln::call_op("max_pool2d_with_indices", {x, int64_t{0}}),
                    "[max_pool2d_with_indices] expected kernel_size >= 1");
}

}  // namespace
