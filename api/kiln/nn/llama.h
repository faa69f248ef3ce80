#pragma once

// Llama-family decoders (Llama 2/3, Mistral, Qwen 2, SmolLM) from Hugging Face
// checkpoints: RMSNorm, rotary embeddings (with Llama 3's rope_scaling),
// grouped-query attention, a SwiGLU MLP, optionally tied embeddings.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/api.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/mlp.h"
#include "kiln/nn/rotary.h"
#include "kiln/nn/safetensors.h"

namespace kiln::nn {

// A Hugging Face config.json's fields, named as there.
struct KILN_API LlamaConfig {
  std::string model_type = "llama";  // llama, mistral or qwen2
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;  // fewer than the query heads: grouped-query attention
  int64_t head_dim = 0;              // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v (and o) biases; qwen2 has q/k/v biases
  bool mlp_bias = false;
  // Sliding-window attention (Note [Sliding window]): 0, none. Mistral's
  // applies to every layer; Qwen 2's (use_sliding_window) to the layers from
  // max_window_layers on, as Hugging Face's layer_types has it.
  int64_t sliding_window = 0;
  int64_t max_window_layers = 0;
  int64_t window_of(int64_t layer) const { return layer >= max_window_layers ? sliding_window : 0; }

  // Unknown model types, activations other than silu, and rope_scaling types
  // other than default, linear and llama3 are errors, as are missing sizes.
  static LlamaConfig from_json_file(const std::string& path);
  static LlamaConfig from_json(const std::string& text, const std::string& what = "a Llama config");
  // Shapes for random models: "llama-3.2-1b", "llama-3.1-8b", "smollm2-135m",
  // "qwen2.5-0.5b", "tiny" (2 layers, GQA, for tests).
  static LlamaConfig named(const std::string& name);
  int64_t head_size() const { return head_dim ? head_dim : hidden_size / num_attention_heads; }
  void check() const;
};

struct KILN_API LlamaBlock {
  RMSNorm input_layernorm;
  Attention self_attn;
  RMSNorm post_attention_layernorm;
  GatedMLP mlp;

  // x [B, T, hidden] at positions 0..T-1; writes cache slots [0, T) when given.
  Tensor forward(const Tensor& x, const RotaryEmbedding& rope, Tensor* k_cache = nullptr,
                 Tensor* v_cache = nullptr) const;
  // x [B, 1, hidden] at pos (one int64 element, or [B]).
  Tensor forward_decode(const Tensor& x, const RotaryEmbedding& rope, Tensor& k_cache,
                        Tensor& v_cache, const Tensor& pos) const;
  void visit(const TensorVisitor& f, const std::string& prefix);
};

class KILN_API Llama {
 public:
  // Rotary tables cover min(max_position_embeddings, max_positions) positions,
  // the longest prompt plus generation the model then accepts.
  static constexpr int64_t kDefaultMaxPositions = 8192;

  static Llama random(const LlamaConfig& config, DType dtype, Device device, uint64_t seed = 0,
                      int64_t max_positions = kDefaultMaxPositions);
  // A Hugging Face folder: config.json and model.safetensors or
  // model.safetensors.index.json (shards). dtype: the embedding's in the file
  // when unset (float32, float16 or bfloat16).
  static Llama from_pretrained(const std::string& folder, Device device,
                               std::optional<DType> dtype = std::nullopt,
                               int64_t max_positions = kDefaultMaxPositions);
  // Weights from a checkpoint (file, index or folder) for a given config.
  static Llama from_checkpoint(const std::string& path, const LlamaConfig& config, Device device,
                               std::optional<DType> dtype = std::nullopt,
                               int64_t max_positions = kDefaultMaxPositions);

  const LlamaConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t vocab_size() const { return config_.vocab_size; }

  // Token ids [B, T] -> final hidden states [B, T, hidden] (after the last norm).
  Tensor forward_hidden(const Tensor& ids) const;
  // Token ids [B, T] -> logits [B, T, vocab].
  Tensor forward(const Tensor& ids) const;
  Tensor logits(const Tensor& hidden) const;

  using Cache = KVCache;
  Cache make_cache(int64_t batch, int64_t length) const;
  // Prompt ids [B, T] -> logits [B, T, vocab], writing cache slots [0, T).
  // With `last` (int64 [B]), only row b's logits at position last[b]: [B, vocab].
  Tensor prefill(const Tensor& ids, Cache& cache,
                 const std::optional<Tensor>& last = std::nullopt) const;
  // One decode step: ids [B, 1], pos one int64 element or [B]. Returns logits [B, 1, vocab].
  Tensor decode_step(const Tensor& ids, const Tensor& pos, Cache& cache) const;

  // Moves the model; on CUDA, fuses its projections again (Note [Fused projections]).
  void to(Device device, std::optional<DType> dtype = std::nullopt);
  // Every layer's q/k/v and gate/up as one product each (Note [Fused
  // projections]): a copy of those weights into one tensor per layer and
  // group. random(), from_checkpoint() and to() call it for CUDA models (on
  // the CPU a checkpoint's weights stay views of the mapped file unless it
  // is called). Call it again after replacing parameters by hand.
  void fuse_projections();
  // model.embed_tokens, model.layers.{i}.*, model.norm, lm_head (untied only),
  // and the rotary tables as buffers.
  void visit(const TensorVisitor& f, const std::string& prefix);

  Embedding embed_tokens;
  std::vector<LlamaBlock> layers;
  RMSNorm norm;
  std::optional<Linear> lm_head;  // none when tied to embed_tokens
  RotaryEmbedding rotary;

 private:
  static Llama skeleton(const LlamaConfig& config, DType dtype, int64_t max_positions);

  LlamaConfig config_;
  DType dtype_ = kFloat32;
  Device device_;
};

}  // namespace kiln::nn
