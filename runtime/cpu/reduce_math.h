#pragma once

// Accumulator types and conversions shared by the reduction and scan kernels.
//
// Note [Reduction accumulators]
// Floating sums accumulate in double, whatever they store: float32 and
// float64 (PyTorch's CPU acc_type for float is double, and a sum of millions
// of float32 values then stays within float32 rounding of the exact result),
// and float16 and bfloat16 too, as the generated CPU kernels do
// (jit/codegen_cpu/reduce_cpu*.cpp): a float accumulator would make eager
// and lazy disagree on every layout that reduces serially (strided,
// expanded, outer dims), where its error grows with length, and bfloat16,
// which has float32's exponent range, would overflow in a float sum of
// values whose sum fits (-3e38 - 3e38 + inf is nan, not inf; the mean of
// four 3e38 would be inf). A double sum of float16 values is exact while
// every partial sum stays below 2^29 in magnitude (they are multiples of
// 2^-24), so float16 sums do not depend on order then: eager, lazy and a
// split over threads give the same bits. Dense 16-bit runs widen eight
// values at a time (reduce_sum16.h) so the wider accumulator costs little.
// Integer and bool sums and products accumulate in uint64: wrap-around is
// then defined, and it is PyTorch's int64 result.
// A result is rounded to its dtype once, when stored (a 16-bit one through
// float, as the generated kernels store it), so a mean or norm whose value
// fits is finite even where the sum or a square before it would not be:
// mean of a hundred float16 1000s is 1000, the 2-norm of float32
// [1e30, -1e30, 3] is 1.4142e30, layer_norm and rms_norm of that row are
// about [1.22, -1.22, 0]. PyTorch 1.13 rounds the float16 sum (inf) and
// squares in float32 (inf, and 0 for the row norms). This divergence is
// kept on purpose: kiln's value is the exact one rounded, and every mode
// (eager, lazy, fused, compiled) gives it. A caller that detects overflow
// by an inf mean should test the sum, which overflows when stored.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kiln/half.h"

namespace kiln::cpu {

template <class T>
constexpr bool kIsReducedFloat = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <class T>
constexpr bool kIsFloat = kIsReducedFloat<T> || std::is_floating_point_v<T>;

template <class T>
struct SumAcc {
  using type = std::conditional_t<kIsFloat<T>, double, uint64_t>;
};
template <class T>
using sum_acc_t = typename SumAcc<T>::type;

// x as the accumulator type: integers sign-extend into uint64.
template <class Acc, class T>
inline Acc to_acc(T x) {
  if constexpr (std::is_same_v<Acc, uint64_t>) {
    return static_cast<uint64_t>(static_cast<int64_t>(x));
  } else if constexpr (kIsReducedFloat<T>) {
    return static_cast<Acc>(static_cast<float>(x));
  } else {
    return static_cast<Acc>(x);
  }
}

// An accumulator as the stored type: uint64 reinterprets as int64; 16-bit
// floats round through float, as the generated kernels store them.
template <class Out, class Acc>
inline Out from_acc(Acc a) {
  if constexpr (std::is_same_v<Acc, uint64_t>) {
    return static_cast<Out>(static_cast<int64_t>(a));
  } else if constexpr (kIsReducedFloat<Out>) {
    return Out(static_cast<float>(a));
  } else {
    return static_cast<Out>(a);
  }
}

template <class T>
inline bool is_nan(T x) {
  if constexpr (kIsReducedFloat<T>) {
    return std::isnan(static_cast<float>(x));
  } else if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(x);
  } else {
    return false;
  }
}

// The type values compare in: float for the 16-bit floats, else T.
template <class T>
using compare_t = std::conditional_t<kIsReducedFloat<T>, float, T>;

// The extreme of a and x, NaN propagating; branch-free so loops vectorize.
template <bool kMax, class V>
inline V pick(V a, V x) {
  if constexpr (std::is_floating_point_v<V>) {
    return (kMax ? x > a : x < a) || x != x ? x : a;
  } else {
    return (kMax ? x > a : x < a) ? x : a;
  }
}

namespace detail {

// GCC keeps float compare-and-select scalar (FP compares may trap), so the
// float and double extremes use SSE2 directly: per-lane max/min, plus a mask
// of the NaNs seen (NaN wins, as in PyTorch).
#if defined(__SSE2__)
template <bool kMax>
inline bool sse_extreme(const float* p, int64_t n, float* result) {
  __m128 a0 = _mm_set1_ps(p[0]), a1 = a0, a2 = a0, a3 = a0, nan = _mm_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128 x0 = _mm_loadu_ps(p + i), x1 = _mm_loadu_ps(p + i + 4);
    __m128 x2 = _mm_loadu_ps(p + i + 8), x3 = _mm_loadu_ps(p + i + 12);
    a0 = kMax ? _mm_max_ps(a0, x0) : _mm_min_ps(a0, x0);
    a1 = kMax ? _mm_max_ps(a1, x1) : _mm_min_ps(a1, x1);
    a2 = kMax ? _mm_max_ps(a2, x2) : _mm_min_ps(a2, x2);
    a3 = kMax ? _mm_max_ps(a3, x3) : _mm_min_ps(a3, x3);
    nan = _mm_or_ps(nan, _mm_or_ps(_mm_cmpunord_ps(x0, x1), _mm_cmpunord_ps(x2, x3)));
  }
  if (_mm_movemask_ps(nan)) {
    *result = std::numeric_limits<float>::quiet_NaN();
    return true;
  }
  a0 = kMax ? _mm_max_ps(_mm_max_ps(a0, a1), _mm_max_ps(a2, a3))
            : _mm_min_ps(_mm_min_ps(a0, a1), _mm_min_ps(a2, a3));
  float lanes[4];
  _mm_storeu_ps(lanes, a0);
  float r = lanes[0];
  for (int j = 1; j < 4; ++j) r = pick<kMax>(r, lanes[j]);
  for (; i < n; ++i) r = pick<kMax>(r, p[i]);
  *result = r;
  return true;
}

template <bool kMax>
inline bool sse_extreme(const double* p, int64_t n, double* result) {
  __m128d a0 = _mm_set1_pd(p[0]), a1 = a0, a2 = a0, a3 = a0, nan = _mm_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128d x0 = _mm_loadu_pd(p + i), x1 = _mm_loadu_pd(p + i + 2);
    __m128d x2 = _mm_loadu_pd(p + i + 4), x3 = _mm_loadu_pd(p + i + 6);
    a0 = kMax ? _mm_max_pd(a0, x0) : _mm_min_pd(a0, x0);
    a1 = kMax ? _mm_max_pd(a1, x1) : _mm_min_pd(a1, x1);
    a2 = kMax ? _mm_max_pd(a2, x2) : _mm_min_pd(a2, x2);
    a3 = kMax ? _mm_max_pd(a3, x3) : _mm_min_pd(a3, x3);
    nan = _mm_or_pd(nan, _mm_or_pd(_mm_cmpunord_pd(x0, x1), _mm_cmpunord_pd(x2, x3)));
  }
  if (_mm_movemask_pd(nan)) {
    *result = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  a0 = kMax ? _mm_max_pd(_mm_max_pd(a0, a1), _mm_max_pd(a2, a3))
            : _mm_min_pd(_mm_min_pd(a0, a1), _mm_min_pd(a2, a3));
  double lanes[2];
  _mm_storeu_pd(lanes, a0);
  double r = pick<kMax>(lanes[0], lanes[1]);
  for (; i < n; ++i) r = pick<kMax>(r, p[i]);
  *result = r;
  return true;
}
#endif

}  // namespace detail

// The extreme of p[0..n), n > 0, NaN propagating, with independent lanes.
template <bool kMax, class T>
compare_t<T> run_extreme(const T* p, int64_t n) {
  using V = compare_t<T>;
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    V r;
    if (n >= 16 && detail::sse_extreme<kMax>(p, n, &r)) return r;
  }
#endif
  constexpr int kLanes = 16;
  V s[kLanes];
  for (V& v : s) v = static_cast<V>(p[0]);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) s[j] = pick<kMax>(s[j], static_cast<V>(p[i + j]));
  }
  for (; i < n; ++i) s[0] = pick<kMax>(s[0], static_cast<V>(p[i]));
  for (int j = 1; j < kLanes; ++j) s[0] = pick<kMax>(s[0], s[j]);
  return s[0];
}

// exp(x) for x <= 0 (or -inf) in float, within ~2 ulp, branch-free so loops
// vectorize. Below -87 it returns about 1e-38 instead of less: logsumexp adds
// these to a sum holding exp(0) = 1, where they vanish either way.
inline float exp_nonpositive(float x) {
  // Clamp in the integer domain (a float select would not vectorize): for
  // x <= 0, a larger bit pattern is a more negative value, -inf included.
  uint32_t xb;
  std::memcpy(&xb, &x, sizeof(xb));
  constexpr uint32_t kMinus87 = 0xc2ae0000u;  // -87.0f
  xb = xb > kMinus87 ? kMinus87 : xb;
  std::memcpy(&x, &xb, sizeof(x));
  // n = round(x / ln2) by the 1.5 * 2^23 trick (no SSE4.1 round needed).
  const float shifter = 12582912.0f;
  float n = (x * 1.44269504088896341f + shifter) - shifter;
  // r = x - n ln2 with ln2 split in two (Cody-Waite), |r| <= ln2 / 2.
  float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
  float q = 1.0f / 5040;
  q = q * r + 1.0f / 720;
  q = q * r + 1.0f / 120;
  q = q * r + 1.0f / 24;
  q = q * r + 1.0f / 6;
  q = q * r + 0.5f;
  q = q * r + 1.0f;
  q = q * r + 1.0f;
  uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return q * scale;
}

// sum of f(p[i]) over a dense run: independent accumulators so the loop
// vectorizes, in blocks so rounding error does not grow with the run.
template <class Acc, class In, class F>
inline Acc reduce_contig_sum(const In* p, int64_t n, F f) {
  constexpr int kLanes = 8;
  constexpr int64_t kBlockLen = 2048;
  Acc total = Acc(0);
  for (int64_t b = 0; b < n; b += kBlockLen) {
    const int64_t e = b + kBlockLen < n ? b + kBlockLen : n;
    Acc s[kLanes] = {};
    int64_t i = b;
    for (; i + kLanes <= e; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) s[j] += f(p[i + j]);
    }
    for (; i < e; ++i) s[0] += f(p[i]);
    total += ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  }
  return total;
}

}  // namespace kiln::cpu
