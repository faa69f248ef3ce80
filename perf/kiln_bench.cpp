// kiln-bench: the reference workloads (../BENCHMARKS.md) on the best device
// present, in each execution mode, as a table or one JSON object per line.
//
//   kiln-bench [--device cpu|cuda] [--workload chain16|mlp|gpt2|gpt2-decode|all]
//              [--mode eager|lazy|compile-default|compile|compile-autotune|all]
//              [--shape S] [--iters N]
//              [--json] [--profile FILE] [--timeline N] [--positions P]
//
// Modes: eager (EagerGuard), lazy (traced and fused per call), compile-default
// (jit::compile, Mode::Default), compile (jit::compile, Mode::ReduceOverhead) and,
// only when asked for, compile-autotune (Mode::MaxAutotune).
// Latency: wall time of one call including kiln::sync() (which runs a lazy
// trace and waits for the device), median of N calls after 5 warm-up calls.
// host_us_per_call: CPU time of the calling thread inside the call, the
// synchronize excluded (on CUDA: what launching costs the host; on the CPU
// it includes the kernels' share run on the calling thread).
// llama-decode (GPU): the same for Llama 3.2 1B's shapes in bf16 with a
// cache of 2048 at position 1024 (random weights; 2.47 GB read per step).
// gpt2-decode: one decode step (embeddings, 12 blocks writing a static KV
// cache of 1024 positions in place at a position held in a device tensor,
// final LayerNorm, tied LM head); the position stays at 512 so every call
// does the same work.
// First call: the first call in this process, compile included. With --json
// (CUDA), first_kernel_ms is the part of it spent making generated kernels ready
// (first_compiled by NVRTC, first_disk_hits from the disk cache, module loads
// included) and first_blas_ms the part choosing cuBLASLt algorithms (first_blas_queries
// choices, first_blas_disk_hits of them from the disk cache).
// --profile FILE: a kiln::profiler::Profile records the timed calls (each a
// range named after its case) and writes them as a Chrome trace to FILE, or,
// when several cases or modes run, to FILE.<workload>.<shape>.<mode>.json.
// The profiler's own cost is then part of the times printed; the 15 rows of
// most self CPU time are printed to stderr.
// --timeline N (CUDA): after the timed calls, N more calls recorded by CUPTI
// (Note [Kernel timeline] in perf/timeline.h): each call's wall time split into
// head, busy, idle and tail, every kernel's median duration and the gap before
// it, and the first P kernels by position (--positions P); printed after the
// case's row, with a lone memset-and-synchronize as the floor of one launch.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "jit/codegen_cuda/launch_cuda.h"
#include "kiln/kiln.h"
#include "kiln/profiler.h"
#include "perf/timeline.h"
#include "perf/workloads.h"
#include "runtime/cuda/blas_lt.h"

namespace {

using kiln::Tensor;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string device = "auto", workload = "all", mode = "all", shape;  // shape: all when empty
  int iters = 0;                                                       // 0: per-workload default
  bool json = false;
  std::string profile;  // --profile FILE ("": none)
  int timeline = 0;     // --timeline N: calls recorded by CUPTI after the timed ones
  int positions = 0;    // --positions P: kernels listed by position in the timeline
};

// Where measure() writes the trace of its timed calls ("": it records none),
// and the name of their ranges.
std::string g_trace_path, g_trace_label;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

double thread_cpu_us() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) * 1e-3;
}

struct Result {
  double first_call_ms = 0, latency_p50_us = 0, latency_p90_us = 0;
  int64_t executed_nodes = 0;  // nodes run per call (lazy)
  // CUDA kernels launched per call: generated kernels and cuBLASLt matmuls.
  int64_t kernels_per_call = 0;
  int64_t kernels = 0;  // fused kernels compiled in this process
  // Inside the first call (CUDA): generated kernels made ready (NVRTC or the
  // disk cache, and module loads), and cuBLASLt heuristic queries.
  int64_t first_compiled = 0, first_disk_hits = 0, first_blas_queries = 0, first_blas_disk_hits = 0;
  double first_kernel_ms = 0, first_blas_ms = 0;
  double host_us_per_call = 0;  // median
  int64_t recompiles = -1;      // compiled modes: entries built after the first
  int64_t steps_per_call = -1;  // compiled modes: the plan's steps (kernels and extern calls)
};

// Times `step` (which must leave its result materialized by kiln::sync()).
Result measure(const std::function<Tensor()>& step, int iters) {
  Result r;
  const auto k0 = kiln::jit::cuda::cuda_kernel_stats();
  const auto b0 = kiln::cuda::lt_cache_stats();
  auto t0 = Clock::now();
  Tensor out = step();
  kiln::sync();
  r.first_call_ms = us_since(t0) / 1000;
  const auto k1 = kiln::jit::cuda::cuda_kernel_stats();
  const auto b1 = kiln::cuda::lt_cache_stats();
  r.first_compiled = k1.compiled - k0.compiled;
  r.first_disk_hits = k1.disk_hits - k0.disk_hits;
  r.first_kernel_ms = k1.ready_ms - k0.ready_ms;
  r.first_blas_ms = b1.miss_ms - b0.miss_ms;
  r.first_blas_queries = b1.misses - b0.misses;
  r.first_blas_disk_hits = b1.disk_hits - b0.disk_hits;
  for (int i = 0; i < 5; ++i) {
    out = step();
    kiln::sync();
  }
  auto s0 = kiln::jit::trace_stats();
  const auto l0 = kiln::jit::cuda::cuda_kernel_stats();
  const auto m0 = kiln::cuda::lt_cache_stats();
  std::vector<double> samples, host;
  std::unique_ptr<kiln::profiler::Profile> prof;
  if (!g_trace_path.empty()) prof = std::make_unique<kiln::profiler::Profile>();
  for (int i = 0; i < iters; ++i) {
    kiln::profiler::Range range(g_trace_label);
    auto t = Clock::now();
    const double c0 = thread_cpu_us();
    out = step();
    host.push_back(thread_cpu_us() - c0);
    kiln::sync();
    samples.push_back(us_since(t));
    // Let go of the result before the next call, as perf/torch_gpu.py does
    // (Note [Results handed back] in jit/compile/instance.cpp).
    out = Tensor();
  }
  if (prof) {
    prof->stop();
    prof->export_chrome_trace(g_trace_path);
    std::fprintf(stderr, "kiln-bench: wrote a trace of %d calls (%zu events) to %s\n%s", iters,
                 prof->events().size(), g_trace_path.c_str(),
                 prof->key_averages().table(kiln::profiler::SortBy::SelfCpu, 15).c_str());
  }
  std::sort(host.begin(), host.end());
  r.host_us_per_call = host[host.size() / 2];
  auto s1 = kiln::jit::trace_stats();
  const auto l1 = kiln::jit::cuda::cuda_kernel_stats();
  const auto m1 = kiln::cuda::lt_cache_stats();
  r.kernels_per_call = (l1.launches - l0.launches + (m1.hits + m1.misses) - (m0.hits + m0.misses)) /
                       std::max(iters, 1);
  std::sort(samples.begin(), samples.end());
  r.latency_p50_us = samples[samples.size() / 2];
  r.latency_p90_us = samples[samples.size() * 9 / 10];
  r.executed_nodes = (s1.executed_nodes - s0.executed_nodes) / std::max(iters, 1);
  return r;
}

// `n` more calls of `step`, each bracketed for the timeline.
void record(kiln::perf::Timeline& timeline, const std::function<Tensor()>& step, int n) {
  for (int i = 0; i < n; ++i) {
    timeline.begin_call();
    Tensor out = step();
    kiln::sync();
    timeline.end_call();
  }
}

// A workload: a function of its input tensors (weights and caches captured).
struct Workload {
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  std::vector<Tensor> inputs;
};

Workload build(const kiln::perf::Case& c, kiln::Device dev, kiln::DType dt) {
  kiln::manual_seed(0);
  kiln::EagerGuard setup;  // weights are plain tensors
  if (c.workload == "chain16") {
    return {[](const std::vector<Tensor>& in) { return kiln::perf::chain16(in[0]); },
            {kiln::randn({c.a}).to(dev, dt)}};
  }
  if (c.workload == "mlp") {
    Tensor x = kiln::randn({c.a, c.b}).to(dev, dt);
    auto lin = [&](int64_t in, int64_t out) {
      return kiln::nn::Linear{(kiln::randn({out, in}) * 0.02).to(dev, dt),
                              (kiln::randn({out}) * 0.02).to(dev, dt)};
    };
    auto l1 = std::make_shared<kiln::nn::Linear>(lin(1024, 4096));
    auto l2 = std::make_shared<kiln::nn::Linear>(lin(4096, 1024));
    return {[l1, l2](const std::vector<Tensor>& in) {
              return l2->forward(kiln::relu(l1->forward(in[0])));
            },
            {x}};
  }
  if (c.workload == "llama-decode") {
    const kiln::nn::LlamaConfig cfg = kiln::nn::LlamaConfig::named("llama-3.2-1b");
    auto model =
        std::make_shared<kiln::nn::Llama>(kiln::nn::Llama::random(cfg, kiln::kBFloat16, dev, 0));
    auto cache = std::make_shared<kiln::nn::Llama::Cache>(model->make_cache(c.a, c.b));
    Tensor ids = kiln::randint(0, cfg.vocab_size, {c.a, 1}).to(dev);
    Tensor pos = kiln::full({1}, c.b / 2, kiln::TensorOptions(kiln::kInt64)).to(dev);
    return {[model, cache](const std::vector<Tensor>& in) {
              return model->decode_step(in[0], in[1], *cache);
            },
            {ids, pos}};
  }
  kiln::nn::GPT2Config cfg;
  auto model = std::make_shared<kiln::nn::GPT2>(kiln::nn::GPT2::random(cfg, dt, dev, 0));
  if (c.workload == "gpt2-decode") {
    auto cache = std::make_shared<kiln::nn::GPT2::Cache>(model->make_cache(c.a, c.b));
    Tensor ids = (kiln::randint(0, cfg.vocab, {c.a, 1})).to(dev);
    Tensor pos = kiln::full({1}, c.b / 2, kiln::TensorOptions(kiln::kInt64)).to(dev);
    return {[model, cache](const std::vector<Tensor>& in) {
              return model->decode_step(in[0], in[1], *cache);
            },
            {ids, pos}};
  }
  // gpt2: 12 blocks + final LayerNorm over hidden states [B, T, 768].
  Tensor h = (kiln::randn({c.a, c.b, cfg.d_model}) * 0.5).to(dev, dt);
  return {[model](const std::vector<Tensor>& in) { return model->forward_hidden(in[0]); }, {h}};
}

void print_row(const Options& o, const kiln::perf::Case& c, const char* device, const char* dtype,
               const char* mode, const Result& r) {
  if (o.json) {
    std::printf(
        "{\"workload\":\"%s\",\"shape\":\"%s\",\"dtype\":\"%s\",\"device\":\"%s\","
        "\"mode\":\"%s\",\"latency_us_p50\":%.2f,\"latency_us_p90\":%.2f,"
        "\"first_call_ms\":%.3f,\"first_kernel_ms\":%.3f,\"first_compiled\":%lld,"
        "\"first_disk_hits\":%lld,\"first_blas_ms\":%.3f,\"first_blas_queries\":%lld,"
        "\"first_blas_disk_hits\":%lld,\"nodes_per_call\":%lld,\"kernels_per_call\":%lld,"
        "\"host_us_per_call\":%.2f,\"recompiles\":%lld,\"steps_per_call\":%lld}\n",
        c.workload.c_str(), c.shape.c_str(), dtype, device, mode, r.latency_p50_us,
        r.latency_p90_us, r.first_call_ms, r.first_kernel_ms,
        static_cast<long long>(r.first_compiled), static_cast<long long>(r.first_disk_hits),
        r.first_blas_ms, static_cast<long long>(r.first_blas_queries),
        static_cast<long long>(r.first_blas_disk_hits), static_cast<long long>(r.executed_nodes),
        static_cast<long long>(r.kernels_per_call), r.host_us_per_call,
        static_cast<long long>(r.recompiles), static_cast<long long>(r.steps_per_call));
  } else {
    std::printf("%-11s %-8s %-8s %-5s %-15s %10.1f %10.1f %10.1f %10.2f %7lld\n",
                c.workload.c_str(), c.shape.c_str(), dtype, device, mode, r.latency_p50_us,
                r.latency_p90_us, r.host_us_per_call, r.first_call_ms,
                static_cast<long long>(r.kernels_per_call));
  }
  std::fflush(stdout);
}

int run(const Options& o) {
  KILN_CHECK(o.device == "cpu" || o.device == "cuda" || o.device == "auto",
             "[kiln-bench] expected --device cpu, cuda or auto, got '", o.device, "'");
  bool gpu = o.device == "cuda" || (o.device == "auto" && kiln::cuda::is_available());
  KILN_CHECK(!gpu || kiln::cuda::is_available(),
             "[kiln-bench] expected a CUDA device for --device cuda, got none (",
             kiln::cuda::built() ? "no GPU or driver" : "kiln was built without CUDA", ")");
  kiln::Device dev = gpu ? kiln::Device::cuda() : kiln::Device::cpu();
  const char* device = gpu ? "cuda" : "cpu";
  std::vector<std::string> modes;
  for (const char* m : {"eager", "lazy", "compile-default", "compile"}) {
    if (o.mode == "all" || o.mode == m) modes.push_back(m);
  }
  // Mode::MaxAutotune times each few-row product both ways on the entry's
  // first run; not part of "all" (its first call is the timing).
  if (o.mode == "compile-autotune") modes.push_back(o.mode);
  KILN_CHECK(!modes.empty(),
             "[kiln-bench] expected --mode eager, lazy, compile-default, compile, "
             "compile-autotune or all, got ",
             o.mode);
  if (!o.json) {
    std::printf(
        "kiln-bench on %s (%s); latency per call incl. sync, median of N after 5 warm-ups\n",
        gpu ? kiln::cuda::device_name().c_str() : "cpu", kiln::cpu_isa());
    std::printf("%-11s %-8s %-8s %-5s %-15s %10s %10s %10s %10s %7s\n", "workload", "shape",
                "dtype", "dev", "mode", "p50 us", "p90 us", "host us", "first ms", "kernels");
  }
  std::vector<kiln::perf::Case> cases;
  const std::vector<kiln::perf::Case> of_workload = kiln::perf::cases_for(gpu, o.workload);
  KILN_CHECK(!of_workload.empty(), "[kiln-bench] expected --workload ",
             "chain16, mlp, gpt2, gpt2-decode or all (llama-decode on a GPU), got '", o.workload,
             "' on ", device);
  std::string shapes;
  for (const kiln::perf::Case& c : of_workload) {
    if (o.shape.empty() || c.shape == o.shape) cases.push_back(c);
    shapes += (shapes.empty() ? "" : ", ") + c.shape;
  }
  KILN_CHECK(!cases.empty(), "[kiln-bench] expected --shape one of ", shapes, " for ", o.workload,
             " on ", device, ", got '", o.shape, "'");
  if (o.timeline > 0 && gpu) {
    std::fprintf(o.json ? stderr : stdout,
                 "floor: a 4-byte memset and a synchronize, p50 %.1f us\n",
                 kiln::perf::Timeline::launch_floor_us(500));
  }
  for (const kiln::perf::Case& c : cases) {
    kiln::DType dt = c.workload == "llama-decode" ? kiln::kBFloat16
                     : gpu && c.workload != "chain16"
                         ? (c.workload == "mlp" ? kiln::kBFloat16 : kiln::kFloat16)
                         : kiln::kFloat32;
    for (const std::string& mode : modes) {
      Workload w = build(c, dev, dt);
      int iters = o.iters
                      ? o.iters
                      : (c.workload == "gpt2" && c.b > 1 && !gpu ? 10 : (c.a > 1000000 ? 20 : 200));
      g_trace_label = c.workload + " " + c.shape + " " + mode;
      g_trace_path = o.profile;
      if (!o.profile.empty() && (cases.size() > 1 || modes.size() > 1)) {
        g_trace_path += "." + c.workload + "." + c.shape + "." + mode + ".json";
      }
      // Recording from before the first call: graphs are instantiated under it.
      std::unique_ptr<kiln::perf::Timeline> timeline;
      if (o.timeline > 0) timeline = std::make_unique<kiln::perf::Timeline>();
      Result r;
      if (mode == "eager") {
        kiln::EagerGuard eager;
        r = measure([&] { return w.fn(w.inputs); }, iters);
        if (timeline)
          record(
              *timeline, [&] { return w.fn(w.inputs); }, o.timeline);
      } else if (mode == "lazy") {
        r = measure([&] { return w.fn(w.inputs); }, iters);
        if (timeline)
          record(
              *timeline, [&] { return w.fn(w.inputs); }, o.timeline);
      } else {
        auto f =
            kiln::jit::compile([&](const std::vector<Tensor>& in) { return w.fn(in); },
                               {.name = c.workload + " " + c.shape,
                                .mode = mode == "compile" ? kiln::jit::Mode::ReduceOverhead
                                        : mode == "compile-autotune" ? kiln::jit::Mode::MaxAutotune
                                                                     : kiln::jit::Mode::Default});
        r = measure([&] { return f(w.inputs); }, iters);
        if (timeline)
          record(
              *timeline, [&] { return f(w.inputs); }, o.timeline);
        const kiln::jit::CompileStats s = f.stats();
        r.recompiles = s.entries - 1;
        r.steps_per_call = s.kernels_per_call;
        if (!gpu) r.kernels_per_call = s.kernels_per_call;
      }
      print_row(o, c, device, kiln::dtype_name(dt), mode.c_str(), r);
      if (timeline) {
        std::fprintf(o.json ? stderr : stdout, "%s", timeline->report(o.positions).c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace

// A whole decimal number in [lo, hi], or a kiln::Error naming the flag.
int parse_int(const std::string& flag, const std::string& text, int lo, int hi) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  KILN_CHECK(used == text.size() && used > 0 && v >= lo && v <= hi, "[kiln-bench] expected ", flag,
             " to be a whole number in [", lo, ", ", hi, "], got '", text, "'");
  return static_cast<int>(v);
}

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw kiln::Error("[kiln-bench] expected a value after " + a);
      return argv[++i];
    };
    try {
      if (a == "--device") {
        o.device = value();
      } else if (a == "--workload") {
        o.workload = value();
      } else if (a == "--mode") {
        o.mode = value();
      } else if (a == "--shape") {
        o.shape = value();
      } else if (a == "--iters") {
        o.iters = parse_int(a, value(), 1, 100000000);
      } else if (a == "--json") {
        o.json = true;
      } else if (a == "--profile") {
        o.profile = value();
      } else if (a == "--timeline") {
        o.timeline = parse_int(a, value(), 0, 100000000);
      } else if (a == "--positions") {
        o.positions = parse_int(a, value(), 0, 100000000);
      } else {
        std::fprintf(
            stderr,
            "usage: kiln-bench [--device cpu|cuda|auto] [--workload "
            "chain16|mlp|gpt2|gpt2-decode|all]\n"
            "                  [--mode eager|lazy|compile-default|compile|compile-autotune|all]\n"
            "                  [--shape S]\n"
            "                  [--iters N] [--json] [--profile FILE] [--timeline N]\n"
            "                  [--positions P]\n");
        return 2;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln-bench: %s\n", e.what());
      return 2;
    }
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln-bench: %s\n", e.what());
    return 1;
  }
}
