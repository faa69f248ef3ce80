// Must-fail cases through the trace passes: an op that fails while a trace
// runs (index values are data, so only its kernel can check them) raises the
// op's own error, also when it writes into a planned arena slice
// (Note [Memory plan]) or was merged by CSE (Note [Common subexpressions]);
// what depended on it stays unreadable, and later traces run normally.

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

class PassesErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    kiln::jit::flush();
    kiln::EagerGuard g;
    x_ = kiln::arange(10.0).reshape({5, 2});
    bad_ = kiln::tensor<int64_t>({1, 7});
  }
  void TearDown() override { kiln::jit::flush(); }

  Tensor x_, bad_;
};

TEST_F(PassesErrors, AFailingPlannedExternRaisesItsOwnError) {
  // index_select's result is internal: it is a planned slice written through index_select.out.
  Tensor y = kiln::index_select(x_, 0, bad_) * 2.0;
  EXPECT_KILN_ERROR(y.sum().item<double>(),
                    "[index_select] index 7 is out of bounds for dimension 0 with size 5");
  EXPECT_KILN_ERROR(y.data_ptr(), "index 7 is out of bounds");
  Tensor ok = kiln::index_select(x_, 0, kiln::tensor<int64_t>({4, 0})) * 2.0;
  Tensor expected;
  {
    kiln::EagerGuard g;
    expected = kiln::index_select(x_, 0, kiln::tensor<int64_t>({4, 0})) * 2.0;
  }
  EXPECT_TENSOR_CLOSE(ok, expected);
}

TEST_F(PassesErrors, AFailingMergedExternRaisesItsOwnError) {
  int64_t merged = kiln::jit::trace_stats().cse_merged;
  Tensor a = kiln::index_select(x_, 0, bad_);
  Tensor b = kiln::index_select(x_, 0, bad_);  // held by the user: becomes a copy of `a`
  Tensor y = a + b;
  // The failure stays with the tensors that held its result: flushing raises
  // nothing (Note [Failures in a trace]), reading them does.
  kiln::jit::flush();
  EXPECT_EQ(kiln::jit::trace_stats().cse_merged - merged, 1);
  EXPECT_KILN_ERROR(a.data_ptr(),
                    "[index_select] index 7 is out of bounds for dimension 0 with size 5");
  EXPECT_KILN_ERROR(b.data_ptr(), "index 7 is out of bounds");
  EXPECT_KILN_ERROR(y.data_ptr(), "index 7 is out of bounds");
}

}  // namespace
