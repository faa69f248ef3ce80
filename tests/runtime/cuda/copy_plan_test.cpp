// The 2D-copy planner behind CUDA copies without kernels, run on the host:
// the plan is executed with memcpy and checked against an element-wise copy.
// Needs no GPU (and no toolkit).

#include "runtime/cuda/copy_plan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kiln/jit.h"

namespace kiln::cuda {
namespace {

constexpr int64_t kMaxPitch = (int64_t{1} << 31) - 1;

// Runs `plan` on host buffers as cudaMemcpy2D would.
void run(const std::vector<Copy2D>& plan, char* dst, const char* src) {
  for (const Copy2D& c : plan) {
    for (int64_t r = 0; r < c.height; ++r) {
      std::memcpy(dst + c.dst_offset + r * c.dst_pitch, src + c.src_offset + r * c.src_pitch,
                  static_cast<size_t>(c.width));
    }
  }
}

int64_t offset(const std::vector<int64_t>& idx, IntArrayRef strides) {
  int64_t o = 0;
  for (size_t i = 0; i < idx.size(); ++i) o += idx[i] * strides[i];
  return o;
}

// Random layouts: permuted, sliced, with gaps, broadcast sources.
TEST(CudaCopyPlan, RandomLayoutsMatchElementwiseCopy) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  std::mt19937_64 rng(7);
  int planned = 0, multi = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const int nd = static_cast<int>(rng() % 5);
    std::vector<int64_t> sizes(nd);
    for (auto& s : sizes) s = 1 + static_cast<int64_t>(rng() % 5);
    const int64_t item = int64_t{1} << (rng() % 4);
    // A layout: a random dim order, each dim's stride padded by a random gap.
    auto layout = [&](bool allow_broadcast) {
      std::vector<int> order(nd);
      for (int i = 0; i < nd; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<int64_t> strides(nd);
      int64_t step = 1 + static_cast<int64_t>(rng() % 2);  // inner stride 1 or 2
      for (int k = nd; k-- > 0;) {
        const int d = order[k];
        if (allow_broadcast && rng() % 6 == 0) {
          strides[d] = 0;
          continue;
        }
        strides[d] = step;
        step = step * sizes[d] + (rng() % 3 == 0 ? static_cast<int64_t>(rng() % 3) : 0);
      }
      return strides;
    };
    std::vector<int64_t> ds = layout(false), ss = layout(true);
    std::vector<Copy2D> plan;
    if (!plan_strided_copy(sizes, ds, ss, item, 64, kMaxPitch, &plan)) continue;
    ++planned;
    multi += plan.size() > 1;
    const int64_t dspan = span_elements(sizes, ds) * item, sspan = span_elements(sizes, ss) * item;
    std::vector<char> src(static_cast<size_t>(sspan)), got(static_cast<size_t>(dspan), 0x55),
        want(static_cast<size_t>(dspan), 0x55);
    for (auto& b : src) b = static_cast<char>(rng());
    std::vector<int64_t> idx(nd, 0);
    int64_t numel = 1;
    for (int64_t s : sizes) numel *= s;
    for (int64_t e = 0; e < numel; ++e) {
      std::memcpy(&want[offset(idx, ds) * item], &src[offset(idx, ss) * item],
                  static_cast<size_t>(item));
      for (int k = nd; k-- > 0;) {
        if (++idx[k] < sizes[k]) break;
        idx[k] = 0;
      }
    }
    run(plan, got.data(), src.data());
    ASSERT_EQ(got, want) << "iteration " << iter;
  }
  EXPECT_GT(planned, 2000);
  EXPECT_GT(multi, 300);
}

TEST(CudaCopyPlan, ContiguousAndDenseLayoutsAreOneCopy) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  std::vector<Copy2D> plan;
  ASSERT_TRUE(plan_strided_copy({4, 5, 6}, {30, 6, 1}, {30, 6, 1}, 4, 8, kMaxPitch, &plan));
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].height, 1);
  EXPECT_EQ(plan[0].width, 4 * 5 * 6 * 4);
  // Both transposed the same way: still one copy.
  ASSERT_TRUE(plan_strided_copy({4, 5}, {1, 4}, {1, 4}, 2, 8, kMaxPitch, &plan));
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].width, 40);
  // A slice of rows into a contiguous buffer: one 2D copy.
  ASSERT_TRUE(plan_strided_copy({3, 4}, {4, 1}, {10, 1}, 4, 8, kMaxPitch, &plan));
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].height, 3);
  EXPECT_EQ(plan[0].width, 16);
  EXPECT_EQ(plan[0].src_pitch, 40);
  // A KV-cache style write: [2, 8, pos:pos+3, 16] of a [2, 8, 64, 16] buffer.
  ASSERT_TRUE(plan_strided_copy({2, 8, 3, 16}, {8 * 64 * 16, 64 * 16, 16, 1},
                                {8 * 3 * 16, 3 * 16, 16, 1}, 2, 64, kMaxPitch, &plan));
  ASSERT_EQ(plan.size(), 1u);  // the two outer dims merge: one 2D copy of 16 rows
  EXPECT_EQ(plan[0].height, 16);
  EXPECT_EQ(plan[0].width, 3 * 16 * 2);
  EXPECT_EQ(plan[0].dst_pitch, 64 * 16 * 2);
  EXPECT_TRUE(is_dense({4, 5}, {1, 4}));
  EXPECT_FALSE(is_dense({4, 5}, {10, 1}));
  EXPECT_FALSE(is_dense({4, 5}, {0, 1}));
  EXPECT_EQ(span_elements({4, 5}, {10, 1}), 35);
}

TEST(CudaCopyPlan, RefusesTooManyCopiesAndNegativeStrides) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  std::vector<Copy2D> plan;
  // A full transpose is one element per row: 64 x 64 copies of one element.
  EXPECT_FALSE(
      plan_strided_copy({64, 64, 64}, {4096, 64, 1}, {1, 64, 4096}, 4, 1024, kMaxPitch, &plan));
  EXPECT_FALSE(plan_strided_copy({4}, {1}, {-1}, 4, 1024, kMaxPitch, &plan));
  EXPECT_TRUE(plan_strided_copy({0, 4}, {4, 1}, {4, 1}, 4, 1024, kMaxPitch, &plan));
  EXPECT_TRUE(plan.empty());
}

}  // namespace
}  // namespace kiln::cuda
