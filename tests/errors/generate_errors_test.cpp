// Must-fail calls of generate() and of the decode steps' inputs.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

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

Tensor i64(std::vector<int64_t> values, std::vector<int64_t> shape) {
  return kiln::tensor(values, shape, kiln::TensorOptions(kiln::kInt64));
}

// A decode step of `m` at `pos` past a cache of 8 slots fails with
// `message`; with `intact`, the cache is as the prefill left it.
template <class Model>
void decode_past_the_cache(const Model& m, const Tensor& pos, const std::string& message,
                           bool intact, bool pending = false) {
  auto cache = m.make_cache(2, 8);  // shorter than the model's positions
  (void)m.prefill(i64({1, 2, 3, 4, 5, 6}, {2, 3}), cache).sum().template item<float>();
  std::vector<Tensor> before;
  {
    kiln::EagerGuard eager;
    for (const Tensor& t : cache.k) before.push_back(t.clone());
  }
  // Lazily, values the step cannot read yet (reading the ids would compute the position too).
  const Tensor at = pending ? pos + 0 : pos,
               ids = pending ? i64({7, 8}, {2, 1}) + 0 : i64({7, 8}, {2, 1});
  EXPECT_EQ(at.is_pending(), pending);
  EXPECT_KILN_ERROR((void)m.decode_step(ids, at, cache).sum().template item<float>(), message);
  if (!intact) return;
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TENSOR_CLOSE(cache.k[i], before[i]);
}

// A decode position past the cache's end (or below 0) is an error naming it.
// Positions on the host are checked before anything is recorded (Note [Token
// ids and positions checked on the host]), so the cache stays as it was in
// every mode. Positions the steps cannot read (here: pending, lazily; on a
// device) reach the cache write, whose bounds check names the slot dim and
// the cache length (Note [Per-row cache writes]); per row, the write used to
// land in the next head's or row's first slot, with no error.
TEST(GenerateErrors, DecodePositionsOutsideTheCache) {
  kiln::nn::GPT2Config g;
  g.n_layer = 2, g.d_model = 32, g.n_head = 4, g.vocab = 50, g.n_positions = 16;
  const auto gpt2 = kiln::nn::GPT2::random(g, kiln::kFloat32, kiln::Device::cpu(), 1);
  const auto llama = tiny();
  for (bool lazy : {false, true}) {
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    for (const Tensor& pos : {i64({8, 3}, {2}), i64({3, 9}, {2}), i64({8}, {1}), i64({-1}, {})}) {
      const int64_t bad = pos.numel() == 2 && pos[1].item<int64_t>() == 9 ? 1 : 0;
      const std::string message = "decode_step] expected pos (a cache slot) in [0, 8), got " +
                                  std::to_string(pos.reshape({-1})[bad].item<int64_t>()) +
                                  " at element " + std::to_string(bad);
      decode_past_the_cache(gpt2, pos, "[GPT2::" + message, /*intact=*/true);
      decode_past_the_cache(llama, pos, "[Llama::" + message, /*intact=*/true);
    }
    if (lazy) {
      // Pending positions reach the write (the cache then carries its error),
      // whose check names write_kv (Note [Composite ops name themselves]).
      decode_past_the_cache(llama, i64({8, 3}, {2}),
                            "[write_kv] index 8 is out of bounds for dimension 2 with size 8",
                            /*intact=*/false, /*pending=*/true);
      decode_past_the_cache(llama, i64({8}, {1}),
                            "[write_kv] index 8 is out of bounds for dimension 2 with size 8",
                            /*intact=*/false, /*pending=*/true);
    }
    // write_kv itself, below 0 and past the end: positions on the host are
    // checked first, naming it (Note [Composite ops name themselves]), and
    // the cache is left as it was.
    Tensor cache = kiln::zeros({2, 2, 4, 8});
    const Tensor kv = kiln::ones({2, 2, 1, 8});
    EXPECT_KILN_ERROR(kiln::nn::write_kv(cache, i64({-1, 2}, {2}), kv),
                      "[write_kv] expected pos (a cache slot) in [0, 4), got -1 at element 0");
    EXPECT_KILN_ERROR(kiln::nn::write_kv(cache, i64({1, 4}, {2}), kv),
                      "[write_kv] expected pos (a cache slot) in [0, 4), got 4 at element 1");
    EXPECT_KILN_ERROR(kiln::nn::write_kv(cache, i64({4}, {1}), kv),
                      "[write_kv] expected pos (a cache slot) in [0, 4), got 4 at element 0");
    EXPECT_EQ(cache.sum().item<float>(), 0.f);
    if (lazy) {
      // Pending positions reach the write, whose check names write_kv.
      EXPECT_KILN_ERROR(kiln::nn::write_kv(cache, i64({1, 4}, {2}) + 0, kv);
                        (void)cache.sum().item<float>(), "[write_kv] index 4 is out of bounds");
    }
    cache = kiln::zeros({2, 2, 4, 8});
    kiln::nn::write_kv(cache, i64({3, 0}, {2}), kv);
    EXPECT_EQ(cache.sum().item<float>(), 32.f);
    EXPECT_EQ(cache.narrow(2, 3, 1).narrow(0, 0, 1).sum().item<float>(), 16.f);
    EXPECT_EQ(cache.narrow(2, 0, 1).narrow(0, 1, 1).sum().item<float>(), 16.f);
  }
}

// Note [Token ids and positions checked on the host]: a refused step, lazily
// or through compile_steps, leaves the cache usable. One bad id in one row
// made every later step over the cache fail with the embedding's error, for
// every row, until each cache tensor was overwritten whole.
TEST(GenerateErrors, ARefusedStepDoesNotPoisonTheCache) {
  const auto llama = tiny();
  const Tensor ids = i64({1, 2, 3, 4, 5, 6}, {2, 3}), last = i64({2, 2}, {2});
  const Tensor step = i64({7, 9}, {2, 1}), pos = i64({3, 3}, {2});
  Tensor want;
  {
    kiln::EagerGuard eager;
    auto cache = llama.make_cache(2, 8);
    (void)llama.prefill(ids, cache, last);
    want = llama.decode_step(step, pos, cache);
  }
  for (bool compiled : {false, true}) {
    auto cache = llama.make_cache(2, 8);
    kiln::nn::DecodeSteps steps = kiln::nn::decode_steps(llama, cache);
    if (compiled) steps = kiln::nn::compile_steps(steps, "refused");
    const std::string op = compiled ? "[compile_steps] " : "[Llama::decode_step] ";
    (void)steps.prefill(ids, last).sum().item<float>();
    (void)steps.decode(step, pos).sum().item<float>();  // compiles the decode step
    EXPECT_KILN_ERROR(steps.prefill(i64({1, 2, 3, 4, 256, 6}, {2, 3}), last),
                      "expected token ids in [0, 256), got 256 at element 4");
    EXPECT_KILN_ERROR(steps.prefill(ids, i64({2, 3}, {2})),
                      "expected last (a prompt position) in [0, 3), got 3 at element 1");
    EXPECT_KILN_ERROR(steps.decode(i64({7, 999}, {2, 1}), pos),
                      op + "expected token ids in [0, 256), got 999 at element 1");
    EXPECT_KILN_ERROR(steps.decode(i64({7, -1}, {2, 1}), pos),
                      "expected token ids in [0, 256), got -1 at element 1");
    EXPECT_KILN_ERROR(steps.decode(step, i64({3, 8}, {2})),
                      "expected pos (a cache slot) in [0, 8), got 8 at element 1");
    // The same prompt and step again give eager's logits.
    (void)steps.prefill(ids, last).sum().item<float>();
    EXPECT_TENSOR_CLOSE(steps.decode(step, pos), want);
  }
}

// Note [Caches of other models]: a cache made for another model, config,
// dtype or length is refused by the step that is given it, naming the
// tensor, what the model needs and what came; so is a write of keys or
// values that would broadcast or convert into a cache.
TEST(GenerateErrors, CachesOfOtherModels) {
  const auto llama = tiny();  // 2 layers, 2 key/value heads of 16, 256 positions
  const auto options = kiln::TensorOptions(kiln::kFloat32);
  const Tensor ids = i64({1, 2, 3, 4}, {2, 2});
  const Tensor step = i64({1, 2}, {2, 1}), pos = i64({2}, {1});
  auto both = [&](kiln::nn::KVCache cache, const std::string& message) {
    EXPECT_KILN_ERROR(llama.prefill(ids, cache), "[Llama::prefill] expected");
    EXPECT_KILN_ERROR(llama.prefill(ids, cache), message);
    EXPECT_KILN_ERROR(llama.decode_step(step, pos, cache), "[Llama::decode_step] expected");
    EXPECT_KILN_ERROR(llama.decode_step(step, pos, cache), message);
  };
  const std::string want = "expected cache.k[0] float32 [2, 2, 8, 16] on cpu ";
  both(kiln::nn::KVCache::make(2, 2, 4, 8, 16, options), want + "(the model's key/value heads");
  both(kiln::nn::KVCache::make(2, 2, 1, 8, 16, options), "got float32 [2, 1, 8, 16] on cpu");
  both(kiln::nn::KVCache::make(2, 2, 2, 8, 1, options), "got float32 [2, 2, 8, 1] on cpu");
  both(kiln::nn::KVCache::make(2, 2, 2, 8, 16, kiln::kBFloat16),
       "got bfloat16 [2, 2, 8, 16] on cpu");
  both(kiln::nn::KVCache::make(3, 2, 2, 8, 16, options),
       "expected a cache of 2 layers and batch 2, got 3 and 2");
  both(kiln::nn::KVCache::make(2, 2, 2, 257, 16, options),
       "expected a cache of at most 256 slots (the model's positions), got 257");
  auto cache = llama.make_cache(2, 8);
  cache.v[1] = kiln::zeros({2, 2, 7, 16});  // one layer of another length
  both(cache, "expected cache.v[1] float32 [2, 2, 8, 16] on cpu");
  cache.v[1] = Tensor();
  both(cache, "got an undefined tensor");
  cache.v.pop_back();
  both(cache, "expected a cache of 2 layers and batch 2, got 2 (and 1 value tensors)");

  kiln::nn::GPT2Config g;
  g.n_layer = 1, g.d_model = 32, g.n_head = 4, g.vocab = 50, g.n_positions = 16;
  const auto gpt2 = kiln::nn::GPT2::random(g, kiln::kFloat32, kiln::Device::cpu());
  auto other = llama.make_cache(2, 8);
  EXPECT_KILN_ERROR(gpt2.prefill(ids, other),
                    "[GPT2::prefill] expected a cache of 1 blocks and batch 2, got 2 and 2");
  auto wide = kiln::nn::KVCache::make(1, 2, 4, 8, 16, options);
  EXPECT_KILN_ERROR(gpt2.decode_step(step, pos, wide),
                    "[GPT2::decode_step] expected cache.k[0] float32 [2, 4, 8, 8] on cpu");
  EXPECT_KILN_ERROR(gpt2.decode_step(Tensor(), pos, wide),
                    "[GPT2::decode_step] expected ids [batch, 1], got an undefined tensor");
  EXPECT_KILN_ERROR(gpt2.decode_step(step, Tensor(), wide),
                    "expected pos as one int64 element or int64 [2], got an undefined tensor");

  // The writes themselves: one head broadcast into four, a float32 key into bfloat16.
  Tensor slots = kiln::zeros({2, 4, 8, 16});
  EXPECT_KILN_ERROR(kiln::nn::write_kv_prefix(slots, kiln::ones({2, 1, 3, 16})),
                    "[write_kv_prefix] expected keys or values [2, 4, T <= 8, 16] (the cache's "
                    "batch, heads, length and head dim), got [2, 1, 3, 16]");
  Tensor half = kiln::zeros({2, 4, 8, 16}, kiln::kBFloat16);
  EXPECT_KILN_ERROR(kiln::nn::write_kv_prefix(half, kiln::ones({2, 4, 3, 16})),
                    "[write_kv_prefix] expected keys or values of the cache's dtype bfloat16 on "
                    "cpu, got float32 on cpu");
  EXPECT_KILN_ERROR(kiln::nn::write_kv(half, pos, kiln::ones({2, 4, 1, 16})),
                    "[write_kv] expected keys or values of the cache's dtype bfloat16");
}

}  // namespace
