#pragma once

// Dense sums of float16 and bfloat16 values in double, the accumulator Note
// [Reduction accumulators] gives them. With AVX2 (Note [CPU ISA choice]) eight
// values widen at once (F16C for float16, a shift for bfloat16): bfloat16
// then sums within about a quarter of the float loop this replaced, float16
// several times faster than it (its scalar conversion branches).

#include <cstdint>

#include "kiln/half.h"

namespace kiln::cpu {

// The sum of p[0..n) in double.
template <class T>
using DenseSum16 = double (*)(const T* p, int64_t n);

// The dense sum for T (Half or BFloat16) under the current ISA; KILN_CPU_ISA
// is read on each call, so a reduction picks it once.
template <class T>
DenseSum16<T> dense_sum16();

}  // namespace kiln::cpu
