// Matrix products and nn ops beyond what the oracle covers: sizes large
// enough for BLAS blocking and OpenBLAS threads, many small batches (the TBB
// path), output layouts and aliasing, integer wraparound, the C++ API, and
// the Meta kernels' shapes and dtypes.

#include <gtest/gtest.h>

#include <vector>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::Tensor;
using kiln::testing::random_tensor;

// a @ b in double precision with plain loops, for 2-D tensors.
Tensor naive_mm(const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  std::vector<double> av = a.tolist<double>(), bv = b.tolist<double>(), c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += av[i * k + p] * bv[p * n + j];
    }
  }
  return kiln::tensor(c, {m, n});
}

Tensor meta(std::initializer_list<int64_t> sizes, DType dtype = kiln::kFloat32) {
  return kiln::empty(sizes, kiln::TensorOptions(dtype).device(Device::meta()));
}

std::vector<int64_t> dims(const Tensor& t) {
  return t.sizes().vec();
}

TEST(Matmul, LargeProductsMatchNaiveLoops) {
  // Big enough for OpenBLAS's blocking and threads; every operand layout.
  const char* layouts[] = {"contiguous", "transposed", "strided", "offset", "expanded"};
  uint64_t seed = 1;
  for (DType dt : {kiln::kFloat32, kiln::kFloat64}) {
    for (const char* la : layouts) {
      for (const char* lb : {"contiguous", "transposed"}) {
        Tensor a = random_tensor({130, 257}, dt, la, seed++);
        Tensor b = random_tensor({257, 65}, dt, lb, seed++);
        Tensor expected = naive_mm(a, b).to(dt);
        double rtol = dt == kiln::kFloat32 ? 1e-4 : 1e-10;
        EXPECT_TENSOR_CLOSE_TOL(kiln::mm(a, b), expected, rtol, rtol * 10);
        EXPECT_TENSOR_CLOSE_TOL(kiln::matmul(a, b), expected, rtol, rtol * 10);
      }
    }
  }
}

TEST(Matmul, HalfPrecisionRoundsOnceAfterFloat32Products) {
  for (DType dt : {kiln::kFloat16, kiln::kBFloat16}) {
    Tensor a = random_tensor({33, 200}, dt, "transposed", 7);
    Tensor b = random_tensor({200, 17}, dt, "strided", 8);
    Tensor expected = kiln::mm(a.to(kiln::kFloat32), b.to(kiln::kFloat32)).to(dt);
    EXPECT_TENSOR_CLOSE(kiln::mm(a, b), expected);
  }
}

TEST(Matmul, ManySmallBatchesMatchPerMatrixProducts) {
  // 512 tiny products run on TBB workers; each must equal its own mm.
  Tensor a = random_tensor({512, 4, 8}, kiln::kFloat32, "contiguous", 3);
  Tensor b = random_tensor({512, 8, 3}, kiln::kFloat32, "transposed", 4);
  Tensor c = kiln::bmm(a, b);
  for (int64_t i = 0; i < 512; i += 37) EXPECT_TENSOR_CLOSE(c[i], kiln::mm(a[i], b[i]));
  Tensor h = kiln::bmm(a.to(kiln::kBFloat16), b.to(kiln::kBFloat16));
  for (int64_t i = 0; i < 512; i += 37) {
    EXPECT_TENSOR_CLOSE(h[i], kiln::mm(a[i].to(kiln::kBFloat16), b[i].to(kiln::kBFloat16)));
  }
}

TEST(Matmul, BroadcastBatchesMatchSlices) {
  // [4, 6, 5] @ [5, 3] folds the batch into rows; a permuted self cannot fold.
  Tensor b = random_tensor({5, 3}, kiln::kFloat64, "transposed", 5);
  for (const char* layout : {"contiguous", "transposed", "expanded"}) {
    Tensor a = random_tensor({4, 6, 5}, kiln::kFloat64, layout, 6);
    Tensor c = kiln::matmul(a, b);
    ASSERT_EQ(dims(c), (std::vector<int64_t>{4, 6, 3}));
    for (int64_t i = 0; i < 4; ++i) EXPECT_TENSOR_CLOSE(c[i], kiln::mm(a[i], b));
  }
  // [2, 1, 3, 4] @ [5, 4, 2] -> [2, 5, 3, 2]
  Tensor x = random_tensor({2, 1, 3, 4}, kiln::kFloat32, "offset", 9);
  Tensor y = random_tensor({5, 4, 2}, kiln::kFloat32, "strided", 10);
  Tensor z = kiln::matmul(x, y);
  ASSERT_EQ(dims(z), (std::vector<int64_t>{2, 5, 3, 2}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 5; ++j) EXPECT_TENSOR_CLOSE(z[i][j], kiln::mm(x[i][0], y[j]));
  }
}

TEST(Matmul, OutputLayouts) {
  Tensor a = random_tensor({4, 6}, kiln::kFloat32, "contiguous", 11);
  Tensor b = random_tensor({6, 5}, kiln::kFloat32, "contiguous", 12);
  Tensor expected = kiln::mm(a, b);
  static const kiln::TypedOp<Tensor(const Tensor&, const Tensor&, const Tensor&)> mm_out("mm.out");
  // Column-major out (computed as C^T = B^T A^T) and a strided out (scratch).
  Tensor col = kiln::empty({5, 4}).t();
  mm_out(a, b, col);
  EXPECT_TENSOR_CLOSE(col, expected);
  Tensor wide = kiln::zeros({4, 10});
  Tensor strided = wide.slice(1, 0, std::nullopt, 2);
  mm_out(a, b, strided);
  EXPECT_TENSOR_CLOSE(strided, expected);
  Tensor out = kiln::empty({0});
  kiln::matmul_out(out, a, b);
  EXPECT_TENSOR_CLOSE(out, expected);
}

TEST(Matmul, InPlaceProductReadingItsOwnTarget) {
  static const kiln::TypedOp<Tensor(const Tensor&, const Tensor&, const Tensor&,
                                    const kiln::Scalar&, const kiln::Scalar&)>
      addmm_("addmm_");
  Tensor x = random_tensor({4, 4}, kiln::kFloat64, "contiguous", 13);
  Tensor expected = kiln::addmm(x, x, x, 0.5, 2.0);
  addmm_(x, x, x, 0.5, 2.0);
  EXPECT_TENSOR_CLOSE(x, expected);
}

TEST(Matmul, IntegerProductsWrapLikeTheirType) {
  // int8: 100 * 100 + 100 * 100 = 20000 = 78 * 256 + 32.
  Tensor a = kiln::tensor(std::vector<int8_t>{100, 100}, {1, 2});
  Tensor b = kiln::tensor(std::vector<int8_t>{100, 100}, {2, 1});
  EXPECT_EQ(kiln::mm(a, b).item<int64_t>(), 32);
  Tensor u = kiln::tensor(std::vector<uint8_t>{200, 3}, {1, 2});
  Tensor v = kiln::tensor(std::vector<uint8_t>{2, 50}, {2, 1});
  EXPECT_EQ(kiln::mm(u, v).item<int64_t>(), (400 + 150) % 256);
  Tensor big = kiln::tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(kiln::matmul(big, big.t()).tolist<int64_t>(), (std::vector<int64_t>{14, 32, 32, 77}));
}

TEST(Matmul, CppApiForms) {
  Tensor a = random_tensor({3, 4}, kiln::kFloat32, "contiguous", 14);
  Tensor b = random_tensor({4, 5}, kiln::kFloat32, "transposed", 15);
  Tensor v = random_tensor({4}, kiln::kFloat32, "contiguous", 16);
  Tensor ab = naive_mm(a, b).to(kiln::kFloat32);
  EXPECT_TENSOR_CLOSE(a.matmul(b), ab);
  EXPECT_TENSOR_CLOSE(kiln::mv(a, v), naive_mm(a, v.unsqueeze(1)).to(kiln::kFloat32).squeeze(1));
  EXPECT_TENSOR_CLOSE(kiln::bmm(a.unsqueeze(0), b.unsqueeze(0))[0], ab);
  Tensor bias = random_tensor({5}, kiln::kFloat32, "contiguous", 17);
  EXPECT_TENSOR_CLOSE(kiln::addmm(bias, a, b, 2, 3), bias * 2 + ab * 3);
  EXPECT_TENSOR_CLOSE(kiln::baddbmm(bias, a.unsqueeze(0), b.unsqueeze(0))[0], bias + ab);
  EXPECT_TENSOR_CLOSE(kiln::outer(v, bias), v.unsqueeze(1) * bias);
  EXPECT_TENSOR_CLOSE(kiln::linear(a, b.t(), bias), ab + bias);
  EXPECT_EQ(kiln::matmul(v, v).dim(), 0);
}

TEST(MatmulMeta, MatmulBroadcastShapes) {
  struct Case {
    std::vector<int64_t> a, b, out;
  };
  const Case cases[] = {
      {{4}, {4}, {}},
      {{3, 4}, {4}, {3}},
      {{4}, {4, 5}, {5}},
      {{3, 4}, {4, 5}, {3, 5}},
      {{2, 3, 4}, {4}, {2, 3}},
      {{4}, {2, 4, 5}, {2, 5}},
      {{2, 1, 3, 4}, {5, 4, 2}, {2, 5, 3, 2}},
      {{3, 1, 2, 3, 4}, {2, 1, 4, 1}, {3, 2, 2, 3, 1}},
      {{0, 3, 4}, {2, 1, 4, 5}, {2, 0, 3, 5}},
  };
  for (const Case& c : cases) {
    Tensor a = kiln::empty(c.a, kiln::TensorOptions(kiln::kBFloat16).device(Device::meta()));
    Tensor b = kiln::empty(c.b, kiln::TensorOptions(kiln::kBFloat16).device(Device::meta()));
    Tensor r = kiln::matmul(a, b);
    EXPECT_EQ(dims(r), c.out);
    EXPECT_EQ(r.dtype(), kiln::kBFloat16);
    EXPECT_TRUE(r.is_meta());
  }
  EXPECT_KILN_ERROR(kiln::matmul(meta({2, 3, 4}), meta({3, 4, 5})), "cannot be multiplied");
  EXPECT_KILN_ERROR(kiln::matmul(meta({3, 4}), meta({4, 5}, kiln::kFloat64)), "same dtype");
}

TEST(MatmulMeta, ProductAndNnOps) {
  EXPECT_EQ(dims(kiln::mm(meta({3, 4}), meta({4, 5}))), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(dims(kiln::bmm(meta({2, 3, 4}), meta({2, 4, 5}))), (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(dims(kiln::mv(meta({3, 4}), meta({4}))), (std::vector<int64_t>{3}));
  EXPECT_EQ(dims(kiln::addmm(meta({5}), meta({3, 4}), meta({4, 5}))), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(dims(kiln::baddbmm(meta({1, 5}), meta({2, 3, 4}), meta({2, 4, 5}))),
            (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(dims(kiln::outer(meta({3}), meta({7}))), (std::vector<int64_t>{3, 7}));
  Tensor lin = kiln::linear(meta({2, 3, 4}), meta({6, 4}), meta({6}));
  EXPECT_EQ(dims(lin), (std::vector<int64_t>{2, 3, 6}));
  EXPECT_TRUE(lin.is_meta());
  Tensor sm = kiln::softmax(meta({2, 3}, kiln::kBFloat16), 1, kiln::kFloat32);
  EXPECT_EQ(sm.dtype(), kiln::kFloat32);
  EXPECT_EQ(dims(sm), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(kiln::log_softmax(meta({2, 3}, kiln::kFloat64), 0).dtype(), kiln::kFloat64);
  Tensor ln =
      kiln::layer_norm(meta({2, 3, 4}, kiln::kFloat16), {3, 4}, meta({3, 4}, kiln::kFloat16));
  EXPECT_EQ(ln.dtype(), kiln::kFloat16);
  EXPECT_EQ(dims(ln), (std::vector<int64_t>{2, 3, 4}));
  // rms_norm's weight promotes the result's dtype.
  Tensor rn = kiln::rms_norm(meta({2, 4}, kiln::kBFloat16), {4}, meta({4}, kiln::kFloat32));
  EXPECT_EQ(rn.dtype(), kiln::kFloat32);
  Tensor emb = kiln::embedding(meta({10, 8}, kiln::kFloat16), meta({2, 3}, kiln::kInt64));
  EXPECT_EQ(dims(emb), (std::vector<int64_t>{2, 3, 8}));
  EXPECT_EQ(emb.dtype(), kiln::kFloat16);
  Tensor att = kiln::scaled_dot_product_attention(meta({2, 1, 4, 8}), meta({3, 5, 8}),
                                                  meta({1, 5, 6}), meta({4, 5}, kiln::kBool));
  EXPECT_EQ(dims(att), (std::vector<int64_t>{2, 3, 4, 6}));
  EXPECT_KILN_ERROR(kiln::linear(meta({3, 4}), meta({5, 3})), "cannot be multiplied");
  EXPECT_KILN_ERROR(kiln::layer_norm(meta({3, 4}), {3}), "normalized_shape");
}

TEST(Nn, SoftmaxRowsSumToOneAlongEveryDim) {
  Tensor x = random_tensor({3, 300, 5}, kiln::kFloat32, "transposed", 21, -20, 20);
  for (int64_t d = 0; d < 3; ++d) {
    Tensor s = kiln::softmax(x, d).to(kiln::kFloat64);
    // Summing one slice at a time along d through add (reductions live elsewhere).
    Tensor total = kiln::zeros_like(s.select(d, 0));
    for (int64_t i = 0; i < x.size(d); ++i) total = total + s.select(d, i);
    EXPECT_TENSOR_CLOSE_TOL(total, kiln::ones_like(total), 1e-5, 1e-5);
  }
}

TEST(Nn, LinearWithoutCopyingTransposedWeight) {
  // A weight stored as [in, out] and viewed as [out, in] must give the same result.
  Tensor x = random_tensor({7, 16}, kiln::kFloat32, "contiguous", 22);
  Tensor w_store = random_tensor({16, 9}, kiln::kFloat32, "contiguous", 23);
  Tensor bias = random_tensor({9}, kiln::kFloat32, "contiguous", 24);
  Tensor expected = naive_mm(x, w_store).to(kiln::kFloat32) + bias;
  EXPECT_TENSOR_CLOSE_TOL(kiln::linear(x, w_store.t(), bias), expected, 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE_TOL(kiln::linear(x, w_store.t().contiguous(), bias), expected, 1e-5, 1e-5);
}

}  // namespace
