// What the cuBLASLt probes share: a status check, and the problem kiln's
// linear layers hand cuBLASLt: D[M, N] = X[M, K] W[N, K]^T with an epilogue,
// column-major as D^T = W^T X^T (A = W as k x n, transposed; B = X as k x m;
// C and D as n x m).
#pragma once

#include <cublasLt.h>

#include <cstdio>
#include <cstdlib>

#define LT(x)                                                                \
  do {                                                                       \
    cublasStatus_t st_ = (x);                                                \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                      \
      std::fprintf(stderr, "%s:%d cuBLASLt status %d\n", __FILE__, __LINE__, \
                   static_cast<int>(st_));                                   \
      std::exit(1);                                                          \
    }                                                                        \
  } while (0)

struct LtProblem {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  LtProblem(int m, int n, int k, cudaDataType_t type, cublasLtEpilogue_t epilogue) {
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                      sizeof epilogue));
    LT(cublasLtMatrixLayoutCreate(&a, type, k, n, k));
    LT(cublasLtMatrixLayoutCreate(&b, type, k, m, k));
    LT(cublasLtMatrixLayoutCreate(&c, type, n, m, n));
  }
  void set_bias(const void* bias) {
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
};

// A preference that allows `ws_bytes` of scratch.
inline cublasLtMatmulPreference_t lt_preference(size_t ws_bytes) {
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref));
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                          sizeof ws_bytes));
  return pref;
}

// The heuristic's first answer for `p` (what kiln takes); exits when there is none.
inline cublasLtMatmulHeuristicResult_t lt_first_answer(cublasLtHandle_t h, const LtProblem& p,
                                                       size_t ws_bytes) {
  cublasLtMatmulHeuristicResult_t r{};
  int count = 0;
  LT(cublasLtMatmulAlgoGetHeuristic(h, p.desc, p.a, p.b, p.c, p.c, lt_preference(ws_bytes), 1, &r,
                                    &count));
  if (count == 0) {
    std::fprintf(stderr, "no cuBLASLt algorithm\n");
    std::exit(1);
  }
  return r;
}
