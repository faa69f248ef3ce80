// jit::compile called with arguments that differ in number or kind from its
// first call, or with an undefined tensor: a kiln::Error naming the function
// and the argument.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

TEST(CompileErrors, ArgumentCountDiffersFromFirstCall) {
  auto f = kiln::jit::compile([](const auto&... xs) { return (xs + ...); }, {.name = "sum_all"});
  Tensor a = kiln::ones({2}), b = kiln::ones({2});
  (void)f(a);
  EXPECT_KILN_ERROR(f(a, b),
                    "[jit::compile] sum_all: expected 1 arguments (as in its first call), got 2");
}

TEST(CompileErrors, ArgumentKindDiffersFromFirstCall) {
  auto f = kiln::jit::compile(
      [](const auto& x) {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, Tensor>) {
          return x * 2.0;
        } else {
          return kiln::full({2}, x);
        }
      },
      {.name = "twice", .input_names = {"x"}});
  (void)f(kiln::ones({2}));
  EXPECT_KILN_ERROR(
      f(2.5),
      "[jit::compile] twice: argument 0 'x' expected Tensor (as in its first call), got float");
}

TEST(CompileErrors, UndefinedTensorArgument) {
  auto f = kiln::jit::compile([](const Tensor& x) { return x + 1.0; }, {.name = "inc"});
  EXPECT_KILN_ERROR(
      f(Tensor()),
      "[jit::compile] inc: argument 0 expected a defined Tensor, got an undefined one");
  auto g = kiln::jit::compile([](const std::vector<Tensor>& xs) { return xs[0] + xs[1]; },
                              {.name = "pair"});
  const Tensor x = kiln::ones({2});
  EXPECT_TENSOR_CLOSE(g(std::vector<Tensor>{x, x}), kiln::full({2}, 2.0));
  EXPECT_KILN_ERROR(g(std::vector<Tensor>{x, Tensor()}),
                    "[jit::compile] pair: argument 0 expected defined Tensors, got an undefined "
                    "one at index 1");
}

}  // namespace

namespace {

// Options that cannot mean anything raise where they are given (an empty
// name, limits, buckets, negative argument indexes) or at the first call (an argument the
// call does not have, a dim past the argument's rank, a number dim).
TEST(CompileErrors, OptionsThatMeanNothing) {
  auto body = [](const Tensor& x) { return x * 2.0; };
  EXPECT_KILN_ERROR(kiln::jit::compile(body, {.name = ""}),
                    "[jit::compile] expected a non-empty Options::name, got \"\"");
  EXPECT_KILN_ERROR(kiln::jit::compile(body, {.name = "c", .cache_limit = 0}),
                    "[jit::compile] c: expected a cache_limit of at least 1 entry, got 0");
  kiln::jit::Options limit;
  limit.name = "s";
  limit.specialization_limit = -1;
  EXPECT_KILN_ERROR(kiln::jit::compile(body, limit),
                    "a specialization_limit of at least 1, got -1");
  EXPECT_KILN_ERROR(
      kiln::jit::compile(body, {.name = "b", .dynamic = {{0, 0}}, .buckets = {8, 4}}),
      "[jit::compile] b: expected buckets of increasing sizes of at least 1, got [8, 4]");
  EXPECT_KILN_ERROR(kiln::jit::compile(body, {.name = "b0", .dynamic = {{0, 0}}, .buckets = {0}}),
                    "buckets of increasing sizes of at least 1, got [0]");
  EXPECT_KILN_ERROR(kiln::jit::compile(body, {.name = "n", .dynamic = {{-1, 0}}}),
                    "dynamic dims of arguments 0 and up, got argument -1");
  const Tensor x = kiln::ones({3, 2});
  auto past = kiln::jit::compile(body, {.name = "past", .dynamic = {{5, 0}}});
  EXPECT_KILN_ERROR(past(x),
                    "[jit::compile] past: expected dynamic dims (Options::dynamic, "
                    "mark_dynamic) of tensor arguments, got argument 5 of a call with 1 "
                    "arguments");
  auto rank = kiln::jit::compile(body, {.name = "rank"});
  rank.mark_dynamic(0, 9);
  EXPECT_KILN_ERROR(rank(x),
                    "expected dynamic dim 9 of argument 0 within its rank, got a tensor "
                    "of rank 2");
  EXPECT_KILN_ERROR(rank.mark_dynamic(-2, 0), "mark_dynamic of argument 0 and up, got argument -2");
  auto fine = kiln::jit::compile(body, {.name = "fine", .dynamic = {{0, -1}}});
  EXPECT_TENSOR_CLOSE(fine(x), kiln::full({3, 2}, 2.0));
  auto names = kiln::jit::compile(body, {.name = "names", .input_names = {"x", "y"}});
  EXPECT_KILN_ERROR(names(x),
                    "[jit::compile] names: expected at most one of Options::input_names per "
                    "argument (1), got 2");
}

}  // namespace

namespace {

// A trace that throws builds no entry: explain() lists each entry once (the
// failed attempt used to be listed beside the entry the next call built).
TEST(CompileErrors, ATraceThatThrowsLeavesNoEntryInTheHistory) {
  bool fail = true;
  auto f = kiln::jit::compile(
      [&](const Tensor& x) {
        KILN_CHECK(!fail, "[test] the body failed");
        return x * 2.0;
      },
      {.name = "throws"});
  const Tensor x = kiln::ones({2});
  EXPECT_KILN_ERROR(f(x), "[test] the body failed");
  fail = false;
  EXPECT_TENSOR_CLOSE(f(x), kiln::full({2}, 2.0));
  const kiln::jit::Explanation e = f.explain();
  ASSERT_EQ(e.recompiles.size(), 1u);
  EXPECT_EQ(e.recompiles[0].entry, 1);
  EXPECT_EQ(e.entries.size(), 1u);
  EXPECT_EQ(e.stats.entries, 1);
}

// The same for a plan at a new size: one whose trace threw is neither
// counted nor listed, and the next plan takes its number.
TEST(CompileErrors, APlanWhoseTraceThrowsIsNotCounted) {
  auto f = kiln::jit::compile(
      [](const Tensor& x) {
        KILN_CHECK(x.size(0) != 5, "[test] size five");
        return x * 2.0;
      },
      {.name = "plans"});
  for (int64_t n : {3, 4, 5, 6}) {
    const Tensor x = kiln::ones({n});
    if (n == 5) {
      EXPECT_KILN_ERROR(f(x), "[test] size five");
    } else {
      EXPECT_TENSOR_CLOSE(f(x), kiln::full({n}, 2.0));
    }
  }
  const kiln::jit::Explanation e = f.explain();
  std::string history;
  for (const auto& r : e.recompiles) history += r.reason + "\n";
  EXPECT_EQ(history.find("= 5"), std::string::npos) << history;
  EXPECT_NE(history.find("= 6 (specialization 2)"), std::string::npos) << history;
  ASSERT_EQ(e.entries.size(), 2u);
  EXPECT_EQ(e.entries[1].plans.size(), 2u);
  EXPECT_EQ(e.stats.specializations, 1);
}

// Note [A plan that failed to build]: a plan at a new size whose first run
// raises (an index out of range in the call's data) is dropped with what
// its entry counted on the captured table; the counts used to stay, the
// table's guard then failed, and each later call compiled a new entry.
TEST(CompileErrors, APlanWhoseFirstRunRaisesLeavesTheGuardsSound) {
  const Tensor table = kiln::testing::random_tensor({5, 3}, kiln::kFloat32, "contiguous", 4);
  auto body = [&](const Tensor& ids) { return kiln::index_select(table, 0, ids) * 2.0; };
  auto f = kiln::jit::compile(body, {.name = "lookup"});
  auto ids = [](std::vector<int64_t> v) {
    const auto n = static_cast<int64_t>(v.size());
    return kiln::tensor(v, {n}, kiln::kInt64);
  };
  auto check = [&](const Tensor& i) {
    Tensor got = f(i);
    kiln::EagerGuard eager;
    EXPECT_TENSOR_CLOSE(got, body(i));
  };
  check(ids({1, 2}));
  check(ids({0, 1, 4}));  // entry 2: dim 0 dynamic
  EXPECT_KILN_ERROR(f(ids({0, 9, 1, 2})),
                    "[index_select] index 9 is out of bounds for dimension 0 with size 5");
  for (int round = 0; round < 3; ++round) {
    check(ids({4, 3, 2, 1}));
    check(ids({0, 1, 4}));
  }
  EXPECT_EQ(f.stats().entries, 2);
  EXPECT_EQ(f.stats().specializations, 1);
  EXPECT_EQ(f.stats().uncompiled_calls, 0);
}

// A call whose data is only less aligned than the entry's kernels expect is
// told so, also for an entry with a dynamic dim (whose strides are compared
// by pattern): it read "stride mismatch: expected [1], got [1]".
TEST(CompileErrors, AnAlignmentMissIsNamedAsOne) {
  auto f = kiln::jit::compile([](const Tensor& x) { return x * 2.0; }, {.name = "aligned"});
  (void)f(kiln::ones({4}));
  (void)f(kiln::ones({5}));  // entry 2: dim 0 dynamic
  std::vector<float> buffer(64, 1.0f);
  float* base = buffer.data();
  while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
  const Tensor odd = kiln::from_blob(base + 1, {6}, kiln::kFloat32);
  EXPECT_TENSOR_CLOSE(f(odd), kiln::full({6}, 2.0));
  const kiln::jit::Explanation e = f.explain();
  ASSERT_FALSE(e.recompiles.empty());
  const std::string& last = e.recompiles.back().reason;
  EXPECT_NE(last.find("alignment mismatch"), std::string::npos) << last;
  EXPECT_EQ(last.find("stride mismatch"), std::string::npos) << last;
}

}  // namespace
