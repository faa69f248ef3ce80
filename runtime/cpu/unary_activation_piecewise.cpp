// Piecewise activations on the CPU: leaky_relu, elu, hardsigmoid, hardswish.
// Floating inputs only, as PyTorch's kernels (hardtanh, which PyTorch also
// runs on integers, is clamp: runtime/ops/aliases.cpp). Half and BFloat16
// compute in float and round once (Note [16-bit floats in pointwise
// kernels]). Each formula is the one its decomposition writes in the kernel
// IR (jit/record/decompose_pointwise.cpp), so eager and fused results differ
// only where float32 math does; NaN propagates through every branch.

#include <cmath>

#include "kiln/dispatch.h"
#include "runtime/cpu/loops.h"

namespace kiln::cpu {
namespace {

// Runs `fn(M x) -> M` over self for one form of `op`, floating dtypes only.
template <class MakeFn>
Tensor activation(const char* op, Form form, const Tensor& self, const Tensor* out,
                  MakeFn&& make_fn) {
  return pointwise(
      op, form, self, out, kFloatingMask,
      [&](TensorIter& it) { it.input(self).out_cast(OutCast::Same); },
      [&](TensorIter& it) {
        visit_allowed<kFloatingMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          cpu_kernel<T>(it, make_fn.template operator()<M>());
        });
      });
}

// x for x > 0, else x * negative_slope.
Tensor leaky_relu_impl(const char* op, Form form, const Tensor& self, const Scalar& slope,
                       const Tensor* out) {
  return activation(op, form, self, out, [&]<class M>() {
    const M s = static_cast<M>(slope.to_double());
    return [s](M x) { return x > M(0) ? x : x * s; };
  });
}

// scale * x for x > 0, else alpha * scale * expm1(input_scale * x). PyTorch
// takes exp(.) - 1, which loses the small negative values' digits; expm1
// keeps them (the difference is within the oracle's absolute tolerance).
// expm1(-0) is -0 where exp(-0) - 1 is +0: adding +0 gives PyTorch's zero.
Tensor elu_impl(const char* op, Form form, const Tensor& self, const Scalar& alpha,
                const Scalar& scale, const Scalar& input_scale, const Tensor* out) {
  return activation(op, form, self, out, [&]<class M>() {
    const M pos = static_cast<M>(scale.to_double());
    const M neg = static_cast<M>(static_cast<M>(alpha.to_double()) * pos);
    const M in = static_cast<M>(input_scale.to_double());
    return [pos, neg, in](M x) { return x > M(0) ? x * pos : (std::expm1(x * in) + M(0)) * neg; };
  });
}

// min(max(x + 3, 0), 6), NaN propagating as the fused kernels' max and min do.
template <class M>
inline M relu6_shifted(M x) {
  M t = x + M(3);
  t = t < M(0) ? M(0) : t;
  return t > M(6) ? M(6) : t;
}

Tensor hardsigmoid_impl(const char* op, Form form, const Tensor& self, const Tensor* out) {
  return activation(op, form, self, out,
                    [&]<class M>() { return [](M x) { return relu6_shifted(x) / M(6); }; });
}

// x * relu6(x + 3) / 6, multiplied before the division as PyTorch does.
Tensor hardswish_impl(const char* op, Form form, const Tensor& self, const Tensor* out) {
  return activation(op, form, self, out,
                    [&]<class M>() { return [](M x) { return x * relu6_shifted(x) / M(6); }; });
}

Tensor leaky_relu(const Tensor& s, const Scalar& slope) {
  return leaky_relu_impl("leaky_relu", Form::Functional, s, slope, nullptr);
}
Tensor leaky_relu_(const Tensor& s, const Scalar& slope) {
  return leaky_relu_impl("leaky_relu_", Form::InPlace, s, slope, nullptr);
}
Tensor leaky_relu_out(const Tensor& s, const Scalar& slope, const Tensor& out) {
  return leaky_relu_impl("leaky_relu.out", Form::Out, s, slope, &out);
}
Tensor elu(const Tensor& s, const Scalar& a, const Scalar& sc, const Scalar& is) {
  return elu_impl("elu", Form::Functional, s, a, sc, is, nullptr);
}
Tensor elu_(const Tensor& s, const Scalar& a, const Scalar& sc, const Scalar& is) {
  return elu_impl("elu_", Form::InPlace, s, a, sc, is, nullptr);
}
Tensor elu_out(const Tensor& s, const Scalar& a, const Scalar& sc, const Scalar& is,
               const Tensor& out) {
  return elu_impl("elu.out", Form::Out, s, a, sc, is, &out);
}
Tensor hardsigmoid(const Tensor& s) {
  return hardsigmoid_impl("hardsigmoid", Form::Functional, s, nullptr);
}
Tensor hardsigmoid_(const Tensor& s) {
  return hardsigmoid_impl("hardsigmoid_", Form::InPlace, s, nullptr);
}
Tensor hardsigmoid_out(const Tensor& s, const Tensor& out) {
  return hardsigmoid_impl("hardsigmoid.out", Form::Out, s, &out);
}
Tensor hardswish(const Tensor& s) {
  return hardswish_impl("hardswish", Form::Functional, s, nullptr);
}
Tensor hardswish_(const Tensor& s) {
  return hardswish_impl("hardswish_", Form::InPlace, s, nullptr);
}
Tensor hardswish_out(const Tensor& s, const Tensor& out) {
  return hardswish_impl("hardswish.out", Form::Out, s, &out);
}

void register_kernels(Library& m) {
  m.impl("leaky_relu", &leaky_relu);
  m.impl("leaky_relu_", &leaky_relu_);
  m.impl("leaky_relu.out", &leaky_relu_out);
  m.impl("elu", &elu);
  m.impl("elu_", &elu_);
  m.impl("elu.out", &elu_out);
  m.impl("hardsigmoid", &hardsigmoid);
  m.impl("hardsigmoid_", &hardsigmoid_);
  m.impl("hardsigmoid.out", &hardsigmoid_out);
  m.impl("hardswish", &hardswish);
  m.impl("hardswish_", &hardswish_);
  m.impl("hardswish.out", &hardswish_out);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
