// Lazy tracing semantics: ops are recorded, run when a value is needed, with
// the same values and aliasing as eager execution.

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

// Runs `f` eagerly and lazily on fresh copies of the same inputs; returns both results.
template <class F>
std::pair<Tensor, Tensor> eager_and_lazy(F&& f) {
  Tensor eager;
  {
    kiln::EagerGuard g;
    eager = f();
  }
  Tensor lazy = f();
  return {eager, lazy};
}

Tensor seq(std::initializer_list<int64_t> sizes, float start = 1.0f) {
  kiln::EagerGuard g;
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + 0.5f * static_cast<float>(i);
  return kiln::tensor(v, sizes);
}

TEST(Trace, OpsAreRecordedNotRun) {
  ASSERT_TRUE(kiln::jit::is_lazy());
  Tensor a = seq({4}), b = seq({4}, 3.0f);
  auto before = kiln::jit::trace_stats();
  Tensor c = a + b * b;
  EXPECT_TRUE(c.is_pending());
  EXPECT_EQ(c.sizes(), kiln::IntArrayRef({4}));
  EXPECT_EQ(kiln::jit::trace_stats().recorded_ops - before.recorded_ops, 2);
  EXPECT_EQ(kiln::jit::trace_stats().flushes, before.flushes);
  float first = c[0].item<float>();  // data access runs the trace
  EXPECT_FALSE(c.is_pending());
  EXPECT_FLOAT_EQ(first, 1.0f + 3.0f * 3.0f);
}

TEST(Trace, DeadTensorsAreNeverComputed) {
  Tensor a = seq({8}), b = seq({8});
  kiln::jit::flush();
  auto before = kiln::jit::trace_stats();
  { Tensor dead = a * b; }  // dropped before anything reads it
  Tensor live = a + b;
  live.data_ptr();
  auto after = kiln::jit::trace_stats();
  EXPECT_EQ(after.executed_nodes - before.executed_nodes, 1);
  EXPECT_EQ(after.dead_nodes - before.dead_nodes, 1);
}

TEST(Trace, WritesThroughViewsMatchEager) {
  auto [eager, lazy] = eager_and_lazy([] {
    Tensor x = kiln::zeros({4, 5});
    Tensor rows = x.narrow(0, 1, 2);
    rows.add_(seq({5}));                         // broadcast write into a view
    x.select(1, 3).mul_(kiln::full({4}, 3.0f));  // strided column
    Tensor t = x.t();
    t.narrow(0, 0, 1).fill_(7.0f);  // a view of a view
    return x;
  });
  EXPECT_TENSOR_CLOSE(lazy, eager);
}

TEST(Trace, ReadsBeforeAnInPlaceWriteSeeTheOldValues) {
  auto [eager, lazy] = eager_and_lazy([] {
    Tensor x = seq({3, 3});
    Tensor before = x * 2.0f;  // must see x as it was
    x.add_(100.0f);
    Tensor after = x * 2.0f;
    return before * 1000.0f + after;  // both states, distinguishable
  });
  EXPECT_TENSOR_CLOSE(lazy, eager);
}

TEST(Trace, InPlaceIntoARealTensorLikeAKvCache) {
  Tensor cache_e = seq({2, 6, 3}), cache_l = seq({2, 6, 3});
  Tensor k = seq({2, 1, 3}, -5.0f);
  {
    kiln::EagerGuard g;
    cache_e.narrow(1, 4, 1).copy_(k);
  }
  kiln::jit::flush();
  cache_l.narrow(1, 4, 1).copy_(k);
  EXPECT_TRUE(cache_l.is_pending());  // a real tensor with a recorded write
  EXPECT_TENSOR_CLOSE(cache_l, cache_e);
  EXPECT_FALSE(cache_l.is_pending());
}

// Note [Entering eager mode]: an eager write after a recorded read of the same
// tensor does not reach that read, in place or through out=, and the values
// computed in the guard are the eager ones.
TEST(Trace, EagerWritesAfterARecordedReadDoNotReachIt) {
  Tensor x = seq({4});
  Tensor out = seq({4}, 10.0f);
  kiln::jit::flush();
  Tensor y = x * 2.0f;    // recorded: reads x
  Tensor z = out + 1.0f;  // recorded: reads out
  {
    kiln::EagerGuard g;
    EXPECT_FALSE(y.is_pending());  // the trace ran on entry
    x.add_(100.0f);
    kiln::mul_out(out, x, x);
  }
  Tensor expected_y, expected_z;
  {
    kiln::EagerGuard g;
    expected_y = seq({4}) * 2.0f;
    expected_z = seq({4}, 10.0f) + 1.0f;
  }
  EXPECT_TENSOR_CLOSE(y, expected_y);
  EXPECT_TENSOR_CLOSE(z, expected_z);
}

TEST(Trace, EagerGuardRunsAtOnce) {
  Tensor a = seq({3});
  kiln::EagerGuard g;
  EXPECT_FALSE(kiln::jit::is_lazy());
  Tensor b = a + a;
  EXPECT_FALSE(b.is_pending());
}

TEST(Trace, AnotherThreadCanReadAPendingTensor) {
  Tensor a = seq({16});
  Tensor b = a * 3.0f + 1.0f;
  ASSERT_TRUE(b.is_pending());
  float got = 0;
  std::thread reader([&] { got = b[5].item<float>(); });
  reader.join();
  EXPECT_FLOAT_EQ(got, (1.0f + 0.5f * 5) * 3.0f + 1.0f);
}

// One thread records while another keeps running its trace by reading what
// it published: the trace's lock, the spare node buffers and the impl pools
// (objects freed on the reading thread) all see both threads at once.
TEST(Trace, RecordingWhileAnotherThreadFlushes) {
  constexpr int kSteps = 20000;
  std::mutex mu;
  Tensor published;
  int published_step = -1;
  std::atomic<bool> done{false};
  std::atomic<int> checked{0}, wrong{0};
  std::thread reader([&] {
    while (!done.load()) {
      Tensor t;
      int step;
      {
        std::lock_guard<std::mutex> lock(mu);
        t = published;
        step = published_step;
      }
      if (!t.defined()) continue;
      // x_step = 1 + step, all elements; y = x * 2 - 1.
      if (t[3].item<float>() != 2.0f * (1 + step) - 1.0f) wrong++;
      checked++;
    }
  });
  Tensor x = kiln::ones({8});
  for (int i = 1; i <= kSteps; ++i) {
    x = x + 1.0f;
    if (i % 16 == 0) {
      Tensor y = x * 2.0f - 1.0f;
      std::lock_guard<std::mutex> lock(mu);
      published = y;
      published_step = i;
    }
  }
  EXPECT_FLOAT_EQ(x[0].item<float>(), 1.0f + kSteps);
  while (checked.load() == 0) std::this_thread::yield();  // the reader may start late
  done = true;
  reader.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(checked.load(), 0);
}

TEST(Trace, FullTraceFlushesItself) {
  Tensor x = seq({2});
  auto before = kiln::jit::trace_stats();
  for (int i = 0; i < 5000; ++i) x = x + 1.0f;
  EXPECT_GE(kiln::jit::trace_stats().flushes - before.flushes, 1);
  EXPECT_FLOAT_EQ(x[1].item<float>(), 1.5f + 5000.0f);
}

TEST(Trace, RandomOpsReadTheGeneratorAtTheCall) {
  auto draw = [] {
    kiln::manual_seed(11);
    Tensor a = kiln::rand({5});
    kiln::manual_seed(12);  // must not change `a`
    Tensor b = kiln::randn({5});
    return a * 10.0f + b;
  };
  auto [eager, lazy] = eager_and_lazy(draw);
  EXPECT_TENSOR_CLOSE(lazy, eager);
}

TEST(Trace, DataDependentErrorsSurfaceWhenTheTraceRuns) {
  kiln::jit::flush();
  Tensor x = seq({5, 2});
  Tensor bad = kiln::index_select(x, 0, kiln::tensor<int64_t>({1, 7}));  // 7 is out of range
  Tensor after = bad * 2.0f;
  EXPECT_TRUE(after.is_pending());
  EXPECT_KILN_ERROR(after.data_ptr(), "index 7 is out of bounds");
  // What the failure kept from being computed stays unreadable, with the reason
  // (tests/errors/lazy_trace_errors_test.cpp has the rest of Note [Failures in a trace]).
  EXPECT_KILN_ERROR(after.data_ptr(), "index 7 is out of bounds");
  // The thread keeps working.
  Tensor ok = x + 1.0f;
  EXPECT_FLOAT_EQ(ok[0][0].item<float>(), 2.0f);
}

TEST(Trace, InPlaceWritesBumpTheVersionAtTheCall) {
  Tensor x = seq({4});
  int64_t v0 = x.version();
  x.add_(1.0f);
  EXPECT_GT(x.version(), v0);
  EXPECT_TRUE(x.is_pending());
}

TEST(Trace, ShapeErrorsAreRaisedAtTheCall) {
  Tensor a = seq({3}), b = seq({4});
  EXPECT_KILN_ERROR(a + b, "cannot broadcast");
}

}  // namespace
