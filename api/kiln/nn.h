#pragma once

// Model building blocks written with kiln's ops, and GPT-2 (the reference
// workload). Modules hold their weights as tensors; forward() is plain op code,
// so it runs eagerly, lazily or inside jit::compile alike.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "kiln/api.h"
#include "kiln/nn/safetensors.h"
#include "kiln/tensor.h"

namespace kiln::nn {

// y = x @ weight.T + bias; weight is [out, in].
struct KILN_API Linear {
  Tensor weight;
  std::optional<Tensor> bias;
  Tensor forward(const Tensor& x) const;
};

struct KILN_API LayerNorm {
  Tensor weight;
  Tensor bias;
  double eps = 1e-5;
  Tensor forward(const Tensor& x) const;
};

struct KILN_API Embedding {
  Tensor weight;  // [num, dim]
  Tensor forward(const Tensor& indices) const;
};

struct GPT2Config {
  int64_t n_layer = 12;
  int64_t d_model = 768;
  int64_t n_head = 12;
  int64_t vocab = 50257;
  int64_t n_positions = 1024;
  double eps = 1e-5;
};

struct KILN_API GPT2Block {
  LayerNorm ln_1, ln_2;
  Linear c_attn, attn_proj, c_fc, mlp_proj;
  // x: [B, T, d]. Full causal attention over x itself.
  Tensor forward(const Tensor& x, int64_t n_head) const;
  // One decode step with a static KV cache: x [B, 1, d]; k_cache/v_cache
  // [B, H, S, D] receive this step's key/value at `pos` (an int64 tensor of
  // one element, so the step's code does not change with the position), and
  // attention covers cache positions <= pos.
  Tensor forward_decode(const Tensor& x, int64_t n_head, Tensor& k_cache, Tensor& v_cache,
                        const Tensor& pos) const;
};

class KILN_API GPT2 {
 public:
  // Seeded random weights (normal, std 0.02; LayerNorms at 1/0), in `dtype` on `device`.
  static GPT2 random(const GPT2Config& config, DType dtype, Device device, uint64_t seed = 0);
  // Weights from a Hugging Face GPT-2 safetensors file (transformer.* or bare names).
  static GPT2 from_safetensors(const std::string& path, Device device,
                               std::optional<DType> dtype = std::nullopt);

  const GPT2Config& config() const { return config_; }
  // The 12 blocks and the final LayerNorm over hidden states x [B, T, d].
  Tensor forward_hidden(const Tensor& x) const;
  // Token ids [B, T] -> final hidden states [B, T, d] (embeddings included).
  Tensor forward(const Tensor& ids) const;
  // Hidden states -> logits with the tied embedding matrix.
  Tensor lm_head(const Tensor& hidden) const;

  // A static KV cache for decode steps: per block [B, H, S, D] key and value.
  struct Cache {
    std::vector<Tensor> k, v;
  };
  Cache make_cache(int64_t batch, int64_t length) const;
  // One decode step: ids [B, 1], pos an int64 tensor of one element. Returns logits [B, 1, vocab].
  Tensor decode_step(const Tensor& ids, const Tensor& pos, Cache& cache) const;

  Tensor wte, wpe;
  std::vector<GPT2Block> blocks;
  LayerNorm ln_f;

 private:
  GPT2Config config_;
  DType dtype_ = kFloat32;
  Device device_;
};

}  // namespace kiln::nn
