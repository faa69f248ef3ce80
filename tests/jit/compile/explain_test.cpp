// jit::explain and Compiled::explain(): entries with their guards, plans with
// their kernels and extern calls, graph breaks at their op and position, and
// the recompile history, checked against what the calls did (and the
// recompile log's own words).

#include <gtest/gtest.h>

#include <sstream>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::random_tensor;

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// A deliberate graph break: the sum's value is read on the host after two ops.
Tensor with_break(const Tensor& x) {
  Tensor y = kiln::exp(x);
  const double s = kiln::sum(y).item<double>();
  return y * s;
}

TEST(Explain, ReportsAGraphBreakAtItsOp) {
  Tensor x = random_tensor({4, 8}, kiln::kFloat32, "strided", 1, -1, 1);
  const kiln::jit::Explanation e = kiln::jit::explain(with_break, x);
  ASSERT_EQ(e.graph_breaks.size(), 1u) << e;
  const kiln::jit::GraphBreak& b = e.graph_breaks[0];
  EXPECT_EQ(b.entry, 1);
  EXPECT_EQ(b.op_index, 1) << e;  // exp is op 0, sum op 1
  EXPECT_EQ(b.op.rfind("sum", 0), 0u) << b.op;
  EXPECT_EQ(b.after_ops, 2) << e;
  EXPECT_TRUE(contains(b.reason, "was needed on the host")) << b.reason;
  ASSERT_EQ(e.entries.size(), 1u);
  EXPECT_FALSE(e.entries[0].compiled);
  EXPECT_TRUE(contains(e.entries[0].uncompiled, "graph break")) << e;
  EXPECT_EQ(e.stats.graph_breaks, 1);
  const std::string text = e.str();
  EXPECT_TRUE(contains(text, "graph breaks:\n  entry 1: at op 1 'sum")) << text;
  EXPECT_TRUE(contains(text, "after 2 recorded ops")) << text;
}

TEST(Explain, ReadingAnArgumentBreaksWithNoOp) {
  Tensor x = kiln::full({2, 2}, 1.0);
  auto f = kiln::jit::compile(
      [](const Tensor& t) { return t[0][0].item<float>() > 0 ? t + 1.0 : t - 1.0; },
      {.name = "reads"});
  (void)f(x);
  const kiln::jit::Explanation e = f.explain();
  ASSERT_EQ(e.graph_breaks.size(), 1u);
  EXPECT_EQ(e.graph_breaks[0].op, "");
  EXPECT_EQ(e.graph_breaks[0].op_index, -1);
  EXPECT_TRUE(contains(e.graph_breaks[0].reason, "input 0 was read on the host"));
}

TEST(Explain, EntriesGuardsPlansAndRecompiles) {
  auto f = kiln::jit::compile(
      [](const Tensor& x, const Tensor& w) {
        return kiln::sigmoid(kiln::matmul(x, w) * 2.0 + 1.0);
      },
      {.name = "mlp", .input_names = {"x", "w"}});
  Tensor w = random_tensor({8, 16}, kiln::kFloat32, "contiguous", 2);
  for (int64_t rows : {4, 4, 6, 7}) {
    (void)f(random_tensor({rows, 8}, kiln::kFloat32, "contiguous", static_cast<uint64_t>(rows)), w);
  }
  const kiln::jit::Explanation e = f.explain();
  EXPECT_EQ(e.name, "mlp");
  EXPECT_EQ(e.stats.calls, 4);
  // Entry 1 for 4 rows; entry 2 when the size changed (dim 0 dynamic from
  // then on), which specializes again for 7 rows.
  ASSERT_EQ(e.entries.size(), 2u) << e;
  EXPECT_EQ(e.entries[0].reason, "first call");
  EXPECT_TRUE(
      contains(e.entries[1].reason, "input 0 'x' size mismatch at dim 0: expected 4, got 6"))
      << e.entries[1].reason;
  EXPECT_TRUE(contains(e.entries[1].reason, "dim 0 is dynamic from now on"));
  for (const auto& entry : e.entries) {
    EXPECT_TRUE(entry.compiled);
    ASSERT_FALSE(entry.guards.empty());
    EXPECT_TRUE(contains(entry.guards[0], "input 0 'x'")) << entry.guards[0];
    ASSERT_FALSE(entry.plans.empty());
    for (const auto& p : entry.plans) {
      // The matmul is an extern call; the pointwise tail one fused kernel.
      EXPECT_EQ(p.steps, p.generated_kernels + p.extern_calls);
      EXPECT_EQ(static_cast<int64_t>(p.kernels.size()), p.steps);
      ASSERT_EQ(p.externs.size(), 1u) << e;
      EXPECT_GE(p.generated_kernels, 1) << e;
      bool fused_sigmoid = false;
      for (const std::string& k : p.kernels) {
        fused_sigmoid = fused_sigmoid || (contains(k, "fused kernel") && contains(k, "sigmoid"));
      }
      EXPECT_TRUE(fused_sigmoid) << e;
      EXPECT_EQ(p.graph_nodes, 0);  // CPU: no CUDA graph
    }
  }
  ASSERT_EQ(e.entries[1].plans.size(), 2u) << e;  // 6 and 7 rows
  EXPECT_EQ(e.entries[1].plans[0].sizes, (std::vector<int64_t>{6}));
  EXPECT_EQ(e.entries[1].plans[1].sizes, (std::vector<int64_t>{7}));
  // Note [What a specialization is for]
  EXPECT_EQ(e.entries[1].plans[1].specialized_for, "input 0 'x' dim 0 = 7");
  EXPECT_TRUE(contains(e.str(), "plan 2 (for input 0 'x' dim 0 = 7)")) << e;
  ASSERT_EQ(e.recompiles.size(), 3u) << e;
  EXPECT_EQ(e.recompiles[0].entry, 1);
  EXPECT_EQ(e.recompiles[1].entry, 2);
  EXPECT_EQ(e.recompiles[2].entry, 2);
  EXPECT_TRUE(
      contains(e.recompiles[2].reason, "a plan for input 0 'x' dim 0 = 7 (specialization 2)"))
      << e.recompiles[2].reason;
  EXPECT_TRUE(e.graph_breaks.empty());
  std::ostringstream os;
  os << e;
  const std::string text = os.str();
  for (const char* part :
       {"compiled function 'mlp': 2 entries, 4 calls", "entry 1 (first call): compiled",
        "guards:", "extern: ", "fused kernel: ", "recompiles:\n  entry 1: first call"}) {
    EXPECT_TRUE(contains(text, part)) << part << "\n" << text;
  }
}

TEST(Explain, CudaGraphNodesAndArena) {
  KILN_REQUIRE_CUDA();
  auto f = kiln::jit::compile(
      [](const Tensor& x) { return kiln::tanh(kiln::sigmoid(x * 3.0) + kiln::sum(x, {1}, true)); },
      {.name = "graphs"});
  Tensor x = random_tensor({16, 32}, kiln::kFloat32, "contiguous", 3).to(kiln::Device::cuda());
  for (int i = 0; i < 3; ++i) (void)f(x);  // run, capture, replay
  const kiln::jit::Explanation e = f.explain();
  ASSERT_EQ(e.entries.size(), 1u);
  ASSERT_EQ(e.entries[0].plans.size(), 1u);
  const auto& p = e.entries[0].plans[0];
  EXPECT_GT(p.graph_nodes, 0) << e;
  EXPECT_EQ(p.graph_nodes, f.stats().graph_nodes);
  EXPECT_GE(p.generated_kernels, 2) << e;
}

}  // namespace
