#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

#include "kiln/api.h"
#include "kiln/half.h"

namespace kiln {

// Element types, in PyTorch's promotion order within each kind.
enum class DType : int8_t {
  Bool,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
};
constexpr int kNumDTypes = 10;

// Whether t is one of the dtypes above. A DType is a byte: a cast from any
// other integer makes one that names no dtype, and every table indexed by
// dtype would read past its end (Note [Enum arguments]).
constexpr bool is_valid_dtype(DType t) {
  return static_cast<int>(t) >= 0 && static_cast<int>(t) < kNumDTypes;
}
namespace detail {
[[noreturn]] KILN_API void fail_invalid_dtype(const char* op, const char* arg, DType t);
}  // namespace detail
// Throws "[op] expected arg one of bool, uint8, ..., float64, got an invalid
// dtype (99)" unless is_valid_dtype(t). Every public function that takes a
// DType calls it before the dtype is used; op calls do it in the dispatcher.
inline void check_dtype(const char* op, const char* arg, DType t) {
  if (KILN_UNLIKELY(!is_valid_dtype(t))) detail::fail_invalid_dtype(op, arg, t);
}

constexpr DType kBool = DType::Bool;
constexpr DType kUInt8 = DType::UInt8;
constexpr DType kInt8 = DType::Int8;
constexpr DType kInt16 = DType::Int16;
constexpr DType kInt32 = DType::Int32;
constexpr DType kInt64 = DType::Int64;
constexpr DType kFloat16 = DType::Float16;
constexpr DType kBFloat16 = DType::BFloat16;
constexpr DType kFloat32 = DType::Float32;
constexpr DType kFloat64 = DType::Float64;

// The predicates below take valid dtypes only (check_dtype).
constexpr size_t itemsize(DType t) {
  constexpr size_t sizes[kNumDTypes] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
  return sizes[static_cast<int>(t)];
}
constexpr bool is_floating(DType t) {
  return t >= DType::Float16;
}
constexpr bool is_integral(DType t, bool include_bool) {
  return t == DType::Bool ? include_bool : t <= DType::Int64;
}
constexpr bool is_reduced_float(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}
constexpr bool is_signed(DType t) {
  return t != DType::Bool && t != DType::UInt8;
}

// "float32", "int64", ... as PyTorch spells them without the "torch." prefix.
KILN_API const char* dtype_name(DType t);
// Parses the names above and PyTorch's aliases ("float", "half", "long", ...).
KILN_API DType parse_dtype(std::string_view name);
// PyTorch's promote_types.
KILN_API DType promote_types(DType a, DType b);
// The dtype a floating op computes in for an input of dtype t
// (integers and bool go to the default float dtype, float32).
constexpr DType to_floating(DType t) {
  return is_floating(t) ? t : DType::Float32;
}

inline std::ostream& operator<<(std::ostream& os, DType t) {
  return os << dtype_name(t);
}

// C++ type <-> DType.
template <class T>
struct DTypeOf;
#define KILN_DTYPE_OF(T, D)                  \
  template <>                                \
  struct DTypeOf<T> {                        \
    static constexpr DType value = DType::D; \
  };
KILN_DTYPE_OF(bool, Bool)
KILN_DTYPE_OF(uint8_t, UInt8)
KILN_DTYPE_OF(int8_t, Int8)
KILN_DTYPE_OF(int16_t, Int16)
KILN_DTYPE_OF(int32_t, Int32)
KILN_DTYPE_OF(int64_t, Int64)
KILN_DTYPE_OF(Half, Float16)
KILN_DTYPE_OF(BFloat16, BFloat16)
KILN_DTYPE_OF(float, Float32)
KILN_DTYPE_OF(double, Float64)
#undef KILN_DTYPE_OF
template <class T>
constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace kiln
