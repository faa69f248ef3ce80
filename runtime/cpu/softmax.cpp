// softmax and log_softmax along one dim. Numerically stable: the row's
// maximum is subtracted before exp, so no finite input overflows. float16 and
// bfloat16 compute in float32 and round once; sums accumulate in double.
// A row holding NaN or +inf, or only -inf, gives NaN as PyTorch does.

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/dispatch.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

// Rows of `n` contiguous elements: the common case (softmax over the last dim).
template <class T, bool kLog>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t n) {
  using M = opmath_t<T>;
  parallel_range(
      rows,
      [&](int64_t begin, int64_t end) {
        std::vector<M> e(static_cast<size_t>(n));
        for (int64_t r = begin; r < end; ++r) {
          const T* xr = x + r * n;
          T* yr = y + r * n;
          M mx = -std::numeric_limits<M>::infinity();
          for (int64_t j = 0; j < n; ++j) mx = std::max(mx, static_cast<M>(xr[j]));
          double sum = 0;
          for (int64_t j = 0; j < n; ++j) {
            M d = static_cast<M>(xr[j]) - mx;
            e[j] = kLog ? d : std::exp(d);
            sum += kLog ? static_cast<double>(std::exp(d)) : static_cast<double>(e[j]);
          }
          if constexpr (kLog) {
            M ls = static_cast<M>(std::log(sum));
            for (int64_t j = 0; j < n; ++j) yr[j] = static_cast<T>(e[j] - ls);
          } else {
            M inv = static_cast<M>(1.0 / sum);
            for (int64_t j = 0; j < n; ++j) yr[j] = static_cast<T>(e[j] * inv);
          }
        }
      },
      std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(n, 1)));
}

// [outer, n, inner] with inner > 1: each (outer, inner) pair is a row of
// stride `inner`; a block of inner positions is handled at once so the loops
// read memory in order.
template <class T, bool kLog>
void softmax_strided(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  using M = opmath_t<T>;
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  parallel_range(
      outer * blocks,
      [&](int64_t begin, int64_t end) {
        std::vector<M> mx(kBlock);
        std::vector<double> sum(kBlock);
        for (int64_t task = begin; task < end; ++task) {
          const int64_t o = task / blocks, i0 = (task % blocks) * kBlock;
          const int64_t w = std::min(kBlock, inner - i0);
          const T* xo = x + o * n * inner + i0;
          T* yo = y + o * n * inner + i0;
          std::fill(mx.begin(), mx.end(), -std::numeric_limits<M>::infinity());
          std::fill(sum.begin(), sum.end(), 0.0);
          for (int64_t j = 0; j < n; ++j) {
            for (int64_t i = 0; i < w; ++i)
              mx[i] = std::max(mx[i], static_cast<M>(xo[j * inner + i]));
          }
          for (int64_t j = 0; j < n; ++j) {
            for (int64_t i = 0; i < w; ++i)
              sum[i] += std::exp(static_cast<M>(xo[j * inner + i]) - mx[i]);
          }
          for (int64_t j = 0; j < n; ++j) {
            for (int64_t i = 0; i < w; ++i) {
              M d = static_cast<M>(xo[j * inner + i]) - mx[i];
              M r = kLog ? d - static_cast<M>(std::log(sum[i]))
                         : static_cast<M>(std::exp(d) * (1.0 / sum[i]));
              yo[j * inner + i] = static_cast<T>(r);
            }
          }
        }
      },
      std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(n * std::min(inner, kBlock), 1)));
}

template <bool kLog>
Tensor softmax_impl(const char* op, const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  check_defined(self, op, "self");
  const DType t = dtype.value_or(self.dtype());
  KILN_CHECK(is_floating(t), "[", op, "] expected a floating dtype, got ", t,
             dtype ? " (from dtype=)" : "", "; pass dtype= to convert an integral input");
  const int64_t d = wrap_dim(dim, self.dim(), op);
  if (!self.is_meta()) check_cpu(self, op, "self");
  Tensor out = empty_tensor(self.sizes(), t, self.device());
  if (self.is_meta() || out.numel() == 0) return out;
  Tensor x = cast(self, t).contiguous();
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t i = 0; i < self.dim(); ++i) {
    (i < d ? outer : i == d ? n : inner) *= self.size(i);
  }
  visit_allowed<kFloatingMask>(t, op, [&]<class T>() {
    const T* xp = x.data_ptr<T>();
    T* yp = out.data_ptr<T>();
    if (inner == 1) {
      softmax_rows<T, kLog>(xp, yp, outer, n);
    } else {
      softmax_strided<T, kLog>(xp, yp, outer, n, inner);
    }
  });
  return out;
}

Tensor softmax(const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  return softmax_impl<false>("softmax", self, dim, dtype);
}
Tensor log_softmax(const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  return softmax_impl<true>("log_softmax", self, dim, dtype);
}

void register_kernels(Library& m) {
  m.impl("softmax.int", &softmax);
  m.impl("log_softmax.int", &log_softmax);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
