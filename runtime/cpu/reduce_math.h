#pragma once

// Accumulator types and conversions shared by the reduction and scan kernels.
//
// Note [Reduction accumulators]
// Floating sums accumulate wider than they store: float32 and float64 in
// double (PyTorch's CPU acc_type for float is double, and a sum of millions of
// float32 values then stays within float32 rounding of the exact result),
// float16 and bfloat16 in float, in blocks (reduce_contig_sum) so error does
// not grow with length. Integer and bool sums and products accumulate in
// uint64: wrap-around is then defined, and it is PyTorch's int64 result.

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kiln/half.h"

namespace kiln::cpu {

template <class T>
constexpr bool kIsReducedFloat = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <class T>
constexpr bool kIsFloat = kIsReducedFloat<T> || std::is_floating_point_v<T>;

template <class T>
struct SumAcc {
  using type = std::conditional_t<kIsReducedFloat<T>, float,
                                  std::conditional_t<kIsFloat<T>, double, uint64_t>>;
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
// floats round from float.
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

// sum of f(p[i]) over a dense run: independent accumulators so the loop
// vectorizes, and blocks so float accumulators stay accurate over long runs.
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
