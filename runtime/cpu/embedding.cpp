// embedding: rows of a 2-D weight gathered by integer indices. The result has
// the indices' shape plus the embedding dim. Forward only: padding_idx,
// scale_grad_by_freq and sparse matter for gradients, which kiln does not take.
// embedding_renorm_: what embedding's max_norm does first (Note [Embedding
// max_norm]).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/dispatch.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/index_utils.h"
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
  // -1 is the schema's "none" (ATen's too), whatever the weight's rows.
  const int64_t rows = weight.size(0);
  KILN_CHECK(padding_idx == -1 || (padding_idx >= -rows && padding_idx < rows),
             "[embedding] expected padding_idx within num_embeddings, in [", -rows, ", ", rows,
             "), got ", padding_idx);
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

// Note [Embedding max_norm]
// torch.nn.functional.embedding(max_norm=m) first rescales, in the weight
// itself, every row the indices name (each once) whose norm_type-norm exceeds
// m: row *= m / (norm + 1e-7), as PyTorch's embedding_renorm_ does. The norm
// accumulates in double (0: count of nonzeros, inf / -inf: largest / smallest
// magnitude, else (sum |x|^p)^(1/p)); the product is computed in float
// (double for float64) and rounded once. Rows are disjoint, so the CUDA
// kernel handles one row per block, the first block to claim a row doing it.
// Indices must lie in [0, rows), as embedding's do.

template <class T>
void renorm_rows(const Tensor& self, const std::vector<int64_t>& rows, double max_norm, double p) {
  using M = opmath_t<T>;
  const int64_t cols = self.size(1), rs = self.stride(0), cs = self.stride(1);
  T* base = static_cast<T*>(self.data_ptr());
  parallel_range(
      static_cast<int64_t>(rows.size()),
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          T* row = base + rows[r] * rs;
          double acc = std::isinf(p) && p < 0 ? std::numeric_limits<double>::infinity() : 0.0;
          for (int64_t j = 0; j < cols; ++j) {
            const double a = std::abs(static_cast<double>(static_cast<M>(row[j * cs])));
            if (p == 0) {
              acc += a != 0 ? 1.0 : 0.0;
            } else if (std::isinf(p)) {
              acc = p > 0 ? std::max(acc, a) : std::min(acc, a);
            } else if (p == 1) {
              acc += a;
            } else if (p == 2) {
              acc += a * a;
            } else {
              acc += std::pow(a, p);
            }
          }
          double norm = acc;
          if (p == 2) {
            norm = std::sqrt(acc);
          } else if (p != 0 && p != 1 && !std::isinf(p)) {
            norm = std::pow(acc, 1.0 / p);
          }
          if (!(norm > max_norm)) continue;
          const M scale = static_cast<M>(max_norm / (norm + 1e-7));
          for (int64_t j = 0; j < cols; ++j) {
            row[j * cs] = static_cast<T>(static_cast<M>(row[j * cs]) * scale);
          }
        }
      },
      std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(cols, 1)));
}

Tensor embedding_renorm_(const Tensor& self, const Tensor& indices, double max_norm,
                         double norm_type) {
  const char* op = "embedding_renorm_";
  check_defined(self, op, "self");
  check_defined(indices, op, "indices");
  KILN_CHECK(self.dim() == 2, "[embedding_renorm_] expected a 2-D weight, got shape ",
             self.sizes());
  KILN_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32,
             "[embedding_renorm_] expected indices of dtype int64 or int32, got ", indices.dtype());
  KILN_CHECK(is_floating(self.dtype()), "[embedding_renorm_] expected a floating weight, got ",
             self.dtype());
  // An expanded weight is renormed as PyTorch 1.13 does it (no error: the
  // oracle has such a case); indices sharing its memory are refused.
  check_no_overlap(self, indices, op);
  if (self.is_meta() || indices.is_meta()) return self;
  check_cpu(self, op, "self");
  check_cpu(indices, op, "indices");
  if (indices.numel() == 0) return self;
  const Tensor idx = indices.contiguous().to(kInt64);
  const int64_t* p = idx.data_ptr<int64_t>();
  std::vector<int64_t> rows(p, p + idx.numel());
  for (size_t i = 0; i < rows.size(); ++i) {
    KILN_CHECK(rows[i] >= 0 && rows[i] < self.size(0), "[embedding_renorm_] index ", rows[i],
               " at position ", position(static_cast<int64_t>(i), indices.sizes()),
               " is out of range for a weight of ", self.size(0), " rows");
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  visit_dtype(self.dtype(), kFloatingMask, op,
              [&]<class T>() { renorm_rows<T>(self, rows, max_norm, norm_type); });
  self.impl()->bump_version();
  return self;
}

void register_kernels(Library& m) {
  m.impl("embedding", &embedding);
  m.impl("embedding_renorm_", &embedding_renorm_);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
