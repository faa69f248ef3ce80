// View ops: new sizes, strides and offset over the same storage. They never
// touch data, so one kernel serves every backend, meta tensors and lazy
// tensors alike (Composite: a view of a pending storage is just geometry over
// it, Note [Pending storage]); reshape and flatten copy only when strides
// cannot express the result, as PyTorch decides.

#include <algorithm>

#include "allocator/allocator.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/hooks.h"
#include "runtime/core/tensor_utils.h"

namespace kiln {
namespace {

using OptI = std::optional<int64_t>;

// Resolves one -1 and checks the element count: "[view] shape '[2, 5]' is
// invalid for input of size 6".
DimVector infer_size(IntArrayRef shape, int64_t numel, const char* op) {
  DimVector out(shape);
  int64_t known = 1, span = 1;  // span: the product of max(size, 1), checked
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      KILN_CHECK(infer < 0, "[", op, "] only one dimension can be inferred, got ", shape);
      infer = static_cast<int>(i);
    } else {
      KILN_CHECK(shape[i] >= 0, "[", op, "] invalid shape dimension ", shape[i], " in ", shape);
      KILN_CHECK(!__builtin_mul_overflow(span, std::max<int64_t>(shape[i], 1), &span), "[", op,
                 "] expected a size whose element count fits in int64, got ", shape);
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, "[", op, "] shape '", shape,
               "' is invalid for input of size ", numel);
    out[infer] = numel / known;
  } else {
    KILN_CHECK(known == numel, "[", op, "] shape '", shape, "' is invalid for input of size ",
               numel);
  }
  return out;
}

// Strides for viewing (old sizes, old strides) as `shape`, or nullopt when a
// new dim would span two non-mergeable chunks of the old layout.
std::optional<DimVector> view_strides(IntArrayRef old_sizes, IntArrayRef old_strides,
                                      IntArrayRef shape) {
  const int64_t nnew = static_cast<int64_t>(shape.size());
  DimVector strides(nnew);
  if (old_sizes.empty()) {
    for (auto& s : strides) s = 1;
    return strides;
  }
  int64_t numel = 1;
  for (int64_t s : old_sizes) numel *= s;
  if (numel == 0) {
    if (old_sizes == shape) return DimVector(old_strides);
    return contiguous_strides(shape);
  }
  int64_t view_d = nnew - 1;
  int64_t chunk_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[d];
    bool chunk_end =
        d == 0 || (old_sizes[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_stride);
    if (!chunk_end) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
      strides[view_d] = view_numel * chunk_stride;
      view_numel *= shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = old_strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

Tensor view_kernel(const Tensor& self, IntArrayRef size) {
  DimVector shape = infer_size(size, self.numel(), "view");
  auto strides = view_strides(self.sizes(), self.strides(), shape);
  KILN_CHECK(strides.has_value(),
             "[view] expected a size compatible with the input's size and stride, got ", shape,
             " for sizes ", self.sizes(), " and strides ", self.strides(),
             " (a dimension would span two non-contiguous chunks); use reshape instead");
  return make_view(self, shape, *strides, self.storage_offset());
}

Tensor reshape_kernel(const Tensor& self, IntArrayRef size) {
  DimVector shape = infer_size(size, self.numel(), "reshape");
  if (auto strides = view_strides(self.sizes(), self.strides(), shape)) {
    return make_view(self, shape, *strides, self.storage_offset());
  }
  // One copy into row-major memory: a clone would keep self's permuted
  // strides and need a second copy to become viewable (Note [View folding]).
  return self.contiguous().view(shape);
}

Tensor permute_kernel(const Tensor& self, IntArrayRef dims) {
  const int64_t nd = self.dim();
  KILN_CHECK(static_cast<int64_t>(dims.size()) == nd, "[permute] expected ", nd,
             " dims (one per input dim), got ", dims);
  DimVector sizes(nd), strides(nd);
  std::vector<bool> seen(static_cast<size_t>(nd), false);
  for (int64_t i = 0; i < nd; ++i) {
    int64_t d = wrap_dim(dims[i], nd, "permute");
    KILN_CHECK(!seen[static_cast<size_t>(d)],
               "[permute] expected a permutation of the dims, got repeated dim ", d, " in ", dims);
    seen[static_cast<size_t>(d)] = true;
    sizes[i] = self.sizes()[d];
    strides[i] = self.strides()[d];
  }
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor transpose_kernel(const Tensor& self, int64_t d0, int64_t d1) {
  const int64_t nd = self.dim();
  d0 = wrap_dim(d0, nd, "transpose");
  d1 = wrap_dim(d1, nd, "transpose");
  if (nd == 0) return make_view(self, {}, {}, self.storage_offset());
  DimVector sizes(self.sizes()), strides(self.strides());
  std::swap(sizes[d0], sizes[d1]);
  std::swap(strides[d0], strides[d1]);
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor t_kernel(const Tensor& self) {
  KILN_CHECK(self.dim() <= 2, "[t] expected a tensor with at most 2 dims, got ", self.dim(),
             " dims");
  return self.dim() < 2 ? make_view(self, self.sizes(), self.strides(), self.storage_offset())
                        : transpose_kernel(self, 0, 1);
}

Tensor slice_kernel(const Tensor& self, int64_t dim, OptI start, OptI end, int64_t step) {
  KILN_CHECK(self.dim() > 0, "[slice] expected a tensor with at least 1 dim, got a 0-dim tensor");
  dim = wrap_dim(dim, self.dim(), "slice");
  KILN_CHECK(step > 0, "[slice] expected a positive step, got ", step);
  const int64_t n = self.sizes()[dim];
  int64_t s = start.value_or(0), e = end.value_or(n);
  if (s < 0) s += n;
  if (e < 0) e += n;
  s = std::clamp<int64_t>(s, 0, n);
  e = std::clamp<int64_t>(e, s, n);
  DimVector sizes(self.sizes()), strides(self.strides());
  sizes[dim] = e == s ? 0 : (e - s - 1) / step + 1;  // no e - s + step: it may overflow
  // A stride times a step beyond the dim (one element left) may overflow; a
  // dim of size 1 takes any stride, so it keeps its own.
  int64_t stride;
  if (!__builtin_mul_overflow(strides[dim], step, &stride)) strides[dim] = stride;
  // s * stride stays inside the base's extent unless the slice is empty at the end.
  int64_t offset;
  if (__builtin_mul_overflow(s, self.strides()[dim], &offset) ||
      __builtin_add_overflow(offset, self.storage_offset(), &offset)) {
    offset = self.storage_offset();
  }
  return make_view(self, sizes, strides, offset);
}

Tensor narrow_kernel(const Tensor& self, int64_t dim, int64_t start, int64_t length) {
  KILN_CHECK(self.dim() > 0, "[narrow] expected a tensor with at least 1 dim, got a 0-dim tensor");
  dim = wrap_dim(dim, self.dim(), "narrow");
  const int64_t n = self.sizes()[dim];
  KILN_CHECK(start >= -n && start <= n, "[narrow] start out of range: expected a start in [", -n,
             ", ", n, "], got ", start);
  if (start < 0) start += n;
  KILN_CHECK(length >= 0, "[narrow] expected a length >= 0, got ", length);
  KILN_CHECK(length <= n - start, "[narrow] expected start (", start, ") + length (", length,
             ") to be at most the size of dim ", dim, " (", n, ")");
  return slice_kernel(self, dim, start, start + length, 1);
}

Tensor select_kernel(const Tensor& self, int64_t dim, int64_t index) {
  KILN_CHECK(self.dim() > 0, "[select] expected a tensor with at least 1 dim, got a 0-dim tensor");
  dim = wrap_dim(dim, self.dim(), "select");
  const int64_t n = self.sizes()[dim];
  KILN_CHECK(index >= -n && index < n, "[select] index ", index,
             " out of range for tensor of size ", self.sizes(), " at dimension ", dim);
  if (index < 0) index += n;
  DimVector sizes(self.sizes()), strides(self.strides());
  int64_t offset = self.storage_offset() + index * strides[dim];
  sizes.erase(dim);
  strides.erase(dim);
  return make_view(self, sizes, strides, offset);
}

Tensor expand_kernel(const Tensor& self, IntArrayRef size, bool implicit) {
  const int64_t nd = static_cast<int64_t>(size.size());
  KILN_CHECK(nd >= self.dim(), "[expand] the number of sizes provided (", nd,
             ") must be greater or equal to the number of dimensions in the tensor (", self.dim(),
             ")");
  DimVector sizes(nd), strides(nd);
  const int64_t off = nd - self.dim();
  for (int64_t i = nd - 1; i >= 0; --i) {
    int64_t target = size[i];
    if (i < off) {
      KILN_CHECK(target >= 0, "[expand] expected a non-negative size for the new leading dim ", i,
                 ", got ", target);
      sizes[i] = target;
      strides[i] = 0;
      continue;
    }
    int64_t cur = self.sizes()[i - off];
    if (target == -1) target = cur;
    if (cur == target) {
      sizes[i] = cur;
      strides[i] = self.strides()[i - off];
    } else {
      KILN_CHECK(cur == 1, "[expand] the expanded size of the tensor (", target,
                 ") must match the existing size (", cur, ") at non-singleton dimension ", i,
                 ". Target sizes: ", size, ". Tensor sizes: ", self.sizes());
      sizes[i] = target;
      strides[i] = 0;
    }
  }
  checked_numel(sizes, "expand");
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor squeeze_kernel(const Tensor& self) {
  DimVector sizes, strides;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (self.sizes()[d] != 1) {
      sizes.push_back(self.sizes()[d]);
      strides.push_back(self.strides()[d]);
    }
  }
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor squeeze_dim_kernel(const Tensor& self, int64_t dim) {
  dim = wrap_dim(dim, self.dim(), "squeeze");
  if (self.dim() == 0 || self.sizes()[dim] != 1) {
    return make_view(self, self.sizes(), self.strides(), self.storage_offset());
  }
  DimVector sizes(self.sizes()), strides(self.strides());
  sizes.erase(dim);
  strides.erase(dim);
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor unsqueeze_kernel(const Tensor& self, int64_t dim) {
  dim = wrap_dim(dim, self.dim() + 1, "unsqueeze");
  DimVector sizes(self.sizes()), strides(self.strides());
  // Any stride serves a size-1 dim: the product, as PyTorch, unless it overflows.
  int64_t st = 1;
  if (dim < self.dim() && __builtin_mul_overflow(sizes[dim], strides[dim], &st)) st = strides[dim];
  sizes.insert(dim, 1);
  strides.insert(dim, st);
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor flatten_kernel(const Tensor& self, int64_t start, int64_t end) {
  // Checked first, a 0-dim tensor too (its dims are -1 and 0), as PyTorch.
  start = wrap_dim(start, self.dim(), "flatten");
  end = wrap_dim(end, self.dim(), "flatten");
  if (self.dim() == 0) return reshape_kernel(self, {1});
  KILN_CHECK(start <= end, "[flatten] expected start_dim (", start, ") to come before end_dim (",
             end, ")");
  if (start == end) return make_view(self, self.sizes(), self.strides(), self.storage_offset());
  DimVector shape;
  for (int64_t d = 0; d < start; ++d) shape.push_back(self.sizes()[d]);
  int64_t n = 1;
  for (int64_t d = start; d <= end; ++d) n *= self.sizes()[d];
  shape.push_back(n);
  for (int64_t d = end + 1; d < self.dim(); ++d) shape.push_back(self.sizes()[d]);
  return reshape_kernel(self, shape);
}

Tensor unflatten_kernel(const Tensor& self, int64_t dim, IntArrayRef sizes) {
  KILN_CHECK(self.dim() > 0,
             "[unflatten] expected a tensor with at least 1 dim, got a 0-dim tensor");
  dim = wrap_dim(dim, self.dim(), "unflatten");
  KILN_CHECK(!sizes.empty(), "[unflatten] expected a non-empty list of sizes, got []");
  DimVector inner = infer_size(sizes, self.sizes()[dim], "unflatten");
  DimVector shape;
  for (int64_t d = 0; d < dim; ++d) shape.push_back(self.sizes()[d]);
  for (int64_t s : inner) shape.push_back(s);
  for (int64_t d = dim + 1; d < self.dim(); ++d) shape.push_back(self.sizes()[d]);
  return view_kernel(self, shape);
}

Tensor as_strided_kernel(const Tensor& self, IntArrayRef size, IntArrayRef stride, OptI offset) {
  KILN_CHECK(size.size() == stride.size(), "[as_strided] expected as many strides as sizes (",
             size.size(), "), got ", stride.size());
  int64_t off = offset.value_or(self.storage_offset());
  const int64_t extent = checked_extent(size, stride, off, self.dtype(), "as_strided");
  const auto& storage = self.impl()->storage();
  if (storage && extent > 0) {
    int64_t capacity = static_cast<int64_t>(storage->nbytes() / self.element_size());
    KILN_CHECK(extent <= capacity, "[as_strided] sizes ", size, ", strides ", stride,
               " and storage offset ", off, " need a storage of ", extent, " elements, got one of ",
               capacity);
  }
  if (offset && storage) {
    if (AbsoluteViewHook hook = absolute_view_hook()) hook(storage.get());
  }
  return make_view(self, size, stride, off);
}

Tensor diagonal_kernel(const Tensor& self, int64_t offset, int64_t d1, int64_t d2) {
  const int64_t nd = self.dim();
  KILN_CHECK(nd >= 2, "[diagonal] expected a tensor with at least 2 dims, got ", nd);
  d1 = wrap_dim(d1, nd, "diagonal");
  d2 = wrap_dim(d2, nd, "diagonal");
  KILN_CHECK(d1 != d2, "[diagonal] expected two different dims, got ", d1, " and ", d2);
  int64_t n1 = self.sizes()[d1], n2 = self.sizes()[d2];
  // Past either size the diagonal is empty; clamping keeps n - offset in range.
  offset = std::clamp<int64_t>(offset, -n1, n2);
  int64_t len, start = self.storage_offset();
  if (offset >= 0) {
    len = std::max<int64_t>(std::min(n1, n2 - offset), 0);
    if (len > 0) start += offset * self.strides()[d2];
  } else {
    len = std::max<int64_t>(std::min(n1 + offset, n2), 0);
    if (len > 0) start -= offset * self.strides()[d1];
  }
  DimVector sizes, strides;
  for (int64_t d = 0; d < nd; ++d) {
    if (d == d1 || d == d2) continue;
    sizes.push_back(self.sizes()[d]);
    strides.push_back(self.strides()[d]);
  }
  sizes.push_back(len);
  strides.push_back(self.strides()[d1] + self.strides()[d2]);
  return make_view(self, sizes, strides, start);
}

// unfold(dimension, size, step): every window of `size` elements along
// `dimension`, `step` apart, as a view: that dim counts the windows and a
// new last dim walks one window. A 0-dim tensor is one element (dimension
// 0 or -1, size 0 or 1), as in PyTorch.
Tensor unfold_kernel(const Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  const int64_t nd = self.dim();
  const int64_t d = wrap_dim(dimension, nd, "unfold");
  const int64_t n = nd == 0 ? 1 : self.sizes()[d];
  KILN_CHECK(size >= 0, "[unfold] expected a size >= 0, got ", size);
  KILN_CHECK(size <= n, "[unfold] expected a size of at most ", n, " (the size of dim ", d,
             "), got ", size);
  KILN_CHECK(step > 0, "[unfold] expected a step > 0, got ", step);
  DimVector sizes(self.sizes()), strides(self.strides());
  const int64_t along = nd == 0 ? 1 : strides[d];
  if (nd > 0) {
    sizes[d] = (n - size) / step + 1;
    // As PyTorch, stride * step; a product that overflows (a step far past
    // the dim: one window, which takes any stride) keeps the stride.
    int64_t stride;
    if (!__builtin_mul_overflow(along, step, &stride)) strides[d] = stride;
  }
  sizes.push_back(size);
  strides.push_back(along);
  return make_view(self, sizes, strides, self.storage_offset());
}

std::vector<Tensor> split_with_sizes_kernel(const Tensor& self, IntArrayRef split_sizes,
                                            int64_t dim) {
  KILN_CHECK(self.dim() > 0, "[split] expected a tensor with at least 1 dim, got a 0-dim tensor");
  dim = wrap_dim(dim, self.dim(), "split_with_sizes");
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    KILN_CHECK(s >= 0, "[split_with_sizes] expected non-negative split sizes, got ", split_sizes);
    total = checked_add(total, s, "split_with_sizes");
  }
  KILN_CHECK(total == self.sizes()[dim], "[split_with_sizes] expected split sizes that sum to ",
             self.sizes()[dim], " (the size of dim ", dim, "), got ", split_sizes);
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : split_sizes) {
    out.push_back(narrow_kernel(self, dim, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> split_kernel(const Tensor& self, int64_t split_size, int64_t dim) {
  KILN_CHECK(self.dim() > 0, "[split] expected a tensor with at least 1 dim, got a 0-dim tensor");
  dim = wrap_dim(dim, self.dim(), "split");
  const int64_t n = self.sizes()[dim];
  KILN_CHECK(split_size > 0 || (split_size == 0 && n == 0),
             "[split] expected a positive split_size, got ", split_size);
  std::vector<Tensor> out;
  if (n == 0) {
    out.push_back(narrow_kernel(self, dim, 0, 0));
    return out;
  }
  for (int64_t start = 0; start < n; start += split_size) {
    out.push_back(narrow_kernel(self, dim, start, std::min(split_size, n - start)));
  }
  return out;
}

// select() at every index of dim: views, as split with size 1 then squeeze.
std::vector<Tensor> unbind_kernel(const Tensor& self, int64_t dim) {
  KILN_CHECK(self.dim() > 0, "[unbind] expected a tensor with at least 1 dim, got a 0-dim tensor");
  dim = wrap_dim(dim, self.dim(), "unbind");
  const int64_t n = self.sizes()[dim];
  std::vector<Tensor> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(select_kernel(self, dim, i));
  return out;
}

std::vector<Tensor> chunk_kernel(const Tensor& self, int64_t chunks, int64_t dim) {
  KILN_CHECK(self.dim() > 0, "[chunk] expected a tensor with at least 1 dim, got a 0-dim tensor");
  KILN_CHECK(chunks > 0, "[chunk] expected a positive number of chunks, got ", chunks);
  dim = wrap_dim(dim, self.dim(), "chunk");
  const int64_t n = self.sizes()[dim];
  int64_t size = n == 0 ? 0 : (n - 1) / chunks + 1;
  if (size == 0 && n == 0) {
    // PyTorch returns `chunks` empty pieces of an empty dim. The list is
    // allocated first, so a count no memory holds fails at once (Note [Out of
    // memory in a kernel]) instead of after filling memory piece by piece.
    std::vector<Tensor> out;
    KILN_CHECK(static_cast<uint64_t>(chunks) <= out.max_size() &&
                   static_cast<uint64_t>(chunks) <= alloc::host_memory_bytes() / sizeof(Tensor),
               "[chunk] out of memory: expected a number of chunks whose list fits in this "
               "machine's memory, got ",
               chunks);
    out.reserve(static_cast<size_t>(chunks));
    for (int64_t i = 0; i < chunks; ++i) out.push_back(narrow_kernel(self, dim, 0, 0));
    return out;
  }
  return split_kernel(self, size, dim);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("view", &view_kernel);
  m.impl("reshape", &reshape_kernel);
  m.impl("permute", &permute_kernel);
  m.impl("transpose.int", &transpose_kernel);
  m.impl("t", &t_kernel);
  m.impl("narrow", &narrow_kernel);
  m.impl("slice.Tensor", &slice_kernel);
  m.impl("select.int", &select_kernel);
  m.impl("expand", &expand_kernel);
  m.impl("squeeze", &squeeze_kernel);
  m.impl("squeeze.dim", &squeeze_dim_kernel);
  m.impl("unsqueeze", &unsqueeze_kernel);
  m.impl("flatten.using_ints", &flatten_kernel);
  m.impl("unflatten.int", &unflatten_kernel);
  m.impl("as_strided", &as_strided_kernel);
  m.impl("diagonal", &diagonal_kernel);
  m.impl("unfold", &unfold_kernel);
  m.impl("split.Tensor", &split_kernel);
  m.impl("split_with_sizes", &split_with_sizes_kernel);
  m.impl("chunk", &chunk_kernel);
  m.impl("unbind.int", &unbind_kernel);
}

}  // namespace kiln
