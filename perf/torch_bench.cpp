// kiln-torch-bench: the CPU reference workloads through libtorch 1.13 (the
// Debian package), timed exactly as kiln-bench times kiln's, so
// perf/compare_cpu.sh can print both in one run with ratios.
//
//   kiln-torch-bench [--workload chain16|mlp|gpt2|all] [--shape S] [--iters N] [--threads N]
// Prints one JSON object per line, as kiln-bench --json does, plus the
// process CPU time per call (all threads), which stays meaningful on a shared
// machine where wall time does not.

#include <time.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "perf/workloads.h"

namespace {

using torch::Tensor;
using Clock = std::chrono::steady_clock;

double cpu_us() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

struct Linear {
  Tensor w, b;
  Tensor operator()(const Tensor& x) const { return torch::nn::functional::linear(x, w, b); }
};

Linear make_linear(int64_t in, int64_t out) {
  return {torch::randn({out, in}) * 0.02, torch::zeros({out})};
}

struct Block {
  Tensor ln1w = torch::ones({768}), ln1b = torch::zeros({768});
  Tensor ln2w = torch::ones({768}), ln2b = torch::zeros({768});
  Linear attn = make_linear(768, 2304), proj = make_linear(768, 768);
  Linear fc = make_linear(768, 3072), out = make_linear(3072, 768);

  Tensor forward(const Tensor& x) const {
    namespace F = torch::nn::functional;
    const int64_t b = x.size(0), t = x.size(1);
    auto qkv = attn(torch::layer_norm(x, {768}, ln1w, ln1b)).split(768, -1);
    auto heads = [&](const Tensor& v) { return v.view({b, t, 12, 64}).transpose(1, 2); };
    Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    // Causal attention (1.13 has no fused SDPA): softmax(q k^T / 8 + mask) v.
    Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / 8.0;
    Tensor mask = torch::ones({t, t}, torch::kBool).tril();
    scores = scores.masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity());
    Tensor a = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({b, t, 768});
    Tensor h = x + proj(a);
    return h + out(F::gelu(fc(torch::layer_norm(h, {768}, ln2w, ln2b)),
                           F::GELUFuncOptions().approximate("tanh")));
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string workload = "all", shape;
  int iters = 0, threads = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--workload") && i + 1 < argc) {
      workload = argv[++i];
    } else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) {
      shape = argv[++i];
    } else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else {
      std::fprintf(
          stderr, "usage: kiln-torch-bench [--workload W] [--shape S] [--iters N] [--threads N]\n");
      return 2;
    }
  }
  if (threads > 0) torch::set_num_threads(threads);
  torch::InferenceMode guard;
  torch::manual_seed(0);
  for (const kiln::perf::Case& c : kiln::perf::cases_for(false, workload)) {
    if (!shape.empty() && c.shape != shape) continue;
    if (c.workload == "gpt2-decode") continue;  // the GPU workload (perf/torch_gpu.py has it)
    std::function<Tensor()> step;
    if (c.workload == "chain16") {
      Tensor x = torch::randn({c.a});
      step = [x] { return kiln::perf::chain16(x); };
    } else if (c.workload == "mlp") {
      Tensor x = torch::randn({c.a, c.b});
      Linear l1 = make_linear(1024, 4096), l2 = make_linear(4096, 1024);
      step = [x, l1, l2] { return l2(torch::relu(l1(x))); };
    } else {
      std::vector<Block> blocks(12);
      Tensor lnw = torch::ones({768}), lnb = torch::zeros({768});
      Tensor h = torch::randn({c.a, c.b, 768}) * 0.5;
      step = [blocks, lnw, lnb, h] {
        Tensor x = h;
        for (const Block& blk : blocks) x = blk.forward(x);
        return torch::layer_norm(x, {768}, lnw, lnb);
      };
    }
    int n = iters ? iters : (c.workload == "gpt2" && c.b > 1 ? 10 : (c.a > 1000000 ? 20 : 200));
    auto t0 = Clock::now();
    Tensor out = step();
    double first_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    for (int i = 0; i < 5; ++i) out = step();
    std::vector<double> us, cpu;
    for (int i = 0; i < n; ++i) {
      auto t = Clock::now();
      double c0 = cpu_us();
      out = step();
      cpu.push_back(cpu_us() - c0);
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    }
    std::sort(us.begin(), us.end());
    std::sort(cpu.begin(), cpu.end());
    std::printf(
        "{\"workload\":\"%s\",\"shape\":\"%s\",\"dtype\":\"float32\",\"device\":\"cpu\","
        "\"mode\":\"libtorch\",\"latency_us_p50\":%.2f,\"latency_us_p90\":%.2f,"
        "\"first_call_ms\":%.3f,\"cpu_us_p50\":%.2f}\n",
        c.workload.c_str(), c.shape.c_str(), us[us.size() / 2], us[us.size() * 9 / 10], first_ms,
        cpu[cpu.size() / 2]);
    std::fflush(stdout);
  }
  return 0;
}
