// Must-fail calls of addmm_act: the activation is checked by name, and the
// product's own checks are addmm's, with addmm's messages.

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

}  // namespace
