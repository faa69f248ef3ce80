// Binary ops beyond arithmetic, on the CPU: atan2 (a floating function:
// integers compute in float32), maximum / minimum (NaN propagates),
// logical_and / or / xor (bool results; out= and in-place targets take them
// in any dtype) and bitwise_and / or / xor (integral and bool only).

#include <cmath>
#include <type_traits>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/cpu/loops.h"

namespace kiln::cpu {
namespace {

Tensor atan2_impl(const char* op, Form form, const Tensor& self, const Tensor& other,
                  const Tensor* out) {
  return pointwise(
      op, form, self, out, kFloatingMask,
      [&](TensorIter& it) { it.input(self).input(other).compute(ComputeType::Floating); },
      [&](TensorIter& it) {
        visit_allowed<kFloatingMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          cpu_kernel<T>(it, [](M a, M b) { return std::atan2(a, b); });
        });
      });
}

template <bool kMax>
Tensor max_min_impl(const char* op, Form form, const Tensor& self, const Tensor& other,
                    const Tensor* out) {
  return pointwise(
      op, form, self, out, kAllMask, [&](TensorIter& it) { it.input(self).input(other); },
      [&](TensorIter& it) {
        visit_allowed<kAllMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          if constexpr (std::is_same_v<T, bool>) {
            cpu_kernel<T>(it, [](bool a, bool b) { return kMax ? (a || b) : (a && b); });
          } else if constexpr (std::is_integral_v<T>) {
            cpu_kernel<T>(it, [](T a, T b) { return kMax ? (a < b ? b : a) : (b < a ? b : a); });
          } else {
            cpu_kernel<T>(it, [](M a, M b) {
              if (a != a || b != b) return std::numeric_limits<M>::quiet_NaN();
              return kMax ? (a < b ? b : a) : (b < a ? b : a);
            });
          }
        });
      });
}

enum class Logic { And, Or, Xor };

template <Logic kOp>
bool logic(bool a, bool b) {
  if constexpr (kOp == Logic::And) {
    return a && b;
  } else if constexpr (kOp == Logic::Or) {
    return a || b;
  } else {
    return a != b;
  }
}

// Inputs are promoted to their common dtype (as PyTorch does before testing
// them against zero), the result is bool.
template <Logic kOp>
Tensor logical_impl(const char* op, Form form, const Tensor& self, const Tensor& other,
                    const Tensor* out) {
  return pointwise(
      op, form, self, out, kAllMask,
      [&](TensorIter& it) {
        it.input(self).input(other).output_dtype(kBool).out_cast(OutCast::Any);
      },
      [&](TensorIter& it) {
        visit_allowed<kAllMask>(it.dtype(), op, [&]<class T>() {
          cpu_kernel<T, bool>(it, [](opmath_t<T> a, opmath_t<T> b) {
            return logic<kOp>(static_cast<bool>(a), static_cast<bool>(b));
          });
        });
      });
}

template <Logic kOp>
Tensor bitwise_impl(const char* op, Form form, const Tensor& self, const Tensor& other,
                    const Tensor* out) {
  return pointwise(
      op, form, self, out, kIntegralOrBoolMask,
      [&](TensorIter& it) { it.input(self).input(other); },
      [&](TensorIter& it) {
        visit_allowed<kIntegralOrBoolMask>(it.dtype(), op, [&]<class T>() {
          if constexpr (std::is_same_v<T, bool>) {
            cpu_kernel<T>(it, [](bool a, bool b) { return logic<kOp>(a, b); });
          } else if constexpr (kOp == Logic::And) {
            cpu_kernel<T>(it, [](T a, T b) { return static_cast<T>(a & b); });
          } else if constexpr (kOp == Logic::Or) {
            cpu_kernel<T>(it, [](T a, T b) { return static_cast<T>(a | b); });
          } else {
            cpu_kernel<T>(it, [](T a, T b) { return static_cast<T>(a ^ b); });
          }
        });
      });
}

#define KILN_FORMS(name, overload, out_overload, impl)                     \
  Tensor name(const Tensor& s, const Tensor& o) {                          \
    return impl(#name overload, Form::Functional, s, o, nullptr);          \
  }                                                                        \
  Tensor name##_(const Tensor& s, const Tensor& o) {                       \
    return impl(#name "_" overload, Form::InPlace, s, o, nullptr);         \
  }                                                                        \
  Tensor name##_out(const Tensor& s, const Tensor& o, const Tensor& out) { \
    return impl(#name "." out_overload, Form::Out, s, o, &out);            \
  }
KILN_FORMS(atan2, "", "out", atan2_impl)
KILN_FORMS(maximum, "", "out", max_min_impl<true>)
KILN_FORMS(minimum, "", "out", max_min_impl<false>)
KILN_FORMS(logical_and, "", "out", logical_impl<Logic::And>)
KILN_FORMS(logical_or, "", "out", logical_impl<Logic::Or>)
KILN_FORMS(logical_xor, "", "out", logical_impl<Logic::Xor>)
KILN_FORMS(bitwise_and, ".Tensor", "Tensor_out", bitwise_impl<Logic::And>)
KILN_FORMS(bitwise_or, ".Tensor", "Tensor_out", bitwise_impl<Logic::Or>)
KILN_FORMS(bitwise_xor, ".Tensor", "Tensor_out", bitwise_impl<Logic::Xor>)
#undef KILN_FORMS

// The Scalar overloads: the Tensor op on the number wrapped (Note [Scalar
// forms] in loops.h; an error names bitwise_and.Scalar, as called).
#define KILN_SCALAR_FORMS(name)                                                            \
  Tensor name##_scalar(const Tensor& s, const Scalar& o) {                                 \
    return scalar_form(#name ".Scalar", kIntegralOrBoolMask, s, o, false,                  \
                       [](const Tensor& a, const Tensor& b) { return kiln::name(a, b); }); \
  }                                                                                        \
  Tensor name##_scalar_(const Tensor& s, const Scalar& o) {                                \
    return scalar_form(#name "_.Scalar", kIntegralOrBoolMask, s, o, true,                  \
                       [](const Tensor& a, const Tensor& b) {                              \
                         Tensor self = a;                                                  \
                         kiln::name##_(self, b);                                           \
                         return a;                                                         \
                       });                                                                 \
  }
KILN_SCALAR_FORMS(bitwise_and)
KILN_SCALAR_FORMS(bitwise_or)
KILN_SCALAR_FORMS(bitwise_xor)
#undef KILN_SCALAR_FORMS

void register_kernels(Library& m) {
#define KILN_REGISTER(name, overload, out_overload) \
  m.impl(#name overload, &name);                    \
  m.impl(#name "_" overload, &name##_);             \
  m.impl(#name "." out_overload, &name##_out);
  KILN_REGISTER(atan2, "", "out")
  KILN_REGISTER(maximum, "", "out")
  KILN_REGISTER(minimum, "", "out")
  KILN_REGISTER(logical_and, "", "out")
  KILN_REGISTER(logical_or, "", "out")
  KILN_REGISTER(logical_xor, "", "out")
  KILN_REGISTER(bitwise_and, ".Tensor", "Tensor_out")
  KILN_REGISTER(bitwise_or, ".Tensor", "Tensor_out")
  KILN_REGISTER(bitwise_xor, ".Tensor", "Tensor_out")
#undef KILN_REGISTER
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("bitwise_and.Scalar", &bitwise_and_scalar);
  m.impl("bitwise_and_.Scalar", &bitwise_and_scalar_);
  m.impl("bitwise_or.Scalar", &bitwise_or_scalar);
  m.impl("bitwise_or_.Scalar", &bitwise_or_scalar_);
  m.impl("bitwise_xor.Scalar", &bitwise_xor_scalar);
  m.impl("bitwise_xor_.Scalar", &bitwise_xor_scalar_);
}

}  // namespace kiln::cpu
