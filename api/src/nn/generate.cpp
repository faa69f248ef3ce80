#include "kiln/nn/generate.h"

#include <cmath>

#include "api/src/nn/cache_steps.h"
#include "api/src/nn/sampling.h"
#include "kiln/jit.h"
#include "kiln/ops.h"

namespace kiln::nn {

// Note [Batched generation]
// Prompts of different lengths share one batch, right-padded to the longest
// (T) with pad_token: the prefill is the ordinary causal forward (a real token
// never attends to the padding after it), and row b's first new token comes
// from its logits at position len_b - 1 (`last`). Decode step k feeds row b
// at its own position len_b + k: the cache write and the attention mask are
// per row (Note [Attention seam]), so the padding slots a row's prefill wrote
// past len_b are overwritten before they are ever attended to. A row that has
// emitted its stop token is fed pad_token until the batch ends, its outputs
// dropped. Each step is one call of a function object over fixed shapes
// ([B, 1] ids, [B] positions; the cache captured by reference): what
// compile_steps wraps in jit::compile, so on CUDA a decode step becomes one
// graph replay. The
// sampled token of every row is read back each step to check the stop token.

namespace {

void check_options(const GenerateOptions& o) {
  KILN_CHECK(o.max_new_tokens >= 0, "[generate] expected max_new_tokens >= 0, got ",
             o.max_new_tokens);
  check_sampling_options(o, "generate");
}

std::vector<int64_t> to_host(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

}  // namespace

DecodeSteps compile_steps(DecodeSteps s, const std::string& name) {
  KILN_CHECK(s.prefill && s.decode, "[compile_steps] expected prefill and decode steps, got none");
  jit::Options prefill_options;
  prefill_options.name = name + ".prefill";
  prefill_options.input_names = {"ids", "last"};
  prefill_options.dynamic = {{0, 1}};  // prompts of any length share one entry
  jit::Options decode_options;
  decode_options.name = name + ".decode";
  decode_options.input_names = {"ids", "pos"};
  auto prefill = jit::compile(std::move(s.prefill), prefill_options);
  auto decode = jit::compile(std::move(s.decode), decode_options);
  // A replay does not call the steps, so their host checks run here (Note
  // [Token ids and positions checked on the host]).
  const int64_t vocab = s.vocab, length = s.length;
  s.prefill = [prefill, vocab](const Tensor& ids, const Tensor& last) mutable {
    if (vocab > 0) check_host_values("compile_steps", "token ids", ids, 0, vocab);
    if (ids.defined() && ids.dim() == 2) {
      check_host_values("compile_steps", "last (a prompt position)", last, 0, ids.size(1));
    }
    return prefill(ids, last);
  };
  s.decode = [decode, vocab, length](const Tensor& ids, const Tensor& pos) mutable {
    if (vocab > 0) check_host_values("compile_steps", "token ids", ids, 0, vocab);
    if (length > 0) check_host_values("compile_steps", "pos (a cache slot)", pos, 0, length);
    return decode(ids, pos);
  };
  return s;
}

std::vector<std::vector<int64_t>> generate(const DecodeSteps& s,
                                           const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerateOptions& o) {
  check_options(o);
  KILN_CHECK(s.prefill && s.decode, "[generate] expected prefill and decode steps, got none");
  const int64_t n = static_cast<int64_t>(prompts.size());
  KILN_CHECK(n >= 1 && n <= s.batch, "[generate] expected 1 to ", s.batch,
             " prompts (the cache's batch), got ", n);
  KILN_CHECK(o.pad_token >= 0 && o.pad_token < s.vocab, "[generate] expected pad_token in [0, ",
             s.vocab, "), got ", o.pad_token);
  int64_t longest = 1;
  for (int64_t b = 0; b < n; ++b) {
    const auto& p = prompts[b];
    KILN_CHECK(!p.empty(),
               "[generate] expected prompts of at least one token, got an empty prompt ", b);
    for (int64_t id : p) {
      KILN_CHECK(id >= 0 && id < s.vocab, "[generate] expected token ids in [0, ", s.vocab,
                 "), got ", id, " in prompt ", b);
    }
    longest = std::max(longest, static_cast<int64_t>(p.size()));
  }
  // As max_new_tokens <= length - longest + 1: the sum overflowed for a
  // huge max_new_tokens (INT64_MAX passed, and decoding never stopped).
  KILN_CHECK(
      longest <= s.length && std::max<int64_t>(o.max_new_tokens, 1) - 1 <= s.length - longest,
      "[generate] expected the longest prompt (", longest, ") plus max_new_tokens (",
      o.max_new_tokens, ") - 1 to fit the cache's ", s.length, " slots");
  std::vector<std::vector<int64_t>> out(n);
  if (o.max_new_tokens == 0) return out;

  // Rows past the prompts (a cache bigger than the batch) decode padding.
  const int64_t rows = s.batch;
  std::vector<int64_t> ids(rows * longest, o.pad_token), last(rows, 0), length(rows, 1);
  for (int64_t b = 0; b < n; ++b) {
    std::copy(prompts[b].begin(), prompts[b].end(), ids.begin() + b * longest);
    length[b] = static_cast<int64_t>(prompts[b].size());
    last[b] = length[b] - 1;
  }
  const TensorOptions i64 = TensorOptions(kInt64).device(s.device);
  Tensor logits = s.prefill(tensor(ids, {rows, longest}, i64), tensor(last, {rows}, i64));

  std::vector<bool> done(rows, false);
  for (int64_t b = n; b < rows; ++b) done[b] = true;
  std::vector<float> uniform(rows, 0.0f);
  for (int64_t step = 0;; ++step) {
    Tensor u;
    if (o.temperature > 0) {
      for (int64_t b = 0; b < rows; ++b) {
        uniform[b] = philox_uniform(o.seed, static_cast<uint64_t>(step), static_cast<uint64_t>(b));
      }
      u = tensor(uniform, {rows});
    }
    const std::vector<int64_t> next = to_host(sample_tokens(logits.reshape({rows, -1}), o, u));
    bool all_done = true;
    for (int64_t b = 0; b < n; ++b) {
      if (done[b]) continue;
      out[b].push_back(next[b]);
      if (o.on_token) o.on_token(b, next[b]);
      done[b] = (o.stop_token && next[b] == *o.stop_token) ||
                static_cast<int64_t>(out[b].size()) == o.max_new_tokens;
      all_done = all_done && done[b];
    }
    if (all_done) break;
    std::vector<int64_t> feed(rows), pos(rows);
    for (int64_t b = 0; b < rows; ++b) {
      feed[b] = done[b] ? o.pad_token : next[b];
      pos[b] = std::min(length[b] + step, s.length - 1);
    }
    logits = s.decode(tensor(feed, {rows, 1}, i64), tensor(pos, {rows}, i64));
  }
  return out;
}

}  // namespace kiln::nn
