// An error inside a lazy trace stays with its request (Note [Failures in a
// trace]): each case runs in eager mode, where the bad op raises at its call,
// and in lazy mode, where it raises from the code that needs its result while
// everything independent of it keeps its value.

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::random_tensor;

constexpr const char* kBadIndex = "index 7 is out of bounds";

// A non-contiguous 5x3 input with values that are never zero.
Tensor input(uint64_t seed) {
  kiln::EagerGuard eager;
  return random_tensor({5, 3}, kiln::kFloat32, "transposed", seed, 0.5, 2.0);
}

Tensor bad_index() {
  kiln::EagerGuard eager;
  return kiln::tensor<int64_t>({1, 7});
}

Tensor good_index() {
  kiln::EagerGuard eager;
  return kiln::tensor<int64_t>({1, 4});
}

// An eager copy of `t` (its value, computed now).
Tensor value_of(const Tensor& t) {
  Tensor v = t.contiguous();
  kiln::EagerGuard eager;
  return v.clone();
}

// What a program computes when nothing fails: the reference for lazy mode.
Tensor eager_reference(const std::function<Tensor()>& f) {
  kiln::EagerGuard eager;
  return f();
}

class LazyTraceErrors : public ::testing::TestWithParam<bool> {
 protected:
  bool lazy() const { return GetParam(); }
  void SetUp() override {
    kiln::jit::flush();
    if (!lazy()) eager_.emplace();
  }
  void TearDown() override {
    eager_.reset();
    kiln::jit::flush();
  }
  std::optional<kiln::EagerGuard> eager_;
};

TEST_P(LazyTraceErrors, TheFailingOpsErrorReachesWhoNeedsItsResult) {
  Tensor x = input(1);
  if (!lazy()) {
    EXPECT_KILN_ERROR(kiln::index_select(x, 0, bad_index()), kBadIndex);
    return;
  }
  Tensor bad = kiln::index_select(x, 0, bad_index());
  Tensor after = bad * 2.0f + 1.0f;
  EXPECT_TRUE(after.is_pending());
  EXPECT_KILN_ERROR(after.data_ptr(), kBadIndex);
  EXPECT_KILN_ERROR(after.data_ptr(), "[index_select");  // it names the op that failed
  // Again, from the op itself and from its dependant: the same error, each time.
  EXPECT_KILN_ERROR(bad[0][1].item<float>(), kBadIndex);
  EXPECT_KILN_ERROR(after.to(kiln::Device::cpu()).data_ptr(), kBadIndex);
  EXPECT_KILN_ERROR(after.data_ptr(), kBadIndex);
  // Recording an op that reads it raises at the call.
  EXPECT_KILN_ERROR(bad + 1.0f, kBadIndex);
}

TEST_P(LazyTraceErrors, IndependentWorkInTheSameTraceKeepsItsValues) {
  Tensor x = input(2), y = input(3);
  auto before = [&] { return kiln::sigmoid(x) * y; };
  auto after = [&] { return kiln::exp(x) - kiln::matmul(kiln::matmul(x, y.t()), y) * 0.01f; };
  const Tensor want_before = eager_reference(before), want_after = eager_reference(after);
  Tensor a = before();
  if (lazy()) {
    Tensor bad = kiln::index_select(x, 0, bad_index());
    Tensor bad_too = kiln::relu(bad) * a.narrow(0, 0, 2);  // also reads independent work
    Tensor b = after();
    // Reading independent work runs the trace, bad op included, without raising.
    EXPECT_TENSOR_CLOSE(b, want_after);
    EXPECT_TENSOR_CLOSE(a, want_before);
    EXPECT_KILN_ERROR(bad_too.data_ptr(), kBadIndex);
    EXPECT_KILN_ERROR(bad.data_ptr(), kBadIndex);
  } else {
    EXPECT_KILN_ERROR(kiln::index_select(x, 0, bad_index()), kBadIndex);
    EXPECT_TENSOR_CLOSE(after(), want_after);
    EXPECT_TENSOR_CLOSE(a, want_before);
  }
}

// A weight (or KV cache) written in place after someone's bad op, in the same trace.
TEST_P(LazyTraceErrors, AnInPlaceWriteAfterAnUnrelatedFailureIsKept) {
  Tensor x = input(4);
  Tensor w = value_of(input(5));
  const Tensor want = eager_reference([&] { return w + 1.0f; });
  Tensor bad;
  if (lazy()) {
    bad = kiln::index_select(x, 0, bad_index());
  } else {
    EXPECT_KILN_ERROR(kiln::index_select(x, 0, bad_index()), kBadIndex);
  }
  w.add_(1.0f);
  EXPECT_TENSOR_CLOSE(w, want);
  w.fill_(3.0f);  // and it stays writable
  EXPECT_FLOAT_EQ(w[2][1].item<float>(), 3.0f);
  if (lazy()) {
    EXPECT_KILN_ERROR(bad.data_ptr(), kBadIndex);
  }
}

// The target of the failing write holds the error until something overwrites all of it.
TEST_P(LazyTraceErrors, AFailedInPlaceTargetHoldsTheErrorUntilOverwritten) {
  Tensor cache = value_of(input(6));
  Tensor src = value_of(input(7).narrow(0, 0, 2));
  if (!lazy()) {
    EXPECT_KILN_ERROR(kiln::index_copy_(cache, 0, bad_index(), src), kBadIndex);
    cache.fill_(0.0f);
    EXPECT_FLOAT_EQ(cache[4][2].item<float>(), 0.0f);
    return;
  }
  kiln::index_copy_(cache, 0, bad_index(), src);
  EXPECT_KILN_ERROR(cache.data_ptr(), kBadIndex);
  EXPECT_KILN_ERROR(cache.data_ptr(), "[index_copy_]");     // it names the op that failed
  EXPECT_KILN_ERROR(cache[0][0].item<float>(), kBadIndex);  // views too
  // A write that reads the lost value raises at the call; so does one that covers part of it.
  EXPECT_KILN_ERROR(cache.add_(1.0f), kBadIndex);
  EXPECT_KILN_ERROR(cache.narrow(0, 0, 2).fill_(1.0f), kBadIndex);
  EXPECT_KILN_ERROR(cache.data_ptr(), kBadIndex);
  // fill_ of all of it makes it usable again, then a good index_copy_ works.
  cache.fill_(0.5f);
  kiln::index_copy_(cache, 0, good_index(), src);
  const Tensor want = eager_reference([&] {
    Tensor c = kiln::full({5, 3}, 0.5f);
    kiln::index_copy_(c, 0, good_index(), src);
    return c;
  });
  EXPECT_TENSOR_CLOSE(cache, want);
}

TEST_P(LazyTraceErrors, CopyAndZeroOverwriteAFailedTarget) {
  Tensor fresh = value_of(input(8));
  Tensor src = value_of(input(9).narrow(0, 0, 2));
  for (int how = 0; how < 2; ++how) {
    Tensor cache = value_of(input(10));
    if (lazy()) {
      kiln::index_copy_(cache, 0, bad_index(), src);
      EXPECT_KILN_ERROR(cache.data_ptr(), kBadIndex);
    } else {
      EXPECT_KILN_ERROR(kiln::index_copy_(cache, 0, bad_index(), src), kBadIndex);
    }
    if (how == 0) {
      cache.copy_(fresh);
      EXPECT_TENSOR_CLOSE(cache, fresh);
    } else {
      cache.zero_();
      EXPECT_FLOAT_EQ(cache.sum().item<float>(), 0.0f);
    }
  }
}

// An in-place write that reads a failed result did not happen: its target says why.
TEST_P(LazyTraceErrors, AnInPlaceWriteOfAFailedValueCarriesItsError) {
  Tensor x = input(11);
  Tensor w = value_of(input(12).narrow(0, 0, 2));
  if (!lazy()) {
    EXPECT_KILN_ERROR(kiln::index_select(x, 0, bad_index()), kBadIndex);
    return;
  }
  Tensor bad = kiln::index_select(x, 0, bad_index());
  kiln::jit::flush();  // the failure is known when the write is recorded
  EXPECT_KILN_ERROR(w.add_(bad), kBadIndex);
  // Recorded before the failure is known: the write is skipped, its target carries the error.
  Tensor bad2 = kiln::index_select(x, 0, bad_index());
  w.add_(bad2);
  EXPECT_KILN_ERROR(w.data_ptr(), kBadIndex);
  w.copy_(x.narrow(0, 0, 2));
  EXPECT_TENSOR_CLOSE(w, value_of(x.narrow(0, 0, 2)));
}

TEST_P(LazyTraceErrors, AFullTraceDoesNotRaiseAnotherOpsError) {
  Tensor x = input(13);
  Tensor bad;
  if (lazy()) {
    bad = kiln::index_select(x, 0, bad_index());
  } else {
    EXPECT_KILN_ERROR(kiln::index_select(x, 0, bad_index()), kBadIndex);
  }
  Tensor y = value_of(input(14));
  auto before = kiln::jit::trace_stats();
  constexpr int kOps = 10240;  // the trace fills up twice on the way
  for (int i = 0; i < kOps; ++i) y = y + 1.0f;
  if (lazy()) {
    EXPECT_GE(kiln::jit::trace_stats().flushes - before.flushes, 2);
  }
  const Tensor want = eager_reference([&] {
    Tensor r = input(14);
    for (int i = 0; i < kOps; ++i) r = r + 1.0f;
    return r;
  });
  EXPECT_TENSOR_CLOSE(y, want);
  if (lazy()) {
    EXPECT_KILN_ERROR(bad.data_ptr(), kBadIndex);
  }
}

// Nobody holds its result: the next materialization on the thread raises it, once.
TEST_P(LazyTraceErrors, ABadOpWhoseResultIsDroppedStillRaises) {
  Tensor x = input(15);
  if (!lazy()) {
    EXPECT_KILN_ERROR((void)kiln::index_select(x, 0, bad_index()), kBadIndex);
    return;
  }
  (void)kiln::index_select(x, 0, bad_index());
  Tensor y = x * 3.0f;
  EXPECT_KILN_ERROR(y.data_ptr(), "[lazy] op 0 'index_select' failed and nothing held its result");
  EXPECT_TENSOR_CLOSE(y, eager_reference([&] { return x * 3.0f; }));  // computed all the same
  // Raised by kiln::sync() too, and by a full trace only later.
  (void)kiln::index_select(x, 0, bad_index());
  EXPECT_KILN_ERROR(kiln::sync(), kBadIndex);
  kiln::sync();  // raised once
  // A dead node whose op checks nothing is still dropped unrun.
  auto before = kiln::jit::trace_stats();
  (void)(x * 2.0f);
  Tensor z = x + 2.0f;
  z.data_ptr();
  EXPECT_EQ(kiln::jit::trace_stats().dead_nodes - before.dead_nodes, 1);
}

// An integer division by zero fails on its values as a bad index does, so a
// dropped one raises too (it used to be dropped unrun); a float division,
// which cannot fail, is still dropped.
TEST_P(LazyTraceErrors, ADroppedIntegerDivisionByZeroStillRaises) {
  const kiln::TensorOptions i64 = kiln::TensorOptions(kiln::kInt64);
  Tensor a = kiln::arange(6, i64).view({2, 3}), zero = kiln::zeros({3}, i64);
  for (const auto& divide : std::vector<std::function<Tensor()>>{
           [&] { return kiln::floor_divide(a, zero); },
           [&] { return kiln::remainder(a, zero); },
           [&] { return kiln::fmod(a, zero); },
           [&] { return kiln::div(a, zero, "trunc"); },
       }) {
    if (!lazy()) {
      EXPECT_KILN_ERROR((void)divide(), "ZeroDivisionError");
      continue;
    }
    (void)divide();
    EXPECT_KILN_ERROR(kiln::sync(), "ZeroDivisionError");
    kiln::sync();  // raised once
  }
  if (lazy()) {
    auto before = kiln::jit::trace_stats();
    (void)kiln::div(a, zero);  // true division: a float result, nothing to check
    kiln::sync();
    EXPECT_EQ(kiln::jit::trace_stats().dead_nodes - before.dead_nodes, 1);
  }
}

// Note [A failed member of a group]: an integer division by zero fused, by
// shape, with an independent in-place write and independent work (a group
// the CPU's generator does not take runs member by member) fails itself and
// what reads it; the rest keep their values, as in eager mode.
TEST_P(LazyTraceErrors, AFailedMemberLeavesTheRestOfItsGroupWhole) {
  const kiln::TensorOptions i64 = kiln::TensorOptions(kiln::kInt64);
  Tensor a, zero, src, y;
  {
    kiln::EagerGuard eager;
    a = kiln::arange(12, i64).view({3, 4}) + 1;
    zero = a.clone();
    zero.view({12}).narrow(0, 5, 1).fill_(0);
    src = random_tensor({4, 3}, kiln::kFloat32, "contiguous", 11).t();
    y = kiln::ones({3, 4});
  }
  const Tensor want_w = eager_reference([&] { return kiln::exp(src); });
  const Tensor want_y = eager_reference([&] { return kiln::full({3, 4}, 2.0f); });
  if (!lazy()) {
    y.add_(1.0f);
    EXPECT_KILN_ERROR((void)kiln::floor_divide(a, zero), "ZeroDivisionError");
    EXPECT_TENSOR_CLOSE(y, want_y);
    return;
  }
  y.add_(1.0f);
  Tensor z = y * 2.0f;
  Tensor w = kiln::exp(src);
  Tensor q = kiln::floor_divide(a, zero);
  Tensor after = q.to(kiln::kFloat32) + z;  // reads the failure
  Tensor r = kiln::remainder(a, zero);      // fails on its own, after it
  Tensor v = w * 3.0f;                      // runs after both failures
  EXPECT_TENSOR_CLOSE(y, want_y);
  EXPECT_TENSOR_CLOSE(z, eager_reference([&] { return kiln::full({3, 4}, 4.0f); }));
  EXPECT_TENSOR_CLOSE(w, want_w);
  EXPECT_TENSOR_CLOSE(v, eager_reference([&] { return kiln::exp(src) * 3.0f; }));
  EXPECT_KILN_ERROR(q.data_ptr(), "ZeroDivisionError");
  EXPECT_KILN_ERROR(q.data_ptr(), "[floor_divide");
  EXPECT_KILN_ERROR(after.data_ptr(), "[floor_divide");
  EXPECT_KILN_ERROR(r.data_ptr(), "[remainder");
  y.add_(1.0f);  // the in-place target stays writable
  EXPECT_FLOAT_EQ(y[1][2].item<float>(), 3.0f);
}

// A held result that two failures feed raises one of them; the other is not
// raised again by the thread's next, unrelated read (the caller already has
// an error for that computation).
TEST_P(LazyTraceErrors, AResultOfTwoFailuresClaimsBoth) {
  // An index computed in the trace, so that lazily the failures come when it runs.
  auto bad_index = [] { return kiln::full({2}, 7, kiln::TensorOptions(kiln::kInt64)); };
  auto two_bad_writes = [&] {
    Tensor a = kiln::zeros({4, 2}), b = kiln::zeros({4, 2});
    kiln::index_copy_(a, 0, bad_index(), kiln::ones({2, 2}));
    kiln::index_copy_(b, 0, bad_index(), kiln::ones({2, 2}));
    return a + b;
  };
  if (!lazy()) {
    EXPECT_KILN_ERROR(two_bad_writes(), kBadIndex);
    return;
  }
  Tensor r = two_bad_writes();
  EXPECT_KILN_ERROR(r.data_ptr(), kBadIndex);
  const Tensor y = kiln::ones({3}) * 2.0f;
  EXPECT_EQ(y.sum().item<float>(), 6.0f);
  kiln::sync();
  // Through a chain: the second failure meets the first's dependants further on.
  Tensor a = kiln::zeros({4, 2}), b = kiln::zeros({4, 2});
  kiln::index_copy_(a, 0, bad_index(), kiln::ones({2, 2}));
  kiln::index_copy_(b, 0, bad_index(), kiln::ones({2, 2}));
  Tensor r2 = kiln::exp(a * 2.0f) + kiln::relu(b);
  a = Tensor();
  b = Tensor();
  EXPECT_KILN_ERROR(r2.data_ptr(), kBadIndex);
  EXPECT_EQ((kiln::ones({3}) * 2.0f).sum().item<float>(), 6.0f);
  kiln::sync();
}

// Note [A failed call settles its thread's dead work]: a request that an op
// raising at its call ends (a shape error) takes the failures of what it
// recorded before; the thread's next request, valid, raises nothing of it.
TEST_P(LazyTraceErrors, ARequestEndedByARaisingOpTakesItsOwnFailures) {
  Tensor x = input(17);
  const auto index = [] { return kiln::full({2}, 7, kiln::TensorOptions(kiln::kInt64)); };
  // The bad gather still held by the request when the shape error comes.
  auto held = [&] {
    Tensor picked = kiln::index_select(x, 0, index());
    return kiln::add(picked, kiln::ones({4, 4}));
  };
  // The bad gather dropped before the shape error.
  auto dropped = [&] {
    (void)kiln::index_select(x, 0, index());
    return kiln::add(x, kiln::ones({4, 4}));
  };
  if (!lazy()) {
    EXPECT_KILN_ERROR(held(), kBadIndex);
    EXPECT_KILN_ERROR(dropped(), kBadIndex);
    return;
  }
  EXPECT_KILN_ERROR(held(), "cannot broadcast");
  EXPECT_EQ((kiln::ones({3}) * 2.0f).sum().item<float>(), 6.0f);
  try {
    (void)dropped();
    ADD_FAILURE() << "expected a kiln::Error";
  } catch (const kiln::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot broadcast"), std::string::npos) << what;
    EXPECT_NE(what.find("and before it on this thread: [lazy] op "), std::string::npos) << what;
    EXPECT_NE(what.find("'index_select' failed and nothing held its result"), std::string::npos)
        << what;
  }
  EXPECT_EQ((kiln::ones({3}) * 2.0f).sum().item<float>(), 6.0f);
  kiln::sync();
}

// A thread's dropped failure is its own: another thread's reads do not raise it.
TEST_P(LazyTraceErrors, ADroppedFailureBelongsToItsThread) {
  if (!lazy()) GTEST_SKIP() << "eager mode raises at the call";
  Tensor x = input(16);
  Tensor ok;
  std::thread other([&] {
    (void)kiln::index_select(x, 0, bad_index());
    ok = x - 1.0f;
  });
  other.join();  // the thread's exit runs its trace, logging the failure
  EXPECT_TENSOR_CLOSE(ok, eager_reference([&] { return x - 1.0f; }));
  kiln::sync();
}

INSTANTIATE_TEST_SUITE_P(Modes, LazyTraceErrors, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "lazy" : "eager"; });

// A flush that drops the last reference to a from_blob tensor runs its
// deleter; a deleter that records and reads kiln values gets them (it read
// null memory: the values counted as the running flush's own).
TEST(LazyTraceLifetimes, ADeleterRunByAFlushMayReadKilnValues) {
  static float data[4] = {1, 2, 3, 4};
  const Tensor keep = kiln::ones({2});
  kiln::sync();
  float seen = -1;
  Tensor u;
  {
    Tensor t = kiln::from_blob(data, {4}, kiln::kFloat32,
                               [&](void*) { seen = (keep * 3.0).sum().item<float>(); });
    u = t * 2.0;  // the pending trace holds the last reference to t
  }
  EXPECT_TENSOR_CLOSE(u, kiln::tensor<float>({2.f, 4.f, 6.f, 8.f}));
  EXPECT_EQ(seen, 6.0f);
}

// Note [Calls that fail before they run]: a compiled call whose memory
// plan does not fit (a 4 TB arena) fails before any step runs; what it
// writes carries the error, as a lazy trace's would (the captured cache kept
// its old value and no error), and the function works at a size that fits.
TEST(CompiledCallErrors, ACallWhoseMemoryDoesNotFitMarksWhatItWrites) {
  Tensor cache = kiln::zeros({4});
  kiln::sync();
  auto f = kiln::jit::compile(
      [&](const Tensor& x, int64_t n) {
        cache.add_(1.0);
        return kiln::cumsum(x.expand({n}).exp(), 0).sum();
      },
      {.name = "huge"});
  EXPECT_KILN_ERROR(f(kiln::zeros({1}), int64_t{1} << 40).item<float>(), "out of memory");
  EXPECT_KILN_ERROR(cache.data_ptr(), "out of memory");
  cache = kiln::zeros({4});
  EXPECT_EQ(f(kiln::zeros({1}), 8).item<float>(), 36.0f);
  kiln::EagerGuard eager;
  EXPECT_TENSOR_CLOSE(cache, kiln::ones({4}));
}

// A compiled call with a failing step raises it, leaves what it captured
// carrying it, and the function works on the next call.
TEST(CompiledCallErrors, ACallFailsWholeAndTheFunctionStaysUsable) {
  Tensor cache = value_of(input(17));
  auto step = kiln::jit::compile(
      [&cache](const Tensor& rows, const Tensor& index) {
        kiln::index_copy_(cache, 0, index, rows);
        return kiln::index_select(cache, 0, index) * 2.0f;
      },
      {.name = "write_rows"});
  Tensor rows = value_of(input(18).narrow(0, 0, 2));
  const Tensor start = value_of(cache);
  const Tensor want = eager_reference([&] {
    Tensor c = start.clone();
    kiln::index_copy_(c, 0, good_index(), rows);
    return kiln::index_select(c, 0, good_index()) * 2.0f;
  });
  EXPECT_TENSOR_CLOSE(step(rows, good_index()), want);  // traced
  cache.copy_(start);
  EXPECT_TENSOR_CLOSE(step(rows, good_index()), want);  // replayed
  EXPECT_KILN_ERROR(step(rows, bad_index()), kBadIndex);
  EXPECT_KILN_ERROR(cache.data_ptr(), kBadIndex);
  cache.copy_(start);
  EXPECT_TENSOR_CLOSE(step(rows, good_index()), want);
  cache.copy_(start);
  EXPECT_TENSOR_CLOSE(step(rows, good_index()), want);
}

}  // namespace
