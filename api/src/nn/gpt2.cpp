#include "kiln/nn/gpt2.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "api/src/nn/cache_steps.h"
#include "api/src/nn/json_file.h"
#include "api/src/nn/weight_loader.h"
#include "kiln/jit.h"
#include "kiln/ops.h"

namespace kiln::nn {

// --- Config ---------------------------------------------------------------------

namespace {

GPT2Config config_from(const nlohmann::json& j, const std::string& what) {
  JsonFields f(j, what, "GPT2");
  const std::string type = f.string("model_type", "gpt2");
  KILN_CHECK(type == "gpt2", "[GPT2] expected model_type \"gpt2\" in ", what, ", got \"", type,
             "\"");
  const std::string act = f.string("activation_function", "gelu_new");
  KILN_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh",
             "[GPT2] expected "
             "activation_function gelu_new (kiln's GPT-2 uses the tanh GELU) in ",
             what, ", got \"", act, "\"");
  for (const char* option : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"}) {
    KILN_CHECK(!f.boolean(option, false), "[GPT2] expected ", option, " false in ", what,
               " (kiln does not implement it), got true");
  }
  KILN_CHECK(f.boolean("scale_attn_weights", true), "[GPT2] expected scale_attn_weights true in ",
             what, " (kiln does not implement unscaled attention), got false");
  GPT2Config c;
  c.n_layer = f.integer("n_layer");
  c.n_head = f.integer("n_head");
  c.d_model = f.integer("n_embd");
  c.vocab = f.integer("vocab_size");
  c.n_positions = f.integer("n_positions");
  c.eps = f.number("layer_norm_epsilon", 1e-5);
  c.n_inner = f.integer("n_inner", 0);
  c.check();
  return c;
}

}  // namespace

GPT2Config GPT2Config::from_json(const std::string& text, const std::string& what) {
  return config_from(parse_json(text, what, "GPT2"), what);
}

GPT2Config GPT2Config::from_json_file(const std::string& path) {
  return config_from(read_json_file(path, "GPT2"), path);
}

std::optional<GPT2Config> GPT2Config::from_metadata(
    const std::map<std::string, std::string>& metadata, const std::string& what) {
  if (!metadata.count("n_head")) return std::nullopt;
  return config_from(metadata_as_json(metadata), "the metadata of " + what);
}

std::map<std::string, std::string> GPT2Config::to_metadata() const {
  std::ostringstream eps_text;
  eps_text.precision(17);
  eps_text << eps;
  return {{"model_type", "gpt2"},
          {"n_layer", std::to_string(n_layer)},
          {"n_head", std::to_string(n_head)},
          {"n_embd", std::to_string(d_model)},
          {"vocab_size", std::to_string(vocab)},
          {"n_positions", std::to_string(n_positions)},
          {"layer_norm_epsilon", eps_text.str()},
          {"n_inner", std::to_string(n_inner)}};
}

GPT2Config GPT2Config::named(const std::string& name) {
  GPT2Config c;
  if (name == "gpt2") return c;
  if (name == "gpt2-medium") {
    c.n_layer = 24, c.d_model = 1024, c.n_head = 16;
  } else if (name == "gpt2-large") {
    c.n_layer = 36, c.d_model = 1280, c.n_head = 20;
  } else if (name == "gpt2-xl") {
    c.n_layer = 48, c.d_model = 1600, c.n_head = 25;
  } else if (name == "tiny") {
    c.n_layer = 2, c.d_model = 64, c.n_head = 4, c.vocab = 256, c.n_positions = 256;
  } else {
    KILN_FAIL(
        "[GPT2] expected a config name among gpt2, gpt2-medium, gpt2-large, gpt2-xl, tiny, got '",
        name, "'");
  }
  return c;
}

void GPT2Config::check() const {
  KILN_CHECK(n_layer > 0 && n_head > 0 && d_model > 0 && vocab > 0 && n_positions > 0 && eps > 0,
             "[GPT2] expected positive n_layer, n_head, n_embd, vocab_size, n_positions and "
             "layer_norm_epsilon, got ",
             n_layer, ", ", n_head, ", ", d_model, ", ", vocab, ", ", n_positions, " and ", eps);
  check_layer_count("GPT2", "n_layer", n_layer);  // Note [Layer counts]
  KILN_CHECK(n_inner >= 0, "[GPT2] expected n_inner >= 0 (0: 4 * n_embd), got ", n_inner);
  KILN_CHECK(d_model % n_head == 0, "[GPT2] expected n_embd divisible by n_head, got ", d_model,
             " and ", n_head);
}

// --- Blocks -------------------------------------------------------------------

namespace {

// The block with full causal attention; writes the cache's slots [0, T) when given one.
Tensor block_forward(const GPT2Block& b, const Tensor& x, int64_t n_head, Tensor* k_cache,
                     Tensor* v_cache) {
  const int64_t d = x.size(-1);
  std::vector<Tensor> qkv = split(b.c_attn.forward(b.ln_1.forward(x)), d, -1);
  Tensor k = split_heads(qkv[1], n_head), v = split_heads(qkv[2], n_head);
  if (k_cache) write_kv_prefix(*k_cache, k);
  if (v_cache) write_kv_prefix(*v_cache, v);
  Tensor a = causal_attention(split_heads(qkv[0], n_head), k, v);
  Tensor h = x + b.attn_proj.forward(merge_heads(a));
  return h + b.mlp_proj.forward(gelu(b.c_fc.forward(b.ln_2.forward(h)), "tanh"));
}

}  // namespace

Tensor GPT2Block::forward(const Tensor& x, int64_t n_head) const {
  return block_forward(*this, x, n_head, nullptr, nullptr);
}

Tensor GPT2Block::forward_prefill(const Tensor& x, int64_t n_head, Tensor& k_cache,
                                  Tensor& v_cache) const {
  return block_forward(*this, x, n_head, &k_cache, &v_cache);
}

Tensor GPT2Block::forward_decode(const Tensor& x, int64_t n_head, Tensor& k_cache, Tensor& v_cache,
                                 const Tensor& pos) const {
  const int64_t d = x.size(-1);
  std::vector<Tensor> qkv = split(c_attn.forward(ln_1.forward(x)), d, -1);
  write_kv(k_cache, pos, split_heads(qkv[1], n_head));
  write_kv(v_cache, pos, split_heads(qkv[2], n_head));
  // Attend to cache slots 0..pos, read from the position tensor on the device,
  // so one step's ops are the same at every position.
  Tensor a = kv_cache_attention(split_heads(qkv[0], n_head), k_cache, v_cache, pos);
  Tensor h = x + attn_proj.forward(merge_heads(a));
  return h + mlp_proj.forward(gelu(c_fc.forward(ln_2.forward(h)), "tanh"));
}

void GPT2Block::visit(const TensorVisitor& f, const std::string& prefix) {
  ln_1.visit(f, child_name(prefix, "ln_1"));
  c_attn.visit(f, child_name(prefix, "attn.c_attn"));
  attn_proj.visit(f, child_name(prefix, "attn.c_proj"));
  ln_2.visit(f, child_name(prefix, "ln_2"));
  c_fc.visit(f, child_name(prefix, "mlp.c_fc"));
  mlp_proj.visit(f, child_name(prefix, "mlp.c_proj"));
}

// --- The model ------------------------------------------------------------------

GPT2 GPT2::skeleton(const GPT2Config& c, DType dtype) {
  c.check();
  check_dtype("GPT2", "dtype", dtype);
  KILN_CHECK(is_floating(dtype), "[GPT2] expected a floating dtype, got ", dtype);
  const TensorOptions meta = TensorOptions(dtype).device(Device::meta());
  GPT2 m;
  m.config_ = c;
  m.dtype_ = dtype;
  m.device_ = Device::meta();
  m.wte = empty({c.vocab, c.d_model}, meta);
  m.wpe = empty({c.n_positions, c.d_model}, meta);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    GPT2Block b;
    b.ln_1 = LayerNorm::empty(c.d_model, c.eps, meta);
    b.ln_2 = LayerNorm::empty(c.d_model, c.eps, meta);
    b.c_attn = Linear::empty(c.d_model, 3 * c.d_model, true, meta);
    b.attn_proj = Linear::empty(c.d_model, c.d_model, true, meta);
    b.c_fc = Linear::empty(c.d_model, c.inner(), true, meta);
    b.mlp_proj = Linear::empty(c.inner(), c.d_model, true, meta);
    m.blocks.push_back(std::move(b));
  }
  m.ln_f = LayerNorm::empty(c.d_model, c.eps, meta);
  return m;
}

GPT2 GPT2::random(const GPT2Config& c, DType dtype, Device device, uint64_t seed) {
  GPT2 m = skeleton(c, dtype);
  init_random(visitor_of(m), seed);
  m.to(device);
  return m;
}

GPT2 GPT2::from_safetensors(const std::string& path, Device device, std::optional<DType> dtype) {
  Checkpoint ckpt = Checkpoint::open(path);
  std::optional<GPT2Config> c = GPT2Config::from_metadata(ckpt.metadata(), ckpt.path());
  if (!c) {
    const size_t slash = ckpt.path().rfind('/');
    const std::string beside =
        (slash == std::string::npos ? std::string(".") : ckpt.path().substr(0, slash)) +
        "/config.json";
    std::ifstream probe(beside);
    KILN_CHECK(probe.good(),
               "[GPT2] expected the config (n_layer, n_head, n_embd, ...) in the "
               "__metadata__ of ",
               ckpt.path(), " or in ", beside,
               ", got neither: pass a GPT2Config (kiln does not guess n_head)");
    c = GPT2Config::from_json_file(beside);
  }
  return from_safetensors(path, *c, device, dtype);
}

GPT2 GPT2::from_safetensors(const std::string& path, const GPT2Config& config, Device device,
                            std::optional<DType> dtype) {
  Checkpoint ckpt = Checkpoint::open(path);
  // The original checkpoints name the weights bare; save_pretrained's add "transformer.".
  const std::string prefix = ckpt.contains("wte.weight") || !ckpt.contains("transformer.wte.weight")
                                 ? std::string()
                                 : std::string("transformer.");
  const std::string wte = prefix + "wte.weight";
  const DType dt = dtype ? *dtype : checkpoint_dtype(ckpt, wte, "GPT2");
  GPT2 m = skeleton(config, dt);
  auto ends_with = [](const std::string& s, const char* suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
  };
  WeightMapping mapping;
  mapping.file_name = [&](const std::string& name) { return prefix + name; };
  // GPT-2's Conv1D stores [in, out].
  mapping.transposed = [&](const std::string& name) {
    return ends_with(name, "attn.c_attn.weight") || ends_with(name, "attn.c_proj.weight") ||
           ends_with(name, "mlp.c_fc.weight") || ends_with(name, "mlp.c_proj.weight");
  };
  // Causal-mask buffers of older checkpoints, and the tied head.
  mapping.ignorable = [&](const std::string& name) {
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
           name == "lm_head.weight";
  };
  load_weights(visitor_of(m), ckpt, "GPT2", device, dt, mapping);
  m.device_ = device;
  return m;
}

GPT2 GPT2::from_pretrained(const std::string& folder, Device device, std::optional<DType> dtype) {
  return from_safetensors(folder, GPT2Config::from_json_file(folder + "/config.json"), device,
                          dtype);
}

Tensor GPT2::forward_hidden(const Tensor& x) const {
  Tensor h = x;
  for (const GPT2Block& b : blocks) h = b.forward(h, config_.n_head);
  return ln_f.forward(h);
}

Tensor GPT2::forward(const Tensor& ids) const {
  check_ids(ids, "GPT2");
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
  KILN_CHECK(length <= config_.n_positions,
             "[GPT2] expected a cache of at most n_positions = ", config_.n_positions,
             " slots, got ", length);
  return KVCache::make(config_.n_layer, batch, config_.n_head, length,
                       config_.d_model / config_.n_head, TensorOptions(dtype_).device(device_));
}

namespace {

// The cache make_cache makes (Note [Caches of other models]).
CacheSpec cache_spec(const GPT2& m) {
  const GPT2Config& c = m.config();
  return {.layers = m.blocks.size(),
          .unit = "blocks",
          .heads = c.n_head,
          .head_dim = c.d_model / c.n_head,
          .max_length = c.n_positions,
          .dtype = m.dtype(),
          .device = m.device(),
          .vocab = c.vocab};
}

}  // namespace

Tensor GPT2::prefill(const Tensor& ids, Cache& cache, const std::optional<Tensor>& last) const {
  check_prefill("GPT2::prefill", ids, cache, cache_spec(*this));
  const int64_t t = ids.size(1);
  Tensor pos = arange(t, TensorOptions(kInt64).device(device_));
  Tensor h = embedding(wte, ids) + embedding(wpe, pos);
  for (size_t i = 0; i < blocks.size(); ++i) {
    h = blocks[i].forward_prefill(h, config_.n_head, cache.k[i], cache.v[i]);
  }
  h = ln_f.forward(h);
  return lm_head(last ? rows_at(h, *last) : h);
}

Tensor GPT2::decode_step(const Tensor& ids, const Tensor& pos, Cache& cache) const {
  check_decode("GPT2::decode_step", ids, pos, cache, cache_spec(*this));
  Tensor p = pos.reshape({-1});  // [1] (every row) or [B] (per row)
  Tensor h = embedding(wte, ids) + embedding(wpe, p).unsqueeze(1);
  for (size_t i = 0; i < blocks.size(); ++i) {
    h = blocks[i].forward_decode(h, config_.n_head, cache.k[i], cache.v[i], p);
  }
  return lm_head(ln_f.forward(h));
}

void GPT2::to(Device device, std::optional<DType> dtype) {
  nn::to(visitor_of(*this), device, dtype);
  device_ = device;
  if (dtype) dtype_ = *dtype;
}

void GPT2::visit(const TensorVisitor& f, const std::string& prefix) {
  f(child_name(prefix, "wte.weight"), wte, TensorKind::Parameter);
  f(child_name(prefix, "wpe.weight"), wpe, TensorKind::Parameter);
  for (size_t i = 0; i < blocks.size(); ++i) {
    blocks[i].visit(f, child_name(prefix, "h." + std::to_string(i)));
  }
  ln_f.visit(f, child_name(prefix, "ln_f"));
}

}  // namespace kiln::nn
