// Must-fail cases of the reductions, scans and sorts: each raises kiln::Error
// naming the op, on the CPU and on Meta alike.

#include <vector>

#include "tests/support/testing.h"

namespace kiln {
namespace {

Tensor floats(IntArrayRef sizes) {
  std::vector<float> v(1);
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  v.assign(static_cast<size_t>(std::max<int64_t>(n, 1)), 1.5f);
  return from_data(v.data(), sizes, kFloat32);
}

Tensor meta(IntArrayRef sizes, DType dt = kFloat32) {
  return empty(sizes, TensorOptions(dt).device(Device::meta()));
}

Stack boxed(std::string_view op, Stack args,
            const std::vector<std::pair<std::string, IValue>>& kwargs = {}) {
  return call_op(op, std::move(args), kwargs);
}

TEST(ReduceErrors, DimLists) {
  for (const Tensor& x : {floats({2, 3}), meta({2, 3})}) {
    EXPECT_KILN_ERROR(sum(x, {0, -2}), "appears multiple times");
    EXPECT_KILN_ERROR(amax(x, {1, 1}), "appears multiple times");
    EXPECT_KILN_ERROR(mean(x, {2}), "[mean] dimension out of range");
    EXPECT_KILN_ERROR(var(x, {-3}), "dimension out of range");
    EXPECT_KILN_ERROR(max(x, 2), "[max.dim] dimension out of range");
    EXPECT_KILN_ERROR(cumsum(x, -3), "[cumsum] dimension out of range");
    EXPECT_KILN_ERROR(sort(x, 5), "dimension out of range");
  }
  // A 0-dim tensor names its one dim once.
  EXPECT_KILN_ERROR(sum(floats({}), {0, -1}), "appears multiple times");
  EXPECT_KILN_ERROR(logsumexp(floats({}), {1}), "dimension out of range");
}

TEST(ReduceErrors, EmptyReductions) {
  for (const Tensor& x : {floats({0, 3}), meta({0, 3})}) {
    EXPECT_KILN_ERROR(amax(x, {0}), "[amax] expected reduction dim 0 to have non-zero size");
    EXPECT_KILN_ERROR(amin(x), "non-zero size");
    EXPECT_KILN_ERROR(max(x), "[max] expected a non-empty input");
    EXPECT_KILN_ERROR(min(x, 0), "[min.dim] expected reduction dim 0");
    EXPECT_KILN_ERROR(argmax(x), "[argmax] expected a non-empty input");
    EXPECT_KILN_ERROR(argmin(x, 0), "non-zero size");
  }
}

TEST(ReduceErrors, Dtypes) {
  Tensor i = from_data(std::vector<int32_t>{1, 2, 3}.data(), {3}, kInt32);
  Tensor h = floats({3}).to(kFloat16);
  Tensor b = from_data(std::vector<uint8_t>{1, 0, 1}.data(), {3}, kBool);
  EXPECT_KILN_ERROR(mean(i), "[mean] could not infer the output dtype");
  EXPECT_KILN_ERROR(mean(floats({3}), kInt64), "[mean] could not infer the output dtype");
  EXPECT_KILN_ERROR(var(i), "[var] expected a floating input");
  EXPECT_KILN_ERROR(std(b), "[std] expected a floating input");
  EXPECT_KILN_ERROR(norm(i), "[norm] expected a floating input");
  EXPECT_KILN_ERROR(argmax(b), "[argmax] not implemented for bool");
  EXPECT_KILN_ERROR(prod(h), "[prod] not implemented for float16");
  EXPECT_KILN_ERROR(prod(floats({3}), kBFloat16), "[prod] not implemented for bfloat16");
  EXPECT_KILN_ERROR(logsumexp(h, {0}), "[logsumexp] not implemented for float16");
  EXPECT_KILN_ERROR(cumsum(h, 0), "[cumsum] not implemented for float16");
  EXPECT_KILN_ERROR(cumprod(i, 0, kBool), "[cumprod] not implemented for bool");
  EXPECT_KILN_ERROR(topk(b, 1), "[topk] not implemented for bool");
  EXPECT_KILN_ERROR(topk(h, 1), "[topk] not implemented for float16");
  // The same refusals from Meta.
  EXPECT_KILN_ERROR(mean(meta({3}, kInt32)), "[mean] could not infer the output dtype");
  EXPECT_KILN_ERROR(var(meta({3}, kInt64)), "[var] expected a floating input");
  EXPECT_KILN_ERROR(prod(meta({3}, kFloat16)), "[prod] not implemented for float16");
  EXPECT_KILN_ERROR(argmin(meta({3}, kBool)), "[argmin] not implemented for bool");
  EXPECT_KILN_ERROR(topk(meta({3}, kFloat16), 1), "[topk] not implemented for float16");
  EXPECT_KILN_ERROR(cumsum(meta({3}, kFloat16), 0), "[cumsum] not implemented for float16");
}

TEST(ReduceErrors, LogsumexpEmptyDimListNeedsKeepdim) {
  EXPECT_KILN_ERROR(logsumexp(floats({2, 3}), {}), "[logsumexp] an empty dim list");
  EXPECT_KILN_ERROR(logsumexp(meta({2, 3}), {}), "[logsumexp] an empty dim list");
}

TEST(ReduceErrors, Topk) {
  for (const Tensor& x : {floats({2, 5}), meta({2, 5})}) {
    EXPECT_KILN_ERROR(topk(x, 6), "[topk] expected k in [0, 5], got 6");
    EXPECT_KILN_ERROR(topk(x, -1), "[topk] expected k in [0, 5], got -1");
    EXPECT_KILN_ERROR(topk(x, 3, 0), "[topk] expected k in [0, 2], got 3");
  }
  EXPECT_KILN_ERROR(topk(floats({}), 2), "[topk] expected k in [0, 1], got 2");
}

TEST(ReduceErrors, SortStableNeedsAValue) {
  EXPECT_KILN_ERROR(boxed("sort.stable", {floats({4})}, {{"stable", IValue()}}),
                    "[sort.stable] expected 'stable' to be True or False");
}

TEST(ReduceErrors, OutArguments) {
  Tensor x = floats({3, 4});
  EXPECT_KILN_ERROR(boxed("sum.IntList_out", {x, std::vector<int64_t>{0}},
                          {{"dtype", IValue(kFloat64)}, {"out", floats({4})}}),
                    "[sum.out] expected the out tensor to have dtype float64, got float32");
  EXPECT_KILN_ERROR(
      boxed("mean.out", {x, std::vector<int64_t>{0}}, {{"out", floats({4}).to(kInt64)}}),
      "[mean.out] result type float32 can't be cast to the desired output type");
  EXPECT_KILN_ERROR(
      boxed("amax.out", {x, std::vector<int64_t>{0}}, {{"out", floats({4}).to(kFloat64)}}),
      "[amax.out] expected the dtypes of input and out to match");
  EXPECT_KILN_ERROR(
      boxed("cumsum.out", {x, int64_t{0}}, {{"dtype", IValue(kFloat64)}, {"out", floats({3, 4})}}),
      "[cumsum.out] expected the out tensor to have dtype float64");
  // Outputs whose elements share memory (a broadcast view) are refused.
  Tensor overlapping = floats({1}).expand({4});
  EXPECT_KILN_ERROR(boxed("sum.IntList_out", {x, std::vector<int64_t>{0}}, {{"out", overlapping}}),
                    "[sum.out] expected an out tensor without internal overlap");
  EXPECT_KILN_ERROR(boxed("amin.out", {x, std::vector<int64_t>{0}}, {{"out", overlapping}}),
                    "internal overlap");
  EXPECT_KILN_ERROR(boxed("cumprod.out", {floats({4}), int64_t{0}}, {{"out", overlapping}}),
                    "internal overlap");
  // Devices must agree (Note [One device per op]).
  EXPECT_KILN_ERROR(boxed("sum.IntList_out", {x, std::vector<int64_t>{0}}, {{"out", meta({4})}}),
                    "[sum.IntList_out] expected all tensors on one device, got meta and cpu (an "
                    "input 'self' of [3, 4])");
}

TEST(ReduceErrors, UndefinedInput) {
  EXPECT_KILN_ERROR(sum(Tensor()), "");
  EXPECT_KILN_ERROR(sort(Tensor()), "");
}

}  // namespace
}  // namespace kiln
