// Note [Composite ops name themselves], for the checks that only the data
// can fail: an op built on others (index_put on index_select, one_hot on
// scatter, write_kv on index_copy_ or scatter_) names itself in an error
// raised when a lazy trace or a compiled function's plan runs, as it does
// eagerly, not the inner op that the trace recorded.

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Device;
using kiln::Tensor;
using kiln::TensorOptions;

// The "[op]" that the error fn() raises starts with.
std::string op_named(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const kiln::Error& e) {
    const std::string what = e.what();
    return what.substr(0, what.find(']') + 1);
  }
  return "no error";
}

// One call of a composite whose index comes from `index` (values on the
// host for the eager call; computed, so only the run sees them, lazily).
struct Case {
  const char* op;  // the op the user called, as its errors name it
  std::vector<int64_t> index;
  std::function<Tensor(const Tensor& index, Device device)> call;
};

std::vector<Case> cases() {
  auto zeros = [](std::vector<int64_t> sizes, Device d) {
    return kiln::zeros(sizes, TensorOptions(kiln::kFloat32).device(d));
  };
  return {
      {"[index_put]",
       {1, 6},
       [=](const Tensor& i, Device d) {
         return kiln::index_put(zeros({5, 2}, d), {i}, zeros({2}, d));
       }},
      {"[index_put]",
       {-9},
       [=](const Tensor& i, Device d) {
         return kiln::index_put(zeros({5, 2}, d), {i}, zeros({2}, d), /*accumulate=*/true);
       }},
      {"[index_put_]",
       {0, 5},
       [=](const Tensor& i, Device d) {
         Tensor self = zeros({2, 5}, d);
         return kiln::index_put_(self, {kiln::arange(2, TensorOptions(kiln::kInt64).device(d)), i},
                                 zeros({2}, d));
       }},
      {"[one_hot]", {0, -1}, [](const Tensor& i, Device) { return kiln::one_hot(i, 3); }},
      {"[one_hot]", {0, 3}, [](const Tensor& i, Device) { return kiln::one_hot(i, 3); }},
      {"[index_add]",
       {1, 9},
       [=](const Tensor& i, Device d) {
         return kiln::index_add(zeros({5, 2}, d), 0, i, zeros({2, 2}, d));
       }},
      {"[index_add_]",
       {5},
       [=](const Tensor& i, Device d) {
         Tensor self = zeros({5, 2}, d);
         return kiln::index_add_(self, 0, i, zeros({1, 2}, d));
       }},
      {"[write_kv]",
       {4},
       [=](const Tensor& p, Device d) {
         Tensor cache = zeros({1, 2, 4, 8}, d);
         kiln::nn::write_kv(cache, p, kiln::ones({1, 2, 1, 8}, TensorOptions().device(d)));
         return cache;
       }},
      {"[write_kv]",
       {1, -1},
       [=](const Tensor& p, Device d) {
         Tensor cache = zeros({2, 2, 4, 8}, d);
         kiln::nn::write_kv(cache, p, kiln::ones({2, 2, 1, 8}, TensorOptions().device(d)));
         return cache;
       }},
  };
}

// `compiled`: also inside jit::compile, where the plan runs copies of the
// traced nodes.
void expect_lazy_names_as_eager(Device d, bool compiled) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(std::string(c.op) + " on " + d.str());
    auto index = [&] {
      const auto n = static_cast<int64_t>(c.index.size());
      return kiln::tensor(c.index, {n}, kiln::kInt64).to(d);
    };
    const std::string eager = op_named([&] {
      kiln::EagerGuard guard;
      (void)kiln::sum(c.call(index(), d)).item<float>();
    });
    EXPECT_EQ(eager, c.op);
    // Lazily the index is computed, so only the trace's run sees its values.
    const std::string lazy = op_named([&] {
      Tensor computed = index() + 0;
      ASSERT_TRUE(computed.is_pending());
      (void)kiln::sum(c.call(computed, d)).item<float>();
    });
    EXPECT_EQ(lazy, eager);
    if (!compiled) continue;
    auto f = kiln::jit::compile([&](const Tensor& i) { return kiln::sum(c.call(i + 0, d)); },
                                {.name = "composite"});
    EXPECT_EQ(op_named([&] { (void)f(index()).item<float>(); }), eager);
  }
}

TEST(CompositeErrors, DataChecksNameTheOpCalledLazily) {
  expect_lazy_names_as_eager(Device::cpu(), false);
}

TEST(CompositeErrors, DataChecksNameTheOpCalledLazilyOnCuda) {
  KILN_REQUIRE_CUDA();
  expect_lazy_names_as_eager(Device::cuda(), false);
}

// A compiled function's plan runs copies of the traced nodes (Remap::nodes
// in jit/compile/instance.cpp), which keep Node::renames: they name the
// composite as the trace's nodes do.
TEST(CompositeErrors, DataChecksNameTheOpCalledInCompiledFunctions) {
  expect_lazy_names_as_eager(Device::cpu(), true);
  if (kiln::cuda::is_available()) expect_lazy_names_as_eager(Device::cuda(), true);
}

// The rename is the recorded op's: another op recorded outside the
// composite keeps its own name, though it runs in the same trace.
TEST(CompositeErrors, OtherOpsOfTheTraceKeepTheirNames) {
  Tensor bad = kiln::tensor<int64_t>({7}) + 0;
  Tensor selected = kiln::index_select(kiln::zeros({5}), 0, bad);
  Tensor hot = kiln::one_hot(kiln::tensor<int64_t>({1}) + 0, 3);
  EXPECT_EQ(kiln::sum(hot).item<int64_t>(), 1);
  EXPECT_KILN_ERROR(kiln::sum(selected).item<float>(),
                    "[index_select] index 7 is out of bounds for dimension 0 with size 5");
}

}  // namespace
