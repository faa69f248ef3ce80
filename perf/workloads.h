#pragma once

// The reference workloads of the benchmarks (BENCHMARKS.md), written once as a
// template over a tensor library facade, so kiln-bench and the libtorch twin
// run exactly the same computation.

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::perf {

// chain16: x = x*1.0001 + 0.5; sigmoid; -0.25; tanh, four times. sigmoid and
// tanh are the tensor library's, found by argument-dependent lookup.
template <class T>
T chain16(const T& x0) {
  T x = x0;
  for (int i = 0; i < 4; ++i) {
    x = x * 1.0001 + 0.5;
    x = sigmoid(x);
    x = x - 0.25;
    x = tanh(x);
  }
  return x;
}

struct Case {
  std::string workload;  // chain16, mlp, gpt2, gpt2-decode
  std::string shape;     // "4096", "32x1024", "1x128"
  int64_t a = 0, b = 0;  // sizes: elements, or (batch, tokens)
};

// The cases a device runs: the GPU sizes or the CPU sizes of BENCHMARKS.md.
inline std::vector<Case> cases_for(bool gpu, const std::string& only) {
  std::vector<Case> all = {
      {"chain16", "4096", 4096, 0},
      {"chain16", gpu ? "64Mi" : "16Mi", gpu ? (int64_t{64} << 20) : (int64_t{16} << 20), 0},
      {"mlp", "32x1024", 32, 1024},
      {"gpt2", "1x1", 1, 1},
      {"gpt2", "1x128", 1, 128},
  };
  if (gpu) all.push_back({"gpt2", "8x128", 8, 128});
  // One decode step against a static KV cache of 1024 positions (logits included).
  all.push_back({"gpt2-decode", "1x1024", 1, 1024});
  all.push_back({"gpt2-decode", "8x1024", 8, 1024});
  // A 1B-class Llama decode step (Llama 3.2 1B shapes, random bf16 weights,
  // cache of 2048): GPU only, and only when asked for by name (making its
  // 1.24B random weights takes a while).
  if (gpu && only == "llama-decode") {
    all.push_back({"llama-decode", "1x2048", 1, 2048});
    all.push_back({"llama-decode", "8x2048", 8, 2048});
  }
  std::vector<Case> out;
  for (const Case& c : all) {
    if (only == "all" || only == c.workload) out.push_back(c);
  }
  return out;
}

}  // namespace kiln::perf
