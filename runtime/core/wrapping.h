#pragma once

// Note [Integer wrap-around]
// PyTorch's integer arithmetic wraps in two's complement. In C++ a signed
// overflow is undefined behaviour, and so is one in a type narrower than int,
// which promotes to int before the arithmetic (uint16 65535 * 65533 overflows
// int). These helpers compute in uint64, where wrap-around is defined, and
// keep the low bits; floating types compute as they are.

#include <cstdint>
#include <type_traits>

namespace kiln {

template <class T>
constexpr T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  } else {
    return a + b;
  }
}

template <class T>
constexpr T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  } else {
    return a * b;
  }
}

template <class T>
constexpr T wrap_neg(T a) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(uint64_t{0} - static_cast<uint64_t>(a));
  } else {
    return -a;
  }
}

}  // namespace kiln
