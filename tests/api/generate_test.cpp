// generate(): greedy against transformers' greedy sequence, batches of
// prompts of different lengths against each prompt alone, the stop token,
// and sampling against the distributions it should draw from.

#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "jit/codegen_cpu/launch_cpu.h"
#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

std::string fixture_dir(const std::string& name) {
  return std::string(KILN_TEST_SOURCE_DIR) + "/fixtures/" + name;
}

std::vector<int64_t> to_vector(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

struct Greedy {
  std::vector<int64_t> prompt, tokens;  // transformers' 9 greedy tokens after the prompt
};

Greedy expected_greedy(const std::string& name) {
  auto t = kiln::nn::load_safetensors(fixture_dir(name) + "/expected.safetensors");
  Greedy g{to_vector(t.at("ids")), to_vector(t.at("decode_ids"))};
  g.tokens.push_back(kiln::argmax(t.at("decode_logits")[7]).item<int64_t>());
  return g;
}

template <class Model>
void check_greedy(const Model& model, const Greedy& g) {
  kiln::nn::GenerateOptions o;
  o.max_new_tokens = 9;
  EXPECT_EQ(kiln::nn::generate(model, g.prompt, o), g.tokens);
  // The stop token ends the row, and is returned.
  o.stop_token = g.tokens[2];
  std::vector<int64_t> until(g.tokens.begin(), g.tokens.begin() + 3);
  for (size_t i = 0; i < 2; ++i) {
    if (g.tokens[i] == g.tokens[2]) until.resize(i + 1);
  }
  EXPECT_EQ(kiln::nn::generate(model, g.prompt, o), until);
  o.stop_token.reset();
  o.max_new_tokens = 0;
  EXPECT_TRUE(kiln::nn::generate(model, g.prompt, o).empty());
}

TEST(Generate, GreedyFollowsTransformers) {
  for (bool lazy : {false, true}) {
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    check_greedy(kiln::nn::GPT2::from_pretrained(fixture_dir("gpt2"), kiln::Device::cpu()),
                 expected_greedy("gpt2"));
    check_greedy(kiln::nn::Llama::from_pretrained(fixture_dir("llama_gqa"), kiln::Device::cpu()),
                 expected_greedy("llama_gqa"));
    check_greedy(kiln::nn::Llama::from_pretrained(fixture_dir("llama_tied_bf16"),
                                                  kiln::Device::cpu(), kiln::kFloat32),
                 expected_greedy("llama_tied_bf16"));
  }
}

// A batch of prompts of different lengths gives each prompt's own tokens.
template <class Model>
void check_batch(const Model& model, const std::vector<std::vector<int64_t>>& prompts,
                 kiln::nn::GenerateOptions o) {
  std::vector<std::vector<int64_t>> alone;
  for (const auto& p : prompts) alone.push_back(kiln::nn::generate(model, p, o));
  EXPECT_EQ(kiln::nn::generate(model, prompts, o), alone);
  // In a cache with more rows than prompts, too.
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  auto cache = model.make_cache(static_cast<int64_t>(prompts.size()) + 2,
                                static_cast<int64_t>(longest) + o.max_new_tokens);
  EXPECT_EQ(kiln::nn::generate(kiln::nn::decode_steps(model, cache), prompts, o), alone);
  // Through jit::compile, twice: the second run replays the cached plans.
  kiln::nn::DecodeSteps compiled =
      kiln::nn::compile_steps(kiln::nn::decode_steps(model, cache), "generate_test");
  EXPECT_EQ(kiln::nn::generate(compiled, prompts, o), alone);
  EXPECT_EQ(kiln::nn::generate(compiled, prompts, o), alone);
}

TEST(Generate, BatchesOfDifferentLengths) {
  const Greedy g = expected_greedy("llama_gqa");
  std::vector<int64_t> longer = g.prompt;
  longer.insert(longer.end(), g.tokens.begin(), g.tokens.begin() + 3);
  const std::vector<std::vector<int64_t>> prompts = {
      g.prompt, {g.prompt[0]}, longer, {g.prompt.begin(), g.prompt.begin() + 3}};
  kiln::nn::GenerateOptions o;
  o.max_new_tokens = 6;
  auto llama = kiln::nn::Llama::from_pretrained(fixture_dir("llama_gqa"), kiln::Device::cpu());
  check_batch(llama, prompts, o);
  auto gpt2 = kiln::nn::GPT2::from_pretrained(fixture_dir("gpt2"), kiln::Device::cpu());
  check_batch(gpt2, prompts, o);
  // Rows that stop early while others go on.
  o.stop_token = expected_greedy("gpt2").tokens[1];
  check_batch(gpt2, prompts, o);
  // Sampled rows draw from their own stream positions whatever the batch.
  // Streamed tokens arrive in each row's order, all of them.
  std::vector<std::vector<int64_t>> streamed(prompts.size());
  o.on_token = [&](int64_t row, int64_t token) { streamed[row].push_back(token); };
  EXPECT_EQ(kiln::nn::generate(gpt2, prompts, o), streamed);
  o.on_token = nullptr;
  o.stop_token.reset();
  o.temperature = 0.8;
  o.seed = 11;
  const auto batch = kiln::nn::generate(llama, prompts, o);
  EXPECT_EQ(kiln::nn::generate(llama, prompts, o), batch);  // seeded: the same again
  for (const auto& row : batch) EXPECT_EQ(row.size(), 6u);
}

// Frequencies of sample_tokens over many uniforms against the distribution.
std::vector<double> frequencies(const Tensor& logits, const kiln::nn::GenerateOptions& o, int n) {
  std::vector<float> u(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) u[i] = kiln::nn::philox_uniform(o.seed, 0, static_cast<uint64_t>(i));
  Tensor rows = logits.expand({n, logits.size(1)}).contiguous();
  std::vector<int64_t> picks = to_vector(kiln::nn::sample_tokens(rows, o, kiln::tensor(u, {n})));
  std::vector<double> f(static_cast<size_t>(logits.size(1)), 0.0);
  for (int64_t p : picks) f[static_cast<size_t>(p)] += 1.0 / n;
  return f;
}

TEST(Generate, SamplingDrawsFromTheCutDistribution) {
  for (bool lazy : {false, true}) {
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    // Probabilities 0.05, 0.5, 0.15, 0.3 at temperature 1 (vocabulary order != rank order).
    const std::vector<double> p = {0.05, 0.5, 0.15, 0.3};
    std::vector<float> lg;
    for (double x : p) lg.push_back(static_cast<float>(std::log(x)));
    Tensor logits = kiln::tensor(lg, {1, 4});
    kiln::nn::GenerateOptions o;
    o.temperature = 1.0;
    const int n = 20000;
    std::vector<double> f = frequencies(logits, o, n);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], p[i], 0.015) << "token " << i;
    // Top-k 2: tokens 1 and 3, renormalized.
    o.top_k = 2;
    f = frequencies(logits, o, n);
    EXPECT_EQ(f[0] + f[2], 0.0);
    EXPECT_NEAR(f[1], 0.5 / 0.8, 0.015);
    // Top-p 0.7: 1 (mass before 0) and 3 (mass before 0.5) stay; 2 (before 0.8) goes.
    o.top_k = 0;
    o.top_p = 0.7;
    f = frequencies(logits, o, n);
    EXPECT_EQ(f[0] + f[2], 0.0);
    EXPECT_NEAR(f[3], 0.3 / 0.8, 0.015);
    // Temperature 0.5 squares the probabilities before normalizing.
    o.top_p = 1.0;
    o.temperature = 0.5;
    f = frequencies(logits, o, n);
    double z = 0;
    for (double x : p) z += x * x;
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], p[i] * p[i] / z, 0.015) << "token " << i;
    // Greedy and top-k 1 pick the argmax whatever the uniform.
    o.top_k = 1;
    f = frequencies(logits, o, 100);
    EXPECT_NEAR(f[1], 1.0, 1e-9);
    o.temperature = 0;
    o.top_k = 0;
    f = frequencies(logits, o, 100);
    EXPECT_NEAR(f[1], 1.0, 1e-9);
  }
}

// A tiny temperature is nearly greedy: logits / temperature overflowed to
// infinities, softmax gave NaN and every row took token 0.
TEST(Generate, TinyTemperaturesPickTheArgmax) {
  for (bool lazy : {false, true}) {
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    Tensor logits = kiln::tensor(std::vector<float>{0.f, 5.f, 1.f, 4.f, -2.f, 3.f}, {2, 3});
    Tensor u = kiln::tensor(std::vector<float>{0.5f, 0.999f}, {2});
    for (double t : {1e-20, 1e-39, 1e-45, 1e-300, 4.9e-324}) {
      for (int64_t k : {0, 2}) {
        for (double p : {1.0, 0.5}) {
          kiln::nn::GenerateOptions o;
          o.temperature = t, o.top_k = k, o.top_p = p;
          EXPECT_EQ(to_vector(kiln::nn::sample_tokens(logits, o, u)), (std::vector<int64_t>{1, 0}))
              << "temperature " << t << ", top_k " << k << ", top_p " << p;
        }
      }
    }
    // A row of ties shares the mass among them; an infinite logit takes all of it.
    kiln::nn::GenerateOptions o;
    o.temperature = 1e-300;
    Tensor ties = kiln::tensor(std::vector<float>{2.f, 2.f, -1.f}, {1, 3});
    EXPECT_EQ(
        to_vector(kiln::nn::sample_tokens(ties, o, kiln::tensor(std::vector<float>{0.75f}, {1}))),
        (std::vector<int64_t>{1}));
    Tensor inf = kiln::tensor(std::vector<float>{2.f, INFINITY, 7.f}, {1, 3});
    o.temperature = 0.7;
    EXPECT_EQ(
        to_vector(kiln::nn::sample_tokens(inf, o, kiln::tensor(std::vector<float>{0.1f}, {1}))),
        (std::vector<int64_t>{1}));
    // Note [Rows of NaN logits]: a row holding a NaN takes greedy's token (the
    // NaN's, as argmax) at any temperature and cut; it took token 0 (or the
    // top-k's first) whatever its logits. Other rows sample as before.
    Tensor nan = kiln::tensor(std::vector<float>{0.f, NAN, 1.f, 2.f, 0.f, 0.f, 9.f, 0.f}, {2, 4});
    const Tensor half = kiln::tensor(std::vector<float>{0.5f, 0.5f}, {2});
    for (int64_t k : {0, 2, 9}) {
      for (double p : {1.0, 0.5}) {
        o.temperature = 0.8, o.top_k = k, o.top_p = p;
        EXPECT_EQ(to_vector(kiln::nn::sample_tokens(nan, o, half)), (std::vector<int64_t>{1, 2}))
            << "top_k " << k << ", top_p " << p;
      }
    }
    EXPECT_EQ(to_vector(kiln::nn::sample_tokens(nan, {}, Tensor())), (std::vector<int64_t>{1, 2}));
  }
  // generate() with such a temperature follows the greedy sequence.
  auto m = kiln::nn::Llama::random(kiln::nn::LlamaConfig::named("tiny"), kiln::kFloat32,
                                   kiln::Device::cpu(), 1);
  kiln::nn::GenerateOptions greedy;
  greedy.max_new_tokens = 4;
  kiln::nn::GenerateOptions cold = greedy;
  cold.temperature = 1e-300;
  EXPECT_EQ(kiln::nn::generate(m, std::vector<int64_t>{1, 2, 3}, cold),
            kiln::nn::generate(m, std::vector<int64_t>{1, 2, 3}, greedy));
}

// A server samples each request with its own temperature and top_p: those
// values reach the kernels as tensors, so a new value compiles nothing (a
// number was compiled into the fused kernels that read it, and each kernel
// kept for the process: about 1 KB per request, lazily).
TEST(Generate, ATemperaturePerRequestCompilesNoKernel) {
  Tensor logits = kiln::tensor(std::vector<float>{0.f, 5.f, 1.f, 4.f, -2.f, 3.f}, {1, 6});
  Tensor u = kiln::tensor(std::vector<float>{0.5f}, {1});
  auto sample = [&](double t, double p) {
    kiln::nn::GenerateOptions o;
    o.temperature = t, o.top_p = p;
    return to_vector(kiln::nn::sample_tokens(logits, o, u));
  };
  (void)sample(0.5, 0.9);
  (void)sample(0.5, 1.0);
  const int64_t before = kiln::jit::cpu::cpu_kernels_compiled();
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(sample(0.3 + 0.01 * i, 0.9 - 0.01 * i).size(), 1u);
    EXPECT_EQ(sample(0.3 + 0.01 * i, 1.0).size(), 1u);
  }
  EXPECT_EQ(kiln::jit::cpu::cpu_kernels_compiled(), before);
}

TEST(Generate, PhiloxStreamIsSeeded) {
  EXPECT_EQ(kiln::nn::philox_uniform(1, 2, 3), kiln::nn::philox_uniform(1, 2, 3));
  EXPECT_NE(kiln::nn::philox_uniform(1, 2, 3), kiln::nn::philox_uniform(2, 2, 3));
  EXPECT_NE(kiln::nn::philox_uniform(1, 2, 3), kiln::nn::philox_uniform(1, 3, 3));
  double sum = 0;
  for (uint64_t i = 0; i < 4096; ++i) {
    const float u = kiln::nn::philox_uniform(9, i, 0);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / 4096, 0.5, 0.02);
}

}  // namespace

namespace {

// The same greedy sequences and batches on a GPU, and sampling there against
// the CPU's picks for the same uniforms.
TEST(GenerateCuda, MatchesTheCpu) {
  if (!kiln::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const kiln::Device cuda = kiln::Device::cuda();
  check_greedy(kiln::nn::GPT2::from_pretrained(fixture_dir("gpt2"), cuda), expected_greedy("gpt2"));
  auto llama = kiln::nn::Llama::from_pretrained(fixture_dir("llama_gqa"), cuda);
  check_greedy(llama, expected_greedy("llama_gqa"));
  const Greedy g = expected_greedy("llama_gqa");
  kiln::nn::GenerateOptions o;
  o.max_new_tokens = 6;
  check_batch(llama, {g.prompt, {g.prompt[0]}, {g.prompt.begin(), g.prompt.begin() + 3}}, o);
  Tensor logits = kiln::testing::random_tensor({8, 96}, kiln::kFloat32, "contiguous", 5, -3, 3);
  std::vector<float> u(8);
  for (int i = 0; i < 8; ++i) u[i] = kiln::nn::philox_uniform(3, 0, static_cast<uint64_t>(i));
  for (int64_t k : {0, 5}) {
    for (double p : {1.0, 0.8}) {
      o.temperature = 0.9, o.top_k = k, o.top_p = p;
      Tensor cpu = kiln::nn::sample_tokens(logits, o, kiln::tensor(u, {8}));
      Tensor gpu = kiln::nn::sample_tokens(logits.to(cuda), o, kiln::tensor(u, {8}).to(cuda));
      EXPECT_EQ(to_vector(gpu.cpu()), to_vector(cpu)) << "top_k " << k << ", top_p " << p;
    }
  }
}

}  // namespace
