// layer_norm and rms_norm on CUDA: one block per row of the normalized
// (trailing) dims, statistics in float32 (float64 for float64), mean first and
// squared deviations second, the row held in shared memory when it fits.
// rms_norm's weight multiply is fused, in the dtype type promotion gives.

#include <limits>

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

struct NormSpec {
  bool rms = false;
  DType dtype = kFloat32;   // input
  DType out = kFloat32;     // result (rms_norm with a weight may promote)
  DType weight = kFloat32;  // meaningful when has_weight
  bool has_weight = false;
  bool has_bias = false;  // layer_norm only
  int block = 128;
  bool cached = false;
};

constexpr int64_t kSharedRowBytes = 32 * 1024;

std::string norm_name(const NormSpec& s) {
  std::string n = std::string(s.rms ? "kiln_rms_norm_" : "kiln_layer_norm_") + dtype_tag(s.dtype);
  n += std::string("_") + dtype_tag(s.out);
  if (s.has_weight) n += std::string("_w") + dtype_tag(s.weight);
  if (s.has_bias) n += "_b";
  return n + "_t" + std::to_string(s.block) + (s.cached ? "_smem" : "");
}

std::string norm_source(const NormSpec& s) {
  const std::string A = acc_type(s.dtype), T = mem_type(s.dtype), B = std::to_string(s.block);
  const std::string OA = acc_type(s.out);
  std::string src = op_prelude();
  src += "extern \"C\" __global__ void __launch_bounds__(" + B + ") " + norm_name(s) + "(" +
         mem_type(s.out) + "* __restrict__ y, const " + T + "* __restrict__ x, const " +
         mem_type(s.has_weight ? s.weight : s.dtype) + "* __restrict__ w, const " + T +
         "* __restrict__ b, i64 rows, i64 n, double eps) {\n"
         "  kiln_grid_enter();\n";
  if (s.cached) src += "  extern __shared__ " + A + " row[];\n";
  src += "  __shared__ " + A + " scratch[32];\n";
  src +=
      "  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {\n"
      "    const " +
      T + "* xr = x + r * n;\n    " + mem_type(s.out) + "* yr = y + r * n;\n";
  const std::string xj = s.cached ? "row[j]" : load_expr(s.dtype, "xr[j]");
  src += "    " + A + " acc = 0;\n";
  if (!s.rms) {
    src += "    for (i64 j = threadIdx.x; j < n; j += " + B + ") {\n      const " + A +
           " v = " + load_expr(s.dtype, "xr[j]") + ";\n" + (s.cached ? "      row[j] = v;\n" : "") +
           "      acc += v;\n    }\n";
    src += "    const " + A + " mean = kiln_block_sum<" + A + ", " + B + ">(acc, scratch) / (" + A +
           ")n;\n    acc = 0;\n";
    src += "    for (i64 j = threadIdx.x; j < n; j += " + B + ") { const " + A + " d = " + xj +
           " - mean; acc += d * d; }\n";
    src += "    const " + A + " rstd = (" + A + ")1 / kiln_sqrt(kiln_block_sum<" + A + ", " + B +
           ">(acc, scratch) / (" + A + ")n + (" + A + ")eps);\n";
    src += "    const " + A + " shift = -(rstd * mean);\n";
    src += "    for (i64 j = threadIdx.x; j < n; j += " + B + ") {\n      " + A + " v = " + xj +
           " * rstd + shift;\n";
    if (s.has_weight) src += "      v *= " + load_expr(s.dtype, "w[j]") + ";\n";
    if (s.has_bias) src += "      v += " + load_expr(s.dtype, "b[j]") + ";\n";
    src += "      yr[j] = " + store_expr(s.out, "v") + ";\n    }\n";
  } else {
    src += "    for (i64 j = threadIdx.x; j < n; j += " + B + ") {\n      const " + A +
           " v = " + load_expr(s.dtype, "xr[j]") + ";\n" + (s.cached ? "      row[j] = v;\n" : "") +
           "      acc += v * v;\n    }\n";
    src += "    const " + A + " scale = (" + A + ")1 / kiln_sqrt(kiln_block_sum<" + A + ", " + B +
           ">(acc, scratch) / (" + A + ")n + (" + A + ")eps);\n";
    src += "    for (i64 j = threadIdx.x; j < n; j += " + B + ") {\n      " + OA + " v = (" + OA +
           ")" + round_expr(s.dtype, xj + " * scale") + ";\n";
    if (s.has_weight) src += "      v *= (" + OA + ")" + load_expr(s.weight, "w[j]") + ";\n";
    src += "      yr[j] = " + store_expr(s.out, "v") + ";\n    }\n";
  }
  src += "  }\n}\n";
  return src;
}

int block_for(int64_t n) {
  return n <= 256 ? 32 : n <= 2048 ? 128 : 256;
}

void run_norm(NormSpec spec, const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b,
              int64_t n, double eps) {
  const int64_t rows = n == 0 ? 0 : y.numel() / n;
  if (rows == 0) return;
  spec.block = block_for(n);
  const int64_t acc_bytes = spec.dtype == kFloat64 ? 8 : 4;
  spec.cached = n * acc_bytes <= kSharedRowBytes;
  cudaKernel_t k = load_kernel(
      norm_name(spec), [&] { return norm_source(spec); }, x.device().index());
  KernelArgs a;
  a.ptr(y).ptr(x).ptr(w).ptr(b).i64(rows).i64(n).f64(eps);
  launch(k, x.device(), grid_for(rows, 1), spec.block,
         spec.cached ? static_cast<size_t>(n * acc_bytes) : 0, a);
  y.impl()->bump_version();
}

int64_t row_length(IntArrayRef shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Tensor layer_norm(const Tensor& input, IntArrayRef shape, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, double eps, bool cudnn_enable) {
  Tensor meta = kiln::layer_norm(meta_of(input), shape, meta_of(weight), meta_of(bias), eps);
  const Tensor w = weight ? *weight : Tensor(), b = bias ? *bias : Tensor();
  check_device(w, input.device(), "layer_norm", "weight");
  check_device(b, input.device(), "layer_norm", "bias");
  Tensor y = empty_tensor(meta.sizes(), meta.dtype(), input.device());
  NormSpec spec;
  spec.dtype = spec.out = spec.weight = input.dtype();
  spec.has_weight = w.defined();
  spec.has_bias = b.defined();
  run_norm(spec, y, dense(input), w.defined() ? dense(w) : w, b.defined() ? dense(b) : b,
           row_length(shape), eps);
  return y;
}

Tensor rms_norm(const Tensor& input, IntArrayRef shape, const std::optional<Tensor>& weight,
                std::optional<double> eps) {
  Tensor meta = kiln::rms_norm(meta_of(input), shape, meta_of(weight), eps);
  const Tensor w = weight ? *weight : Tensor();
  check_device(w, input.device(), "rms_norm", "weight");
  Tensor y = empty_tensor(meta.sizes(), meta.dtype(), input.device());
  NormSpec spec;
  spec.rms = true;
  spec.dtype = input.dtype();
  spec.out = meta.dtype();
  spec.has_weight = w.defined();
  spec.weight = w.defined() ? w.dtype() : input.dtype();
  // The weight broadcasts against the row (meta checked its shape).
  run_norm(spec, y, dense(input), w.defined() ? dense(w) : w, Tensor(), row_length(shape),
           eps.value_or(machine_epsilon(input.dtype())));
  return y;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> norm_source_samples() {
  std::vector<std::pair<std::string, std::string>> out;
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    for (bool rms : {false, true}) {
      for (bool affine : {false, true}) {
        for (bool cached : {false, true}) {
          NormSpec s{rms, t, t, t, affine, affine && !rms, cached ? 128 : 256, cached};
          out.emplace_back(norm_name(s), norm_source(s));
        }
      }
    }
  }
  NormSpec promoted{true, kBFloat16, kFloat32, kFloat32, true, false, 32, true};
  out.emplace_back(norm_name(promoted), norm_source(promoted));
  return out;
}

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("layer_norm", &layer_norm);
  m.impl("rms_norm", &rms_norm);
}

}  // namespace kiln::jit::cuda
