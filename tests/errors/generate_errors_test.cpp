// Must-fail calls of generate() and of the decode steps' inputs.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

kiln::nn::Llama tiny() {
  return kiln::nn::Llama::random(kiln::nn::LlamaConfig::named("tiny"), kiln::kFloat32,
                                 kiln::Device::cpu());
}

TEST(GenerateErrors, Prompts) {
  auto m = tiny();
  kiln::nn::GenerateOptions o;
  o.max_new_tokens = 4;
  EXPECT_KILN_ERROR(kiln::nn::generate(m, std::vector<int64_t>{}, o),
                    "[generate] expected prompts of at least one token");
  EXPECT_KILN_ERROR(kiln::nn::generate(m, std::vector<int64_t>{1, 256}, o),
                    "[generate] expected token ids in [0, 256), got 256 in prompt 0");
  EXPECT_KILN_ERROR(kiln::nn::generate(m, std::vector<int64_t>{-1}, o), "got -1");
  auto cache = m.make_cache(2, 8);
  auto steps = kiln::nn::decode_steps(m, cache);
  EXPECT_KILN_ERROR(kiln::nn::generate(steps, {{1}, {2}, {3}}, o),
                    "[generate] expected 1 to 2 prompts (the cache's batch), got 3");
  EXPECT_KILN_ERROR(kiln::nn::generate(steps, {{1, 2, 3, 4, 5, 6}}, o),
                    "[generate] expected the longest prompt (6) plus max_new_tokens (4) - 1 to fit "
                    "the cache's 8 slots");
  EXPECT_KILN_ERROR(kiln::nn::generate(kiln::nn::DecodeSteps{}, {{1}}, o),
                    "expected prefill and decode steps");
}

TEST(GenerateErrors, Options) {
  auto m = tiny();
  auto bad = [&](auto change, const char* message) {
    kiln::nn::GenerateOptions o;
    change(o);
    EXPECT_KILN_ERROR(kiln::nn::generate(m, std::vector<int64_t>{1}, o), message);
  };
  bad([](auto& o) { o.max_new_tokens = -1; }, "expected max_new_tokens >= 0, got -1");
  bad([](auto& o) { o.temperature = -0.5; }, "expected a finite temperature >= 0, got -0.5");
  bad([](auto& o) { o.temperature = std::nan(""); }, "expected a finite temperature");
  bad([](auto& o) { o.top_k = -3; }, "expected top_k >= 0, got -3");
  bad([](auto& o) { o.top_p = 0; }, "expected top_p in (0, 1], got 0");
  bad([](auto& o) { o.top_p = 1.5; }, "expected top_p in (0, 1], got 1.5");
  bad([](auto& o) { o.pad_token = 256; }, "expected pad_token in [0, 256), got 256");
  // A max_new_tokens whose sum with the prompt overflows int64 is refused,
  // for a cache of the model's making and for the caller's (the sum wrapped
  // and the steps ran past the cache's end without stopping).
  bad([](auto& o) { o.max_new_tokens = std::numeric_limits<int64_t>::max(); },
      "[Llama] expected a cache of at most 256 slots");
  kiln::nn::GenerateOptions huge;
  huge.max_new_tokens = std::numeric_limits<int64_t>::max();
  EXPECT_KILN_ERROR(kiln::nn::generate(m, std::vector<int64_t>{1, 2}, huge),
                    "[generate] expected the longest prompt (2) plus max_new_tokens");
  auto cache = m.make_cache(1, 8);
  EXPECT_KILN_ERROR(kiln::nn::generate(kiln::nn::decode_steps(m, cache),
                                       std::vector<std::vector<int64_t>>{{1, 2, 3}}, huge),
                    "- 1 to fit the cache's 8 slots");
}

// sample_tokens checks its options as generate() does (one rule), greedy or not.
TEST(GenerateErrors, SampleTokensOptions) {
  const Tensor logits = kiln::ones({2, 4});
  const Tensor u = kiln::tensor(std::vector<float>{0.5f, 0.5f}, {2});
  auto bad = [&](auto change, const char* message) {
    kiln::nn::GenerateOptions o;
    change(o);
    EXPECT_KILN_ERROR(kiln::nn::sample_tokens(logits, o, u), message);
  };
  bad([](auto& o) { o.temperature = -0.5; },
      "[sample_tokens] expected a finite temperature >= 0, got -0.5");
  bad([](auto& o) { o.temperature = std::nan(""); }, "expected a finite temperature");
  bad([](auto& o) { o.temperature = INFINITY; }, "expected a finite temperature");
  bad([](auto& o) { o.top_k = -3; }, "[sample_tokens] expected top_k >= 0, got -3");
  bad([](auto& o) { o.top_p = 0; }, "[sample_tokens] expected top_p in (0, 1], got 0");
  bad(
      [](auto& o) {
        o.temperature = 1;
        o.top_p = 1.5;
      },
      "expected top_p in (0, 1], got 1.5");
}

TEST(GenerateErrors, DecodeInputs) {
  auto m = tiny();
  auto cache = m.make_cache(2, 8);
  Tensor ids = kiln::ones({2, 1}, kiln::kInt64);
  EXPECT_KILN_ERROR(
      m.decode_step(kiln::ones({2, 2}, kiln::kInt64), kiln::zeros({2}, kiln::kInt64), cache),
      "[Llama::decode_step] expected ids [batch, 1], got [2, 2]");
  EXPECT_KILN_ERROR(m.decode_step(ids, kiln::zeros({3}, kiln::kInt64), cache),
                    "expected pos as one int64 element or int64 [2], got int64 [3]");
  EXPECT_KILN_ERROR(m.decode_step(ids, kiln::zeros({2}), cache), "got float32 [2]");
  EXPECT_KILN_ERROR(m.prefill(kiln::ones({2, 9}, kiln::kInt64), cache),
                    "[Llama::prefill] expected at most 8 tokens (the cache length), got 9");
  EXPECT_KILN_ERROR(m.prefill(kiln::ones({3, 2}, kiln::kInt64), cache),
                    "expected a cache of 2 layers and batch 3, got 2 and 2");
  EXPECT_KILN_ERROR(
      m.prefill(kiln::ones({2, 2}, kiln::kInt64), cache, kiln::zeros({3}, kiln::kInt64)),
      "[prefill] expected last as int64 [2], got int64 [3]");
  EXPECT_KILN_ERROR(kiln::nn::sample_tokens(kiln::ones({4}), {}, Tensor()),
                    "[sample_tokens] expected logits [batch, vocab], got [4]");
  kiln::nn::GenerateOptions hot;
  hot.temperature = 1;
  EXPECT_KILN_ERROR(kiln::nn::sample_tokens(kiln::ones({2, 4}), hot, kiln::ones({3})),
                    "expected one uniform per row (2), got 3");
  for (const kiln::nn::GenerateOptions& o : {kiln::nn::GenerateOptions{}, hot}) {
    EXPECT_KILN_ERROR(kiln::nn::sample_tokens(kiln::ones({2, 0}), o, kiln::zeros({2})),
                      "[sample_tokens] expected a vocab of at least one token, got logits [2, 0]");
  }
  auto uniform = [](float a, float b) { return kiln::tensor(std::vector<float>{a, b}, {2}); };
  EXPECT_KILN_ERROR(kiln::nn::sample_tokens(kiln::ones({2, 4}), hot, uniform(0.5f, 1.0f)),
                    "[sample_tokens] expected uniform values in [0, 1), got 1 for row 1");
  EXPECT_KILN_ERROR(kiln::nn::sample_tokens(kiln::ones({2, 4}), hot, uniform(-0.25f, 0.5f)),
                    "got -0.25 for row 0");
  EXPECT_KILN_ERROR(kiln::nn::sample_tokens(kiln::ones({2, 4}), hot, uniform(0.5f, std::nanf(""))),
                    "[sample_tokens] expected uniform values in [0, 1), got nan for row 1");
  EXPECT_EQ(kiln::nn::sample_tokens(kiln::ones({2, 4}), hot, uniform(0.0f, 0.99f)).sizes(),
            (std::vector<int64_t>{2}));
  kiln::nn::GPT2Config c;
  c.n_layer = 1, c.d_model = 32, c.n_head = 4, c.vocab = 50, c.n_positions = 16;
  auto g = kiln::nn::GPT2::random(c, kiln::kFloat32, kiln::Device::cpu());
  EXPECT_KILN_ERROR(g.make_cache(1, 17), "[GPT2] expected a cache of at most n_positions = 16");
}

}  // namespace
