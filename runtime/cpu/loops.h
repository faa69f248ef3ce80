#pragma once

// Inner loops for elementwise kernels over a built TensorIter:
//   cpu_kernel<T>(it, [](float x, float y) { return x + y; });
// The functor takes and returns opmath values (float for Half/BFloat16);
// inputs are read as T, the result is written as Out (default T). A run whose
// operands are all dense takes a plain indexed loop the compiler vectorizes;
// so does a run where some inputs are broadcast scalars (stride 0), which are
// first copied into a small dense block.
//
// Also here, shared by the pointwise kernel files: the three forms of an op
// (functional, in place, out=), rounding to the 16-bit float types and
// PyTorch's checked conversion of Scalar arguments.

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "runtime/core/dtype_dispatch.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {

template <class F>
struct FunctionTraits : FunctionTraits<decltype(&F::operator())> {};
template <class C, class R, class... A>
struct FunctionTraits<R (C::*)(A...) const> {
  static constexpr size_t arity = sizeof...(A);
};

template <class T>
inline opmath_t<T> load(const char* p) {
  return static_cast<opmath_t<T>>(*reinterpret_cast<const T*>(p));
}

constexpr uint32_t kBoolMask = 1u;
constexpr uint32_t kNoBoolMask = kAllMask & ~kBoolMask;
constexpr uint32_t kIntegralOrBoolMask = kIntegralMask | kBoolMask;

namespace detail {

template <class T>
inline constexpr bool kIsReduced = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Elements per block on the broadcast-scalar path.
constexpr int64_t kScalarBlock = 256;

template <class Out, class... In, class F, size_t... I>
inline void typed_run(char** data, const int64_t* strides, int64_t n, F& f,
                      std::index_sequence<I...>) {
  constexpr int64_t kOut = sizeof(Out);
  const bool out_dense = strides[0] == kOut;
  if (out_dense && ((strides[I + 1] == static_cast<int64_t>(sizeof(In))) && ...)) {
    Out* out = reinterpret_cast<Out*>(data[0]);
    std::tuple<const In*...> in{reinterpret_cast<const In*>(data[I + 1])...};
    for (int64_t i = 0; i < n; ++i) {
      out[i] = static_cast<Out>(f(static_cast<opmath_t<In>>(std::get<I>(in)[i])...));
    }
    return;
  }
  if constexpr (sizeof...(In) > 0) {
    if (out_dense && n >= 16 &&
        ((strides[I + 1] == static_cast<int64_t>(sizeof(In)) || strides[I + 1] == 0) && ...)) {
      // Broadcast inputs are copied into a dense block so the loop below stays
      // unit-stride (and vectorizable) in every operand.
      std::tuple<std::array<In, kScalarBlock>...> blocks;
      const bool scalar[] = {strides[I + 1] == 0 ...};
      ((scalar[I] ? std::get<I>(blocks).fill(*reinterpret_cast<const In*>(data[I + 1])) : void()),
       ...);
      Out* out = reinterpret_cast<Out*>(data[0]);
      for (int64_t b = 0; b < n; b += kScalarBlock) {
        const int64_t len = std::min(kScalarBlock, n - b);
        std::tuple<const In*...> in{scalar[I] ? std::get<I>(blocks).data()
                                              : reinterpret_cast<const In*>(data[I + 1]) + b...};
        Out* o = out + b;
        for (int64_t i = 0; i < len; ++i) {
          o[i] = static_cast<Out>(f(static_cast<opmath_t<In>>(std::get<I>(in)[i])...));
        }
      }
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    *reinterpret_cast<Out*>(data[0] + i * strides[0]) =
        static_cast<Out>(f(load<In>(data[I + 1] + i * strides[I + 1])...));
  }
}

template <class In, size_t>
using Repeat = In;

template <class Out, class In, class F, size_t... I>
void uniform_kernel(TensorIter& it, F& f, std::index_sequence<I...>) {
  it.for_each([&f](char** data, const int64_t* strides, int64_t n) {
    typed_run<Out, Repeat<In, I>...>(data, strides, n, f, std::index_sequence<I...>());
  });
}

}  // namespace detail

// All inputs of type In (the iterator cast them to its compute dtype).
template <class In, class Out = In, class F>
void cpu_kernel(TensorIter& it, F f) {
  constexpr size_t arity = FunctionTraits<F>::arity;
  detail::uniform_kernel<Out, In>(it, f, std::make_index_sequence<arity>());
  it.finish();
}

// Input k read as In_k (for inputs of their own dtype, see input_keep_dtype).
template <class Out, class... In, class F>
void cpu_kernel_typed(TensorIter& it, F f) {
  static_assert(FunctionTraits<F>::arity == sizeof...(In), "one functor argument per input");
  it.for_each([&f](char** data, const int64_t* strides, int64_t n) {
    detail::typed_run<Out, In...>(data, strides, n, f, std::index_sequence_for<In...>());
  });
  it.finish();
}

// --- Forms of an op ------------------------------------------------------------------

enum class Form { Functional, InPlace, Out };

// Runs one form of a pointwise op: `setup` adds the inputs (the first being
// `self`) and options to the iterator; the output is a new tensor
// (Functional), `self` (InPlace) or `*out` (Out). After build() the compute
// dtype must be in `allowed`; then `body` checks its arguments and runs the
// loops, which do nothing for meta operands, so Meta raises the same errors.
// Returns the tensor the op returns.
template <class Setup, class Body>
Tensor pointwise(const char* op, Form form, const Tensor& self, const Tensor* out, uint32_t allowed,
                 Setup&& setup, Body&& body) {
  Tensor result;
  TensorIter it(op);
  if (form == Form::Functional) {
    it.output(result);
  } else {
    it.output_into(form == Form::InPlace ? self : *out);
  }
  setup(it);
  if (form == Form::InPlace) it.in_place();
  it.build();
  if (KILN_UNLIKELY(!(allowed & dtype_bit(it.dtype())))) fail_dtype(it.dtype(), allowed, op);
  body(it);
  if (form == Form::Functional) return result;
  return form == Form::InPlace ? self : *out;
}

// --- 16-bit floats -----------------------------------------------------------------

// Note [16-bit floats in pointwise kernels]
// kiln's rounding policy for Half and BFloat16: load into float (opmath_t;
// reductions and norms accumulate in double, matmuls in float), compute, and
// round once, when the result is stored. The result is then the float32
// value rounded to the 16-bit grid: within a unit in the last place (ulp) of
// the exact value rounded, and usually equal to it. This holds for every
// eager kernel (pointwise, activations including silu and gelu's tanh form,
// reductions, softmax and log_softmax, the norms, the matmul family) and for
// the fused kernels of both code generators, whose every op rounds its result
// once (Note [Kernel IR]): eager and lazy results agree to one ulp, bit for
// bit but for float32 math that differs (the code generators' vector math),
// which tests/jit/codegen_cpu/activation_rounding_test.cpp bounds for silu
// and gelu. PyTorch 1.13 rounds intermediate steps in several of these
// (matmuls, log_softmax, silu, gelu's tanh form...) and is then off by up to
// 150 ulp from the exact value where kiln is not; the oracle compares such
// cases with the exact value rounded (tests/oracle/cases/, Note [16-bit
// tolerances] in tests/oracle/oracle_test.cpp).
// The exceptions round intermediate steps, because PyTorch defines the
// result that way on every path and kiln keeps it bit for bit: add and sub's
// alpha * other, round.decimals, trunc and floor division, BFloat16 pow by 3
// and -2 (the kernels call round_to<T> after the same steps), and the
// accumulations into a 16-bit tensor whose order is part of the result
// (scatter_add and the scatter reductions, Note [Scatter reductions]). The
// fused kernels compute the pointwise exceptions in float and round once (a
// one-ulp difference from eager), or leave them eager (16-bit floor division),
// but for add and sub, which the CPU's fused kernels round as eager does.
// Where PyTorch's vectorized and scalar loops disagree with each other
// (BFloat16 rsqrt and gelu's erf form), kiln follows the vectorized loop,
// which is what dense tensors get. BFloat16 add/sub with an alpha is the one
// exception: PyTorch converts alpha to BFloat16 on every path, then its
// scalar loop (strided operands, small tensors, every loop's tail) rounds
// alpha * other as Half does on every path, its vector loop only the sum; kiln
// keeps the rule most paths and Half share. torch 1.13's CPU kernels lack Half for most
// floating ops, a gap of that build rather than a rule (its CUDA kernels have
// them): kiln admits Half wherever it admits BFloat16 and computes it by the
// same rules; the oracle checks those cases against the float computation
// rounded the same way.

// `x` rounded to T and back: where PyTorch computes a step in Half or BFloat16
// arithmetic, kernels round its result the same way. Identity for other types.
template <class T>
inline opmath_t<T> round_to(opmath_t<T> x) {
  if constexpr (detail::kIsReduced<T>) {
    return static_cast<float>(T(x));
  } else {
    return x;
  }
}

// --- Scalar arguments ------------------------------------------------------------------

// The largest finite value of T, and the lowest.
template <class T>
inline double max_value() {
  if constexpr (std::is_same_v<T, Half>) {
    return 65504.0;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return 3.3895313892515355e38;
  } else {
    return static_cast<double>(std::numeric_limits<T>::max());
  }
}
template <class T>
inline double lowest_value() {
  if constexpr (detail::kIsReduced<T>) {
    return -max_value<T>();
  } else {
    return static_cast<double>(std::numeric_limits<T>::lowest());
  }
}

// `s` as the opmath type of T, refusing values T cannot hold as PyTorch's
// Scalar::to<T>() does, with the test every mode shares (scalar_overflows):
// integers out of range (negative integers may wrap into unsigned types;
// float16 is the one floating type narrower than int64), finite floats
// beyond T's range, NaN into integers. Bool never overflows. An op that
// converts a number to the type it computes in (lerp's weight: float32 for
// the 16-bit floats, as PyTorch's opmath) passes that type as T.
template <class T>
opmath_t<T> scalar_to(const Scalar& s, const char* op, const char* name) {
  using M = opmath_t<T>;
  if constexpr (std::is_same_v<T, bool>) {
    return s.to_bool();
  } else {
    KILN_CHECK(!scalar_overflows(s, dtype_of<T>), "[", op, "] expected '", name, "' to fit in ",
               dtype_of<T>, ", got ", s);
    if constexpr (std::is_integral_v<T>) {
      // Integers convert through int64 (wrapping into narrower types), floats truncate.
      return static_cast<M>(s.is_floating_point() ? static_cast<int64_t>(s.to_double())
                                                  : s.to_int());
    } else {
      return static_cast<M>(round_to<T>(static_cast<M>(s.to_double())));
    }
  }
}

// Note [Scalar forms]
// An op's Scalar overload (remainder.Scalar, bitwise_and.Scalar) is the
// Tensor op on the number wrapped (a 0-dim wrapped number), dispatched again
// as binary.cpp's add.Scalar is, so that lazy mode records the Tensor op and
// a compiled function traces it. These used to call the CPU kernel directly,
// which read the lazy operand's data at once: a graph break in every compiled
// function that took remainder(x, 3), and an eager run in every lazy trace.
// The result's dtype is checked first against the kernel's `allowed` dtypes,
// under the name the caller used (an error names remainder.Scalar).
Tensor scalar_form(const char* op, uint32_t allowed, const Tensor& self, const Scalar& other,
                   bool in_place, Tensor (*tensor_op)(const Tensor&, const Tensor&));

}  // namespace kiln::cpu
