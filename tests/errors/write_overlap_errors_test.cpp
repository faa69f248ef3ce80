// Must-fail writes into a target whose elements share memory (an expanded,
// stride-0 view): every in-place and out= op that reads an input refuses it
// (Note [Writes into shared storage]), as PyTorch's assert_no_internal_overlap
// does, eagerly, lazily (at the call: the Meta kernel raises while the op is
// recorded) and on meta tensors. fill_ and zero_ read nothing and may write
// through such a view, as in PyTorch; so may masked_fill_ and
// embedding_renorm_, which PyTorch 1.13 lets through (the oracle checks them).

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Device;
using kiln::IValue;
using kiln::Stack;
using kiln::Tensor;
using kiln::TensorOptions;

struct Env {
  Device device;
  Tensor f32(std::initializer_list<int64_t> sizes) const {
    return kiln::ones(sizes, TensorOptions(kiln::kFloat32).device(device));
  }
  Tensor of(std::initializer_list<int64_t> sizes, kiln::DType t) const {
    return kiln::zeros(sizes, TensorOptions(t).device(device));
  }
  // A [rows, cols] view of one row: every row is the same memory.
  Tensor expanded(int64_t rows, int64_t cols) const {
    return kiln::zeros({1, cols}, TensorOptions(kiln::kFloat32).device(device))
        .expand({rows, cols});
  }
};

struct Case {
  const char* op;
  std::function<void(const Env&)> call;
};

void call(const char* op, Stack args, std::vector<std::pair<std::string, IValue>> kwargs = {}) {
  kiln::call_op(op, std::move(args), kwargs);
}

std::vector<Case> cases() {
  auto out = [](const Env& e) { return IValue(e.expanded(3, 4)); };
  return {
      {"exp_", [](const Env& e) { call("exp_", {e.expanded(3, 4)}); }},
      {"exp.out",
       [&](const Env& e) {
         call("exp.out", {e.f32({3, 4})}, {{"out", out(e)}});
       }},
      {"add_.Tensor",
       [](const Env& e) {
         call("add_.Tensor", {e.expanded(3, 4), e.f32({3, 4})});
       }},
      {"add.out",
       [&](const Env& e) {
         call("add.out", {e.f32({3, 4}), e.f32({3, 4})}, {{"out", out(e)}});
       }},
      {"gelu_", [](const Env& e) { call("gelu_", {e.expanded(3, 4)}); }},
      {"clamp_",
       [](const Env& e) {
         call("clamp_", {e.expanded(3, 4), 0.0, 1.0});
       }},
      {"lerp_.Scalar",
       [](const Env& e) {
         call("lerp_.Scalar", {e.expanded(3, 4), e.f32({3, 4}), 0.5});
       }},
      {"where.self_out",
       [&](const Env& e) {
         call("where.self_out", {e.of({3, 4}, kiln::kBool), e.f32({3, 4}), e.f32({3, 4})},
              {{"out", out(e)}});
       }},
      {"sum.IntList_out",
       [](const Env& e) {
         call("sum.IntList_out", {e.f32({3, 4, 2}), std::vector<int64_t>{2}},
              {{"out", IValue(e.expanded(3, 4))}});
       }},
      {"cumsum.out",
       [&](const Env& e) {
         call("cumsum.out", {e.f32({3, 4}), int64_t{1}}, {{"out", out(e)}});
       }},
      {"matmul.out",
       [&](const Env& e) {
         call("matmul.out", {e.f32({3, 5}), e.f32({5, 4})}, {{"out", out(e)}});
       }},
      {"mm.out",
       [&](const Env& e) {
         call("mm.out", {e.f32({3, 5}), e.f32({5, 4})}, {{"out", out(e)}});
       }},
      {"bmm.out",
       [](const Env& e) {
         Tensor o = kiln::zeros({1, 1, 4}, TensorOptions(kiln::kFloat32).device(e.device))
                        .expand({2, 3, 4});
         call("bmm.out", {e.f32({2, 3, 5}), e.f32({2, 5, 4})}, {{"out", o}});
       }},
      {"addmm_",
       [](const Env& e) {
         call("addmm_", {e.expanded(3, 4), e.f32({3, 5}), e.f32({5, 4})});
       }},
      {"addmm.out",
       [&](const Env& e) {
         call("addmm.out", {e.f32({4}), e.f32({3, 5}), e.f32({5, 4})}, {{"out", out(e)}});
       }},
      {"cat.out",
       [&](const Env& e) {
         call("cat.out", {std::vector<Tensor>{e.f32({1, 4}), e.f32({2, 4})}}, {{"out", out(e)}});
       }},
      {"index_select.out",
       [&](const Env& e) {
         call("index_select.out", {e.f32({5, 4}), int64_t{0}, e.of({3}, kiln::kInt64)},
              {{"out", out(e)}});
       }},
      {"scatter_add_",
       [](const Env& e) {
         call("scatter_add_",
              {e.expanded(3, 4), int64_t{0}, e.of({1, 4}, kiln::kInt64), e.f32({1, 4})});
       }},
      {"index_copy_",
       [](const Env& e) {
         call("index_copy_",
              {e.expanded(3, 4), int64_t{0}, e.of({1}, kiln::kInt64), e.f32({1, 4})});
       }},
      {"tril_", [](const Env& e) { call("tril_", {e.expanded(3, 4)}); }},
      {"triu_", [](const Env& e) { call("triu_", {e.expanded(3, 4)}); }},
      {"copy_",
       [](const Env& e) {
         call("copy_", {e.expanded(3, 4), e.f32({3, 4})});
       }},
      {"relu_", [](const Env& e) { call("relu_", {e.expanded(3, 4)}); }},
      {"gelu.out",
       [&](const Env& e) {
         call("gelu.out", {e.f32({3, 4})}, {{"out", out(e)}});
       }},
      {"softplus.out",
       [&](const Env& e) {
         call("softplus.out", {e.f32({3, 4})}, {{"out", out(e)}});
       }},
      {"nan_to_num_", [](const Env& e) { call("nan_to_num_", {e.expanded(3, 4)}); }},
      {"nan_to_num.out",
       [&](const Env& e) {
         call("nan_to_num.out", {e.f32({3, 4})}, {{"out", out(e)}});
       }},
      {"clamp_.Tensor",
       [](const Env& e) {
         call("clamp_.Tensor", {e.expanded(3, 4), e.f32({3, 4})});
       }},
      {"clamp.out",
       [&](const Env& e) {
         call("clamp.out", {e.f32({3, 4}), 0.0}, {{"out", out(e)}});
       }},
      {"div_.Tensor_mode",
       [](const Env& e) {
         call("div_.Tensor_mode", {e.expanded(3, 4), e.f32({3, 4})},
              {{"rounding_mode", IValue(std::string("floor"))}});
       }},
      {"floor_divide_.Tensor",
       [](const Env& e) {
         call("floor_divide_.Tensor", {e.expanded(3, 4), e.f32({3, 4})});
       }},
      {"pow_.Scalar",
       [](const Env& e) {
         call("pow_.Scalar", {e.expanded(3, 4), 2.0});
       }},
      {"pow.Tensor_Tensor_out",
       [&](const Env& e) {
         call("pow.Tensor_Tensor_out", {e.f32({3, 4}), e.f32({3, 4})}, {{"out", out(e)}});
       }},
      {"lerp_.Tensor",
       [](const Env& e) {
         call("lerp_.Tensor", {e.expanded(3, 4), e.f32({3, 4}), e.f32({3, 4})});
       }},
      {"addcmul_",
       [](const Env& e) {
         call("addcmul_", {e.expanded(3, 4), e.f32({3, 4}), e.f32({3, 4})});
       }},
      {"addcdiv.out",
       [&](const Env& e) {
         call("addcdiv.out", {e.f32({3, 4}), e.f32({3, 4}), e.f32({3, 4})}, {{"out", out(e)}});
       }},
      {"mean.out",
       [](const Env& e) {
         call("mean.out", {e.f32({3, 4, 2}), std::vector<int64_t>{2}},
              {{"out", IValue(e.expanded(3, 4))}});
       }},
      {"amax.out",
       [](const Env& e) {
         call("amax.out", {e.f32({3, 4, 2}), std::vector<int64_t>{2}},
              {{"out", IValue(e.expanded(3, 4))}});
       }},
      {"max.out",
       [&](const Env& e) {
         call("max.out", {e.f32({3, 4}), e.f32({3, 4})}, {{"out", out(e)}});
       }},
      {"cumprod.out",
       [&](const Env& e) {
         call("cumprod.out", {e.f32({3, 4}), int64_t{1}}, {{"out", out(e)}});
       }},
      {"stack.out",
       [&](const Env& e) {
         call("stack.out", {std::vector<Tensor>{e.f32({4}), e.f32({4}), e.f32({4})}},
              {{"out", out(e)}});
       }},
      {"gather.out",
       [&](const Env& e) {
         call("gather.out", {e.f32({3, 4}), int64_t{0}, e.of({3, 4}, kiln::kInt64)},
              {{"out", out(e)}});
       }},
      {"scatter_.src",
       [](const Env& e) {
         call("scatter_.src",
              {e.expanded(3, 4), int64_t{0}, e.of({1, 4}, kiln::kInt64), e.f32({1, 4})});
       }},
      {"scatter_.value",
       [](const Env& e) {
         call("scatter_.value", {e.expanded(3, 4), int64_t{0}, e.of({1, 4}, kiln::kInt64), 1.0});
       }},
      {"scatter_reduce_.two",
       [](const Env& e) {
         call("scatter_reduce_.two", {e.expanded(3, 4), int64_t{0}, e.of({1, 4}, kiln::kInt64),
                                      e.f32({1, 4}), std::string("sum")});
       }},
      {"kv_cache_attention_write",
       [](const Env& e) {
         const auto cache = [&] {
           return kiln::zeros({1, 2, 1, 8}, TensorOptions(kiln::kFloat32).device(e.device))
               .expand({1, 2, 4, 8});
         };
         call("kv_cache_attention_write",
              {e.f32({1, 2, 1, 8}), cache(), cache(), e.of({1}, kiln::kInt64), e.f32({1, 2, 1, 8}),
               e.f32({1, 2, 1, 8})});
       }},
  };
}

bool names_the_overlap(const std::string& message) {
  return message.find("do not share memory") != std::string::npos ||
         message.find("distinct memory locations") != std::string::npos ||
         message.find("without internal overlap") != std::string::npos;
}

TEST(WriteOverlapErrors, ExpandedTargetsAreRefused) {
  for (const char* mode : {"eager", "lazy", "meta"}) {
    SCOPED_TRACE(mode);
    std::optional<kiln::EagerGuard> eager;
    if (std::string(mode) == "eager") eager.emplace();
    const Env env{std::string(mode) == "meta" ? Device::meta() : Device::cpu()};
    for (const Case& c : cases()) {
      SCOPED_TRACE(c.op);
      try {
        c.call(env);  // lazily, no sync(): the error must come at the call
        ADD_FAILURE() << c.op << " wrote into an expanded target";
      } catch (const kiln::Error& e) {
        const std::string message = e.what();
        EXPECT_TRUE(names_the_overlap(message)) << message;
        const std::string name(c.op);  // "[add_]" for add_.Tensor
        EXPECT_EQ(message.rfind("[" + name.substr(0, name.find('.')), 0), 0u) << message;
      }
    }
    kiln::sync();
  }
}

// Writes that read no input may go through a broadcast view (every alias
// gets the same value), as in PyTorch.
TEST(WriteOverlapErrors, FillAndZeroMayWriteThroughAnExpandedView) {
  kiln::EagerGuard eager;
  Tensor base = kiln::ones({1, 4});
  Tensor view = base.expand({3, 4});
  kiln::fill_(view, 2.0);
  EXPECT_TENSOR_CLOSE(base, kiln::full({1, 4}, 2.0));
  kiln::zero_(view);
  EXPECT_TENSOR_CLOSE(base, kiln::zeros({1, 4}));
}

// A write through a view whose elements share addresses (unfold's windows
// that meet, as_strided onto itself) is defined by the eager kernel's element
// order, as in PyTorch: lazily and compiled, the op runs at the call, and a
// read through the same view sees memory, not each element's own computed
// value (one address, one value).
TEST(WriteOverlapErrors, WritesThroughAViewThatOverlapsItselfMatchEager) {
  using Program = std::function<std::vector<Tensor>(const Tensor&)>;
  const std::vector<std::pair<const char*, Program>> programs = {
      {"unfold add_",
       [](const Tensor& b) {
         Tensor u = b.unfold(0, 3, 2);
         u.add_(100.0f);
         return std::vector<Tensor>{u + 0.0f, u.sum({1})};
       }},
      {"unfold mul_ then masked_fill_",
       [](const Tensor& b) {
         Tensor u = b.unfold(0, 4, 1);
         u.mul_(2.0f);
         kiln::masked_fill_(u, u > 20.0f, -1.0f);
         return std::vector<Tensor>{u * 1.0f, b * 1.0f};
       }},
      {"as_strided add_",
       [](const Tensor& b) {
         Tensor v = b.as_strided({3, 3}, {1, 1});
         v.add_(kiln::arange(9, kiln::kFloat32).view({3, 3}));
         return std::vector<Tensor>{v * 1.0f, b * 1.0f};
       }},
  };
  auto fresh = [] {
    kiln::EagerGuard eager;
    return kiln::arange(12, kiln::kFloat32);
  };
  for (const auto& [name, program] : programs) {
    SCOPED_TRACE(name);
    std::vector<Tensor> want;
    Tensor base_eager = fresh();
    {
      kiln::EagerGuard eager;
      want = program(base_eager);
    }
    Tensor base_lazy = fresh();
    const std::vector<Tensor> lazy = program(base_lazy);
    ASSERT_EQ(lazy.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_TENSOR_CLOSE_TOL(lazy[k], want[k], 0, 0);
    EXPECT_TENSOR_CLOSE_TOL(base_lazy, base_eager, 0, 0);
    auto compiled = kiln::jit::compile(program, {.name = "overlapping_view"});
    for (int call = 0; call < 2; ++call) {
      Tensor base = fresh();
      const std::vector<Tensor> got = compiled(base);
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k) EXPECT_TENSOR_CLOSE_TOL(got[k], want[k], 0, 0);
      EXPECT_TENSOR_CLOSE_TOL(base, base_eager, 0, 0);
    }
  }
}

}  // namespace
