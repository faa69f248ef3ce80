// The memory plan (Note [Memory plan]): buffers live at the same time never
// share bytes, the arena is no larger than one buffer per node, storages the
// user holds stay out of the arena, and planned runs equal eager ones.

#include "jit/passes/memory_plan.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "jit/record/trace_buffer.h"
#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::jit::MemoryPlan;
using kiln::jit::PlannedBuffer;
using kiln::testing::random_tensor;

Tensor input(std::initializer_list<int64_t> sizes, const char* layout, uint64_t seed) {
  kiln::EagerGuard g;
  return random_tensor(sizes, kiln::kFloat32, layout, seed, -1, 1);
}

bool overlap_in_time(const PlannedBuffer& a, const PlannedBuffer& b) {
  return a.first <= b.last && b.first <= a.last;
}
bool overlap_in_memory(const PlannedBuffer& a, const PlannedBuffer& b) {
  return a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

// Every pair of buffers on one device that lives at the same time is disjoint.
void expect_valid(const std::vector<PlannedBuffer>& bufs, size_t arena, size_t alignment) {
  for (size_t i = 0; i < bufs.size(); ++i) {
    EXPECT_EQ(bufs[i].offset % alignment, 0u);
    EXPECT_LE(bufs[i].offset + bufs[i].bytes, arena);
    for (size_t j = i + 1; j < bufs.size(); ++j) {
      if (!(bufs[i].device == bufs[j].device)) continue;
      if (overlap_in_time(bufs[i], bufs[j])) {
        EXPECT_FALSE(overlap_in_memory(bufs[i], bufs[j]))
            << "buffers " << i << " [" << bufs[i].first << ", " << bufs[i].last << "] at "
            << bufs[i].offset << "+" << bufs[i].bytes << " and " << j << " [" << bufs[j].first
            << ", " << bufs[j].last << "] at " << bufs[j].offset << "+" << bufs[j].bytes;
      }
    }
  }
}

TEST(MemoryPlanOffsets, AChainReusesMemory) {
  // Three steps in a row, each reading the previous buffer: the first and the
  // third never live together.
  std::vector<PlannedBuffer> bufs(3);
  for (size_t i = 0; i < 3; ++i) {
    bufs[i].bytes = 1000;
    bufs[i].first = i;
    bufs[i].last = i + 1;
  }
  size_t arena = kiln::jit::assign_offsets(bufs, 64);
  EXPECT_EQ(arena, 2 * 1024u);
  expect_valid(bufs, arena, 64);
  EXPECT_EQ(bufs[0].offset, bufs[2].offset);
}

TEST(MemoryPlanOffsets, BestFitTakesTheSmallestGap) {
  // A long-lived small buffer between two gaps: a later small buffer takes the
  // gap that fits it best rather than growing the arena.
  std::vector<PlannedBuffer> bufs = {
      {nullptr, 4096, 0, 1, 0, {}},  // big, early
      {nullptr, 512, 0, 5, 0, {}},   // small, lives throughout
      {nullptr, 4096, 2, 3, 0, {}},  // big, reuses the first
      {nullptr, 256, 4, 5, 0, {}},   // fits where the bigs were
  };
  size_t arena = kiln::jit::assign_offsets(bufs, 64);
  expect_valid(bufs, arena, 64);
  EXPECT_EQ(arena, 4096u + 512u);
}

TEST(MemoryPlanOffsets, RandomIntervalsNeverOverlap) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(seed);
    size_t n = std::uniform_int_distribution<size_t>(1, 60)(rng);
    size_t steps = std::uniform_int_distribution<size_t>(1, 40)(rng);
    size_t align = seed % 2 ? 64 : 256;
    std::vector<PlannedBuffer> bufs(n);
    size_t naive = 0;
    for (PlannedBuffer& b : bufs) {
      b.first = std::uniform_int_distribution<size_t>(0, steps - 1)(rng);
      b.last = std::uniform_int_distribution<size_t>(b.first, steps)(rng);
      b.bytes = std::uniform_int_distribution<size_t>(1, 1 << 16)(rng);
      naive += (b.bytes + align - 1) / align * align;
    }
    size_t arena = kiln::jit::assign_offsets(bufs, align);
    SCOPED_TRACE("seed " + std::to_string(seed));
    expect_valid(bufs, arena, align);
    EXPECT_LE(arena, naive);
    // No plan beats the bytes live at the busiest step.
    size_t peak = 0;
    for (size_t s = 0; s <= steps; ++s) {
      size_t live = 0;
      for (const PlannedBuffer& b : bufs) live += b.first <= s && s <= b.last ? b.bytes : 0;
      peak = std::max(peak, live);
    }
    EXPECT_GE(arena, peak);
  }
}

class MemoryPlanRun : public ::testing::Test {
 protected:
  void SetUp() override { kiln::jit::flush(); }
  void TearDown() override { kiln::jit::flush(); }
};

// Checks the last run's plan; `held`: tensors the user holds.
void expect_plan_valid(const std::vector<Tensor>& held) {
  const MemoryPlan& plan = kiln::jit::last_memory_plan();
  size_t arenas = 0;
  for (const auto& a : plan.arenas) arenas += a.bytes;
  EXPECT_EQ(arenas, plan.planned_bytes);
  EXPECT_LE(plan.planned_bytes, plan.naive_bytes);
  auto stats = kiln::jit::trace_stats();
  EXPECT_EQ(stats.planned_bytes, static_cast<int64_t>(plan.planned_bytes));
  EXPECT_EQ(stats.naive_bytes, static_cast<int64_t>(plan.naive_bytes));
  for (const auto& a : plan.arenas) {
    std::vector<PlannedBuffer> on_device;
    for (const PlannedBuffer& b : plan.buffers) {
      if (b.device == a.device) on_device.push_back(b);
    }
    expect_valid(on_device, a.bytes, a.device.is_cuda() ? 256 : 64);
  }
  for (const Tensor& t : held) {
    const auto* s = t.impl()->storage().get();
    for (const PlannedBuffer& b : plan.buffers) EXPECT_NE(b.storage, s) << "a held storage";
    const char* p = static_cast<const char*>(t.data_ptr());
    for (const auto& a : plan.arenas) {
      const char* base = static_cast<const char*>(a.base);
      EXPECT_FALSE(t.numel() > 0 && p >= base && p < base + a.bytes) << "a held tensor in an arena";
    }
  }
}

std::vector<Tensor> mlp_chain(const Tensor& x, const std::vector<Tensor>& ws, Tensor* keep) {
  Tensor y = x;
  for (size_t i = 0; i < ws.size(); ++i) {
    y = kiln::tanh(kiln::mm(y, ws[i])) * 0.5f + 0.25f;
    if (i == 1 && keep) *keep = y;
  }
  return {kiln::softmax(y, -1), kiln::sum(y, {0})};
}

TEST_F(MemoryPlanRun, AChainOfLayersReusesTheArena) {
  Tensor x = input({8, 32}, "transposed", 1);
  std::vector<Tensor> ws;
  for (uint64_t i = 0; i < 6; ++i)
    ws.push_back(input({32, 32}, i % 2 ? "strided" : "contiguous", 10 + i));
  std::vector<Tensor> eager;
  {
    kiln::EagerGuard g;
    eager = mlp_chain(x, ws, nullptr);
  }
  std::vector<Tensor> lazy = mlp_chain(x, ws, nullptr);
  kiln::jit::flush();
  const MemoryPlan& plan = kiln::jit::last_memory_plan();
  // Each mm writes its slice (mm.out), each group stores what the next mm reads.
  EXPECT_GE(plan.buffers.size(), 10u);
  EXPECT_LT(plan.planned_bytes * 3, plan.naive_bytes);
  expect_plan_valid(lazy);
  for (size_t i = 0; i < lazy.size(); ++i) EXPECT_TENSOR_CLOSE(lazy[i], eager[i]);
}

TEST_F(MemoryPlanRun, HeldIntermediatesKeepTheirOwnMemory) {
  Tensor x = input({4, 16}, "offset", 2);
  std::vector<Tensor> ws;
  for (uint64_t i = 0; i < 4; ++i) ws.push_back(input({16, 16}, "transposed", 20 + i));
  Tensor eager_keep, lazy_keep;
  std::vector<Tensor> eager;
  {
    kiln::EagerGuard g;
    eager = mlp_chain(x, ws, &eager_keep);
  }
  std::vector<Tensor> lazy = mlp_chain(x, ws, &lazy_keep);
  kiln::jit::flush();
  std::vector<Tensor> held = lazy;
  held.push_back(lazy_keep);
  expect_plan_valid(held);
  EXPECT_TENSOR_CLOSE(lazy_keep, eager_keep);
  for (size_t i = 0; i < lazy.size(); ++i) EXPECT_TENSOR_CLOSE(lazy[i], eager[i]);
}

TEST_F(MemoryPlanRun, ExternsWriteThroughTheirOutOverloads) {
  // mm -> mm.out, sum.dim_IntList -> sum.IntList_out (a sum of bools: float
  // sums are reduction groups), and the comparison's group store: all
  // slices. The integer sum's scaling fuses with the add.
  Tensor a = input({5, 7}, "strided", 5), b = input({7, 6}, "transposed", 6);
  auto f = [&] { return kiln::sum(kiln::mm(a, b) > 0.1f, {1}, true) * 2.0f + a.narrow(1, 0, 1); };
  Tensor eager;
  {
    kiln::EagerGuard g;  // first: entering it runs what this thread recorded
    eager = f();
  }
  Tensor lazy = f();
  EXPECT_EQ(kiln::jit::TraceBuffer::current().describe_pending(),
            "extern[mm] fused[gt.Tensor -> 1 out] extern[sum.dim_IntList] "
            "fused[mul.Tensor add.Tensor -> 1 out]");
  kiln::jit::flush();
  EXPECT_EQ(kiln::jit::last_memory_plan().buffers.size(), 3u);
  expect_plan_valid({lazy});
  EXPECT_TENSOR_CLOSE(lazy, eager);
}

// A reduction group's prologue and epilogue stores that only later steps read
// are slices of the arena like a fused group's, written in the group's step.
TEST_F(MemoryPlanRun, ReductionGroupOutputsAreArenaSlices) {
  Tensor x = input({6, 16}, "transposed", 7), w = input({16, 5}, "strided", 8);
  Tensor g = input({16}, "contiguous", 9), bias = input({16}, "offset", 10);
  auto f = [&] {
    Tensor h = x * 0.5f + 1.0f;       // the prologue; its store is read by the second mm
    Tensor s = kiln::softmax(h, -1);  // the epilogue's store, read by the first mm
    Tensor n = kiln::layer_norm(x - 0.25f, {16}, g, bias);  // x - 0.25 joins the epilogue
    Tensor p0 = kiln::mm(s, w), p1 = kiln::mm(h, w), p2 = kiln::mm(n, w);
    return p0 + p1 - p2;
  };
  Tensor eager;
  {
    kiln::EagerGuard eg;
    eager = f();
  }
  Tensor lazy = f();
  EXPECT_EQ(kiln::jit::TraceBuffer::current().describe_pending(),
            "reduce[mul.Tensor add.Tensor > softmax.int > sub.Tensor -> 3 out] "
            "reduce[layer_norm -> 1 out] "
            "extern[mm] extern[mm] extern[mm] fused[add.Tensor sub.Tensor -> 1 out]");
  kiln::jit::flush();
  const MemoryPlan& plan = kiln::jit::last_memory_plan();
  // h (the prologue's store), s and x - 0.25 (the epilogue's) in step 0, n in
  // step 1, and the three products.
  ASSERT_EQ(plan.buffers.size(), 7u);
  size_t from_step0 = 0, from_step1 = 0;
  for (const PlannedBuffer& b : plan.buffers) {
    if (b.first == 0) {
      ++from_step0;
      EXPECT_EQ(b.bytes, 6u * 16 * sizeof(float));
      EXPECT_GE(b.last, 1u);  // read by a later step
    }
    if (b.first == 1) {
      ++from_step1;
      EXPECT_EQ(b.last, 4u);  // read by the third mm
    }
  }
  EXPECT_EQ(from_step0, 3u);
  EXPECT_EQ(from_step1, 1u);
  expect_plan_valid({lazy});
  EXPECT_TENSOR_CLOSE_TOL(lazy, eager, 1e-5, 1e-5);
}

TEST_F(MemoryPlanRun, PlannedMemoryOutlivesTheRunThroughViews) {
  // A view the user takes after the run keeps nothing planned alive by
  // accident: planned buffers are internal, so the user's results own theirs.
  Tensor a = input({6, 6}, "contiguous", 3), b = input({6, 6}, "transposed", 4);
  Tensor lazy = kiln::mm(kiln::mm(a, b) + 1.0f, b).t();
  Tensor eager;
  {
    kiln::EagerGuard g;
    eager = kiln::mm(kiln::mm(a, b) + 1.0f, b).t();
  }
  kiln::jit::flush();
  expect_plan_valid({lazy});
  EXPECT_TENSOR_CLOSE(lazy, eager);
}

TEST_F(MemoryPlanRun, SmallGpt2MatchesEager) {
  kiln::nn::GPT2Config config;
  config.n_layer = 2;
  config.d_model = 64;
  config.n_head = 4;
  config.vocab = 97;
  config.n_positions = 32;
  kiln::nn::GPT2 model = [&] {
    kiln::EagerGuard g;
    return kiln::nn::GPT2::random(config, kiln::kFloat32, kiln::Device::cpu(), 3);
  }();
  Tensor ids = [] {
    kiln::EagerGuard g;
    return kiln::testing::random_tensor({2, 12}, kiln::kInt64, "contiguous", 4, 0, 97);
  }();
  Tensor eager;
  {
    kiln::EagerGuard g;
    eager = model.lm_head(model.forward(ids));
  }
  Tensor lazy = model.lm_head(model.forward(ids));
  kiln::jit::flush();
  const MemoryPlan& plan = kiln::jit::last_memory_plan();
  EXPECT_GT(plan.buffers.size(), 10u);
  EXPECT_LT(plan.planned_bytes, plan.naive_bytes);
  expect_plan_valid({lazy});
  EXPECT_TENSOR_CLOSE_TOL(lazy, eager, 1e-4, 1e-5);
}

// Random programs of externs (mm, sum, softmax), pointwise ops and views on
// non-contiguous inputs: the plan is valid and values equal eager.
TEST_F(MemoryPlanRun, RandomProgramsMatchEager) {
  const char* layouts[] = {"contiguous", "transposed", "strided", "offset"};
  for (uint64_t seed = 0; seed < 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % n); };
    int64_t n = 4 + pick(5);
    std::vector<Tensor> inputs;
    for (int i = 0; i < 3; ++i) inputs.push_back(input({n, n}, layouts[pick(4)], seed * 7 + i));
    std::vector<int> ops;
    for (int k = 0; k < 12; ++k) ops.push_back(pick(1 << 16));
    auto program = [&](std::vector<Tensor>* held) {
      std::vector<Tensor> pool = inputs;
      for (int code : ops) {
        const Tensor& a = pool[code % pool.size()];
        const Tensor& b = pool[(code / 7) % pool.size()];
        Tensor r;
        switch ((code / 49) % 6) {
          case 0:
            r = kiln::mm(a, b) * 0.1f;
            break;
          case 1:
            r = kiln::tanh(a + b.t());
            break;
          case 2:
            r = kiln::softmax(a, code % 2);
            break;
          case 3:
            r = kiln::sum(a, {code % 2}, true) * b;
            break;
          case 4:
            r = kiln::sigmoid(a.narrow(0, 1, n - 1)).sum({0}, true) + b;
            break;
          default:
            r = a * b - 0.5f;
            break;
        }
        pool.push_back(r);
        if (held && code % 5 == 0) held->push_back(r);
      }
      return pool.back();
    };
    Tensor eager;
    {
      kiln::EagerGuard g;
      eager = program(nullptr);
    }
    std::vector<Tensor> held;
    Tensor lazy = program(&held);
    held.push_back(lazy);
    kiln::jit::flush();
    expect_plan_valid(held);
    EXPECT_TENSOR_CLOSE_TOL(lazy, eager, 1e-4, 1e-5);
  }
}

}  // namespace
