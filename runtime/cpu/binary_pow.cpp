// pow in its three shapes (tensor ** tensor, tensor ** number, number ** tensor)
// and square (pow(x, 2)), on the CPU. Bool tensors are refused unless a
// number promotes them. Integer powers wrap, and a negative integer exponent
// gives 1 for base 1, +-1 for base -1 and 0 otherwise, except that an integer
// tensor to a negative integer *number* raises, as in PyTorch (numpy's rule).
//
// Tensor ** number follows PyTorch's special cases: exponent 0 fills ones,
// 1 copies; for float, double and BFloat16, 0.5 / -0.5 / -1 are sqrt / rsqrt
// / reciprocal (so sqrt(-0.0) = -0.0) and 2, 3, -2 are products, which
// BFloat16 rounds step by step; Half takes the exponent as Half and calls pow.

#include <cmath>
#include <type_traits>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/type_promotion.h"
#include "runtime/cpu/loops.h"

namespace kiln::cpu {
namespace {

// Exponentiation by squaring in uint64 (wrapping, never signed overflow).
template <class T>
T int_pow(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b < 0) {
      if (a == 1) return 1;
      if (a == -1) return b % 2 != 0 ? T(-1) : T(1);
      return 0;
    }
  }
  uint64_t result = 1;
  uint64_t base = static_cast<uint64_t>(a);
  for (uint64_t e = static_cast<uint64_t>(b); e != 0; e >>= 1) {
    if (e & 1) result *= base;
    base *= base;
  }
  return static_cast<T>(result);
}

// --- tensor ** tensor ----------------------------------------------------------------

Tensor pow_tensor_impl(const char* op, Form form, const Tensor& self, const Tensor& exponent,
                       const Tensor* out) {
  return pointwise(
      op, form, self, out, kNoBoolMask, [&](TensorIter& it) { it.input(self).input(exponent); },
      [&](TensorIter& it) {
        visit_allowed<kNoBoolMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          if constexpr (std::is_integral_v<T>) {
            cpu_kernel<T>(it, [](T a, T b) { return int_pow(a, b); });
          } else {
            cpu_kernel<T>(it, [](M a, M b) { return std::pow(a, b); });
          }
        });
      });
}

Tensor pow_tt(const Tensor& s, const Tensor& e) {
  return pow_tensor_impl("pow.Tensor_Tensor", Form::Functional, s, e, nullptr);
}
Tensor pow_tt_(const Tensor& s, const Tensor& e) {
  return pow_tensor_impl("pow_.Tensor", Form::InPlace, s, e, nullptr);
}
Tensor pow_tt_out(const Tensor& s, const Tensor& e, const Tensor& out) {
  return pow_tensor_impl("pow.Tensor_Tensor_out", Form::Out, s, e, &out);
}

// --- tensor ** number ----------------------------------------------------------------

// PyTorch's Scalar::equal(double): a bool never equals a number.
bool scalar_equals(const Scalar& s, double v) {
  if (s.is_floating_point()) return s.to_double() == v;
  if (s.is_integral()) return static_cast<double>(s.to_int()) == v;
  return false;
}

template <class T>
void pow_scalar_loop(TensorIter& it, const Scalar& exponent, const char* op) {
  using M = opmath_t<T>;
  if constexpr (std::is_integral_v<T>) {
    const T e = static_cast<T>(scalar_to<T>(exponent, op, "exponent"));
    cpu_kernel<T>(it, [e](T a) { return int_pow(a, e); });
  } else if constexpr (std::is_same_v<T, Half>) {
    const M e = scalar_to<T>(exponent, op, "exponent");
    cpu_kernel<T>(it, [e](M a) { return std::pow(a, e); });
  } else {
    if (scalar_equals(exponent, 0.5)) {
      cpu_kernel<T>(it, [](M a) { return std::sqrt(a); });
      return;
    }
    if (scalar_equals(exponent, -0.5)) {
      cpu_kernel<T>(it, [](M a) { return M(1) / std::sqrt(a); });
      return;
    }
    if (scalar_equals(exponent, -1.0)) {
      cpu_kernel<T>(it, [](M a) { return M(1) / a; });
      return;
    }
    // float and double take the exponent unchecked, BFloat16 as a BFloat16.
    const M e = std::is_same_v<T, BFloat16> ? scalar_to<T>(exponent, op, "exponent")
                                            : static_cast<M>(exponent.to_double());
    if (e == M(2)) {
      cpu_kernel<T>(it, [](M a) { return a * a; });
    } else if (e == M(3)) {
      cpu_kernel<T>(it, [](M a) { return round_to<T>(a * a) * a; });
    } else if (e == M(-2)) {
      cpu_kernel<T>(it, [](M a) { return M(1) / round_to<T>(a * a); });
    } else {
      cpu_kernel<T>(it, [e](M a) { return std::pow(a, e); });
    }
  }
}

Tensor pow_scalar_impl(const char* op, Form form, const Tensor& self, const Scalar& exponent,
                       const Tensor* out) {
  check_defined(self, op, "self");
  KILN_CHECK(!(is_integral(self.dtype(), true) && exponent.is_integral() && exponent.to_int() < 0),
             "[", op, "] expected a non-negative exponent for an integer tensor, got ", exponent,
             " (integers to negative integer powers are not allowed)");
  ResultType rt;
  rt.add(self);
  rt.add(exponent);
  const DType common = rt.result(op);
  return pointwise(
      op, form, self, out, kNoBoolMask,
      [&](TensorIter& it) { it.input(self).compute_dtype(common).out_cast(OutCast::Same); },
      [&](TensorIter& it) {
        visit_allowed<kNoBoolMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          if (scalar_equals(exponent, 0.0)) {
            cpu_kernel<T>(it, [](M) { return M(1); });
          } else if (scalar_equals(exponent, 1.0)) {
            cpu_kernel<T>(it, [](M a) { return a; });
          } else {
            pow_scalar_loop<T>(it, exponent, op);
          }
        });
      });
}

Tensor pow_ts(const Tensor& s, const Scalar& e) {
  return pow_scalar_impl("pow.Tensor_Scalar", Form::Functional, s, e, nullptr);
}
Tensor pow_ts_(const Tensor& s, const Scalar& e) {
  return pow_scalar_impl("pow_.Scalar", Form::InPlace, s, e, nullptr);
}
Tensor square(const Tensor& s) {
  return pow_scalar_impl("square", Form::Functional, s, 2, nullptr);
}
Tensor square_(const Tensor& s) {
  return pow_scalar_impl("square_", Form::InPlace, s, 2, nullptr);
}
Tensor square_out(const Tensor& s, const Tensor& out) {
  return pow_scalar_impl("square.out", Form::Out, s, 2, &out);
}

// --- number ** tensor: a new tensor of the exponent's shape, row-major ---------------

Tensor pow_number_base(const Scalar& base, const Tensor& exponent) {
  check_defined(exponent, "pow.Scalar", "exponent");
  ResultType rt;
  rt.add(base);
  rt.add(exponent);
  const DType dtype = rt.result("pow.Scalar");
  Tensor out = kiln::empty(exponent.sizes(), TensorOptions(dtype).device(exponent.device()));
  if (scalar_equals(base, 1.0)) return kiln::fill_(out, 1);
  return kiln::pow_out(out, wrap_scalar(base), exponent);
}

void register_kernels(Library& m) {
  m.impl("pow.Tensor_Tensor", &pow_tt);
  m.impl("pow_.Tensor", &pow_tt_);
  m.impl("pow.Tensor_Tensor_out", &pow_tt_out);
  m.impl("pow.Tensor_Scalar", &pow_ts);
  m.impl("pow_.Scalar", &pow_ts_);
  m.impl("square", &square);
  m.impl("square_", &square_);
  m.impl("square.out", &square_out);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("pow.Scalar", &pow_number_base);
}

}  // namespace kiln::cpu
