// Must-fail cases of einsum, searchsorted and bucketize: each raises a
// kiln::Error that names the op, what was expected and what came.

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

TEST(EinsumErrors, Equation) {
  Tensor a = kiln::ones({3, 4}), b = kiln::ones({4, 5});
  EXPECT_KILN_ERROR(kiln::einsum("ij,jk->ik", {a}),
                    "[einsum] expected 2 operands for equation 'ij,jk->ik', got 1");
  EXPECT_KILN_ERROR(kiln::einsum("ij", {a, b}), "[einsum] expected 1 operands for equation 'ij'");
  EXPECT_KILN_ERROR(kiln::einsum("ij1->i", {a}),
                    "[einsum] expected subscripts in [a-zA-Z] at index 2 of the equation, got '1'");
  EXPECT_KILN_ERROR(kiln::einsum("ij->i->j", {a}),
                    "[einsum] expected subscripts in [a-zA-Z] at index 5 of the equation, got '-'");
  EXPECT_KILN_ERROR(kiln::einsum("i.j->i", {a}),
                    "[einsum] expected '...' at index 1 of the equation, got a '.'");
  EXPECT_KILN_ERROR(kiln::einsum("......", {a}),
                    "[einsum] expected at most one '...' per operand, got a second in operand 0");
  EXPECT_KILN_ERROR(kiln::einsum("ij->k", {a}),
                    "[einsum] expected output subscripts that appear in an operand, got 'k'");
  EXPECT_KILN_ERROR(kiln::einsum("ij->ii", {a}),
                    "[einsum] expected each output subscript once, got 'i' twice");
  EXPECT_KILN_ERROR(kiln::einsum("ij", {}), "[einsum] expected at least one operand, got none");
}

TEST(EinsumErrors, Sizes) {
  Tensor a = kiln::ones({3, 4});
  EXPECT_KILN_ERROR(kiln::einsum("ijk->i", {a}),
                    "[einsum] expected operand 0 to have 3 dims (one per subscript; no '...' "
                    "given), got 2 (sizes [3, 4])");
  EXPECT_KILN_ERROR(kiln::einsum("...ijk->...", {a}),
                    "[einsum] expected operand 0 to have at least 3 dims");
  EXPECT_KILN_ERROR(kiln::einsum("ii->i", {a}),
                    "[einsum] expected the dims of repeated subscript 'i' in operand 0 to have "
                    "one size, got 3 and 4");
  EXPECT_KILN_ERROR(kiln::einsum("ij,jk->ik", {a, kiln::ones({5, 2})}),
                    "[einsum] expected subscript 'j' to have size 4 (or 1) as in an earlier "
                    "operand, got 5 in operand 1");
  EXPECT_KILN_ERROR(kiln::einsum("...i,...i->...", {kiln::ones({2, 3}), kiln::ones({4, 3, 3})}),
                    "[einsum] expected operands' '...' dims to broadcast, got size 3 in operand 1");
  EXPECT_KILN_ERROR(kiln::einsum("i,i->", {kiln::ones({3}), kiln::ones({3}, kiln::kFloat64)}),
                    "[einsum] expected operands of one dtype, got float32 (operand 0) and float64 "
                    "(operand 1)");
  EXPECT_KILN_ERROR(kiln::einsum("i,i->", {kiln::ones({3}), Tensor()}),
                    "[einsum] expected argument 'tensors' to be a defined tensor");
}

TEST(SearchErrors, Searchsorted) {
  Tensor seq = kiln::arange(5.0), rows = kiln::arange(6.0).reshape({2, 3});
  EXPECT_KILN_ERROR(kiln::searchsorted(kiln::scalar_tensor(1.0), seq),
                    "[searchsorted] expected sorted_sequence with at least 1 dim, got a 0-dim");
  EXPECT_KILN_ERROR(kiln::searchsorted(rows, kiln::zeros({3, 2})),
                    "[searchsorted] expected values whose leading dims are sorted_sequence's [2, "
                    "3] but the last (a 1-D sequence, or one row per value row), got values of "
                    "sizes [3, 2]");
  EXPECT_KILN_ERROR(kiln::searchsorted(rows, kiln::zeros({4})), "got values of sizes [4]");
  EXPECT_KILN_ERROR(kiln::searchsorted(rows, kiln::Scalar(0.5)),
                    "[searchsorted] expected a values tensor with sorted_sequence's leading dims");
  EXPECT_KILN_ERROR(kiln::searchsorted(seq, kiln::zeros({2}), false, true, "left"),
                    "[searchsorted] expected side and right to agree, got side 'left' with "
                    "right=True");
  EXPECT_KILN_ERROR(kiln::searchsorted(seq, kiln::zeros({2}), false, false, "middle"),
                    "[searchsorted] expected side 'left' or 'right', got 'middle'");
  EXPECT_KILN_ERROR(kiln::searchsorted(seq.to(kiln::kBool), kiln::zeros({2}, kiln::kBool)),
                    "[searchsorted] expected numbers to search, got bool");
}

TEST(SearchErrors, Bucketize) {
  EXPECT_KILN_ERROR(kiln::bucketize(kiln::zeros({3}), kiln::zeros({2, 2})),
                    "[bucketize] expected 1-D boundaries, got 2 dims (sizes [2, 2])");
  EXPECT_KILN_ERROR(kiln::bucketize(kiln::Scalar(1.0), kiln::scalar_tensor(1.0)),
                    "[bucketize] expected 1-D boundaries, got 0 dims");
  // searchsorted's checks, under bucketize's name (Note [Composite ops name themselves]).
  EXPECT_KILN_ERROR(kiln::bucketize(kiln::zeros({2}, kiln::kBool), kiln::zeros({2}, kiln::kBool)),
                    "[bucketize] expected numbers to search, got bool");
  EXPECT_KILN_ERROR(kiln::bucketize(Tensor(), kiln::zeros({2})),
                    "[bucketize] expected argument 'self' to be a defined tensor");
}

}  // namespace
