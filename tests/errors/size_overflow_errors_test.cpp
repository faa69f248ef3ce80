// Must-fail cases of size arithmetic (Note [Checked size arithmetic]): sizes,
// element counts, strides, storage extents and byte counts that do not fit
// int64 raise kiln::Error naming the op, in eager and lazy mode, on the CPU
// and on meta tensors, instead of allocating a short buffer, wrapping an
// offset or reading garbage.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/modes.h"
#include "tests/support/testing.h"

namespace {

using kiln::Device;
using kiln::Tensor;
using kiln::TensorOptions;

constexpr int64_t k62 = int64_t{1} << 62;
constexpr int64_t k61 = int64_t{1} << 61;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(SizeOverflowErrors, FactoryBytes) {
  kiln::testing::in_eager_lazy_and_meta([](Device d) {
    TensorOptions f32 = TensorOptions(kiln::kFloat32).device(d);
    TensorOptions f64 = TensorOptions(kiln::kFloat64).device(d);
    // The element count fits; times the item size it does not.
    EXPECT_KILN_ERROR(
        kiln::zeros({k62 + 16}, f32),
        "[zeros] expected a size whose bytes fit in int64, got [4611686018427387920]");
    EXPECT_KILN_ERROR(kiln::ones({k61}, f64), "[ones] expected a size whose bytes fit in int64");
    EXPECT_KILN_ERROR(kiln::empty({k62}, f32), "[empty] expected a size whose bytes fit in int64");
    EXPECT_KILN_ERROR(kiln::full({k62 + 16}, 1.5, f32), "[full] expected a size whose bytes fit");
    EXPECT_KILN_ERROR(kiln::empty({2, k61}, f32), "[empty] expected a size whose bytes fit");
    EXPECT_KILN_ERROR(kiln::empty({kMax}, TensorOptions(kiln::kInt16).device(d)),
                      "[empty] expected a size whose bytes fit");
    EXPECT_KILN_ERROR(kiln::empty_strided({k62}, {1}, f32),
                      "[empty_strided] expected a size whose bytes fit");
    if (d.is_meta()) return;  // random ops have no meta device argument path below
    EXPECT_KILN_ERROR(kiln::randn({k62 + 16}), "[randn] expected a size whose bytes fit");
    EXPECT_KILN_ERROR(kiln::rand({k62}), "[rand] expected a size whose bytes fit");
    EXPECT_KILN_ERROR(kiln::randint(5, {k61}), "[randint] expected a size whose bytes fit");
  });
}

TEST(SizeOverflowErrors, FactoryElementCount) {
  kiln::testing::in_eager_lazy_and_meta([](Device d) {
    TensorOptions opt = TensorOptions(kiln::kUInt8).device(d);
    EXPECT_KILN_ERROR(kiln::empty({k62, 4}, opt),
                      "[empty] expected a size whose element count fits in int64");
    EXPECT_KILN_ERROR(kiln::zeros({kMax, 2}, opt), "[zeros] expected a size whose element count");
    // An empty tensor still has strides: [0, 2^62, 2^62] would need a stride of 2^124.
    EXPECT_KILN_ERROR(kiln::empty({0, k62, k62}, opt), "[empty] expected a size whose element");
    EXPECT_KILN_ERROR(kiln::empty({-1}, opt), "[empty] expected non-negative sizes, got [-1]");
    EXPECT_KILN_ERROR(kiln::ones({3, -5}, opt), "[ones] expected non-negative sizes");
  });
}

TEST(SizeOverflowErrors, EmptyThenFill) {
  // Used to hand out a null buffer that fill_ then stored through.
  kiln::testing::in_eager_lazy_and_meta([](Device d) {
    EXPECT_KILN_ERROR(kiln::empty({k62}, TensorOptions(d)).fill_(1), "[empty]");
  });
}

TEST(SizeOverflowErrors, StridedExtent) {
  kiln::testing::in_eager_lazy_and_meta([](Device d) {
    TensorOptions opt(d);
    // The offsets (n - 1) * stride wrap.
    EXPECT_KILN_ERROR(kiln::empty_strided({2, 2}, {k62, k62}, opt),
                      "[empty_strided] expected sizes and strides whose storage extent fits");
    EXPECT_KILN_ERROR(kiln::empty_strided({3}, {kMax}, opt), "[empty_strided] expected sizes");
    // Extent fits in elements, not in bytes.
    EXPECT_KILN_ERROR(kiln::empty_strided({2}, {k61}, opt),
                      "[empty_strided] expected sizes and strides whose storage extent fits");
    EXPECT_KILN_ERROR(kiln::empty_strided({2}, {-1}, opt),
                      "[empty_strided] expected non-negative strides");
    EXPECT_KILN_ERROR(kiln::empty_strided({2}, {1, 1}, opt), "[empty_strided] expected as many");
  });
}

TEST(SizeOverflowErrors, AsStrided) {
  kiln::testing::in_eager_lazy_and_meta([](Device d) {
    Tensor t = kiln::ones({4}, TensorOptions(d));
    // Used to return {1, 1, 1}: the offsets wrapped back into the storage.
    EXPECT_KILN_ERROR(t.as_strided({3}, {k62}), "[as_strided] expected sizes and strides");
    EXPECT_KILN_ERROR(t.as_strided({2, 2}, {kMax, 1}), "[as_strided]");
    EXPECT_KILN_ERROR(t.as_strided({2}, {1}, kMax), "[as_strided]");
    EXPECT_KILN_ERROR(t.as_strided({2}, {1}, k62), "[as_strided]");
    EXPECT_KILN_ERROR(t.as_strided({k62, 4}, {0, 0}), "[as_strided] expected a size whose");
    EXPECT_KILN_ERROR(t.as_strided({2}, {-1}), "[as_strided] expected non-negative strides");
    EXPECT_KILN_ERROR(t.as_strided({2}, {1}, -1), "[as_strided] expected a non-negative");
    if (!d.is_meta()) {
      EXPECT_KILN_ERROR(t.as_strided({2}, {4}), "[as_strided] sizes [2], strides [4]");
    }
  });
}

TEST(SizeOverflowErrors, Views) {
  kiln::testing::in_eager_lazy_and_meta([](Device d) {
    Tensor t = kiln::ones({4}, TensorOptions(d));
    Tensor e = kiln::ones({0}, TensorOptions(d));
    EXPECT_KILN_ERROR(t.expand({k62, k62, 4}), "[expand] expected a size whose element count");
    EXPECT_KILN_ERROR(t.expand({kMax, 4}), "[expand] expected a size whose element count");
    // Zero elements, but the known product overflows first.
    EXPECT_KILN_ERROR(e.reshape({k62, k62, 0}), "[reshape] expected a size whose element count");
    EXPECT_KILN_ERROR(e.view({k62, 4, 0}), "[view] expected a size whose element count");
    EXPECT_KILN_ERROR(e.reshape({-1, k62, k62}), "[reshape]");
    EXPECT_KILN_ERROR(t.reshape({k62, k62}), "[reshape]");
    EXPECT_KILN_ERROR(t.unflatten(0, {k62, -1}), "[unflatten]");
    EXPECT_KILN_ERROR(e.unflatten(0, {k62, k62, 0}), "[unflatten] expected a size whose element");
    // Views of valid tensors stay valid: a huge step or slice bound clamps.
    Tensor s = t.slice(0, 0, kMax, kMax);
    EXPECT_EQ(s.numel(), 1);
    Tensor m = kiln::ones({4, 4}, TensorOptions(d)).slice(1, k62, kMax, k62);
    EXPECT_EQ(m.numel(), 0);
    EXPECT_EQ(t.narrow(0, 2, 2).numel(), 2);
    EXPECT_KILN_ERROR(t.narrow(0, 2, kMax), "[narrow]");
    EXPECT_KILN_ERROR(t.narrow(0, kMax, 1), "[narrow]");
    EXPECT_KILN_ERROR(t.select(0, kMax), "[select]");
    EXPECT_KILN_ERROR(t.select(0, std::numeric_limits<int64_t>::min()), "[select]");
  });
}

TEST(SizeOverflowErrors, DerivedShapes) {
  kiln::testing::in_eager_lazy_and_meta([](Device d) {
    Tensor t = kiln::ones({4}, TensorOptions(d));
    Tensor big = kiln::ones({1}, TensorOptions(d)).expand({k61});
    // Ops whose output size is a sum or product of user sizes.
    EXPECT_KILN_ERROR(kiln::repeat(t, {k62}), "[repeat]");
    EXPECT_KILN_ERROR(kiln::repeat(t, {k62, k62}), "[repeat]");
    EXPECT_KILN_ERROR(kiln::pad(t, {kMax, 1}), "[pad] expected sizes that fit int64");
    EXPECT_KILN_ERROR(kiln::call_op("constant_pad_nd", {t, std::vector<int64_t>{k62, 0}}),
                      "[constant_pad_nd]");
    EXPECT_KILN_ERROR(kiln::cat({big, big, big, big}), "[cat]");
    EXPECT_KILN_ERROR(kiln::stack({big, big}), "[stack] expected a size whose bytes fit in int64");
    EXPECT_KILN_ERROR(kiln::matmul(kiln::ones({1, 1}, TensorOptions(d)).expand({k61, 1}),
                                   kiln::ones({1, 1}, TensorOptions(d)).expand({1, k61})),
                      "expected a size whose");
    EXPECT_KILN_ERROR(kiln::outer(big, big), "expected a size whose");
    // Broadcasting two valid tensors whose result does not fit.
    Tensor col = kiln::ones({1, 1}, TensorOptions(d)).expand({int64_t{1} << 40, 1});
    Tensor row = kiln::ones({1, 1}, TensorOptions(d)).expand({1, int64_t{1} << 40});
    EXPECT_KILN_ERROR(kiln::add(col, row), "expected a size whose element count fits in int64");
    EXPECT_KILN_ERROR(kiln::mul(col, row), "expected a size whose element count fits");
    Tensor cond =
        kiln::ones({1, 1}, TensorOptions(kiln::kBool).device(d)).expand({1, int64_t{1} << 40});
    EXPECT_KILN_ERROR(kiln::where(cond, col, row), "expected a size whose");
    EXPECT_KILN_ERROR(big.contiguous(), "expected a size whose bytes fit");
    EXPECT_KILN_ERROR(kiln::add(big, 1), "expected a size whose bytes fit");
    EXPECT_KILN_ERROR(kiln::arange(0, k62, 1, TensorOptions(d)), "[arange]");
    EXPECT_KILN_ERROR(kiln::eye(k62, 4, TensorOptions(d)), "[eye]");
    EXPECT_KILN_ERROR(kiln::linspace(0, 1, k62, TensorOptions(d)), "[linspace]");
  });
}

TEST(SizeOverflowErrors, FromBlob) {
  float data[4] = {1, 2, 3, 4};
  EXPECT_KILN_ERROR(kiln::from_blob(data, {k62, 4}, kiln::kFloat32), "[from_blob]");
  EXPECT_KILN_ERROR(kiln::from_blob(data, {k62}, kiln::kFloat32),
                    "[from_blob] expected a size whose bytes fit");
  EXPECT_KILN_ERROR(kiln::from_blob(data, {2, 2}, {k62, k62}, kiln::kFloat32),
                    "[from_blob] expected sizes and strides whose storage extent fits");
  EXPECT_KILN_ERROR(kiln::from_data(data, {k62}, kiln::kFloat32), "[from_data]");
}

// CUDA factories and views check before they allocate (GPU machine only).
TEST(SizeOverflowErrors, Cuda) {
  KILN_REQUIRE_CUDA();
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    const TensorOptions f32 = TensorOptions(kiln::kFloat32).device(Device::cuda());
    EXPECT_KILN_ERROR(kiln::zeros({k62 + 16}, f32), "[zeros] expected a size whose bytes fit");
    EXPECT_KILN_ERROR(kiln::full({k62}, 2.0, f32), "[full] expected a size whose bytes fit");
    EXPECT_KILN_ERROR(kiln::empty_strided({2, 2}, {k62, k62}, f32),
                      "[empty_strided] expected sizes and strides whose storage extent fits");
    Tensor t = kiln::ones({4}, f32);
    EXPECT_KILN_ERROR(t.as_strided({3}, {k62}), "[as_strided] expected sizes and strides");
    EXPECT_KILN_ERROR(t.expand({k62, k62, 4}), "[expand] expected a size whose element count");
    Tensor col = kiln::ones({1, 1}, f32).expand({int64_t{1} << 40, 1});
    Tensor row = kiln::ones({1, 1}, f32).expand({1, int64_t{1} << 40});
    EXPECT_KILN_ERROR(kiln::add(col, row), "expected a size whose element count fits in int64");
    kiln::sync();
  }
}

}  // namespace

// A view's stride on a dim of one element can be anything (slice with a
// step near int64's limit); copying it must not multiply that stride into
// bytes (Note in TensorIter::reorder_and_coalesce). Found by CallOpFuzz.
TEST(SizeOverflowErrors, HugeStrideOfASingleElementDim) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    Tensor x = kiln::arange(48, TensorOptions(kiln::kFloat32)).reshape({4, 3, 4});
    Tensor s = x.slice(2, 1, std::nullopt, int64_t{3074457345618258602});
    EXPECT_EQ(s.sizes(), kiln::IntArrayRef({4, 3, 1}));
    EXPECT_TENSOR_CLOSE(kiln::clone(s), kiln::clone(x.slice(2, 1, 2)));
    EXPECT_TENSOR_CLOSE(s + 1.0, x.slice(2, 1, 2) + 1.0);
  }
}

// Note [Uninitialized bools]: empty and empty_strided give bool tensors of
// false, never bytes other than 0 and 1 (loading one as bool is undefined;
// found by CallOpFuzz under the sanitizers).
TEST(SizeOverflowErrors, EmptyBoolTensorsAreFalse) {
  Tensor e = kiln::empty({4, 6, 3}, TensorOptions(kiln::kBool));
  Tensor s = kiln::empty_strided({4, 6, 3}, {4, 4, 1}, TensorOptions(kiln::kBool));
  for (const Tensor& t : {e, s}) {
    EXPECT_EQ(kiln::sum(t.to(kiln::kInt64)).item<int64_t>(), 0);
    EXPECT_FALSE(kiln::any(t).item<bool>());
    EXPECT_EQ(kiln::clone(t).sizes(), t.sizes());
  }
}
