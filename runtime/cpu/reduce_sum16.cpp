#include "runtime/cpu/reduce_sum16.h"

#include <immintrin.h>

#include <type_traits>

#include "runtime/core/cpu_isa.h"
#include "runtime/cpu/reduce_math.h"

namespace kiln::cpu {
namespace {

template <class T>
double sum_scalar(const T* p, int64_t n) {
  return reduce_contig_sum<double>(p, n, [](T x) { return to_acc<double>(x); });
}

// Eight 16-bit floats as float32: exact, as the scalar conversions.
template <class T>
__attribute__((target("avx2,f16c"))) inline __m256 load8(const T* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (std::is_same_v<T, Half>) {
    return _mm256_cvtph_ps(h);
  } else {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// Four independent double accumulators of four lanes each hide the add latency.
template <class T>
__attribute__((target("avx2,f16c"))) double sum_avx2(const T* p, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 x = load8(p + i), y = load8(p + i + 8);
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
    a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm256_castps256_ps128(y)));
    a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm256_extractf128_ps(y, 1)));
  }
  double lanes[4];
  _mm256_storeu_pd(lanes, _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
  double s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) s += to_acc<double>(p[i]);
  return s;
}

}  // namespace

template <class T>
DenseSum16<T> dense_sum16() {
  return current_cpu_isa() == CpuIsa::kScalar ? &sum_scalar<T> : &sum_avx2<T>;
}

template DenseSum16<Half> dense_sum16<Half>();
template DenseSum16<BFloat16> dense_sum16<BFloat16>();

}  // namespace kiln::cpu
