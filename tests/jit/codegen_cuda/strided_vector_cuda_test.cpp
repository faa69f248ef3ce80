// Generated pointwise kernels with strided operands read and written in
// 16-byte vectors (Note [CUDA pointwise kernel shape]): GPT-2's merge of
// heads, row-broadcast operands, and the layouts that must fall back to one
// element at a time (an odd innermost size, a misaligned start, a strided
// innermost dim), all against the eager CPU result. Skips without a GPU.

#include <gtest/gtest.h>

#include <string>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace kiln {
namespace {

using testing::random_tensor;
using testing::to_cuda;

class StridedVectorCuda : public ::testing::Test {
 protected:
  void SetUp() override { jit::flush(); }
  void TearDown() override { jit::flush(); }
};

// [B, H, T, D] -> [B, T, H * D]: a copy dense along D on both sides.
TEST_F(StridedVectorCuda, MergeOfHeads) {
  KILN_REQUIRE_CUDA();
  for (DType t : {kFloat16, kBFloat16, kFloat32}) {
    for (auto [b, h, s, d] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{8, 12, 128, 64},
                              {1, 12, 7, 64},
                              {2, 3, 5, 8},
                              {2, 3, 5, 12}}) {  // 12 halves: not a whole vector
      SCOPED_TRACE(std::string(dtype_name(t)) + " d=" + std::to_string(d));
      Tensor a = random_tensor({b, h, s, d}, t, "contiguous", 1);
      Tensor expected;
      {
        EagerGuard eager;
        expected = a.transpose(1, 2).reshape({b, s, h * d});
      }
      EXPECT_TENSOR_CLOSE_TOL(to_cuda(a).transpose(1, 2).reshape({b, s, h * d}).cpu(), expected, 0,
                              0);
      // Lazily, after a pointwise op (the copy then reads through the view).
      Tensor lazy = (to_cuda(a) * 2.0).transpose(1, 2).reshape({b, s, h * d});
      Tensor expected2;
      {
        EagerGuard eager;
        expected2 = (a * 2.0).transpose(1, 2).reshape({b, s, h * d});
      }
      EXPECT_TENSOR_CLOSE_TOL(lazy.cpu(), expected2, 0, 0);
    }
  }
}

// A row broadcast (a bias) and a transposed output, vectorized; a column
// broadcast and an offset start, one element at a time; the same results.
TEST_F(StridedVectorCuda, BroadcastsAndFallbacks) {
  KILN_REQUIRE_CUDA();
  for (DType t : {kFloat16, kFloat32}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor x = random_tensor({64, 96}, t, "contiguous", 2);
    Tensor bias = random_tensor({96}, t, "contiguous", 3);
    Tensor col = random_tensor({64, 1}, t, "contiguous", 4);
    Tensor wide = random_tensor({64, 97}, t, "contiguous", 5);
    auto both = [&](const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&,
                                               const Tensor&)>& f) {
      Tensor expected;
      {
        EagerGuard eager;
        expected = f(x, bias, col, wide);
      }
      Tensor got = f(to_cuda(x), to_cuda(bias), to_cuda(col), to_cuda(wide));
      EXPECT_TENSOR_CLOSE(got.cpu(), expected);  // the GELU's exp2 is approximate
    };
    both([](auto& x, auto& bias, auto&, auto&) { return kiln::gelu(x + bias, "tanh"); });
    both([](auto& x, auto& bias, auto&, auto&) { return (x.t() * 3.0 + 1.0).t() + bias; });
    both([](auto& x, auto&, auto& col, auto&) { return x * col; });
    both([](auto&, auto& bias, auto&, auto& wide) { return wide.slice(1, 1, 97) + bias; });
    both([](auto& x, auto&, auto&, auto&) { return x.slice(1, 0, 96, 2) * 2.0; });
  }
}

}  // namespace
}  // namespace kiln
