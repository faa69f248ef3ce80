#pragma once

// Runs a template lambda for the C++ type of a runtime DType:
//   visit_dtype(t, kFloatingMask, "exp", [&]<class T>() { ... });
// Throws "[op] expected dtype among ..., got ..." for a dtype outside `allowed`.

#include "kiln/dtype.h"
#include "runtime/core/tensor_utils.h"

namespace kiln {

[[noreturn]] void fail_dtype(DType t, uint32_t allowed, const char* op);

template <class F>
decltype(auto) visit_dtype(DType t, uint32_t allowed, const char* op, F&& f) {
  if (KILN_UNLIKELY(!(allowed & dtype_bit(t)))) fail_dtype(t, allowed, op);
  switch (t) {
    case kBool:
      return f.template operator()<bool>();
    case kUInt8:
      return f.template operator()<uint8_t>();
    case kInt8:
      return f.template operator()<int8_t>();
    case kInt16:
      return f.template operator()<int16_t>();
    case kInt32:
      return f.template operator()<int32_t>();
    case kInt64:
      return f.template operator()<int64_t>();
    case kFloat16:
      return f.template operator()<Half>();
    case kBFloat16:
      return f.template operator()<BFloat16>();
    case kFloat32:
      return f.template operator()<float>();
    case kFloat64:
      return f.template operator()<double>();
  }
  fail_dtype(t, allowed, op);
}

// As visit_dtype, but instantiates `f` only for the dtypes in kAllowed (a mask
// over DType), keeping each kernel's code to the types it admits.
template <uint32_t kAllowed, class F>
void visit_allowed(DType t, const char* op, F&& f) {
  if (KILN_UNLIKELY(!(kAllowed & dtype_bit(t)))) fail_dtype(t, kAllowed, op);
#define KILN_VISIT_CASE(D, T)                               \
  case D:                                                   \
    if constexpr ((kAllowed >> static_cast<int>(D)) & 1u) { \
      f.template operator()<T>();                           \
    }                                                       \
    return;
  switch (t) {
    KILN_VISIT_CASE(kBool, bool)
    KILN_VISIT_CASE(kUInt8, uint8_t)
    KILN_VISIT_CASE(kInt8, int8_t)
    KILN_VISIT_CASE(kInt16, int16_t)
    KILN_VISIT_CASE(kInt32, int32_t)
    KILN_VISIT_CASE(kInt64, int64_t)
    KILN_VISIT_CASE(kFloat16, Half)
    KILN_VISIT_CASE(kBFloat16, BFloat16)
    KILN_VISIT_CASE(kFloat32, float)
    KILN_VISIT_CASE(kFloat64, double)
  }
#undef KILN_VISIT_CASE
}

// The type arithmetic happens in: float for the 16-bit floats, else T itself.
template <class T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<Half> {
  using type = float;
};
template <>
struct OpMath<BFloat16> {
  using type = float;
};
template <class T>
using opmath_t = typename OpMath<T>::type;

}  // namespace kiln
