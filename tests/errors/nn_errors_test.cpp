// Must-fail calls of the matrix products, nn ops and autocast: each raises
// kiln::Error naming the op and what was wrong.

#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

Tensor f32(std::initializer_list<int64_t> sizes) {
  return kiln::ones(sizes);
}
Tensor of(std::initializer_list<int64_t> sizes, kiln::DType t) {
  return kiln::ones(sizes, t);
}

TEST(NnErrors, MatrixProductShapes) {
  EXPECT_KILN_ERROR(kiln::mm(f32({3, 4}), f32({3, 4})),
                    "[mm] mat1 and mat2 shapes cannot be multiplied (3x4 and 3x4)");
  EXPECT_KILN_ERROR(kiln::mm(f32({3, 4}), f32({4})), "[mm] expected mat2 to be a 2-D tensor");
  EXPECT_KILN_ERROR(kiln::bmm(f32({2, 3, 4}), f32({3, 4, 5})), "[bmm] expected self [b, n, k]");
  EXPECT_KILN_ERROR(kiln::mv(f32({3, 4}), f32({5})), "[mv] expected vec of size 4");
  EXPECT_KILN_ERROR(kiln::matmul(f32({4}), f32({5})),
                    "[matmul] expected 1-D operands of the same size, got shapes [4] and [5]");
  EXPECT_KILN_ERROR(kiln::matmul(f32({2, 3, 4}), f32({3, 4, 5})),
                    "[matmul] shapes [2, 3, 4] and [3, 4, 5] cannot be multiplied");
  EXPECT_KILN_ERROR(kiln::matmul(f32({2, 3, 4}), f32({3, 4, 2})), "do not broadcast");
  EXPECT_KILN_ERROR(kiln::matmul(kiln::ones({}), f32({3, 4})), "at least 1-D");
  EXPECT_KILN_ERROR(kiln::addmm(f32({4}), f32({3, 4}), f32({4, 5})),
                    "[addmm] expected self to broadcast to [3, 5], got shape [4]");
  EXPECT_KILN_ERROR(kiln::baddbmm(f32({4}), f32({2, 3, 4}), f32({2, 4, 5})),
                    "[baddbmm] expected self to broadcast");
  EXPECT_KILN_ERROR(kiln::outer(f32({3, 1}), f32({4})), "[outer] expected self to be a 1-D");
  static const kiln::TypedOp<Tensor(const Tensor&, const Tensor&, const Tensor&,
                                    const kiln::Scalar&, const kiln::Scalar&)>
      addmm_("addmm_");
  EXPECT_KILN_ERROR(addmm_(f32({5}), f32({3, 4}), f32({4, 5}), 1, 1),
                    "[addmm_] expected self of shape [3, 5] for an in-place product");
}

TEST(NnErrors, MatrixProductDtypes) {
  EXPECT_KILN_ERROR(kiln::mm(f32({3, 4}), of({4, 2}, kiln::kFloat64)),
                    "[mm] expected both operands of the same dtype, got float32 for self and "
                    "float64 for mat2");
  EXPECT_KILN_ERROR(kiln::matmul(of({3, 4}, kiln::kBool), of({4, 2}, kiln::kBool)),
                    "numeric dtype, got bool");
  EXPECT_KILN_ERROR(kiln::addmm(of({5}, kiln::kFloat64), f32({3, 4}), f32({4, 5})),
                    "[addmm] expected self and the matrices of the same dtype");
  Tensor out = of({3, 5}, kiln::kFloat64);
  EXPECT_KILN_ERROR(kiln::matmul_out(out, f32({3, 4}), f32({4, 5})),
                    "[matmul.out] expected out tensor of dtype float32, got float64");
}

TEST(NnErrors, SoftmaxAndNorms) {
  EXPECT_KILN_ERROR(kiln::softmax(of({3}, kiln::kInt64), 0),
                    "[softmax] expected a floating dtype, got int64");
  EXPECT_KILN_ERROR(kiln::log_softmax(f32({3, 4}), 2), "[log_softmax] dimension out of range");
  EXPECT_KILN_ERROR(kiln::layer_norm(f32({3, 4}), {3}),
                    "[layer_norm] expected an input whose trailing dims are normalized_shape = "
                    "[3], got input of shape [3, 4]");
  EXPECT_KILN_ERROR(kiln::layer_norm(f32({3, 4}), {}), "at least one dim");
  EXPECT_KILN_ERROR(kiln::layer_norm(f32({3, 4}), {4}, f32({3})),
                    "[layer_norm] expected weight of the same shape as normalized_shape [4]");
  EXPECT_KILN_ERROR(kiln::layer_norm(of({3, 4}, kiln::kBFloat16), {4}, f32({4})),
                    "expected weight of dtype bfloat16 like input, got float32");
  EXPECT_KILN_ERROR(kiln::rms_norm(of({3, 4}, kiln::kInt32), {4}),
                    "[rms_norm] expected a floating input, got int32");
  EXPECT_KILN_ERROR(kiln::rms_norm(f32({3, 4}), {4}, f32({2, 2})),
                    "[rms_norm] expected weight of the same shape");
}

TEST(NnErrors, Embedding) {
  // Index values are data: the checks run with the kernel, so run it now.
  kiln::EagerGuard eager;

  Tensor w = f32({6, 3});
  Tensor idx = kiln::tensor(std::vector<int64_t>{0, 5, 7, 1}, {2, 2});
  EXPECT_KILN_ERROR(
      kiln::embedding(w, idx),
      "[embedding] index 7 at position [1, 0] is out of range for a weight of 6 rows");
  Tensor neg = kiln::tensor(std::vector<int32_t>{-1}, {1});
  EXPECT_KILN_ERROR(kiln::embedding(w, neg), "index -1");
  EXPECT_KILN_ERROR(kiln::embedding(w, f32({2})),
                    "[embedding] expected indices of dtype int64 or int32, got float32");
  EXPECT_KILN_ERROR(kiln::embedding(f32({6}), of({2}, kiln::kInt64)),
                    "[embedding] expected a 2-D weight, got shape [6]");
  // PyTorch: "Padding_idx must be within num_embeddings"; -1 is the default (none).
  Tensor ok = kiln::tensor(std::vector<int64_t>{0, 5}, {2});
  EXPECT_KILN_ERROR(kiln::embedding(w, ok, 6),
                    "[embedding] expected padding_idx within num_embeddings, in [-6, 6), got 6");
  EXPECT_KILN_ERROR(kiln::embedding(w, ok, -7), "got -7");
  for (int64_t padding_idx : {-6, -1, 0, 5}) {
    EXPECT_EQ(kiln::embedding(w, ok, padding_idx).sizes(), (std::vector<int64_t>{2, 3}));
  }
  const kiln::Device meta = kiln::Device::meta();
  EXPECT_KILN_ERROR(
      kiln::embedding(kiln::empty({6, 3}, kiln::TensorOptions(meta)),
                      kiln::empty({2}, kiln::TensorOptions(kiln::kInt64).device(meta)), 9),
      "[embedding] expected padding_idx within num_embeddings");
}

// With max_norm, embedding first rescales the rows it reads, in the weight
// (embedding_renorm_'s work: Note [Embedding max_norm]); its errors are still
// embedding's, in eager and lazy mode, and a refused call leaves the weight
// as it was (PyTorch 1.13 checks padding_idx and the indices before it
// rescales anything).
TEST(NnErrors, EmbeddingWithMaxNorm) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    auto weight = [] { return kiln::full({6, 3}, 2.0); };
    // The result, computed (lazily recorded work runs here).
    auto embedding = [](const Tensor& w, const Tensor& idx, int64_t padding_idx = -1) {
      Tensor out = kiln::embedding(w, idx, padding_idx, /*max_norm=*/1.0);
      (void)out.data_ptr();
      return out;
    };
    Tensor ok = kiln::tensor(std::vector<int64_t>{0, 5}, {2});
    EXPECT_KILN_ERROR(
        embedding(weight(), kiln::tensor(std::vector<int64_t>{0, 5, 7, 1}, {2, 2})),
        "[embedding] index 7 at position [1, 0] is out of range for a weight of 6 rows");
    EXPECT_KILN_ERROR(
        embedding(weight(), kiln::tensor(std::vector<int32_t>{1, -1}, {2})),
        "[embedding] index -1 at position [1] is out of range for a weight of 6 rows");
    EXPECT_KILN_ERROR(embedding(weight(), f32({2})),
                      "[embedding] expected indices of dtype int64 or int32, got float32");
    EXPECT_KILN_ERROR(embedding(f32({6}), ok), "[embedding] expected a 2-D weight, got shape [6]");
    EXPECT_KILN_ERROR(embedding(of({6, 3}, kiln::kInt64), ok),
                      "[embedding] expected a floating-point weight when max_norm is given (its "
                      "rows' norms are taken), got int64");
    EXPECT_KILN_ERROR(embedding(weight(), ok, 6),
                      "[embedding] expected padding_idx within num_embeddings, in [-6, 6), got 6");
    EXPECT_KILN_ERROR(embedding(Tensor(), ok),
                      "[embedding] expected argument 'weight' to be a defined tensor");
    EXPECT_KILN_ERROR(embedding(weight(), Tensor()),
                      "[embedding] expected argument 'indices' to be a defined tensor");
    if (!lazy) {
      // (In lazy mode a weight a failed write was recorded for carries its error.)
      Tensor w = weight();
      EXPECT_KILN_ERROR(embedding(w, ok, 6), "[embedding] expected padding_idx");
      EXPECT_KILN_ERROR(embedding(w, kiln::tensor(std::vector<int64_t>{0, 9}, {2})),
                        "[embedding] index 9");
      EXPECT_TENSOR_CLOSE(w, kiln::full({6, 3}, 2.0));
    }
    // An accepted call rescales the rows it reads to norm 1, and returns them.
    Tensor w = weight();
    const Tensor out = embedding(w, kiln::tensor(std::vector<int32_t>{5, 5, 0}, {3}));
    const double scaled = 2.0 * (1.0 / (std::sqrt(12.0) + 1e-7));
    EXPECT_TENSOR_CLOSE(out, kiln::full({3, 3}, scaled));
    EXPECT_TENSOR_CLOSE(w.select(0, 0), kiln::full({3}, scaled));
    EXPECT_TENSOR_CLOSE(w.select(0, 1), kiln::full({3}, 2.0));
  }
}

TEST(NnErrors, Linear) {
  EXPECT_KILN_ERROR(kiln::linear(f32({3, 4}), f32({5, 3})),
                    "[linear] input of shape [3, 4] and weight of shape [5, 3] cannot be "
                    "multiplied");
  EXPECT_KILN_ERROR(kiln::linear(f32({3, 4}), f32({5, 4}), f32({4})),
                    "[linear] expected bias to broadcast to [3, 5], got shape [4]");
  EXPECT_KILN_ERROR(kiln::linear(f32({3, 4}), f32({5, 4}), of({5}, kiln::kFloat64)),
                    "[linear] expected bias of dtype float32 like input, got float64");
  EXPECT_KILN_ERROR(kiln::linear(kiln::ones({}), f32({5, 4})), "at least 1 dim");
  EXPECT_KILN_ERROR(kiln::linear(f32({3, 4}), f32({1, 5, 4})), "1-D or 2-D weight");
}

TEST(NnErrors, Attention) {
  Tensor q = f32({2, 4, 8}), k = f32({2, 5, 8}), v = f32({2, 5, 6});
  static const kiln::TypedOp<Tensor(const Tensor&, const Tensor&, const Tensor&,
                                    const std::optional<Tensor>&, double, bool,
                                    std::optional<double>, bool)>
      sdpa("scaled_dot_product_attention");
  EXPECT_KILN_ERROR(sdpa(q, k, v, std::nullopt, 0.1, false, std::nullopt, false),
                    "expected dropout_p == 0");
  EXPECT_KILN_ERROR(kiln::scaled_dot_product_attention(q, k, v, of({4, 5}, kiln::kBool), true),
                    "expected either attn_mask or is_causal, got both");
  EXPECT_KILN_ERROR(kiln::scaled_dot_product_attention(q, k, of({2, 5, 6}, kiln::kFloat64)),
                    "expected query, key and value of the same dtype, got float32, float32 and "
                    "float64");
  EXPECT_KILN_ERROR(kiln::scaled_dot_product_attention(q, k, v, of({4, 5}, kiln::kInt64)),
                    "expected a bool or floating attn_mask, got int64");
  EXPECT_KILN_ERROR(kiln::scaled_dot_product_attention(q, k, v, of({3, 5}, kiln::kBool)),
                    "expected attn_mask to broadcast to the attention weights' shape [2, 4, 5]");
  EXPECT_KILN_ERROR(kiln::scaled_dot_product_attention(q, f32({2, 5, 7}), v),
                    "expected query [..., L, E], key [..., S, E]");
  EXPECT_KILN_ERROR(kiln::scaled_dot_product_attention(f32({3, 4, 8}), k, v),
                    "batch dims that do not broadcast");
}

TEST(NnErrors, Autocast) {
  EXPECT_KILN_ERROR(kiln::AutocastGuard guard(kiln::kFloat32),
                    "[AutocastGuard] expected dtype float16 or bfloat16, got float32");
  EXPECT_FALSE(kiln::autocast_dtype().has_value());
}

}  // namespace
