// softmax and log_softmax on CUDA: one block per row, an online (max, sum)
// pass then a write pass; the row is kept in shared memory when it fits, read
// twice from global memory otherwise. float16/bfloat16 compute in float32.
// Shapes, dtypes and errors come from the op's Meta kernel.

#include "jit/codegen_cuda/op_kernels/softmax.h"

#include "jit/codegen_cuda/kernel_loader.h"
#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"

#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

enum class MaskKind : int { None, Bool, Additive };

struct SoftmaxSpec {
  DType dtype = kFloat32;  // input and output
  bool log = false;
  MaskKind mask = MaskKind::None;
  DType mask_dtype = kBool;
  bool causal = false;
  int block = 128;
  bool cached = false;  // the row lives in shared memory
};

constexpr int64_t kSharedRowBytes = 32 * 1024;

std::string softmax_name(const SoftmaxSpec& s) {
  std::string n = std::string("kiln_softmax_") + dtype_tag(s.dtype) + (s.log ? "_log" : "") + "_b" +
                  std::to_string(s.block) + (s.cached ? "_smem" : "");
  if (s.mask != MaskKind::None) {
    n += std::string(s.mask == MaskKind::Bool ? "_mb_" : "_ma_") + dtype_tag(s.mask_dtype);
  }
  if (s.causal) n += "_causal";
  return n;
}

// Note [Softmax kernel]
// Each thread keeps a running (max m, sum s of exp(v - m)) over its
// elements; pairs combine as s1 * exp(m1 - m) + s2 * exp(m2 - m). -inf
// elements add nothing; a row whose max is +inf or NaN gives NaN throughout
// (as the CPU kernel), one that is all -inf gives 0/0 = NaN.
std::string softmax_source(const SoftmaxSpec& s) {
  const std::string A = acc_type(s.dtype), T = mem_type(s.dtype), B = std::to_string(s.block);
  std::string src = op_prelude();
  src += "__device__ __forceinline__ void kiln_sm_add(" + A + "& m, " + A + "& s, " + A + " m2, " +
         A +
         " s2) {\n"
         "  const " +
         A +
         " mx = kiln_max(m, m2);\n"
         "  if (mx == -kiln_inf(mx)) { s += s2; return; }\n"
         "  s = s * kiln_exp(m - mx) + s2 * kiln_exp(m2 - mx); m = mx;\n}\n";
  src += "extern \"C\" __global__ void __launch_bounds__(" + B + ") " + softmax_name(s) + "(" + T +
         "* __restrict__ y, const " + T + "* __restrict__ x, const " +
         (s.mask == MaskKind::None ? std::string("void") : std::string(mem_type(s.mask_dtype))) +
         "* __restrict__ mask, i64 rows, i64 n, i64 inner, " + A +
         " scale, i64 qlen, int mask_nd, KilnDims mask_sizes, KilnDims mask_strides, i64 "
         "mask_col_stride) {\n"
         "  kiln_grid_enter();\n";
  if (s.cached) src += "  extern __shared__ " + A + " row[];\n";
  src += "  __shared__ " + A + " sm[32], ss[32];\n";
  src +=
      "  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {\n"
      "    const i64 base = (r / inner) * n * inner + r % inner;\n";
  if (s.mask != MaskKind::None) {
    src += "    const i64 mbase = kiln_offset(r, mask_nd, mask_sizes, mask_strides);\n";
  }
  if (s.causal) src += "    const i64 qi = r % qlen;\n";
  // The value of element j after scale, mask and causal masking.
  std::string value =
      "    " + A + " v = " + load_expr(s.dtype, "x[base + j * inner]") + " * scale;\n";
  if (s.mask == MaskKind::Bool) {
    value += "    if (!mask[mbase + j * mask_col_stride]) v = -kiln_inf(v);\n";
  } else if (s.mask == MaskKind::Additive) {
    value += "    v += (" + A + ")" + load_expr(s.mask_dtype, "mask[mbase + j * mask_col_stride]") +
             ";\n";
  }
  if (s.causal) value += "    if (j > qi) v = -kiln_inf(v);\n";
  src += "    " + A + " m = -kiln_inf((" + A + ")0), s = 0;\n";
  src += "    for (i64 j = threadIdx.x; j < n; j += " + B + ") {\n" + value;
  if (s.cached) src += "      row[j] = v;\n";
  src += "      if (v != -kiln_inf(v)) kiln_sm_add(m, s, v, (" + A + ")1);\n    }\n";
  src +=
      "    for (int k = 16; k > 0; k >>= 1) {\n"
      "      const " +
      A +
      " m2 = kiln_shfl_xor(m, k), s2 = kiln_shfl_xor(s, k);\n"
      "      kiln_sm_add(m, s, m2, s2);\n    }\n";
  if (s.block > 32) {
    src +=
        "    __syncthreads();\n"
        "    if ((threadIdx.x & 31) == 0) { sm[threadIdx.x >> 5] = m; ss[threadIdx.x >> 5] = s; }\n"
        "    __syncthreads();\n"
        "    m = sm[0]; s = ss[0];\n"
        "    for (int w = 1; w < " +
        B + " / 32; ++w) kiln_sm_add(m, s, sm[w], ss[w]);\n";
  }
  src += "    if (m != m || m == kiln_inf(m)) s = kiln_nan(s);\n";
  // log_softmax is (v - m) - log(s), as the CPU kernel: folding m + log(s)
  // first rounds at the magnitude of m (2e-4 off at |v| ~ 5000 in float).
  src += s.log ? "    const " + A + " lse = kiln_log(s);\n"
               : "    const " + A + " inv = (" + A + ")1 / s;\n";
  src += "    for (i64 j = threadIdx.x; j < n; j += " + B + ") {\n";
  if (s.cached) {
    src += "      const " + A + " v = row[j];\n";
  } else {
    src += "  " + value;
  }
  src += "      y[base + j * inner] = " +
         store_expr(s.dtype, s.log ? std::string("(v - m) - lse") : "kiln_exp(v - m) * inv") +
         ";\n";
  src += "    }\n";
  if (s.cached) src += "    __syncthreads();\n";
  src += "  }\n}\n";
  return src;
}

int block_for(int64_t n) {
  return n <= 256 ? 32 : n <= 1024 ? 128 : n <= 4096 ? 256 : 512;
}

// Runs the softmax kernel over dense `x` ([outer, n, inner]) into fresh `y`.
void run_softmax(SoftmaxSpec spec, const Tensor& x, const Tensor& y, int64_t dim, double scale,
                 const Tensor& mask, int64_t qlen) {
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t i = 0; i < x.dim(); ++i) (i < dim ? outer : i == dim ? n : inner) *= x.size(i);
  const int64_t rows = outer * inner;
  if (rows == 0 || n == 0) return;
  spec.block = block_for(n);
  const int64_t acc_bytes = spec.dtype == kFloat64 ? 8 : 4;
  spec.cached = n * acc_bytes <= kSharedRowBytes;
  KilnDims msizes, mstrides;
  int mask_nd = 0;
  int64_t mcol = 0;
  if (mask.defined()) {
    // Rows are the scores' leading dims, row-major; the mask is addressed through them.
    mask_nd = static_cast<int>(mask.dim()) - 1;
    KILN_CHECK(mask_nd <= kMaxKernelDims,
               "[scaled_dot_product_attention] expected a mask of at most ", kMaxKernelDims + 1,
               " dims, got ", mask.dim());
    for (int d = 0; d < mask_nd; ++d) {
      msizes.v[d] = mask.size(d);
      mstrides.v[d] = mask.stride(d);
    }
    mcol = mask.stride(mask.dim() - 1);
  }
  cudaKernel_t k = load_kernel(
      softmax_name(spec), [&] { return softmax_source(spec); }, x.device().index());
  KernelArgs a;
  a.ptr(y).ptr(x).ptr(mask).i64(rows).i64(n).i64(inner);
  if (spec.dtype == kFloat64) {
    a.f64(scale);
  } else {
    a.f32(static_cast<float>(scale));
  }
  a.i64(qlen).i32(mask_nd).dims(msizes).dims(mstrides).i64(mcol);
  const size_t shared = spec.cached ? static_cast<size_t>(n * acc_bytes) : 0;
  launch(k, x.device(), grid_for(rows, 1), spec.block, shared, a);
  y.impl()->bump_version();
}

Tensor softmax_impl(bool log, const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  const char* op = log ? "log_softmax" : "softmax";
  Tensor meta =
      log ? kiln::log_softmax(meta_of(self), dim, dtype) : kiln::softmax(meta_of(self), dim, dtype);
  Tensor y = empty_tensor(meta.sizes(), meta.dtype(), self.device());
  if (y.numel() == 0) return y;
  const int64_t d = wrap_dim(dim, self.dim(), op);
  Tensor x = dense(self, meta.dtype());
  SoftmaxSpec spec;
  spec.dtype = meta.dtype();
  spec.log = log;
  run_softmax(spec, x, y, self.dim() == 0 ? 0 : d, 1.0, Tensor(), 1);
  return y;
}

Tensor softmax(const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  return softmax_impl(false, self, dim, dtype);
}
Tensor log_softmax(const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  return softmax_impl(true, self, dim, dtype);
}

}  // namespace

Tensor attention_softmax(const Tensor& scores, double scale, const std::optional<Tensor>& mask,
                         bool causal) {
  KILN_INTERNAL_ASSERT(scores.is_contiguous() && scores.dim() >= 2, "attention scores layout");
  Tensor y = empty_tensor(scores.sizes(), scores.dtype(), scores.device());
  if (y.numel() == 0) return y;
  SoftmaxSpec spec;
  spec.dtype = scores.dtype();
  spec.causal = causal;
  Tensor m;
  if (mask && mask->defined()) {
    spec.mask = mask->dtype() == kBool ? MaskKind::Bool : MaskKind::Additive;
    spec.mask_dtype = mask->dtype();
    m = mask->expand(scores.sizes());
  }
  run_softmax(spec, scores, y, scores.dim() - 1, scale, m, scores.size(-2));
  return y;
}

std::vector<std::pair<std::string, std::string>> softmax_source_samples() {
  std::vector<std::pair<std::string, std::string>> out;
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    for (bool log : {false, true}) {
      for (int block : {32, 512}) {
        for (bool cached : {false, true}) {
          SoftmaxSpec s{t, log, MaskKind::None, kBool, false, block, cached};
          out.emplace_back(softmax_name(s), softmax_source(s));
        }
      }
    }
    SoftmaxSpec b{t, false, MaskKind::Bool, kBool, true, 128, true};
    SoftmaxSpec a{t, false, MaskKind::Additive, t, false, 256, false};
    out.emplace_back(softmax_name(b), softmax_source(b));
    out.emplace_back(softmax_name(a), softmax_source(a));
  }
  return out;
}

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("softmax.int", &softmax);
  m.impl("log_softmax.int", &log_softmax);
}

}  // namespace kiln::jit::cuda
