// kiln-layer-ops: the ops of one GPT-2 block, timed one by one in eager mode
// on a device, to find where a layer's time goes.
//
//   kiln-layer-ops [--device cpu|cuda] [--batch B] [--tokens T] [--cache S]
//                  [--op NAME] [--iters N]
//
// Each row: median wall time of one call plus a device synchronize, the
// generated kernels it launched (CUDA only; library calls such as cuBLASLt
// are not counted there), and where the op's bytes and FLOPs are counted,
// the rate that time gives (compare with the device's HBM bandwidth and
// tensor-core peak). The "decode" rows time one step of attention over a KV
// cache of S slots (full: position S - 1) for --batch rows. --op keeps the
// rows whose name contains NAME (e.g. --op attention).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "jit/codegen_cuda/launch_cuda.h"
#include "kiln/kiln.h"

namespace {

using kiln::Tensor;

struct Row {
  std::string name;
  std::function<Tensor()> f;
  double bytes = 0;  // moved to and from device memory, at least (0: not counted)
  double flops = 0;
};

int run(const std::string& device, int64_t batch, int64_t tokens, int64_t cache,
        const std::string& only, int iters) {
  const bool gpu = device == "cuda" || (device == "auto" && kiln::cuda::is_available());
  const kiln::Device dev = gpu ? kiln::Device::cuda() : kiln::Device::cpu();
  const kiln::DType dt = gpu ? kiln::kFloat16 : kiln::kFloat32;
  kiln::EagerGuard eager;
  const int64_t d = 768, heads = 12;
  auto rnd = [&](std::vector<int64_t> sizes) { return (kiln::randn(sizes) * 0.05).to(dev, dt); };
  Tensor x = rnd({batch, tokens, d}), w_attn = rnd({3 * d, d}), b_attn = rnd({3 * d});
  Tensor w_fc = rnd({4 * d, d}), b_fc = rnd({4 * d}), w_proj = rnd({d, 4 * d}), b = rnd({d});
  Tensor ln_w = rnd({d}), ln_b = rnd({d});
  Tensor h4 = rnd({batch, tokens, 4 * d});
  Tensor q = rnd({batch, tokens, heads, d / heads}).transpose(1, 2);
  Tensor k = rnd({batch, tokens, heads, d / heads}).transpose(1, 2);
  Tensor v = rnd({batch, tokens, heads, d / heads}).transpose(1, 2);
  Tensor a = rnd({batch, heads, tokens, d / heads});
  // Decode: one new token's q (a view of its fused projection) over a full cache.
  const int64_t hd = d / heads;
  Tensor q1 = rnd({batch, 1, 3 * d}).slice(2, 0, d).view({batch, 1, heads, hd}).transpose(1, 2);
  Tensor k_cache = rnd({batch, heads, cache, hd}), v_cache = rnd({batch, heads, cache, hd});
  Tensor pos = kiln::full({1}, cache - 1, kiln::TensorOptions(kiln::kInt64).device(dev));
  Tensor keep = kiln::le(kiln::arange(cache, kiln::TensorOptions(kiln::kInt64).device(dev)), pos);
  const double es = gpu ? 2 : 4;
  const double act = static_cast<double>(batch * tokens * d) * es;  // one [B, T, d] tensor
  // Causal attention: half of the 2 * 2 * B * H * T * T * hd multiply-adds.
  const double causal_flops = 2.0 * batch * heads * tokens * tokens * hd;
  const double kv_bytes = 2.0 * batch * heads * cache * hd * es;
  const double kv_flops = 4.0 * batch * heads * cache * hd;
  std::vector<Row> rows = {
      {"layer_norm", [&] { return kiln::layer_norm(x, {d}, ln_w, ln_b, 1e-5); }},
      {"linear 768->2304", [&] { return kiln::linear(x, w_attn, b_attn); }},
      {"linear 768->3072", [&] { return kiln::linear(x, w_fc, b_fc); }},
      {"linear 3072->768", [&] { return kiln::linear(h4, w_proj, b); }},
      {"addmm_act gelu",
       [&] {
         return kiln::addmm_act(b_fc, x.reshape({batch * tokens, d}), w_fc.t(), "gelu_tanh");
       }},
      {"attention causal",
       [&] { return kiln::scaled_dot_product_attention(q, k, v, std::nullopt, true); }, 4 * act,
       causal_flops},
      {"attention decode", [&] { return kiln::kv_cache_attention(q1, k_cache, v_cache, pos); },
       kv_bytes, kv_flops},
      {"attention decode mask",
       [&] { return kiln::scaled_dot_product_attention(q1, k_cache, v_cache, keep); }, kv_bytes,
       kv_flops},
      {"merge heads",
       [&] {
         return a.transpose(1, 2).reshape({batch, tokens, d});
       }},
      {"gelu tanh", [&] { return kiln::gelu(h4, "tanh"); }},
      {"residual add", [&] { return x + x; }},
  };
  std::printf("kiln-layer-ops on %s, %s, batch %lld, tokens %lld, cache %lld, median of %d\n",
              gpu ? kiln::cuda::device_name().c_str() : "cpu", kiln::dtype_name(dt),
              static_cast<long long>(batch), static_cast<long long>(tokens),
              static_cast<long long>(cache), iters);
  std::printf("%-24s %10s %10s %10s %10s\n", "op", "us", "kernels", "GB/s", "TFLOP/s");
  for (const Row& r : rows) {
    if (!only.empty() && r.name.find(only) == std::string::npos) continue;
    for (int i = 0; i < 3; ++i) r.f();
    kiln::sync();
    const int64_t before = gpu ? kiln::jit::cuda::cuda_kernel_stats().launches : 0;
    std::vector<double> us;
    for (int i = 0; i < iters; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      Tensor out = r.f();
      kiln::sync();
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    const int64_t after = gpu ? kiln::jit::cuda::cuda_kernel_stats().launches : 0;
    std::sort(us.begin(), us.end());
    const double t = us[us.size() / 2];
    std::printf("%-24s %10.1f %10.1f", r.name.c_str(), t,
                static_cast<double>(after - before) / iters);
    if (r.bytes > 0) std::printf(" %10.1f %10.2f", r.bytes / t * 1e-3, r.flops / t * 1e-6);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "auto";
  int64_t batch = 1, tokens = 128, cache = 1024;
  std::string only;
  int iters = 50;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else if (s == "--batch" && i + 1 < argc) {
      batch = std::stoll(argv[++i]);
    } else if (s == "--tokens" && i + 1 < argc) {
      tokens = std::stoll(argv[++i]);
    } else if (s == "--cache" && i + 1 < argc) {
      cache = std::stoll(argv[++i]);
    } else if (s == "--op" && i + 1 < argc) {
      only = argv[++i];
    } else if (s == "--iters" && i + 1 < argc) {
      iters = std::stoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: kiln-layer-ops [--device cpu|cuda] [--batch B] [--tokens T] "
                   "[--cache S] [--op NAME] [--iters N]\n");
      return 2;
    }
  }
  try {
    return run(device, batch, tokens, cache, only, iters);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln-layer-ops: %s\n", e.what());
    return 1;
  }
}
