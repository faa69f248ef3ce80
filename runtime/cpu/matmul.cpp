// Matrix products: mm, bmm, mv, addmm, baddbmm, matmul (with torch.matmul's
// broadcasting) and outer. Each kernel checks shapes and dtypes, makes its
// output and, unless an operand is a meta tensor, runs the product through
// matmul_into; the same functions serve the CPU and Meta keys.

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/blas.h"
#include "runtime/cpu/blas_tensor.h"
#include "runtime/cpu/copy.h"
#include "runtime/cpu/index_utils.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

enum class Form { Functional, InPlace, Out };

// The result tensor: a new one, or `out` checked and resized to `shape`.
Tensor make_result(const char* op, const Tensor* out, IntArrayRef shape, DType dtype,
                   Device device) {
  if (!out) return empty_tensor(shape, dtype, device);
  KILN_CHECK(out->dtype() == dtype, "[", op, "] expected out tensor of dtype ", dtype, ", got ",
             out->dtype());
  KILN_CHECK(out->device() == device, "[", op, "] expected out tensor on ", device, ", got ",
             out->device());
  if (!(out->sizes() == shape)) resize_out(*out, shape);
  check_no_internal_overlap(*out, op);  // Note [Writes into shared storage]
  return *out;
}

void check_rank(const char* op, const Tensor& t, const char* name, int64_t rank) {
  check_defined(t, op, name);
  KILN_CHECK(t.dim() == rank, "[", op, "] expected ", name, " to be a ", rank,
             "-D tensor, got one of shape ", t.sizes());
}

// [n] -> [n, 1]
Tensor as_column(const Tensor& v) {
  return make_view(v, {v.size(0), 1}, {v.stride(0), 1}, v.storage_offset());
}

// --- mm / bmm / mv ----------------------------------------------------------------------

Tensor mm_impl(const char* op, const Tensor& a, const Tensor& b, const Tensor* out) {
  check_rank(op, a, "self", 2);
  check_rank(op, b, "mat2", 2);
  check_product_dtypes(op, a, "self", b, "mat2");
  KILN_CHECK(a.size(1) == b.size(0), "[", op, "] mat1 and mat2 shapes cannot be multiplied (",
             a.size(0), "x", a.size(1), " and ", b.size(0), "x", b.size(1), ")");
  Device dev = product_device(op, {&a, &b});
  Tensor r = make_result(op, out, {a.size(0), b.size(1)}, a.dtype(), dev);
  if (!dev.is_meta()) matmul_into(r, a, b);
  return r;
}
Tensor mm(const Tensor& a, const Tensor& b) {
  return mm_impl("mm", a, b, nullptr);
}
Tensor mm_out(const Tensor& a, const Tensor& b, const Tensor& out) {
  return mm_impl("mm.out", a, b, &out);
}

void check_bmm_shapes(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                      const char* b_name) {
  KILN_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "[", op, "] expected ", a_name,
             " [b, n, k] and ", b_name, " [b, k, m] with matching b and k, got ", a.sizes(),
             " and ", b.sizes());
}

Tensor bmm_impl(const char* op, const Tensor& a, const Tensor& b, const Tensor* out) {
  check_rank(op, a, "self", 3);
  check_rank(op, b, "mat2", 3);
  check_product_dtypes(op, a, "self", b, "mat2");
  check_bmm_shapes(op, a, "self", b, "mat2");
  Device dev = product_device(op, {&a, &b});
  Tensor r = make_result(op, out, {a.size(0), a.size(1), b.size(2)}, a.dtype(), dev);
  if (!dev.is_meta()) matmul_into(r, a, b);
  return r;
}
Tensor bmm(const Tensor& a, const Tensor& b) {
  return bmm_impl("bmm", a, b, nullptr);
}
Tensor bmm_out(const Tensor& a, const Tensor& b, const Tensor& out) {
  return bmm_impl("bmm.out", a, b, &out);
}

Tensor mv(const Tensor& a, const Tensor& v) {
  const char* op = "mv";
  check_rank(op, a, "self", 2);
  check_rank(op, v, "vec", 1);
  check_product_dtypes(op, a, "self", v, "vec");
  KILN_CHECK(a.size(1) == v.size(0), "[mv] expected vec of size ", a.size(1),
             " to match self's columns, got self of shape ", a.sizes(), " and vec of shape ",
             v.sizes());
  Device dev = product_device(op, {&a, &v});
  Tensor r = empty_tensor({a.size(0)}, a.dtype(), dev);
  if (!dev.is_meta()) matmul_into(as_column(r), a, as_column(v));
  return r;
}

// --- addmm / baddbmm --------------------------------------------------------------------

// out = beta * self + alpha * (m1 @ m2); `shape` is the product's shape.
// baddbmm converts self to the batches' dtype (as PyTorch 1.13 does); addmm
// requires them to agree.
Tensor add_product(const char* op, Form form, const Tensor& self, const Tensor& m1,
                   const Tensor& m2, const Scalar& beta, const Scalar& alpha, const Tensor* out,
                   IntArrayRef shape, bool convert_self = false) {
  check_defined(self, op, "self");
  const DType dtype = m1.dtype();
  KILN_CHECK(convert_self || self.dtype() == dtype, "[", op,
             "] expected self and the matrices of the same dtype, got ", self.dtype(), " and ",
             dtype);
  if (form == Form::InPlace) {
    KILN_CHECK(self.sizes() == shape, "[", op, "] expected self of shape ", shape,
               " for an in-place product, got ", self.sizes());
    check_no_internal_overlap(self, op);
  } else {
    KILN_CHECK(broadcasts_to(self.sizes(), shape), "[", op, "] expected self to broadcast to ",
               shape, ", got shape ", self.sizes());
  }
  Device dev = product_device(op, {&self, &m1, &m2});
  Tensor r = form == Form::InPlace ? self : make_result(op, out, shape, dtype, dev);
  if (dev.is_meta()) return r;
  if (form != Form::InPlace && !scalar_is_zero(beta, dtype) && !r.is_same(self)) {
    copy_into(r, self);
  }
  matmul_into(r, m1, m2, beta, alpha);
  return r;
}

Tensor addmm_impl(const char* op, Form form, const Tensor& self, const Tensor& m1, const Tensor& m2,
                  const Scalar& beta, const Scalar& alpha, const Tensor* out) {
  check_rank(op, m1, "mat1", 2);
  check_rank(op, m2, "mat2", 2);
  check_product_dtypes(op, m1, "mat1", m2, "mat2");
  KILN_CHECK(m1.size(1) == m2.size(0), "[", op, "] mat1 and mat2 shapes cannot be multiplied (",
             m1.size(0), "x", m1.size(1), " and ", m2.size(0), "x", m2.size(1), ")");
  return add_product(op, form, self, m1, m2, beta, alpha, out, {m1.size(0), m2.size(1)});
}
Tensor addmm(const Tensor& s, const Tensor& m1, const Tensor& m2, const Scalar& beta,
             const Scalar& alpha) {
  return addmm_impl("addmm", Form::Functional, s, m1, m2, beta, alpha, nullptr);
}
Tensor addmm_(const Tensor& s, const Tensor& m1, const Tensor& m2, const Scalar& beta,
              const Scalar& alpha) {
  return addmm_impl("addmm_", Form::InPlace, s, m1, m2, beta, alpha, nullptr);
}
Tensor addmm_out(const Tensor& s, const Tensor& m1, const Tensor& m2, const Scalar& beta,
                 const Scalar& alpha, const Tensor& out) {
  return addmm_impl("addmm.out", Form::Out, s, m1, m2, beta, alpha, &out);
}

Tensor baddbmm(const Tensor& s, const Tensor& b1, const Tensor& b2, const Scalar& beta,
               const Scalar& alpha) {
  const char* op = "baddbmm";
  check_rank(op, b1, "batch1", 3);
  check_rank(op, b2, "batch2", 3);
  check_product_dtypes(op, b1, "batch1", b2, "batch2");
  check_bmm_shapes(op, b1, "batch1", b2, "batch2");
  return add_product(op, Form::Functional, s, b1, b2, beta, alpha, nullptr,
                     {b1.size(0), b1.size(1), b2.size(2)}, /*convert_self=*/true);
}

// --- matmul -----------------------------------------------------------------------------

// torch.matmul: a 1-D operand becomes a row (left) or column (right) vector
// whose dim is removed from the result; dims before the last two are batch
// dims and broadcast.
Tensor matmul_impl(const char* op, const Tensor& a, const Tensor& b, const Tensor* out) {
  check_defined(a, op, "self");
  check_defined(b, op, "other");
  const int64_t da = a.dim(), db = b.dim();
  KILN_CHECK(da >= 1 && db >= 1, "[", op,
             "] expected both arguments to be at least 1-D, got shapes ", a.sizes(), " and ",
             b.sizes());
  check_product_dtypes(op, a, "self", b, "other");
  const int64_t k = a.size(-1);
  const int64_t kb = db == 1 ? b.size(0) : b.size(-2);
  if (da == 1 && db == 1) {
    KILN_CHECK(k == kb, "[", op, "] expected 1-D operands of the same size, got shapes ", a.sizes(),
               " and ", b.sizes());
  } else {
    KILN_CHECK(k == kb, "[", op, "] shapes ", a.sizes(), " and ", b.sizes(),
               " cannot be multiplied: expected self.size(-1) == other.size(", db == 1 ? "0" : "-2",
               "), got ", k, " and ", kb);
  }
  IntArrayRef batch_a = da > 2 ? a.sizes().slice(0, da - 2) : IntArrayRef();
  IntArrayRef batch_b = db > 2 ? b.sizes().slice(0, db - 2) : IntArrayRef();
  const size_t nb = std::max(batch_a.size(), batch_b.size());
  DimVector batch(nb, 1);
  for (size_t i = 0; i < nb; ++i) {
    int64_t sa = i + batch_a.size() >= nb ? batch_a[i + batch_a.size() - nb] : 1;
    int64_t sb = i + batch_b.size() >= nb ? batch_b[i + batch_b.size() - nb] : 1;
    KILN_CHECK(sa == sb || sa == 1 || sb == 1, "[", op, "] shapes ", a.sizes(), " and ", b.sizes(),
               " cannot be multiplied: batch dims ", batch_a, " and ", batch_b,
               " do not broadcast");
    batch[i] = sa == 1 ? sb : sa;
  }
  const int64_t n = da >= 2 ? a.size(-2) : 1, p = db >= 2 ? b.size(-1) : 1;
  DimVector shape = batch;
  if (da >= 2) shape.push_back(n);
  if (db >= 2) shape.push_back(p);
  Device dev = product_device(op, {&a, &b});
  Tensor r = make_result(op, out, shape, a.dtype(), dev);
  if (dev.is_meta()) return r;
  // The result seen as [batch..., n, p]: a dropped vector dim has size 1, so
  // any stride serves.
  DimVector full_sizes = batch, full_strides(nb, 0);
  for (size_t i = 0; i < nb; ++i) full_strides[i] = r.stride(static_cast<int64_t>(i));
  full_sizes.push_back(n);
  full_sizes.push_back(p);
  full_strides.push_back(da >= 2 ? r.stride(static_cast<int64_t>(nb)) : 0);
  full_strides.push_back(db >= 2 ? r.stride(-1) : 0);
  Tensor full = make_view(r, full_sizes, full_strides, r.storage_offset());
  Tensor a2 = da == 1 ? make_view(a, {1, k}, {0, a.stride(0)}, a.storage_offset()) : a;
  Tensor b2 = db == 1 ? as_column(b) : b;
  matmul_into(full, expand_batch(a2, batch, 2), expand_batch(b2, batch, 2));
  return r;
}
Tensor matmul(const Tensor& a, const Tensor& b) {
  return matmul_impl("matmul", a, b, nullptr);
}
Tensor matmul_out(const Tensor& a, const Tensor& b, const Tensor& out) {
  return matmul_impl("matmul.out", a, b, &out);
}

// --- outer (composite: a column times a row, with mul's type promotion) ---------------

Tensor outer(const Tensor& self, const Tensor& vec2) {
  check_rank("outer", self, "self", 1);
  check_rank("outer", vec2, "vec2", 1);
  return kiln::mul(self.unsqueeze(1), vec2);
}

void register_kernels(Library& m) {
  m.impl("mm", &mm);
  m.impl("mm.out", &mm_out);
  m.impl("bmm", &bmm);
  m.impl("bmm.out", &bmm_out);
  m.impl("mv", &mv);
  m.impl("addmm", &addmm);
  m.impl("addmm_", &addmm_);
  m.impl("addmm.out", &addmm_out);
  m.impl("baddbmm", &baddbmm);
  m.impl("matmul", &matmul);
  m.impl("matmul.out", &matmul_out);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("outer", &outer);
}

}  // namespace kiln::cpu
