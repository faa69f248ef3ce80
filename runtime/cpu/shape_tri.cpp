// tril and triu over the last two dims of a (batched) matrix. The in-place
// forms zero the other triangle where self lies, whatever its strides; the
// functional forms copy self into a contiguous result and do the same there.

#include <algorithm>

#include "kiln/dispatch.h"
#include "runtime/cpu/copy.h"
#include "runtime/cpu/index_utils.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

// Zeros, in every matrix of `t`, the elements above diagonal k (lower = true,
// tril) or below it (triu).
void zero_triangle(const Tensor& t, int64_t k, bool lower) {
  const int64_t nd = t.dim();
  const int64_t rows = t.sizes()[nd - 2], cols = t.sizes()[nd - 1];
  const int64_t rs = t.strides()[nd - 2], cs = t.strides()[nd - 1];
  if (t.numel() == 0) return;
  k = std::clamp<int64_t>(k, -rows - 1, cols + 1);  // no overflow in i + k below
  const size_t elem = t.element_size();
  const int64_t e = static_cast<int64_t>(elem);
  IntArrayRef batch_sizes = t.sizes().slice(0, nd - 2);
  IntArrayRef batch_strides = t.strides().slice(0, nd - 2);
  int64_t batches = 1;
  for (int64_t s : batch_sizes) batches *= s;
  char* base = static_cast<char*>(t.data_ptr());
  DimVector counter(nd - 2, 0);
  int64_t off = 0;
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t i = 0; i < rows; ++i) {
      // tril keeps j <= i + k; triu keeps j >= i + k.
      int64_t begin = lower ? std::max<int64_t>(0, i + k + 1) : 0;
      int64_t end = lower ? cols : std::clamp<int64_t>(i + k, 0, cols);
      if (begin >= end) continue;
      const int64_t len = end - begin;
      zero_strided(base + (off + i * rs + begin * cs) * e, IntArrayRef(&cs, 1),
                   IntArrayRef(&len, 1), elem);
    }
    for (int64_t d = nd - 3; d >= 0; --d) {
      off += batch_strides[d];
      if (++counter[d] < batch_sizes[d]) break;
      off -= batch_sizes[d] * batch_strides[d];
      counter[d] = 0;
    }
  }
}

void check_matrix(const char* op, const Tensor& self) {
  check_defined(self, op, "self");
  KILN_CHECK(self.dim() >= 2, "[", op, "] expected a tensor with at least 2 dims, got ", self.dim(),
             " dims");
}

Tensor tri(const char* op, const Tensor& self, int64_t k, bool lower) {
  check_matrix(op, self);
  Tensor out = empty_tensor(self.sizes(), self.dtype(), self.device());
  if (self.is_meta()) return out;
  check_cpu(self, op, "self");
  copy_into(out, self);
  zero_triangle(out, k, lower);
  return out;
}

Tensor tri_(const char* op, const Tensor& self, int64_t k, bool lower) {
  check_matrix(op, self);
  check_no_internal_overlap(self, op);  // Note [Writes into shared storage]
  if (self.is_meta()) return self;
  check_cpu(self, op, "self");
  zero_triangle(self, k, lower);
  self.impl()->bump_version();
  return self;
}

Tensor tril(const Tensor& self, int64_t k) {
  return tri("tril", self, k, true);
}
Tensor triu(const Tensor& self, int64_t k) {
  return tri("triu", self, k, false);
}
Tensor tril_(const Tensor& self, int64_t k) {
  return tri_("tril_", self, k, true);
}
Tensor triu_(const Tensor& self, int64_t k) {
  return tri_("triu_", self, k, false);
}

void register_kernels(Library& m) {
  m.impl("tril", &tril);
  m.impl("triu", &triu);
  m.impl("tril_", &tril_);
  m.impl("triu_", &triu_);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
