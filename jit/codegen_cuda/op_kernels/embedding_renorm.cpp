// embedding_renorm_ on CUDA (Note [Embedding max_norm] in
// runtime/cpu/embedding.cpp): one block per index, the first block to claim
// its row (an atomic flag per row) computes the row's norm in double and
// scales the row; later blocks of a repeated row skip it, so every row is
// scaled once. An index outside [0, rows) is skipped and reported after the
// kernel, as Note [CUDA index bounds] describes. Argument checks come from the
// Meta kernel.

#include <cmath>

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

constexpr int kBlock = 256;

std::string renorm_name(DType t, DType index) {
  return std::string("kiln_embedding_renorm_") + dtype_tag(t) + "_" + dtype_tag(index);
}

// `kind`: 0 sums (p = 0, 1, 2 or any other finite p), 1 takes the largest
// magnitude (p = inf), 2 the smallest (p = -inf).
std::string renorm_source(DType t, DType index) {
  const std::string T = mem_type(t), A = acc_type(t);
  return op_prelude() +
         "__device__ __forceinline__ double kiln_renorm_combine(int kind, double a, double b) {\n"
         "  return kind == 0 ? a + b : (kind == 1 ? fmax(a, b) : fmin(a, b));\n"
         "}\n"
         "extern \"C\" __global__ void __launch_bounds__(256) " +
         renorm_name(t, index) + "(" + T + "* __restrict__ w, const " + mem_type(index) +
         "* __restrict__ idx, i64 n, i64 rows, i64 cols, i64 rs, i64 cs, double max_norm, "
         "double p, int kind, int* __restrict__ claimed, i64* err) {\n"
         "  kiln_grid_enter();\n"
         "  __shared__ double scratch[32];\n"
         "  __shared__ int mine;\n"
         "  for (i64 b = blockIdx.x; b < n; b += gridDim.x) {\n"
         "    const i64 r = (i64)idx[b];\n"
         "    if (r < 0 || r >= rows) {\n"
         "      if (threadIdx.x == 0 && err) kiln_flag_error(err, r);\n"
         "      continue;\n"
         "    }\n"
         "    if (threadIdx.x == 0) mine = atomicCAS(claimed + r, 0, 1) == 0;\n"
         "    __syncthreads();\n"
         "    const bool take = mine != 0;\n"
         "    __syncthreads();\n"
         "    if (!take) continue;\n"
         "    " +
         T +
         "* row = w + r * rs;\n"
         "    double acc = kind == 2 ? kiln_inf(0.0) : 0.0;\n"
         "    for (i64 j = threadIdx.x; j < cols; j += 256) {\n"
         "      const double a = fabs((double)" +
         load_expr(t, "row[j * cs]") +
         ");\n"
         "      double v = a;\n"
         "      if (kind == 0) v = p == 0.0 ? (a != 0.0 ? 1.0 : 0.0) : (p == 1.0 ? a : "
         "(p == 2.0 ? a * a : pow(a, p)));\n"
         "      acc = kiln_renorm_combine(kind, acc, v);\n"
         "    }\n"
         "    for (int m = 16; m > 0; m >>= 1) acc = kiln_renorm_combine(kind, acc, "
         "__shfl_xor_sync(0xffffffffu, acc, m));\n"
         "    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = acc;\n"
         "    __syncthreads();\n"
         "    acc = scratch[0];\n"
         "    for (int k = 1; k < 8; ++k) acc = kiln_renorm_combine(kind, acc, scratch[k]);\n"
         "    __syncthreads();\n"
         "    double norm = acc;\n"
         "    if (kind == 0 && p == 2.0) norm = sqrt(acc);\n"
         "    else if (kind == 0 && p != 0.0 && p != 1.0) norm = pow(acc, 1.0 / p);\n"
         "    if (!(norm > max_norm)) continue;\n"
         "    const " +
         A + " scale = (" + A +
         ")(max_norm / (norm + 1e-7));\n"
         "    for (i64 j = threadIdx.x; j < cols; j += 256) row[j * cs] = " +
         store_expr(t, load_expr(t, "row[j * cs]") + " * scale") +
         ";\n"
         "  }\n"
         "}\n";
}

Tensor embedding_renorm_(const Tensor& self, const Tensor& indices, double max_norm,
                         double norm_type) {
  const char* op = "embedding_renorm_";
  Tensor m = meta_of(self);
  kiln::embedding_renorm_(m, meta_of(indices), max_norm, norm_type);
  check_device(indices, self.device(), op, "indices");
  if (indices.numel() == 0) return self;
  const Tensor idx = dense(indices);
  const int64_t rows = self.size(0);
  Tensor claimed = empty_tensor({rows}, kInt32, self.device());
  claimed.zero_();
  const DeviceErrorFlag flag(self.device(),
                             "[embedding_renorm_] index {} is out of range for a "
                             "weight of " +
                                 std::to_string(rows) + " rows");
  const int kind = std::isinf(norm_type) ? (norm_type > 0 ? 1 : 2) : 0;
  cudaKernel_t k = load_kernel(
      renorm_name(self.dtype(), idx.dtype()),
      [&] { return renorm_source(self.dtype(), idx.dtype()); }, self.device().index());
  KernelArgs a;
  a.ptr(self).ptr(idx).i64(idx.numel()).i64(rows).i64(self.size(1)).i64(self.stride(0));
  a.i64(self.stride(1)).f64(max_norm).f64(norm_type).i32(kind).ptr(claimed).ptr(flag.ptr());
  launch(k, self.device(), grid_for(idx.numel(), 1), kBlock, 0, a);
  self.impl()->bump_version();
  flag.check();  // Note [Device error flags]
  return self;
}

}  // namespace

NamedSources embedding_renorm_source_samples() {
  NamedSources out;
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    for (DType i : {kInt64, kInt32}) out.emplace_back(renorm_name(t, i), renorm_source(t, i));
  }
  return out;
}

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("embedding_renorm_", &embedding_renorm_);
}

}  // namespace kiln::jit::cuda
