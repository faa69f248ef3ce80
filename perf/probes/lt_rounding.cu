// Whether a cuBLASLt 16-bit product reads beta * C into its float32 sums or
// rounds the product first (perf/RESULTS.md, thirty-fourth session): kiln's
// batched addmm / baddbmm put the bias in C, and a bias that cancels the
// product then shows which. Not part of the build: a probe, compiled by hand
// with
//   nvcc -O2 -arch=sm_90 -o lt_rounding perf/probes/lt_rounding.cu -lcublasLt
// The problem is baddbmm's as kiln hands it over: out[b] = x[b] @ w[b] + bias
// (w[b] of k x n row-major, x[b] of m x k), column-major as
// out^T = w^T x^T with C = D (in place) or C apart from D, batch 2. Row 0's
// bias is minus its exact product rounded to 16 bits. For each k, dtype, C
// form, and with and without the reduction-scheme mask kiln sets for 16-bit
// data: the heuristic's first three answers' algorithms (id, tile, stages,
// split-k, reduction scheme) and how many outputs equal the once-rounded sum,
// how many the product rounded before C, and how many neither (the float32
// sums in another order, or partial sums rounded to 16 bits). Then a few
// larger shapes (mlp's, a decode step's down projection) whose answers may
// split k; and the bias through the epilogue (beta 0) at a few narrow shapes.
// `lt_rounding kiln`: kiln's own linear form instead (kiln_form below).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "lt_probe.h"
#include "probe.h"

namespace {

uint16_t to16(float v, bool bf) {
  if (bf) {
    const __nv_bfloat16 h = __float2bfloat16(v);
    uint16_t r;
    std::memcpy(&r, &h, 2);
    return r;
  }
  const __half h = __float2half(v);
  uint16_t r;
  std::memcpy(&r, &h, 2);
  return r;
}
float from16(uint16_t v, bool bf) {
  if (bf) {
    __nv_bfloat16 h;
    std::memcpy(&h, &v, 2);
    return __bfloat162float(h);
  }
  __half h;
  std::memcpy(&h, &v, 2);
  return __half2float(h);
}
float round16(double v, bool bf) {
  return from16(to16(static_cast<float>(v), bf), bf);
}

template <class T>
int attr(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t which) {
  T v{};
  size_t got = 0;
  LT(cublasLtMatmulAlgoConfigGetAttribute(&a, which, &v, sizeof v, &got));
  return static_cast<int>(v);
}

// mask: 0 every reduction scheme (cuBLASLt's default), 1 in place or float32
// partials, 2 no split k.
void run(cublasLtHandle_t h, int m, int n, int k, bool bf, bool in_place, int mask,
         bool epilogue = false) {
  const int batch = epilogue ? 1 : 2;
  const cudaDataType_t type = bf ? CUDA_R_16BF : CUDA_R_16F;
  std::vector<uint16_t> x(batch * m * k), w(batch * k * n), c(batch * m * n);
  unsigned s = 12345u + k;
  auto rnd = [&] {
    s = s * 1664525u + 1013904223u;
    return ((s >> 8) & 0xffff) / 65536.f - 0.5f;
  };
  for (auto& v : x) v = to16(rnd(), bf);
  for (int b = 0; b < batch; ++b) {  // the same weight in both batches, as a shared one copied
    for (int i = 0; i < k * n; ++i) w[b * k * n + i] = b == 0 ? to16(rnd(), bf) : w[i];
  }
  std::vector<double> exact(batch * m * n);
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double t = 0;
        for (int q = 0; q < k; ++q)
          t += double(from16(x[(b * m + i) * k + q], bf)) * from16(w[(b * k + q) * n + j], bf);
        exact[(b * m + i) * n + j] = t;
      }
  std::vector<uint16_t> bias(n);
  for (int j = 0; j < n; ++j) bias[j] = to16(static_cast<float>(-exact[j]), bf);
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) c[(b * m + i) * n + j] = bias[j];
  void *dx, *dw, *dc, *dd;
  CHECK(cudaMalloc(&dx, x.size() * 2));
  CHECK(cudaMalloc(&dw, w.size() * 2));
  CHECK(cudaMalloc(&dc, c.size() * 2));
  CHECK(cudaMalloc(&dd, c.size() * 2));
  CHECK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dc, c.data(), c.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dd, c.data(), c.size() * 2, cudaMemcpyHostToDevice));
  cublasLtMatmulDesc_t desc;
  LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op = CUBLAS_OP_N;
  void* dbias = nullptr;
  if (epilogue) {  // the bias through the epilogue, no C
    CHECK(cudaMalloc(&dbias, n * 2));
    CHECK(cudaMemcpy(dbias, bias.data(), n * 2, cudaMemcpyHostToDevice));
    const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias,
                                      sizeof dbias));
  }
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof op));
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op, sizeof op));
  cublasLtMatrixLayout_t la, lb, ld;
  LT(cublasLtMatrixLayoutCreate(&la, type, n, k, n));
  LT(cublasLtMatrixLayoutCreate(&lb, type, k, m, k));
  LT(cublasLtMatrixLayoutCreate(&ld, type, n, m, n));
  const int32_t bc = batch;
  const int64_t sa = int64_t(k) * n, sb = int64_t(m) * k, sd = int64_t(m) * n;
  LT(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
  LT(cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
  LT(cublasLtMatrixLayoutSetAttribute(ld, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
  LT(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa,
                                      sizeof sa));
  LT(cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb,
                                      sizeof sb));
  LT(cublasLtMatrixLayoutSetAttribute(ld, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sd,
                                      sizeof sd));
  const size_t ws_bytes = size_t{32} << 20;
  cublasLtMatmulPreference_t pref = lt_preference(ws_bytes);
  if (mask > 0) {
    const uint32_t bits =
        mask == 1 ? CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                  : CUBLASLT_REDUCTION_SCHEME_NONE;
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &bits,
                                            sizeof bits));
  }
  cublasLtMatmulHeuristicResult_t r[8]{};
  int count = 0;
  LT(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 8, r, &count));
  void* ws;
  CHECK(cudaMalloc(&ws, ws_bytes));
  for (int ai = 0; ai < count && ai < 3; ++ai) {
    CHECK(cudaMemcpy(dd, c.data(), c.size() * 2, cudaMemcpyHostToDevice));
    const float alpha = 1.f, beta = epilogue ? 0.f : 1.f;
    LT(cublasLtMatmul(h, desc, &alpha, dw, la, dx, lb, &beta, in_place ? dd : dc, ld, dd, ld,
                      &r[ai].algo, ws, r[ai].workspaceSize, 0));
    CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> got(c.size());
    CHECK(cudaMemcpy(got.data(), dd, got.size() * 2, cudaMemcpyDeviceToHost));
    int once = 0, twice = 0, neither = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double bj = from16(bias[i % n], bf);
      const float g = from16(got[i], bf);
      const float r1 = round16(exact[i] + bj, bf);
      const float r2 = round16(double(round16(exact[i], bf)) + bj, bf);
      if (g == r1)
        ++once;
      else if (g == r2)
        ++twice;
      else
        ++neither;
    }
    std::printf(
        "%s k=%4d m=%2d n=%4d %s%s answer %d: algo %d tile %d stages %d splitk %d reduction %d ws "
        "%zu: "
        "rounded once %d, product rounded first %d, neither %d\n",
        bf ? "bf16" : "f16 ", k, m, n,
        epilogue   ? "bias epilogue"
        : in_place ? "C=D "
                   : "C!=D",
        mask == 0   ? ""
        : mask == 1 ? " float32 partials"
                    : " no split",
        ai, attr<int32_t>(r[ai].algo, CUBLASLT_ALGO_CONFIG_ID),
        attr<uint32_t>(r[ai].algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
        attr<uint32_t>(r[ai].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
        attr<int32_t>(r[ai].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
        attr<uint32_t>(r[ai].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), r[ai].workspaceSize,
        once, twice, neither);
  }
  CHECK(cudaFree(ws));
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dw));
  CHECK(cudaFree(dc));
  CHECK(cudaFree(dd));
  if (dbias) CHECK(cudaFree(dbias));
}

// kiln's linear form (lt_probe.h: W [n, k] transposed, one batch) with the
// bias in the epilogue (or, `bias_as_c`, in C with beta 1) and, `residual`,
// a residual in C beside it: for each reduction-scheme mask (every scheme,
// float32 partials only, no split) the heuristic's first answer, its split,
// how its outputs round (row 0's bias cancels its product) and its time
// (µs per call, 200 calls back to back).
void kiln_form(cublasLtHandle_t h, int m, int n, int k, bool bf, bool residual, bool bias_as_c) {
  const cudaDataType_t type = bf ? CUDA_R_16BF : CUDA_R_16F;
  std::vector<uint16_t> x(size_t(m) * k), w(size_t(n) * k), c(size_t(m) * n), bias(n);
  unsigned s = 777u + k + n;
  auto rnd = [&] {
    s = s * 1664525u + 1013904223u;
    return ((s >> 8) & 0xffff) / 65536.f - 0.5f;
  };
  for (auto& v : x) v = to16(rnd(), bf);
  for (auto& v : w) v = to16(rnd(), bf);
  std::vector<double> exact(size_t(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double t = 0;
      for (int q = 0; q < k; ++q)
        t += double(from16(x[size_t(i) * k + q], bf)) * from16(w[size_t(j) * k + q], bf);
      exact[size_t(i) * n + j] = t;
    }
  for (int j = 0; j < n; ++j) bias[j] = to16(static_cast<float>(-exact[j]), bf);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      c[size_t(i) * n + j] = bias_as_c ? bias[j] : to16(residual ? rnd() * 0.01f : 0.f, bf);
  void *dx, *dw, *dc, *dd, *db;
  CHECK(cudaMalloc(&dx, x.size() * 2));
  CHECK(cudaMalloc(&dw, w.size() * 2));
  CHECK(cudaMalloc(&dc, c.size() * 2));
  CHECK(cudaMalloc(&dd, c.size() * 2));
  CHECK(cudaMalloc(&db, n * 2));
  CHECK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dc, c.data(), c.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, bias.data(), n * 2, cudaMemcpyHostToDevice));
  LtProblem p(m, n, k, type, bias_as_c ? CUBLASLT_EPILOGUE_DEFAULT : CUBLASLT_EPILOGUE_BIAS);
  if (!bias_as_c) p.set_bias(db);
  const bool with_c = bias_as_c || residual;
  const size_t ws_bytes = size_t{32} << 20;
  void* ws;
  CHECK(cudaMalloc(&ws, ws_bytes));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int mask : {0, 1, 2}) {
    cublasLtMatmulPreference_t pref = lt_preference(ws_bytes);
    if (mask > 0) {
      const uint32_t bits =
          mask == 1 ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE : CUBLASLT_REDUCTION_SCHEME_NONE;
      LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                              &bits, sizeof bits));
    }
    cublasLtMatmulHeuristicResult_t r{};
    int count = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(h, p.desc, p.a, p.b, p.c, p.c, pref, 1, &r, &count);
    LT(cublasLtMatmulPreferenceDestroy(pref));
    const char* form = bias_as_c ? "bias as C" : residual ? "bias + residual C" : "bias";
    const char* masks[] = {"any split", "float32 partials", "no split"};
    if (st != CUBLAS_STATUS_SUCCESS || count == 0) {
      std::printf("kiln form %s m=%4d n=%4d k=%4d %s, %s: no answer\n", bf ? "bf16" : "f16 ", m, n,
                  k, form, masks[mask]);
      continue;
    }
    const float alpha = 1.f, beta = with_c ? 1.f : 0.f;
    auto call = [&] {
      LT(cublasLtMatmul(h, p.desc, &alpha, dw, p.a, dx, p.b, &beta, dc, p.c, dd, p.c, &r.algo, ws,
                        r.workspaceSize, 0));
    };
    call();
    CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> got(c.size());
    CHECK(cudaMemcpy(got.data(), dd, got.size() * 2, cudaMemcpyDeviceToHost));
    // Counts over every output, and over row 0 (whose bias cancels its product).
    int once = 0, twice = 0, neither = 0, once0 = 0, twice0 = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double add =
          double(from16(bias[i % n], bf)) + (residual && !bias_as_c ? from16(c[i], bf) : 0.0);
      const float g = from16(got[i], bf);
      if (g == round16(exact[i] + add, bf)) {
        ++once;
        once0 += i < size_t(n);
      } else if (g == round16(double(round16(exact[i], bf)) + add, bf)) {
        ++twice;
        twice0 += i < size_t(n);
      } else {
        ++neither;
      }
    }
    for (int i = 0; i < 20; ++i) call();
    CHECK(cudaEventRecord(e0));
    for (int i = 0; i < 200; ++i) call();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    std::printf(
        "kiln form %s m=%4d n=%4d k=%4d %s, %s: algo %d tile %d splitk %d reduction %d, %.2f us; "
        "rounded once %d, product rounded first %d, neither %d; row 0: once %d, first %d of %d\n",
        bf ? "bf16" : "f16 ", m, n, k, form, masks[mask],
        attr<int32_t>(r.algo, CUBLASLT_ALGO_CONFIG_ID),
        attr<uint32_t>(r.algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
        attr<int32_t>(r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
        attr<uint32_t>(r.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), ms * 1000.0 / 200, once,
        twice, neither, once0, twice0, n);
  }
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  for (void* q : {dx, dw, dc, dd, db, ws}) CHECK(cudaFree(q));
}

}  // namespace

int main(int argc, char** argv) {
  cublasLtHandle_t h;
  LT(cublasLtCreate(&h));
  if (argc > 1 && std::strcmp(argv[1], "kiln") == 0) {
    // mlp's products (bfloat16, 32 rows), GPT-2's at 128 and 1024 rows
    // (float16), and the narrow product whose bfloat16 split rounded first.
    for (bool bf : {true, false}) {
      kiln_form(h, 32, 4096, 1024, bf, false, false);
      kiln_form(h, 32, 1024, 4096, bf, false, false);
      for (int m : {128, 1024}) {
        kiln_form(h, m, 2304, 768, bf, false, false);
        kiln_form(h, m, 768, 768, bf, true, false);
        kiln_form(h, m, 3072, 768, bf, false, false);
        kiln_form(h, m, 768, 3072, bf, true, false);
      }
      for (int k : {8, 16, 64}) {
        kiln_form(h, 15, 6, k, bf, false, false);
        kiln_form(h, 15, 6, k, bf, false, true);
      }
    }
    return 0;
  }
  for (bool bf : {false, true})
    for (int k : {8, 16, 100, 768})
      for (int m : {1, 9, 40})
        for (bool in_place : {true, false})
          for (int mask : {0, 1}) run(h, m, 24, k, bf, in_place, mask);
  // Shapes whose answers may split k (mlp's, GPT-2's at 128 rows, a decode
  // step's down projection), C apart from D: whether a split shows.
  for (bool bf : {false, true})
    for (int mask : {0, 1, 2}) {
      run(h, 32, 1024, 4096, bf, false, mask);
      run(h, 32, 4096, 1024, bf, false, mask);
      run(h, 128, 768, 3072, bf, false, mask);
      run(h, 128, 3072, 768, bf, false, mask);
      run(h, 8, 768, 3072, bf, false, mask);
    }
  // The bias through cuBLASLt's epilogue, C unused: rows whose D is 12 bytes
  // (n = 6, an alignment of 4) and 48, and GPT-2's FC at 128 rows.
  for (bool bf : {false, true})
    for (int mask : {0, 2}) {
      for (int n : {6, 24})
        for (int k : {8, 16}) run(h, 15, n, k, bf, false, mask, true);
      run(h, 128, 3072, 768, bf, false, mask, true);
      run(h, 32, 4096, 1024, bf, false, mask, true);
    }
  return 0;
}
