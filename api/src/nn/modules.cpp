#include <cmath>

#include "kiln/nn.h"
#include "kiln/ops.h"

namespace kiln::nn {

Tensor Linear::forward(const Tensor& x) const {
  return linear(x, weight, bias);
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return layer_norm(x, {weight.size(0)}, weight, bias, eps);
}

Tensor Embedding::forward(const Tensor& indices) const {
  return embedding(weight, indices);
}

namespace {

// [B, T, H*D] -> [B, H, T, D]
Tensor split_heads(const Tensor& t, int64_t n_head) {
  int64_t b = t.size(0), s = t.size(1), d = t.size(2);
  return t.view({b, s, n_head, d / n_head}).transpose(1, 2);
}

// [B, H, T, D] -> [B, T, H*D]
Tensor merge_heads(const Tensor& t) {
  int64_t b = t.size(0), h = t.size(1), s = t.size(2), d = t.size(3);
  return t.transpose(1, 2).reshape({b, s, h * d});
}

}  // namespace

Tensor GPT2Block::forward(const Tensor& x, int64_t n_head) const {
  const int64_t d = x.size(-1);
  std::vector<Tensor> qkv = split(c_attn.forward(ln_1.forward(x)), d, -1);
  Tensor a = scaled_dot_product_attention(split_heads(qkv[0], n_head), split_heads(qkv[1], n_head),
                                          split_heads(qkv[2], n_head), std::nullopt,
                                          /*is_causal=*/true);
  Tensor h = x + attn_proj.forward(merge_heads(a));
  return h + mlp_proj.forward(gelu(c_fc.forward(ln_2.forward(h)), "tanh"));
}

Tensor GPT2Block::forward_decode(const Tensor& x, int64_t n_head, Tensor& k_cache, Tensor& v_cache,
                                 const Tensor& pos) const {
  const int64_t d = x.size(-1);
  std::vector<Tensor> qkv = split(c_attn.forward(ln_1.forward(x)), d, -1);
  index_copy_(k_cache, 2, pos, split_heads(qkv[1], n_head));
  index_copy_(v_cache, 2, pos, split_heads(qkv[2], n_head));
  // Attend to cache slots 0..pos, read from the position tensor on the device,
  // so one step's ops are the same at every position.
  Tensor a = kv_cache_attention(split_heads(qkv[0], n_head), k_cache, v_cache, pos);
  Tensor h = x + attn_proj.forward(merge_heads(a));
  return h + mlp_proj.forward(gelu(c_fc.forward(ln_2.forward(h)), "tanh"));
}

// ---------------------------------------------------------------------------

namespace {

Tensor normal_weight(IntArrayRef sizes, DType dtype, Device device) {
  Tensor w = randn(sizes) * 0.02;
  return w.to(device, dtype);
}

Linear make_linear(int64_t in, int64_t out, DType dtype, Device device) {
  return Linear{normal_weight({out, in}, dtype, device),
                zeros({out}, TensorOptions(dtype).device(device))};
}

LayerNorm make_layer_norm(int64_t d, double eps, DType dtype, Device device) {
  return LayerNorm{ones({d}, TensorOptions(dtype).device(device)),
                   zeros({d}, TensorOptions(dtype).device(device)), eps};
}

}  // namespace

GPT2 GPT2::random(const GPT2Config& c, DType dtype, Device device, uint64_t seed) {
  KILN_CHECK(c.d_model % c.n_head == 0, "[GPT2] expected d_model divisible by n_head, got ",
             c.d_model, " and ", c.n_head);
  manual_seed(seed);
  GPT2 m;
  m.config_ = c;
  m.dtype_ = dtype;
  m.device_ = device;
  m.wte = normal_weight({c.vocab, c.d_model}, dtype, device);
  m.wpe = normal_weight({c.n_positions, c.d_model}, dtype, device);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    GPT2Block b;
    b.ln_1 = make_layer_norm(c.d_model, c.eps, dtype, device);
    b.ln_2 = make_layer_norm(c.d_model, c.eps, dtype, device);
    b.c_attn = make_linear(c.d_model, 3 * c.d_model, dtype, device);
    b.attn_proj = make_linear(c.d_model, c.d_model, dtype, device);
    b.c_fc = make_linear(c.d_model, 4 * c.d_model, dtype, device);
    b.mlp_proj = make_linear(4 * c.d_model, c.d_model, dtype, device);
    m.blocks.push_back(std::move(b));
  }
  m.ln_f = make_layer_norm(c.d_model, c.eps, dtype, device);
  return m;
}

GPT2 GPT2::from_safetensors(const std::string& path, Device device, std::optional<DType> dtype) {
  std::map<std::string, Tensor> w = load_safetensors(path);
  auto get = [&](const std::string& name) -> Tensor {
    for (const std::string& prefix : {std::string(), std::string("transformer.")}) {
      auto it = w.find(prefix + name);
      if (it != w.end()) {
        Tensor t = it->second;
        return t.to(device, dtype.value_or(t.dtype()));
      }
    }
    KILN_FAIL("[GPT2::from_safetensors] expected a tensor named '", name, "' in ", path,
              ", got none");
  };
  // GPT-2 stores its projections as [in, out] (Conv1D); kiln's Linear is [out, in].
  auto conv1d = [&](const std::string& name) {
    return Linear{get(name + ".weight").t().contiguous(), get(name + ".bias")};
  };
  auto norm = [&](const std::string& name, double eps) {
    return LayerNorm{get(name + ".weight"), get(name + ".bias"), eps};
  };
  GPT2 m;
  m.wte = get("wte.weight");
  m.wpe = get("wpe.weight");
  GPT2Config c;
  c.vocab = m.wte.size(0);
  c.d_model = m.wte.size(1);
  c.n_positions = m.wpe.size(0);
  c.n_head = c.d_model / 64;
  c.n_layer = 0;
  while (w.count("h." + std::to_string(c.n_layer) + ".ln_1.weight") ||
         w.count("transformer.h." + std::to_string(c.n_layer) + ".ln_1.weight")) {
    ++c.n_layer;
  }
  KILN_CHECK(c.n_layer > 0, "[GPT2::from_safetensors] expected blocks named h.0.*, got none in ",
             path);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    std::string p = "h." + std::to_string(i) + ".";
    GPT2Block b;
    b.ln_1 = norm(p + "ln_1", c.eps);
    b.ln_2 = norm(p + "ln_2", c.eps);
    b.c_attn = conv1d(p + "attn.c_attn");
    b.attn_proj = conv1d(p + "attn.c_proj");
    b.c_fc = conv1d(p + "mlp.c_fc");
    b.mlp_proj = conv1d(p + "mlp.c_proj");
    m.blocks.push_back(std::move(b));
  }
  m.ln_f = norm("ln_f", c.eps);
  m.config_ = c;
  m.dtype_ = m.wte.dtype();
  m.device_ = device;
  return m;
}

Tensor GPT2::forward_hidden(const Tensor& x) const {
  Tensor h = x;
  for (const GPT2Block& b : blocks) h = b.forward(h, config_.n_head);
  return ln_f.forward(h);
}

Tensor GPT2::forward(const Tensor& ids) const {
  KILN_CHECK(ids.dim() == 2, "[GPT2] expected token ids [batch, tokens], got ", ids.sizes());
  const int64_t t = ids.size(1);
  KILN_CHECK(t <= config_.n_positions, "[GPT2] expected at most ", config_.n_positions,
             " tokens, got ", t);
  Tensor pos = arange(t, TensorOptions(kInt64).device(device_));
  return forward_hidden(embedding(wte, ids) + embedding(wpe, pos));
}

Tensor GPT2::lm_head(const Tensor& hidden) const {
  return matmul(hidden, wte.t());
}

GPT2::Cache GPT2::make_cache(int64_t batch, int64_t length) const {
  Cache c;
  const int64_t h = config_.n_head, d = config_.d_model / config_.n_head;
  for (size_t i = 0; i < blocks.size(); ++i) {
    c.k.push_back(zeros({batch, h, length, d}, TensorOptions(dtype_).device(device_)));
    c.v.push_back(zeros({batch, h, length, d}, TensorOptions(dtype_).device(device_)));
  }
  return c;
}

Tensor GPT2::decode_step(const Tensor& ids, const Tensor& pos, Cache& cache) const {
  KILN_CHECK(ids.dim() == 2 && ids.size(1) == 1,
             "[GPT2::decode_step] expected ids [batch, 1], got ", ids.sizes());
  KILN_CHECK(pos.numel() == 1 && pos.dtype() == kInt64,
             "[GPT2::decode_step] expected pos as one int64 element, got ", pos.sizes(), " ",
             pos.dtype());
  KILN_CHECK(cache.k.size() == blocks.size(), "[GPT2::decode_step] expected a cache of ",
             blocks.size(), " blocks, got ", cache.k.size());
  Tensor p = pos.reshape({1});
  Tensor h = embedding(wte, ids) + embedding(wpe, p);
  for (size_t i = 0; i < blocks.size(); ++i) {
    h = blocks[i].forward_decode(h, config_.n_head, cache.k[i], cache.v[i], p);
  }
  return lm_head(ln_f.forward(h));
}

}  // namespace kiln::nn
