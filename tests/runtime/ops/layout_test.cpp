// Output layouts against PyTorch 1.13: the ops PyTorch gives
// memory_format=preserve keep a transposed or permuted input's layout, and
// give a non-dense one dense strides in its order (Note [Preserved layout]);
// the others come out row-major. Each op runs eager and recorded (where the
// Meta kernel decides the geometry), on a transposed matrix (T), a
// transposed, column-sliced one (ND) and their 3-D permuted kin (P3, ND3);
// the expected strides are PyTorch's. The ops that keep the layout are also
// checked against the same op on a contiguous copy.

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "runtime/core/preserved_layout.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using Strides = std::vector<int64_t>;

Strides strides_of(const Tensor& t) {
  return Strides(t.strides().begin(), t.strides().end());
}

Tensor index0() {
  kiln::EagerGuard eager;
  return kiln::zeros({1}, kiln::TensorOptions(kiln::kInt64));
}

struct Input {
  const char* name;
  std::function<Tensor()> make;
};

// The inputs of PyTorch's run, in its order: [8, 6], [8, 6], [4, 2, 3], [5, 4, 3].
const std::vector<Input>& inputs() {
  static const std::vector<Input> in = {
      {"T",
       [] {
         return kiln::randn({6, 8}).t();
       }},
      {"ND",
       [] {
         return kiln::randn({6, 16}).slice(1, 0, 16, 2).t();
       }},
      {"P3",
       [] {
         return kiln::randn({2, 3, 4}).permute({2, 0, 1});
       }},
      {"ND3",
       [] {
         return kiln::randn({4, 3, 10}).slice(2, 0, 10, 2).permute({2, 0, 1});
       }},
  };
  return in;
}

struct Op {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
};

std::vector<int64_t> all_dims(const Tensor& x) {
  std::vector<int64_t> d;
  for (int64_t i = 0; i < x.dim(); ++i) d.push_back(i);
  return d;
}

const std::vector<Op>& ops() {
  using namespace kiln;
  static const std::vector<Op> table = {
      {"flip0", [](const Tensor& x) { return flip(x, {0}); }},
      {"flipall", [](const Tensor& x) { return flip(x, all_dims(x)); }},
      {"sort", [](const Tensor& x) { return std::get<0>(sort(x, 0)); }},
      {"sorti", [](const Tensor& x) { return std::get<1>(sort(x, 0)); }},
      {"sortd", [](const Tensor& x) { return std::get<0>(sort(x, -1, true)); }},
      {"argsort", [](const Tensor& x) { return argsort(x, 0); }},
      {"topk", [](const Tensor& x) { return std::get<0>(topk(x, 2, 0)); }},
      {"topkall", [](const Tensor& x) { return std::get<0>(topk(x, x.size(0), 0)); }},
      {"empty_like", [](const Tensor& x) { return empty_like(x); }},
      {"zeros_like", [](const Tensor& x) { return zeros_like(x); }},
      {"ones_like", [](const Tensor& x) { return ones_like(x); }},
      {"full_like", [](const Tensor& x) { return full_like(x, 2.0); }},
      {"pad0",
       [](const Tensor& x) {
         return pad(x, {0, 0});
       }},
      {"pad1",
       [](const Tensor& x) {
         return pad(x, {1, 1});
       }},
      {"roll", [](const Tensor& x) { return roll(x, {1}, {0}); }},
      {"cumsum", [](const Tensor& x) { return cumsum(x, 0); }},
      {"cumprod", [](const Tensor& x) { return cumprod(x, 0); }},
      {"tril", [](const Tensor& x) { return tril(x); }},
      {"triu", [](const Tensor& x) { return triu(x); }},
      {"softmax", [](const Tensor& x) { return softmax(x, 0); }},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x, -1); }},
      {"clone", [](const Tensor& x) { return x.clone(); }},
      {"contig", [](const Tensor& x) { return x.contiguous(); }},
      {"to64", [](const Tensor& x) { return x.to(kFloat64); }},
      {"layer_norm", [](const Tensor& x) { return layer_norm(x, {x.size(-1)}); }},
      {"gather", [](const Tensor& x) { return gather(x, 0, zeros_like(x, kInt64)); }},
      {"masked_fill", [](const Tensor& x) { return masked_fill(x, x > 0, 0.); }},
      {"where", [](const Tensor& x) { return where(x > 0, x, 0.); }},
      {"index_copy",
       [](const Tensor& x) { return index_copy(x, 0, index0(), x.slice(0, 0, 1).clone()); }},
      {"index_add",
       [](const Tensor& x) { return index_add(x, 0, index0(), x.slice(0, 0, 1).clone()); }},
      {"scatter", [](const Tensor& x) { return scatter(x, 0, zeros_like(x, kInt64), 1.); }},
      {"index_put",
       [](const Tensor& x) { return index_put(x, {index0()}, kiln::scalar_tensor(1.)); }},
      {"repeat1", [](const Tensor& x) { return repeat(x, std::vector<int64_t>(x.dim(), 1)); }},
      {"nan_to_num", [](const Tensor& x) { return nan_to_num(x); }},
      {"clamp", [](const Tensor& x) { return clamp(x, Scalar(0), Scalar(1)); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"mul_s", [](const Tensor& x) { return x * 2; }},
      {"add_t", [](const Tensor& x) { return x + x; }},
      {"addcmul", [](const Tensor& x) { return addcmul(x, x, x); }},
      {"lerp", [](const Tensor& x) { return lerp(x, x, 0.5); }},
      {"pow", [](const Tensor& x) { return pow(x, 2); }},
      {"square", [](const Tensor& x) { return square(x); }},
      {"sign", [](const Tensor& x) { return sign(x); }},
      {"isnan", [](const Tensor& x) { return isnan(x); }},
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"softplus", [](const Tensor& x) { return softplus(x); }},
      {"hardtanh", [](const Tensor& x) { return hardtanh(x); }},
  };
  return table;
}

// PyTorch 1.13's output strides for each op on T, ND, P3 and ND3 (none: the
// op is 2-D only).
struct Expected {
  const char* op;
  std::vector<Strides> strides;
};
const std::vector<Expected>& expected() {
  static const std::vector<Expected> table = {
      {"flip0", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"flipall", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"sort", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"sorti", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"sortd", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"argsort", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"topk", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"topkall", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"empty_like", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"zeros_like", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"ones_like", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"full_like", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"pad0", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"pad1", {{8, 1}, {8, 1}, {10, 5, 1}, {20, 5, 1}}},
      {"roll", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"cumsum", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"cumprod", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"tril", {{6, 1}, {6, 1}, {}, {}}},
      {"triu", {{6, 1}, {6, 1}, {}, {}}},
      {"softmax", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"log_softmax", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"clone", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"contig", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"to64", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"layer_norm", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"gather", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"masked_fill", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"where", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"index_copy", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"index_add", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"scatter", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"index_put", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"repeat1", {{6, 1}, {6, 1}, {6, 3, 1}, {12, 3, 1}}},
      {"nan_to_num", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"clamp", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"relu", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"gelu", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"mul_s", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"add_t", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"addcmul", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"lerp", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"pow", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"square", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"sign", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"isnan", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"neg", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"softplus", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
      {"hardtanh", {{1, 8}, {1, 8}, {1, 12, 4}, {1, 15, 5}}},
  };
  return table;
}

// The ops that keep self's layout and so run differently on a strided input
// (empty_like is left out: its values are anything).
bool value_checked(const std::string& op) {
  for (const char* k :
       {"flip0", "flipall", "sort", "sorti", "sortd", "argsort", "zeros_like", "ones_like",
        "full_like", "pad0", "clone", "to64", "where", "index_put", "nan_to_num"}) {
    if (op == k) return true;
  }
  return false;
}

TEST(Layout, OutputStridesMatchPyTorch) {
  ASSERT_EQ(ops().size(), expected().size());
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    for (size_t i = 0; i < inputs().size(); ++i) {
      const Input& in = inputs()[i];
      SCOPED_TRACE(in.name);
      kiln::manual_seed(7);
      Tensor x;
      {
        kiln::EagerGuard eager;
        x = in.make();
      }
      for (size_t k = 0; k < ops().size(); ++k) {
        const Op& op = ops()[k];
        ASSERT_STREQ(op.name, expected()[k].op);
        const Strides& want = expected()[k].strides[i];
        if (want.empty()) continue;
        SCOPED_TRACE(op.name);
        std::optional<kiln::EagerGuard> eager;
        if (!lazy) eager.emplace();
        const Tensor y = op.fn(x);
        EXPECT_EQ(strides_of(y), want);
        if (!value_checked(op.name)) continue;
        Tensor ref;
        {
          kiln::EagerGuard eager_ref;
          ref = op.fn(x.contiguous());
        }
        EXPECT_EQ(kiln::testing::compare(y, ref), "");
      }
    }
  }
}

// The rule's corners, as PyTorch 1.13 lays them out: a size-1 dim of a dense
// input keeps its stride, an expanded dim (stride 0) keeps its place, and a
// crop that leaves gaps comes out dense in the input's order.
TEST(Layout, PreserveRuleCorners) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    Tensor t, e, s;
    {
      kiln::EagerGuard eager;
      t = kiln::randn({6, 8}).t().unsqueeze(1);  // [8, 1, 6], strides (1, 48, 8)
      e = kiln::randn({3, 1}).expand({3, 4});
      s = kiln::randn({4, 1, 6}).slice(2, 0, 6, 2);
    }
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    EXPECT_EQ(strides_of(t.clone()), (Strides{1, 48, 8}));
    EXPECT_EQ(strides_of(kiln::flip(t, {0})), (Strides{1, 48, 8}));
    EXPECT_EQ(strides_of(kiln::zeros_like(t)), (Strides{1, 48, 8}));
    EXPECT_EQ(strides_of(e.clone()), (Strides{4, 1}));
    EXPECT_EQ(strides_of(std::get<0>(kiln::sort(e, 0))), (Strides{4, 1}));
    EXPECT_EQ(strides_of(s.clone()), (Strides{3, 3, 1}));
    const Tensor v = t.squeeze(1);
    EXPECT_EQ(strides_of(kiln::pad(v, {0, -1})), (Strides{1, 8}));
    EXPECT_EQ(strides_of(kiln::pad(v, {-1, 0, 0, -2})), (Strides{1, 6}));
  }
  // PyTorch's own example for infer_dense_strides.
  EXPECT_EQ(kiln::infer_dense_strides({6, 5, 4, 3, 2}, {6, 0, 120, 0, 1}),
            (kiln::DimVector{6, 36, 180, 2, 1}));
}

// flip of a transposed matrix is transposed, so it has no flat view, and its
// reshape is a copy that a write leaves it whole.
TEST(Layout, FlipOfTransposeHasNoFlatView) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    Tensor x;
    {
      kiln::EagerGuard eager;
      x = kiln::arange(24, kiln::TensorOptions(kiln::kFloat32)).reshape({4, 6});
    }
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    Tensor y = kiln::flip(x.t(), {0});
    EXPECT_EQ(strides_of(y), (Strides{1, 6}));
    EXPECT_THROW(y.view({-1}), kiln::Error);
    Tensor r = y.reshape({-1});
    r.fill_(0);
    Tensor ref;
    {
      kiln::EagerGuard eager_ref;
      ref = kiln::flip(x.t().contiguous(), {0});
    }
    EXPECT_EQ(kiln::testing::compare(y, ref), "");
    EXPECT_EQ(y[0][0].item<float>(), 5.f);
  }
}

}  // namespace
