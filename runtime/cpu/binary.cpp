// Binary pointwise ops on the CPU. Each kernel builds a TensorIter and, unless
// the operands are meta tensors, runs its loop; the same functions are
// registered for the CPU and Meta keys, so shape and dtype rules are shared.

#include <cmath>
#include <type_traits>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/core/type_promotion.h"
#include "runtime/core/wrapping.h"
#include "runtime/cpu/loops.h"

namespace kiln::cpu {
namespace {

// out = op(self, other) in one of the three forms; returns the result tensor.
// `compute`: how the inputs' dtypes promote; `out_dtype`: a fixed output dtype
// (bool for comparisons).
template <class Body>
Tensor binary(const char* op, Form form, const Tensor& self, const Tensor& other,
              const Tensor* out_arg, ComputeType compute, std::optional<DType> out_dtype,
              Body body) {
  Tensor out;
  TensorIter it(op);
  if (form == Form::Functional) {
    it.output(out);
  } else {
    it.output_into(form == Form::InPlace ? self : *out_arg);
  }
  it.input(self).input(other).compute(compute);
  if (out_dtype) it.output_dtype(*out_dtype);
  if (form == Form::InPlace) it.in_place();
  it.build();
  if (!it.is_meta()) body(it);
  if (form == Form::Functional) return out;
  return form == Form::InPlace ? self : *out_arg;
}

// --- add / sub -------------------------------------------------------------------

template <bool kSub>
Tensor add_sub(const char* op, Form form, const Tensor& self, const Tensor& other,
               const Scalar& alpha, const Tensor* out) {
  if (kSub) {
    KILN_CHECK(self.dtype() != kBool && other.dtype() != kBool, "[", op,
               "] subtraction of bool tensors is not supported; use logical_xor or bitwise_xor");
  }
  // The body below runs for data only; Meta (lazy recording) checks alpha here.
  if (!(alpha.is_integral() && alpha.to_int() == 1) && self.defined() && other.defined()) {
    check_alpha(op, result_type(self, other), alpha);
  }
  return binary(op, form, self, other, out, ComputeType::Common, std::nullopt, [&](TensorIter& it) {
    check_alpha(op, it.dtype(), alpha);
    visit_dtype(it.dtype(), kAllMask, op, [&]<class T>() {
      using M = opmath_t<T>;
      if constexpr (std::is_same_v<T, bool>) {
        bool a = alpha.to_bool();
        cpu_kernel<T>(it, [a](bool x, bool y) { return x || (a && y); });
      } else if constexpr (std::is_integral_v<M>) {
        // Integers wrap as PyTorch's do (Note [Integer wrap-around]).
        const M a = kSub ? wrap_neg(alpha.to<M>()) : alpha.to<M>();
        cpu_kernel<T>(it, [a](M x, M y) { return wrap_add(x, wrap_mul(a, y)); });
      } else {
        // As PyTorch's CPU kernel: alpha in T (0.3 is 0.30078125 in bfloat16).
        M a = round_to<T>(alpha.to<M>());
        if (kSub) a = -a;
        if (a == M(1)) {
          cpu_kernel<T>(it, [](M x, M y) { return x + y; });
        } else if constexpr (!std::is_same_v<T, M>) {
          // As PyTorch's scalar loop: alpha * y is rounded to the 16-bit type
          // before the add (Note [16-bit floats in pointwise kernels]).
          cpu_kernel<T>(it, [a](M x, M y) { return x + static_cast<M>(T(a * y)); });
        } else {
          cpu_kernel<T>(it, [a](M x, M y) { return x + a * y; });
        }
      }
    });
  });
}

Tensor add(const Tensor& s, const Tensor& o, const Scalar& a) {
  return add_sub<false>("add", Form::Functional, s, o, a, nullptr);
}
Tensor add_(const Tensor& s, const Tensor& o, const Scalar& a) {
  return add_sub<false>("add_", Form::InPlace, s, o, a, nullptr);
}
Tensor add_out(const Tensor& s, const Tensor& o, const Scalar& a, const Tensor& out) {
  return add_sub<false>("add.out", Form::Out, s, o, a, &out);
}
Tensor sub(const Tensor& s, const Tensor& o, const Scalar& a) {
  return add_sub<true>("sub", Form::Functional, s, o, a, nullptr);
}
Tensor sub_(const Tensor& s, const Tensor& o, const Scalar& a) {
  return add_sub<true>("sub_", Form::InPlace, s, o, a, nullptr);
}
Tensor sub_out(const Tensor& s, const Tensor& o, const Scalar& a, const Tensor& out) {
  return add_sub<true>("sub.out", Form::Out, s, o, a, &out);
}

// --- mul / div -------------------------------------------------------------------

Tensor mul_impl(const char* op, Form form, const Tensor& s, const Tensor& o, const Tensor* out) {
  return binary(op, form, s, o, out, ComputeType::Common, std::nullopt, [&](TensorIter& it) {
    visit_dtype(it.dtype(), kAllMask, op, [&]<class T>() {
      using M = opmath_t<T>;
      if constexpr (std::is_same_v<T, bool>) {
        cpu_kernel<T>(it, [](bool x, bool y) { return x && y; });
      } else {
        cpu_kernel<T>(it, [](M x, M y) { return wrap_mul(x, y); });
      }
    });
  });
}
Tensor mul(const Tensor& s, const Tensor& o) {
  return mul_impl("mul", Form::Functional, s, o, nullptr);
}
Tensor mul_(const Tensor& s, const Tensor& o) {
  return mul_impl("mul_", Form::InPlace, s, o, nullptr);
}
Tensor mul_out(const Tensor& s, const Tensor& o, const Tensor& out) {
  return mul_impl("mul.out", Form::Out, s, o, &out);
}

// True division: integers promote to the default float dtype.
Tensor div_impl(const char* op, Form form, const Tensor& s, const Tensor& o, const Tensor* out) {
  return binary(op, form, s, o, out, ComputeType::Floating, std::nullopt, [&](TensorIter& it) {
    visit_dtype(it.dtype(), kFloatingMask, op, [&]<class T>() {
      using M = opmath_t<T>;
      cpu_kernel<T>(it, [](M x, M y) { return x / y; });
    });
  });
}
Tensor div(const Tensor& s, const Tensor& o) {
  return div_impl("div", Form::Functional, s, o, nullptr);
}
Tensor div_(const Tensor& s, const Tensor& o) {
  return div_impl("div_", Form::InPlace, s, o, nullptr);
}
Tensor div_out(const Tensor& s, const Tensor& o, const Tensor& out) {
  return div_impl("div.out", Form::Out, s, o, &out);
}

// --- comparisons ---------------------------------------------------------------

template <class Cmp>
Tensor compare(const char* op, Form form, const Tensor& s, const Tensor& o, const Tensor* out,
               Cmp cmp) {
  // The result is bool; in place and out= cast it to the target's dtype.
  return binary(op, form, s, o, out, ComputeType::Common, kBool, [&](TensorIter& it) {
    visit_dtype(it.dtype(), kAllMask, op, [&]<class T>() {
      using M = opmath_t<T>;
      cpu_kernel<T, bool>(it, [cmp](M x, M y) { return cmp(x, y); });
    });
  });
}

#define KILN_COMPARISON(name, expr)                                           \
  struct name##_cmp {                                                         \
    template <class M>                                                        \
    bool operator()(M x, M y) const {                                         \
      return expr;                                                            \
    }                                                                         \
  };                                                                          \
  Tensor name(const Tensor& s, const Tensor& o) {                             \
    return compare(#name, Form::Functional, s, o, nullptr, name##_cmp{});     \
  }                                                                           \
  Tensor name##_(const Tensor& s, const Tensor& o) {                          \
    return compare(#name "_", Form::InPlace, s, o, nullptr, name##_cmp{});    \
  }                                                                           \
  Tensor name##_out(const Tensor& s, const Tensor& o, const Tensor& out) {    \
    return compare(#name ".Tensor_out", Form::Out, s, o, &out, name##_cmp{}); \
  }
KILN_COMPARISON(eq, x == y)
KILN_COMPARISON(ne, x != y)
KILN_COMPARISON(lt, x < y)
KILN_COMPARISON(le, x <= y)
KILN_COMPARISON(gt, x > y)
KILN_COMPARISON(ge, x >= y)
#undef KILN_COMPARISON

// --- Scalar overloads: the Tensor op with the number wrapped, as PyTorch does --------

Tensor add_scalar(const Tensor& s, const Scalar& o, const Scalar& a) {
  return kiln::add(s, wrap_scalar(o), a);
}
Tensor add_scalar_(const Tensor& s, const Scalar& o, const Scalar& a) {
  Tensor self = s;
  kiln::add_(self, wrap_scalar(o), a);
  return s;
}
Tensor sub_scalar(const Tensor& s, const Scalar& o, const Scalar& a) {
  return kiln::sub(s, wrap_scalar(o), a);
}
Tensor sub_scalar_(const Tensor& s, const Scalar& o, const Scalar& a) {
  Tensor self = s;
  kiln::sub_(self, wrap_scalar(o), a);
  return s;
}

#define KILN_SCALAR_OVERLOADS(name)                         \
  Tensor name##_scalar(const Tensor& s, const Scalar& o) {  \
    return kiln::name(s, wrap_scalar(o));                   \
  }                                                         \
  Tensor name##_scalar_(const Tensor& s, const Scalar& o) { \
    Tensor self = s;                                        \
    kiln::name##_(self, wrap_scalar(o));                    \
    return s;                                               \
  }
KILN_SCALAR_OVERLOADS(mul)
KILN_SCALAR_OVERLOADS(eq)
KILN_SCALAR_OVERLOADS(ne)
KILN_SCALAR_OVERLOADS(lt)
KILN_SCALAR_OVERLOADS(le)
KILN_SCALAR_OVERLOADS(gt)
KILN_SCALAR_OVERLOADS(ge)
#undef KILN_SCALAR_OVERLOADS
Tensor div_scalar(const Tensor& s, const Scalar& o) {
  return kiln::div(s, wrap_scalar(o));
}
Tensor div_scalar_(const Tensor& s, const Scalar& o) {
  Tensor self = s;
  kiln::div_(self, wrap_scalar(o));
  return s;
}

void register_kernels(Library& m) {
  m.impl("add.Tensor", &add);
  m.impl("add_.Tensor", &add_);
  m.impl("add.out", &add_out);
  m.impl("sub.Tensor", &sub);
  m.impl("sub_.Tensor", &sub_);
  m.impl("sub.out", &sub_out);
  m.impl("mul.Tensor", &mul);
  m.impl("mul_.Tensor", &mul_);
  m.impl("mul.out", &mul_out);
  m.impl("div.Tensor", &div);
  m.impl("div_.Tensor", &div_);
  m.impl("div.out", &div_out);
#define KILN_REGISTER_COMPARISON(name) \
  m.impl(#name ".Tensor", &name);      \
  m.impl(#name "_.Tensor", &name##_);  \
  m.impl(#name ".Tensor_out", &name##_out);
  KILN_REGISTER_COMPARISON(eq)
  KILN_REGISTER_COMPARISON(ne)
  KILN_REGISTER_COMPARISON(lt)
  KILN_REGISTER_COMPARISON(le)
  KILN_REGISTER_COMPARISON(gt)
  KILN_REGISTER_COMPARISON(ge)
#undef KILN_REGISTER_COMPARISON
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("add.Scalar", &add_scalar);
  m.impl("add_.Scalar", &add_scalar_);
  m.impl("sub.Scalar", &sub_scalar);
  m.impl("sub_.Scalar", &sub_scalar_);
  m.impl("div.Scalar", &div_scalar);
  m.impl("div_.Scalar", &div_scalar_);
#define KILN_REGISTER_SCALAR(name)         \
  m.impl(#name ".Scalar", &name##_scalar); \
  m.impl(#name "_.Scalar", &name##_scalar_);
  KILN_REGISTER_SCALAR(mul)
  KILN_REGISTER_SCALAR(eq)
  KILN_REGISTER_SCALAR(ne)
  KILN_REGISTER_SCALAR(lt)
  KILN_REGISTER_SCALAR(le)
  KILN_REGISTER_SCALAR(gt)
  KILN_REGISTER_SCALAR(ge)
#undef KILN_REGISTER_SCALAR
}

// Note [Scalar forms] (loops.h).
Tensor scalar_form(const char* op, uint32_t allowed, const Tensor& self, const Scalar& other,
                   bool in_place, Tensor (*tensor_op)(const Tensor&, const Tensor&)) {
  check_defined(self, op, "self");
  const Tensor number = wrap_scalar(other);
  const DType t = in_place ? self.dtype() : result_type(self, number);
  if (!(allowed & dtype_bit(t))) fail_dtype(t, allowed, op);
  return tensor_op(self, number);
}

}  // namespace kiln::cpu
