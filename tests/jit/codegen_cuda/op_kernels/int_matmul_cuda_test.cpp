// Integer matrix products on CUDA (Note [Integer matmuls on CUDA]) against the
// eager CPU kernels, exactly: values spread over each dtype's whole range so
// that products and sums wrap around; transposed, strided, offset, expanded
// and batch-broadcast operands; empty results and k = 0; out= and in-place
// forms; outputs overlapping an operand; lazy mode. Skips without a GPU.

#include <gtest/gtest.h>

#include <functional>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace kiln {
namespace {

using Shape = std::vector<int64_t>;

constexpr DType kIntTypes[] = {kUInt8, kInt8, kInt16, kInt32, kInt64};
const char* const kLayouts[] = {"contiguous", "transposed", "strided", "offset"};

// Values over the dtype's range: any product of two of them overflows.
Tensor rand_int(IntArrayRef sizes, DType t, const char* layout, uint64_t seed) {
  switch (t) {
    case kUInt8:
      return testing::random_tensor(sizes, t, layout, seed, 0, 256);
    case kInt8:
      return testing::random_tensor(sizes, t, layout, seed, -128, 128);
    case kInt16:
      return testing::random_tensor(sizes, t, layout, seed, -32768, 32768);
    case kInt32:
      return testing::random_tensor(sizes, t, layout, seed, -2147483648.0, 2147483648.0);
    default:
      return testing::random_tensor(sizes, t, layout, seed, -4611686018427387904.0,
                                    4611686018427387904.0);
  }
}

using testing::to_cuda;

// Exact equality (integers), dtype and shape included.
#define EXPECT_SAME(actual, expected)                                                        \
  do {                                                                                       \
    const Tensor kiln_a_ = (actual);                                                         \
    ASSERT_TRUE(kiln_a_.is_cuda());                                                          \
    std::string kiln_msg_ = ::kiln::testing::compare(kiln_a_.cpu(), (expected), {0.0, 0.0}); \
    EXPECT_TRUE(kiln_msg_.empty()) << kiln_msg_;                                             \
  } while (0)

TEST(IntMatmulCuda, MmEveryDtypeLayoutAndSize) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  const std::vector<std::array<int64_t, 3>> sizes = {
      {5, 7, 3}, {1, 9, 4}, {6, 5, 1}, {33, 17, 65}, {16, 16, 16}, {0, 3, 4}, {4, 0, 5}, {3, 4, 0}};
  uint64_t seed = 1;
  int cases = 0;
  for (DType t : kIntTypes) {
    for (const char* la : kLayouts) {
      for (const char* lb : kLayouts) {
        for (const auto& [m, k, n] : sizes) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " " + la + " x " + lb + " m=" +
                       std::to_string(m) + " k=" + std::to_string(k) + " n=" + std::to_string(n));
          Tensor a = rand_int({m, k}, t, la, seed++);
          Tensor b = rand_int({k, n}, t, lb, seed++);
          Tensor expected = mm(a, b);
          Tensor got = mm(to_cuda(a), to_cuda(b));
          EXPECT_EQ(got.dtype(), t);
          EXPECT_SAME(got, expected);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 5 * 4 * 4 * 8);
}

TEST(IntMatmulCuda, ValuesWrapAround) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  // 100 * 100 * 3 = 30000 wraps to 48 in int8; 200 * 200 * 2 = 80000 to 128 in uint8.
  Tensor a = full({1, 3}, 100, TensorOptions().dtype(kInt8));
  Tensor b = full({3, 1}, 100, TensorOptions().dtype(kInt8));
  Tensor got = mm(to_cuda(a), to_cuda(b)).cpu();
  EXPECT_EQ(got.item().to_int(), 48);
  EXPECT_SAME(mm(to_cuda(a), to_cuda(b)), mm(a, b));
  Tensor u = full({1, 2}, 200, TensorOptions().dtype(kUInt8));
  EXPECT_EQ(mm(to_cuda(u), to_cuda(u.t())).cpu().item().to_int(), 128);
}

TEST(IntMatmulCuda, BmmAndBaddbmmWithBroadcastBatches) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  uint64_t seed = 100;
  int cases = 0;
  for (DType t : kIntTypes) {
    for (const char* la : {"contiguous", "transposed", "expanded", "offset"}) {
      for (const char* lb : {"contiguous", "transposed", "expanded", "strided"}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + la + " x " + lb);
        Tensor a = rand_int({3, 20, 4}, t, la, seed++);
        Tensor b = rand_int({3, 4, 18}, t, lb, seed++);
        EXPECT_SAME(bmm(to_cuda(a), to_cuda(b)), bmm(a, b));
        Tensor self = rand_int({20, 18}, t, "contiguous", seed++);
        EXPECT_SAME(baddbmm(to_cuda(self), to_cuda(a), to_cuda(b), 3, -7),
                    baddbmm(self, a, b, 3, -7));
        Tensor row = rand_int({18}, t, "strided", seed++);
        EXPECT_SAME(baddbmm(to_cuda(row), to_cuda(a), to_cuda(b)), baddbmm(row, a, b));
        Tensor full_self = rand_int({3, 20, 18}, t, "transposed", seed++);
        EXPECT_SAME(baddbmm(to_cuda(full_self), to_cuda(a), to_cuda(b), 0, 5),
                    baddbmm(full_self, a, b, 0, 5));
        cases += 4;
      }
    }
  }
  EXPECT_EQ(cases, 5 * 4 * 4 * 4);
  // Empty batches, k = 0, and self of another dtype (baddbmm converts it).
  for (DType t : kIntTypes) {
    Tensor a0 = rand_int({0, 3, 4}, t, "contiguous", seed++);
    Tensor b0 = rand_int({0, 4, 5}, t, "contiguous", seed++);
    EXPECT_SAME(bmm(to_cuda(a0), to_cuda(b0)), bmm(a0, b0));
    Tensor ak = rand_int({2, 3, 0}, t, "contiguous", seed++);
    Tensor bk = rand_int({2, 0, 5}, t, "contiguous", seed++);
    Tensor s = rand_int({2, 3, 5}, t, "contiguous", seed++);
    EXPECT_SAME(bmm(to_cuda(ak), to_cuda(bk)), bmm(ak, bk));
    EXPECT_SAME(baddbmm(to_cuda(s), to_cuda(ak), to_cuda(bk), -3, 2), baddbmm(s, ak, bk, -3, 2));
  }
  Tensor a = rand_int({2, 3, 4}, kInt32, "contiguous", 7);
  Tensor b = rand_int({2, 4, 5}, kInt32, "contiguous", 8);
  Tensor self = rand_int({2, 3, 5}, kInt64, "contiguous", 9);
  EXPECT_SAME(baddbmm(to_cuda(self), to_cuda(a), to_cuda(b)), baddbmm(self, a, b));
}

// More batches than one grid dimension holds.
TEST(IntMatmulCuda, ManyBatches) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  Tensor a = rand_int({70000, 2, 3}, kInt16, "contiguous", 1);
  Tensor b = rand_int({70000, 3, 2}, kInt16, "transposed", 2);
  EXPECT_SAME(bmm(to_cuda(a), to_cuda(b)), bmm(a, b));
}

TEST(IntMatmulCuda, Mv) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  uint64_t seed = 200;
  for (DType t : kIntTypes) {
    for (const char* la : kLayouts) {
      for (const char* lv : {"contiguous", "strided", "offset", "expanded"}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + la + " " + lv);
        Tensor a = rand_int({37, 21}, t, la, seed++);
        Tensor v = rand_int({21}, t, lv, seed++);
        EXPECT_SAME(mv(to_cuda(a), to_cuda(v)), mv(a, v));
      }
    }
    Tensor a0 = rand_int({4, 0}, t, "contiguous", seed++);
    Tensor v0 = rand_int({0}, t, "contiguous", seed++);
    EXPECT_SAME(mv(to_cuda(a0), to_cuda(v0)), mv(a0, v0));
  }
}

TEST(IntMatmulCuda, AddmmSelfShapesAndScales) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  const std::vector<Shape> self_shapes = {{6}, {1, 6}, {5, 1}, {5, 6}, {}};
  // Float scales truncate toward zero for integer operands, as on the CPU.
  const std::vector<std::pair<Scalar, Scalar>> scales = {{1, 1},      {1, 3},   {-2, 5}, {0, 1},
                                                         {2.7, -1.5}, {0.5, 2}, {7, 0}};
  uint64_t seed = 300;
  int cases = 0;
  for (DType t : kIntTypes) {
    for (const char* layout : kLayouts) {
      for (const Shape& ss : self_shapes) {
        for (const auto& [beta, alpha] : scales) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " " + layout + " self rank " +
                       std::to_string(ss.size()) + " beta " + std::to_string(beta.to_double()) +
                       " alpha " + std::to_string(alpha.to_double()));
          Tensor a = rand_int({5, 4}, t, layout, seed++);
          Tensor b = rand_int({4, 6}, t, layout, seed++);
          Tensor self = rand_int(ss, t, ss.size() == 2 ? layout : "contiguous", seed++);
          EXPECT_SAME(addmm(to_cuda(self), to_cuda(a), to_cuda(b), beta, alpha),
                      addmm(self, a, b, beta, alpha));
          ++cases;
        }
      }
    }
    // k = 0: beta * self alone.
    Tensor self = rand_int({3, 5}, t, "transposed", seed++);
    Tensor a = rand_int({3, 0}, t, "contiguous", seed++);
    Tensor b = rand_int({0, 5}, t, "contiguous", seed++);
    EXPECT_SAME(addmm(to_cuda(self), to_cuda(a), to_cuda(b), 3, 2), addmm(self, a, b, 3, 2));
    EXPECT_SAME(addmm(to_cuda(self), to_cuda(a), to_cuda(b), 0, 2), addmm(self, a, b, 0, 2));
  }
  EXPECT_EQ(cases, 5 * 4 * 5 * 7);
}

using InPlaceFn = Tensor(const Tensor&, const Tensor&, const Tensor&, const Scalar&, const Scalar&);
using OutFn3 = Tensor(const Tensor&, const Tensor&, const Tensor&);
using AddmmOutFn = Tensor(const Tensor&, const Tensor&, const Tensor&, const Scalar&, const Scalar&,
                          const Tensor&);

TEST(IntMatmulCuda, OutAndInPlaceForms) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  static const OpHandle addmm_inplace = find_op("addmm_");
  static const OpHandle mm_out = find_op("mm.out");
  static const OpHandle addmm_out = find_op("addmm.out");
  static const OpHandle bmm_out = find_op("bmm.out");
  uint64_t seed = 400;
  for (DType t : kIntTypes) {
    SCOPED_TRACE(dtype_name(t));
    Tensor a = rand_int({5, 4}, t, "transposed", seed++);
    Tensor b = rand_int({4, 6}, t, "contiguous", seed++);
    Tensor self = rand_int({5, 6}, t, "contiguous", seed++);
    // addmm_ into a transposed (column-major) self.
    Tensor cpu_self = rand_int({5, 6}, t, "transposed", seed++);
    Tensor dev_self = to_cuda(cpu_self);
    addmm_inplace.call<InPlaceFn>(dev_self, to_cuda(a), to_cuda(b), -3, 5);
    addmm_inplace.call<InPlaceFn>(cpu_self, a, b, -3, 5);
    EXPECT_SAME(dev_self, cpu_self);
    // out= of the wrong size is resized; a strided out is written in place.
    Tensor out = empty({1}, TensorOptions().dtype(t).device(Device::cuda()));
    matmul_out(out, to_cuda(a), to_cuda(b));
    EXPECT_SAME(out, matmul(a, b));
    Tensor wide = zeros({5, 12}, TensorOptions().dtype(t).device(Device::cuda()));
    Tensor strided = wide.slice(1, 0, 12, 2);
    mm_out.call<OutFn3>(to_cuda(a), to_cuda(b), strided);
    EXPECT_SAME(strided, mm(a, b));
    EXPECT_SAME(wide.slice(1, 1, 12, 2), zeros({5, 6}, TensorOptions().dtype(t)));
    Tensor out2 = empty({5, 6}, TensorOptions().dtype(t).device(Device::cuda()));
    addmm_out.call<AddmmOutFn>(to_cuda(self), to_cuda(a), to_cuda(b), 2, 3, out2);
    EXPECT_SAME(out2, addmm(self, a, b, 2, 3));
    Tensor a3 = rand_int({2, 5, 4}, t, "contiguous", seed++);
    Tensor b3 = rand_int({2, 4, 3}, t, "transposed", seed++);
    Tensor out3 = empty({0}, TensorOptions().dtype(t).device(Device::cuda()));
    bmm_out.call<OutFn3>(to_cuda(a3), to_cuda(b3), out3);
    EXPECT_SAME(out3, bmm(a3, b3));
  }
}

// An output sharing memory with an operand (or a self it does not coincide
// with) goes through scratch.
TEST(IntMatmulCuda, OutputOverlappingAnOperand) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  static const OpHandle mm_out = find_op("mm.out");
  static const OpHandle addmm_out = find_op("addmm.out");
  for (DType t : kIntTypes) {
    SCOPED_TRACE(dtype_name(t));
    Tensor a = rand_int({20, 20}, t, "contiguous", 1);
    Tensor b = rand_int({20, 20}, t, "contiguous", 2);
    Tensor expected = mm(a, b);
    Tensor da = to_cuda(a);
    mm_out.call<OutFn3>(da, to_cuda(b), da);
    EXPECT_SAME(da, expected);
    // out is self transposed: each element reads another's.
    Tensor s = rand_int({20, 20}, t, "contiguous", 3);
    Tensor expected2 = addmm(s, a, b, 2, 1);
    Tensor ds = to_cuda(s);
    addmm_out.call<AddmmOutFn>(ds, to_cuda(a), to_cuda(b), 2, 1, ds.t());
    EXPECT_SAME(ds.t(), expected2);
  }
}

TEST(IntMatmulCuda, MatmulBroadcasting) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  const std::vector<std::pair<Shape, Shape>> pairs = {{{5}, {5}},
                                                      {{5}, {5, 3}},
                                                      {{4, 5}, {5}},
                                                      {{2, 4, 5}, {5, 3}},
                                                      {{2, 1, 5}, {5, 3}},
                                                      {{2, 4, 5}, {2, 5, 3}},
                                                      {{2, 1, 4, 5}, {3, 5, 6}},
                                                      {{5}, {2, 5, 3}},
                                                      {{2, 4, 5}, {5}},
                                                      {{1, 4, 5}, {3, 5, 2}},
                                                      {{3, 2, 4, 5}, {2, 5, 1}},
                                                      {{0, 4, 5}, {5, 2}},
                                                      {{2, 3, 0}, {0, 4}},
                                                      {{0}, {0}}};
  uint64_t seed = 500;
  int cases = 0;
  for (DType t : kIntTypes) {
    for (const char* layout : {"contiguous", "transposed", "expanded", "offset"}) {
      for (const auto& [sa, sb] : pairs) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + layout + " " + std::to_string(sa.size()) +
                     "-D x " + std::to_string(sb.size()) + "-D");
        Tensor a = rand_int(sa, t, layout, seed++);
        Tensor b = rand_int(sb, t, "contiguous", seed++);
        EXPECT_SAME(matmul(to_cuda(a), to_cuda(b)), matmul(a, b));
        Tensor bt = b.dim() >= 2 ? b.transpose(-1, -2) : b;
        Tensor at = a.dim() >= 2 ? a.transpose(-1, -2) : a;
        EXPECT_SAME(matmul(to_cuda(bt), to_cuda(at)), matmul(bt, at));
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 5 * 4 * 14);
}

TEST(IntMatmulCuda, Linear) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  uint64_t seed = 600;
  int cases = 0;
  for (DType t : kIntTypes) {
    for (const char* layout : {"contiguous", "transposed", "strided", "expanded"}) {
      for (Shape in_shape : std::vector<Shape>{{6, 8}, {2, 3, 8}, {8}, {0, 8}, {3, 0}}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + layout + " input " +
                     std::to_string(in_shape.size()) + "-D");
        const int64_t in = in_shape.back();
        Tensor x = rand_int(in_shape, t, layout, seed++);
        Tensor w = rand_int({5, in}, t, layout, seed++);
        Tensor bias = rand_int({5}, t, "strided", seed++);
        EXPECT_SAME(linear(to_cuda(x), to_cuda(w)), linear(x, w));
        EXPECT_SAME(linear(to_cuda(x), to_cuda(w), to_cuda(bias)), linear(x, w, bias));
        Shape full_shape = in_shape;
        full_shape.back() = 5;
        Tensor full_bias = rand_int(full_shape, t, "contiguous", seed++);
        EXPECT_SAME(linear(to_cuda(x), to_cuda(w), to_cuda(full_bias)), linear(x, w, full_bias));
        if (in_shape.size() == 2 && in_shape[0] > 0) {
          // A bias broadcast along the rows.
          Tensor col_bias = rand_int({in_shape[0], 1}, t, "contiguous", seed++);
          EXPECT_SAME(linear(to_cuda(x), to_cuda(w), to_cuda(col_bias)), linear(x, w, col_bias));
        }
        Tensor w1 = rand_int({in}, t, "strided", seed++);
        EXPECT_SAME(linear(to_cuda(x), to_cuda(w1)), linear(x, w1));
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 5 * 4 * 5);
}

// addmm_act (what lazy mode makes of addmm/linear + relu) runs unfused for integers.
TEST(IntMatmulCuda, AddmmActUnfused) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  uint64_t seed = 700;
  for (DType t : kIntTypes) {
    for (const char* act : {"none", "relu"}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + act);
      Tensor bias = rand_int({6}, t, "strided", seed++);
      Tensor a = rand_int({5, 4}, t, "transposed", seed++);
      Tensor b = rand_int({4, 6}, t, "contiguous", seed++);
      EXPECT_SAME(addmm_act(to_cuda(bias), to_cuda(a), to_cuda(b), act),
                  addmm_act(bias, a, b, act));
    }
  }
}

// Lazy mode records the products and runs them through the same kernels.
TEST(IntMatmulCuda, LazyMatchesEager) {
  KILN_REQUIRE_CUDA();
  for (DType t : kIntTypes) {
    SCOPED_TRACE(dtype_name(t));
    Tensor a = rand_int({3, 7, 9}, t, "transposed", 1);
    Tensor b = rand_int({9, 4}, t, "contiguous", 2);
    Tensor self = rand_int({4}, t, "contiguous", 3);
    Tensor expected;
    {
      EagerGuard eager;
      expected = add(matmul(a, b), self);
    }
    Tensor got = add(matmul(to_cuda(a), to_cuda(b)), to_cuda(self));
    EXPECT_SAME(got, expected);
    Tensor m1 = rand_int({6, 9}, t, "contiguous", 4);
    {
      EagerGuard eager;
      expected = relu(linear(m1, b.t(), self));
    }
    EXPECT_SAME(relu(linear(to_cuda(m1), to_cuda(b.t()), to_cuda(self))), expected);
  }
}

TEST(IntMatmulCuda, ErrorsMatchTheCpuKernels) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  Tensor p = testing::random_tensor({3, 4}, kBool, "contiguous", 1);
  Tensor q = testing::random_tensor({4, 2}, kBool, "contiguous", 2);
  Tensor i = rand_int({3, 4}, kInt32, "contiguous", 3);
  Tensor j = rand_int({4, 2}, kInt64, "contiguous", 4);
  EXPECT_CUDA_ERROR_MATCHES_CPU([&](const testing::OnDevice& on) { return mm(on(p), on(q)); });
  EXPECT_CUDA_ERROR_MATCHES_CPU(
      [&](const testing::OnDevice& on) { return bmm(on(p.unsqueeze(0)), on(q.unsqueeze(0))); });
  EXPECT_CUDA_ERROR_MATCHES_CPU(
      [&](const testing::OnDevice& on) { return mv(on(p), on(q.select(1, 0))); });
  EXPECT_CUDA_ERROR_MATCHES_CPU([&](const testing::OnDevice& on) { return matmul(on(p), on(q)); });
  EXPECT_CUDA_ERROR_MATCHES_CPU(
      [&](const testing::OnDevice& on) { return addmm(on(p.select(1, 0)), on(p), on(q)); });
  EXPECT_CUDA_ERROR_MATCHES_CPU(
      [&](const testing::OnDevice& on) { return linear(on(p), on(q.t())); });
  EXPECT_CUDA_ERROR_MATCHES_CPU([&](const testing::OnDevice& on) { return mm(on(i), on(j)); });
  EXPECT_CUDA_ERROR_MATCHES_CPU(
      [&](const testing::OnDevice& on) { return addmm(on(j), on(i), on(i.t())); });
  // gelu takes no integers: an error on both devices.
  Tensor bias = rand_int({2}, kInt32, "contiguous", 5);
  Tensor k = rand_int({4, 2}, kInt32, "contiguous", 6);
  EXPECT_NE(testing::error_message([&] { addmm_act(bias, i, k, "gelu_tanh"); }), "no error");
  EXPECT_NE(testing::error_message(
                [&] { addmm_act(to_cuda(bias), to_cuda(i), to_cuda(k), "gelu_tanh"); }),
            "no error");
}

}  // namespace
}  // namespace kiln
