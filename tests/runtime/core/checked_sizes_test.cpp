// The checked size helpers (Note [Checked size arithmetic]) against exact
// 128-bit arithmetic, on random sizes, strides and offsets drawn around the
// int64 edges as often as from small values.

#include "runtime/core/checked_sizes.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <vector>

#include "tests/support/testing.h"

namespace {

using kiln::DType;
using i128 = __int128;

constexpr i128 kMax = std::numeric_limits<int64_t>::max();

int64_t draw(std::mt19937_64& rng) {
  static const int64_t kEdges[] = {0,
                                   1,
                                   2,
                                   3,
                                   -1,
                                   int64_t{1} << 31,
                                   int64_t{1} << 32,
                                   int64_t{1} << 47,
                                   int64_t{1} << 61,
                                   int64_t{1} << 62,
                                   (int64_t{1} << 62) + 16,
                                   std::numeric_limits<int64_t>::max(),
                                   std::numeric_limits<int64_t>::max() - 1,
                                   std::numeric_limits<int64_t>::min()};
  if (rng() % 3 == 0) return kEdges[rng() % (sizeof(kEdges) / sizeof(kEdges[0]))];
  return static_cast<int64_t>(rng() % 9);
}

struct Reference {
  bool sizes_ok = true, count_ok = true, bytes_ok = true, extent_ok = true;
  i128 numel = 1, extent = 0;
};

// What the helpers must decide, computed exactly.
Reference reference(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                    int64_t offset, DType dtype) {
  Reference r;
  i128 span = 1;
  for (int64_t s : sizes) {
    if (s < 0) r.sizes_ok = false;
    if (!r.sizes_ok) continue;
    span *= s > 1 ? s : 1;
    if (span > kMax) r.count_ok = false;
    if (!r.count_ok) span = kMax + 1;  // keep it from overflowing 128 bits
    if (r.count_ok) r.numel *= s;      // at most span: no overflow either
  }
  const i128 item = static_cast<i128>(kiln::itemsize(dtype));
  r.bytes_ok = r.sizes_ok && r.count_ok && span * item <= kMax;
  r.extent_ok = r.bytes_ok && offset >= 0 && static_cast<i128>(offset) * item <= kMax;
  for (int64_t st : strides) r.extent_ok = r.extent_ok && st >= 0;
  if (r.extent_ok && r.numel > 0) {
    i128 e = static_cast<i128>(offset) + 1;
    for (size_t i = 0; i < sizes.size(); ++i) e += static_cast<i128>(sizes[i] - 1) * strides[i];
    r.extent = e;
    r.extent_ok = e * item <= kMax;
  }
  return r;
}

TEST(CheckedSizes, AgreeWithExactArithmetic) {
  std::mt19937_64 rng(2024);
  int checked = 0, refused = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    const size_t nd = rng() % 4;
    std::vector<int64_t> sizes(nd), strides(nd);
    for (auto& s : sizes) s = draw(rng);
    for (auto& s : strides) s = draw(rng);
    const int64_t offset = rng() % 4 == 0 ? draw(rng) : 0;
    const DType dtype = static_cast<DType>(rng() % kiln::kNumDTypes);
    const Reference ref = reference(sizes, strides, offset, dtype);
    const kiln::IntArrayRef sz(sizes), st(strides);
    SCOPED_TRACE(::testing::Message()
                 << "sizes " << sz << ", strides " << st << ", offset " << offset << ", " << dtype);

    bool threw = false;
    try {
      EXPECT_EQ(static_cast<i128>(kiln::checked_numel(sz, "t")), ref.numel);
    } catch (const kiln::Error&) {
      threw = true;
    }
    EXPECT_EQ(threw, !(ref.sizes_ok && ref.count_ok));

    threw = false;
    try {
      EXPECT_EQ(static_cast<i128>(kiln::checked_bytes_numel(sz, dtype, "t")), ref.numel);
    } catch (const kiln::Error& e) {
      threw = true;
      if (ref.sizes_ok && ref.count_ok) {
        EXPECT_NE(std::string(e.what()).find("[t] expected a size whose bytes fit in int64"),
                  std::string::npos)
            << e.what();
      }
    }
    EXPECT_EQ(threw, !ref.bytes_ok);

    threw = false;
    try {
      const int64_t extent = kiln::checked_extent(sz, st, offset, dtype, "t");
      EXPECT_EQ(static_cast<i128>(extent), ref.numel > 0 ? ref.extent : 0);
      ++checked;
    } catch (const kiln::Error&) {
      threw = true;
      ++refused;
    }
    EXPECT_EQ(threw, !ref.extent_ok);
  }
  // Both outcomes are common, or the draws test nothing.
  EXPECT_GT(checked, 2000);
  EXPECT_GT(refused, 2000);
}

TEST(CheckedSizes, AddAndMultiply) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(kiln::checked_add(max - 1, 1, "t"), max);
  EXPECT_EQ(kiln::checked_mul(int64_t{1} << 31, int64_t{1} << 31, "t"), int64_t{1} << 62);
  EXPECT_KILN_ERROR(kiln::checked_add(max, 1, "cat"), "[cat] expected sizes that fit int64, got ");
  EXPECT_KILN_ERROR(kiln::checked_mul(int64_t{1} << 32, int64_t{1} << 31, "repeat"),
                    "[repeat] expected sizes that fit int64");
}

}  // namespace
