// jit::compile called with arguments that differ in number or kind from its
// first call, or with an undefined tensor: a kiln::Error naming the function
// and the argument.

#include <gtest/gtest.h>

#include <type_traits>

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
}

}  // namespace
