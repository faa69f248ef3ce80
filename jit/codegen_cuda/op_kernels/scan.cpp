// cumsum and cumprod on CUDA over lines of [outer, n, inner] along `dim`.
// The input is cast to the result dtype first, as on the CPU; floating types
// accumulate in double. Shapes, dtypes and errors from Meta.
//
// Note [CUDA scan schedules]
// Two schedules, both deterministic (a fixed combination order, no atomics):
//  - thread: one thread per line scanning it in order, neighbouring threads
//    on neighbouring inner positions. For many short lines;
//  - block: one block of kScanBlock threads per line (fewer than
//    kScanBlockMaxLines lines of at least kScanBlockMin elements). The line goes in tiles of
//    kScanBlock * kScanPer elements: each thread scans its kScanPer
//    neighbours serially, the threads' totals are scanned across the block
//    (warp shuffles, then the warps' totals through shared memory), and a
//    prefix carried from the previous tiles is added. Float sums group
//    differently from the serial order, in double, so results differ from
//    the thread schedule by double rounding only.

#include "jit/codegen_cuda/kernel_loader.h"
#include "jit/codegen_cuda/op_kernels/op_sources.h"
#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"

#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

constexpr int kScanBlock = 256, kScanPer = 8;
constexpr int64_t kScanBlockMin = 1024, kScanBlockMaxLines = 8192;

std::string scan_name(bool prod, DType t) {
  return std::string(prod ? "kiln_cumprod_" : "kiln_cumsum_") + dtype_tag(t) + "_acc64";
}

std::string block_scan_name(bool prod, DType t) {
  return scan_name(prod, t) + "_block";
}

std::string block_scan_source(bool prod, DType t) {
  const std::string T = mem_type(t), A = is_floating(t) ? "double" : acc_type(t);
  const std::string id = prod ? "(" + A + ")1" : "(" + A + ")0";
  const std::string op = prod ? " * " : " + ";
  const std::string B = std::to_string(kScanBlock), K = std::to_string(kScanPer),
                    W = std::to_string(kScanBlock / 32),
                    tile = std::to_string(kScanBlock * kScanPer);
  std::string src = op_prelude() + "extern \"C\" __global__ void __launch_bounds__(" + B + ") " +
                    block_scan_name(prod, t) + "(" + T + "* __restrict__ y, const " + T +
                    "* __restrict__ x, i64 lines, i64 n, i64 inner) {\n  kiln_grid_enter();\n";
  src += "  __shared__ " + A + " wsum[" + W + "];\n";
  src += "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n";
  src += "  for (i64 l = blockIdx.x; l < lines; l += gridDim.x) {\n";
  src += "    const i64 base = (l / inner) * n * inner + l % inner;\n";
  src += "    " + A + " carry = " + id + ";\n";
  src += "    for (i64 t0 = 0; t0 < n; t0 += " + tile + ") {\n";
  src += "      const i64 j0 = t0 + (i64)threadIdx.x * " + K + ";\n";
  src += "      " + A + " v[" + K + "];\n      " + A + " run = " + id + ";\n";
  src += "#pragma unroll\n      for (int q = 0; q < " + K + "; ++q) {\n";
  src += "        const i64 j = j0 + q;\n";
  src += "        if (j < n) run = run" + op + "(" + A + ")" + load_expr(t, "x[base + j * inner]") +
         ";\n";
  src += "        v[q] = run;\n      }\n";
  // Inclusive scan of the threads' totals within the warp, then across warps.
  src += "      " + A + " incl = run;\n";
  src += "#pragma unroll\n      for (int o = 1; o < 32; o <<= 1) {\n";
  src += "        const " + A + " u = __shfl_up_sync(0xffffffffu, incl, o);\n";
  src += "        if (lane >= o) incl = u" + op + "incl;\n      }\n";
  src += "      if (lane == 31) wsum[warp] = incl;\n      __syncthreads();\n";
  src += "      " + A + " wpre = " + id + ", total = " + id + ";\n";
  src += "#pragma unroll\n      for (int w = 0; w < " + W + "; ++w) {\n";
  src += "        if (w < warp) wpre = wpre" + op + "wsum[w];\n";
  src += "        total = total" + op + "wsum[w];\n      }\n";
  src += "      __syncthreads();\n";  // wsum is rewritten by the next tile
  src += "      " + A + " excl = __shfl_up_sync(0xffffffffu, incl, 1);\n";
  src += "      if (lane == 0) excl = " + id + ";\n";
  src += "      const " + A + " pre = (carry" + op + "wpre)" + op + "excl;\n";
  src += "#pragma unroll\n      for (int q = 0; q < " + K + "; ++q) {\n";
  src += "        const i64 j = j0 + q;\n";
  src += "        if (j < n) y[base + j * inner] = " + store_expr(t, "pre" + op + "v[q]") + ";\n";
  src += "      }\n      carry = carry" + op + "total;\n    }\n  }\n}\n";
  return src;
}

std::string scan_source(bool prod, DType t) {
  // Floating lines accumulate in double, as the CPU kernels do (a long f32
  // line otherwise drifts by more than the result's own rounding).
  const std::string T = mem_type(t), A = is_floating(t) ? "double" : acc_type(t);
  return op_prelude() + "extern \"C\" __global__ void __launch_bounds__(128) " +
         scan_name(prod, t) + "(" + T + "* __restrict__ y, const " + T +
         "* __restrict__ x, i64 lines, i64 n, i64 inner) {\n"
         "  kiln_grid_enter();\n"
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
  const int64_t lines = outer * inner;
  KernelArgs a;
  a.ptr(y).ptr(x).i64(lines).i64(n).i64(inner);
  if (n >= kScanBlockMin && lines < kScanBlockMaxLines) {  // Note [CUDA scan schedules]
    cudaKernel_t k = load_kernel(
        block_scan_name(prod, t), [&] { return block_scan_source(prod, t); },
        self.device().index());
    launch(k, self.device(), grid_for(lines, 1), kScanBlock, 0, a);
  } else {
    cudaKernel_t k = load_kernel(
        scan_name(prod, t), [&] { return scan_source(prod, t); }, self.device().index());
    launch(k, self.device(), grid_for(lines, 128), 128, 0, a);
  }
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
         "  kiln_grid_enter();\n"
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
      if (t != kBool) {
        out.emplace_back(scan_name(flag, t), scan_source(flag, t));
        out.emplace_back(block_scan_name(flag, t), block_scan_source(flag, t));
      }
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
