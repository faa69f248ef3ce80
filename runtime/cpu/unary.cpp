// Unary floating functions on the CPU: exp, log, sqrt, the trigonometric and
// hyperbolic functions, sigmoid, erf. Integer and bool inputs compute in
// float32 (ComputeType::Floating); out= and in-place targets take the result
// when it can be cast to them. Registered for CPU and Meta like binary.cpp.
//
// Half and BFloat16: see Note [16-bit floats in pointwise kernels] (rsqrt
// rounds once, as PyTorch's vectorized loop does; its scalar fallback for
// BFloat16 rounds sqrt before 1/x).

#include <cmath>

#include "kiln/dispatch.h"
#include "runtime/cpu/loops.h"

namespace kiln::cpu {
namespace {

template <class Fn>
Tensor float_unary(const char* op, Form form, const Tensor& self, const Tensor* out) {
  return pointwise(
      op, form, self, out, kFloatingMask,
      [&](TensorIter& it) { it.input(self).compute(ComputeType::Floating); },
      [&](TensorIter& it) {
        visit_allowed<kFloatingMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          cpu_kernel<T>(it, [](M x) { return Fn{}(x); });
        });
      });
}

#define KILN_FLOAT_FN(Name, expr) \
  struct Name {                   \
    template <class M>            \
    M operator()(M x) const {     \
      return expr;                \
    }                             \
  };
KILN_FLOAT_FN(Exp, std::exp(x))
KILN_FLOAT_FN(Exp2, std::exp2(x))
KILN_FLOAT_FN(Expm1, std::expm1(x))
KILN_FLOAT_FN(Log, std::log(x))
KILN_FLOAT_FN(Log2, std::log2(x))
KILN_FLOAT_FN(Log10, std::log10(x))
KILN_FLOAT_FN(Log1p, std::log1p(x))
KILN_FLOAT_FN(Sqrt, std::sqrt(x))
KILN_FLOAT_FN(Rsqrt, M(1) / std::sqrt(x))
KILN_FLOAT_FN(Reciprocal, M(1) / x)
KILN_FLOAT_FN(Sin, std::sin(x))
KILN_FLOAT_FN(Cos, std::cos(x))
KILN_FLOAT_FN(Tan, std::tan(x))
KILN_FLOAT_FN(Asin, std::asin(x))
KILN_FLOAT_FN(Acos, std::acos(x))
KILN_FLOAT_FN(Atan, std::atan(x))
KILN_FLOAT_FN(Sinh, std::sinh(x))
KILN_FLOAT_FN(Cosh, std::cosh(x))
KILN_FLOAT_FN(Tanh, std::tanh(x))
KILN_FLOAT_FN(Sigmoid, M(1) / (M(1) + std::exp(-x)))
KILN_FLOAT_FN(Erf, std::erf(x))
KILN_FLOAT_FN(Erfc, std::erfc(x))
#undef KILN_FLOAT_FN

#define KILN_FLOAT_FORMS(name, Fn)                                \
  Tensor name(const Tensor& s) {                                  \
    return float_unary<Fn>(#name, Form::Functional, s, nullptr);  \
  }                                                               \
  Tensor name##_(const Tensor& s) {                               \
    return float_unary<Fn>(#name "_", Form::InPlace, s, nullptr); \
  }                                                               \
  Tensor name##_out(const Tensor& s, const Tensor& out) {         \
    return float_unary<Fn>(#name ".out", Form::Out, s, &out);     \
  }
KILN_FLOAT_FORMS(exp, Exp)
KILN_FLOAT_FORMS(exp2, Exp2)
KILN_FLOAT_FORMS(expm1, Expm1)
KILN_FLOAT_FORMS(log, Log)
KILN_FLOAT_FORMS(log2, Log2)
KILN_FLOAT_FORMS(log10, Log10)
KILN_FLOAT_FORMS(log1p, Log1p)
KILN_FLOAT_FORMS(sqrt, Sqrt)
KILN_FLOAT_FORMS(rsqrt, Rsqrt)
KILN_FLOAT_FORMS(reciprocal, Reciprocal)
KILN_FLOAT_FORMS(sin, Sin)
KILN_FLOAT_FORMS(cos, Cos)
KILN_FLOAT_FORMS(tan, Tan)
KILN_FLOAT_FORMS(asin, Asin)
KILN_FLOAT_FORMS(acos, Acos)
KILN_FLOAT_FORMS(atan, Atan)
KILN_FLOAT_FORMS(sinh, Sinh)
KILN_FLOAT_FORMS(cosh, Cosh)
KILN_FLOAT_FORMS(tanh, Tanh)
KILN_FLOAT_FORMS(sigmoid, Sigmoid)
KILN_FLOAT_FORMS(erf, Erf)
KILN_FLOAT_FORMS(erfc, Erfc)
#undef KILN_FLOAT_FORMS

void register_kernels(Library& m) {
#define KILN_REGISTER(name)    \
  m.impl(#name, &name);        \
  m.impl(#name "_", &name##_); \
  m.impl(#name ".out", &name##_out);
  KILN_REGISTER(exp)
  KILN_REGISTER(exp2)
  KILN_REGISTER(expm1)
  KILN_REGISTER(log)
  KILN_REGISTER(log2)
  KILN_REGISTER(log10)
  KILN_REGISTER(log1p)
  KILN_REGISTER(sqrt)
  KILN_REGISTER(rsqrt)
  KILN_REGISTER(reciprocal)
  KILN_REGISTER(sin)
  KILN_REGISTER(cos)
  KILN_REGISTER(tan)
  KILN_REGISTER(asin)
  KILN_REGISTER(acos)
  KILN_REGISTER(atan)
  KILN_REGISTER(sinh)
  KILN_REGISTER(cosh)
  KILN_REGISTER(tanh)
  KILN_REGISTER(sigmoid)
  KILN_REGISTER(erf)
  KILN_REGISTER(erfc)
#undef KILN_REGISTER
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
