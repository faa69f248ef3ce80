#include "kiln/nn/llama.h"

#include <algorithm>
#include <cstring>

#include "api/src/nn/cache_steps.h"
#include "api/src/nn/weight_loader.h"
#include "kiln/jit.h"
#include "kiln/ops.h"

namespace kiln::nn {

Tensor LlamaBlock::forward(const Tensor& x, const RotaryEmbedding& rope, Tensor* k_cache,
                           Tensor* v_cache) const {
  Tensor h = x + self_attn.forward(input_layernorm.forward(x), rope, k_cache, v_cache);
  return h + mlp.forward(post_attention_layernorm.forward(h));
}

Tensor LlamaBlock::forward_decode(const Tensor& x, const RotaryEmbedding& rope, Tensor& k_cache,
                                  Tensor& v_cache, const Tensor& pos) const {
  Tensor h = x + self_attn.forward_decode(input_layernorm.forward(x), rope, k_cache, v_cache, pos);
  return h + mlp.forward(post_attention_layernorm.forward(h));
}

void LlamaBlock::visit(const TensorVisitor& f, const std::string& prefix) {
  input_layernorm.visit(f, child_name(prefix, "input_layernorm"));
  self_attn.visit(f, child_name(prefix, "self_attn"));
  post_attention_layernorm.visit(f, child_name(prefix, "post_attention_layernorm"));
  mlp.visit(f, child_name(prefix, "mlp"));
}

// ---------------------------------------------------------------------------

Llama Llama::skeleton(const LlamaConfig& c, DType dtype, int64_t max_positions) {
  c.check();
  check_dtype("Llama", "dtype", dtype);
  KILN_CHECK(is_floating(dtype) && dtype != kFloat64,
             "[Llama] expected dtype float32, float16 or bfloat16, got ", dtype);
  KILN_CHECK(max_positions > 0, "[Llama] expected max_positions > 0, got ", max_positions);
  const TensorOptions meta = TensorOptions(dtype).device(Device::meta());
  const int64_t d = c.hidden_size, hd = c.head_size();
  Llama m;
  m.config_ = c;
  m.dtype_ = dtype;
  m.device_ = Device::meta();
  m.embed_tokens = Embedding::empty(c.vocab_size, d, meta);
  const bool o_bias = c.attention_bias && c.model_type != "qwen2";
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    LlamaBlock b;
    b.input_layernorm = RMSNorm::empty(d, c.rms_norm_eps, meta);
    b.self_attn = Attention::empty(d, c.num_attention_heads, c.num_key_value_heads, hd,
                                   c.attention_bias, o_bias, meta);
    b.self_attn.sliding_window = c.window_of(i);
    b.post_attention_layernorm = RMSNorm::empty(d, c.rms_norm_eps, meta);
    b.mlp = GatedMLP::empty(d, c.intermediate_size, c.mlp_bias, meta);
    m.layers.push_back(std::move(b));
  }
  m.norm = RMSNorm::empty(d, c.rms_norm_eps, meta);
  if (!c.tie_word_embeddings) m.lm_head = Linear::empty(d, c.vocab_size, false, meta);
  // The tables are computed on the host in float32 and follow to() from there.
  m.rotary = RotaryEmbedding::make(hd, std::min(c.max_position_embeddings, max_positions),
                                   c.rope_theta, c.rope_scaling, kFloat32);
  return m;
}

Llama Llama::random(const LlamaConfig& c, DType dtype, Device device, uint64_t seed,
                    int64_t max_positions) {
  Llama m = skeleton(c, dtype, max_positions);
  init_random(visitor_of(m), seed);
  m.to(device, dtype);  // fuses the projections on CUDA
  return m;
}

Llama Llama::from_checkpoint(const std::string& path, const LlamaConfig& c, Device device,
                             std::optional<DType> dtype, int64_t max_positions) {
  Checkpoint ckpt = Checkpoint::open(path);
  const std::string embed = "model.embed_tokens.weight";
  const DType dt = dtype ? *dtype : checkpoint_dtype(ckpt, embed, "Llama");
  Llama m = skeleton(c, dt, max_positions);
  WeightMapping mapping;
  mapping.ignorable = [&](const std::string& name) {
    const char* inv_freq = "rotary_emb.inv_freq";  // a buffer older checkpoints saved
    const size_t n = std::strlen(inv_freq);
    return (c.tie_word_embeddings && name == "lm_head.weight") ||
           (name.size() >= n && name.compare(name.size() - n, n, inv_freq) == 0);
  };
  load_weights(visitor_of(m), ckpt, "Llama", device, dt, mapping);
  m.device_ = device;
  if (device.is_cuda()) m.fuse_projections();  // CPU weights stay views of the file
  return m;
}

Llama Llama::from_pretrained(const std::string& folder, Device device, std::optional<DType> dtype,
                             int64_t max_positions) {
  return from_checkpoint(folder, LlamaConfig::from_json_file(folder + "/config.json"), device,
                         dtype, max_positions);
}

// ---------------------------------------------------------------------------

Tensor Llama::forward_hidden(const Tensor& ids) const {
  check_ids(ids, "Llama");
  Tensor h = embed_tokens.forward(ids);
  for (const LlamaBlock& b : layers) h = b.forward(h, rotary);
  return norm.forward(h);
}

Tensor Llama::logits(const Tensor& hidden) const {
  return lm_head ? lm_head->forward(hidden) : linear(hidden, embed_tokens.weight);
}

Tensor Llama::forward(const Tensor& ids) const {
  return logits(forward_hidden(ids));
}

Llama::Cache Llama::make_cache(int64_t batch, int64_t length) const {
  KILN_CHECK(length <= rotary.positions(), "[Llama] expected a cache of at most ",
             rotary.positions(), " slots (min(max_position_embeddings, max_positions)), got ",
             length);
  return KVCache::make(config_.num_hidden_layers, batch, config_.num_key_value_heads, length,
                       config_.head_size(), TensorOptions(dtype_).device(device_));
}

namespace {

// The cache make_cache makes (Note [Caches of other models]).
CacheSpec cache_spec(const Llama& m) {
  const LlamaConfig& c = m.config();
  return {.layers = m.layers.size(),
          .unit = "layers",
          .heads = c.num_key_value_heads,
          .head_dim = c.head_size(),
          .max_length = m.rotary.positions(),
          .dtype = m.dtype(),
          .device = m.device(),
          .vocab = c.vocab_size};
}

}  // namespace

Tensor Llama::prefill(const Tensor& ids, Cache& cache, const std::optional<Tensor>& last) const {
  check_prefill("Llama::prefill", ids, cache, cache_spec(*this));
  Tensor h = embed_tokens.forward(ids);
  for (size_t i = 0; i < layers.size(); ++i) {
    h = layers[i].forward(h, rotary, &cache.k[i], &cache.v[i]);
  }
  h = norm.forward(h);
  return logits(last ? rows_at(h, *last) : h);
}

Tensor Llama::decode_step(const Tensor& ids, const Tensor& pos, Cache& cache) const {
  check_decode("Llama::decode_step", ids, pos, cache, cache_spec(*this));
  Tensor h = embed_tokens.forward(ids);
  for (size_t i = 0; i < layers.size(); ++i) {
    h = layers[i].forward_decode(h, rotary, cache.k[i], cache.v[i], pos);
  }
  return logits(norm.forward(h));
}

void Llama::to(Device device, std::optional<DType> dtype) {
  nn::to(visitor_of(*this), device, dtype);
  device_ = device;
  if (dtype) dtype_ = *dtype;
  if (device.is_cuda()) {
    fuse_projections();
    return;
  }
  // The parts are copies now: the fused tensors of the old device go.
  for (LlamaBlock& b : layers) {
    b.self_attn.qkv = {};
    b.mlp.gate_up = {};
  }
}

void Llama::fuse_projections() {
  for (LlamaBlock& b : layers) {
    b.self_attn.fuse_projections();
    b.mlp.fuse_projections();
  }
}

void Llama::visit(const TensorVisitor& f, const std::string& prefix) {
  const std::string model = child_name(prefix, "model");
  embed_tokens.visit(f, child_name(model, "embed_tokens"));
  for (size_t i = 0; i < layers.size(); ++i) {
    layers[i].visit(f, child_name(model, "layers." + std::to_string(i)));
  }
  norm.visit(f, child_name(model, "norm"));
  if (lm_head) lm_head->visit(f, child_name(prefix, "lm_head"));
  rotary.visit(f, child_name(model, "rotary_emb"));
}

}  // namespace kiln::nn
