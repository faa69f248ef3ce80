// Must-fail cases of undefined tensors (a default-constructed Tensor): every
// accessor, method and op given one raises kiln::Error, in eager and lazy
// mode, typed or by name, instead of dereferencing a null impl.

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

TEST(UndefinedTensorErrors, Accessors) {
  const Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_EQ(u.use_count(), 0);
  EXPECT_EQ(u.str(), "tensor(undefined)");
  const char* expected = "expected a defined tensor, got an undefined one";
  EXPECT_KILN_ERROR(u.size(0), "[Tensor::size] expected a defined tensor, got an undefined one");
  EXPECT_KILN_ERROR(u.stride(0), "[Tensor::stride]");
  EXPECT_KILN_ERROR(u.sizes(), "[Tensor::sizes]");
  EXPECT_KILN_ERROR(u.strides(), "[Tensor::strides]");
  EXPECT_KILN_ERROR(u.dim(), "[Tensor::dim]");
  EXPECT_KILN_ERROR(u.numel(), "[Tensor::numel]");
  EXPECT_KILN_ERROR(u.storage_offset(), "[Tensor::storage_offset]");
  EXPECT_KILN_ERROR(u.is_contiguous(), "[Tensor::is_contiguous]");
  EXPECT_KILN_ERROR(u.dtype(), "[Tensor::dtype]");
  EXPECT_KILN_ERROR(u.device(), "[Tensor::device]");
  EXPECT_KILN_ERROR(u.options(), expected);
  EXPECT_KILN_ERROR(u.element_size(), expected);
  EXPECT_KILN_ERROR(u.nbytes(), expected);
  EXPECT_KILN_ERROR(u.is_cpu(), expected);
  EXPECT_KILN_ERROR(u.is_cuda(), expected);
  EXPECT_KILN_ERROR(u.is_meta(), expected);
  EXPECT_KILN_ERROR(u.is_floating_point(), expected);
  EXPECT_KILN_ERROR(u.is_pending(), "[Tensor::is_pending]");
  EXPECT_KILN_ERROR(u.version(), "[Tensor::version]");
  EXPECT_KILN_ERROR(u.data_ptr(), "[Tensor::data_ptr]");
  EXPECT_KILN_ERROR(u.data_ptr<float>(), expected);
  EXPECT_KILN_ERROR(u.item(), "[item] expected a defined tensor");
  EXPECT_KILN_ERROR(u.tolist<float>(), expected);
}

// Methods and ops: each raises (the message names what was undefined).
TEST(UndefinedTensorErrors, MethodsAndOps) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    Tensor u;
    Tensor t = kiln::ones({2, 2});
    EXPECT_KILN_ERROR(u.view({4}), "undefined");
    EXPECT_KILN_ERROR(u.reshape({4}), "undefined");
    EXPECT_KILN_ERROR(u.t(), "undefined");
    EXPECT_KILN_ERROR(u.select(0, 0), "undefined");
    EXPECT_KILN_ERROR(u.contiguous(), "undefined");
    EXPECT_KILN_ERROR(u.clone(), "undefined");
    EXPECT_KILN_ERROR(u.to(kiln::kFloat64), "undefined");
    EXPECT_KILN_ERROR(u.cpu(), "undefined");
    EXPECT_KILN_ERROR(u.fill_(1), "undefined");
    EXPECT_KILN_ERROR(u.zero_(), "undefined");
    EXPECT_KILN_ERROR(u.add_(t), "undefined");
    EXPECT_KILN_ERROR(u.sum(), "undefined");
    EXPECT_KILN_ERROR(u.exp(), "undefined");
    EXPECT_KILN_ERROR(u + t, "undefined");
    EXPECT_KILN_ERROR(t + u, "undefined");
    EXPECT_KILN_ERROR(u * 2.0, "undefined");
    EXPECT_KILN_ERROR(kiln::matmul(t, u), "undefined");
    EXPECT_KILN_ERROR(kiln::cat({t, u}), "undefined");
    EXPECT_KILN_ERROR(t.copy_(u), "undefined");
    EXPECT_KILN_ERROR(kiln::index_select(t, 0, u), "undefined");
    EXPECT_KILN_ERROR(kiln::where(u, t, t), "undefined");
    EXPECT_KILN_ERROR(kiln::masked_fill(t, u, 1.0), "undefined");
    EXPECT_KILN_ERROR(kiln::softmax(u, 0), "undefined");
    EXPECT_KILN_ERROR(kiln::empty_like(u), "undefined");
    kiln::sync();
  }
}

// Messages name the op or module that was given the undefined tensor, not
// the accessor it happened to call first.
TEST(UndefinedTensorErrors, NamesTheOpOrModule) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    Tensor u, x = kiln::ones({2, 4});
    EXPECT_KILN_ERROR(u.copy_(x),
                      "[copy_] expected argument 'self' to be a defined tensor, got an undefined "
                      "one");
    EXPECT_KILN_ERROR(kiln::copy_(u, x), "[copy_] expected argument 'self' to be a defined tensor");
    EXPECT_KILN_ERROR(kiln::nn::LayerNorm{}.forward(x),
                      "[LayerNorm] expected a defined weight (from LayerNorm::empty, a checkpoint "
                      "or a state dict), got an undefined one");
    // Ops and methods built on others name themselves, not the op or
    // accessor inside (Note [Composite ops name themselves]).
    EXPECT_KILN_ERROR(u.zero_(), "[zero_] expected argument 'self' to be a defined tensor");
    EXPECT_KILN_ERROR(kiln::clone(u), "[clone] expected argument 'self' to be a defined tensor");
    EXPECT_KILN_ERROR(u.clone(), "[clone] expected argument 'self' to be a defined tensor");
    EXPECT_KILN_ERROR(u.to(kiln::kFloat64), "[to] expected a defined tensor");
    EXPECT_KILN_ERROR(u.cpu(), "[to] expected a defined tensor");
    EXPECT_KILN_ERROR(u.contiguous(), "[contiguous] expected a defined tensor");
    EXPECT_KILN_ERROR(kiln::argwhere(u), "[argwhere] expected argument 'self' to be a defined");
    EXPECT_KILN_ERROR(kiln::empty_like(u), "[empty_like] expected argument 'self' to be a defined");
    EXPECT_KILN_ERROR(kiln::zeros_like(u), "[zeros_like] expected argument 'self' to be a defined");
    EXPECT_KILN_ERROR(kiln::ones_like(u), "[ones_like] expected argument 'self' to be a defined");
    EXPECT_KILN_ERROR(kiln::full_like(u, 2),
                      "[full_like] expected argument 'self' to be a defined");
    EXPECT_KILN_ERROR(kiln::full_like(kiln::zeros({2}, kiln::kInt8), 1000),
                      "[full_like] value 1000 cannot be converted to int8 without overflow");
    // Lazily, an undefined tensor in a list named Tensor::device.
    EXPECT_KILN_ERROR(kiln::cat({x, u}),
                      "[cat] expected argument 'tensors' to be a defined tensor, got an undefined "
                      "one");
    EXPECT_KILN_ERROR(kiln::stack({x, u}), "[stack] expected argument 'tensors' to be a defined");
    EXPECT_KILN_ERROR(kiln::einsum("ij,jk", {x, u}), "[einsum] expected argument 'tensors'");
    EXPECT_KILN_ERROR(kiln::max(x, u), "[max.other] expected argument");
    EXPECT_KILN_ERROR(kiln::min(u, x), "[min.other] expected argument");
    EXPECT_KILN_ERROR(kiln::nn::RMSNorm{}.forward(x), "[RMSNorm] expected a defined weight");
    EXPECT_KILN_ERROR(kiln::nn::Linear{}.forward(x), "[Linear] expected a defined weight");
    EXPECT_KILN_ERROR(kiln::nn::Embedding{}.forward(kiln::zeros({2}, kiln::kInt64)),
                      "[Embedding] expected a defined weight");
    kiln::sync();
  }
}

TEST(UndefinedTensorErrors, CallOpByName) {
  Tensor t = kiln::ones({3});
  // Used to say "expected Tensor, got Tensor".
  EXPECT_KILN_ERROR(kiln::call_op("add.Tensor", {Tensor(), t}),
                    "[add.Tensor] argument 'self' (position 0) expected a defined Tensor, got an "
                    "undefined one");
  EXPECT_KILN_ERROR(kiln::call_op("add.Tensor", {t, Tensor()}),
                    "[add.Tensor] argument 'other' (position 1) expected a defined Tensor");
  EXPECT_KILN_ERROR(kiln::call_op("add.Tensor", {t}, {{"other", Tensor()}}),
                    "argument 'other' (position 1) expected a defined Tensor");
  EXPECT_KILN_ERROR(kiln::call_op("cat", {std::vector<Tensor>{t, Tensor()}}),
                    "[cat] argument 'tensors' (position 0) expected a list of defined Tensors, got "
                    "an undefined one (Tensor()) at index 1");
  // An optional argument takes an undefined tensor as None.
  Tensor x = kiln::ones({2, 3}), w = kiln::ones({4, 3});
  kiln::Stack out = kiln::call_op("linear", {x, w, Tensor()});
  EXPECT_TENSOR_CLOSE(out.at(0).to_tensor(), kiln::full({2, 4}, 3.0));
}

}  // namespace
