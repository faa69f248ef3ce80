// kiln-layer-ops: one GPT-2 block kernel by kernel, each against the bytes it
// must move and the FLOPs it must do, to find where a layer's time goes.
//
//   kiln-layer-ops [--device cpu|cuda] [--batch B] [--tokens T] [--cache S]
//                  [--op NAME] [--iters N] [--peak-gbps G]
//
// Rows, in the order the fused layer runs them (Note [Matmul epilogues]):
//   prefill (B, T): ln_1, the QKV product with its bias, causal attention,
//   the merge-heads copy and the attention writing merged heads (T > 1,
//   Note [Merged heads]: the layer runs the latter; the first two are shown,
//   not summed), the output projection with bias and
//   residual, ln_2, the FC product with bias and GELU, the down projection
//   with bias and residual; then the sum of those rows and the whole block
//   as the lazy path and jit::compile run it.
//   decode (B rows, a KV cache of S slots, the step at position S - 1): the
//   same products with m = B rows, each both ways (the generated skinny
//   kernel and cuBLASLt, Note [Skinny matmuls]), the two KV-cache writes,
//   kv_cache_attention (and the masked sdpa it replaced), on CUDA the tied
//   LM head (ln_f as its prologue; not summed); then the block's decode
//   step, lazily and compiled.
//   At up to 16 rows the LayerNorms are the QKV and FC products' prologues
//   (Note [Norm prologues]): the "ln_1+qkv" rows; the LayerNorm rows are
//   shown but not summed.
// Columns: `dev us`, the device time per call (CUDA: Note [Device time per
// call], launch gaps included, host excluded; CPU: the wall time); `wall
// us`, the median wall time of one call plus a synchronize (the floor of a
// lone small kernel is ~10 us of launch and synchronize); `kernels`, launches
// per call (generated kernels and cuBLASLt calls); `MB` moved to and from
// device memory at least; GB/s and `%bw` (of --peak-gbps; by default the
// CUDA device's theoretical bandwidth, from its memory clock and bus width,
// or 3350, an H100 SXM's HBM3, where the driver does not say or on the
// CPU); TFLOP/s where FLOPs are counted. --op keeps the rows
// whose name contains NAME.
//
//   kiln-layer-ops --products "KxN[:rms|:ln] ..." [--batch M] [--device cuda]
//
// times skinny products of any model instead (x[M, K] @ w[N, K]^T, float16
// on CUDA; with :rms or :ln an RMSNorm or LayerNorm prologue over x), each
// way: the default choice, the generated kernel and cuBLASLt.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "jit/codegen_cuda/device_timer.h"
#include "jit/codegen_cuda/launch_cuda.h"
#include "kiln/kiln.h"
#include "runtime/cuda/blas_lt.h"

namespace {

using kiln::Tensor;

struct Row {
  std::string name;
  std::function<Tensor()> f;
  double bytes = 0;  // moved to and from device memory, at least (0: not counted)
  double flops = 0;
  kiln::cuda::SkinnyPath path = kiln::cuda::SkinnyPath::Auto;
  bool lazy = false;    // f records lazily and flushes (no EagerGuard)
  bool summed = false;  // part of the layer's sum
};

struct Measured {
  double dev_us = 0, wall_us = 0, kernels = 0;
};

int64_t launches(bool gpu) {
  if (!gpu) return 0;
  const auto lt = kiln::cuda::lt_cache_stats();
  return kiln::jit::cuda::cuda_kernel_stats().launches + lt.hits + lt.misses;
}

Measured measure(const Row& r, bool gpu, kiln::Device dev, int iters) {
  kiln::cuda::set_skinny_path(r.path);
  std::optional<kiln::EagerGuard> eager;
  if (!r.lazy) eager.emplace();
  for (int i = 0; i < 3; ++i) r.f();
  kiln::sync();
  Measured m;
  const int64_t before = launches(gpu);
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    Tensor out = r.f();
    kiln::sync();
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  m.kernels = static_cast<double>(launches(gpu) - before) / iters;
  std::sort(us.begin(), us.end());
  m.wall_us = us[us.size() / 2];
  m.dev_us = gpu ? kiln::jit::cuda::device_us_per_call(dev, iters, [&] { r.f(); }) : m.wall_us;
  kiln::sync();
  kiln::cuda::set_skinny_path(kiln::cuda::SkinnyPath::Auto);
  return m;
}

void print(const std::string& name, const Measured& m, double bytes, double flops, double peak) {
  std::printf("%-36s %9.1f %9.1f %8.1f", name.c_str(), m.dev_us, m.wall_us, m.kernels);
  if (bytes > 0) {
    const double gbps = bytes / m.dev_us * 1e-3;
    std::printf(" %8.2f %8.1f %6.1f%%", bytes * 1e-6, gbps, 100.0 * gbps / peak);
  } else {
    std::printf(" %8s %8s %7s", "-", "-", "-");
  }
  if (flops > 0) std::printf(" %8.2f", flops / m.dev_us * 1e-6);
  std::printf("\n");
}

// The columns `print` fills.
void print_header() {
  std::printf("%-36s %9s %9s %8s %8s %8s %7s %8s\n", "op", "dev us", "wall us", "kernels", "MB",
              "GB/s", "%bw", "TFLOP/s");
}

// The product x[m, k] @ w^T + bias (+ residual): weights, x, bias, out, residual.
double product_bytes(int64_t m, int64_t k, int64_t n, double es, bool residual) {
  return es * static_cast<double>(k * n + m * k + n + m * n + (residual ? m * n : 0));
}

// --products: skinny products of other shapes than GPT-2's (Llama's, say),
// each way, with the prologue named after the shape.
int run_products(const std::string& device, int64_t m, const std::string& shapes, int iters,
                 double peak) {
  const bool gpu = device == "cuda" || (device == "auto" && kiln::cuda::is_available());
  KILN_CHECK(gpu && kiln::cuda::is_available(),
             "[kiln-layer-ops] expected a CUDA device for --products, got none");
  const kiln::Device dev = kiln::Device::cuda();
  const kiln::DType dt = kiln::kFloat16;
  std::printf("kiln-layer-ops --products on %s, float16, %lld rows, median of %d, peak %.0f GB/s\n",
              kiln::cuda::device_name().c_str(), static_cast<long long>(m), iters, peak);
  // Note [Products timed from device memory]: one weight called again and
  // again stays in L2 when it fits (GPT-2's 1-5 MB, Llama's 32 MB on a 50 MB
  // L2), and its bandwidth then reads as high as 94% of HBM where a model's
  // step, which reads every weight once, gets about 60%. Each product
  // therefore cycles through copies of its operands totalling at least three
  // times the L2.
  const double l2 = static_cast<double>(kiln::cuda::device_l2_bytes());
  print_header();
  size_t at = 0;
  while (at < shapes.size()) {
    size_t end = shapes.find(' ', at);
    if (end == std::string::npos) end = shapes.size();
    const std::string shape = shapes.substr(at, end - at);
    at = end + 1;
    if (shape.empty()) continue;
    const size_t x = shape.find('x'), colon = shape.find(':');
    KILN_CHECK(x != std::string::npos,
               "[kiln-layer-ops] expected --products entries KxN[:rms|:ln], got '", shape, "'");
    const int64_t k = std::stoll(shape.substr(0, x));
    const int64_t n = std::stoll(
        shape.substr(x + 1, colon == std::string::npos ? std::string::npos : colon - x - 1));
    const std::string norm = colon == std::string::npos ? "" : shape.substr(colon + 1);
    KILN_CHECK(norm.empty() || norm == "rms" || norm == "ln",
               "[kiln-layer-ops] expected a prologue rms or ln, got '", norm, "'");
    const double bytes = product_bytes(m, k, n, 2, false) - static_cast<double>(n) * 2;
    const auto copies = static_cast<size_t>(std::max(1.0, std::ceil(3 * l2 / bytes)));
    struct Operands {
      Tensor in, w, nw, nb;
    };
    std::vector<Operands> ops(copies);
    {
      kiln::EagerGuard eager;
      for (Operands& o : ops) {
        o.in = (kiln::randn({m, k}) * 0.5).to(dev, dt);
        o.w = (kiln::randn({n, k}) * 0.02).to(dev, dt);
        o.nw = (kiln::randn({k}) * 0.1 + 1.0).to(dev, dt);
        o.nb = (kiln::randn({k}) * 0.1).to(dev, dt);
      }
    }
    const std::string kind = norm == "rms" ? "rms_norm" : norm == "ln" ? "layer_norm" : "none";
    size_t next = 0;
    auto f = [&] {
      using kiln::IValue;
      const Operands& o = ops[next++ % ops.size()];
      return kiln::call_op("linear_act", {o.in, o.w, IValue(), std::string("none"), IValue(), kind,
                                          norm.empty() ? IValue() : IValue(o.nw),
                                          norm == "ln" ? IValue(o.nb) : IValue(), 1e-5})[0]
          .to_tensor();
    };
    for (auto [suffix, path] :
         {std::pair<const char*, kiln::cuda::SkinnyPath>{"", kiln::cuda::SkinnyPath::Auto},
          {" (generated)", kiln::cuda::SkinnyPath::Generated},
          {" (cuBLASLt)", kiln::cuda::SkinnyPath::Cublas}}) {
      Row r{shape + suffix, f, bytes, 2.0 * m * k * n, path};
      print(r.name, measure(r, true, dev, iters), r.bytes, r.flops, peak);
    }
  }
  return 0;
}

int run(const std::string& device, int64_t batch, int64_t tokens, int64_t cache,
        const std::string& only, int iters, double peak) {
  const bool gpu = device == "cuda" || (device == "auto" && kiln::cuda::is_available());
  KILN_CHECK(!gpu || kiln::cuda::is_available(),
             "[kiln-layer-ops] expected a CUDA device for --device cuda, got none");
  const kiln::Device dev = gpu ? kiln::Device::cuda() : kiln::Device::cpu();
  const kiln::DType dt = gpu ? kiln::kFloat16 : kiln::kFloat32;
  const int64_t d = 768, heads = 12, hd = d / heads;
  kiln::nn::GPT2Config cfg;
  cfg.n_layer = 1;
  cfg.vocab = 64;
  const kiln::nn::GPT2 model = kiln::nn::GPT2::random(cfg, dt, dev, 1);
  const kiln::nn::GPT2Block& blk = model.blocks[0];
  std::optional<kiln::EagerGuard> setup(std::in_place);  // operands are plain tensors
  auto rnd = [&](std::vector<int64_t> sizes) { return (kiln::randn(sizes) * 0.5).to(dev, dt); };
  const double es = gpu ? 2 : 4;
  const int64_t M = batch * tokens;
  const double act = static_cast<double>(M * d) * es;  // one [B, T, d] tensor

  // Prefill operands: the layer's input, and each kernel's input as the layer makes it.
  Tensor x = rnd({batch, tokens, d});
  Tensor qkv = rnd({batch, tokens, 3 * d});
  auto heads_of = [&](int64_t i) {
    return qkv.slice(2, i * d, (i + 1) * d).view({batch, tokens, heads, hd}).transpose(1, 2);
  };
  Tensor q = heads_of(0), k = heads_of(1), v = heads_of(2);
  Tensor a = rnd({batch, heads, tokens, hd});
  Tensor merged = rnd({batch, tokens, d}), h4 = rnd({batch, tokens, 4 * d});
  const std::string none = "none", gelu = "gelu_tanh";
  // linear_act, with `ln` (optional) as its norm prologue (Note [Norm prologues]).
  auto linear_act = [](const Tensor& in, const Tensor& w, const std::optional<Tensor>& b,
                       const std::string& act, const std::optional<Tensor>& res,
                       const kiln::nn::LayerNorm* ln = nullptr) {
    using kiln::IValue;
    return kiln::call_op(
               "linear_act",
               {in, w, b ? IValue(*b) : IValue(), act, res ? IValue(*res) : IValue(),
                std::string(ln ? "layer_norm" : "none"), ln ? IValue(ln->weight) : IValue(),
                ln ? IValue(ln->bias) : IValue(), ln ? ln->eps : 0.0})[0]
        .to_tensor();
  };
  // Few rows: the LayerNorms are the products' prologues (the rows show them alone too).
  const bool norm_prologue = M <= 16;
  const kiln::nn::LayerNorm* ln1 = norm_prologue ? &blk.ln_1 : nullptr;
  const kiln::nn::LayerNorm* ln2 = norm_prologue ? &blk.ln_2 : nullptr;
  const std::string pre1 = norm_prologue ? "ln_1+" : "", pre2 = norm_prologue ? "ln_2+" : "";
  // Causal attention: half of the 2 * 2 * B * H * T * T * hd multiply-adds.
  const double causal_flops = 2.0 * batch * heads * tokens * tokens * hd;
  auto mm_flops = [](int64_t m, int64_t k, int64_t n) { return 2.0 * m * k * n; };
  std::vector<Row> rows = {
      {"ln_1", [&] { return blk.ln_1.forward(x); }, 2 * act, 0},
      {pre1 + "qkv +bias",
       [&] { return linear_act(x, blk.c_attn.weight, blk.c_attn.bias, none, std::nullopt, ln1); },
       product_bytes(M, d, 3 * d, es, false), mm_flops(M, d, 3 * d)},
      {"attention causal",
       [&] { return kiln::scaled_dot_product_attention(q, k, v, std::nullopt, true); }, 4 * act,
       causal_flops},
      {"merge heads copy",
       [&] {
         return a.transpose(1, 2).reshape({batch, tokens, d});
       },
       2 * act, 0},
      // What the layer runs at T > 1 (Note [Merged heads]): the merge costs no pass.
      {"attention causal +merge",
       [&] {
         return kiln::call_op("attention_merged_heads", {q, k, v, kiln::IValue(), 0.0, true})[0]
             .to_tensor();
       },
       4 * act, causal_flops},
      {"proj +bias +residual",
       [&] { return linear_act(merged, blk.attn_proj.weight, blk.attn_proj.bias, none, x); },
       product_bytes(M, d, d, es, true), mm_flops(M, d, d)},
      {"ln_2", [&] { return blk.ln_2.forward(x); }, 2 * act, 0},
      {pre2 + "fc +bias +gelu",
       [&] { return linear_act(x, blk.c_fc.weight, blk.c_fc.bias, gelu, std::nullopt, ln2); },
       product_bytes(M, d, 4 * d, es, false), mm_flops(M, d, 4 * d)},
      {"down +bias +residual",
       [&] { return linear_act(h4, blk.mlp_proj.weight, blk.mlp_proj.bias, none, x); },
       product_bytes(M, 4 * d, d, es, true), mm_flops(M, 4 * d, d)},
  };
  // At T > 1 the summed attention is the one writing merged heads; at one
  // token the merge is a view and the plain attention is the layer's.
  auto not_run = [&](const std::string& name) {
    if (norm_prologue && (name == "ln_1" || name == "ln_2")) return true;
    if (tokens > 1) return name == "attention causal" || name == "merge heads copy";
    return name == "attention causal +merge";
  };
  for (Row& r : rows) r.summed = !not_run(r.name);
  if (tokens == 1) {
    rows.erase(std::remove_if(rows.begin(), rows.end(),
                              [](const Row& r) {
                                return r.name == "merge heads copy" ||
                                       r.name == "attention causal +merge";
                              }),
               rows.end());
  }
  rows.push_back({"layer lazy (one flush)", [&] {
                    Tensor y = blk.forward(x, heads);
                    kiln::jit::flush();
                    return y;
                  }});
  rows.back().lazy = true;
  auto compiled = kiln::jit::compile([&](const Tensor& in) { return blk.forward(in, heads); },
                                     {.name = "gpt2 block"});
  rows.push_back({gpu ? "layer compiled (graph)" : "layer compiled", [&] { return compiled(x); }});
  rows.back().lazy = true;

  // Decode operands: one new token per row over a cache of S slots, full to S - 1.
  Tensor x1 = rnd({batch, 1, d}), h1 = rnd({batch, 1, 4 * d});
  Tensor qkv1 = rnd({batch, 1, 3 * d});
  Tensor q1 = qkv1.slice(2, 0, d).view({batch, 1, heads, hd}).transpose(1, 2);
  Tensor k1 = qkv1.slice(2, d, 2 * d).view({batch, 1, heads, hd}).transpose(1, 2);
  Tensor k_cache = rnd({batch, heads, cache, hd}), v_cache = rnd({batch, heads, cache, hd});
  Tensor pos = kiln::full({1}, cache - 1, kiln::TensorOptions(kiln::kInt64).device(dev));
  Tensor keep = kiln::le(kiln::arange(cache, kiln::TensorOptions(kiln::kInt64).device(dev)), pos);
  const double act1 = static_cast<double>(batch * d) * es;
  const double kv_bytes = 2.0 * batch * heads * cache * hd * es;
  const double kv_flops = 4.0 * batch * heads * cache * hd;
  std::vector<Row> decode = {
      {"decode ln_1", [&] { return blk.ln_1.forward(x1); }, 2 * act1, 0},
      {"decode kv write (x2)",
       [&] {
         kiln::index_copy_(k_cache, 2, pos, k1);
         return kiln::index_copy_(v_cache, 2, pos, k1);
       },
       4 * act1, 0},
      {"attention decode", [&] { return kiln::kv_cache_attention(q1, k_cache, v_cache, pos); },
       kv_bytes, kv_flops},
      {"attention decode mask",
       [&] { return kiln::scaled_dot_product_attention(q1, k_cache, v_cache, keep); }, kv_bytes,
       kv_flops},
      {"decode ln_2", [&] { return blk.ln_2.forward(x1); }, 2 * act1, 0},
  };
  // The LayerNorms run as the products' prologues at up to 16 rows.
  const bool decode_prologue = batch <= 16;
  decode[0].summed = decode[4].summed = !decode_prologue;
  decode[1].summed = decode[2].summed = true;
  struct Product {
    const char* name;
    const kiln::nn::Linear* lin;
    const Tensor* in;
    const std::string* act;
    bool residual;
    int64_t k, n;
    const kiln::nn::LayerNorm* ln;
  };
  const Product products[] = {
      {decode_prologue ? "decode ln_1+qkv +bias" : "decode qkv +bias", &blk.c_attn, &x1, &none,
       false, d, 3 * d, decode_prologue ? &blk.ln_1 : nullptr},
      {"decode proj +bias +res", &blk.attn_proj, &x1, &none, true, d, d, nullptr},
      {decode_prologue ? "decode ln_2+fc +bias +gelu" : "decode fc +bias +gelu", &blk.c_fc, &x1,
       &gelu, false, d, 4 * d, decode_prologue ? &blk.ln_2 : nullptr},
      {"decode down +bias +res", &blk.mlp_proj, &h1, &none, true, 4 * d, d, nullptr},
  };
  for (const Product& p : products) {
    for (auto [suffix, path] :
         {std::pair<const char*, kiln::cuda::SkinnyPath>{"", kiln::cuda::SkinnyPath::Auto},
          {" (generated)", kiln::cuda::SkinnyPath::Generated},
          {" (cuBLASLt)", kiln::cuda::SkinnyPath::Cublas}}) {
      Row r{std::string(p.name) + suffix,
            [&, p] {
              return linear_act(*p.in, p.lin->weight, p.lin->bias, *p.act,
                                p.residual ? std::optional<Tensor>(x1) : std::nullopt, p.ln);
            },
            product_bytes(batch, p.k, p.n, es, p.residual), mm_flops(batch, p.k, p.n), path};
      r.summed = path == kiln::cuda::SkinnyPath::Auto;
      if (gpu || r.summed) decode.push_back(r);  // both ways on CUDA only
    }
  }
  // GPT-2's tied LM head (50257 x 768, 77 MB in float16) with ln_f as its
  // prologue, on CUDA: once per step, not the layer's (not summed); the
  // largest skinny product, the one that shows the weight stream's rate.
  Tensor lm_w = gpu ? rnd({50257, d}) : Tensor();
  if (gpu) {
    const kiln::nn::LayerNorm* ln_f = decode_prologue ? &blk.ln_2 : nullptr;  // ln_f's shape
    for (auto [suffix, path] :
         {std::pair<const char*, kiln::cuda::SkinnyPath>{"", kiln::cuda::SkinnyPath::Auto},
          {" (generated)", kiln::cuda::SkinnyPath::Generated},
          {" (cuBLASLt)", kiln::cuda::SkinnyPath::Cublas}}) {
      Row r{std::string(decode_prologue ? "decode ln_f+lm head" : "decode lm head") + suffix,
            [&, ln_f] { return linear_act(x1, lm_w, std::nullopt, none, std::nullopt, ln_f); },
            product_bytes(batch, d, 50257, es, false) - 50257 * es, mm_flops(batch, d, 50257),
            path};
      decode.push_back(r);
    }
  }
  decode.push_back({"decode layer lazy (one flush)", [&] {
                      Tensor y = blk.forward_decode(x1, heads, k_cache, v_cache, pos);
                      kiln::jit::flush();
                      return y;
                    }});
  decode.back().lazy = true;
  setup.reset();
  auto compiled_decode = kiln::jit::compile(
      [&](const Tensor& in, const Tensor& p) {
        return blk.forward_decode(in, heads, k_cache, v_cache, p);
      },
      {.name = "gpt2 block decode"});
  decode.push_back({gpu ? "decode layer compiled (graph)" : "decode layer compiled",
                    [&] { return compiled_decode(x1, pos); }});
  decode.back().lazy = true;

  std::printf(
      "kiln-layer-ops on %s, %s, batch %lld, tokens %lld, cache %lld, median of %d, peak %.0f "
      "GB/s\n",
      gpu ? kiln::cuda::device_name().c_str() : "cpu", kiln::dtype_name(dt),
      static_cast<long long>(batch), static_cast<long long>(tokens), static_cast<long long>(cache),
      iters, peak);
  print_header();
  for (const std::vector<Row>* set : {&rows, &decode}) {
    Measured sum;
    double sum_bytes = 0, sum_flops = 0;
    int summed = 0;
    for (const Row& r : *set) {
      if (!only.empty() && r.name.find(only) == std::string::npos) continue;
      const Measured m = measure(r, gpu, dev, iters);
      print(r.name, m, r.bytes, r.flops, peak);
      if (!r.summed) continue;
      sum.dev_us += m.dev_us;
      sum.wall_us += m.wall_us;
      sum.kernels += m.kernels;
      sum_bytes += r.bytes;
      sum_flops += r.flops;
      ++summed;
    }
    if (summed > 1) {
      print(set == &rows ? "= sum of the layer's kernels" : "= sum of the decode kernels", sum,
            sum_bytes, sum_flops, peak);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "auto";
  int64_t batch = 1, tokens = 128, cache = 1024;
  std::string only, products;
  int iters = 50;
  double peak = 0;  // 0: the device's theoretical bandwidth (the header above)
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    bool ok = true;
    try {
      if (s == "--device" && i + 1 < argc) {
        device = argv[++i];
      } else if (s == "--batch" && i + 1 < argc) {
        batch = std::stoll(argv[++i]);
      } else if (s == "--tokens" && i + 1 < argc) {
        tokens = std::stoll(argv[++i]);
      } else if (s == "--cache" && i + 1 < argc) {
        cache = std::stoll(argv[++i]);
      } else if (s == "--products" && i + 1 < argc) {
        products = argv[++i];
      } else if (s == "--op" && i + 1 < argc) {
        only = argv[++i];
      } else if (s == "--iters" && i + 1 < argc) {
        iters = std::stoi(argv[++i]);
      } else if (s == "--peak-gbps" && i + 1 < argc) {
        peak = std::stod(argv[++i]);
      } else {
        ok = false;
      }
    } catch (const std::exception&) {  // not a number
      ok = false;
    }
    ok = ok && iters > 0 && batch > 0 && tokens > 0 && cache > 0;
    if (!ok) {
      std::fprintf(stderr,
                   "usage: kiln-layer-ops [--device cpu|cuda] [--batch B] [--tokens T] "
                   "[--cache S] [--op NAME] [--iters N] [--peak-gbps G]\n"
                   "       kiln-layer-ops --products \"KxN[:rms|:ln] ...\" [--batch M] "
                   "[--iters N] [--peak-gbps G]\n");
      return 2;
    }
  }
  try {
    if (peak <= 0) {
      const bool gpu = device == "cuda" || (device == "auto" && kiln::cuda::is_available());
      if (gpu && kiln::cuda::is_available()) peak = kiln::cuda::device_memory_peak_gbps(0);
      if (peak <= 0) peak = 3350;
    }
    if (!products.empty()) return run_products(device, batch, products, iters, peak);
    return run(device, batch, tokens, cache, only, iters, peak);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln-layer-ops: %s\n", e.what());
    return 1;
  }
}
