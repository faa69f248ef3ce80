#pragma once

// Skinny float32 products whose second operand is a weight stored [n, k]
// row-major, as linear and addmm with a transposed weight read it:
//   C[i, j] = beta * C[i, j] + alpha * sum_p A[i, p] * W[j, p],  i < m <= kSkinnyMaxRows.
//
// Note [Skinny GEMM]
// With a handful of rows (decoding, batch-1 inference) a product is a pass
// over the weight: m * n * k multiply-adds against n * k * 4 bytes read, so
// it runs at memory speed at best. OpenBLAS's sgemm packs the weight into
// panels first (a second read and a write of the whole weight per call) and
// keeps the small M from filling its kernels. Here each thread streams its
// own slice of weight rows once, many rows at a time (16 for one row of A)
// so that every load of A's rows is reused across them and enough weight
// streams are in flight to keep memory busy, with the row dot products kept
// in vector registers and reduced once per row. Rows of A are taken four at a time, so
// m <= 4 reads the weight exactly once and m <= 8 at most twice (the second
// pass mostly from cache, since a block of weight rows is small).
// The sum over k is split across vector lanes, so its rounding differs from
// a serial sum; the float32 tolerance of products covers it.

#include <cstdint>

namespace kiln::cpu {

constexpr int64_t kSkinnyMaxRows = 8;

// Arguments of one skinny product. a: row i at a + i * lda (unit column
// stride); w: weight row j at w + j * ldw (unit stride along k); c: element
// (i, j) at c + i * ldc + j. C must not overlap A or W. When beta_is_zero, C
// is written without being read.
struct SkinnyGemm {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int64_t lda = 0;
  const float* w = nullptr;
  int64_t ldw = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  float alpha = 1, beta = 0;
  bool beta_is_zero = true;
};

// The vector paths: kBest is the one kiln::current_cpu_isa() chooses (Note
// [CPU ISA choice]: the code generator's rule, KILN_CPU_ISA included); tests
// name the others.
enum class SkinnyIsa { kBest, kAvx512, kAvx2, kScalar };

bool skinny_isa_supported(SkinnyIsa isa);

// Runs the product over TBB workers (split over n). Requires
// 1 <= m <= kSkinnyMaxRows, n >= 1, k >= 1 and a supported `isa`.
void skinny_gemm(const SkinnyGemm& g, SkinnyIsa isa = SkinnyIsa::kBest);

}  // namespace kiln::cpu
