#pragma once

// GPT-2 (the reference workload), with Hugging Face's parameter names.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/api.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/safetensors.h"

namespace kiln::nn {

struct KILN_API GPT2Config {
  int64_t n_layer = 12;
  int64_t d_model = 768;  // n_embd
  int64_t n_head = 12;
  int64_t vocab = 50257;  // vocab_size
  int64_t n_positions = 1024;
  double eps = 1e-5;    // layer_norm_epsilon
  int64_t n_inner = 0;  // the MLP's width; 0: 4 * d_model

  // A Hugging Face config.json's fields (n_layer, n_head, n_embd, vocab_size,
  // n_positions, layer_norm_epsilon, n_inner). Options kiln does not
  // implement (another activation, reordered or layer-scaled attention) are errors.
  static GPT2Config from_json_file(const std::string& path);
  static GPT2Config from_json(const std::string& text, const std::string& what = "a GPT-2 config");
  // The same fields from a safetensors file's metadata; nullopt when it has no n_head.
  static std::optional<GPT2Config> from_metadata(const std::map<std::string, std::string>& metadata,
                                                 const std::string& what);
  std::map<std::string, std::string> to_metadata() const;
  // "gpt2" (124M), "gpt2-medium", "gpt2-large", "gpt2-xl", "tiny" (2 layers, for tests).
  static GPT2Config named(const std::string& name);
  int64_t inner() const { return n_inner ? n_inner : 4 * d_model; }
  // Positive sizes, d_model divisible by n_head.
  void check() const;
};

struct KILN_API GPT2Block {
  LayerNorm ln_1, ln_2;
  Linear c_attn, attn_proj, c_fc, mlp_proj;
  // x: [B, T, d]. Full causal attention over x itself.
  Tensor forward(const Tensor& x, int64_t n_head) const;
  // As forward, also writing this call's keys and values into cache slots [0, T).
  Tensor forward_prefill(const Tensor& x, int64_t n_head, Tensor& k_cache, Tensor& v_cache) const;
  // One decode step with a static KV cache: x [B, 1, d]; k_cache/v_cache
  // [B, H, S, D] receive this step's key/value at `pos` (an int64 tensor of
  // one element, or [B] for a position per row, so the step's code does not
  // change with the position), and attention covers cache positions <= pos.
  Tensor forward_decode(const Tensor& x, int64_t n_head, Tensor& k_cache, Tensor& v_cache,
                        const Tensor& pos) const;
  // ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj. The Linear
  // weights are [out, in] (Hugging Face's Conv1D stores [in, out]).
  void visit(const TensorVisitor& f, const std::string& prefix);
};

class KILN_API GPT2 {
 public:
  // Seeded random weights (normal, std 0.02; LayerNorms at 1/0), in `dtype` on `device`.
  static GPT2 random(const GPT2Config& config, DType dtype, Device device, uint64_t seed = 0);
  // Weights from a Hugging Face GPT-2 safetensors file (transformer.* or bare
  // names) or shard index. The config comes from the file's metadata, else from
  // a config.json beside it; with neither, an error (kiln does not guess it).
  static GPT2 from_safetensors(const std::string& path, Device device,
                               std::optional<DType> dtype = std::nullopt);
  static GPT2 from_safetensors(const std::string& path, const GPT2Config& config, Device device,
                               std::optional<DType> dtype = std::nullopt);
  // A Hugging Face folder: config.json and model.safetensors (or its shard index).
  static GPT2 from_pretrained(const std::string& folder, Device device,
                              std::optional<DType> dtype = std::nullopt);

  const GPT2Config& config() const { return config_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t vocab_size() const { return config_.vocab; }
  // The blocks and the final LayerNorm over hidden states x [B, T, d].
  Tensor forward_hidden(const Tensor& x) const;
  // Token ids [B, T] -> final hidden states [B, T, d] (embeddings included).
  Tensor forward(const Tensor& ids) const;
  // Hidden states -> logits with the tied embedding matrix.
  Tensor lm_head(const Tensor& hidden) const;

  // A static KV cache for decode steps: per block [B, H, S, D] key and value.
  using Cache = KVCache;
  Cache make_cache(int64_t batch, int64_t length) const;
  // Prompt ids [B, T] -> logits [B, T, vocab], writing cache slots [0, T).
  // With `last` (int64 [B]), only row b's logits at position last[b]: [B, vocab].
  Tensor prefill(const Tensor& ids, Cache& cache,
                 const std::optional<Tensor>& last = std::nullopt) const;
  // One decode step: ids [B, 1], pos an int64 tensor of one element (every
  // row) or [B] (per row). Returns logits [B, 1, vocab].
  Tensor decode_step(const Tensor& ids, const Tensor& pos, Cache& cache) const;

  // Moves the weights (and converts floating ones when `dtype` is set).
  void to(Device device, std::optional<DType> dtype = std::nullopt);
  // wte, wpe, h.{i}.*, ln_f, as Hugging Face names them.
  void visit(const TensorVisitor& f, const std::string& prefix);

  Tensor wte, wpe;
  std::vector<GPT2Block> blocks;
  LayerNorm ln_f;

 private:
  static GPT2 skeleton(const GPT2Config& config, DType dtype);

  GPT2Config config_;
  DType dtype_ = kFloat32;
  Device device_;
};

}  // namespace kiln::nn
