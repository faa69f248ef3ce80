// Unary ops that keep their input's dtype: neg, abs, sign, relu and the
// rounding family (floor, ceil, round, trunc, frac, round.decimals). As in
// PyTorch, their out= targets must have the result's dtype (relu's take any,
// being converted as copy_ does), integer inputs round to themselves, and
// integer negation wraps (abs(int8(-128)) == -128).

#include <cmath>
#include <type_traits>

#include "kiln/dispatch.h"
#include "runtime/core/wrapping.h"
#include "runtime/cpu/loops.h"

namespace kiln::cpu {
namespace {

// self's dtype in, the same dtype out; `allowed` lists the dtypes admitted.
template <class Body>
Tensor same_dtype_unary(const char* op, Form form, const Tensor& self, const Tensor* out,
                        uint32_t allowed, Body body) {
  return pointwise(
      op, form, self, out, allowed, [&](TensorIter& it) { it.input(self).out_cast(OutCast::Same); },
      body);
}

// --- neg / abs / sign / relu -----------------------------------------------------

Tensor neg_impl(const char* op, Form form, const Tensor& self, const Tensor* out) {
  KILN_CHECK(self.dtype() != kBool, "[", op,
             "] expected a non-bool tensor, got bool; use logical_not to invert a mask");
  return same_dtype_unary(op, form, self, out, kNoBoolMask, [&](TensorIter& it) {
    visit_allowed<kNoBoolMask>(it.dtype(), op, [&]<class T>() {
      cpu_kernel<T>(it, [](opmath_t<T> x) { return wrap_neg(x); });
    });
  });
}

Tensor abs_impl(const char* op, Form form, const Tensor& self, const Tensor* out) {
  return same_dtype_unary(op, form, self, out, kNoBoolMask, [&](TensorIter& it) {
    visit_allowed<kNoBoolMask>(it.dtype(), op, [&]<class T>() {
      using M = opmath_t<T>;
      if constexpr (std::is_unsigned_v<T>) {
        cpu_kernel<T>(it, [](M x) { return x; });
      } else if constexpr (std::is_integral_v<T>) {
        cpu_kernel<T>(it, [](M x) { return x < 0 ? wrap_neg(x) : x; });
      } else {
        cpu_kernel<T>(it, [](M x) { return std::abs(x); });
      }
    });
  });
}

// (0 < x) - (x < 0): NaN gives 0, as in PyTorch; bool is its own sign.
Tensor sign_impl(const char* op, Form form, const Tensor& self, const Tensor* out) {
  return same_dtype_unary(op, form, self, out, kAllMask, [&](TensorIter& it) {
    visit_allowed<kAllMask>(it.dtype(), op, [&]<class T>() {
      using M = opmath_t<T>;
      if constexpr (std::is_same_v<T, bool>) {
        cpu_kernel<T>(it, [](bool x) { return x; });
      } else {
        cpu_kernel<T>(it, [](M x) { return static_cast<M>((M(0) < x) - (x < M(0))); });
      }
    });
  });
}

// x < 0 ? 0 : x, which keeps NaN and -0.0 as PyTorch's clamp_min(x, 0) does.
Tensor relu_impl(const char* op, Form form, const Tensor& self, const Tensor* out) {
  KILN_CHECK(self.dtype() != kBool, "[", op, "] expected a non-bool input, got bool");
  return pointwise(
      op, form, self, out, kNoBoolMask,
      [&](TensorIter& it) { it.input(self).out_cast(OutCast::Any); },
      [&](TensorIter& it) {
        visit_allowed<kNoBoolMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          cpu_kernel<T>(it, [](M x) { return x < M(0) ? M(0) : x; });
        });
      });
}

// --- rounding ----------------------------------------------------------------------

template <class Fn>
Tensor rounding_impl(const char* op, Form form, const Tensor& self, const Tensor* out) {
  return same_dtype_unary(op, form, self, out, kNoBoolMask, [&](TensorIter& it) {
    visit_allowed<kNoBoolMask>(it.dtype(), op, [&]<class T>() {
      using M = opmath_t<T>;
      if constexpr (std::is_integral_v<T>) {
        cpu_kernel<T>(it, [](M x) { return x; });
      } else {
        cpu_kernel<T>(it, [](M x) { return Fn{}(x); });
      }
    });
  });
}
struct Floor {
  template <class M>
  M operator()(M x) const {
    return std::floor(x);
  }
};
struct Ceil {
  template <class M>
  M operator()(M x) const {
    return std::ceil(x);
  }
};
// Halves round to even.
struct Round {
  template <class M>
  M operator()(M x) const {
    return std::nearbyint(x);
  }
};
struct Trunc {
  template <class M>
  M operator()(M x) const {
    return std::trunc(x);
  }
};

// x - trunc(x): floating types only (inf gives NaN).
Tensor frac_impl(const char* op, Form form, const Tensor& self, const Tensor* out) {
  return same_dtype_unary(op, form, self, out, kFloatingMask, [&](TensorIter& it) {
    visit_allowed<kFloatingMask>(it.dtype(), op, [&]<class T>() {
      cpu_kernel<T>(it, [](opmath_t<T> x) { return x - std::trunc(x); });
    });
  });
}

// round(x * 10^d) / 10^d, or round(x / 10^-d) * 10^-d for negative d. For
// Half and BFloat16 each step (and 10^d itself) rounds to the type, as
// PyTorch computes it.
Tensor round_decimals(const Tensor& self, int64_t decimals) {
  const char* op = "round.decimals";
  return same_dtype_unary(op, Form::Functional, self, nullptr, kFloatingMask, [&](TensorIter& it) {
    visit_allowed<kFloatingMask>(it.dtype(), op, [&]<class T>() {
      using M = opmath_t<T>;
      const bool negative = decimals < 0;
      // In double: -decimals overflows for int64's min.
      const double power = std::pow(10.0, std::fabs(static_cast<double>(decimals)));
      const M ten = round_to<T>(static_cast<M>(power));
      if (negative) {
        cpu_kernel<T>(
            it, [ten](M x) { return round_to<T>(std::nearbyint(round_to<T>(x / ten))) * ten; });
      } else {
        cpu_kernel<T>(
            it, [ten](M x) { return round_to<T>(std::nearbyint(round_to<T>(x * ten))) / ten; });
      }
    });
  });
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
KILN_FORMS(neg, neg_impl)
KILN_FORMS(abs, abs_impl)
KILN_FORMS(sign, sign_impl)
KILN_FORMS(relu, relu_impl)
KILN_FORMS(floor, rounding_impl<Floor>)
KILN_FORMS(ceil, rounding_impl<Ceil>)
KILN_FORMS(round, rounding_impl<Round>)
KILN_FORMS(trunc, rounding_impl<Trunc>)
KILN_FORMS(frac, frac_impl)
#undef KILN_FORMS

void register_kernels(Library& m) {
#define KILN_REGISTER(name)    \
  m.impl(#name, &name);        \
  m.impl(#name "_", &name##_); \
  m.impl(#name ".out", &name##_out);
  KILN_REGISTER(neg)
  KILN_REGISTER(abs)
  KILN_REGISTER(sign)
  KILN_REGISTER(relu)
  KILN_REGISTER(floor)
  KILN_REGISTER(ceil)
  KILN_REGISTER(round)
  KILN_REGISTER(trunc)
  KILN_REGISTER(frac)
#undef KILN_REGISTER
  m.impl("round.decimals", &round_decimals);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
