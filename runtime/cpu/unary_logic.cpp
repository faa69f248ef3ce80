// Unary predicates and bit ops: logical_not, bitwise_not, isnan, isinf,
// isfinite, and nan_to_num. The predicates return bool for every dtype (an
// integer is never NaN nor infinite); logical_not's out= and in-place targets
// take the result in any dtype.

#include <cmath>
#include <limits>

#include "kiln/dispatch.h"
#include "runtime/cpu/loops.h"

namespace kiln::cpu {
namespace {

Tensor logical_not_impl(const char* op, Form form, const Tensor& self, const Tensor* out) {
  return pointwise(
      op, form, self, out, kAllMask,
      [&](TensorIter& it) { it.input(self).output_dtype(kBool).out_cast(OutCast::Any); },
      [&](TensorIter& it) {
        visit_allowed<kAllMask>(it.dtype(), op, [&]<class T>() {
          cpu_kernel<T, bool>(it, [](opmath_t<T> x) { return !static_cast<bool>(x); });
        });
      });
}

// ~x for integers, !x for bool; floating types are refused.
Tensor bitwise_not_impl(const char* op, Form form, const Tensor& self, const Tensor* out) {
  return pointwise(
      op, form, self, out, kIntegralOrBoolMask,
      [&](TensorIter& it) { it.input(self).out_cast(OutCast::Same); },
      [&](TensorIter& it) {
        visit_allowed<kIntegralOrBoolMask>(it.dtype(), op, [&]<class T>() {
          if constexpr (std::is_same_v<T, bool>) {
            cpu_kernel<T>(it, [](bool x) { return !x; });
          } else {
            cpu_kernel<T>(it, [](T x) { return static_cast<T>(~x); });
          }
        });
      });
}

template <class Pred>
Tensor predicate(const char* op, const Tensor& self, Pred pred) {
  return pointwise(
      op, Form::Functional, self, nullptr, kAllMask,
      [&](TensorIter& it) { it.input(self).output_dtype(kBool); },
      [&](TensorIter& it) {
        visit_allowed<kAllMask>(it.dtype(), op, [&]<class T>() {
          cpu_kernel<T, bool>(it, [pred](opmath_t<T> x) { return pred(x); });
        });
      });
}

Tensor isnan(const Tensor& self) {
  return predicate("isnan", self, [](auto x) { return x != x; });
}
Tensor isinf(const Tensor& self) {
  return predicate("isinf", self, []<class M>(M x) {
    if constexpr (std::is_floating_point_v<M>) {
      return std::isinf(x);
    } else {
      return false;
    }
  });
}
Tensor isfinite(const Tensor& self) {
  return predicate("isfinite", self, []<class M>(M x) {
    if constexpr (std::is_floating_point_v<M>) {
      return std::isfinite(x);
    } else {
      return true;
    }
  });
}

// NaN -> nan (0), +inf -> posinf (T's max), -inf -> neginf (T's lowest); the
// replacements convert to T unchecked, so 1e10 becomes inf in Half. Integer and
// bool tensors are copied. out= must have self's dtype.
Tensor nan_to_num_impl(const char* op, Form form, const Tensor& self, std::optional<double> nan,
                       std::optional<double> posinf, std::optional<double> neginf,
                       const Tensor* out) {
  if (out) {
    KILN_CHECK(out->dtype() == self.dtype(), "[", op, "] expected out of dtype ", self.dtype(),
               " (the input's), got ", out->dtype());
  }
  return pointwise(
      op, form, self, out, kAllMask,
      [&](TensorIter& it) { it.input(self).out_cast(OutCast::Same); },
      [&](TensorIter& it) {
        visit_allowed<kAllMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          if constexpr (std::is_floating_point_v<M>) {
            const M n = round_to<T>(static_cast<M>(nan.value_or(0.0)));
            const M pos =
                posinf ? round_to<T>(static_cast<M>(*posinf)) : static_cast<M>(max_value<T>());
            const M negv =
                neginf ? round_to<T>(static_cast<M>(*neginf)) : static_cast<M>(lowest_value<T>());
            cpu_kernel<T>(it, [=](M x) {
              return x != x                                     ? n
                     : x == std::numeric_limits<M>::infinity()  ? pos
                     : x == -std::numeric_limits<M>::infinity() ? negv
                                                                : x;
            });
          } else {
            cpu_kernel<T>(it, [](M x) { return x; });
          }
        });
      });
}

Tensor nan_to_num(const Tensor& s, std::optional<double> nan, std::optional<double> posinf,
                  std::optional<double> neginf) {
  return nan_to_num_impl("nan_to_num", Form::Functional, s, nan, posinf, neginf, nullptr);
}
Tensor nan_to_num_(const Tensor& s, std::optional<double> nan, std::optional<double> posinf,
                   std::optional<double> neginf) {
  return nan_to_num_impl("nan_to_num_", Form::InPlace, s, nan, posinf, neginf, nullptr);
}
Tensor nan_to_num_out(const Tensor& s, std::optional<double> nan, std::optional<double> posinf,
                      std::optional<double> neginf, const Tensor& out) {
  return nan_to_num_impl("nan_to_num.out", Form::Out, s, nan, posinf, neginf, &out);
}

#define KILN_FORMS(name, impl)                            \
  Tensor name(const Tensor& s) {                          \
    return impl(#name, Form::Functional, s, nullptr);     \
  }                                                       \
  Tensor name##_(const Tensor& s) {                       \
    return impl(#name "_", Form::InPlace, s, nullptr);    \
  }                                                       \
  Tensor name##_out(const Tensor& s, const Tensor& out) { \
    return impl(#name ".out", Form::Out, s, &out);        \
  }
KILN_FORMS(logical_not, logical_not_impl)
KILN_FORMS(bitwise_not, bitwise_not_impl)
#undef KILN_FORMS

void register_kernels(Library& m) {
  m.impl("logical_not", &logical_not);
  m.impl("logical_not_", &logical_not_);
  m.impl("logical_not.out", &logical_not_out);
  m.impl("bitwise_not", &bitwise_not);
  m.impl("bitwise_not_", &bitwise_not_);
  m.impl("bitwise_not.out", &bitwise_not_out);
  m.impl("isnan", &isnan);
  m.impl("isinf", &isinf);
  m.impl("isfinite", &isfinite);
  m.impl("nan_to_num", &nan_to_num);
  m.impl("nan_to_num_", &nan_to_num_);
  m.impl("nan_to_num.out", &nan_to_num_out);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
