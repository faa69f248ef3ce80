// kiln-paired: eager against compiled in one process, call by call.
//
//   kiln-paired [--device cpu|cuda] [--workload gpt2|gpt2-decode|chain16] [--pairs N]
//
// Separate processes (kiln-bench, one mode each) drift with the machine: on a
// shared 2-core host two runs of the same mode a minute apart differ by 10%
// and more, which hides a difference of a few percent between modes. Here
// each pair runs one eager call and one compiled call back to back (the order
// alternating, so neither always runs second), and the median of the paired
// differences is printed beside both medians. Each call includes
// kiln::sync(). Workloads as kiln-bench's: gpt2 (1,1) (12 blocks over hidden
// states), gpt2-decode at batch 1 with a cache of 1024 (position 512, each
// mode its own cache), chain16 over 4096 elements; float32 on the CPU,
// float16 on CUDA.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn/gpt2.h"
#include "perf/workloads.h"

namespace {

using kiln::Tensor;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double us_of(const std::function<void()>& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

int run(const std::string& device, const std::string& workload, int pairs) {
  const kiln::Device dev = device == "cuda" ? kiln::Device::cuda(0) : kiln::Device::cpu();
  const kiln::DType dt = dev.is_cuda() ? kiln::kFloat16 : kiln::kFloat32;
  kiln::nn::GPT2Config cfg;
  std::unique_ptr<kiln::nn::GPT2> model;
  std::unique_ptr<kiln::nn::GPT2::Cache> cache_eager, cache_compiled;
  Tensor a, b;
  std::function<Tensor(const Tensor&, const Tensor&, bool)> fn;
  {
    kiln::EagerGuard eager;
    if (workload == "chain16") {
      a = kiln::randn({4096}).to(dev, kiln::kFloat32);
      fn = [](const Tensor& x, const Tensor&, bool) { return kiln::perf::chain16(x); };
    } else {
      model = std::make_unique<kiln::nn::GPT2>(kiln::nn::GPT2::random(cfg, dt, dev, 0));
      if (workload == "gpt2-decode") {
        cache_eager = std::make_unique<kiln::nn::GPT2::Cache>(model->make_cache(1, 1024));
        cache_compiled = std::make_unique<kiln::nn::GPT2::Cache>(model->make_cache(1, 1024));
        a = kiln::randint(0, cfg.vocab, {1, 1}).to(dev);
        b = kiln::full({1}, 512, kiln::TensorOptions(kiln::kInt64)).to(dev);
        fn = [&](const Tensor& ids, const Tensor& pos, bool compiled) {
          return model->decode_step(ids, pos, compiled ? *cache_compiled : *cache_eager);
        };
      } else if (workload == "gpt2") {
        a = (kiln::randn({1, 1, cfg.d_model}) * 0.5).to(dev, dt);
        fn = [&](const Tensor& h, const Tensor&, bool) { return model->forward_hidden(h); };
      } else {
        std::fprintf(stderr, "kiln-paired: unknown workload '%s'\n", workload.c_str());
        return 2;
      }
    }
    if (!b.defined()) b = a;
  }
  auto compiled = kiln::jit::compile(
      [&](const Tensor& x, const Tensor& y) { return fn(x, y, /*compiled=*/true); },
      {.name = "paired " + workload});
  auto eager_call = [&] {
    kiln::EagerGuard eager;
    Tensor y = fn(a, b, /*compiled=*/false);
    kiln::sync();
  };
  auto compiled_call = [&] {
    Tensor y = compiled(a, b);
    kiln::sync();
  };
  for (int i = 0; i < 5; ++i) {
    eager_call();
    compiled_call();
  }
  std::vector<double> te, tc, diff;
  for (int i = 0; i < pairs; ++i) {
    double e, c;
    if (i % 2 == 0) {
      e = us_of(eager_call);
      c = us_of(compiled_call);
    } else {
      c = us_of(compiled_call);
      e = us_of(eager_call);
    }
    te.push_back(e);
    tc.push_back(c);
    diff.push_back(c - e);
  }
  std::printf(
      "%s on %s: eager p50 %.1f us, compiled p50 %.1f us, median(compiled - eager) %+.1f us "
      "(%+.2f%%) over %d pairs\n",
      workload.c_str(), device.c_str(), median(te), median(tc), median(diff),
      100 * median(diff) / median(te), pairs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = kiln::cuda::is_available() ? "cuda" : "cpu";
  std::string workload = "gpt2";
  int pairs = 100;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) {
      device = argv[++i];
    } else if (!std::strcmp(argv[i], "--workload") && i + 1 < argc) {
      workload = argv[++i];
    } else if (!std::strcmp(argv[i], "--pairs") && i + 1 < argc) {
      pairs = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: kiln-paired [--device cpu|cuda] [--workload gpt2|gpt2-decode|chain16] "
                   "[--pairs N]\n");
      return 2;
    }
  }
  try {
    return run(device, workload, pairs);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln-paired: %s\n", e.what());
    return 1;
  }
}
