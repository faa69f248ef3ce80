// Checkpoints and configs that do not fit their model: each is a kiln::Error
// naming the model, the parameter or key, what was expected and what came;
// never a guessed config, a silently dropped layer or a crash.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

std::string fixture_dir(const std::string& name) {
  return std::string(KILN_TEST_SOURCE_DIR) + "/fixtures/" + name;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
}

// A fresh folder holding `tensors` as model.safetensors and `config` as config.json.
std::string make_folder(const std::string& name, const std::map<std::string, Tensor>& tensors,
                        const std::string& config,
                        const std::map<std::string, std::string>& metadata = {}) {
  const std::string dir = kiln::testing::temp_path("ckpt_" + name);
  ::mkdir(dir.c_str(), 0700);
  std::remove((dir + "/config.json").c_str());
  kiln::nn::save_safetensors(dir + "/model.safetensors", tensors, metadata);
  if (!config.empty()) write_text(dir + "/config.json", config);
  return dir;
}

std::map<std::string, Tensor> fixture_tensors(const std::string& name) {
  kiln::nn::Checkpoint c = kiln::nn::Checkpoint::open(fixture_dir(name));
  std::map<std::string, Tensor> out;
  for (const std::string& n : c.names()) out[n] = c.tensor(n);
  return out;
}

// `text` with the first `from` replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

const kiln::Device kCpu = kiln::Device::cpu();

TEST(CheckpointErrors, Gpt2ConfigIsNeverGuessed) {
  auto tensors = fixture_tensors("gpt2");
  const std::string config = read_text(fixture_dir("gpt2") + "/config.json");
  // No config beside the file and none in its metadata.
  const std::string bare = make_folder("gpt2_bare", tensors, "");
  EXPECT_KILN_ERROR(kiln::nn::GPT2::from_safetensors(bare + "/model.safetensors", kCpu),
                    "kiln does not guess n_head");
  // d_model 32 with 4 heads (n_head = d_model / 64 would divide by zero), from
  // the caller, from config.json, and from the metadata.
  kiln::nn::GPT2Config c = kiln::nn::GPT2Config::from_json(config);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.d_model, 32);
  auto a = kiln::nn::GPT2::from_safetensors(bare + "/model.safetensors", c, kCpu);
  auto b = kiln::nn::GPT2::from_safetensors(fixture_dir("gpt2") + "/model.safetensors", kCpu);
  const std::string meta = make_folder("gpt2_meta", tensors, "", c.to_metadata());
  auto d = kiln::nn::GPT2::from_safetensors(meta + "/model.safetensors", kCpu);
  EXPECT_EQ(d.config().n_head, 4);
  Tensor ids = kiln::tensor(std::vector<int64_t>{1, 2, 3}, {1, 3});
  EXPECT_TENSOR_CLOSE(a.forward(ids), b.forward(ids));
  EXPECT_TENSOR_CLOSE(d.forward(ids), b.forward(ids));
}

TEST(CheckpointErrors, Gpt2ParametersMissingMisshapenOrExtra) {
  auto tensors = fixture_tensors("gpt2");
  const std::string config = read_text(fixture_dir("gpt2") + "/config.json");

  auto missing = tensors;
  missing.erase("transformer.h.1.attn.c_attn.weight");
  EXPECT_KILN_ERROR(
      kiln::nn::GPT2::from_pretrained(make_folder("gpt2_missing", missing, config), kCpu),
      "[GPT2] expected parameter 'transformer.h.1.attn.c_attn.weight' of shape [32, 96] in ");
  EXPECT_KILN_ERROR(
      kiln::nn::GPT2::from_pretrained(make_folder("gpt2_missing", missing, config), kCpu),
      "model.safetensors, got none");

  auto flat = tensors;
  flat["transformer.wte.weight"] = kiln::ones({32});
  EXPECT_KILN_ERROR(kiln::nn::GPT2::from_pretrained(make_folder("gpt2_1d", flat, config), kCpu),
                    "[GPT2] expected parameter 'transformer.wte.weight' of shape [96, 32] in ");
  EXPECT_KILN_ERROR(kiln::nn::GPT2::from_pretrained(make_folder("gpt2_1d", flat, config), kCpu),
                    "got shape [32]");

  // A config of one layer over a file of two: the second layer is not dropped silently.
  EXPECT_KILN_ERROR(
      kiln::nn::GPT2::from_pretrained(
          make_folder("gpt2_extra", tensors, replaced(config, "\"n_layer\": 2", "\"n_layer\": 1")),
          kCpu),
      "[GPT2] expected only the parameters of its config in ");
  // A config of three layers over a file of two.
  EXPECT_KILN_ERROR(
      kiln::nn::GPT2::from_pretrained(
          make_folder("gpt2_more", tensors, replaced(config, "\"n_layer\": 2", "\"n_layer\": 3")),
          kCpu),
      "'transformer.h.2.ln_1.weight' of shape [32]");
  // A different head count fits every shape: it loads (the file cannot tell).
  auto mha = kiln::nn::GPT2::from_pretrained(
      make_folder("gpt2_heads", tensors, replaced(config, "\"n_head\": 4", "\"n_head\": 8")), kCpu);
  EXPECT_EQ(mha.config().n_head, 8);
}

// A parameter stored as integers or bools is refused, naming the file and the
// tensor, not cast to the model's dtype (an int64 wte made an int64 GPT-2
// that failed later in layer_norm; an int32 weight loaded as its values).
TEST(CheckpointErrors, ParametersOfANonFloatingDtype) {
  auto gpt2 = fixture_tensors("gpt2");
  const std::string gpt2_config = read_text(fixture_dir("gpt2") + "/config.json");
  auto int_wte = gpt2;
  int_wte["transformer.wte.weight"] = int_wte["transformer.wte.weight"].to(kiln::kInt64);
  const std::string dir = make_folder("gpt2_int_wte", int_wte, gpt2_config);
  // The model's dtype comes from wte when none is given.
  EXPECT_KILN_ERROR(kiln::nn::GPT2::from_pretrained(dir, kCpu),
                    "[GPT2] expected parameter 'transformer.wte.weight' of a floating dtype in ");
  EXPECT_KILN_ERROR(kiln::nn::GPT2::from_pretrained(dir, kCpu),
                    "(the model's dtype when none is given), got int64");
  // With a dtype given, the parameter itself is refused.
  EXPECT_KILN_ERROR(kiln::nn::GPT2::from_pretrained(dir, kCpu, kiln::kFloat32),
                    "[GPT2] expected parameter 'transformer.wte.weight' of a floating dtype in ");
  auto bool_bias = gpt2;
  bool_bias["transformer.h.1.ln_2.bias"] = kiln::ones({32}, kiln::kBool);
  EXPECT_KILN_ERROR(
      kiln::nn::GPT2::from_pretrained(make_folder("gpt2_bool", bool_bias, gpt2_config), kCpu),
      "expected parameter 'transformer.h.1.ln_2.bias' of a floating dtype in ");

  auto llama = fixture_tensors("llama_gqa");
  const std::string llama_config = read_text(fixture_dir("llama_gqa") + "/config.json");
  auto int_q = llama;
  int_q["model.layers.1.self_attn.q_proj.weight"] =
      int_q["model.layers.1.self_attn.q_proj.weight"].to(kiln::kInt32);
  EXPECT_KILN_ERROR(
      kiln::nn::Llama::from_pretrained(make_folder("ll_int", int_q, llama_config), kCpu),
      "[Llama] expected parameter 'model.layers.1.self_attn.q_proj.weight' of a floating dtype "
      "in ");
  auto int_embed = llama;
  int_embed["model.embed_tokens.weight"] = int_embed["model.embed_tokens.weight"].to(kiln::kInt8);
  EXPECT_KILN_ERROR(
      kiln::nn::Llama::from_pretrained(make_folder("ll_int_embed", int_embed, llama_config), kCpu),
      "(the model's dtype when none is given), got int8");
  // A float64 checkpoint converts to the dtype asked for.
  auto wide = llama;
  for (auto& [name, t] : wide) t = t.to(kiln::kFloat64);
  auto m = kiln::nn::Llama::from_pretrained(make_folder("ll_f64", wide, llama_config), kCpu,
                                            kiln::kFloat32);
  EXPECT_EQ(m.dtype(), kiln::kFloat32);
  // A random model of a non-floating dtype is refused up front.
  EXPECT_KILN_ERROR(kiln::nn::GPT2::random(kiln::nn::GPT2Config::named("tiny"), kiln::kInt64, kCpu),
                    "[GPT2] expected a floating dtype, got int64");
  // So is a conversion of a model to one (its floating weights would be truncated).
  EXPECT_KILN_ERROR(m.to(kCpu, kiln::kInt32),
                    "[to] expected a floating dtype for a module's floating tensors, got int32");
  EXPECT_EQ(m.dtype(), kiln::kFloat32);
  EXPECT_EQ(m.embed_tokens.weight.dtype(), kiln::kFloat32);
}

TEST(CheckpointErrors, Gpt2Configs) {
  const std::string config = read_text(fixture_dir("gpt2") + "/config.json");
  auto bad = [&](const std::string& from, const std::string& to, const std::string& message) {
    EXPECT_KILN_ERROR(kiln::nn::GPT2Config::from_json(replaced(config, from, to)), message);
  };
  bad("\"n_head\": 4", "\"n_head\": 5", "[GPT2] expected n_embd divisible by n_head, got 32 and 5");
  bad("\"n_head\": 4", "\"n_head\": 0", "expected positive n_layer, n_head");
  bad("\"n_head\": 4", "\"n_head\": \"4\"", "[GPT2] expected an integer \"n_head\" in");
  bad("\"n_head\": 4", "\"n_head\": 4.5", "got 4.5");
  bad("\"n_head\": 4", "\"n_heads\": 4",
      "expected an integer \"n_head\" in a GPT-2 config, got none");
  bad("\"n_layer\": 2", "\"n_layer\": -2", "expected positive n_layer");
  // Note [Layer counts]: refused before any block is built (1e12 ran out of memory).
  bad("\"n_layer\": 2", "\"n_layer\": 1000000000000",
      "[GPT2] expected n_layer in [1, 65536], got 1000000000000");
  bad("\"n_inner\": null", "\"n_inner\": -5",
      "[GPT2] expected n_inner >= 0 (0: 4 * n_embd), got -5");
  bad("\"gelu_new\"", "\"relu\"", "expected activation_function gelu_new");
  bad("\"model_type\": \"gpt2\"", "\"model_type\": \"llama\"", "expected model_type \"gpt2\"");
  bad("\"reorder_and_upcast_attn\": false", "\"reorder_and_upcast_attn\": true",
      "expected reorder_and_upcast_attn false");
  EXPECT_KILN_ERROR(kiln::nn::GPT2Config::from_json("[1]"), "expected a JSON object in");
  EXPECT_KILN_ERROR(kiln::nn::GPT2Config::from_json("{"), "[GPT2] expected JSON in");
  EXPECT_KILN_ERROR(kiln::nn::GPT2Config::from_json_file("/nonexistent/config.json"),
                    "expected a readable file");
  EXPECT_KILN_ERROR(kiln::nn::GPT2Config::named("gpt5"), "expected a config name among gpt2");
  kiln::nn::GPT2Config c;
  c.d_model = 100, c.n_head = 64;
  EXPECT_KILN_ERROR(kiln::nn::GPT2::random(c, kiln::kFloat32, kCpu), "divisible by n_head");
  kiln::nn::GPT2Config deep = kiln::nn::GPT2Config::named("tiny");
  deep.n_layer = int64_t{1} << 40;
  EXPECT_KILN_ERROR(kiln::nn::GPT2::random(deep, kiln::kFloat32, kCpu),
                    "[GPT2] expected n_layer in [1, 65536], got 1099511627776");
  // Metadata values are strings; numbers among them are read as numbers, others refused.
  EXPECT_KILN_ERROR(kiln::nn::GPT2Config::from_metadata(
                        {{"n_head", "four"}, {"n_layer", "2"}, {"n_embd", "32"}}, "x"),
                    "expected an integer \"n_head\" in the metadata of x, got \"four\"");
}

TEST(CheckpointErrors, LlamaParameters) {
  auto tensors = fixture_tensors("llama_gqa");
  const std::string config = read_text(fixture_dir("llama_gqa") + "/config.json");
  auto untied = tensors;
  untied.erase("lm_head.weight");
  EXPECT_KILN_ERROR(kiln::nn::Llama::from_pretrained(make_folder("ll_head", untied, config), kCpu),
                    "[Llama] expected parameter 'lm_head.weight' of shape [96, 32] in ");
  // The same file read as multi-head: k_proj has the GQA shape.
  EXPECT_KILN_ERROR(
      kiln::nn::Llama::from_pretrained(
          make_folder("ll_mha", tensors,
                      replaced(config, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 4")),
          kCpu),
      "'model.layers.0.self_attn.k_proj.weight' of shape [32, 32] in ");
  auto extra = tensors;
  extra["model.layers.0.self_attn.q_norm.weight"] = kiln::ones({8});  // a Qwen 3 checkpoint?
  EXPECT_KILN_ERROR(kiln::nn::Llama::from_pretrained(make_folder("ll_extra", extra, config), kCpu),
                    "got 'model.layers.0.self_attn.q_norm.weight'");
  // A tied config ignores a saved lm_head; an old checkpoint's inv_freq is ignored.
  auto old = tensors;
  old["model.layers.0.self_attn.rotary_emb.inv_freq"] = kiln::ones({4});
  auto m = kiln::nn::Llama::from_pretrained(
      make_folder(
          "ll_tied", old,
          replaced(config, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true")),
      kCpu);
  EXPECT_FALSE(m.lm_head.has_value());
  EXPECT_KILN_ERROR(m.make_cache(1, 65), "[Llama] expected a cache of at most 64 slots");
}

TEST(CheckpointErrors, LlamaConfigs) {
  const std::string config = read_text(fixture_dir("llama_gqa") + "/config.json");
  auto bad = [&](const std::string& from, const std::string& to, const std::string& message) {
    EXPECT_KILN_ERROR(kiln::nn::LlamaConfig::from_json(replaced(config, from, to)), message);
  };
  bad("\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\"",
      "[Llama] expected rope_scaling type default, linear or llama3 in a Llama config, got "
      "\"yarn\"");
  bad("\"low_freq_factor\": 1.0", "\"low_freq_factor\": 5.0",
      "expected llama3 rope_scaling with 0 < low_freq_factor < high_freq_factor");
  bad("\"factor\": 4.0", "\"factor\": \"4\"", "expected a number \"factor\" in rope_scaling of");
  bad("\"silu\"", "\"gelu\"", "[Llama] expected hidden_act \"silu\"");
  bad("\"model_type\": \"llama\"", "\"model_type\": \"qwen3\"",
      "expected model_type llama, mistral or qwen2");
  bad("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3",
      "expected num_attention_heads divisible by num_key_value_heads, got 4 and 3");
  bad("\"hidden_size\": 32", "\"hidden_sizes\": 32", "expected an integer \"hidden_size\"");
  bad("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": \"no\"",
      "expected a boolean \"tie_word_embeddings\"");
  bad("\"rope_theta\": 10000.0", "\"rope_theta\": -1",
      "expected positive rms_norm_eps and rope_theta");
  bad("\"head_dim\": 8", "\"head_dim\": 7", "expected an even head dim");
  // A head dim that would allocate terabytes of rotary tables is an error, not std::bad_alloc.
  bad("\"head_dim\": 8", "\"head_dim\": 1099511627776",
      "[Llama] expected an even head dim of at most 65536 for rotary embeddings, got "
      "1099511627776");
  bad("\"head_dim\": 8", "\"head_dim\": -8",
      "[Llama] expected head_dim >= 0 (0: hidden_size / num_attention_heads), got -8");
  bad("\"num_attention_heads\": 4", "\"num_attention_heads\": 0",
      "expected positive vocab_size, hidden_size");
  bad("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 0",
      "expected positive vocab_size, hidden_size");
  EXPECT_KILN_ERROR(kiln::nn::LlamaConfig::from_json(
                        replaced(replaced(config, "\"head_dim\": 8", "\"head_dim\": 0"),
                                 "\"hidden_size\": 32", "\"hidden_size\": 30")),
                    "[Llama] expected hidden_size divisible by num_attention_heads (or a "
                    "head_dim), got 30 and 4");
  EXPECT_KILN_ERROR(kiln::nn::rope_inverse_frequencies(int64_t{1} << 40, 10000.0, {}),
                    "[rope] expected an even head dim in [2, 65536], got 1099511627776");
  EXPECT_KILN_ERROR(
      kiln::nn::RotaryEmbedding::make(int64_t{1} << 40, 16, 10000.0, {}, kiln::kFloat32),
      "[rope] expected an even head dim in [2, 65536]");
  bad("\"rope_scaling\": {", "\"rope_scaling\": 3, \"x\": {",
      "expected an object \"rope_scaling\"");
  EXPECT_KILN_ERROR(kiln::nn::LlamaConfig::named("llama-9"), "expected a config name among");
  // Note [Layer counts]
  bad("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1000000000000",
      "[Llama] expected num_hidden_layers in [1, 65536], got 1000000000000");
  kiln::nn::LlamaConfig deep = kiln::nn::LlamaConfig::named("tiny");
  deep.num_hidden_layers = 65537;
  EXPECT_KILN_ERROR(kiln::nn::Llama::random(deep, kiln::kFloat32, kCpu),
                    "expected num_hidden_layers in [1, 65536], got 65537");
  EXPECT_KILN_ERROR(kiln::nn::KVCache::make(int64_t{1000000000000}, 1, 1, 1, 1,
                                            kiln::TensorOptions(kiln::kFloat32)),
                    "[KVCache] expected layers in [0, 65536], got 1000000000000");
  EXPECT_EQ(kiln::nn::KVCache::make(0, 1, 1, 1, 1, kiln::TensorOptions(kiln::kFloat32)).k.size(),
            0u);
}

// Note [Sliding window]: which layers slide, and configs that spell it out.
TEST(CheckpointErrors, SlidingWindowConfigs) {
  const std::string config = read_text(fixture_dir("llama_gqa") + "/config.json");
  auto with = [&](const std::string& fields) {
    return kiln::nn::LlamaConfig::from_json(
        replaced(config, "\"vocab_size\": 96", "\"vocab_size\": 96, " + fields));
  };
  auto as = [&](const std::string& type, const std::string& fields) {
    return kiln::nn::LlamaConfig::from_json(replaced(
        config, "\"model_type\": \"llama\"", "\"model_type\": \"" + type + "\", " + fields));
  };
  kiln::nn::LlamaConfig m = as("mistral", "\"sliding_window\": 5");
  EXPECT_EQ(m.window_of(0), 5);
  EXPECT_EQ(m.window_of(1), 5);
  EXPECT_EQ(as("mistral", "\"sliding_window\": null").window_of(1), 0);
  // Llama ignores the field; Qwen 2 only with use_sliding_window, from max_window_layers on.
  EXPECT_EQ(with("\"sliding_window\": 5").window_of(1), 0);
  EXPECT_EQ(as("qwen2", "\"sliding_window\": 5").window_of(1), 0);
  kiln::nn::LlamaConfig q =
      as("qwen2", "\"use_sliding_window\": true, \"sliding_window\": 5, \"max_window_layers\": 1");
  EXPECT_EQ(q.window_of(0), 0);
  EXPECT_EQ(q.window_of(1), 5);
  EXPECT_EQ(as("qwen2",
               "\"use_sliding_window\": true, \"sliding_window\": 5, "
               "\"layer_types\": [\"full_attention\", \"full_attention\"]")
                .window_of(1),
            0);  // max_window_layers defaults to 28
  EXPECT_KILN_ERROR(
      as("mistral",
         "\"sliding_window\": 5, \"layer_types\": [\"full_attention\", "
         "\"sliding_attention\"]"),
      "[Llama] expected layer_types[0] in a Llama config to be \"sliding_attention\" "
      "(from model_type, sliding_window and max_window_layers), got \"full_attention\"");
  EXPECT_KILN_ERROR(with("\"layer_types\": [\"full_attention\"]"),
                    "[Llama] expected layer_types in a Llama config to list 2 layers, got "
                    "[\"full_attention\"]");
  EXPECT_KILN_ERROR(as("mistral", "\"sliding_window\": -2"),
                    "[Llama] expected sliding_window and max_window_layers >= 0, got -2 and 0");
}

// Note [Atomic loads]: a lazy entry whose computation fails (a bad index
// upstream) raises in the checking pass, before any parameter is replaced
// (the weight used to be replaced already when the bias failed).
TEST(CheckpointErrors, LoadStateDictWithAFailingLazyValueChangesNothing) {
  kiln::nn::Linear lin = kiln::nn::Linear::empty(4, 3, true, kiln::TensorOptions(kiln::kFloat32));
  {
    kiln::EagerGuard eager;
    lin.weight.fill_(1.0);
    lin.bias->fill_(1.0);
  }
  kiln::nn::StateDict sd;
  sd["weight"] = kiln::full({3, 4}, 5.0, kiln::TensorOptions(kiln::kFloat64));
  sd["bias"] = kiln::index_select(kiln::ones({3}, kiln::TensorOptions(kiln::kFloat64)), 0,
                                  kiln::tensor<int64_t>({0, 1, 7}));
  EXPECT_KILN_ERROR(kiln::nn::load_state_dict(kiln::nn::visitor_of(lin), sd, "lin"),
                    "index_select");
  kiln::EagerGuard eager;
  EXPECT_TENSOR_CLOSE(lin.weight, kiln::ones({3, 4}));
  EXPECT_TENSOR_CLOSE(*lin.bias, kiln::ones({3}));
}

// Note [Atomic loads]: a state dict that fails any check (a missing or
// misshapen entry, an undefined tensor, a strict extra) replaces no parameter,
// however late in the module's order the mistake is.
TEST(CheckpointErrors, LoadStateDictThatFailsChangesNothing) {
  kiln::EagerGuard eager;
  kiln::nn::GPT2Config c;
  c.n_layer = 2, c.d_model = 32, c.n_head = 4, c.vocab = 50, c.n_positions = 16;
  auto m = kiln::nn::GPT2::random(c, kiln::kFloat32, kCpu, /*seed=*/1);
  auto other = kiln::nn::GPT2::random(c, kiln::kFloat32, kCpu, /*seed=*/2);
  kiln::nn::StateDict before;
  for (const auto& [name, t] : kiln::nn::state_dict(m)) before.emplace(name, t.clone());
  auto unchanged = [&] {
    const kiln::nn::StateDict now = kiln::nn::state_dict(m);
    ASSERT_EQ(now.size(), before.size());
    for (const auto& [name, t] : now) {
      SCOPED_TRACE(name);
      EXPECT_TENSOR_CLOSE(t, before.at(name));
    }
  };
  const kiln::nn::StateDict good = kiln::nn::state_dict(other);

  auto misshapen = good;  // the last block's, after everything before it would have loaded
  misshapen["h.1.mlp.c_proj.weight"] = kiln::ones({32, 127});
  EXPECT_KILN_ERROR(kiln::nn::load_state_dict(m, misshapen, "GPT2"),
                    "[GPT2] expected parameter 'h.1.mlp.c_proj.weight' of shape [32, 128] in the "
                    "state dict, got shape [32, 127]");
  unchanged();

  auto missing = good;
  missing.erase("ln_f.bias");
  EXPECT_KILN_ERROR(kiln::nn::load_state_dict(m, missing, "GPT2"),
                    "[GPT2] expected parameter 'ln_f.bias' of shape [32] in the state dict, got "
                    "none");
  unchanged();

  auto undefined = good;
  undefined["h.1.ln_2.weight"] = Tensor();
  EXPECT_KILN_ERROR(kiln::nn::load_state_dict(m, undefined, "GPT2"),
                    "[GPT2] expected parameter 'h.1.ln_2.weight' of shape [32] in the state dict, "
                    "got an undefined tensor");
  unchanged();

  auto extra = good;
  extra["h.2.ln_1.weight"] = kiln::ones({32});
  EXPECT_KILN_ERROR(kiln::nn::load_state_dict(m, extra, "GPT2"),
                    "[GPT2] expected only its own parameters in the state dict, got "
                    "'h.2.ln_1.weight'");
  unchanged();

  auto meta = good;
  meta["wpe.weight"] = kiln::empty({16, 32}, kiln::TensorOptions(kiln::Device::meta()));
  EXPECT_KILN_ERROR(kiln::nn::load_state_dict(m, meta, "GPT2"),
                    "[GPT2] expected parameter 'wpe.weight' in the state dict to hold values for a "
                    "module on cpu, got a meta tensor");
  unchanged();

  // Not strict: the extra is ignored and everything else loads.
  kiln::nn::load_state_dict(m, extra, "GPT2", /*strict=*/false);
  EXPECT_TENSOR_CLOSE(kiln::nn::state_dict(m).at("h.1.mlp.c_proj.weight"),
                      good.at("h.1.mlp.c_proj.weight"));

  // A module with an undefined parameter is named as such.
  kiln::nn::LayerNorm ln;
  EXPECT_KILN_ERROR(kiln::nn::load_state_dict(ln, {{"weight", kiln::ones({4})}}, "LayerNorm"),
                    "[LayerNorm] expected parameter 'weight' of the module to be a defined tensor");
}

}  // namespace
