#include "runtime/core/preserved_layout.h"

#include <utility>

#include "runtime/core/tensor_utils.h"

namespace kiln {

DimVector infer_dense_strides(IntArrayRef sizes, IntArrayRef strides) {
  const size_t nd = sizes.size();
  if (nd <= 1) return DimVector(nd, 1);
  // Ties go as PyTorch's (and its TensorIterator's) insertion sort breaks them.
  const DimVector perm = dims_inner_first(static_cast<int64_t>(nd), [&](int64_t a, int64_t b) {
    if (strides[a] == 0 || strides[b] == 0) return 0;
    if (strides[a] != strides[b]) return strides[a] < strides[b] ? -1 : 1;
    return sizes[a] > sizes[b] ? 1 : 0;
  });
  DimVector out(nd);
  int64_t s = 1;
  for (int64_t d : perm) {
    out[d] = s;
    if (sizes[d] > 1) s *= sizes[d];
  }
  return out;
}

DimVector dims_inner_first(int64_t nd, const std::function<int(int64_t, int64_t)>& outside) {
  DimVector perm(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; ++i) perm[i] = nd - 1 - i;
  for (int64_t i = 1; i < nd; ++i) {
    int64_t cur = i;
    for (int64_t j = i - 1; j >= 0; --j) {
      const int c = outside(perm[j], perm[cur]);
      if (c > 0) {
        std::swap(perm[j], perm[cur]);
        cur = j;
      } else if (c < 0) {
        break;
      }
    }
  }
  return perm;
}

DimVector preserved_strides(const Tensor& self) {
  if (self.is_contiguous()) return contiguous_strides(self.sizes());
  if (non_overlapping_and_dense(self)) return DimVector(self.strides());
  return infer_dense_strides(self.sizes(), self.strides());
}

Tensor empty_like_preserve(const Tensor& self, DType dtype, Device device, const char* op) {
  if (self.is_contiguous()) return empty_tensor(self.sizes(), dtype, device, op);
  return empty_strided_tensor(self.sizes(), preserved_strides(self), dtype, device, op);
}

}  // namespace kiln
