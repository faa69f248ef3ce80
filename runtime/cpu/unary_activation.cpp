// Activation functions on the CPU: silu, gelu (erf and tanh forms), softplus,
// mish, log_sigmoid (the piecewise ones: unary_activation_piecewise.cpp).
// Floating inputs only; out= must have the input's dtype, as in PyTorch.
//
// Half and BFloat16 (Note [16-bit floats in pointwise kernels]) compute in
// float and round once, as the fused kernels do (PyTorch 1.13 rounds every
// step of silu and of gelu's tanh form to the 16-bit type; kiln does not, see
// the Note). silu is x * sigmoid(x) and the tanh form x * sigmoid(2u), which
// is 0.5 x (1 + tanh(u)) without the cancellation of 1 + tanh(u) for negative
// x, with sigmoid taken from exp(-|v|), which cannot overflow: the formulas the
// CPU and CUDA code generators use, so eager and fused results differ only
// where float32 math differs (at most one 16-bit ulp, tested). Tiny results of
// large negative inputs thus keep their value (x / (1 + exp(-x)) is -0 below
// x = -88.7 in float32, where exp overflows).

#include <cmath>
#include <string_view>

#include "kiln/dispatch.h"
#include "runtime/cpu/loops.h"

namespace kiln::cpu {
namespace {

// 1 / (1 + exp(-v)) from e = exp(-|v|) in [0, 1]: nothing overflows.
template <class M>
inline M sigmoid_of(M v) {
  const M e = std::exp(-std::abs(v));
  return (v >= M(0) ? M(1) : e) / (M(1) + e);
}

Tensor silu_impl(const char* op, Form form, const Tensor& self, const Tensor* out) {
  return pointwise(
      op, form, self, out, kFloatingMask,
      [&](TensorIter& it) { it.input(self).out_cast(OutCast::Same); },
      [&](TensorIter& it) {
        visit_allowed<kFloatingMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          cpu_kernel<T>(it, [](M x) { return x * sigmoid_of(x); });
        });
      });
}

// "none" -> false, "tanh" -> true.
bool gelu_tanh(std::string_view approximate, const char* op) {
  KILN_CHECK(approximate == "none" || approximate == "tanh", "[", op,
             "] expected approximate to be \"none\" or \"tanh\", got \"", approximate, "\"");
  return approximate == "tanh";
}

Tensor gelu_impl(const char* op, Form form, const Tensor& self, std::string_view approximate,
                 const Tensor* out) {
  const bool tanh_form = gelu_tanh(approximate, op);
  return pointwise(
      op, form, self, out, kFloatingMask,
      [&](TensorIter& it) { it.input(self).out_cast(OutCast::Same); },
      [&](TensorIter& it) {
        visit_allowed<kFloatingMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          if (tanh_form) {
            // 0.5 x (1 + tanh(u)) = x sigmoid(2u) with u = sqrt(2 / pi) (x + 0.044715 x^3),
            // 2u = x (k1 + k2 x^2).
            const M k1 = static_cast<M>(2 * M_SQRT2 * M_2_SQRTPI * 0.5);
            const M k2 = static_cast<M>(2 * M_SQRT2 * M_2_SQRTPI * 0.5 * 0.044715);
            cpu_kernel<T>(it, [k1, k2](M x) { return x * sigmoid_of(x * (k1 + k2 * x * x)); });
          } else {
            // x/2 erfc(-x / sqrt 2), as the generated kernel computes it
            // (vecmath_erf.cpp): PyTorch's x/2 (1 + erf(x / sqrt 2)) cancels
            // for negative x, to 0 below about -5.5 and to 1e-3 relative
            // error near -4, and eager and fused results differed there.
            const M alpha = static_cast<M>(M_SQRT1_2);
            cpu_kernel<T>(it, [alpha](M x) { return x * M(0.5) * std::erfc(-x * alpha); });
          }
        });
      });
}

// x where beta * x > threshold (where log1p(exp(.)) is x to working precision),
// else log1p(exp(beta * x)) / beta.
Tensor softplus_impl(const char* op, Form form, const Tensor& self, const Scalar& beta,
                     const Scalar& threshold, const Tensor* out) {
  return pointwise(
      op, form, self, out, kFloatingMask,
      [&](TensorIter& it) { it.input(self).out_cast(OutCast::Same); },
      [&](TensorIter& it) {
        visit_allowed<kFloatingMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          // In the opmath type, as PyTorch converts them.
          const M b = scalar_to<M>(beta, op, "beta");
          const M th = scalar_to<M>(threshold, op, "threshold");
          cpu_kernel<T>(it,
                        [b, th](M x) { return x * b > th ? x : std::log1p(std::exp(x * b)) / b; });
        });
      });
}

// x tanh(log1p(exp(x))), as PyTorch: exp's overflow gives tanh(inf) = 1, x.
Tensor mish_impl(const char* op, Form form, const Tensor& self, const Tensor* out) {
  return pointwise(
      op, form, self, out, kFloatingMask,
      [&](TensorIter& it) { it.input(self).out_cast(OutCast::Same); },
      [&](TensorIter& it) {
        visit_allowed<kFloatingMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          cpu_kernel<T>(it, [](M x) { return x * std::tanh(std::log1p(std::exp(x))); });
        });
      });
}

// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)): -softplus(-x) in a form
// where nothing overflows (-inf at -inf, 0 at inf).
Tensor log_sigmoid_impl(const char* op, Form form, const Tensor& self, const Tensor* out) {
  return pointwise(
      op, form, self, out, kFloatingMask,
      [&](TensorIter& it) { it.input(self).out_cast(OutCast::Same); },
      [&](TensorIter& it) {
        visit_allowed<kFloatingMask>(it.dtype(), op, [&]<class T>() {
          using M = opmath_t<T>;
          cpu_kernel<T>(it, [](M x) {
            // NaN stays NaN through the second term whichever side min takes.
            const M low = x < M(0) ? x : M(0);
            return low - std::log1p(std::exp(-std::abs(x)));
          });
        });
      });
}

Tensor silu(const Tensor& s) {
  return silu_impl("silu", Form::Functional, s, nullptr);
}
Tensor silu_(const Tensor& s) {
  return silu_impl("silu_", Form::InPlace, s, nullptr);
}
Tensor silu_out(const Tensor& s, const Tensor& out) {
  return silu_impl("silu.out", Form::Out, s, &out);
}
Tensor gelu(const Tensor& s, std::string_view a) {
  return gelu_impl("gelu", Form::Functional, s, a, nullptr);
}
Tensor gelu_(const Tensor& s, std::string_view a) {
  return gelu_impl("gelu_", Form::InPlace, s, a, nullptr);
}
Tensor gelu_out(const Tensor& s, std::string_view a, const Tensor& out) {
  return gelu_impl("gelu.out", Form::Out, s, a, &out);
}
Tensor softplus(const Tensor& s, const Scalar& beta, const Scalar& threshold) {
  return softplus_impl("softplus", Form::Functional, s, beta, threshold, nullptr);
}
Tensor softplus_out(const Tensor& s, const Scalar& beta, const Scalar& threshold,
                    const Tensor& out) {
  return softplus_impl("softplus.out", Form::Out, s, beta, threshold, &out);
}

Tensor mish(const Tensor& s) {
  return mish_impl("mish", Form::Functional, s, nullptr);
}
Tensor mish_(const Tensor& s) {
  return mish_impl("mish_", Form::InPlace, s, nullptr);
}
Tensor mish_out(const Tensor& s, const Tensor& out) {
  return mish_impl("mish.out", Form::Out, s, &out);
}
Tensor log_sigmoid(const Tensor& s) {
  return log_sigmoid_impl("log_sigmoid", Form::Functional, s, nullptr);
}
Tensor log_sigmoid_out(const Tensor& s, const Tensor& out) {
  return log_sigmoid_impl("log_sigmoid.out", Form::Out, s, &out);
}

void register_kernels(Library& m) {
  m.impl("silu", &silu);
  m.impl("silu_", &silu_);
  m.impl("silu.out", &silu_out);
  m.impl("gelu", &gelu);
  m.impl("gelu_", &gelu_);
  m.impl("gelu.out", &gelu_out);
  m.impl("softplus", &softplus);
  m.impl("softplus.out", &softplus_out);
  m.impl("mish", &mish);
  m.impl("mish_", &mish_);
  m.impl("mish.out", &mish_out);
  m.impl("log_sigmoid", &log_sigmoid);
  m.impl("log_sigmoid.out", &log_sigmoid_out);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
