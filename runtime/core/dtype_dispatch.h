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
