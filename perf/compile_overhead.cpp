// kiln-compile-overhead: what a jit::compile hit costs the host, apart from
// its kernels.
//
//   kiln-compile-overhead [--device cpu|cuda] [--iters N] [--new-sizes N]
//
// - guard check: GuardSet::check of a 5-tensor-argument entry (the fast path
//   every call takes), timed alone;
// - tiny call: a compiled `a + b + c + d + e` over 1-element tensors, whose
//   one kernel does next to nothing, so the call's time is the hit's
//   overhead (guards, binding the arguments, the launch, fresh results);
//   beside it the same function run lazily and eagerly;
// - on CUDA the same with Mode::ReduceOverhead (a graph launch) and
//   Mode::Default.
// Median of N, after warm-up; wall time per call including kiln::sync().
// --new-sizes N: what a new size of a dynamic dim costs instead. GPT-2's blocks
// (on CUDA the 124M model in float16, on the CPU two layers in float32)
// compiled with the sequence dim dynamic, called three times at each of N
// sizes from 64 up: the first call at a size (a new plan: trace, passes, its
// first run), the second (on CUDA in ReduceOverhead: the capture) and the
// third (a hit), in ms, medians over the sizes, per mode; beside them one
// lazy call at the same sizes.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "guards/guards.h"
#include "kiln/kiln.h"
#include "kiln/nn/gpt2.h"

namespace {

using kiln::Tensor;
using Clock = std::chrono::steady_clock;

double median_ns(const std::function<void()>& f, int iters) {
  for (int i = 0; i < 20; ++i) f();
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    f();
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// --new-sizes: the first, second and third call at each of `sizes` new sequence lengths.
void new_sizes(const kiln::Device& dev, const std::string& device, int sizes) {
  kiln::nn::GPT2Config cfg = kiln::nn::GPT2Config::named(dev.is_cuda() ? "gpt2" : "tiny");
  const kiln::DType dt = dev.is_cuda() ? kiln::kFloat16 : kiln::kFloat32;
  const kiln::nn::GPT2 model = kiln::nn::GPT2::random(cfg, dt, dev, 0);
  auto body = [&model](const Tensor& h) { return model.forward_hidden(h); };
  auto sync = [&] {
    kiln::sync();
    if (dev.is_cuda()) kiln::cuda::synchronize(dev);
  };
  std::vector<Tensor> inputs;
  for (int k = 0; k < sizes + 1; ++k) {
    kiln::EagerGuard eager;
    inputs.push_back((kiln::randn({1, 64 + k, cfg.d_model}) * 0.5).to(dev, dt));
  }
  auto print = [&](const char* mode, const char* call, const std::vector<double>& ms) {
    std::printf(
        "{\"what\":\"new size, gpt2 blocks\",\"device\":\"%s\",\"layers\":%lld,"
        "\"mode\":\"%s\",\"call\":\"%s\",\"sizes\":%d,\"ms_p50\":%.3f,\"ms_max\":%.3f}\n",
        device.c_str(), static_cast<long long>(cfg.n_layer), mode, call, sizes, median(ms),
        ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end()));
    std::fflush(stdout);
  };
  std::vector<double> lazy;
  for (int k = 1; k <= sizes; ++k) {
    const auto t0 = Clock::now();
    Tensor out = body(inputs[k]);
    sync();
    lazy.push_back(ms_since(t0));
  }
  print("lazy", "any", lazy);
  for (kiln::jit::Mode m : {kiln::jit::Mode::Default, kiln::jit::Mode::ReduceOverhead}) {
    auto f = kiln::jit::compile(
        body,
        {.name = "new-sizes", .mode = m, .dynamic = {{0, 1}}, .specialization_limit = sizes + 1});
    for (int i = 0; i < 3; ++i) {  // the first size (index 0) compiles the entry
      Tensor out = f(inputs[0]);
      sync();
    }
    std::vector<double> calls[3];
    for (int k = 1; k <= sizes; ++k) {
      for (auto& c : calls) {
        const auto t0 = Clock::now();
        Tensor out = f(inputs[k]);
        sync();
        c.push_back(ms_since(t0));
      }
    }
    const char* mode = m == kiln::jit::Mode::Default ? "compile-default" : "compile";
    print(mode, "first", calls[0]);
    print(mode, "second", calls[1]);
    print(mode, "third", calls[2]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cpu";
  int iters = 20000;
  int sizes = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) {
      device = argv[++i];
    } else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--new-sizes") && i + 1 < argc) {
      sizes = std::atoi(argv[++i]);
    } else {
      std::fprintf(
          stderr, "usage: kiln-compile-overhead [--device cpu|cuda] [--iters N] [--new-sizes N]\n");
      return 2;
    }
  }
  const kiln::Device dev = device == "cuda" ? kiln::Device::cuda() : kiln::Device::cpu();
  if (sizes > 0) {
    new_sizes(dev, device, sizes);
    return 0;
  }
  std::vector<Tensor> in;
  {
    kiln::EagerGuard eager;
    for (int i = 0; i < 5; ++i) in.push_back(kiln::randn({1}).to(dev));
  }
  std::vector<kiln::IValue> args;
  for (const Tensor& t : in) args.emplace_back(t);

  // The guard check alone.
  kiln::guards::GuardSet guards = kiln::guards::GuardSet::from_call(args, {});
  bool ok = true;
  const double check_ns = median_ns([&] { ok = ok && guards.check(args); }, iters * 10);
  std::printf(
      "{\"what\":\"guard check, 5 tensor arguments\",\"device\":\"%s\",\"ns\":%.1f,\"holds\":%s}\n",
      device.c_str(), check_ns, ok ? "true" : "false");

  auto body = [](const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d,
                 const Tensor& e) { return a + b + c + d + e; };
  auto sync = [&] {
    kiln::sync();
    if (dev.is_cuda()) kiln::cuda::synchronize(dev);
  };
  auto row = [&](const char* mode, double ns) {
    std::printf("{\"what\":\"tiny call\",\"device\":\"%s\",\"mode\":\"%s\",\"us\":%.2f}\n",
                device.c_str(), mode, ns / 1e3);
    std::fflush(stdout);
  };
  Tensor out;
  row("eager", median_ns(
                   [&] {
                     kiln::EagerGuard eager;
                     out = body(in[0], in[1], in[2], in[3], in[4]);
                     sync();
                   },
                   iters / 10));
  row("lazy", median_ns(
                  [&] {
                    out = body(in[0], in[1], in[2], in[3], in[4]);
                    sync();
                  },
                  iters / 10));
  for (kiln::jit::Mode m : {kiln::jit::Mode::Default, kiln::jit::Mode::ReduceOverhead}) {
    auto f = kiln::jit::compile(body, {.name = "tiny", .mode = m});
    const double ns = median_ns(
        [&] {
          out = f(in[0], in[1], in[2], in[3], in[4]);
          sync();
        },
        iters);
    row(m == kiln::jit::Mode::Default ? "compile-default" : "compile", ns);
  }
  return 0;
}
