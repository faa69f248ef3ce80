// index_select and index_copy: whole slices along one dim picked by a 1-D
// index. Both move slices with copy_strided, so any layout of self, source or
// out is read and written in place, without contiguous temporaries. One kernel
// per op serves CPU and Meta; meta tensors stop after the shape checks.

#include "kiln/dispatch.h"
#include "runtime/cpu/copy.h"
#include "runtime/cpu/index_utils.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

bool any_meta(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t && t->defined() && t->is_meta()) return true;
  }
  return false;
}

// Copies slice src_i of `src` into slice dst_i of `dst` along `dim`, for each
// pair; 0-dim tensors count as 1-element vectors. `distinct`: no two pairs
// write the same slice, so pairs may run in parallel.
void copy_slices(const Tensor& dst, const Tensor& src, int64_t dim,
                 const std::vector<int64_t>& dst_idx, const std::vector<int64_t>& src_idx,
                 bool distinct) {
  const DimVector dsz = nonempty_sizes(dst), dst_st = nonempty_strides(dst);
  const DimVector src_st = nonempty_strides(src);
  const DimVector slice = drop_dim(dsz, dim);
  const DimVector dst_slice_st = drop_dim(dst_st, dim), src_slice_st = drop_dim(src_st, dim);
  int64_t slice_numel = 1;
  for (int64_t s : slice) slice_numel *= s;
  if (slice_numel == 0 || dst_idx.empty()) return;
  const size_t elem = dst.element_size();
  char* dst_base = static_cast<char*>(dst.data_ptr());
  const char* src_base = static_cast<const char*>(src.data_ptr());
  const int64_t n = static_cast<int64_t>(dst_idx.size());
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      char* d = dst_base + dst_idx[j] * dst_st[dim] * static_cast<int64_t>(elem);
      const char* s = src_base + src_idx[j] * src_st[dim] * static_cast<int64_t>(elem);
      copy_strided(d, dst_slice_st, s, src_slice_st, slice, elem);
    }
  };
  // Many small slices (embedding rows) split across workers by index; large
  // slices are split inside copy_strided instead. Repeated destinations run in
  // order, so the last source slice wins, deterministically.
  if (distinct && slice_numel * 4 < kDefaultGrain) {
    parallel_range(n, body, std::max<int64_t>(1, kDefaultGrain / slice_numel));
  } else {
    body(0, n);
  }
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

// --- index_select ------------------------------------------------------------------

Tensor index_select_impl(const char* op, const Tensor& self, int64_t dim, const Tensor& index,
                         const Tensor* out_arg) {
  check_defined(self, op, "self");
  check_defined(index, op, "index");
  dim = wrap_dim(dim, self.dim(), op);
  KILN_CHECK(index.dim() <= 1, "[", op, "] expected a 0-dim or 1-D index, got one with ",
             index.dim(), " dims");
  KILN_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, "[", op,
             "] expected an index of dtype int64 or int32, got ", index.dtype());
  const int64_t n = index.numel();
  KILN_CHECK(self.dim() > 0 || n == 1, "[", op, "] expected one index for a 0-dim self, got ", n);
  const bool meta = any_meta({&self, &index, out_arg});
  DimVector sizes(self.sizes());
  if (self.dim() > 0) sizes[dim] = n;

  Tensor out;
  if (out_arg) {
    out = *out_arg;
    KILN_CHECK(out.dtype() == self.dtype(), "[", op, "] expected out of dtype ", self.dtype(),
               " like self, got ", out.dtype());
    if (!meta) check_cpu(out, op, "out");
    check_no_internal_overlap(out, op);
    check_no_overlap(out, self, op);
    check_no_overlap(out, index, op);
    if (!(out.sizes() == sizes.ref())) resize_out(out, sizes);
  } else {
    out = empty_tensor(sizes, self.dtype(), meta ? Device::meta() : Device::cpu());
  }
  if (meta) return out;
  check_cpu(self, op, "self");
  check_cpu(index, op, "index");
  std::vector<int64_t> idx = read_indices(index);
  check_indices(idx, self.dim() > 0 ? self.sizes()[dim] : 1, dim, op);
  // See Note [Writes into shared storage].
  const Tensor src = same_storage(out, self) ? self.clone() : self;
  copy_slices(out, src, dim, iota(n), idx, /*distinct=*/true);
  out.impl()->bump_version();
  return out;
}

Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index) {
  return index_select_impl("index_select", self, dim, index, nullptr);
}
Tensor index_select_out(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& out) {
  return index_select_impl("index_select.out", self, dim, index, &out);
}

// --- index_copy ------------------------------------------------------------------

// Checks as PyTorch's index_copy meta function; returns the wrapped dim.
int64_t check_index_copy(const char* op, const Tensor& self, int64_t dim, const Tensor& index,
                         const Tensor& source) {
  check_defined(self, op, "self");
  check_defined(index, op, "index");
  check_defined(source, op, "source");
  dim = wrap_dim(dim, self.dim(), op);
  KILN_CHECK(index.dim() < 2, "[", op, "] expected a 0-dim or 1-D index, got one with ",
             index.dim(), " dims");
  const int64_t n = index.numel();
  KILN_CHECK(source.dim() != 0 || n == 1, "[", op, "] expected one index for a 0-dim source, got ",
             n);
  KILN_CHECK(source.dim() == self.dim() || source.dim() == 0 || self.dim() == 0, "[", op,
             "] expected source with as many dims as self (", self.dim(), "), got ", source.dim());
  KILN_CHECK(index.dtype() == kInt64, "[", op, "] expected an index of dtype int64, got ",
             index.dtype());
  KILN_CHECK(self.dtype() == source.dtype(), "[", op, "] expected source of dtype ", self.dtype(),
             " like self, got ", source.dtype());
  const DimVector self_slice = self.dim() > 0 ? drop_dim(self.sizes(), dim) : DimVector();
  const DimVector src_slice = source.dim() > 0 ? drop_dim(source.sizes(), dim) : DimVector();
  KILN_CHECK(self_slice == src_slice, "[", op,
             "] expected source and self to have the same slice shape, got self slice ", self_slice,
             " at dim ", dim, " and source slice ", src_slice);
  KILN_CHECK(source.dim() == 0 || n == source.sizes()[dim], "[", op, "] expected ",
             source.sizes()[dim], " indices (source.size(", dim, ")), got ", n);
  return dim;
}

void index_copy_into(const char* op, const Tensor& dst, int64_t dim, const Tensor& index,
                     const Tensor& source) {
  check_cpu(index, op, "index");
  check_cpu(source, op, "source");
  std::vector<int64_t> idx = read_indices(index);
  // All indices are checked before the first write, so a bad one leaves dst untouched.
  check_indices(idx, dst.dim() > 0 ? dst.sizes()[dim] : 1, dim, op);
  // See Note [Writes into shared storage].
  Tensor src = same_storage(dst, source) ? source.clone() : source;
  copy_slices(dst, src, dim, idx, iota(static_cast<int64_t>(idx.size())), /*distinct=*/false);
  dst.impl()->bump_version();
}

Tensor index_copy_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  const char* op = "index_copy_";
  dim = check_index_copy(op, self, dim, index, source);
  check_no_internal_overlap(self, op);
  check_no_overlap(self, index, op);
  check_no_overlap(self, source, op);
  if (any_meta({&self, &index, &source})) return self;
  check_cpu(self, op, "self");
  index_copy_into(op, self, dim, index, source);
  return self;
}

Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  const char* op = "index_copy";
  dim = check_index_copy(op, self, dim, index, source);
  const bool meta = any_meta({&self, &index, &source});
  Tensor out = empty_tensor(self.sizes(), self.dtype(), meta ? Device::meta() : Device::cpu());
  if (meta) return out;
  check_cpu(self, op, "self");
  copy_into(out, self);
  index_copy_into(op, out, dim, index, source);
  return out;
}

void register_kernels(Library& m) {
  m.impl("index_select", &index_select);
  m.impl("index_select.out", &index_select_out);
  m.impl("index_copy", &index_copy);
  m.impl("index_copy_", &index_copy_);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
