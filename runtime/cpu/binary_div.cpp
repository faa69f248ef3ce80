// Rounding divisions and remainders on the CPU: div with rounding_mode
// "trunc" / "floor", floor_divide, remainder (sign of the divisor, as Python's
// %) and fmod (sign of the dividend, as C's fmod). Integers stay integers and
// raise "ZeroDivisionError" on a zero divisor, as PyTorch does; bool is refused.
//
// Half and BFloat16 (Note [16-bit floats in pointwise kernels]) round the
// quotient to the type before truncating or flooring, and floor division
// rounds each step of its formula, as PyTorch 1.13 computes them; remainder
// and fmod compute in float and round once.

#include <cmath>
#include <optional>
#include <string_view>
#include <type_traits>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/core/type_promotion.h"
#include "runtime/core/wrapping.h"
#include "runtime/cpu/loops.h"

namespace kiln::cpu {
namespace {

constexpr uint32_t kDivMask = kNoBoolMask;

template <class T>
void check_divisor(T b) {
  KILN_CHECK(b != 0, "ZeroDivisionError");
}

// a / b for integers, with INT_MIN / -1 wrapping instead of trapping.
template <class T>
T int_div_trunc(T a, T b) {
  check_divisor(b);
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return wrap_neg(a);
  }
  return static_cast<T>(a / b);
}

template <class T>
T int_div_floor(T a, T b) {
  T q = int_div_trunc(a, b);
  if constexpr (std::is_signed_v<T>) {
    if (b != -1 && (a < 0) != (b < 0) && static_cast<T>(a % b) != 0) --q;
  }
  return q;
}

// a % b for integers, taking the divisor's sign (remainder) or the dividend's (fmod).
template <class T>
T int_fmod(T a, T b) {
  check_divisor(b);
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return 0;
  }
  return static_cast<T>(a % b);
}

template <class T>
T int_remainder(T a, T b) {
  T r = int_fmod(a, b);
  if constexpr (std::is_signed_v<T>) {
    if (r != 0 && (r < 0) != (b < 0)) r = static_cast<T>(r + b);
  }
  return r;
}

// Floor division for floating types (PyTorch's formula, which keeps
// a == b * floor_divide(a, b) + remainder(a, b) as close as it can).
template <class T>
opmath_t<T> float_div_floor(opmath_t<T> a, opmath_t<T> b) {
  using M = opmath_t<T>;
  if (b == 0) return a / b;
  const M mod = std::fmod(a, b);
  M div = round_to<T>(round_to<T>(a - mod) / b);
  if (mod != 0 && (b < 0) != (mod < 0)) div = round_to<T>(div - M(1));
  if (div == 0) return std::copysign(M(0), a / b);
  M floordiv = std::floor(div);
  if (round_to<T>(div - floordiv) > M(0.5)) floordiv = round_to<T>(floordiv + M(1));
  return floordiv;
}

enum class Rounding { Trunc, Floor };

template <Rounding kMode>
void div_rounding_loop(TensorIter& it, const char* op) {
  visit_allowed<kDivMask>(it.dtype(), op, [&]<class T>() {
    using M = opmath_t<T>;
    if constexpr (std::is_integral_v<T>) {
      if constexpr (kMode == Rounding::Trunc) {
        cpu_kernel<T>(it, [](T a, T b) { return int_div_trunc(a, b); });
      } else {
        cpu_kernel<T>(it, [](T a, T b) { return int_div_floor(a, b); });
      }
    } else if constexpr (kMode == Rounding::Trunc) {
      cpu_kernel<T>(it, [](M a, M b) { return std::trunc(round_to<T>(a / b)); });
    } else {
      cpu_kernel<T>(it, [](M a, M b) { return float_div_floor<T>(a, b); });
    }
  });
}

// Integer division finds a zero divisor before it writes anything, so the
// target keeps its values (the kernels' own check stops mid-way).
void check_divisors(const char* op, const Tensor& self, const Tensor& other) {
  // Meta tensors (shapes only, a trace's record) have no divisors to read,
  // and an empty result divides nothing. (Called once the shapes are
  // checked: a result that is not empty uses every divisor.)
  if (!self.defined() || !other.defined() || !self.device().is_cpu() || !other.device().is_cpu() ||
      self.numel() == 0 || other.numel() == 0 || !is_integral(result_type(self, other), false)) {
    return;
  }
  KILN_CHECK(!kiln::any(kiln::eq(other, Scalar(0))).item<bool>(), "[", op,
             "] expected nonzero integer divisors, got a zero (ZeroDivisionError)");
}

Tensor rounding_div(const char* op, Form form, const Tensor& self, const Tensor& other,
                    Rounding mode, const Tensor* out) {
  return pointwise(
      op, form, self, out, kDivMask, [&](TensorIter& it) { it.input(self).input(other); },
      [&](TensorIter& it) {
        check_divisors(op, self, other);
        if (mode == Rounding::Trunc) {
          div_rounding_loop<Rounding::Trunc>(it, op);
        } else {
          div_rounding_loop<Rounding::Floor>(it, op);
        }
      });
}

// --- div with a rounding mode ---------------------------------------------------------

std::optional<Rounding> parse_mode(std::optional<std::string_view> mode, const char* op) {
  if (!mode) return std::nullopt;
  if (*mode == "trunc") return Rounding::Trunc;
  if (*mode == "floor") return Rounding::Floor;
  KILN_FAIL("[", op, "] expected rounding_mode to be None, \"trunc\" or \"floor\", got \"", *mode,
            "\"");
}

Tensor div_mode(const Tensor& s, const Tensor& o, std::optional<std::string_view> mode) {
  auto r = parse_mode(mode, "div.Tensor_mode");
  if (!r) return kiln::div(s, o);
  return rounding_div("div.Tensor_mode", Form::Functional, s, o, *r, nullptr);
}
Tensor div_mode_(const Tensor& s, const Tensor& o, std::optional<std::string_view> mode) {
  auto r = parse_mode(mode, "div_.Tensor_mode");
  Tensor self = s;
  if (!r) return kiln::div_(self, o);
  return rounding_div("div_.Tensor_mode", Form::InPlace, s, o, *r, nullptr);
}
Tensor div_mode_out(const Tensor& s, const Tensor& o, std::optional<std::string_view> mode,
                    const Tensor& out) {
  auto r = parse_mode(mode, "div.out_mode");
  Tensor result = out;
  if (!r) return kiln::div_out(result, s, o);
  return rounding_div("div.out_mode", Form::Out, s, o, *r, &out);
}

// --- floor_divide / remainder / fmod ------------------------------------------------

Tensor floor_divide(const Tensor& s, const Tensor& o) {
  return rounding_div("floor_divide", Form::Functional, s, o, Rounding::Floor, nullptr);
}
Tensor floor_divide_(const Tensor& s, const Tensor& o) {
  return rounding_div("floor_divide_", Form::InPlace, s, o, Rounding::Floor, nullptr);
}
Tensor floor_divide_out(const Tensor& s, const Tensor& o, const Tensor& out) {
  return rounding_div("floor_divide.out", Form::Out, s, o, Rounding::Floor, &out);
}

template <bool kRemainder>
Tensor mod_impl(const char* op, Form form, const Tensor& self, const Tensor& other,
                const Tensor* out) {
  return pointwise(
      op, form, self, out, kDivMask, [&](TensorIter& it) { it.input(self).input(other); },
      [&](TensorIter& it) {
        check_divisors(op, self, other);
        visit_allowed<kDivMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          if constexpr (std::is_integral_v<T>) {
            if constexpr (kRemainder) {
              cpu_kernel<T>(it, [](T a, T b) { return int_remainder(a, b); });
            } else {
              cpu_kernel<T>(it, [](T a, T b) { return int_fmod(a, b); });
            }
          } else if constexpr (kRemainder) {
            cpu_kernel<T>(it, [](M a, M b) {
              M mod = std::fmod(a, b);
              if (mod != 0 && (b < 0) != (mod < 0)) mod += b;
              return mod;
            });
          } else {
            cpu_kernel<T>(it, [](M a, M b) { return std::fmod(a, b); });
          }
        });
      });
}

#define KILN_MOD_FORMS(name, kRemainder)                                           \
  Tensor name(const Tensor& s, const Tensor& o) {                                  \
    return mod_impl<kRemainder>(#name ".Tensor", Form::Functional, s, o, nullptr); \
  }                                                                                \
  Tensor name##_(const Tensor& s, const Tensor& o) {                               \
    return mod_impl<kRemainder>(#name "_.Tensor", Form::InPlace, s, o, nullptr);   \
  }                                                                                \
  Tensor name##_out(const Tensor& s, const Tensor& o, const Tensor& out) {         \
    return mod_impl<kRemainder>(#name ".Tensor_out", Form::Out, s, o, &out);       \
  }
KILN_MOD_FORMS(remainder, true)
KILN_MOD_FORMS(fmod, false)
#undef KILN_MOD_FORMS

// --- Scalar overloads: the Tensor op with the number wrapped (Note [Scalar forms]) -----

Tensor div_scalar_mode(const Tensor& s, const Scalar& o, std::optional<std::string_view> mode) {
  return kiln::div(s, wrap_scalar(o), mode);
}
Tensor floor_divide_scalar(const Tensor& s, const Scalar& o) {
  return scalar_form("floor_divide.Scalar", kDivMask, s, o, false,
                     [](const Tensor& a, const Tensor& b) { return kiln::floor_divide(a, b); });
}
Tensor remainder_scalar(const Tensor& s, const Scalar& o) {
  return scalar_form("remainder.Scalar", kDivMask, s, o, false,
                     [](const Tensor& a, const Tensor& b) { return kiln::remainder(a, b); });
}
Tensor remainder_scalar_(const Tensor& s, const Scalar& o) {
  return scalar_form("remainder_.Scalar", kDivMask, s, o, true,
                     [](const Tensor& a, const Tensor& b) {
                       Tensor self = a;
                       kiln::remainder_(self, b);
                       return a;
                     });
}
Tensor fmod_scalar(const Tensor& s, const Scalar& o) {
  return scalar_form("fmod.Scalar", kDivMask, s, o, false,
                     [](const Tensor& a, const Tensor& b) { return kiln::fmod(a, b); });
}
Tensor fmod_scalar_(const Tensor& s, const Scalar& o) {
  return scalar_form("fmod_.Scalar", kDivMask, s, o, true, [](const Tensor& a, const Tensor& b) {
    Tensor self = a;
    kiln::fmod_(self, b);
    return a;
  });
}

void register_kernels(Library& m) {
  m.impl("div.Tensor_mode", &div_mode);
  m.impl("div_.Tensor_mode", &div_mode_);
  m.impl("div.out_mode", &div_mode_out);
  m.impl("floor_divide", &floor_divide);
  m.impl("floor_divide_.Tensor", &floor_divide_);
  m.impl("floor_divide.out", &floor_divide_out);
  m.impl("remainder.Tensor", &remainder);
  m.impl("remainder_.Tensor", &remainder_);
  m.impl("remainder.Tensor_out", &remainder_out);
  m.impl("fmod.Tensor", &fmod);
  m.impl("fmod_.Tensor", &fmod_);
  m.impl("fmod.Tensor_out", &fmod_out);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("div.Scalar_mode", &div_scalar_mode);
  m.impl("floor_divide.Scalar", &floor_divide_scalar);
  m.impl("remainder.Scalar", &remainder_scalar);
  m.impl("remainder_.Scalar", &remainder_scalar_);
  m.impl("fmod.Scalar", &fmod_scalar);
  m.impl("fmod_.Scalar", &fmod_scalar_);
}

}  // namespace kiln::cpu
