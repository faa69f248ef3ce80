// sort, argsort and topk on the CPU and Meta.
//
// Note [Sort order]
// NaN sorts above every number (last ascending, first descending; topk's
// largest), as in PyTorch. Equal keys are ordered by index, so the order is
// total: sort is stable whether or not `stable` is asked for (an unstable
// sort may return any order of ties; the stable one is among them), and topk
// returns the same elements as a stable sort's first k, always sorted (PyTorch
// leaves the order unspecified when sorted=False).

#include <algorithm>
#include <vector>

#include "kiln/dispatch.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/core/preserved_layout.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/reduce.h"
#include "runtime/cpu/reduce_lines.h"
#include "runtime/cpu/reduce_math.h"

namespace kiln::cpu {
namespace {

template <class T>
using key_t = std::conditional_t<kIsReducedFloat<T>, float, T>;

template <class K>
struct Entry {
  K key;
  int64_t index;
};

// Strict "a before b" for Note [Sort order].
template <class K, bool kDescending>
struct Before {
  bool operator()(const Entry<K>& a, const Entry<K>& b) const {
    bool an = is_nan(a.key), bn = is_nan(b.key);
    if (an != bn) return kDescending ? an : bn;
    if (!an && a.key != b.key) return kDescending ? b.key < a.key : a.key < b.key;
    return a.index < b.index;
  }
};

// Sorts each line along `dim` of `self` into its first `k` places of `values`
// and `indices` (k = the line length for sort).
template <class T, bool kDescending>
void sort_lines(const Tensor& self, const Tensor& values, const Tensor& indices, int64_t dim,
                int64_t k) {
  using K = key_t<T>;
  const int64_t len = self.dim() == 0 ? 1 : self.size(dim);
  DimLines lines(values.sizes(), dim, {values, indices, self});
  const char* src = static_cast<const char*>(self.data_ptr());
  char* vdst = static_cast<char*>(values.data_ptr());
  char* idst = static_cast<char*>(indices.data_ptr());
  const int64_t vs = lines.line_stride(0), is = lines.line_stride(1);
  const int64_t ss = self.dim() == 0 ? 0 : self.stride(dim) * static_cast<int64_t>(sizeof(T));
  const int64_t grain = std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(len, 1));
  parallel_range(
      lines.num_lines(),
      [&](int64_t b, int64_t e) {
        std::vector<Entry<K>> buf(static_cast<size_t>(len));
        lines.for_lines(b, e, [&](const int64_t* off) {
          const char* x = src + off[2];
          for (int64_t i = 0; i < len; ++i) {
            buf[i] = {static_cast<K>(*reinterpret_cast<const T*>(x + i * ss)), i};
          }
          Before<K, kDescending> before;
          if (k < len) {
            std::partial_sort(buf.begin(), buf.begin() + k, buf.end(), before);
          } else {
            std::sort(buf.begin(), buf.end(), before);
          }
          for (int64_t i = 0; i < k; ++i) {
            // Values are copied from the input, so NaN payloads and -0.0 survive.
            *reinterpret_cast<T*>(vdst + off[0] + i * vs) =
                *reinterpret_cast<const T*>(x + buf[i].index * ss);
            *reinterpret_cast<int64_t*>(idst + off[1] + i * is) = buf[i].index;
          }
        });
      },
      grain);
}

void run_sort(const char* op, const Tensor& self, const Tensor& values, const Tensor& indices,
              int64_t dim, int64_t k, bool descending, uint32_t allowed) {
  if (values.numel() == 0) return;
  visit_dtype(self.dtype(), allowed, op, [&]<class T>() {
    if (descending) {
      sort_lines<T, true>(self, values, indices, dim, k);
    } else {
      sort_lines<T, false>(self, values, indices, dim, k);
    }
  });
}

std::tuple<Tensor, Tensor> sort_impl(const char* op, const Tensor& self, int64_t dim,
                                     bool descending) {
  check_cpu_or_meta(self, op, "self");
  const int64_t d = wrap_dim(dim, self.dim(), op);
  // Both laid out as self (Note [Preserved layout]), as PyTorch's sort; topk's
  // come out row-major, as PyTorch's do.
  Tensor values = empty_like_preserve(self, self.dtype(), self.device(), op);
  Tensor indices = empty_like_preserve(self, kInt64, self.device(), op);
  if (!self.is_meta())
    run_sort(op, self, values, indices, d, self.dim() == 0 ? 1 : self.size(d), descending,
             kAllMask);
  return {values, indices};
}

std::tuple<Tensor, Tensor> sort(const Tensor& self, int64_t dim, bool descending) {
  return sort_impl("sort", self, dim, descending);
}
std::tuple<Tensor, Tensor> sort_stable(const Tensor& self, std::optional<bool> stable, int64_t dim,
                                       bool descending) {
  // PyTorch 1.13 asserts that `stable` is given; kiln's sort is stable either way.
  KILN_CHECK(stable.has_value(), "[sort.stable] expected 'stable' to be True or False, got None");
  return sort_impl("sort.stable", self, dim, descending);
}
Tensor argsort(const Tensor& self, int64_t dim, bool descending) {
  return std::get<1>(sort_impl("argsort", self, dim, descending));
}

// PyTorch 1.13 has no cpu topk for bool and float16.
constexpr uint32_t kTopkMask =
    kAllMask & ~(1u << static_cast<int>(kBool)) & ~(1u << static_cast<int>(kFloat16));

std::tuple<Tensor, Tensor> topk(const Tensor& self, int64_t k, int64_t dim, bool largest,
                                bool sorted) {
  const char* op = "topk";
  check_cpu_or_meta(self, op, "self");
  const int64_t d = wrap_dim(dim, self.dim(), op);
  const int64_t len = self.dim() == 0 ? 1 : self.size(d);
  KILN_CHECK(k >= 0 && k <= len, "[", op, "] expected k in [0, ", len, "], got ", k);
  // A 0-dim input is returned without a kernel, so any dtype passes.
  // Only float16 is a CPU-only gap (Note [Meta twins]); bool has no topk anywhere.
  KILN_CHECK(self.dim() == 0 || (dtype_bit(self.dtype()) & kTopkMask) ||
                 (self.dtype() == kFloat16 && !cpu_kernel_for(self)),
             "[", op, "] not implemented for ", self.dtype(), " on cpu (as PyTorch 1.13)");
  DimVector shape(self.sizes());
  // A 0-dim input comes back whole (with index 0) whatever k, as in PyTorch.
  if (self.dim() > 0) shape[d] = k;
  Tensor values = empty_tensor(shape, self.dtype(), self.device());
  Tensor indices = empty_tensor(shape, kInt64, self.device());
  if (!self.is_meta()) {
    run_sort(op, self, values, indices, d, self.dim() == 0 ? 1 : k, largest, kAllMask);
  }
  return {values, indices};
}

void register_kernels(Library& m) {
  m.impl("sort", &sort);
  m.impl("sort.stable", &sort_stable);
  m.impl("argsort", &argsort);
  m.impl("topk", &topk);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
