#include "runtime/cpu/blas.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/cpu/blas_memory.h"
#include "runtime/cpu/gemv.h"
#include "runtime/cpu/parallel.h"

namespace kiln::cpu {
namespace {

// Work (m * n * k) from which one product keeps OpenBLAS's own threads busy,
// so a batch of such products runs one after the other.
constexpr int64_t kSerialBatchWork = int64_t{1} << 18;
// Work per TBB task when a batch of small products runs in parallel.
constexpr int64_t kBatchTaskWork = int64_t{1} << 16;

template <class T>
constexpr bool kIsReduced = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// How BLAS's row-major interface reads a matrix: as is or transposed, and the
// leading dimension. See Note [BLAS layouts].
struct BlasLayout {
  bool trans;
  int64_t ld;
};

std::optional<BlasLayout> blas_layout(const MatrixRef& m) {
  const int64_t rows1 = std::max<int64_t>(1, m.rows), cols1 = std::max<int64_t>(1, m.cols);
  if ((m.cols <= 1 || m.col_stride == 1) && (m.rows <= 1 || m.row_stride >= cols1)) {
    return BlasLayout{false, m.rows <= 1 ? cols1 : m.row_stride};
  }
  if ((m.rows <= 1 || m.row_stride == 1) && (m.cols <= 1 || m.col_stride >= rows1)) {
    return BlasLayout{true, m.cols <= 1 ? rows1 : m.col_stride};
  }
  return std::nullopt;
}

int blas_int(int64_t v) {
  KILN_CHECK(v <= INT_MAX, "[gemm] expected matrix sizes and strides below 2^31 for BLAS, got ", v);
  return static_cast<int>(v);
}

CBLAS_TRANSPOSE trans_flag(bool t) {
  return t ? CblasTrans : CblasNoTrans;
}

// m * n * k, saturated at int64's max.
int64_t gemm_work(int64_t m, int64_t n, int64_t k) {
  int64_t w;
  if (__builtin_mul_overflow(m, n, &w) || __builtin_mul_overflow(w, k, &w)) return INT64_MAX;
  return w;
}

// The sizes as BLAS ints, checked before the call is counted (BlasCall).
struct BlasDims {
  int m, n, k, lda, ldb, ldc;
  BlasDims(int64_t m_, int64_t n_, int64_t k_, int64_t lda_, int64_t ldb_, int64_t ldc_)
      : m(blas_int(m_)),
        n(blas_int(n_)),
        k(blas_int(k_)),
        lda(blas_int(lda_)),
        ldb(blas_int(ldb_)),
        ldc(blas_int(ldc_)) {}
};

void xgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const BlasDims d(m, n, k, lda, ldb, ldc);
  BlasCall guard(gemm_work(m, n, k));  // Note [OpenBLAS under a memory cap]
  cblas_sgemm(CblasRowMajor, trans_flag(ta), trans_flag(tb), d.m, d.n, d.k, alpha, a, d.lda, b,
              d.ldb, beta, c, d.ldc);
}

void xgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
           int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  const BlasDims d(m, n, k, lda, ldb, ldc);
  BlasCall guard(gemm_work(m, n, k));
  cblas_dgemm(CblasRowMajor, trans_flag(ta), trans_flag(tb), d.m, d.n, d.k, alpha, a, d.lda, b,
              d.ldb, beta, c, d.ldc);
}

template <class T>
const T& at(const MatrixRef& m, int64_t i, int64_t j) {
  return reinterpret_cast<const T*>(m.data)[i * m.row_stride + j * m.col_stride];
}
template <class T>
T& at_mut(const MatrixRef& m, int64_t i, int64_t j) {
  return reinterpret_cast<T*>(m.data)[i * m.row_stride + j * m.col_stride];
}

// Copies a strided matrix of T into a dense row-major buffer of S.
template <class T, class S>
void pack(const MatrixRef& m, S* dst) {
  for (int64_t i = 0; i < m.rows; ++i) {
    for (int64_t j = 0; j < m.cols; ++j) dst[i * m.cols + j] = static_cast<S>(at<T>(m, i, j));
  }
}

// The inverse of pack, rounding S to T.
template <class T, class S>
void unpack(const S* src, const MatrixRef& m) {
  for (int64_t i = 0; i < m.rows; ++i) {
    for (int64_t j = 0; j < m.cols; ++j) at_mut<T>(m, i, j) = static_cast<T>(src[i * m.cols + j]);
  }
}

MatrixRef dense(void* data, int64_t rows, int64_t cols) {
  return {static_cast<char*>(data), rows, cols, cols, 1};
}

// A float32 product with few rows whose B is a transposed [n, k] row-major
// weight (linear's layout) goes to the skinny kernel (Note [Skinny GEMM]).
bool try_skinny(const MatrixRef& c, const MatrixRef& a, const MatrixRef& b, float alpha, float beta,
                bool beta_is_zero) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  if (m > kSkinnyMaxRows) return false;
  if (n > 1 && c.col_stride != 1) return false;
  if (k > 1 && (a.col_stride != 1 || b.row_stride != 1)) return false;
  SkinnyGemm g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = reinterpret_cast<const float*>(a.data);
  g.lda = a.row_stride;
  g.w = reinterpret_cast<const float*>(b.data);
  g.ldw = b.col_stride;
  g.c = reinterpret_cast<float*>(c.data);
  g.ldc = c.row_stride;
  g.alpha = alpha;
  g.beta = beta;
  g.beta_is_zero = beta_is_zero;
  skinny_gemm(g);
  return true;
}

// float32 / float64 through BLAS, for m, n, k > 0.
template <class T>
void gemm_blas(MatrixRef c, MatrixRef a, MatrixRef b, T alpha, T beta, bool beta_is_zero) {
  if constexpr (std::is_same_v<T, float>) {
    if (try_skinny(c, a, b, alpha, beta, beta_is_zero)) return;
  }
  std::optional<BlasLayout> lc = blas_layout(c);
  if (lc && lc->trans) {
    // Column-major C: compute C^T = B^T A^T, whose output is row-major.
    MatrixRef at = b.t(), bt = a.t();
    c = c.t();
    a = at;
    b = bt;
    lc = blas_layout(c);
  }
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  if (!lc || lc->trans) {
    std::vector<T> tmp(static_cast<size_t>(m * n));
    if (!beta_is_zero) pack<T, T>(c, tmp.data());
    gemm_blas<T>(dense(tmp.data(), m, n), a, b, alpha, beta, beta_is_zero);
    unpack<T, T>(tmp.data(), c);
    return;
  }
  std::vector<T> abuf, bbuf;
  std::optional<BlasLayout> la = blas_layout(a), lb = blas_layout(b);
  if (!la) {
    abuf.resize(static_cast<size_t>(m * k));
    pack<T, T>(a, abuf.data());
    a = dense(abuf.data(), m, k);
    la = BlasLayout{false, k};
  }
  if (!lb) {
    bbuf.resize(static_cast<size_t>(k * n));
    pack<T, T>(b, bbuf.data());
    b = dense(bbuf.data(), k, n);
    lb = BlasLayout{false, n};
  }
  // With beta == 0, OpenBLAS stores into C without reading it.
  xgemm(la->trans, lb->trans, m, n, k, alpha, reinterpret_cast<const T*>(a.data), la->ld,
        reinterpret_cast<const T*>(b.data), lb->ld, beta_is_zero ? T(0) : beta,
        reinterpret_cast<T*>(c.data), lc->ld);
}

// float16 / bfloat16: float32 operands, sgemm, one rounding.
template <class T>
void gemm_reduced(const MatrixRef& c, const MatrixRef& a, const MatrixRef& b, float alpha,
                  float beta, bool beta_is_zero) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  std::vector<float> af(static_cast<size_t>(m * k)), bf(static_cast<size_t>(k * n)),
      cf(static_cast<size_t>(m * n));
  pack<T, float>(a, af.data());
  pack<T, float>(b, bf.data());
  if (!beta_is_zero) pack<T, float>(c, cf.data());
  xgemm(false, false, m, n, k, alpha, af.data(), k, bf.data(), n, beta_is_zero ? 0.f : beta,
        cf.data(), n);
  unpack<T, float>(cf.data(), c);
}

// Integers: unsigned 64-bit arithmetic wraps exactly as the narrower type's
// would once the result is truncated back to it.
template <class T>
void gemm_int(const MatrixRef& c, const MatrixRef& a, const MatrixRef& b, uint64_t alpha,
              uint64_t beta, bool beta_is_zero) {
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  std::vector<uint64_t> row(static_cast<size_t>(n));
  auto wide = [](T v) { return static_cast<uint64_t>(static_cast<int64_t>(v)); };
  for (int64_t i = 0; i < m; ++i) {
    std::fill(row.begin(), row.end(), uint64_t{0});
    for (int64_t p = 0; p < k; ++p) {
      uint64_t av = wide(at<T>(a, i, p));
      if (av == 0) continue;
      for (int64_t j = 0; j < n; ++j) row[j] += av * wide(at<T>(b, p, j));
    }
    for (int64_t j = 0; j < n; ++j) {
      T& out = at_mut<T>(c, i, j);
      uint64_t v = alpha * row[j];
      if (!beta_is_zero) v += beta * wide(out);
      out = static_cast<T>(v);
    }
  }
}

// k == 0: the product is zero, so C = beta * C.
template <class T>
void scale_output(const MatrixRef& c, const Scalar& beta, bool beta_is_zero) {
  using M = opmath_t<T>;
  M bv = beta.to<M>();
  for (int64_t i = 0; i < c.rows; ++i) {
    for (int64_t j = 0; j < c.cols; ++j) {
      T& out = at_mut<T>(c, i, j);
      if (beta_is_zero) {
        out = static_cast<T>(M(0));
      } else if constexpr (std::is_integral_v<T>) {
        out = static_cast<T>(static_cast<uint64_t>(static_cast<int64_t>(bv)) *
                             static_cast<uint64_t>(static_cast<int64_t>(out)));
      } else {
        out = static_cast<T>(bv * static_cast<M>(out));
      }
    }
  }
}

MatrixRef entry(const MatrixRef& m, const int64_t* offsets, int64_t b, size_t itemsize) {
  MatrixRef r = m;
  if (offsets) r.data += offsets[b] * static_cast<int64_t>(itemsize);
  return r;
}

}  // namespace

bool scalar_is_zero(const Scalar& s, DType dtype) {
  if (is_floating(dtype)) return s.to_double() == 0.0;
  return s.to_int() == 0;
}

void gemm(DType dtype, const MatrixRef& c, const MatrixRef& a, const MatrixRef& b,
          const Scalar& alpha, const Scalar& beta, bool beta_is_zero, const GemmBatch& batch) {
  KILN_INTERNAL_ASSERT(a.rows == c.rows && b.cols == c.cols && a.cols == b.rows,
                       "gemm shapes disagree");
  const int64_t m = c.rows, n = c.cols, k = a.cols;
  if (m == 0 || n == 0 || batch.count == 0) return;
  constexpr uint32_t kNumericMask = kAllMask & ~1u;  // every dtype but bool
  visit_dtype(dtype, kNumericMask, "gemm", [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      return;  // rejected by the mask; no bool body is instantiated
    } else {
      const size_t is = sizeof(T);
      auto one = [&](int64_t e) {
        MatrixRef ce = entry(c, batch.c_offsets, e, is), ae = entry(a, batch.a_offsets, e, is),
                  be = entry(b, batch.b_offsets, e, is);
        if (k == 0) {
          scale_output<T>(ce, beta, beta_is_zero);
        } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
          gemm_blas<T>(ce, ae, be, alpha.to<T>(), beta.to<T>(), beta_is_zero);
        } else if constexpr (kIsReduced<T>) {
          gemm_reduced<T>(ce, ae, be, alpha.to<float>(), beta.to<float>(), beta_is_zero);
        } else {
          gemm_int<T>(ce, ae, be, static_cast<uint64_t>(alpha.to_int()),
                      static_cast<uint64_t>(beta.to_int()), beta_is_zero);
        }
      };
      if (batch.count == 1) {
        one(0);
        return;
      }
      const int64_t work = std::max<int64_t>(1, gemm_work(m, n, std::max<int64_t>(k, 1)));
      const bool blas_threads = std::is_same_v<T, float> || std::is_same_v<T, double>;
      int64_t grain = blas_threads && work >= kSerialBatchWork
                          ? batch.count
                          : std::max<int64_t>(1, kBatchTaskWork / work);
      parallel_range(
          batch.count,
          [&](int64_t begin, int64_t end) {
            for (int64_t e = begin; e < end; ++e) one(e);
          },
          grain);
    }
  });
}

}  // namespace kiln::cpu
