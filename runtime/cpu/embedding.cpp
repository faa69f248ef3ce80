// embedding: rows of a 2-D weight gathered by integer indices. The result has
// the indices' shape plus the embedding dim. Forward only: padding_idx,
// scale_grad_by_freq and sparse matter for gradients, which kiln does not take.

#include <cstring>

#include "kiln/dispatch.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

// "[1, 2]": the multi-index of flat position `flat` in `shape`.
std::string position(int64_t flat, IntArrayRef shape) {
  DimVector idx(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return detail::str(idx.ref());
}

template <class I>
void check_indices(const I* idx, int64_t n, int64_t rows, IntArrayRef shape) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = static_cast<int64_t>(idx[i]);
    KILN_CHECK(v >= 0 && v < rows, "[embedding] index ", v, " at position ", position(i, shape),
               " is out of range for a weight of ", rows, " rows");
  }
}

template <class I>
void gather_rows(const I* idx, int64_t n, const Tensor& weight, char* out) {
  const int64_t dim = weight.size(1);
  const int64_t item = static_cast<int64_t>(weight.element_size());
  const int64_t rs = weight.stride(0) * item, cs = weight.stride(1) * item;
  const char* base = static_cast<const char*>(weight.data_ptr());
  parallel_range(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const char* src = base + static_cast<int64_t>(idx[i]) * rs;
          char* dst = out + i * dim * item;
          if (cs == item) {
            std::memcpy(dst, src, static_cast<size_t>(dim * item));
          } else {
            for (int64_t j = 0; j < dim; ++j) {
              std::memcpy(dst + j * item, src + j * cs, static_cast<size_t>(item));
            }
          }
        }
      },
      std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(dim, 1)));
}

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx,
                 bool scale_grad_by_freq, bool sparse) {
  const char* op = "embedding";
  check_defined(weight, op, "weight");
  check_defined(indices, op, "indices");
  KILN_CHECK(weight.dim() == 2, "[embedding] expected a 2-D weight, got shape ", weight.sizes());
  KILN_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32,
             "[embedding] expected indices of dtype int64 or int32, got ", indices.dtype());
  DimVector shape(indices.sizes());
  shape.push_back(weight.size(1));
  const bool meta = weight.is_meta() || indices.is_meta();
  if (!meta) {
    check_cpu(weight, op, "weight");
    check_cpu(indices, op, "indices");
  }
  Tensor out = empty_tensor(shape, weight.dtype(), meta ? Device::meta() : Device::cpu());
  if (meta || indices.numel() == 0) return out;
  Tensor idx = indices.contiguous();
  const int64_t n = idx.numel();
  // Indices are checked even when the rows are empty (a weight of shape [rows, 0]).
  char* dst = static_cast<char*>(out.data_ptr());
  if (idx.dtype() == kInt64) {
    check_indices(idx.data_ptr<int64_t>(), n, weight.size(0), indices.sizes());
    if (out.numel() > 0) gather_rows(idx.data_ptr<int64_t>(), n, weight, dst);
  } else {
    check_indices(idx.data_ptr<int32_t>(), n, weight.size(0), indices.sizes());
    if (out.numel() > 0) gather_rows(idx.data_ptr<int32_t>(), n, weight, dst);
  }
  return out;
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("embedding", &embedding);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("embedding", &embedding);
}

}  // namespace kiln::cpu
