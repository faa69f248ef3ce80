// GPT-2's decode step (a static KV cache read through kv_cache_attention up
// to a position held in a tensor) gives the logits of the full causal
// forward pass at every position: on the CPU, and on CUDA in float16 where a
// device is present (the fused prefill kernel on one side, the split decode
// kernel on the other).

#include <gtest/gtest.h>

#include <string>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

void check_decode(kiln::Device device, kiln::DType dtype, double tol) {
  kiln::nn::GPT2Config config;
  config.n_layer = 2;
  config.d_model = 128;
  config.n_head = 2;  // head dim 64, as GPT-2's
  config.vocab = 97;
  config.n_positions = 64;
  const kiln::nn::GPT2 model = kiln::nn::GPT2::random(config, dtype, device, 5);
  const int64_t batch = 2, steps = 9;
  kiln::Tensor ids = kiln::randint(config.vocab, {batch, steps}).to(device);
  kiln::Tensor full = model.lm_head(model.forward(ids)).to(kiln::kFloat32).cpu();
  kiln::nn::GPT2::Cache cache = model.make_cache(batch, 32);
  for (int64_t t = 0; t < steps; ++t) {
    kiln::Tensor pos = kiln::full({1}, t, kiln::TensorOptions(kiln::kInt64).device(device));
    kiln::Tensor step = model.decode_step(ids.slice(1, t, t + 1), pos, cache);
    ASSERT_EQ(step.sizes(), (kiln::IntArrayRef{batch, 1, config.vocab}));
    std::string msg = kiln::testing::compare(step.to(kiln::kFloat32).cpu().select(1, 0),
                                             full.select(1, t), {tol, tol});
    EXPECT_TRUE(msg.empty()) << kiln::dtype_name(dtype) << " on " << device << ", step " << t
                             << ": " << msg;
  }
}

TEST(Gpt2Decode, StepsMatchTheFullForwardOnCpu) {
  check_decode(kiln::Device::cpu(), kiln::kFloat32, 1e-4);
}

TEST(Gpt2Decode, StepsMatchTheFullForwardOnCuda) {
  KILN_REQUIRE_CUDA();
  check_decode(kiln::Device::cuda(), kiln::kFloat16, 1e-2);
}

}  // namespace
