// Shape and indexing kernels beyond what the oracle covers: meta propagation,
// in-place writes through views (a KV cache), the parallel copy paths on large
// inputs, aliasing rules, and reference loops on random data.

#include <gtest/gtest.h>

#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::IValue;
using kiln::Scalar;
using kiln::Tensor;
using kiln::TensorOptions;
using kiln::testing::random_tensor;

const kiln::Device kMeta = kiln::Device::meta();

Tensor call(const char* op, kiln::Stack args, const Tensor& out = Tensor()) {
  std::vector<std::pair<std::string, IValue>> kwargs;
  if (out.defined()) kwargs.emplace_back("out", IValue(out));
  return kiln::call_op(op, std::move(args), kwargs).at(0).to_tensor();
}

// int64 values in [0, high) from kiln's generator.
Tensor random_index(kiln::IntArrayRef sizes, int64_t high, uint64_t seed) {
  kiln::manual_seed(seed);
  return (kiln::rand(sizes, kiln::kFloat64) * static_cast<double>(high)).to(kiln::kInt64);
}

Tensor meta(kiln::IntArrayRef sizes, kiln::DType dtype = kiln::kFloat32) {
  return kiln::empty(sizes, TensorOptions(dtype).device(kMeta));
}

void expect_meta(const Tensor& t, std::vector<int64_t> sizes, kiln::DType dtype) {
  EXPECT_TRUE(t.is_meta());
  EXPECT_EQ(t.sizes().vec(), sizes);
  EXPECT_EQ(t.dtype(), dtype);
}

TEST(ShapeIndexMeta, ShapesAndDtypesWithoutData) {
  using namespace kiln;
  expect_meta(cat({meta({2, 3}, kInt32), meta({0}, kFloat64), meta({4, 3}, kFloat16)}, 0), {6, 3},
              kFloat64);
  expect_meta(stack({meta({2, 3}), meta({2, 3})}, -1), {2, 3, 2}, kFloat32);
  expect_meta(index_select(meta({5, 4}), 1, meta({7}, kInt64)), {5, 7}, kFloat32);
  expect_meta(gather(meta({5, 4}, kInt8), 0, meta({9, 2}, kInt64)), {9, 2}, kInt8);
  expect_meta(scatter_add(meta({5, 4}), 0, meta({9, 2}, kInt64), meta({9, 3})), {5, 4}, kFloat32);
  expect_meta(index_copy(meta({5, 4}), 0, meta({2}, kInt64), meta({2, 4})), {5, 4}, kFloat32);
  expect_meta(masked_fill(meta({4}), meta({3, 4}, kBool), 1.0), {3, 4}, kFloat32);
  expect_meta(tril(meta({2, 3, 4}, kBool), 1), {2, 3, 4}, kBool);
  expect_meta(repeat(meta({2, 3}), {2, 1, 3}), {2, 2, 9}, kFloat32);
  expect_meta(roll(meta({2, 3}), {1, 2}, {0, 1}), {2, 3}, kFloat32);
  expect_meta(flip(meta({2, 3}), {0}), {2, 3}, kFloat32);
  expect_meta(pad(meta({2, 3}), {1, -1, 2, 2}), {6, 3}, kFloat32);
  expect_meta(arange(0, 1, 0.1, TensorOptions(kMeta)), {10}, kFloat32);
  expect_meta(arange(5, TensorOptions(kMeta)), {5}, kInt64);
  expect_meta(linspace(0, 1, 7, TensorOptions(kFloat16).device(kMeta)), {7}, kFloat16);
  expect_meta(eye(2, 3, TensorOptions(kMeta)), {2, 3}, kFloat32);
  // Shape errors are found without data.
  EXPECT_KILN_ERROR(cat({meta({2, 3}), meta({2, 4})}, 0), "[cat]");
  EXPECT_KILN_ERROR(gather(meta({5, 4}), 0, meta({9}, kInt64)), "[gather]");
  EXPECT_KILN_ERROR(masked_fill(meta({4}), meta({4}, kUInt8), 1.0), "bool");
}

TEST(ShapeIndex, IndexCopyIntoKvCacheView) {
  // A cache stored [batch, positions, heads, dim], used as [batch, heads, positions, dim].
  Tensor storage = kiln::zeros({2, 8, 3, 4});
  Tensor cache = storage.transpose(1, 2);
  ASSERT_FALSE(cache.is_contiguous());
  Tensor src = random_tensor({2, 3, 2, 4}, kiln::kFloat32, "transposed", 7);
  Tensor idx = kiln::tensor<int64_t>({6, 1});
  const int64_t v0 = cache.version();
  kiln::index_copy_(cache, 2, idx, src);
  EXPECT_GT(cache.version(), v0);
  auto c = cache.contiguous().tolist<float>();
  auto s = src.contiguous().tolist<float>();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 3; ++h) {
      for (int64_t p = 0; p < 8; ++p) {
        for (int64_t d = 0; d < 4; ++d) {
          float expected = 0;
          if (p == 6) expected = s[((b * 3 + h) * 2 + 0) * 4 + d];
          if (p == 1) expected = s[((b * 3 + h) * 2 + 1) * 4 + d];
          ASSERT_EQ(c[((b * 3 + h) * 8 + p) * 4 + d], expected) << b << " " << h << " " << p;
        }
      }
    }
  }
  // The base sees the write: position 6 of batch 1, head 2.
  EXPECT_EQ(storage.select(0, 1).select(0, 6).select(0, 2).tolist<float>(),
            src.select(0, 1).select(0, 2).select(0, 0).contiguous().tolist<float>());
}

TEST(ShapeIndex, IndexCopyBadIndexLeavesSelfUntouched) {
  // Index values are data: the checks run with the kernel, so run it now.
  kiln::EagerGuard eager;

  Tensor self = kiln::zeros({4, 2});
  EXPECT_KILN_ERROR(kiln::index_copy_(self, 0, kiln::tensor<int64_t>({1, 9}), kiln::ones({2, 2})),
                    "index 9 is out of bounds for dimension 0 with size 4");
  EXPECT_EQ(self.tolist<float>(), std::vector<float>(8, 0.0f));
}

TEST(ShapeIndex, LargeIndexSelectMatchesLoop) {
  // 20000 rows of 16: the per-index parallel path.
  Tensor weight = random_tensor({5000, 16}, kiln::kFloat32, "offset", 3);
  Tensor idx = random_index({20000}, 5000, 4);
  Tensor out = kiln::index_select(weight, 0, idx);
  auto w = weight.contiguous().tolist<float>();
  auto i = idx.tolist<int64_t>();
  auto o = out.tolist<float>();
  for (size_t r = 0; r < i.size(); ++r) {
    for (int64_t d = 0; d < 16; ++d) ASSERT_EQ(o[r * 16 + d], w[i[r] * 16 + d]) << r;
  }
  // Columns of a transposed matrix: one strided slice per index.
  Tensor cols = kiln::index_select(weight.t(), 1, idx.slice(0, 0, 300));
  EXPECT_TENSOR_CLOSE(cols, kiln::index_select(weight, 0, idx.slice(0, 0, 300)).t());
}

TEST(ShapeIndex, LargeFlipAndRollMatchLoops) {
  // 120000 elements: copy_strided splits the copy across workers.
  Tensor x = random_tensor({300, 400}, kiln::kFloat32, "transposed", 5);
  Tensor f = kiln::flip(x, {0, 1});
  Tensor r = kiln::roll(x, {7, -123}, {0, 1});
  auto xv = x.contiguous().tolist<float>();
  auto fv = f.tolist<float>();
  auto rv = r.tolist<float>();
  for (int64_t i = 0; i < 300; ++i) {
    for (int64_t j = 0; j < 400; ++j) {
      ASSERT_EQ(fv[i * 400 + j], xv[(299 - i) * 400 + (399 - j)]);
      ASSERT_EQ(rv[((i + 7) % 300) * 400 + (j - 123 + 400) % 400], xv[i * 400 + j]);
    }
  }
}

TEST(ShapeIndex, RollManyDims) {
  // 14 rolled dims: more than one pass of block copies.
  std::vector<int64_t> sizes(14, 2), shifts(14, 1), dims(14);
  std::iota(dims.begin(), dims.end(), 0);
  Tensor x = kiln::arange(int64_t{1} << 14).reshape(sizes);
  Tensor r = kiln::roll(x, shifts, dims);
  auto rv = r.tolist<int64_t>();
  // Rolling every size-2 dim by one flips every bit of the flat index.
  for (int64_t i = 0; i < (int64_t{1} << 14); ++i) ASSERT_EQ(rv[i ^ 0x3fff], i);
}

TEST(ShapeIndex, RepeatMatchesLoop) {
  Tensor x = random_tensor({3, 1, 5}, kiln::kFloat32, "strided", 11);
  Tensor r = kiln::repeat(x, {2, 2, 4, 3});
  ASSERT_EQ(r.sizes().vec(), (std::vector<int64_t>{2, 6, 4, 15}));
  auto xv = x.contiguous().tolist<float>();
  auto rv = r.tolist<float>();
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 6; ++b)
      for (int64_t c = 0; c < 4; ++c)
        for (int64_t d = 0; d < 15; ++d)
          ASSERT_EQ(rv[((a * 6 + b) * 4 + c) * 15 + d], xv[(b % 3) * 5 + d % 5]);
}

TEST(ShapeIndex, ScatterAddSumsRepeatsInOrder) {
  Tensor self = kiln::zeros({3}, TensorOptions(kiln::kFloat16));
  // 2048 + 1 + 1 in float16: adding the ones one at a time loses both.
  Tensor src = kiln::tensor<float>({2048, 1, 1}).to(kiln::kFloat16);
  Tensor out = kiln::scatter_add(self, 0, kiln::tensor<int64_t>({0, 0, 0}), src);
  EXPECT_EQ(out.tolist<float>(), (std::vector<float>{2048, 0, 0}));
}

TEST(ShapeIndex, MaskedFillInPlaceThroughView) {
  Tensor base = kiln::zeros({4, 6});
  Tensor view = base.slice(1, 1, std::nullopt, 2).t();  // [3, 4], strided
  Tensor mask = kiln::tensor<bool>({true, false, true, false});
  kiln::masked_fill_(view, mask, 5.0);
  auto b = base.tolist<float>();
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 6; ++j) {
      const bool filled = (j % 2 == 1) && (i % 2 == 0);
      ASSERT_EQ(b[i * 6 + j], filled ? 5.0f : 0.0f) << i << " " << j;
    }
  }
}

TEST(ShapeIndex, TrilInPlaceOnStridedBatch) {
  Tensor base = kiln::ones({2, 3, 8});
  Tensor m = base.slice(2, 0, std::nullopt, 2);  // [2, 3, 4], column stride 2
  call("tril_", {IValue(m), IValue(int64_t{0})});
  auto b = base.tolist<float>();
  for (int64_t k = 0; k < 2; ++k)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 8; ++j) {
        const bool zeroed = j % 2 == 0 && j / 2 > i;
        ASSERT_EQ(b[(k * 3 + i) * 8 + j], zeroed ? 0.0f : 1.0f);
      }
}

TEST(ShapeIndex, CatOutConvertsIntoStridedOut) {
  Tensor a = kiln::arange(6).reshape({2, 3}).to(kiln::kInt32);
  Tensor b = kiln::arange(3, TensorOptions(kiln::kFloat16)).reshape({1, 3});
  Tensor out = kiln::zeros({3, 3}, TensorOptions(kiln::kFloat64)).t();
  call("cat.out", {IValue(std::vector<Tensor>{a, b}), IValue(int64_t{0})}, out);
  EXPECT_EQ(out.contiguous().tolist<double>(), (std::vector<double>{0, 1, 2, 3, 4, 5, 0, 1, 2}));
}

TEST(ShapeIndex, WritesIntoInputMemoryAreRefused) {
  // Index values are data: the checks run with the kernel, so run it now.
  kiln::EagerGuard eager;

  Tensor x = kiln::arange(8.0);
  EXPECT_KILN_ERROR(
      call("cat.out",
           {IValue(std::vector<Tensor>{x.slice(0, 0, 2), x.slice(0, 2, 4)}), IValue(int64_t{0})},
           x.slice(0, 1, 5)),
      "share memory");
  Tensor self = kiln::zeros({5, 2});
  EXPECT_KILN_ERROR(kiln::index_copy_(self, 0, kiln::tensor<int64_t>({3, 4}), self.slice(0, 0, 2)),
                    "share memory");
  EXPECT_KILN_ERROR(kiln::scatter_(self, 0, kiln::tensor<int64_t>({{1}}), self.slice(0, 0, 1)),
                    "share memory");
}

TEST(ShapeIndex, SourceSharingStorageInAStridedLayoutIsCopiedFirst) {
  // Rows 0 and 2 of a [4, 2] tensor written from its transposed columns: a
  // layout the overlap check cannot judge, so the source is read from a copy.
  Tensor self = kiln::arange(8.0).reshape({4, 2});
  Tensor src = self.t().slice(1, 0, 4, 2);  // [[0, 4], [1, 5]], strides [1, 4]
  kiln::index_copy_(self, 0, kiln::tensor<int64_t>({0, 2}), src);
  // Writing row 0 changes src[1][0]; the copy still reads the old 1.
  EXPECT_EQ(self.tolist<float>(), (std::vector<float>{0, 4, 2, 3, 1, 5, 6, 7}));
}

TEST(ShapeIndex, OutSharingSelfStorageReadsACopy) {
  Tensor self = kiln::arange(8.0).reshape({4, 2});
  Tensor out = self.t().slice(1, 0, 4, 2);  // [2, 2] with strides [1, 4]: not dense
  call("index_select.out",
       {IValue(self), IValue(int64_t{0}), IValue(kiln::tensor<int64_t>({1, 0}))}, out);
  // out = rows 1 and 0 of the original self, written at storage 0, 4, 1, 5.
  EXPECT_EQ(self.tolist<float>(), (std::vector<float>{2, 0, 2, 3, 3, 1, 6, 7}));
}

TEST(ShapeIndex, ArangeAndLinspaceValues) {
  EXPECT_EQ(kiln::arange(0, 1, 0.25).tolist<float>(), (std::vector<float>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(kiln::arange(10, 1, -3).dtype(), kiln::kInt64);
  EXPECT_EQ(kiln::arange(10, 1, -3).tolist<int64_t>(), (std::vector<int64_t>{10, 7, 4}));
  // The element count is computed in double: ceil((1 - 0) / 0.1) = 10.
  EXPECT_EQ(kiln::arange(0, 1, 0.1).numel(), 10);
  // linspace computes the second half backwards from `end`, so `end` is exact.
  Tensor l = kiln::linspace(0.1, 1.7, 33);
  EXPECT_EQ(l.tolist<float>().back(), 1.7f);
  EXPECT_EQ(l.tolist<float>().front(), 0.1f);
  EXPECT_EQ(kiln::eye(3).tolist<float>(), (std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
}

// int64 linspace near the ends of int64: PyTorch 1.13's values, which come
// from double arithmetic (so 2^62 + 1 reads as 2^62, and a middle element
// can be off by the double's rounding: -256 for 0). steps 0 and 1 take the
// bounds as they are. Ends that round to 2^63 are refused (IndexErrors.Ranges).
TEST(ShapeIndex, LinspaceInt64NearTheEnds) {
  const TensorOptions i64(kiln::kInt64);
  const int64_t max = std::numeric_limits<int64_t>::max(),
                min = std::numeric_limits<int64_t>::min();
  const int64_t e62 = int64_t{1} << 62;
  auto values = [&](int64_t start, int64_t end, int64_t steps) {
    return kiln::linspace(start, end, steps, i64).tolist<int64_t>();
  };
  using V = std::vector<int64_t>;
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    EXPECT_EQ(values(max, min, 1), V{max});
    EXPECT_EQ(values(min, max, 1), V{min});
    EXPECT_EQ(values(max, min, 0), V{});
    EXPECT_EQ(values(e62, -e62, 7),
              (V{4611686018427387904, 3074457345618258944, 1537228672809129472, -256,
                 -1537228672809129472, -3074457345618258944, -4611686018427387904}));
    EXPECT_EQ(values(-e62, e62, 7),
              (V{-4611686018427387904, -3074457345618258944, -1537228672809129472, 256,
                 1537228672809129472, 3074457345618258944, 4611686018427387904}));
    EXPECT_EQ(values(e62 + 1, e62 + 11, 11), V(11, e62));
    EXPECT_EQ(values(min, min, 40), V(40, min));
    // 20 steps: two blocks of vector lanes, then single elements (Note [Range
    // values as PyTorch computes them]).
    EXPECT_EQ(
        values(e62, min, 20),
        (V{4611686018427387904,  3883525068149379072,  3155364117871370752,  2427203167593362432,
           1699042217315353600,  970881267037345024,   242720316759336448,   -485440633518672128,
           -1213601583796680704, -1941762534074689280, -2669923484352697856, -3398084434630706176,
           -4126245384908716032, -4854406335186724864, -5582567285464733696, -6310728235742741504,
           -7038889186020750336, -7767050136298758144, -8495211086576766976, min}));
    const V up = values(min, e62, 20);
    EXPECT_EQ(up.front(), min);
    EXPECT_EQ(
        V(up.begin() + 1, up.end()),
        (V{-8495211086576766976, -7767050136298758144, -7038889186020750336, -6310728235742741504,
           -5582567285464732672, -4854406335186724864, -4126245384908716032, -3398084434630707200,
           -2669923484352698368, -1941762534074690048, -1213601583796681472, -485440633518672128,
           242720316759336448, 970881267037345024, 1699042217315353600, 2427203167593362432,
           3155364117871370752, 3883525068149379072, 4611686018427387904}));
    // 33 steps end with a single element, not a vector lane: no overshoot
    // (32 steps are refused: IndexErrors.Ranges).
    const V top = values(min, 9223372036854775093, 33);
    EXPECT_EQ(V(top.end() - 5, top.end()),
              (V{6917529027641080832, 7493989779944504320, 8070450532247927808, 8646911284551351296,
                 9223372036854774784}));
    // The largest end below 2^63 - 512 reads as 2^63 - 1024.
    EXPECT_EQ(values(0, max - 512, 2), (V{0, 9223372036854774784}));
    EXPECT_EQ(values(max - 512, min, 9),
              (V{9223372036854774784, 6917529027641080832, 4611686018427386880, 2305843009213692928,
                 0, -2305843009213693952, -4611686018427387904, -6917529027641081856, min}));
  }
}

}  // namespace
