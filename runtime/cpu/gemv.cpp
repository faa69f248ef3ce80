#include "runtime/cpu/gemv.h"

#include <immintrin.h>

#include <algorithm>

#include "kiln/error.h"
#include "runtime/core/cpu_isa.h"
#include "runtime/cpu/parallel.h"

namespace kiln::cpu {
namespace {

// Weight rows per task group: every range handed to a thread starts on a
// multiple of this (a multiple of every block's row count), so each thread
// runs whole register blocks.
constexpr int64_t kGroupRows = 48;
// Bytes of weight below which one thread's share is not worth a handoff.
constexpr int64_t kTaskBytes = 96 * 1024;

using Isa = SkinnyIsa;

bool has_avx512() {
  return cpu_isa_supported(CpuIsa::kAvx512);
}

bool has_avx2() {
  return cpu_isa_supported(CpuIsa::kAvx2);
}

// Note [CPU ISA choice]: read on each call, as the code generator does.
Isa best_isa() {
  switch (current_cpu_isa()) {
    case CpuIsa::kAvx512:
      return Isa::kAvx512;
    case CpuIsa::kAvx2:
      return Isa::kAvx2;
    case CpuIsa::kScalar:
      break;
  }
  return Isa::kScalar;
}

inline void store(const SkinnyGemm& g, int64_t i, int64_t j, float dot) {
  float& out = g.c[i * g.ldc + j];
  out = g.beta_is_zero ? g.alpha * dot : g.alpha * dot + g.beta * out;
}

__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// (_mm512_reduce_add_ps and the 512->256 cast trip GCC 12's -Wuninitialized
// on an undefined vector inside them; masked extracts have none.)
__attribute__((target("avx512f,avx2,fma"))) inline float hsum512(__m512 v) {
  const __m512d d = _mm512_castps_pd(v);
  __m256d lo = _mm512_maskz_extractf64x4_pd(0xff, d, 0),
          hi = _mm512_maskz_extractf64x4_pd(0xff, d, 1);
  return hsum256(_mm256_add_ps(_mm256_castpd_ps(lo), _mm256_castpd_ps(hi)));
}

// M rows of A (from i0) against R weight rows (from j0).
template <int M, int R>
__attribute__((target("avx512f,avx2,fma"))) void block_avx512(const SkinnyGemm& g, int64_t i0,
                                                              int64_t j0) {
  const float* x[M];
  const float* w[R];
  for (int i = 0; i < M; ++i) x[i] = g.a + (i0 + i) * g.lda;
  for (int r = 0; r < R; ++r) w[r] = g.w + (j0 + r) * g.ldw;
  __m512 acc[M][R];
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 16 <= g.k; p += 16) {
    __m512 xv[M];
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) xv[i] = _mm512_loadu_ps(x[i] + p);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m512 wv = _mm512_loadu_ps(w[r] + p);
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) acc[i][r] = _mm512_fmadd_ps(xv[i], wv, acc[i][r]);
    }
  }
  if (p < g.k) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (g.k - p)) - 1);
    __m512 xv[M];
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) xv[i] = _mm512_maskz_loadu_ps(mask, x[i] + p);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m512 wv = _mm512_maskz_loadu_ps(mask, w[r] + p);
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) acc[i][r] = _mm512_fmadd_ps(xv[i], wv, acc[i][r]);
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) store(g, i0 + i, j0 + r, hsum512(acc[i][r]));
  }
}

template <int M, int R>
__attribute__((target("avx2,fma"))) void block_avx2(const SkinnyGemm& g, int64_t i0, int64_t j0) {
  const float* x[M];
  const float* w[R];
  for (int i = 0; i < M; ++i) x[i] = g.a + (i0 + i) * g.lda;
  for (int r = 0; r < R; ++r) w[r] = g.w + (j0 + r) * g.ldw;
  __m256 acc[M][R];
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 8 <= g.k; p += 8) {
    __m256 xv[M];
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) xv[i] = _mm256_loadu_ps(x[i] + p);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m256 wv = _mm256_loadu_ps(w[r] + p);
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) acc[i][r] = _mm256_fmadd_ps(xv[i], wv, acc[i][r]);
    }
  }
  if (p < g.k) {
    // Lanes below the remaining count load; the rest read as zero.
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(g.k - p)), lane);
    __m256 xv[M];
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) xv[i] = _mm256_maskload_ps(x[i] + p, mask);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m256 wv = _mm256_maskload_ps(w[r] + p, mask);
#pragma GCC unroll 16
      for (int i = 0; i < M; ++i) acc[i][r] = _mm256_fmadd_ps(xv[i], wv, acc[i][r]);
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) store(g, i0 + i, j0 + r, hsum256(acc[i][r]));
  }
}

void block_scalar(const SkinnyGemm& g, int64_t i0, int64_t j0) {
  const float* x = g.a + i0 * g.lda;
  const float* w = g.w + j0 * g.ldw;
  float s = 0;
  for (int64_t p = 0; p < g.k; ++p) s += x[p] * w[p];
  store(g, i0, j0, s);
}

using BlockFn = void (*)(const SkinnyGemm&, int64_t, int64_t);

// The kernels for M rows of A: a wide block of R weight rows and a one-row
// block for the rest. Blocks keep M * R accumulators plus M + 1 loads in
// registers (32 zmm, 16 ymm). More weight rows in flight read faster: with
// M = 1 the 48 linears of gpt2 (1,1) took 20-23 ms of CPU with R = 4, 16-18
// with 8 and 15-16.5 with 16 (R = 24 spills row pointers and gained nothing).
struct Kernels {
  int rows;
  BlockFn wide, one;
};

template <int M>
Kernels kernels_for(Isa v) {
  if (v == Isa::kAvx512) {
    constexpr int kR = M == 1 ? 16 : M == 2 ? 12 : M == 3 ? 8 : 6;
    return {kR, &block_avx512<M, kR>, &block_avx512<M, 1>};
  }
  constexpr int kR = M == 1 ? 8 : M == 2 ? 4 : M == 3 ? 3 : 2;
  return {kR, &block_avx2<M, kR>, &block_avx2<M, 1>};
}

Kernels kernels(int m, Isa v) {
  switch (m) {
    case 1:
      return kernels_for<1>(v);
    case 2:
      return kernels_for<2>(v);
    case 3:
      return kernels_for<3>(v);
    default:
      return kernels_for<4>(v);
  }
}

// Weight rows [jb, je) for every row of A, four rows of A at a time.
void run_rows(const SkinnyGemm& g, Isa v, int64_t jb, int64_t je) {
  if (v == Isa::kScalar) {
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = jb; j < je; ++j) block_scalar(g, i, j);
    }
    return;
  }
  for (int64_t i0 = 0; i0 < g.m; i0 += 4) {
    const Kernels ks = kernels(static_cast<int>(std::min<int64_t>(4, g.m - i0)), v);
    int64_t j = jb;
    for (; j + ks.rows <= je; j += ks.rows) ks.wide(g, i0, j);
    for (; j < je; ++j) ks.one(g, i0, j);
  }
}

}  // namespace

bool skinny_isa_supported(SkinnyIsa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return has_avx512();
    case Isa::kAvx2:
      return has_avx2();
    default:
      return true;
  }
}

void skinny_gemm(const SkinnyGemm& g, SkinnyIsa isa) {
  KILN_INTERNAL_ASSERT(g.m >= 1 && g.m <= kSkinnyMaxRows && g.n >= 1 && g.k >= 1,
                       "skinny_gemm: bad sizes");
  KILN_INTERNAL_ASSERT(skinny_isa_supported(isa), "skinny_gemm: ISA not supported here");
  const Isa v = isa == Isa::kBest ? best_isa() : isa;
  const int64_t groups = (g.n + kGroupRows - 1) / kGroupRows;
  const int64_t group_bytes = kGroupRows * g.k * static_cast<int64_t>(sizeof(float));
  const int64_t grain = std::max<int64_t>(1, (kTaskBytes + group_bytes - 1) / group_bytes);
  parallel_range(
      groups,
      [&](int64_t b, int64_t e) { run_rows(g, v, b * kGroupRows, std::min(g.n, e * kGroupRows)); },
      grain);
}

}  // namespace kiln::cpu
