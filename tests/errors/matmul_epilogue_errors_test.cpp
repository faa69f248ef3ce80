// Must-fail calls of addmm_act: the activation is checked by name, and the
// product's own checks are addmm's, with addmm's messages. And of
// attention_merged_heads (Note [Merged heads]): attention's own checks, then
// a heads dim to merge.

#include <gtest/gtest.h>

#include <optional>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

Tensor f32(std::initializer_list<int64_t> sizes) {
  return kiln::ones(sizes);
}

TEST(MatmulEpilogueErrors, AddmmAct) {
  for (bool eager : {false, true}) {
    std::optional<kiln::EagerGuard> g;
    if (eager) g.emplace();
    EXPECT_KILN_ERROR(kiln::addmm_act(f32({5}), f32({3, 4}), f32({4, 5}), "gelu"),
                      "[addmm_act] expected act to be one of 'none', 'relu', 'gelu_tanh', got "
                      "'gelu'");
    EXPECT_KILN_ERROR(kiln::addmm_act(f32({5}), f32({3, 4}), f32({3, 5}), "relu"),
                      "[addmm] mat1 and mat2 shapes cannot be multiplied (3x4 and 3x5)");
    EXPECT_KILN_ERROR(kiln::addmm_act(f32({4}), f32({3, 4}), f32({4, 5}), "relu"),
                      "[addmm] expected self to broadcast to [3, 5], got shape [4]");
    EXPECT_KILN_ERROR(kiln::addmm_act(f32({5}), f32({2, 3, 4}), f32({4, 5})),
                      "[addmm] expected mat1 to be a 2-D tensor");
    EXPECT_KILN_ERROR(kiln::addmm_act(kiln::ones({5}, kiln::kFloat64), f32({3, 4}), f32({4, 5})),
                      "[addmm] expected self and the matrices of the same dtype");
  }
}

Tensor merged_heads(const Tensor& q, const Tensor& k, const Tensor& v, double dropout = 0.0) {
  return kiln::call_op("attention_merged_heads", {q, k, v, kiln::IValue(), dropout})[0].to_tensor();
}

TEST(MatmulEpilogueErrors, AttentionMergedHeads) {
  for (bool eager : {false, true}) {
    std::optional<kiln::EagerGuard> g;
    if (eager) g.emplace();
    EXPECT_KILN_ERROR(merged_heads(f32({5, 8}), f32({6, 8}), f32({6, 8})),
                      "[attention_merged_heads] expected an output with a heads dim (at least 3 "
                      "dims), got shape [5, 8]");
    EXPECT_KILN_ERROR(merged_heads(f32({2, 5, 8}), f32({2, 6, 4}), f32({2, 6, 8})),
                      "[scaled_dot_product_attention] expected query [..., L, E], key [..., S, E]");
    EXPECT_KILN_ERROR(merged_heads(f32({2, 5, 8}), f32({2, 6, 8}), f32({2, 6, 8}), 0.5),
                      "[scaled_dot_product_attention] expected dropout_p == 0");
  }
}

}  // namespace
