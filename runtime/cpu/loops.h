#pragma once

// Inner loops for elementwise kernels over a built TensorIter:
//   cpu_kernel<T>(it, [](float x, float y) { return x + y; });
// The functor takes and returns opmath values (float for Half/BFloat16);
// inputs are read as T, the result is written as Out (default T). A run whose
// operands are all dense takes a plain indexed loop the compiler vectorizes.

#include <tuple>
#include <utility>

#include "runtime/core/dtype_dispatch.h"
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

template <class Out, class In, class F, size_t... I>
inline void elementwise_run(char** data, const int64_t* strides, int64_t n, F& f,
                            std::index_sequence<I...>) {
  constexpr int64_t kIn = sizeof(In);
  bool dense = strides[0] == static_cast<int64_t>(sizeof(Out)) && ((strides[I + 1] == kIn) && ...);
  if (dense) {
    Out* out = reinterpret_cast<Out*>(data[0]);
    const In* in[sizeof...(I) + 1] = {reinterpret_cast<const In*>(data[I + 1])...};
    for (int64_t i = 0; i < n; ++i) {
      out[i] = static_cast<Out>(f(static_cast<opmath_t<In>>(in[I][i])...));
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    *reinterpret_cast<Out*>(data[0] + i * strides[0]) =
        static_cast<Out>(f(load<In>(data[I + 1] + i * strides[I + 1])...));
  }
}

// All inputs of type In (the iterator cast them to its compute dtype).
template <class In, class Out = In, class F>
void cpu_kernel(TensorIter& it, F f) {
  constexpr size_t arity = FunctionTraits<F>::arity;
  it.for_each([&f](char** data, const int64_t* strides, int64_t n) {
    elementwise_run<Out, In>(data, strides, n, f, std::make_index_sequence<arity>());
  });
  it.finish();
}

}  // namespace kiln::cpu
