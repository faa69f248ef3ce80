#pragma once

// Text generation over token ids: greedy, or temperature / top-k / top-p
// sampling from a seeded Philox stream, with a stop token and a limit of new
// tokens, for one prompt or a batch of prompts of different lengths.
// Tokenization stays with the caller: token ids in, token ids out.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/api.h"
#include "kiln/tensor.h"

namespace kiln::nn {

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  std::optional<int64_t> stop_token;  // a row ends after emitting it (it is returned)
  double temperature = 0.0;           // 0: greedy (argmax); else logits / temperature
  int64_t top_k = 0;                  // sample among the k likeliest; 0: all
  double top_p = 1.0;                 // ... and within those, the smallest set of mass >= top_p
  uint64_t seed = 0;                  // key of the Philox stream (philox_uniform)
  int64_t pad_token = 0;              // fed as padding and to rows that have ended
  // (optional) Called with (prompt index, token) as soon as each new token is
  // known, before the next step runs: for streaming and latency measurements.
  std::function<void(int64_t row, int64_t token)> on_token;
};

// A model's two steps over a static KV cache it has captured, each one
// function object so that jit::compile can wrap it (Note [Batched generation],
// api/src/nn/generate.cpp). Rows are right-padded prompts.
struct KILN_API DecodeSteps {
  // ids [B, T], last int64 [B] (row b's last prompt position) -> logits
  // [B, vocab] at those positions; writes cache slots [0, T).
  std::function<Tensor(const Tensor& ids, const Tensor& last)> prefill;
  // ids [B, 1], pos int64 [B] -> logits [B, 1, vocab]; writes slot pos[b] of row b.
  std::function<Tensor(const Tensor& ids, const Tensor& pos)> decode;
  int64_t batch = 0;   // the cache's rows
  int64_t length = 0;  // the cache's slots
  int64_t vocab = 0;
  Device device;
};

// The steps of a model (GPT2, Llama, or any type with the same prefill,
// decode_step, vocab_size and device) over `cache`; both must outlive them.
template <class Model>
DecodeSteps decode_steps(const Model& model, typename Model::Cache& cache) {
  DecodeSteps s;
  s.prefill = [&model, &cache](const Tensor& ids, const Tensor& last) {
    return model.prefill(ids, cache, last);
  };
  s.decode = [&model, &cache](const Tensor& ids, const Tensor& pos) {
    return model.decode_step(ids, pos, cache);
  };
  s.batch = cache.batch();
  s.length = cache.length();
  s.vocab = model.vocab_size();
  s.device = model.device();
  return s;
}

// `steps` with the prefill and the decode step each wrapped in jit::compile
// (named "<name>.prefill" and "<name>.decode" in the logs; the prompt length is
// a dynamic dim of the prefill): later calls replay a cached plan, on CUDA a
// decode step is one graph replay. Compile once per cache: the compiled
// functions capture it as the steps do.
KILN_API DecodeSteps compile_steps(DecodeSteps steps, const std::string& name = "generate");

// The new tokens of each prompt (prompt not included), at most max_new_tokens
// each, ending early at the stop token. At most steps.batch prompts, each of
// at least one token, and longest prompt + max_new_tokens - 1 <= steps.length.
KILN_API std::vector<std::vector<int64_t>> generate(
    const DecodeSteps& steps, const std::vector<std::vector<int64_t>>& prompts,
    const GenerateOptions& options = {});

template <class Model>
std::vector<std::vector<int64_t>> generate(const Model& model,
                                           const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerateOptions& options = {}) {
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  // The cache the longest prompt and max_new_tokens need; a sum past int64
  // is refused (a cache that large could not be made anyway).
  int64_t length = 0;
  KILN_CHECK(!__builtin_add_overflow(static_cast<int64_t>(longest),
                                     std::max<int64_t>(options.max_new_tokens, 1) - 1, &length),
             "[generate] expected the longest prompt (", longest, ") plus max_new_tokens (",
             options.max_new_tokens, ") to fit in int64");
  length = std::max<int64_t>(1, length);
  typename Model::Cache cache =
      model.make_cache(std::max<int64_t>(1, static_cast<int64_t>(prompts.size())), length);
  return generate(decode_steps(model, cache), prompts, options);
}

template <class Model>
std::vector<int64_t> generate(const Model& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options = {}) {
  return generate(model, std::vector<std::vector<int64_t>>{prompt}, options)[0];
}

// The sampling rule alone: logits [B, vocab] -> token ids int64 [B], on the
// logits' device. `uniform` (float32 [B], in [0, 1)) picks each row's token by
// inverse CDF; it is not read when greedy.
KILN_API Tensor sample_tokens(const Tensor& logits, const GenerateOptions& options,
                              const Tensor& uniform);
// The uniform of `row` at `step` in the stream keyed by `seed`: Philox4x32-10
// block `step`, counter offset `row`, its first word's top 24 bits / 2^24.
KILN_API float philox_uniform(uint64_t seed, uint64_t step, uint64_t row);

}  // namespace kiln::nn
