// kiln::nn's modules against references written out with plain ops: named
// parameters and state dicts, to(), the norms, rotary embeddings,
// grouped-query attention, the static KV cache with one position or one per
// row, and decode steps against the full forward.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <utility>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

Tensor rnd(std::vector<int64_t> sizes, uint64_t seed, const char* layout = "contiguous") {
  return kiln::testing::random_tensor(sizes, kiln::kFloat32, layout, seed, -1, 1);
}

// Every tensor of `sd` copied (load_state_dict of a state dict shares its tensors).
kiln::nn::StateDict copies(const kiln::nn::StateDict& sd) {
  kiln::nn::StateDict out;
  for (const auto& [name, t] : sd) out.emplace(name, t.clone());
  return out;
}

kiln::nn::LlamaConfig tiny_llama() {
  kiln::nn::LlamaConfig c = kiln::nn::LlamaConfig::named("tiny");
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 4;
  c.rope_scaling.original_max_position_embeddings = 16;
  return c;
}

TEST(NnModules, NamedParametersUseHuggingFaceNames) {
  kiln::nn::Llama m = kiln::nn::Llama::random(tiny_llama(), kiln::kFloat32, kiln::Device::cpu());
  auto params = kiln::nn::named_parameters(m);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& [name, t] : params) shapes[name] = t.sizes().vec();
  EXPECT_EQ(shapes.size(), 1u + 2 * 9 + 1 + 1);  // embed, 2 x 9 per layer, norm, lm_head
  EXPECT_EQ(shapes["model.embed_tokens.weight"], (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(shapes["model.layers.1.self_attn.q_proj.weight"], (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(shapes["model.layers.1.self_attn.k_proj.weight"], (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(shapes["model.layers.0.mlp.down_proj.weight"], (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(shapes["model.layers.0.post_attention_layernorm.weight"], (std::vector<int64_t>{64}));
  EXPECT_EQ(shapes["lm_head.weight"], (std::vector<int64_t>{256, 64}));
  auto buffers = kiln::nn::named_buffers(m);
  ASSERT_EQ(buffers.size(), 3u);  // cos, sin, first_half
  EXPECT_EQ(buffers[0].first, "model.rotary_emb.cos");

  kiln::nn::GPT2Config gc;
  gc.n_layer = 2, gc.d_model = 32, gc.n_head = 4, gc.vocab = 50, gc.n_positions = 16;
  kiln::nn::GPT2 g = kiln::nn::GPT2::random(gc, kiln::kFloat32, kiln::Device::cpu());
  auto sd = kiln::nn::state_dict(g);
  EXPECT_EQ(sd.size(), 2u + 2 * 12 + 2);
  EXPECT_EQ(sd.at("h.1.attn.c_attn.weight").sizes(), (std::vector<int64_t>{96, 32}));
  EXPECT_EQ(sd.at("h.0.mlp.c_proj.bias").sizes(), (std::vector<int64_t>{32}));
  EXPECT_EQ(sd.at("ln_f.weight").sizes(), (std::vector<int64_t>{32}));
}

// A state dict saved to a file and loaded back gives the same model.
TEST(NnModules, StateDictRoundTripsThroughACheckpoint) {
  const kiln::nn::LlamaConfig c = tiny_llama();
  kiln::nn::Llama a = kiln::nn::Llama::random(c, kiln::kFloat32, kiln::Device::cpu(), 7);
  const std::string path = kiln::testing::temp_path("llama_sd.safetensors");
  kiln::nn::save_safetensors(path, kiln::nn::state_dict(a));
  kiln::nn::Llama b = kiln::nn::Llama::from_checkpoint(path, c, kiln::Device::cpu());
  for (auto& [name, t] : kiln::nn::state_dict(b)) {
    EXPECT_TENSOR_CLOSE(t, kiln::nn::state_dict(a).at(name));
  }
  Tensor ids = kiln::tensor(std::vector<int64_t>{1, 5, 9, 200}, {1, 4});
  EXPECT_TENSOR_CLOSE(b.forward(ids), a.forward(ids));
  // load_state_dict into a third model with other seeds: the same again.
  kiln::nn::Llama d = kiln::nn::Llama::random(c, kiln::kFloat32, kiln::Device::cpu(), 8);
  kiln::nn::load_state_dict(d, kiln::nn::state_dict(a), "Llama");
  EXPECT_TENSOR_CLOSE(d.forward(ids), a.forward(ids));
  std::remove(path.c_str());
}

TEST(NnModules, ToConvertsParametersAndBuffers) {
  kiln::nn::Llama m = kiln::nn::Llama::random(tiny_llama(), kiln::kFloat32, kiln::Device::cpu());
  m.to(kiln::Device::cpu(), kiln::kBFloat16);
  EXPECT_EQ(m.dtype(), kiln::kBFloat16);
  for (auto& [name, t] : kiln::nn::named_parameters(m))
    EXPECT_EQ(t.dtype(), kiln::kBFloat16) << name;
  for (auto& [name, t] : kiln::nn::named_buffers(m)) {
    // Floating buffers follow the dtype; the rotary selection stays bool.
    EXPECT_EQ(t.dtype(), kiln::is_floating(t.dtype()) ? kiln::kBFloat16 : kiln::kBool) << name;
  }
  EXPECT_EQ(m.rotary.first_half.dtype(), kiln::kBool);
  Tensor logits = m.forward(kiln::tensor(std::vector<int64_t>{3, 4}, {1, 2}));
  EXPECT_EQ(logits.dtype(), kiln::kBFloat16);
  // The generic form on a single layer.
  kiln::nn::Linear l{rnd({3, 4}, 1), rnd({3}, 2)};
  kiln::nn::to(l, kiln::Device::cpu(), kiln::kFloat64);
  EXPECT_EQ(l.weight.dtype(), kiln::kFloat64);
  EXPECT_EQ(l.bias->dtype(), kiln::kFloat64);
}

// Note [Fused projections]: q/k/v and gate/up run as one product each while
// their weights are views of one tensor, and follow the parts: an in-place
// write is seen, a replaced part is honored (eagerly, lazily and compiled).
TEST(NnModules, FusedProjectionsFollowTheirParts) {
  kiln::nn::LlamaConfig c = tiny_llama();
  c.attention_bias = true;  // biases on q, k and v too
  c.mlp_bias = true;        // and on gate and up
  kiln::nn::Llama m = kiln::nn::Llama::random(c, kiln::kFloat32, kiln::Device::cpu(), 5);
  kiln::nn::Attention& at = m.layers[0].self_attn;
  kiln::nn::GatedMLP& mlp = m.layers[1].mlp;
  // Fused on CUDA by random(); on the CPU when asked.
  ASSERT_FALSE(at.qkv.holds({&at.q_proj, &at.k_proj, &at.v_proj}));
  m.fuse_projections();
  ASSERT_TRUE(at.qkv.holds({&at.q_proj, &at.k_proj, &at.v_proj}));
  ASSERT_TRUE(mlp.gate_up.holds({&mlp.gate_proj, &mlp.up_proj}));
  EXPECT_EQ(at.qkv.weight.sizes(), (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(at.k_proj.weight.sizes(), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(at.qkv.bias->sizes(), (std::vector<int64_t>{128}));
  // The reference: copies of the values in tensors of their own
  // (load_state_dict replaces the parameters, so nothing is fused).
  kiln::nn::Llama ref = kiln::nn::Llama::random(c, kiln::kFloat32, kiln::Device::cpu(), 6);
  kiln::nn::load_state_dict(ref, copies(kiln::nn::state_dict(m)), "Llama");
  kiln::nn::Attention& rat = ref.layers[0].self_attn;
  ASSERT_FALSE(rat.qkv.holds({&rat.q_proj, &rat.k_proj, &rat.v_proj}));
  Tensor ids = kiln::tensor(std::vector<int64_t>{1, 5, 9, 200, 7}, {1, 5});
  EXPECT_TENSOR_CLOSE_TOL(m.forward(ids), ref.forward(ids), 1e-4, 1e-5);

  auto decode = [](kiln::nn::Llama& model) {
    auto cache = std::make_shared<kiln::nn::Llama::Cache>(model.make_cache(1, 8));
    return std::make_pair(cache, kiln::jit::compile(
                                     [&model, cache](const Tensor& ids, const Tensor& pos) {
                                       return model.decode_step(ids, pos, *cache);
                                     },
                                     {.name = "fused-decode"}));
  };
  auto [cache, step] = decode(m);
  auto [ref_cache, ref_step] = decode(ref);
  Tensor one = kiln::tensor(std::vector<int64_t>{3}, {1, 1});
  auto at_pos = [](int64_t p) { return kiln::tensor(std::vector<int64_t>{p}, {1}); };
  EXPECT_TENSOR_CLOSE_TOL(step(one, at_pos(0)), ref_step(one, at_pos(0)), 1e-4, 1e-5);

  // Written in place through a part: the fused tensor is that memory.
  {
    kiln::EagerGuard eager;
    at.k_proj.weight.mul_(0.5);
    rat.k_proj.weight.mul_(0.5);
    mlp.up_proj.bias->add_(0.25);
    ref.layers[1].mlp.up_proj.bias->add_(0.25);
  }
  EXPECT_TRUE(at.qkv.holds({&at.q_proj, &at.k_proj, &at.v_proj}));
  EXPECT_TENSOR_CLOSE_TOL(m.forward(ids), ref.forward(ids), 1e-4, 1e-5);
  EXPECT_TENSOR_CLOSE_TOL(step(one, at_pos(1)), ref_step(one, at_pos(1)), 1e-4, 1e-5);
  EXPECT_EQ(step.stats().entries, 1);

  // A part replaced by another tensor: its own product from then on, and
  // the compiled step's captured-storage guard fails.
  const Tensor v = rnd({32, 64}, 21);
  at.v_proj.weight = v.clone();
  rat.v_proj.weight = v.clone();
  EXPECT_FALSE(at.qkv.holds({&at.q_proj, &at.k_proj, &at.v_proj}));
  EXPECT_TENSOR_CLOSE_TOL(m.forward(ids), ref.forward(ids), 1e-4, 1e-5);
  EXPECT_TENSOR_CLOSE_TOL(step(one, at_pos(2)), ref_step(one, at_pos(2)), 1e-4, 1e-5);
  EXPECT_EQ(step.stats().entries, 2);
  // Fused anew.
  m.fuse_projections();
  // to() on the CPU drops the fused tensors with the old parts.
  {
    kiln::nn::Llama moved = m;
    moved.to(kiln::Device::cpu(), kiln::kFloat64);
    EXPECT_FALSE(moved.layers[0].self_attn.qkv.weight.defined());
    EXPECT_TRUE(at.qkv.holds({&at.q_proj, &at.k_proj, &at.v_proj}));  // m itself keeps its own
  }
  EXPECT_TRUE(at.qkv.holds({&at.q_proj, &at.k_proj, &at.v_proj}));
  EXPECT_TENSOR_CLOSE_TOL(m.forward(ids), ref.forward(ids), 1e-4, 1e-5);
  EXPECT_TENSOR_CLOSE_TOL(step(one, at_pos(3)), ref_step(one, at_pos(3)), 1e-4, 1e-5);
  EXPECT_EQ(step.stats().entries, 3);
  // Every part replaced (load_state_dict): the fused tensor alone is held.
  kiln::nn::Llama other = kiln::nn::Llama::random(c, kiln::kFloat32, kiln::Device::cpu(), 9);
  kiln::nn::load_state_dict(m, copies(kiln::nn::state_dict(other)), "Llama");
  kiln::nn::load_state_dict(ref, copies(kiln::nn::state_dict(other)), "Llama");
  EXPECT_TENSOR_CLOSE_TOL(step(one, at_pos(4)), ref_step(one, at_pos(4)), 1e-4, 1e-5);
  EXPECT_EQ(step.stats().entries, 4);

  // Parts that cannot be one product are left alone.
  kiln::nn::Linear a{rnd({4, 8}, 22), rnd({4}, 23)}, b{rnd({4, 8}, 24), std::nullopt},
      wide{rnd({4, 9}, 25), std::nullopt};
  const Tensor a_weight = a.weight;
  EXPECT_FALSE(kiln::nn::FusedLinears::fuse({&a, &b}).weight.defined());
  EXPECT_FALSE(kiln::nn::FusedLinears::fuse({&b, &wide}).weight.defined());
  EXPECT_EQ(a.weight.impl(), a_weight.impl());
}

// On CUDA a model fuses its projections by itself, and a fused layer with
// biases on q, k, v, gate and up (Qwen 2's kind) gives the unfused model's
// logits: a whole sequence, and compiled decode steps at one and four rows
// (the few-row products with the norm as their prologue).
TEST(NnModules, FusedProjectionsOnCudaMatchUnfused) {
  if (!kiln::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  kiln::nn::LlamaConfig c = tiny_llama();
  c.attention_bias = true;
  c.mlp_bias = true;
  const kiln::Device gpu = kiln::Device::cuda();
  kiln::nn::Llama m = kiln::nn::Llama::random(c, kiln::kFloat32, gpu, 11);
  const kiln::nn::Attention& at = m.layers[0].self_attn;
  const kiln::nn::GatedMLP& mlp = m.layers[1].mlp;
  ASSERT_TRUE(at.qkv.holds({&at.q_proj, &at.k_proj, &at.v_proj}));
  ASSERT_TRUE(mlp.gate_up.holds({&mlp.gate_proj, &mlp.up_proj}));
  kiln::nn::Llama ref = kiln::nn::Llama::random(c, kiln::kFloat32, gpu, 12);
  kiln::nn::load_state_dict(ref, copies(kiln::nn::state_dict(m)), "Llama");
  const kiln::nn::Attention& rat = ref.layers[0].self_attn;
  ASSERT_FALSE(rat.qkv.holds({&rat.q_proj, &rat.k_proj, &rat.v_proj}));
  for (int64_t rows : {1, 4}) {
    std::vector<int64_t> tokens;
    for (int64_t i = 0; i < rows * 5; ++i) tokens.push_back((i * 37 + 3) % 256);
    const Tensor ids = kiln::tensor(tokens, {rows, 5}).to(gpu);
    EXPECT_TENSOR_CLOSE_TOL(m.forward(ids).cpu(), ref.forward(ids).cpu(), 1e-4, 1e-4);
    auto cache = m.make_cache(rows, 8), ref_cache = ref.make_cache(rows, 8);
    auto step = kiln::jit::compile(
        [&](const Tensor& i, const Tensor& p) { return m.decode_step(i, p, cache); });
    auto ref_step = kiln::jit::compile(
        [&](const Tensor& i, const Tensor& p) { return ref.decode_step(i, p, ref_cache); });
    for (int64_t pos = 0; pos < 3; ++pos) {
      const Tensor one = ids.narrow(1, pos, 1).contiguous();
      const Tensor p = kiln::full({1}, pos, kiln::TensorOptions(kiln::kInt64)).to(gpu);
      SCOPED_TRACE(std::to_string(rows) + " rows, position " + std::to_string(pos));
      EXPECT_TENSOR_CLOSE_TOL(step(one, p).cpu(), ref_step(one, p).cpu(), 1e-4, 1e-4);
    }
  }
}

TEST(NnModules, NormsAgainstTheirFormulas) {
  kiln::EagerGuard eager;
  Tensor x = rnd({3, 5, 8}, 3, "transposed");
  kiln::nn::RMSNorm rms{rnd({8}, 4), 1e-5};
  Tensor ref = x * kiln::rsqrt(kiln::mean(x * x, {-1}, true) + 1e-5) * rms.weight;
  EXPECT_TENSOR_CLOSE(rms.forward(x), ref);
  kiln::nn::LayerNorm ln{rnd({8}, 5), rnd({8}, 6), 1e-5};
  Tensor mu = kiln::mean(x, {-1}, true);
  Tensor var = kiln::mean((x - mu) * (x - mu), {-1}, true);
  EXPECT_TENSOR_CLOSE(ln.forward(x), (x - mu) * kiln::rsqrt(var + 1e-5) * ln.weight + ln.bias);
  kiln::nn::Embedding emb{rnd({10, 4}, 7)};
  EXPECT_TENSOR_CLOSE(emb.forward(kiln::tensor(std::vector<int64_t>{9, 0}, {2})),
                      kiln::stack({emb.weight[9], emb.weight[0]}));
}

TEST(NnModules, MlpsAgainstTheirFormulas) {
  kiln::EagerGuard eager;
  Tensor x = rnd({2, 3, 8}, 8);
  kiln::nn::GatedMLP g{{rnd({16, 8}, 9)}, {rnd({16, 8}, 10)}, {rnd({8, 16}, 11)}};
  Tensor gate = kiln::matmul(x, g.gate_proj.weight.t()), up = kiln::matmul(x, g.up_proj.weight.t());
  Tensor ref = kiln::matmul(gate * kiln::sigmoid(gate) * up, g.down_proj.weight.t());
  EXPECT_TENSOR_CLOSE(g.forward(x), ref);
  kiln::nn::MLP m{{rnd({16, 8}, 12), rnd({16}, 13)}, {rnd({8, 16}, 14), rnd({8}, 15)}};
  EXPECT_TENSOR_CLOSE(m.forward(x), m.c_proj.forward(kiln::gelu(m.c_fc.forward(x), "tanh")));
}

// Rotary embeddings against the rotation written per pair of dims, and the
// Llama 3 frequencies against transformers' formula evaluated by hand.
TEST(NnModules, RotaryEmbeddings) {
  kiln::nn::RopeScaling none;
  std::vector<float> inv = kiln::nn::rope_inverse_frequencies(8, 100.0, none);
  ASSERT_EQ(inv.size(), 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_FLOAT_EQ(inv[i], static_cast<float>(std::pow(100.0, -i / 4.0)));
  kiln::nn::RopeScaling l3;
  l3.type = "llama3", l3.factor = 8, l3.low_freq_factor = 1, l3.high_freq_factor = 4;
  l3.original_max_position_embeddings = 64;
  std::vector<float> base = kiln::nn::rope_inverse_frequencies(16, 10000.0, none);
  std::vector<float> scaled = kiln::nn::rope_inverse_frequencies(16, 10000.0, l3);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const double wavelen = 2 * M_PI / base[i];
    if (wavelen < 64 / 4.0) {
      EXPECT_FLOAT_EQ(scaled[i], base[i]);
      ++kept;
    } else if (wavelen > 64 / 1.0) {
      EXPECT_FLOAT_EQ(scaled[i], base[i] / 8);
      ++divided;
    } else {
      const double smooth = (64 / wavelen - 1) / (4 - 1);
      EXPECT_NEAR(scaled[i], (1 - smooth) * base[i] / 8 + smooth * base[i], 1e-6 * base[i]);
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);

  kiln::EagerGuard eager;
  auto rope = kiln::nn::RotaryEmbedding::make(8, 32, 100.0, none, kiln::kFloat32);
  // x [B, H, T, 8] with row b, time t at position position(b, t), rotated pair by pair.
  auto manual = [&](const Tensor& x, auto position) {
    Tensor xc = x.contiguous();
    const int64_t b = x.size(0), h = x.size(1), t = x.size(2);
    std::vector<float> out(static_cast<size_t>(xc.numel()));
    const float* px = xc.data_ptr<float>();
    for (int64_t r = 0; r < b * h; ++r) {
      for (int64_t s = 0; s < t; ++s) {
        const float* in = px + (r * t + s) * 8;
        float* o = out.data() + (r * t + s) * 8;
        for (int64_t i = 0; i < 4; ++i) {
          const double a = static_cast<double>(static_cast<float>(position(r / h, s)) * inv[i]);
          o[i] = static_cast<float>(in[i] * std::cos(a) - in[i + 4] * std::sin(a));
          o[i + 4] = static_cast<float>(in[i + 4] * std::cos(a) + in[i] * std::sin(a));
        }
      }
    }
    return kiln::tensor(out, x.sizes());
  };
  Tensor x = rnd({2, 3, 5, 8}, 16, "transposed");  // [B, H, T, D]
  EXPECT_TENSOR_CLOSE(rope.apply(x), manual(x, [](int64_t, int64_t t) { return t; }));
  Tensor x1 = x.narrow(2, 0, 1);
  EXPECT_TENSOR_CLOSE(rope.apply_at(x1, kiln::full({}, 3, kiln::kInt64)),
                      manual(x1, [](int64_t, int64_t) { return 3; }));
  EXPECT_TENSOR_CLOSE(rope.apply_at(x1, kiln::tensor(std::vector<int64_t>{2, 31}, {2})),
                      manual(x1, [](int64_t b, int64_t) { return b ? 31 : 2; }));
  // A head dim that is not dense (Note [Rotary embeddings in one kernel] views it as pairs).
  Tensor spread = rnd({2, 3, 8, 5}, 17).transpose(-1, -2);
  EXPECT_TENSOR_CLOSE(rope.apply(spread), manual(spread, [](int64_t, int64_t t) { return t; }));
}

// Grouped-query attention against the same attention with each key/value
// head repeated for its query heads.
TEST(NnModules, GroupedQueryAttention) {
  for (bool lazy : {false, true}) {
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    Tensor q = rnd({2, 6, 5, 8}, 20, "transposed"), k = rnd({2, 2, 5, 8}, 21),
           v = rnd({2, 2, 5, 8}, 22);
    auto repeat_kv = [](const Tensor& t) {
      return t.unsqueeze(2).expand({2, 2, 3, t.size(2), 8}).reshape({2, 6, t.size(2), 8});
    };
    Tensor ref =
        kiln::scaled_dot_product_attention(q, repeat_kv(k), repeat_kv(v), std::nullopt, true);
    EXPECT_TENSOR_CLOSE(kiln::nn::causal_attention(q, k, v), ref);

    // Decode against a cache of 7 slots, row 0 at position 4 and row 1 at 2.
    Tensor kc = rnd({2, 2, 7, 8}, 23), vc = rnd({2, 2, 7, 8}, 24);
    Tensor q1 = rnd({2, 6, 1, 8}, 25);
    Tensor got =
        kiln::nn::decode_attention(q1, kc, vc, kiln::tensor(std::vector<int64_t>{4, 2}, {2}));
    for (int64_t b = 0; b < 2; ++b) {
      const int64_t p = b == 0 ? 4 : 2;
      Tensor kb = repeat_kv(kc.narrow(0, b, 1).narrow(2, 0, p + 1).expand({2, 2, p + 1, 8}))[0];
      Tensor vb = repeat_kv(vc.narrow(0, b, 1).narrow(2, 0, p + 1).expand({2, 2, p + 1, 8}))[0];
      EXPECT_TENSOR_CLOSE(got[b], kiln::scaled_dot_product_attention(q1[b], kb, vb));
    }
  }
}

// Note [Sliding window]: each query against the keys it may see, cut out by
// narrow() and attended without a mask.
TEST(NnModules, SlidingWindowAttention) {
  for (bool lazy : {false, true}) {
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    const int64_t t = 7, w = 3;
    Tensor q = rnd({2, 4, t, 8}, 40, "transposed"), k = rnd({2, 2, t, 8}, 41),
           v = rnd({2, 2, t, 8}, 42, "strided");
    auto repeat_kv = [](const Tensor& x) {
      const int64_t b = x.size(0), s = x.size(2);
      return x.unsqueeze(2).expand({b, 2, 2, s, 8}).reshape({b, 4, s, 8});
    };
    Tensor got = kiln::nn::causal_attention(q, k, v, w);
    for (int64_t i = 0; i < t; ++i) {
      const int64_t lo = std::max<int64_t>(0, i - w + 1);
      Tensor ref = kiln::scaled_dot_product_attention(q.narrow(2, i, 1),
                                                      repeat_kv(k.narrow(2, lo, i - lo + 1)),
                                                      repeat_kv(v.narrow(2, lo, i - lo + 1)));
      SCOPED_TRACE("query " + std::to_string(i));
      EXPECT_TENSOR_CLOSE(got.narrow(2, i, 1), ref);
    }
    // A window as long as the sequence is plain causal attention.
    EXPECT_TENSOR_CLOSE(kiln::nn::causal_attention(q, k, v, t),
                        kiln::nn::causal_attention(q, k, v));

    // Decode over a cache of 9 slots: rows at positions 6 and 1, then both at 8.
    Tensor kc = rnd({2, 2, 9, 8}, 43), vc = rnd({2, 2, 9, 8}, 44);
    Tensor q1 = rnd({2, 4, 1, 8}, 45);
    for (const std::vector<int64_t>& pos : {std::vector<int64_t>{6, 1}, std::vector<int64_t>{8}}) {
      Tensor p = kiln::tensor(pos, {static_cast<int64_t>(pos.size())});
      Tensor step = kiln::nn::decode_attention(q1, kc, vc, p, w);
      for (int64_t b = 0; b < 2; ++b) {
        const int64_t at = pos[pos.size() == 1 ? 0 : b];
        const int64_t lo = std::max<int64_t>(0, at - w + 1);
        Tensor ref = kiln::scaled_dot_product_attention(
            q1.narrow(0, b, 1), repeat_kv(kc.narrow(0, b, 1).narrow(2, lo, at - lo + 1)),
            repeat_kv(vc.narrow(0, b, 1).narrow(2, lo, at - lo + 1)));
        SCOPED_TRACE("row " + std::to_string(b) + " at " + std::to_string(at));
        EXPECT_TENSOR_CLOSE(step.narrow(0, b, 1), ref);
      }
    }
    EXPECT_KILN_ERROR(kiln::nn::causal_attention(q, k, v, -1),
                      "[causal_attention] expected a sliding window >= 0 (0: none), got -1");
  }
}

TEST(NnModules, KvCacheWritesOnePositionOrOnePerRow) {
  for (bool lazy : {false, true}) {
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    Tensor cache = kiln::zeros({3, 2, 6, 4});
    Tensor kv = rnd({3, 2, 1, 4}, 30, "transposed");
    kiln::nn::write_kv(cache, kiln::tensor(std::vector<int64_t>{5, 0, 2}, {3}), kv);
    kiln::nn::write_kv(cache, kiln::full({}, 3, kiln::kInt64), kv * 2);
    kiln::nn::write_kv_prefix(cache, rnd({3, 2, 2, 4}, 31) * 0 + 7);
    Tensor ref = kiln::zeros({3, 2, 6, 4});
    {
      kiln::EagerGuard e;
      ref.narrow(0, 0, 1).narrow(2, 5, 1).copy_(kv[0].unsqueeze(0));
      ref.narrow(0, 2, 1).narrow(2, 2, 1).copy_(kv[2].unsqueeze(0));
      ref.narrow(2, 3, 1).copy_(kv * 2);
      ref.narrow(2, 0, 2).fill_(7);
    }
    EXPECT_TENSOR_CLOSE(cache, ref);
  }
}

// Decode steps through the cache give the full forward's logits, for a batch
// whose rows sit at different positions.
template <class Model>
void check_decode_matches_forward(const Model& m, Tensor (*forward)(const Model&, const Tensor&)) {
  const std::vector<int64_t> a = {5, 9, 1, 7, 3, 2}, b = {4, 4, 8};
  Tensor full_a = forward(m, kiln::tensor(a, {1, 6}));
  Tensor full_b = forward(m, kiln::tensor(b, {1, 3}));
  // Prefill the first 4 of a and 2 of b (right-padded), then decode per row.
  auto cache = m.make_cache(2, 8);
  Tensor ids = kiln::tensor(std::vector<int64_t>{5, 9, 1, 7, 4, 4, 0, 0}, {2, 4});
  Tensor last = m.prefill(ids, cache, kiln::tensor(std::vector<int64_t>{3, 1}, {2}));
  EXPECT_TENSOR_CLOSE_TOL(last[0], full_a[0][3], 1e-4, 1e-5);
  EXPECT_TENSOR_CLOSE_TOL(last[1], full_b[0][1], 1e-4, 1e-5);
  Tensor step = m.decode_step(kiln::tensor(std::vector<int64_t>{3, 8}, {2, 1}),
                              kiln::tensor(std::vector<int64_t>{4, 2}, {2}), cache);
  EXPECT_TENSOR_CLOSE_TOL(step[0][0], full_a[0][4], 1e-4, 1e-5);
  EXPECT_TENSOR_CLOSE_TOL(step[1][0], full_b[0][2], 1e-4, 1e-5);
  step = m.decode_step(kiln::tensor(std::vector<int64_t>{2, 0}, {2, 1}),
                       kiln::tensor(std::vector<int64_t>{5, 3}, {2}), cache);
  EXPECT_TENSOR_CLOSE_TOL(step[0][0], full_a[0][5], 1e-4, 1e-5);
}

TEST(NnModules, LlamaDecodeMatchesForward) {
  for (bool lazy : {false, true}) {
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    kiln::nn::LlamaConfig c = tiny_llama();
    c.tie_word_embeddings = true;
    auto m = kiln::nn::Llama::random(c, kiln::kFloat32, kiln::Device::cpu(), 3);
    check_decode_matches_forward<kiln::nn::Llama>(
        m, [](const kiln::nn::Llama& m, const Tensor& ids) { return m.forward(ids); });
  }
}

TEST(NnModules, Gpt2DecodeMatchesForward) {
  for (bool lazy : {false, true}) {
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    kiln::nn::GPT2Config c;
    c.n_layer = 2, c.d_model = 32, c.n_head = 4, c.vocab = 50, c.n_positions = 16;
    auto m = kiln::nn::GPT2::random(c, kiln::kFloat32, kiln::Device::cpu(), 4);
    check_decode_matches_forward<kiln::nn::GPT2>(
        m, [](const kiln::nn::GPT2& m, const Tensor& ids) { return m.lm_head(m.forward(ids)); });
  }
}

}  // namespace
