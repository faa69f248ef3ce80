// Views of values computed in a fused group (Note [View folding]): random
// pointwise producers read back through transposes, permutes, narrowed and
// broadcast views, on random non-contiguous mixed-dtype inputs, against eager.

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "jit/record/trace_buffer.h"
#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

TEST(ViewFolding, RecomputedViewsMatchEager) {
  const char* layouts[] = {"contiguous", "transposed", "strided", "offset", "expanded"};
  const kiln::DType dtypes[] = {kiln::kFloat32, kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16};
  int single_group = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % n); };
    int64_t a = 1 + pick(4), b = 1 + pick(6);
    std::vector<int64_t> shape = {a, a, b};
    if (pick(2)) shape.push_back(1 + pick(3));
    const int64_t nd = static_cast<int64_t>(shape.size());
    Tensor x, r;
    {
      kiln::EagerGuard g;
      x = kiln::testing::random_tensor(shape, dtypes[pick(4)], layouts[pick(5)], seed * 3, -2, 2);
      r = kiln::testing::random_tensor({shape.back()}, dtypes[pick(4)], layouts[pick(3)],
                                       seed * 3 + 1, -2, 2);
    }
    int producer = pick(4), view = pick(6), consumer = pick(3);
    int64_t k = pick(static_cast<int>(shape[2]));
    auto program = [&] {
      Tensor p;
      switch (producer) {
        case 0:
          p = kiln::tanh(x * 1.5f + r);
          break;
        case 1:
          p = kiln::sigmoid(x) * r - 0.25f;
          break;
        case 2:
          p = kiln::exp(x * 0.5f) + kiln::exp(x * 0.5f);
          break;
        default:
          p = (x + 1.0f).to(kiln::kFloat16) * 2.0f;
          break;
      }
      Tensor v;
      switch (view) {
        case 0:
          v = p.transpose(0, 1);
          break;
        case 1:
          v = nd == 3 ? p.permute({1, 0, 2}) : p.permute({1, 0, 2, 3});
          break;
        case 2:
          v = p.narrow(2, k, 1).expand(shape);
          break;
        case 3:
          v = p.transpose(0, 1).transpose(1, 0);
          break;
        case 4:
          v = p.narrow(0, 0, 1).expand(shape);
          break;
        default:
          v = p.transpose(nd - 2, nd - 1).transpose(nd - 1, nd - 2);
          break;
      }
      switch (consumer) {
        case 0:
          return v * x + p;
        case 1:
          return kiln::relu(v) - r;
        default:
          return v + 1.0f;
      }
    };
    Tensor eager;
    {
      kiln::EagerGuard g;
      eager = program();
    }
    Tensor lazy = program();
    std::string plan = kiln::jit::TraceBuffer::current().describe_pending();
    single_group += plan.find("] fused[") == std::string::npos;
    SCOPED_TRACE(plan);
    EXPECT_TENSOR_CLOSE(lazy, eager);
  }
  // Most programs fold into one group; the rest were cut and must still match.
  EXPECT_GT(single_group, 150);
}

// Views of group values around reduction groups: a prologue value read
// through a view is recomputed there (the reduction keeps its prologue); an
// epilogue value read through a view of the reduction's result is not (the
// group is cut), and both match eager.
TEST(ViewFolding, ReductionProloguesAndEpiloguesMatchEager) {
  const char* layouts[] = {"contiguous", "transposed", "strided", "offset"};
  int folded = 0;
  for (uint64_t seed = 0; seed < 80; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % n); };
    int64_t a = 2 + pick(5);
    Tensor x, r;
    {
      kiln::EagerGuard g;
      x = kiln::testing::random_tensor({a, a}, kiln::kFloat32, layouts[pick(4)], seed * 5, -2, 2);
      r = kiln::testing::random_tensor({a}, kiln::kFloat32, layouts[pick(3)], seed * 5 + 1, -2, 2);
    }
    int view = pick(3), reduction = pick(3), epilogue = pick(2);
    auto program = [&] {
      Tensor p = kiln::tanh(x * 1.5f + r);
      Tensor v = view == 0   ? p.t()
                 : view == 1 ? p.narrow(1, a - 1, 1).expand({a, a})
                             : p.t().narrow(0, 0, 1).expand({a, a});
      Tensor in = v * 0.5f - p;
      Tensor y = reduction == 0   ? kiln::softmax(in, -1)
                 : reduction == 1 ? kiln::sum(in, {1}, true).expand({a, a}) * 1.0f
                                  : kiln::layer_norm(in, {a});
      Tensor z = y * 2.0f;
      return epilogue ? z.t() + z : z + 1.0f;
    };
    Tensor eager;
    {
      kiln::EagerGuard g;
      eager = program();
    }
    Tensor lazy = program();
    std::string plan = kiln::jit::TraceBuffer::current().describe_pending();
    folded += plan.rfind("reduce[", 0) == 0 && plan.find("tanh") < plan.find(" > ");
    SCOPED_TRACE(plan);
    // Fused tanh is within 4e-5 of eager's (Codegen accuracy bar); a
    // layer_norm over 2-6 values then scales the difference by 1/std.
    EXPECT_TENSOR_CLOSE_TOL(lazy, eager, 1e-4, 1e-4);
  }
  EXPECT_GT(folded, 20);
}

}  // namespace
