#pragma once

// The private parts of blas_lt.h, shared by its files: handles, workspace
// sizes and RAII over cuBLASLt's descriptors.
//   blas_lt.cpp         lt_matmul: from tensors to calls, one call, captures
//   blas_lt_layout.cpp  strided tensors as cuBLASLt problems (Note [cuBLASLt layouts])
//   blas_lt_algo.cpp    algorithm choices, in memory and on disk
//   blas_lt_warmup.cpp  cuBLASLt's initialization off the critical path

#include <cublasLt.h>

#include <cstdint>

#include "runtime/cuda/blas_lt_layout.h"
#include "runtime/cuda/check.h"

namespace kiln::cuda {

constexpr int kMaxDevices = 64;

// This thread's cuBLASLt handle for `device` (made on first use, destroyed
// when the thread ends).
cublasLtHandle_t handle_for(int device);

// Bytes of scratch a call on `device` may use.
size_t workspace_bytes(int device);

// Returns once no warm-up runs on `device` (Note [cuBLASLt warm-up]).
void wait_for_warmup(int device);

// --- Descriptors (RAII over the create/destroy pairs) -----------------------------------

struct MatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  int device;
  MatmulDesc(cublasComputeType_t compute, cudaDataType_t scale, int dev) : device(dev) {
    KILN_CUBLAS_CHECK_DEVICE(cublasLtMatmulDescCreate(&desc, compute, scale), device);
  }
  ~MatmulDesc() {
    if (desc) (void)cublasLtMatmulDescDestroy(desc);
  }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  template <class T>
  void set(cublasLtMatmulDescAttributes_t attr, const T& value) {
    KILN_CUBLAS_CHECK_DEVICE(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(T)), device);
  }
};

struct MatrixLayout {
  cublasLtMatrixLayout_t layout = nullptr;
  MatrixLayout(cudaDataType_t type, const LtMatrix& m, int32_t batch, int64_t batch_stride,
               int device) {
    KILN_CUBLAS_CHECK_DEVICE(
        cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(m.rows),
                                   static_cast<uint64_t>(m.cols), m.ld),
        device);
    if (batch > 1) {
      KILN_CUBLAS_CHECK_DEVICE(
          cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                           sizeof(batch)),
          device);
      KILN_CUBLAS_CHECK_DEVICE(
          cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                           &batch_stride, sizeof(batch_stride)),
          device);
    }
  }
  ~MatrixLayout() {
    if (layout) (void)cublasLtMatrixLayoutDestroy(layout);
  }
  MatrixLayout(const MatrixLayout&) = delete;
  MatrixLayout& operator=(const MatrixLayout&) = delete;
};

struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  int device;
  explicit Preference(int dev) : device(dev) {
    KILN_CUBLAS_CHECK_DEVICE(cublasLtMatmulPreferenceCreate(&pref), device);
  }
  ~Preference() {
    if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
  }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <class T>
  void set(cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
    KILN_CUBLAS_CHECK_DEVICE(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(T)),
                             device);
  }
};

}  // namespace kiln::cuda
