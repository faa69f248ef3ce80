#include "api/src/nn/cache_steps.h"
#include "api/src/nn/json_file.h"
#include "kiln/nn/llama.h"

namespace kiln::nn {
namespace {

// Newer Hugging Face configs spell out each layer's attention; kiln's two
// fields must give the same list.
void check_layer_types(const nlohmann::json& types, const LlamaConfig& c, const std::string& what) {
  KILN_CHECK(types.is_array() && static_cast<int64_t>(types.size()) == c.num_hidden_layers,
             "[Llama] expected layer_types in ", what, " to list ", c.num_hidden_layers,
             " layers, got ", json_brief(types));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string want = c.window_of(i) ? "sliding_attention" : "full_attention";
    const nlohmann::json& got = types[static_cast<size_t>(i)];
    KILN_CHECK(got.is_string() && got.get<std::string>() == want, "[Llama] expected layer_types[",
               i, "] in ", what, " to be \"", want,
               "\" (from model_type, sliding_window and max_window_layers), got ", json_brief(got));
  }
}

LlamaConfig config_from(const nlohmann::json& j, const std::string& what) {
  JsonFields f(j, what, "Llama");
  LlamaConfig c;
  c.model_type = f.string("model_type", "llama");
  KILN_CHECK(c.model_type == "llama" || c.model_type == "mistral" || c.model_type == "qwen2",
             "[Llama] expected model_type llama, mistral or qwen2 in ", what, ", got \"",
             c.model_type, "\"");
  const std::string act = f.string("hidden_act", "silu");
  KILN_CHECK(act == "silu", "[Llama] expected hidden_act \"silu\" in ", what, ", got \"", act,
             "\"");
  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.intermediate_size = f.integer("intermediate_size");
  c.num_hidden_layers = f.integer("num_hidden_layers");
  c.num_attention_heads = f.integer("num_attention_heads");
  c.num_key_value_heads = f.integer("num_key_value_heads", c.num_attention_heads);
  c.head_dim = f.integer("head_dim", 0);
  c.max_position_embeddings = f.integer("max_position_embeddings", 2048);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.rope_theta = f.number("rope_theta", 10000.0);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  // Qwen 2 always has q/k/v biases; Llama has them (and o_proj's) when attention_bias is set.
  c.attention_bias = c.model_type == "qwen2" || f.boolean("attention_bias", false);
  c.mlp_bias = f.boolean("mlp_bias", false);
  // Mistral's window covers every layer; a null one is none.
  if (c.model_type == "mistral") c.sliding_window = f.integer("sliding_window", 0);
  if (c.model_type == "qwen2" && f.boolean("use_sliding_window", false)) {
    c.sliding_window = f.integer("sliding_window");
    c.max_window_layers = f.integer("max_window_layers", 28);  // Qwen2Config's default
  }
  if (f.has("layer_types")) check_layer_types(j.at("layer_types"), c, what);
  const nlohmann::json& scaling = f.object("rope_scaling");
  if (!scaling.is_null()) {
    JsonFields s(scaling, "rope_scaling of " + what, "Llama");
    c.rope_scaling.type = s.has("rope_type") ? s.string("rope_type") : s.string("type");
    KILN_CHECK(c.rope_scaling.type == "default" || c.rope_scaling.type == "linear" ||
                   c.rope_scaling.type == "llama3",
               "[Llama] expected rope_scaling type default, linear or llama3 in ", what, ", got \"",
               c.rope_scaling.type, "\"");
    if (c.rope_scaling.type != "default") c.rope_scaling.factor = s.number("factor");
    if (c.rope_scaling.type == "llama3") {
      c.rope_scaling.low_freq_factor = s.number("low_freq_factor");
      c.rope_scaling.high_freq_factor = s.number("high_freq_factor");
      c.rope_scaling.original_max_position_embeddings =
          s.integer("original_max_position_embeddings");
    }
  }
  c.check();
  return c;
}

}  // namespace

LlamaConfig LlamaConfig::from_json(const std::string& text, const std::string& what) {
  return config_from(parse_json(text, what, "Llama"), what);
}

LlamaConfig LlamaConfig::from_json_file(const std::string& path) {
  return config_from(read_json_file(path, "Llama"), path);
}

void LlamaConfig::check() const {
  KILN_CHECK(vocab_size > 0 && hidden_size > 0 && intermediate_size > 0 && num_hidden_layers > 0 &&
                 num_attention_heads > 0 && num_key_value_heads > 0 && max_position_embeddings > 0,
             "[Llama] expected positive vocab_size, hidden_size, intermediate_size, "
             "num_hidden_layers, num_attention_heads, num_key_value_heads and "
             "max_position_embeddings, got ",
             vocab_size, ", ", hidden_size, ", ", intermediate_size, ", ", num_hidden_layers, ", ",
             num_attention_heads, ", ", num_key_value_heads, " and ", max_position_embeddings);
  check_layer_count("Llama", "num_hidden_layers", num_hidden_layers);  // Note [Layer counts]
  KILN_CHECK(head_dim >= 0,
             "[Llama] expected head_dim >= 0 (0: hidden_size / num_attention_heads), got ",
             head_dim);
  KILN_CHECK(sliding_window >= 0 && max_window_layers >= 0,
             "[Llama] expected sliding_window and max_window_layers >= 0, got ", sliding_window,
             " and ", max_window_layers);
  KILN_CHECK(num_attention_heads % num_key_value_heads == 0,
             "[Llama] expected num_attention_heads divisible by num_key_value_heads, got ",
             num_attention_heads, " and ", num_key_value_heads);
  KILN_CHECK(head_dim > 0 || hidden_size % num_attention_heads == 0,
             "[Llama] expected hidden_size divisible by num_attention_heads (or a head_dim), got ",
             hidden_size, " and ", num_attention_heads);
  KILN_CHECK(head_size() % 2 == 0 && head_size() <= kMaxRopeHeadDim,
             "[Llama] expected an even head dim of at most ", kMaxRopeHeadDim,
             " for rotary embeddings, got ", head_size());
  KILN_CHECK(rms_norm_eps > 0 && rope_theta > 0,
             "[Llama] expected positive rms_norm_eps and rope_theta, got ", rms_norm_eps, " and ",
             rope_theta);
  rope_inverse_frequencies(head_size(), rope_theta, rope_scaling);  // checks the scaling
}

LlamaConfig LlamaConfig::named(const std::string& name) {
  LlamaConfig c;
  auto llama3 = [](double factor) {
    RopeScaling s;
    s.type = "llama3";
    s.factor = factor;
    s.low_freq_factor = 1.0;
    s.high_freq_factor = 4.0;
    s.original_max_position_embeddings = 8192;
    return s;
  };
  if (name == "llama-3.2-1b") {
    c.vocab_size = 128256, c.hidden_size = 2048, c.intermediate_size = 8192;
    c.num_hidden_layers = 16, c.num_attention_heads = 32, c.num_key_value_heads = 8;
    c.head_dim = 64, c.max_position_embeddings = 131072, c.rms_norm_eps = 1e-5;
    c.rope_theta = 500000.0, c.rope_scaling = llama3(32.0), c.tie_word_embeddings = true;
  } else if (name == "llama-3.1-8b") {
    c.vocab_size = 128256, c.hidden_size = 4096, c.intermediate_size = 14336;
    c.num_hidden_layers = 32, c.num_attention_heads = 32, c.num_key_value_heads = 8;
    c.max_position_embeddings = 131072, c.rms_norm_eps = 1e-5;
    c.rope_theta = 500000.0, c.rope_scaling = llama3(8.0);
  } else if (name == "smollm2-135m") {
    c.vocab_size = 49152, c.hidden_size = 576, c.intermediate_size = 1536;
    c.num_hidden_layers = 30, c.num_attention_heads = 9, c.num_key_value_heads = 3;
    c.max_position_embeddings = 8192, c.rms_norm_eps = 1e-5, c.rope_theta = 100000.0;
    c.tie_word_embeddings = true;
  } else if (name == "qwen2.5-0.5b") {
    c.model_type = "qwen2", c.vocab_size = 151936, c.hidden_size = 896;
    c.intermediate_size = 4864, c.num_hidden_layers = 24, c.num_attention_heads = 14;
    c.num_key_value_heads = 2, c.max_position_embeddings = 32768, c.rms_norm_eps = 1e-6;
    c.rope_theta = 1000000.0, c.tie_word_embeddings = true, c.attention_bias = true;
  } else if (name == "tiny") {
    c.vocab_size = 256, c.hidden_size = 64, c.intermediate_size = 128;
    c.num_hidden_layers = 2, c.num_attention_heads = 4, c.num_key_value_heads = 2;
    c.max_position_embeddings = 256, c.rms_norm_eps = 1e-5;
  } else {
    KILN_FAIL(
        "[Llama] expected a config name among llama-3.2-1b, llama-3.1-8b, smollm2-135m, "
        "qwen2.5-0.5b, tiny, got '",
        name, "'");
  }
  c.num_key_value_heads = c.num_key_value_heads ? c.num_key_value_heads : c.num_attention_heads;
  return c;
}

}  // namespace kiln::nn
