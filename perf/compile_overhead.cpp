// kiln-compile-overhead: what a jit::compile hit costs the host, apart from
// its kernels.
//
//   kiln-compile-overhead [--device cpu|cuda] [--iters N]
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

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "guards/guards.h"
#include "kiln/kiln.h"

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

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cpu";
  int iters = 20000;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) {
      device = argv[++i];
    } else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: kiln-compile-overhead [--device cpu|cuda] [--iters N]\n");
      return 2;
    }
  }
  const kiln::Device dev = device == "cuda" ? kiln::Device::cuda() : kiln::Device::cpu();
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
