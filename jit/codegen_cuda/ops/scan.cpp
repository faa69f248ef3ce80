// cumsum and cumprod on CUDA: one thread per line along `dim`, scanning it in
// order (lines of [outer, n, inner] with neighbouring threads on neighbouring
// inner positions). Fine for the many-short-lines case; a line of millions of
// elements runs on one thread (a block-wide scan is the next step there).
// The input is cast to the result dtype first, as on the CPU; floating types
// accumulate in double. Shapes, dtypes and errors from Meta.

#include "jit/codegen_cuda/kernel_loader.h"
#include "jit/codegen_cuda/ops/op_sources.h"
#include "jit/codegen_cuda/ops/op_support.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"

#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

std::string scan_name(bool prod, DType t) {
  return std::string(prod ? "kiln_cumprod_" : "kiln_cumsum_") + dtype_tag(t) + "_acc64";
}

std::string scan_source(bool prod, DType t) {
  // Floating lines accumulate in double, as the CPU kernels do (a long f32
  // line otherwise drifts by more than the result's own rounding).
  const std::string T = mem_type(t), A = is_floating(t) ? "double" : acc_type(t);
  return op_prelude() + "extern \"C\" __global__ void __launch_bounds__(128) " +
         scan_name(prod, t) + "(" + T + "* __restrict__ y, const " + T +
         "* __restrict__ x, i64 lines, i64 n, i64 inner) {\n"
         "  for (i64 l = (i64)blockIdx.x * 128 + threadIdx.x; l < lines; l += (i64)gridDim.x * "
         "128) {\n"
         "    const i64 base = (l / inner) * n * inner + l % inner;\n"
         "    " +
         A + " acc = " + (prod ? "1" : "0") +
         ";\n"
         "    for (i64 j = 0; j < n; ++j) {\n"
         "      acc " +
         (prod ? "*=" : "+=") + " " + load_expr(t, "x[base + j * inner]") +
         ";\n"
         "      y[base + j * inner] = " +
         store_expr(t, "acc") + ";\n    }\n  }\n}\n";
}

Tensor scan(bool prod, const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  Tensor meta =
      prod ? kiln::cumprod(meta_of(self), dim, dtype) : kiln::cumsum(meta_of(self), dim, dtype);
  Tensor y = empty_tensor(meta.sizes(), meta.dtype(), self.device());
  if (y.numel() == 0) return y;
  const int64_t d = wrap_dim(dim, self.dim(), prod ? "cumprod" : "cumsum");
  Tensor x = dense(self, meta.dtype());
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t i = 0; i < x.dim(); ++i) (i < d ? outer : i == d ? n : inner) *= x.size(i);
  const DType t = meta.dtype();
  cudaKernel_t k = load_kernel(
      scan_name(prod, t), [&] { return scan_source(prod, t); }, self.device().index());
  KernelArgs a;
  a.ptr(y).ptr(x).i64(outer * inner).i64(n).i64(inner);
  launch(k, self.device(), grid_for(outer * inner, 128), 128, 0, a);
  y.impl()->bump_version();
  return y;
}

Tensor cumsum(const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  return scan(false, self, dim, dtype);
}
Tensor cumprod(const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  return scan(true, self, dim, dtype);
}

// tril / triu: elements on the kept side of the diagonal are copied, the rest zeroed.
std::string tri_name(bool upper, DType t) {
  return std::string(upper ? "kiln_triu_" : "kiln_tril_") + dtype_tag(t);
}

std::string tri_source(bool upper, DType t) {
  const std::string T = mem_type(t);
  return op_prelude() + "extern \"C\" __global__ void __launch_bounds__(256) " +
         tri_name(upper, t) + "(" + T + "* __restrict__ y, const " + T +
         "* __restrict__ x, i64 numel, i64 rows, i64 cols, i64 diag) {\n"
         "  for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < numel; i += (i64)gridDim.x * "
         "256) {\n"
         "    const i64 c = i % cols, r = (i / cols) % rows;\n"
         "    const bool keep = c - r " +
         (upper ? ">=" : "<=") +
         " diag;\n"
         "    y[i] = keep ? x[i] : (" +
         T + ")0;\n  }\n}\n";
}

Tensor tri(bool upper, const Tensor& self, int64_t diagonal) {
  Tensor meta = upper ? kiln::triu(meta_of(self), diagonal) : kiln::tril(meta_of(self), diagonal);
  Tensor y = empty_tensor(meta.sizes(), meta.dtype(), self.device());
  if (y.numel() == 0) return y;
  Tensor x = dense(self);
  const DType t = self.dtype();
  cudaKernel_t k = load_kernel(
      tri_name(upper, t), [&] { return tri_source(upper, t); }, self.device().index());
  KernelArgs a;
  a.ptr(y).ptr(x).i64(y.numel()).i64(y.size(-2)).i64(y.size(-1)).i64(diagonal);
  launch(k, self.device(), grid_for(y.numel(), 256 * 4), 256, 0, a);
  y.impl()->bump_version();
  return y;
}

Tensor tril(const Tensor& self, int64_t diagonal) {
  return tri(false, self, diagonal);
}
Tensor triu(const Tensor& self, int64_t diagonal) {
  return tri(true, self, diagonal);
}
Tensor tril_(const Tensor& self, int64_t diagonal) {
  copy_into_cuda(self, tri(false, self, diagonal));
  return self;
}
Tensor triu_(const Tensor& self, int64_t diagonal) {
  copy_into_cuda(self, tri(true, self, diagonal));
  return self;
}

}  // namespace

NamedSources scan_source_samples() {
  NamedSources out;
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kBool}) {
    for (bool flag : {false, true}) {
      if (t != kBool) out.emplace_back(scan_name(flag, t), scan_source(flag, t));
      out.emplace_back(tri_name(flag, t), tri_source(flag, t));
    }
  }
  return out;
}

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("cumsum", &cumsum);
  m.impl("cumprod", &cumprod);
  m.impl("tril", &tril);
  m.impl("triu", &triu);
  m.impl("tril_", &tril_);
  m.impl("triu_", &triu_);
}

}  // namespace kiln::jit::cuda
