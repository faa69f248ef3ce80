#include "runtime/cpu/blas_tensor.h"

#include <optional>
#include <vector>

#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/blas.h"
#include "runtime/cpu/copy.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

MatrixRef matrix_of(const Tensor& t) {
  const int64_t nd = t.dim();
  return {static_cast<char*>(t.data_ptr()), t.size(nd - 2), t.size(nd - 1), t.stride(nd - 2),
          t.stride(nd - 1)};
}

}  // namespace

void matmul_into(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& beta,
                 const Scalar& alpha) {
  const int64_t nd = out.dim();
  KILN_INTERNAL_ASSERT(nd >= 2 && a.dim() == nd && b.dim() == nd, "matmul_into ranks differ");
  if (out.numel() == 0) return;
  const bool beta_is_zero = scalar_is_zero(beta, out.dtype());
  if (shares_storage(out, a) || shares_storage(out, b)) {
    Tensor tmp = empty_tensor(out.sizes(), out.dtype(), out.device());
    if (!beta_is_zero) copy_into(tmp, out);
    matmul_into(tmp, a, b, beta, alpha);
    copy_into(out, tmp);
    return;
  }
  MatrixRef mc = matrix_of(out), ma = matrix_of(a), mb = matrix_of(b);
  int64_t count = 1;
  for (int64_t d = 0; d < nd - 2; ++d) count *= out.size(d);
  if (count == 1) {
    gemm(out.dtype(), mc, ma, mb, alpha, beta, beta_is_zero);
    return;
  }
  // A batch times one shared matrix is a single product with more rows
  // (matmul of [B, T, K] by [K, N], linear layers).
  if (batch_is_broadcast(b)) {
    std::optional<int64_t> ra = folded_row_stride(a), rc = folded_row_stride(out);
    if (ra && rc) {
      ma.rows = mc.rows = count * mc.rows;
      ma.row_stride = *ra;
      mc.row_stride = *rc;
      gemm(out.dtype(), mc, ma, mb, alpha, beta, beta_is_zero);
      return;
    }
  }
  // Element offsets of every batch entry, in row-major order of the batch dims.
  std::vector<int64_t> offsets(static_cast<size_t>(3 * count));
  std::vector<int64_t> index(static_cast<size_t>(nd - 2), 0);
  int64_t oc = 0, oa = 0, ob = 0;
  for (int64_t e = 0; e < count; ++e) {
    offsets[e] = oc;
    offsets[count + e] = oa;
    offsets[2 * count + e] = ob;
    for (int64_t d = nd - 3; d >= 0; --d) {
      if (++index[d] < out.size(d)) {
        oc += out.stride(d);
        oa += a.stride(d);
        ob += b.stride(d);
        break;
      }
      index[d] = 0;
      oc -= out.stride(d) * (out.size(d) - 1);
      oa -= a.stride(d) * (out.size(d) - 1);
      ob -= b.stride(d) * (out.size(d) - 1);
    }
  }
  GemmBatch batch{count, offsets.data(), offsets.data() + count, offsets.data() + 2 * count};
  gemm(out.dtype(), mc, ma, mb, alpha, beta, beta_is_zero, batch);
}

void check_product_dtypes(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                          const char* b_name) {
  KILN_CHECK(a.dtype() == b.dtype(), "[", op, "] expected both operands of the same dtype, got ",
             a.dtype(), " for ", a_name, " and ", b.dtype(), " for ", b_name);
  KILN_CHECK(a.dtype() != kBool, "[", op,
             "] expected operands of a numeric dtype, got bool (products of bool tensors are "
             "not supported)");
}

Device product_device(const char* op, std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands) {
    if (t->defined() && t->is_meta()) return Device::meta();
  }
  for (const Tensor* t : operands) {
    if (t->defined()) check_cpu(*t, op, "input");
  }
  return Device::cpu();
}

}  // namespace kiln::cpu
