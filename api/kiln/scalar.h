#pragma once

#include <concepts>
#include <cstdint>
#include <ostream>

#include "kiln/api.h"
#include "kiln/dtype.h"

namespace kiln {

// A number passed to an op: bool, integer or floating, the kind kept for type
// promotion (PyTorch's wrapped-number rules).
class KILN_API Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };

  Scalar() : Scalar(int64_t{0}) {}
  Scalar(bool v) : kind_(Kind::Bool) { v_.i = v; }  // NOLINT(implicit)
  template <std::integral T>
  requires(!std::same_as<T, bool>) Scalar(T v) : kind_(Kind::Int) {  // NOLINT(implicit)
    v_.i = static_cast<int64_t>(v);
  }
  template <std::floating_point T>
  Scalar(T v) : kind_(Kind::Float) {  // NOLINT(implicit)
    v_.d = static_cast<double>(v);
  }
  Scalar(Half v) : Scalar(static_cast<float>(v)) {}      // NOLINT(implicit)
  Scalar(BFloat16 v) : Scalar(static_cast<float>(v)) {}  // NOLINT(implicit)

  Kind kind() const { return kind_; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_floating_point() const { return kind_ == Kind::Float; }

  double to_double() const { return kind_ == Kind::Float ? v_.d : static_cast<double>(v_.i); }
  int64_t to_int() const { return kind_ == Kind::Float ? static_cast<int64_t>(v_.d) : v_.i; }
  bool to_bool() const { return kind_ == Kind::Float ? v_.d != 0.0 : v_.i != 0; }
  template <class T>
  T to() const {
    if constexpr (std::same_as<T, bool>) {
      return to_bool();
    } else if constexpr (std::integral<T>) {
      return static_cast<T>(to_int());
    } else {
      return static_cast<T>(to_double());
    }
  }

  // The dtype PyTorch gives this number as a tensor: bool, int64 or float64.
  DType dtype() const {
    return kind_ == Kind::Bool ? DType::Bool : kind_ == Kind::Int ? DType::Int64 : DType::Float64;
  }

  Scalar operator-() const;
  bool equal(const Scalar& other) const { return kind_ == other.kind_ && v_.i == other.v_.i; }

 private:
  Kind kind_;
  union {
    double d;
    int64_t i;
  } v_;
};

KILN_API std::ostream& operator<<(std::ostream& os, const Scalar& s);

}  // namespace kiln
