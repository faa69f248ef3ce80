// Ternary pointwise ops on the CPU: where, lerp, addcmul, addcdiv.
//
// where: the condition is bool (or uint8, which PyTorch 1.13 still accepts
// with a deprecation warning) and is read in its own dtype; self and other
// promote to their common dtype. lerp takes floating inputs of one dtype.
// addcmul and addcdiv promote their three inputs; out= and in-place targets
// must have the common dtype (PyTorch 1.13 asserts so), and addcdiv refuses
// two integer factors. Half and BFloat16 compute in float and round once, as
// PyTorch 1.13 does for these ops (Note [16-bit floats in pointwise kernels]);
// the Scalar weight and value enter in float.

#include <cmath>
#include <type_traits>

#include "kiln/dispatch.h"
#include "runtime/core/wrapping.h"
#include "runtime/cpu/loops.h"

namespace kiln::cpu {
namespace {

// --- where -------------------------------------------------------------------------

Tensor where_impl(const char* op, Form form, const Tensor& condition, const Tensor& self,
                  const Tensor& other, const Tensor* out) {
  check_defined(condition, op, "condition");
  KILN_CHECK(condition.dtype() == kBool || condition.dtype() == kUInt8, "[", op,
             "] expected a bool condition, got ", condition.dtype());
  return pointwise(
      op, form, self, out, kAllMask,
      [&](TensorIter& it) {
        it.input_keep_dtype(condition).input(self).input(other).out_cast(OutCast::Same);
      },
      [&](TensorIter& it) {
        visit_allowed<kAllMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          // A bool condition is read as its byte, which keeps the select
          // branch-free and vectorizable.
          cpu_kernel_typed<T, uint8_t, T, T>(it,
                                             [](uint8_t c, M a, M b) { return c != 0 ? a : b; });
        });
      });
}

Tensor where(const Tensor& c, const Tensor& s, const Tensor& o) {
  return where_impl("where.self", Form::Functional, c, s, o, nullptr);
}
Tensor where_out(const Tensor& c, const Tensor& s, const Tensor& o, const Tensor& out) {
  return where_impl("where.self_out", Form::Out, c, s, o, &out);
}

// --- lerp ----------------------------------------------------------------------------

// self + w (end - self) for |w| < 0.5, else end - (end - self)(1 - w): exact at
// both ends, as PyTorch computes it.
template <class M>
M lerp_value(M self, M end, M w) {
  return std::abs(w) < M(0.5) ? self + w * (end - self) : end - (end - self) * (M(1) - w);
}

void check_same_dtype(const Tensor& self, const Tensor& t, const char* op, const char* name) {
  check_defined(t, op, name);
  KILN_CHECK(self.dtype() == t.dtype(), "[", op, "] expected '", name, "' of dtype ", self.dtype(),
             " (self's), got ", t.dtype());
}

Tensor lerp_scalar_impl(const char* op, Form form, const Tensor& self, const Tensor& end,
                        const Scalar& weight, const Tensor* out) {
  check_defined(self, op, "self");
  check_same_dtype(self, end, op, "end");
  return pointwise(
      op, form, self, out, kFloatingMask, [&](TensorIter& it) { it.input(self).input(end); },
      [&](TensorIter& it) {
        visit_allowed<kFloatingMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          const M w = scalar_to<M>(weight, op, "weight");  // in the opmath type, as PyTorch
          cpu_kernel<T>(it, [w](M a, M b) { return lerp_value(a, b, w); });
        });
      });
}

Tensor lerp_tensor_impl(const char* op, Form form, const Tensor& self, const Tensor& end,
                        const Tensor& weight) {
  check_defined(self, op, "self");
  check_same_dtype(self, end, op, "end");
  check_same_dtype(self, weight, op, "weight");
  return pointwise(
      op, form, self, nullptr, kFloatingMask,
      [&](TensorIter& it) { it.input(self).input(end).input(weight); },
      [&](TensorIter& it) {
        visit_allowed<kFloatingMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          cpu_kernel<T>(it, [](M a, M b, M w) { return lerp_value(a, b, w); });
        });
      });
}

Tensor lerp_scalar(const Tensor& s, const Tensor& e, const Scalar& w) {
  return lerp_scalar_impl("lerp.Scalar", Form::Functional, s, e, w, nullptr);
}
Tensor lerp_scalar_(const Tensor& s, const Tensor& e, const Scalar& w) {
  return lerp_scalar_impl("lerp_.Scalar", Form::InPlace, s, e, w, nullptr);
}
Tensor lerp_scalar_out(const Tensor& s, const Tensor& e, const Scalar& w, const Tensor& out) {
  return lerp_scalar_impl("lerp.Scalar_out", Form::Out, s, e, w, &out);
}
Tensor lerp_tensor(const Tensor& s, const Tensor& e, const Tensor& w) {
  return lerp_tensor_impl("lerp.Tensor", Form::Functional, s, e, w);
}
Tensor lerp_tensor_(const Tensor& s, const Tensor& e, const Tensor& w) {
  return lerp_tensor_impl("lerp_.Tensor", Form::InPlace, s, e, w);
}

// --- addcmul / addcdiv -------------------------------------------------------------

// self + value * t1 * t2 (addcmul) or self + value * t1 / t2 (addcdiv).
template <bool kDiv>
Tensor addc_impl(const char* op, Form form, const Tensor& self, const Tensor& t1, const Tensor& t2,
                 const Scalar& value, const Tensor* out) {
  check_defined(t1, op, "tensor1");
  check_defined(t2, op, "tensor2");
  if (kDiv) {
    KILN_CHECK(!is_integral(t1.dtype(), true) || !is_integral(t2.dtype(), true), "[", op,
               "] expected a floating tensor1 or tensor2, got ", t1.dtype(), " and ", t2.dtype(),
               " (integer division is not supported; use (self + value * trunc(t1 / t2)) for the "
               "old behavior)");
  }
  constexpr uint32_t kAllowed = kDiv ? kFloatingMask : kNoBoolMask;
  return pointwise(
      op, form, self, out, kAllowed,
      [&](TensorIter& it) { it.input(self).input(t1).input(t2).out_cast(OutCast::Same); },
      [&](TensorIter& it) {
        visit_allowed<kAllowed>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          const M v = scalar_to<M>(value, op, "value");  // in the opmath type, as PyTorch
          if constexpr (std::is_integral_v<T>) {
            // Wrapping arithmetic, as the integer types do in PyTorch.
            const T vt = static_cast<T>(v);
            cpu_kernel<T>(
                it, [vt](T a, T b, T c) { return wrap_add(a, wrap_mul(wrap_mul(vt, b), c)); });
          } else {
            if constexpr (kDiv) {
              cpu_kernel<T>(it, [v](M a, M b, M c) { return a + v * b / c; });
            } else {
              cpu_kernel<T>(it, [v](M a, M b, M c) { return a + v * b * c; });
            }
          }
        });
      });
}

#define KILN_ADDC_FORMS(name, kDiv)                                                     \
  Tensor name(const Tensor& s, const Tensor& a, const Tensor& b, const Scalar& v) {     \
    return addc_impl<kDiv>(#name, Form::Functional, s, a, b, v, nullptr);               \
  }                                                                                     \
  Tensor name##_(const Tensor& s, const Tensor& a, const Tensor& b, const Scalar& v) {  \
    return addc_impl<kDiv>(#name "_", Form::InPlace, s, a, b, v, nullptr);              \
  }                                                                                     \
  Tensor name##_out(const Tensor& s, const Tensor& a, const Tensor& b, const Scalar& v, \
                    const Tensor& out) {                                                \
    return addc_impl<kDiv>(#name ".out", Form::Out, s, a, b, v, &out);                  \
  }
KILN_ADDC_FORMS(addcmul, false)
KILN_ADDC_FORMS(addcdiv, true)
#undef KILN_ADDC_FORMS

void register_kernels(Library& m) {
  m.impl("where.self", &where);
  m.impl("where.self_out", &where_out);
  m.impl("lerp.Scalar", &lerp_scalar);
  m.impl("lerp_.Scalar", &lerp_scalar_);
  m.impl("lerp.Scalar_out", &lerp_scalar_out);
  m.impl("lerp.Tensor", &lerp_tensor);
  m.impl("lerp_.Tensor", &lerp_tensor_);
  m.impl("addcmul", &addcmul);
  m.impl("addcmul_", &addcmul_);
  m.impl("addcmul.out", &addcmul_out);
  m.impl("addcdiv", &addcdiv);
  m.impl("addcdiv_", &addcdiv_);
  m.impl("addcdiv.out", &addcdiv_out);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
