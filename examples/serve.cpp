// A server-shaped kiln program: one model shared by N worker threads, each
// with its own KV cache, its own compiled prefill and decode step (and, on
// CUDA, its own stream), serving a queue of synthetic requests whose prompt
// lengths and new-token counts are drawn from a seeded distribution. It
// reports tokens/s, time to first token, per-token latency (p50, p99) and the
// memory kiln holds.
//
//   serve                                   a random tiny Llama on the best device
//   serve --family gpt2 --config gpt2       a random GPT-2 124M
//   serve --family llama --checkpoint DIR   a Hugging Face folder (config.json, *.safetensors)
//   serve --help                            every option
//
// Token ids in, token ids out: tokenization is the caller's (here, the
// prompts are random ids).

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kiln/kiln.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string family = "llama";  // llama or gpt2
  std::string config;            // a named config (default: tiny, or gpt2)
  std::string checkpoint;        // a Hugging Face folder; empty: random weights
  std::string device;            // cpu or cuda (default: cuda when present)
  std::string dtype;             // f32, f16, bf16 (default: bf16 on cuda, f32 on cpu)
  int workers = 2;
  int batch = 1;  // requests one worker decodes together
  int requests = 16;
  int max_prompt = 32;
  int max_new = 16;
  double temperature = 0.0;
  uint64_t seed = 0;
  bool uncompiled = false;  // run the steps lazily, not through jit::compile
};

void usage() {
  std::printf(
      "serve [--family llama|gpt2] [--config NAME] [--checkpoint DIR] [--device cpu|cuda]\n"
      "      [--dtype f32|f16|bf16] [--workers N] [--batch B] [--requests R]\n"
      "      [--max-prompt P] [--max-new M] [--temperature T] [--seed S] [--uncompiled]\n"
      "configs: llama: tiny, smollm2-135m, llama-3.2-1b, llama-3.1-8b, qwen2.5-0.5b;\n"
      "         gpt2: gpt2, gpt2-medium, gpt2-large, gpt2-xl, tiny\n");
}

// The value of option `key` as a whole number (T) or a floating one: the
// whole string, or exit 2 naming the option ("12abc", "x" and 1e12 for an
// int are refused, where std::stoi would take 12, throw "stoi" or overflow).
template <class T>
T number(const std::string& key, const std::string& v) {
  size_t used = 0;
  bool ok = !v.empty();
  T out{};
  try {
    if constexpr (std::is_floating_point_v<T>) {
      out = static_cast<T>(std::stod(v, &used));
    } else if constexpr (std::is_unsigned_v<T>) {
      ok = ok && v[0] != '-';  // stoull wraps a minus sign
      out = static_cast<T>(std::stoull(v, &used));
    } else {
      const long long x = std::stoll(v, &used);
      ok = ok && x >= std::numeric_limits<T>::min() && x <= std::numeric_limits<T>::max();
      out = static_cast<T>(x);
    }
  } catch (const std::exception&) {  // not a number, or out of range
    ok = false;
  }
  if (!ok || used != v.size()) {
    std::fprintf(stderr, "serve: expected a %s for %s, got '%s'\n",
                 std::is_floating_point_v<T> ? "number" : "whole number", key.c_str(), v.c_str());
    std::exit(2);
  }
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key == "--help" || key == "-h") {
      usage();
      std::exit(0);
    }
    if (key == "--uncompiled") {
      a.uncompiled = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "serve: %s needs a value\n", key.c_str());
      std::exit(2);
    }
    const std::string v = argv[++i];
    if (key == "--family")
      a.family = v;
    else if (key == "--config")
      a.config = v;
    else if (key == "--checkpoint")
      a.checkpoint = v;
    else if (key == "--device")
      a.device = v;
    else if (key == "--dtype")
      a.dtype = v;
    else if (key == "--workers")
      a.workers = number<int>(key, v);
    else if (key == "--batch")
      a.batch = number<int>(key, v);
    else if (key == "--requests")
      a.requests = number<int>(key, v);
    else if (key == "--max-prompt")
      a.max_prompt = number<int>(key, v);
    else if (key == "--max-new")
      a.max_new = number<int>(key, v);
    else if (key == "--temperature")
      a.temperature = number<double>(key, v);
    else if (key == "--seed")
      a.seed = number<uint64_t>(key, v);
    else {
      std::fprintf(stderr, "serve: unknown option %s\n", key.c_str());
      usage();
      std::exit(2);
    }
  }
  if (a.device.empty()) a.device = kiln::cuda::is_available() ? "cuda" : "cpu";
  if (a.dtype.empty()) a.dtype = a.device == "cuda" ? "bf16" : "f32";
  if (a.config.empty()) a.config = a.family == "gpt2" ? "gpt2" : "tiny";
  if (a.workers < 1 || a.batch < 1 || a.requests < 0 || a.max_prompt < 1 || a.max_new < 1) {
    std::fprintf(stderr, "serve: workers, batch, max-prompt and max-new must be positive\n");
    std::exit(2);
  }
  return a;
}

kiln::DType dtype_of(const std::string& name) {
  if (name == "f32") return kiln::kFloat32;
  if (name == "f16") return kiln::kFloat16;
  if (name == "bf16") return kiln::kBFloat16;
  throw kiln::Error("[serve] expected --dtype f32, f16 or bf16, got " + name);
}

// Either family behind what the workers need: a cache and the two steps over it.
struct Model {
  std::optional<kiln::nn::GPT2> gpt2;
  std::optional<kiln::nn::Llama> llama;

  int64_t vocab() const { return gpt2 ? gpt2->vocab_size() : llama->vocab_size(); }
  kiln::nn::KVCache make_cache(int64_t batch, int64_t length) const {
    return gpt2 ? gpt2->make_cache(batch, length) : llama->make_cache(batch, length);
  }
  kiln::nn::DecodeSteps steps(kiln::nn::KVCache& cache) const {
    return gpt2 ? kiln::nn::decode_steps(*gpt2, cache) : kiln::nn::decode_steps(*llama, cache);
  }
};

Model load(const Args& a, kiln::Device device, kiln::DType dtype) {
  Model m;
  if (a.family == "gpt2") {
    m.gpt2 = a.checkpoint.empty() ? kiln::nn::GPT2::random(kiln::nn::GPT2Config::named(a.config),
                                                           dtype, device, a.seed)
                                  : kiln::nn::GPT2::from_pretrained(a.checkpoint, device, dtype);
  } else if (a.family == "llama") {
    m.llama = a.checkpoint.empty() ? kiln::nn::Llama::random(kiln::nn::LlamaConfig::named(a.config),
                                                             dtype, device, a.seed)
                                   : kiln::nn::Llama::from_pretrained(a.checkpoint, device, dtype);
  } else {
    throw kiln::Error("[serve] expected --family llama or gpt2, got " + a.family);
  }
  return m;
}

struct Request {
  std::vector<int64_t> prompt;
  int64_t max_new = 0;
};

// Prompt lengths and new-token counts uniform in [1, max], token ids uniform.
std::vector<Request> make_requests(const Args& a, int64_t vocab) {
  std::mt19937_64 rng(a.seed);
  std::uniform_int_distribution<int64_t> prompt_len(1, a.max_prompt), new_len(1, a.max_new),
      token(0, vocab - 1);
  std::vector<Request> out(static_cast<size_t>(a.requests));
  for (Request& r : out) {
    r.prompt.resize(static_cast<size_t>(prompt_len(rng)));
    for (int64_t& t : r.prompt) t = token(rng);
    r.max_new = new_len(rng);
  }
  return out;
}

// What the workers measured, merged under a lock.
struct Stats {
  std::mutex mutex;
  std::vector<double> ttft_ms, token_ms;
  std::atomic<int64_t> tokens{0}, requests_done{0};
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void serve_requests(const Model& model, const Args& a, kiln::Device device,
                    const std::vector<Request>& requests, std::atomic<size_t>& next, Stats& stats,
                    std::atomic<int>& warm, std::atomic<int64_t>& warm_ns) {
  std::optional<kiln::cuda::StreamGuard> stream;
  if (device.is_cuda()) stream.emplace(kiln::cuda::Stream::from_pool(device));
  kiln::nn::KVCache cache = model.make_cache(a.batch, a.max_prompt + a.max_new);
  // The prefill and the decode step, each through jit::compile once per
  // worker (the compiled functions capture this worker's cache): a call
  // replays a cached plan, on CUDA one graph replay per decode step.
  // --uncompiled runs them lazily instead (recorded and fused at every call).
  kiln::nn::DecodeSteps steps = model.steps(cache);
  if (!a.uncompiled) steps = kiln::nn::compile_steps(steps, "serve");
  kiln::nn::GenerateOptions warmup;
  warmup.max_new_tokens = 2;
  kiln::nn::generate(steps, {{0, 1}}, warmup);  // traces and compiles both steps
  if (++warm == a.workers) warm_ns = Clock::now().time_since_epoch().count();

  kiln::nn::GenerateOptions o;
  o.temperature = a.temperature;
  o.seed = a.seed;
  for (;;) {
    const size_t first = next.fetch_add(static_cast<size_t>(a.batch));
    if (first >= requests.size()) break;
    const size_t last = std::min(first + static_cast<size_t>(a.batch), requests.size());
    std::vector<std::vector<int64_t>> prompts;
    o.max_new_tokens = 0;
    for (size_t i = first; i < last; ++i) {
      prompts.push_back(requests[i].prompt);
      o.max_new_tokens = std::max(o.max_new_tokens, requests[i].max_new);
    }
    const Clock::time_point start = Clock::now();
    std::vector<Clock::time_point> previous(prompts.size(), start);
    std::vector<int64_t> count(prompts.size(), 0);
    std::vector<double> ttft, gaps;
    // A row batched with longer requests decodes past its own limit; those tokens are not counted.
    o.on_token = [&](int64_t row, int64_t) {
      if (count[row] >= requests[first + row].max_new) return;
      const Clock::time_point now = Clock::now();
      (count[row] == 0 ? ttft : gaps).push_back(ms_between(previous[row], now));
      previous[row] = now;
      ++count[row];
      ++stats.tokens;
    };
    kiln::nn::generate(steps, prompts, o);
    stats.requests_done += static_cast<int64_t>(prompts.size());
    std::lock_guard<std::mutex> lock(stats.mutex);
    stats.ttft_ms.insert(stats.ttft_ms.end(), ttft.begin(), ttft.end());
    stats.token_ms.insert(stats.token_ms.end(), gaps.begin(), gaps.end());
  }
}

int run(const Args& a) {
  const kiln::Device device(a.device);
  const kiln::DType dtype = dtype_of(a.dtype);
  std::fprintf(stderr, "[serve] loading %s %s%s on %s (%s)\n", a.family.c_str(),
               a.checkpoint.empty() ? a.config.c_str() : a.checkpoint.c_str(),
               a.checkpoint.empty() ? " (random weights)" : "", device.str().c_str(),
               a.dtype.c_str());
  const Model model = load(a, device, dtype);
  const std::vector<Request> requests = make_requests(a, model.vocab());

  Stats stats;
  std::atomic<size_t> next{0};
  std::atomic<int> warm{0};
  std::atomic<int64_t> warm_ns{0};
  std::atomic<bool> finished{false};
  std::vector<std::thread> workers;
  std::vector<std::string> errors(static_cast<size_t>(a.workers));
  const Clock::time_point start = Clock::now();
  for (int w = 0; w < a.workers; ++w) {
    workers.emplace_back([&, w] {
      try {
        serve_requests(model, a, device, requests, next, stats, warm, warm_ns);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(w)] = e.what();
        warm = a.workers;  // let the progress line move on
      }
    });
  }
  // The progress line: compiling (warm-up) first, then serving.
  std::thread progress([&] {
    while (!finished) {
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      if (warm < a.workers) {
        std::fprintf(stderr, "\r[serve] compiling: %d/%d workers warm, %.1f s   ", warm.load(),
                     a.workers, s);
      } else {
        std::fprintf(stderr, "\r[serve] %lld/%d requests, %lld tokens, %.1f s   ",
                     static_cast<long long>(stats.requests_done.load()), a.requests,
                     static_cast<long long>(stats.tokens.load()), s);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  });
  for (std::thread& t : workers) t.join();
  if (device.is_cuda()) kiln::cuda::synchronize(device);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  finished = true;
  progress.join();
  std::fprintf(stderr, "\n");
  for (const std::string& e : errors) {
    if (!e.empty()) {
      std::fprintf(stderr, "serve: a worker failed: %s\n", e.c_str());
      return 1;
    }
  }

  std::printf("model: %s %s on %s, %s; %d workers, batch %d, %s\n", a.family.c_str(),
              a.checkpoint.empty() ? a.config.c_str() : a.checkpoint.c_str(), device.str().c_str(),
              a.dtype.c_str(), a.workers, a.batch,
              a.uncompiled ? "uncompiled (lazy)" : "jit::compile");
  std::printf("requests: %d (prompts of 1-%d tokens, 1-%d new), %lld new tokens in %.2f s\n",
              a.requests, a.max_prompt, a.max_new, static_cast<long long>(stats.tokens.load()),
              seconds);
  const double warmup_s = warm_ns ? std::chrono::duration<double>(
                                        Clock::time_point(Clock::duration(warm_ns.load())) - start)
                                        .count()
                                  : 0.0;
  std::printf("warm-up (tracing and compiling, every worker): %.2f s\n", warmup_s);
  std::printf("throughput: %.1f tokens/s (warm-up included)\n",
              static_cast<double>(stats.tokens.load()) / seconds);
  std::printf("time to first token: p50 %.2f ms, p99 %.2f ms\n", percentile(stats.ttft_ms, 50),
              percentile(stats.ttft_ms, 99));
  std::printf("per-token latency: p50 %.2f ms, p99 %.2f ms\n", percentile(stats.token_ms, 50),
              percentile(stats.token_ms, 99));
  if (device.is_cuda()) {
    std::printf("%s", kiln::cuda::memory_summary(device).c_str());
  } else {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf("memory: peak resident set %.1f MiB (kiln's memory_summary covers CUDA devices)\n",
                static_cast<double>(usage.ru_maxrss) / 1024.0);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "serve: %s\n", e.what());
    return 1;
  }
}
