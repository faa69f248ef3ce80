// Must-fail cases of the shape, indexing and range ops: each raises a
// kiln::Error that names the op, what was expected and what came.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::IValue;
using kiln::Tensor;
using kiln::TensorOptions;

Tensor idx(std::initializer_list<int64_t> v) {
  return kiln::tensor<int64_t>(v);
}

TEST(IndexErrors, IndexSelect) {
  // Index values are data: the checks run with the kernel, so run it now.
  kiln::EagerGuard eager;

  Tensor x = kiln::arange(10.0).reshape({5, 2});
  EXPECT_KILN_ERROR(kiln::index_select(x, 0, idx({1, 7})),
                    "[index_select] index 7 is out of bounds for dimension 0 with size 5");
  EXPECT_KILN_ERROR(kiln::index_select(x, 0, idx({-1})),
                    "[index_select] index -1 is out of bounds for dimension 0 with size 5");
  EXPECT_KILN_ERROR(kiln::index_select(x, 0, idx({1}).to(kiln::kInt16)),
                    "[index_select] expected an index of dtype int64 or int32, got int16");
  EXPECT_KILN_ERROR(kiln::index_select(x, 0, idx({1}).reshape({1, 1})),
                    "[index_select] expected a 0-dim or 1-D index, got one with 2 dims");
  EXPECT_KILN_ERROR(kiln::index_select(x, 2, idx({1})), "[index_select] dimension out of range");
  // PyTorch 1.13 returns uninitialized memory here; kiln refuses.
  EXPECT_KILN_ERROR(kiln::index_select(kiln::scalar_tensor(3.0), 0, idx({})),
                    "[index_select] expected one index for a 0-dim self, got 0");
  EXPECT_KILN_ERROR(kiln::index_select(kiln::scalar_tensor(3.0), 0, idx({0, 0})),
                    "[index_select] expected one index for a 0-dim self, got 2");
  Tensor out = kiln::empty({2, 2}, TensorOptions(kiln::kFloat64));
  EXPECT_KILN_ERROR(
      kiln::call_op("index_select.out", {IValue(x), IValue(int64_t{0}), IValue(idx({0, 1}))},
                    {{"out", IValue(out)}}),
      "[index_select.out] expected out of dtype float32 like self, got float64");
}

TEST(IndexErrors, GatherScatter) {
  // Index values are data: the checks run with the kernel, so run it now.
  kiln::EagerGuard eager;

  Tensor x = kiln::zeros({4, 5});
  EXPECT_KILN_ERROR(kiln::gather(x, 1, kiln::tensor<int64_t>({{5}})),
                    "[gather] index 5 is out of bounds for dimension 1 with size 5");
  EXPECT_KILN_ERROR(kiln::gather(x, 1, kiln::tensor<int32_t>({{1}})),
                    "[gather] expected an index of dtype int64, got int32");
  EXPECT_KILN_ERROR(kiln::gather(x, 1, idx({1})),
                    "[gather] expected an index with as many dims as self (2), got 1");
  EXPECT_KILN_ERROR(kiln::gather(x, 1, kiln::zeros({5, 1}, TensorOptions(kiln::kInt64))),
                    "[gather] expected index size 5 at dim 0 to be at most self's size 4");
  Tensor src = kiln::ones({1, 1});
  EXPECT_KILN_ERROR(kiln::scatter(x, 0, kiln::tensor<int64_t>({{-1}}), src),
                    "[scatter] index -1 is out of bounds for dimension 0 with size 4");
  EXPECT_KILN_ERROR(kiln::scatter(x, 0, kiln::tensor<int64_t>({{0}}), src.to(kiln::kFloat64)),
                    "[scatter] expected src of dtype float32 like self, got float64");
  EXPECT_KILN_ERROR(kiln::scatter(x, 0, kiln::tensor<int64_t>({{0, 1}}), src),
                    "to be at most src's size 1");
  EXPECT_KILN_ERROR(
      kiln::scatter(kiln::zeros({2}, TensorOptions(kiln::kInt8)), 0, idx({0}), kiln::Scalar(1000)),
      "[scatter] value 1000 cannot be converted to int8 without overflow");
  Tensor expanded = kiln::zeros({5}).expand({4, 5});
  EXPECT_KILN_ERROR(
      kiln::scatter_add_(expanded, 0, kiln::tensor<int64_t>({{0}}), src),
      "[scatter_add_] expected a target whose elements are distinct memory locations");
}

TEST(IndexErrors, IndexCopy) {
  // Index values are data: the checks run with the kernel, so run it now.
  kiln::EagerGuard eager;

  Tensor self = kiln::zeros({5, 2});
  EXPECT_KILN_ERROR(kiln::index_copy_(self, 0, idx({1, 9}), kiln::ones({2, 2})),
                    "[index_copy_] index 9 is out of bounds for dimension 0 with size 5");
  EXPECT_KILN_ERROR(kiln::index_copy(self, 0, idx({1, 3}).to(kiln::kInt32), kiln::ones({2, 2})),
                    "[index_copy] expected an index of dtype int64, got int32");
  EXPECT_KILN_ERROR(kiln::index_copy(self, 0, idx({1, 3}), kiln::ones({2, 3})),
                    "[index_copy] expected source and self to have the same slice shape");
  EXPECT_KILN_ERROR(kiln::index_copy(self, 0, idx({1, 3}), kiln::ones({3, 2})),
                    "[index_copy] expected 3 indices (source.size(0)), got 2");
  EXPECT_KILN_ERROR(kiln::index_copy(self, 0, idx({1, 3}), kiln::ones({2, 2}, kiln::kFloat64)),
                    "[index_copy] expected source of dtype float32 like self, got float64");
  Tensor expanded = kiln::zeros({2}).expand({5, 2});
  EXPECT_KILN_ERROR(kiln::index_copy_(expanded, 0, idx({1}), kiln::ones({1, 2})),
                    "[index_copy_] expected a target whose elements are distinct memory locations");
}

TEST(IndexErrors, IndexAdd) {
  kiln::EagerGuard eager;
  Tensor self = kiln::zeros({5, 2});
  EXPECT_KILN_ERROR(kiln::index_add(self, 2, idx({1}), kiln::ones({1, 2})),
                    "[index_add] dimension out of range");
  EXPECT_KILN_ERROR(kiln::index_add(self, 0, idx({1, 3}).to(kiln::kFloat32), kiln::ones({2, 2})),
                    "[index_add] expected an index of dtype int64 or int32, got float32");
  EXPECT_KILN_ERROR(kiln::index_add(self, 0, idx({1, 3}).reshape({2, 1}), kiln::ones({2, 2})),
                    "[index_add] expected a 0-dim or 1-D index, got one with 2 dims");
  EXPECT_KILN_ERROR(kiln::index_add(self, 0, idx({1, 3}), kiln::ones({2, 3})),
                    "[index_add] expected source and self to have the same slice shape");
  EXPECT_KILN_ERROR(kiln::index_add(self, 0, idx({1, 3}), kiln::ones({3, 2})),
                    "[index_add] expected 3 indices (source.size(0)), got 2");
  EXPECT_KILN_ERROR(kiln::index_add(self, 0, idx({1}), kiln::ones({1, 2}, kiln::kFloat64)),
                    "[index_add] expected source of dtype float32 like self, got float64");
  // alpha must fit self's dtype, as add's alpha (it was wrapped or saturated).
  EXPECT_KILN_ERROR(kiln::index_add(kiln::zeros({5, 2}, kiln::kInt8), 0, idx({1}),
                                    kiln::ones({1, 2}, kiln::kInt8), 1000),
                    "[index_add] value 1000 cannot be converted to int8 without overflow");
  EXPECT_KILN_ERROR(kiln::index_add_(self, 0, idx({1}), kiln::ones({1, 2}), 1e300),
                    "[index_add_] value 1e+300 cannot be converted to float32 without overflow");
  EXPECT_KILN_ERROR(kiln::index_add(kiln::zeros({5, 2}, kiln::kInt64), 0, idx({1}),
                                    kiln::ones({1, 2}, kiln::kInt64), NAN),
                    "cannot be converted to int64 without overflow");
  EXPECT_TENSOR_CLOSE(self, kiln::zeros({5, 2}));
  // Index values out of range name index_add, not the scatter_add it runs
  // (Note [Composite ops name themselves]), and leave self as it was.
  EXPECT_KILN_ERROR(kiln::index_add(self, 0, idx({1, 9}), kiln::ones({2, 2})),
                    "[index_add] index 9 is out of bounds for dimension 0 with size 5");
  EXPECT_KILN_ERROR(kiln::index_add_(self, 0, idx({-1}), kiln::ones({1, 2})),
                    "[index_add_] index -1 is out of bounds for dimension 0 with size 5");
  EXPECT_KILN_ERROR(kiln::index_add_(self, 1, idx({0, 2}).to(kiln::kInt32), kiln::ones({5, 2})),
                    "[index_add_] index 2 is out of bounds for dimension 1 with size 2");
  EXPECT_KILN_ERROR(kiln::index_add(self, 0, idx({1, 2, 7}).narrow(0, 1, 2), kiln::ones({2, 2})),
                    "[index_add] index 7 is out of bounds for dimension 0 with size 5");
  EXPECT_KILN_ERROR(kiln::index_add(kiln::zeros({}), 0, idx({1}), kiln::ones({})),
                    "[index_add] index 1 is out of bounds for dimension 0 with size 1");
  // In place: a target with repeated elements, or a source or index in its memory.
  Tensor expanded = kiln::zeros({2}).expand({5, 2});
  EXPECT_KILN_ERROR(kiln::index_add_(expanded, 0, idx({1}), kiln::ones({1, 2})),
                    "[index_add_] expected a target whose elements are distinct memory locations");
  Tensor whole = kiln::zeros({4, 2});
  Tensor part = whole.narrow(0, 0, 2);
  EXPECT_KILN_ERROR(kiln::index_add_(part, 0, idx({0, 1}), whole.narrow(0, 1, 2)), "[index_add_]");
  Tensor as_index = kiln::zeros({4}, kiln::kInt64);
  EXPECT_KILN_ERROR(kiln::index_add_(as_index, 0, as_index, kiln::ones({4}, kiln::kInt64)),
                    "[index_add_]");
}

TEST(IndexErrors, OneHotUnbindRepeatInterleave) {
  kiln::EagerGuard eager;
  EXPECT_KILN_ERROR(kiln::one_hot(idx({0, 1}).to(kiln::kInt32), 3),
                    "[one_hot] expected self (the class indices) of dtype int64, got int32");
  EXPECT_KILN_ERROR(kiln::one_hot(idx({0, 1}), 0), "[one_hot] expected num_classes >= 1 or -1");
  EXPECT_KILN_ERROR(kiln::one_hot(idx({0, -2})), "[one_hot] expected class indices >= 0, got -2");
  EXPECT_KILN_ERROR(kiln::one_hot(kiln::zeros({0}, kiln::kInt64)),
                    "[one_hot] expected num_classes for an empty self");
  // Class indices out of range name one_hot, not the scatter it runs.
  EXPECT_KILN_ERROR(kiln::one_hot(idx({0, 3}), 3),
                    "[one_hot] expected class indices in [0, 3) (num_classes 3), got 3");
  EXPECT_KILN_ERROR(kiln::one_hot(idx({0, -1}), 3),
                    "[one_hot] expected class indices in [0, 3) (num_classes 3), got -1");
  // The result's size is checked by the zeros it is made of, under one_hot's
  // name; the largest index + 1 used to overflow.
  EXPECT_KILN_ERROR(kiln::one_hot(idx({0}), INT64_MAX),
                    "[one_hot] expected a size whose bytes fit in int64, got [1, "
                    "9223372036854775807] of int64");
  EXPECT_KILN_ERROR(kiln::one_hot(idx({INT64_MAX})),
                    "[one_hot] expected a largest class index below 2^63 - 1 (num_classes is it + "
                    "1), got 9223372036854775807");
  EXPECT_KILN_ERROR(kiln::unbind(kiln::zeros({})),
                    "[unbind] expected a tensor with at least 1 dim");
  EXPECT_KILN_ERROR(kiln::unbind(kiln::zeros({2, 3}), 2), "[unbind] dimension out of range");
  EXPECT_KILN_ERROR(kiln::repeat_interleave(kiln::zeros({3}), -1),
                    "[repeat_interleave] expected repeats >= 0, got -1");
  EXPECT_KILN_ERROR(kiln::repeat_interleave(kiln::zeros({3}), 2, 1),
                    "[repeat_interleave] dimension out of range");
  EXPECT_KILN_ERROR(kiln::repeat_interleave(kiln::zeros({}), 2, 0),
                    "[repeat_interleave] expected self with at least 1 dim for dim 0");
}

// Note [Composite ops name themselves], lazily: index values on the host
// are checked at the call, before anything is recorded; pending ones reach
// the inner op, whose check names the composite when the trace runs.
TEST(IndexErrors, CompositesNameThemselvesLazily) {
  Tensor self = kiln::zeros({5, 2});
  EXPECT_KILN_ERROR(kiln::index_add(self, 0, idx({1, 9}), kiln::ones({2, 2})),
                    "[index_add] index 9 is out of bounds for dimension 0 with size 5");
  EXPECT_KILN_ERROR(kiln::index_add_(self, 0, idx({5}), kiln::ones({1, 2})),
                    "[index_add_] index 5 is out of bounds for dimension 0 with size 5");
  EXPECT_KILN_ERROR(kiln::one_hot(idx({4}), 2),
                    "[one_hot] expected class indices in [0, 2) (num_classes 2), got 4");
  EXPECT_KILN_ERROR(kiln::index_put_(self, {idx({7})}, kiln::ones({2})),
                    "[index_put_] index 7 is out of bounds for dimension 0 with size 5");
  EXPECT_EQ(kiln::sum(self).item<float>(), 0.f);  // nothing written
  Tensor pending = idx({1, 9}) + 0;
  ASSERT_TRUE(pending.is_pending());
  EXPECT_KILN_ERROR(kiln::index_add(self, 0, pending, kiln::ones({2, 2})).sum().item<float>(),
                    "[index_add] index 9 is out of bounds for dimension 0 with size 5");
}

TEST(IndexErrors, MaskedFill) {
  Tensor x = kiln::zeros({3, 4});
  // PyTorch 1.13 still takes uint8 masks (deprecated); kiln takes bool only.
  EXPECT_KILN_ERROR(kiln::masked_fill(x, kiln::ones({3, 4}, kiln::kUInt8), 1.0),
                    "[masked_fill] expected a mask of dtype bool, got uint8");
  Tensor row = kiln::zeros({4});
  EXPECT_KILN_ERROR(
      kiln::masked_fill_(row, kiln::ones({3, 4}, kiln::kBool), 1.0),
      "[masked_fill_] output with shape [4] doesn't match the broadcast shape [3, 4]");
  EXPECT_KILN_ERROR(kiln::masked_fill(x, kiln::ones({3}, kiln::kBool), 1.0),
                    "[masked_fill] cannot broadcast");
  EXPECT_KILN_ERROR(kiln::masked_fill(x.to(kiln::kInt8), kiln::ones({3, 4}, kiln::kBool), 500),
                    "[masked_fill] value 500 cannot be converted to int8 without overflow");
  EXPECT_KILN_ERROR(kiln::masked_fill(x, kiln::ones({3, 4}, kiln::kBool), kiln::ones({1})),
                    "[masked_fill] expected a 0-dim value tensor, got one with 1 dims");
}

TEST(IndexErrors, CatStack) {
  Tensor a = kiln::zeros({2, 3});
  EXPECT_KILN_ERROR(kiln::cat({kiln::scalar_tensor(1.0)}, 0),
                    "[cat] expected tensors with at least 1 dim, got a 0-dim tensor at position 0");
  EXPECT_KILN_ERROR(kiln::cat({}, 0), "[cat] expected a non-empty list of tensors");
  EXPECT_KILN_ERROR(kiln::cat({a, kiln::zeros({2, 3, 1})}, 0),
                    "[cat] expected tensor 1 to have 2 dims like tensor 0, got 3 dims");
  EXPECT_KILN_ERROR(kiln::cat({a, a, kiln::zeros({2, 4})}, 0),
                    "[cat] expected tensor 2 to have size 3 at dim 1 like tensor 0, got 4");
  EXPECT_KILN_ERROR(kiln::cat({a, a}, 2), "[cat] dimension out of range");
  Tensor out = kiln::empty({4, 3}, kiln::kInt64);
  EXPECT_KILN_ERROR(
      kiln::call_op("cat.out", {IValue(std::vector<Tensor>{a, a}), IValue(int64_t{0})},
                    {{"out", IValue(out)}}),
      "[cat.out] result type float32 can't be cast to the desired output type int64");
  EXPECT_KILN_ERROR(kiln::stack({a, kiln::zeros({3, 2})}, 0),
                    "[stack] expected tensors of equal sizes, got [2, 3] at entry 0 and [3, 2] at "
                    "entry 1");
  EXPECT_KILN_ERROR(kiln::stack({}, 0), "[stack] expected a non-empty list of tensors");
  EXPECT_KILN_ERROR(kiln::stack({a}, 3), "[stack] dimension out of range");
}

TEST(IndexErrors, ShapeOps) {
  Tensor x = kiln::zeros({2, 3});
  EXPECT_KILN_ERROR(kiln::pad(x, {1, 1}, "symmetric"),
                    "[pad] expected mode 'constant', 'reflect', 'replicate' or 'circular', got "
                    "'symmetric'");
  EXPECT_KILN_ERROR(kiln::pad(x, {1}), "[pad] expected an even number of pads, got 1");
  EXPECT_KILN_ERROR(kiln::pad(x, {1, 1, 1, 1, 1, 1}), "[pad] expected at most 2 pads per dim");
  // constant_pad_nd's checks, under pad's name (Note [Composite ops name themselves]).
  EXPECT_KILN_ERROR(kiln::pad(x, {-2, -2}),
                    "[pad] expected negative pads to crop at most the 3 elements");
  EXPECT_KILN_ERROR(kiln::pad(x, {-1, -2, 1, 0}),
                    "[pad] expected a positive output size at dim 1, got 0");
  EXPECT_KILN_ERROR(kiln::pad(x.to(kiln::kInt8), {1, 1}, "constant", 300.0),
                    "[pad] value 300 cannot be converted to int8 without overflow");
  EXPECT_KILN_ERROR(kiln::call_op("constant_pad_nd", {x, std::vector<int64_t>{-2, -2}}),
                    "[constant_pad_nd] expected negative pads to crop at most the 3 elements");
  EXPECT_KILN_ERROR(kiln::repeat(x, {2}),
                    "[repeat] expected at least as many repeats as self has dims (2), got [2]");
  EXPECT_KILN_ERROR(kiln::repeat(x, {2, -1}), "[repeat] expected non-negative sizes, got [4, -3]");
  EXPECT_KILN_ERROR(kiln::roll(x, {1, 1}, {1}),
                    "[roll] expected as many shifts as dims, got 2 shifts and 1 dims");
  EXPECT_KILN_ERROR(kiln::roll(x, {}, {}), "[roll] expected at least one shift, got none");
  EXPECT_KILN_ERROR(kiln::roll(kiln::scalar_tensor(1.0), {1}, {0}),
                    "[roll] expected a tensor with at least 1 dim to roll along dims [0], got a "
                    "0-dim tensor");
  EXPECT_KILN_ERROR(kiln::flip(x, {0, -2}), "[flip] dim 0 appears multiple times");
  EXPECT_KILN_ERROR(kiln::tril(kiln::zeros({3})),
                    "[tril] expected a tensor with at least 2 dims, got 1 dims");
  // A 0-dim tensor's dims are -1 and 0, for flatten as for every op (PyTorch
  // raises for these too); flatten(0, -1) and flatten(-1, 0) give [1].
  Tensor s = kiln::scalar_tensor(3.0);
  EXPECT_KILN_ERROR(s.flatten(0, 1),
                    "[flatten] dimension out of range: expected a dim in [-1, 0], got 1");
  EXPECT_KILN_ERROR(s.flatten(5, 7), "[flatten] dimension out of range");
  EXPECT_KILN_ERROR(s.flatten(-3, 2), "[flatten] dimension out of range");
  EXPECT_EQ(s.flatten(0, -1).sizes(), (std::vector<int64_t>{1}));
  EXPECT_EQ(s.flatten(-1, 0).sizes(), (std::vector<int64_t>{1}));
}

TEST(IndexErrors, Ranges) {
  EXPECT_KILN_ERROR(kiln::arange(1, 10, 0), "[arange] expected a nonzero step, got 0");
  EXPECT_KILN_ERROR(kiln::arange(1, 10, -1),
                    "[arange] expected a step whose sign leads from start to end, got start 1, "
                    "end 10, step -1");
  EXPECT_KILN_ERROR(kiln::arange(1, INFINITY, 1), "[arange] expected finite bounds, got 1 -> inf");
  EXPECT_KILN_ERROR(kiln::arange(5, TensorOptions(kiln::kBool)),
                    "[arange] expected a numeric dtype, got bool");
  EXPECT_KILN_ERROR(kiln::arange(0, 5, 0.5, TensorOptions(kiln::kInt32)),
                    "[arange] expected a nonzero step, got 0.5");
  EXPECT_KILN_ERROR(kiln::linspace(0, 10, -1),
                    "[linspace] expected a non-negative number of steps, got -1");
  EXPECT_KILN_ERROR(kiln::linspace(0, 300, 4, TensorOptions(kiln::kInt8)),
                    "[linspace] value 300 cannot be converted to int8 without overflow");
  // int64 linspace interpolates in double, as PyTorch does; an end at or
  // above 2^63 - 512 rounds to 2^63 there, which int64 cannot hold
  // (PyTorch 1.13 stores INT64_MIN in its place).
  const TensorOptions i64(kiln::kInt64);
  const int64_t max = std::numeric_limits<int64_t>::max(),
                min = std::numeric_limits<int64_t>::min();
  EXPECT_KILN_ERROR(kiln::linspace(0, max, 5, i64),
                    "[linspace] expected start and end below 2^63 - 512 for int64 (the values "
                    "are computed in double, where larger ones round to 2^63), got end "
                    "9223372036854775807");
  EXPECT_KILN_ERROR(kiln::linspace(max, min, 20, i64), "got start 9223372036854775807");
  EXPECT_KILN_ERROR(kiln::linspace(max, max, 3, i64), "got start 9223372036854775807");
  EXPECT_KILN_ERROR(kiln::linspace(min, max, 2, i64), "got end 9223372036854775807");
  EXPECT_KILN_ERROR(kiln::linspace(0, max - 511, 2, i64), "got end 9223372036854775296");
  EXPECT_KILN_ERROR(
      kiln::linspace(0, max, 5, TensorOptions(kiln::kInt64).device(kiln::Device::meta())),
      "got end 9223372036854775807");
  // Below those bounds, a vector lane's rounding errors may still add up to
  // 2^63 (PyTorch 1.13: INT64_MIN at index 31 here).
  EXPECT_KILN_ERROR(kiln::linspace(min, 9223372036854775093, 32, i64).tolist<int64_t>(),
                    "[linspace] expected values that fit int64, got 9.2233720368547758e+18 at "
                    "index 31 (interpolated in double from start -9223372036854775808 to end "
                    "9223372036854775093 in 32 steps");
  EXPECT_KILN_ERROR(kiln::eye(-1), "[eye] expected n >= 0, got -1");
  EXPECT_KILN_ERROR(kiln::eye(2, -1), "[eye] expected m >= 0, got -1");
  EXPECT_KILN_ERROR(kiln::eye(2, TensorOptions(kiln::kBFloat16)),
                    "[eye] expected a dtype other than bfloat16");
}

TEST(IndexErrors, SizesThatOverflow) {
  EXPECT_KILN_ERROR(kiln::arange(int64_t{1} << 61),
                    "[arange] expected a size whose bytes fit in int64");
  EXPECT_KILN_ERROR(kiln::eye(int64_t{1} << 40), "[eye] expected");
  EXPECT_KILN_ERROR(kiln::repeat(kiln::zeros({2}), {int64_t{1} << 62}),
                    "[repeat] expected sizes that fit int64");
  EXPECT_KILN_ERROR(kiln::pad(kiln::zeros({2}), {0, INT64_MAX}),
                    "[pad] expected sizes that fit int64");
  // Meta tensors' bytes must fit too (Note [Checked size arithmetic]): 2^60 floats do.
  Tensor huge = kiln::empty({int64_t{1} << 60}, TensorOptions(kiln::Device::meta()));
  EXPECT_KILN_ERROR(kiln::cat({huge, huge, huge, huge, huge, huge, huge, huge}, 0),
                    "[cat] expected sizes that fit int64");
}

}  // namespace
