// Golden tests of the merged-heads fold (jit/passes/merged_heads.h): traces
// recorded on the CPU, their nodes marked cuda for the pass (which folds on
// CUDA only), then run on the CPU against eager mode, where
// attention_merged_heads is attention then the merge as a copy: the values
// must be eager's bits. Which merges fold, which stay copies and why.

#include <gtest/gtest.h>

#include "jit/plan/pipeline.h"
#include "jit/record/trace_buffer.h"
#include "kiln/kiln.h"
#include "tests/support/cuda_plan.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::random_tensor;

Tensor real(std::initializer_list<int64_t> sizes, uint64_t seed,
            const char* layout = "contiguous") {
  kiln::EagerGuard g;
  return random_tensor(sizes, kiln::kFloat32, layout, seed);
}

using kiln::testing::plan_as_cuda_then_run;

// `fn` traced lazily and planned as on CUDA must give `golden` and eager's bits.
template <class F>
void expect_cuda_plan(F fn, const std::string& golden) {
  Tensor eager;
  {
    kiln::EagerGuard g;
    eager = fn();
  }
  Tensor lazy = fn();
  EXPECT_EQ(plan_as_cuda_then_run(), golden);
  EXPECT_TENSOR_CLOSE_TOL(lazy, eager, 0, 0);
  EXPECT_EQ(lazy.sizes(), eager.sizes());
}

// [B, T, H * D] -> [B, H, T, D], as a GPT-2 block splits q, k and v.
Tensor heads(const Tensor& t, int64_t h) {
  return t.view({t.size(0), t.size(1), h, t.size(2) / h}).transpose(1, 2);
}

class MergedHeads : public ::testing::Test {
 protected:
  void SetUp() override { kiln::jit::flush(); }
  void TearDown() override { kiln::jit::flush(); }
};

TEST_F(MergedHeads, ReshapeOfTransposedAttentionIsOneNode) {
  // q, k, v strided views of one [B, T, 3 * H * D] product, as in GPT-2.
  Tensor qkv = real({2, 5, 3 * 32}, 1);
  auto block = [&](bool causal) {
    std::vector<Tensor> p = kiln::split(qkv, 32, -1);
    Tensor a = kiln::scaled_dot_product_attention(heads(p[0], 4), heads(p[1], 4), heads(p[2], 4),
                                                  std::nullopt, causal);
    return a.transpose(1, 2).reshape({2, 5, 32});
  };
  expect_cuda_plan([&] { return block(true); }, "extern[attention_merged_heads]");
  expect_cuda_plan([&] { return block(false); }, "extern[attention_merged_heads]");
  // .contiguous() then a view, and a mask.
  Tensor q = real({3, 4, 6, 8}, 2, "transposed"), k = real({3, 4, 7, 8}, 3),
         v = real({3, 4, 7, 8}, 4, "strided"), mask = real({6, 7}, 5);
  expect_cuda_plan(
      [&] {
        Tensor a = kiln::scaled_dot_product_attention(q, k, v, mask);
        return a.transpose(1, 2).contiguous().view({3, 6, 32});
      },
      "extern[attention_merged_heads]");
  // Grouped-query heads, and a product reading the merged rows.
  Tensor kg = real({3, 2, 7, 8}, 6), vg = real({3, 2, 7, 8}, 7), w = real({16, 32}, 8);
  expect_cuda_plan(
      [&] {
        Tensor a =
            kiln::scaled_dot_product_attention(q, kg, vg, std::nullopt, true, std::nullopt, true);
        return kiln::linear(a.transpose(1, 2).reshape({3, 6, 32}), w);
      },
      "extern[attention_merged_heads] extern[linear]");
}

TEST_F(MergedHeads, MergesThatStayCopies) {
  Tensor q = real({2, 4, 6, 8}, 1), k = real({2, 4, 6, 8}, 2), v = real({2, 4, 6, 8}, 3);
  auto attend = [&] { return kiln::scaled_dot_product_attention(q, k, v); };
  const std::string apart = "extern[scaled_dot_product_attention] extern[empty] extern[copy_]";
  // Another permutation than heads after rows.
  expect_cuda_plan([&] { return attend().transpose(0, 2).reshape({6, 64}); }, apart);
  // The attention's output read twice.
  expect_cuda_plan(
      [&] {
        Tensor a = attend();
        return a.transpose(1, 2).reshape({2, 6, 32}) + a.sum();
      },
      "extern[scaled_dot_product_attention] reduce[sum -> 1 out] extern[empty] "
      "extern[copy_] fused[add.Tensor -> 1 out]");
  // The attention's output held by the caller: it must be computed as it is.
  Tensor held;
  expect_cuda_plan(
      [&] {
        held = attend();
        return held.transpose(1, 2).reshape({2, 6, 32});
      },
      apart);
  held = Tensor();
  // A copy that converts the dtype.
  expect_cuda_plan(
      [&] {
        Tensor e = kiln::empty({2, 6, 4, 8}, kiln::TensorOptions(kiln::kFloat64));
        return e.copy_(attend().transpose(1, 2));
      },
      "extern[empty] extern[scaled_dot_product_attention] extern[copy_]");
}

// On the CPU the attention kernel writes its own layout: nothing folds.
TEST_F(MergedHeads, NothingFoldsOnTheCpu) {
  Tensor q = real({2, 4, 6, 8}, 1), k = real({2, 4, 6, 8}, 2), v = real({2, 4, 6, 8}, 3);
  Tensor y = kiln::scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape({2, 6, 32});
  EXPECT_EQ(kiln::jit::TraceBuffer::current().describe_pending(),
            "extern[scaled_dot_product_attention] extern[empty] extern[copy_]");
}

// The op itself on the CPU: attention, then the merge.
TEST_F(MergedHeads, OpMatchesAttentionThenTranspose) {
  kiln::EagerGuard g;
  Tensor q = real({2, 3, 5, 8}, 1, "transposed"), k = real({2, 3, 7, 8}, 2),
         v = real({2, 3, 7, 8}, 3, "strided");
  Tensor got =
      kiln::call_op("attention_merged_heads", {q, k, v, kiln::IValue(), 0.0, true})[0].to_tensor();
  Tensor want =
      kiln::scaled_dot_product_attention(q, k, v, std::nullopt, true).transpose(1, 2).contiguous();
  EXPECT_TRUE(got.is_contiguous());
  EXPECT_TENSOR_CLOSE_TOL(got, want, 0, 0);
}

}  // namespace
