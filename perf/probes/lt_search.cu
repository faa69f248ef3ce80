// Whether cuBLASLt has faster configurations than its heuristic's first
// answer for kiln's prefill and mlp products (issue 14: the prefill goals;
// perf/RESULTS.md, twenty-second session). Not part of the build: a probe,
// compiled by hand with
//   nvcc -O2 -arch=sm_90 -o lt_search perf/probes/lt_search.cu -lcublasLt
// For each product, D[M, N] = X[M, K] W[N, K]^T with kiln's epilogue (bias,
// bias + GELU, bias + the residual as C), the candidates are: the heuristic's
// answers (best fit, up to 64), the heuristic limited to each algorithm id
// (up to 32 each), and every tile x stages x split-K x reduction x swizzle
// that cublasLtMatmulAlgoCheck accepts for each id. Each candidate runs 20
// times in a CUDA graph, replayed; µs per product; its output is compared
// with the first answer's. The ten fastest are timed again beside the first
// answer, interleaved, with more replays.
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lt_probe.h"
#include "probe.h"

namespace {

struct Product {
  const char* name;
  int m, n, k;
  cublasLtEpilogue_t epilogue;
  bool residual;
  cudaDataType_t type;
};

struct Candidate {
  cublasLtMatmulAlgo_t algo;
  size_t workspace;
  const char* source;
  float us = 0;
  double diff = 0;
};

size_t elem(cudaDataType_t t) {
  return t == CUDA_R_32F ? 4 : 2;
}

void fill(void* dst, size_t n, cudaDataType_t t, unsigned seed, float scale) {
  std::vector<uint16_t> h(n);
  unsigned s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const float v = (((s >> 9) & 0xffff) / 65536.f - 0.5f) * scale;
    if (t == CUDA_R_16F) {
      __half x = __float2half(v);
      std::memcpy(&h[i], &x, 2);
    } else {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      h[i] = static_cast<uint16_t>(bits >> 16);  // bfloat16, truncated
    }
  }
  CHECK(cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice));
}

std::vector<float> to_host(const void* src, size_t n, cudaDataType_t t) {
  std::vector<uint16_t> h(n);
  CHECK(cudaMemcpy(h.data(), src, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == CUDA_R_16F) {
      __half x;
      std::memcpy(&x, &h[i], 2);
      out[i] = __half2float(x);
    } else {
      const uint32_t bits = static_cast<uint32_t>(h[i]) << 16;
      std::memcpy(&out[i], &bits, 4);
    }
  }
  return out;
}

template <class T>
T config(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof v, &written);
  return v;
}

std::string describe(const cublasLtMatmulAlgo_t& a) {
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "id %d tile %u stages %u splitK %d red %u swz %u opt %u inner %u cl %u",
                config<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                config<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
                static_cast<unsigned>(config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID)),
                static_cast<unsigned>(config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)));
  return buf;
}

struct Setup {
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  void *w, *x, *d, *r, *bias, *ws;
  size_t ws_bytes = size_t{32} << 20;
  float alpha = 1, beta = 0;
  cudaStream_t stream;
};

void run(const Setup& s, const Candidate& c) {
  LT(cublasLtMatmul(s.handle, s.desc, &s.alpha, s.w, s.a, s.x, s.b, &s.beta, s.r ? s.r : s.d, s.c,
                    s.d, s.c, &c.algo, s.ws, c.workspace, s.stream));
}

// µs per product: `per` products captured in a graph, replayed `reps` times.
float time_candidate(const Setup& s, const Candidate& c, int per, int reps) {
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < per; ++i) run(s, c);
  CHECK(cudaStreamEndCapture(s.stream, &g));
  return replay_us(g, s.stream, reps) / per;
}

void search(const Product& p, cublasLtHandle_t handle, cudaStream_t stream) {
  Setup s{};
  s.handle = handle;
  s.stream = stream;
  const size_t es = elem(p.type);
  CHECK(cudaMalloc(&s.w, (size_t)p.n * p.k * es));
  CHECK(cudaMalloc(&s.x, (size_t)p.m * p.k * es));
  CHECK(cudaMalloc(&s.d, (size_t)p.m * p.n * es));
  CHECK(cudaMalloc(&s.bias, (size_t)p.n * es));
  CHECK(cudaMalloc(&s.ws, s.ws_bytes));
  fill(s.w, (size_t)p.n * p.k, p.type, 1, 0.1f);
  fill(s.x, (size_t)p.m * p.k, p.type, 2, 2.f);
  fill(s.bias, p.n, p.type, 3, 1.f);
  if (p.residual) {
    CHECK(cudaMalloc(&s.r, (size_t)p.m * p.n * es));
    fill(s.r, (size_t)p.m * p.n, p.type, 4, 1.f);
    s.beta = 1;
  }
  LtProblem prob(p.m, p.n, p.k, p.type, p.epilogue);
  prob.set_bias(s.bias);
  s.desc = prob.desc, s.a = prob.a, s.b = prob.b, s.c = prob.c;

  std::vector<Candidate> all;
  auto add = [&](const cublasLtMatmulAlgo_t& algo, const char* source) {
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoCheck(handle, s.desc, s.a, s.b, s.c, s.c, &algo, &check) !=
            CUBLAS_STATUS_SUCCESS ||
        check.workspaceSize > s.ws_bytes)
      return;
    for (const Candidate& c : all) {
      if (std::memcmp(&c.algo, &algo, sizeof algo) == 0) return;
    }
    all.push_back({algo, check.workspaceSize, source});
  };
  auto heuristic = [&](cublasLtMatmulPreference_t pref, cublasLtMatmulHeuristicResult_t* res,
                       int want, const char* source) {
    int count = 0;
    if (cublasLtMatmulAlgoGetHeuristic(handle, s.desc, s.a, s.b, s.c, s.c, pref, want, res,
                                       &count) != CUBLAS_STATUS_SUCCESS)
      return;
    for (int i = 0; i < count; ++i) {
      if (res[i].state == CUBLAS_STATUS_SUCCESS) add(res[i].algo, source);
    }
  };
  cublasLtMatmulPreference_t pref = lt_preference(s.ws_bytes);
  std::vector<cublasLtMatmulHeuristicResult_t> res(64);
  heuristic(pref, res.data(), 64, "best-fit");
  if (all.empty()) {
    std::printf("%s: no algorithm\n", p.name);
    return;
  }
  const size_t n_best_fit = all.size();

  int ids[256];
  int n_ids = 0;
  LT(cublasLtMatmulAlgoGetIds(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, p.type, p.type, p.type,
                              p.type, 256, ids, &n_ids));
  cublasLtMatmulPreference_t limited = lt_preference(s.ws_bytes);
  const uint32_t mode = CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID;
  LT(cublasLtMatmulPreferenceSetAttribute(limited, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &mode,
                                          sizeof mode));
  for (int i = 0; i < n_ids; ++i) {
    std::vector<cublasLtMatmulHeuristicResult_t> r(32);
    for (auto& x : r) {
      LT(cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, p.type, p.type, p.type,
                                p.type, ids[i], &x.algo));
    }
    heuristic(limited, r.data(), 32, "per-id");
  }
  const size_t n_heuristic = all.size();

  // Every tile x stages x split-K x reduction x swizzle each id accepts.
  const int splits[] = {1, 2, 3, 4, 6, 8};
  for (int i = 0; i < n_ids && all.size() < 4000; ++i) {
    cublasLtMatmulAlgo_t algo;
    if (cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, p.type, p.type, p.type,
                               p.type, ids[i], &algo) != CUBLAS_STATUS_SUCCESS)
      continue;
    size_t w = 0;
    uint32_t tiles[128], stages[128];
    int n_tiles = 0, n_stages = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, sizeof tiles,
                                          &w) == CUBLAS_STATUS_SUCCESS)
      n_tiles = static_cast<int>(w / sizeof tiles[0]);
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages,
                                          sizeof stages, &w) == CUBLAS_STATUS_SUCCESS)
      n_stages = static_cast<int>(w / sizeof stages[0]);
    int32_t splitk_ok = 0;
    uint32_t red_mask = 0, swz_ok = 0;
    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk_ok,
                                      sizeof splitk_ok, &w);
    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &red_mask,
                                      sizeof red_mask, &w);
    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swz_ok,
                                      sizeof swz_ok, &w);
    if (n_tiles == 0) tiles[n_tiles++] = CUBLASLT_MATMUL_TILE_UNDEFINED;
    if (n_stages == 0) stages[n_stages++] = CUBLASLT_MATMUL_STAGES_UNDEFINED;
    for (int ti = 0; ti < n_tiles; ++ti) {
      for (int si = 0; si < n_stages; ++si) {
        for (int split : splits) {
          if (split > 1 && !splitk_ok) continue;
          for (uint32_t red = 0; red <= 4; red = red ? red << 1 : 1) {
            if ((split == 1) != (red == 0)) continue;
            if (red && !(red_mask & red)) continue;
            for (uint32_t swz = 0; swz <= swz_ok; ++swz) {
              cublasLtMatmulAlgo_t a = algo;
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tiles[ti],
                                                   sizeof tiles[ti]);
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages[si],
                                                   sizeof stages[si]);
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split,
                                                   sizeof split);
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
                                                   sizeof red);
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz,
                                                   sizeof swz);
              add(a, "enumerated");
            }
          }
        }
      }
    }
  }

  // Time every candidate (20 per graph, 10 replays), check its output.
  run(s, all[0]);
  CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> ref = to_host(s.d, (size_t)p.m * p.n, p.type);
  double scale = 0;
  for (float v : ref) scale = std::max(scale, (double)std::fabs(v));
  for (Candidate& c : all) {
    CHECK(cudaMemsetAsync(s.d, 0, (size_t)p.m * p.n * es, stream));
    run(s, c);
    if (cudaStreamSynchronize(stream) != cudaSuccess) {
      std::fprintf(stderr, "%s: a candidate failed (%s)\n", p.name, describe(c.algo).c_str());
      std::exit(1);
    }
    const std::vector<float> out = to_host(s.d, (size_t)p.m * p.n, p.type);
    for (size_t i = 0; i < out.size(); ++i)
      c.diff = std::max(c.diff, (double)std::fabs(out[i] - ref[i]));
    c.us = time_candidate(s, c, 20, 10);
  }
  std::vector<size_t> order(all.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return all[a].us < all[b].us; });

  // The ten fastest that agree with the first answer, timed again beside it.
  std::printf(
      "\n%s (M %d, N %d, K %d): %zu candidates (%zu best-fit, %zu per-id, %zu enumerated)\n",
      p.name, p.m, p.n, p.k, all.size(), n_best_fit, n_heuristic - n_best_fit,
      all.size() - n_heuristic);
  std::printf("  first answer: %s, first pass %.2f us\n", describe(all[0].algo).c_str(), all[0].us);
  int shown = 0;
  for (size_t i : order) {
    if (shown == 10) break;
    Candidate& c = all[i];
    if (c.diff > 0.02 * scale) {
      std::printf("  rejected (max diff %.3g of %.3g): %s\n", c.diff, scale,
                  describe(c.algo).c_str());
      continue;
    }
    float base = 1e30f, mine = 1e30f;
    for (int round = 0; round < 3; ++round) {
      base = std::min(base, time_candidate(s, all[0], 50, 40));
      mine = std::min(mine, time_candidate(s, c, 50, 40));
    }
    std::printf("  %6.2f us against %6.2f (%5.1f%%) [%s] %s\n", mine, base,
                100.0 * (mine - base) / base, c.source, describe(c.algo).c_str());
    ++shown;
  }
  cudaFree(s.w), cudaFree(s.x), cudaFree(s.d), cudaFree(s.bias), cudaFree(s.ws);
  if (s.r) cudaFree(s.r);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasLtHandle_t handle;
  LT(cublasLtCreate(&handle));
  const Product products[] = {
      {"qkv 128", 128, 2304, 768, CUBLASLT_EPILOGUE_BIAS, false, CUDA_R_16F},
      {"proj 128", 128, 768, 768, CUBLASLT_EPILOGUE_BIAS, true, CUDA_R_16F},
      {"fc 128", 128, 3072, 768, CUBLASLT_EPILOGUE_GELU_BIAS, false, CUDA_R_16F},
      {"down 128", 128, 768, 3072, CUBLASLT_EPILOGUE_BIAS, true, CUDA_R_16F},
      {"qkv 1024", 1024, 2304, 768, CUBLASLT_EPILOGUE_BIAS, false, CUDA_R_16F},
      {"proj 1024", 1024, 768, 768, CUBLASLT_EPILOGUE_BIAS, true, CUDA_R_16F},
      {"fc 1024", 1024, 3072, 768, CUBLASLT_EPILOGUE_GELU_BIAS, false, CUDA_R_16F},
      {"down 1024", 1024, 768, 3072, CUBLASLT_EPILOGUE_BIAS, true, CUDA_R_16F},
      {"mlp up 32", 32, 4096, 1024, CUBLASLT_EPILOGUE_RELU_BIAS, false, CUDA_R_16BF},
      {"mlp down 32", 32, 1024, 4096, CUBLASLT_EPILOGUE_BIAS, false, CUDA_R_16BF},
  };
  std::printf("cuBLASLt %zu\n", cublasLtGetVersion());
  for (const Product& p : products) {
    if (only.empty() || std::string(p.name).find(only) != std::string::npos)
      search(p, handle, stream);
  }
  return 0;
}
