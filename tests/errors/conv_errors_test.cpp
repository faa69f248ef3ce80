// Must-fail cases of conv1d and conv2d: each raises a kiln::Error that names
// the op, the argument, what was expected and what came, in lazy mode as in
// eager (the composite checks its arguments when it is called).

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::TensorOptions;

constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();

TEST(ConvErrors, Dims) {
  Tensor w = kiln::ones({6, 4, 3, 3});
  EXPECT_KILN_ERROR(kiln::conv2d(kiln::ones({5, 5}), w),
                    "[conv2d] expected input of 3 or 4 dims (C, H, W) or (N, C, H, W), got 2 dims "
                    "(sizes [5, 5])");
  EXPECT_KILN_ERROR(kiln::conv2d(kiln::ones({1, 2, 4, 5, 5}), w),
                    "[conv2d] expected input of 3 or 4 dims (C, H, W) or (N, C, H, W), got 5 dims");
  EXPECT_KILN_ERROR(kiln::conv1d(kiln::ones({2, 4, 5, 5}), kiln::ones({6, 4, 3})),
                    "[conv1d] expected input of 2 or 3 dims (C, L) or (N, C, L), got 4 dims");
  EXPECT_KILN_ERROR(kiln::conv2d(kiln::ones({2, 4, 5, 5}), kiln::ones({6, 4, 3})),
                    "[conv2d] expected weight of 4 dims (out_channels, in_channels / groups, kH, "
                    "kW), got 3 dims (sizes [6, 4, 3])");
  EXPECT_KILN_ERROR(kiln::conv1d(kiln::ones({2, 4, 5}), w),
                    "[conv1d] expected weight of 3 dims (out_channels, in_channels / groups, k), "
                    "got 4 dims");
}

TEST(ConvErrors, Dtypes) {
  Tensor x = kiln::ones({2, 4, 5, 5}), w = kiln::ones({6, 4, 3, 3});
  // PyTorch's CPU computes integer convolutions on its reference path; kiln
  // takes floating dtypes only (Note [conv]).
  EXPECT_KILN_ERROR(kiln::conv2d(x.to(kiln::kInt64), w.to(kiln::kInt64)),
                    "[conv2d] expected input of a floating dtype (float32, float64, float16 or "
                    "bfloat16), got int64");
  EXPECT_KILN_ERROR(kiln::conv1d(kiln::ones({2, 4, 5}, kiln::kInt32), kiln::ones({6, 4, 3})),
                    "[conv1d] expected input of a floating dtype (float32, float64, float16 or "
                    "bfloat16), got int32");
  EXPECT_KILN_ERROR(kiln::conv2d(x.to(kiln::kBool), w.to(kiln::kBool)),
                    "[conv2d] expected input of a floating dtype (float32, float64, float16 or "
                    "bfloat16), got bool");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w.to(kiln::kFloat64)),
                    "[conv2d] expected weight of dtype float32 like input, got float64");
  EXPECT_KILN_ERROR(kiln::conv2d(x.to(kiln::kFloat16), w),
                    "[conv2d] expected weight of dtype float16 like input, got float32");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, kiln::ones({6}, kiln::kBFloat16)),
                    "[conv2d] expected bias of dtype float32 like input, got bfloat16");
}

TEST(ConvErrors, ChannelsAndGroups) {
  EXPECT_KILN_ERROR(kiln::conv2d(kiln::ones({2, 5, 5, 5}), kiln::ones({6, 4, 3, 3})),
                    "[conv2d] expected input with 4 channels (weight.size(1) * groups = 4 * 1), "
                    "got 5 (input of sizes [2, 5, 5, 5])");
  EXPECT_KILN_ERROR(kiln::conv1d(kiln::ones({3, 5}), kiln::ones({6, 4, 3})),
                    "[conv1d] expected input with 4 channels (weight.size(1) * groups = 4 * 1), "
                    "got 3 (input of sizes [3, 5])");
  Tensor x = kiln::ones({2, 4, 5, 5}), w = kiln::ones({6, 4, 3, 3});
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, std::nullopt, 1, 0, 1, 0),
                    "[conv2d] expected groups >= 1, got 0");
  EXPECT_KILN_ERROR(
      kiln::conv1d(kiln::ones({2, 4, 5}), kiln::ones({6, 4, 3}), std::nullopt, 1, 0, 1, -1),
      "[conv1d] expected groups >= 1, got -1");
  EXPECT_KILN_ERROR(
      kiln::conv2d(kiln::ones({2, 8, 5, 5}), kiln::ones({6, 2, 3, 3}), std::nullopt, 1, 0, 1, 4),
      "[conv2d] expected out_channels (weight.size(0)) to be a positive multiple of "
      "groups (4), got 6");
  EXPECT_KILN_ERROR(kiln::conv2d(x, kiln::ones({2, 1, 3, 3}), std::nullopt, 1, 0, 1, 4),
                    "[conv2d] expected out_channels (weight.size(0)) to be a positive multiple of "
                    "groups (4), got 2");
  EXPECT_KILN_ERROR(kiln::conv2d(x, kiln::ones({0, 4, 3, 3})),
                    "[conv2d] expected out_channels (weight.size(0)) to be a positive multiple of "
                    "groups (1), got 0");
  EXPECT_KILN_ERROR(
      kiln::conv2d(kiln::ones({2, 5, 5, 5}), kiln::ones({6, 2, 3, 3}), std::nullopt, 1, 0, 1, 2),
      "[conv2d] expected input channels divisible by groups (2), got 5 (input of "
      "sizes [2, 5, 5, 5])");
  EXPECT_KILN_ERROR(
      kiln::conv2d(kiln::ones({2, 6, 5, 5}), kiln::ones({6, 2, 3, 3}), std::nullopt, 1, 0, 1, 2),
      "[conv2d] expected input with 4 channels (weight.size(1) * groups = 2 * 2), "
      "got 6");
}

TEST(ConvErrors, Bias) {
  Tensor x = kiln::ones({2, 4, 5, 5}), w = kiln::ones({6, 4, 3, 3});
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, kiln::ones({5})),
                    "[conv2d] expected bias of sizes [6] (out_channels), got [5]");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, kiln::ones({6, 1})),
                    "[conv2d] expected bias of sizes [6] (out_channels), got [6, 1]");
  EXPECT_KILN_ERROR(
      kiln::conv1d(kiln::ones({4, 5}), kiln::ones({6, 4, 3}), kiln::scalar_tensor(1.0)),
      "[conv1d] expected bias of sizes [6] (out_channels), got []");
}

TEST(ConvErrors, StrideDilationPadding) {
  Tensor x = kiln::ones({2, 4, 5, 5}), w = kiln::ones({6, 4, 3, 3});
  const std::nullopt_t none = std::nullopt;
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, none, 0),
                    "[conv2d] expected stride >= 1 in every spatial dim, got [0]");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, none, {1, -1}),
                    "[conv2d] expected stride >= 1 in every spatial dim, got [1, -1]");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, none, 1, 0, 0),
                    "[conv2d] expected dilation >= 1 in every spatial dim, got [0]");
  EXPECT_KILN_ERROR(kiln::conv1d(kiln::ones({2, 4, 5}), kiln::ones({6, 4, 3}), none, 1, 0, {-2}),
                    "[conv1d] expected dilation >= 1 in every spatial dim, got [-2]");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, none, 1, {0, -1}),
                    "[conv2d] expected padding >= 0 in every spatial dim, got [0, -1]");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, none, {1, 1, 1}),
                    "[conv2d] expected stride to be one int or a list of 2 (one per spatial dim), "
                    "got [1, 1, 1]");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, none, kiln::IntArrayRef()),
                    "[conv2d] expected stride to be one int or a list of 2 (one per spatial dim), "
                    "got []");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, none, 1, {0, 0, 0}),
                    "[conv2d] expected padding to be one int or a list of 2");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, none, 1, 0, {1, 1, 1}),
                    "[conv2d] expected dilation to be one int or a list of 2");
  EXPECT_KILN_ERROR(kiln::conv1d(kiln::ones({2, 4, 5}), kiln::ones({6, 4, 3}), none, {1, 2}),
                    "[conv1d] expected stride to be one int or a list of 1 (one per spatial dim), "
                    "got [1, 2]");
}

TEST(ConvErrors, PaddingString) {
  Tensor x = kiln::ones({2, 4, 5, 5}), w = kiln::ones({6, 4, 3, 3});
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, std::nullopt, 2, "same"),
                    "[conv2d] expected stride 1 with padding 'same', got [2]");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, std::nullopt, {1, 2}, "same"),
                    "[conv2d] expected stride 1 with padding 'same', got [1, 2]");
  EXPECT_KILN_ERROR(kiln::conv1d(kiln::ones({2, 4, 5}), kiln::ones({6, 4, 3}), std::nullopt, 3,
                                 std::string("same")),
                    "[conv1d] expected stride 1 with padding 'same', got [3]");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, std::nullopt, 1, "full"),
                    "[conv2d] expected padding 'valid' or 'same' (or ints), got 'full'");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, std::nullopt, 1, "Same"),
                    "[conv2d] expected padding 'valid' or 'same' (or ints), got 'Same'");
  EXPECT_KILN_ERROR(kiln::conv2d(kiln::ones({2, 4, 2, 2}), w, std::nullopt, 1, "valid"),
                    "[conv2d] expected a kernel no larger than the padded input, got a kernel "
                    "spanning [3, 3] (dilation included) over a padded input of [2, 2]");
}

TEST(ConvErrors, KernelSize) {
  Tensor x = kiln::ones({2, 4, 5, 5});
  EXPECT_KILN_ERROR(kiln::conv2d(x, kiln::ones({6, 4, 6, 6})),
                    "[conv2d] expected a kernel no larger than the padded input, got a kernel "
                    "spanning [6, 6] (dilation included) over a padded input of [5, 5]");
  EXPECT_KILN_ERROR(
      kiln::conv2d(x, kiln::ones({6, 4, 3, 3}), std::nullopt, 1, 0, {3, 1}),
      "got a kernel spanning [7, 3] (dilation included) over a padded input of [5, 5]");
  EXPECT_KILN_ERROR(
      kiln::conv2d(kiln::ones({2, 4, 0, 5}), kiln::ones({6, 4, 3, 3}), std::nullopt, 1, 1),
      "got a kernel spanning [3, 3] (dilation included) over a padded input of [2, 7]");
  EXPECT_KILN_ERROR(kiln::conv1d(kiln::ones({4, 5}), kiln::ones({6, 4, 7}), std::nullopt, 1, 0),
                    "[conv1d] expected a kernel no larger than the padded input, got a kernel "
                    "spanning [7] (dilation included) over a padded input of [5]");
  EXPECT_KILN_ERROR(kiln::conv2d(x, kiln::ones({6, 4, 0, 3})),
                    "[conv2d] expected a kernel of at least 1 element per spatial dim, got weight "
                    "of sizes [6, 4, 0, 3]");
}

TEST(ConvErrors, UndefinedAndDevices) {
  Tensor x = kiln::ones({2, 4, 5, 5}), w = kiln::ones({6, 4, 3, 3});
  EXPECT_KILN_ERROR(
      kiln::conv2d(Tensor(), w),
      "[conv2d] expected argument 'input' to be a defined tensor, got an undefined one");
  EXPECT_KILN_ERROR(kiln::conv1d(kiln::ones({4, 5}), Tensor()),
                    "[conv1d] expected argument 'weight' to be a defined tensor");
  // An undefined bias is no bias, as in PyTorch.
  EXPECT_EQ(kiln::conv2d(x, w, Tensor()).sizes(), kiln::IntArrayRef({2, 6, 3, 3}));
  // Boxed calls (call_op) name the argument.
  EXPECT_KILN_ERROR(kiln::call_op("conv2d", {x, Tensor()}),
                    "[conv2d] argument 'weight' (position 1) expected a defined Tensor");
  const TensorOptions meta = TensorOptions(kiln::kFloat32).device(kiln::Device::meta());
  // Meta beside cpu: Note [One device per op].
  EXPECT_KILN_ERROR(kiln::conv2d(kiln::empty({2, 4, 5, 5}, meta), w),
                    "[conv2d] expected all tensors on one device, got meta and cpu (an input "
                    "'weight' of [6, 4, 3, 3])");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, kiln::empty({6}, meta)),
                    "[conv2d] expected all tensors on one device, got meta and cpu (an input "
                    "'input' of [2, 4, 5, 5])");
  // On meta tensors the composite gives the shape only.
  EXPECT_EQ(kiln::conv2d(kiln::empty({2, 4, 5, 5}, meta), kiln::empty({6, 2, 3, 3}, meta),
                         kiln::empty({6}, meta), 2, 1, 1, 2)
                .sizes(),
            kiln::IntArrayRef({2, 6, 3, 3}));
}

TEST(ConvErrors, ArithmeticOverflowRaises) {
  Tensor x = kiln::ones({1, 1, 5, 5}), w = kiln::ones({1, 1, 3, 3});
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, std::nullopt, 1, 0, kHuge),
                    "[conv2d] expected sizes that fit int64");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, std::nullopt, 1, kHuge), "[conv2d] expected sizes that fit");
  EXPECT_KILN_ERROR(kiln::conv2d(x, w, std::nullopt, 1, "same", kHuge),
                    "[conv2d] expected sizes that fit int64");
  // A stride past the input is one window, as in PyTorch, whatever its size.
  EXPECT_EQ(kiln::conv2d(x, w, std::nullopt, kHuge).sizes(), kiln::IntArrayRef({1, 1, 1, 1}));
}

TEST(ConvErrors, LazyRaisesAtTheCall) {
  ASSERT_TRUE(kiln::jit::is_lazy());
  Tensor x = kiln::ones({2, 4, 5, 5}) * 2.0;  // pending
  EXPECT_KILN_ERROR(kiln::conv2d(x, kiln::ones({6, 3, 3, 3})),
                    "[conv2d] expected input with 3 channels");
  EXPECT_KILN_ERROR(kiln::conv2d(x, kiln::ones({6, 4, 3, 3}), std::nullopt, 1, "same", 1, 0),
                    "[conv2d] expected groups >= 1, got 0");
}

}  // namespace
