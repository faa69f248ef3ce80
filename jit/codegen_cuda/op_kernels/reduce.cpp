// Reductions on CUDA: sum, mean, prod, amax, amin, max/min (all and .dim
// with indices), argmax, argmin, var, std, logsumexp, all, any, norm.
// Geometry comes from the CPU engine's ReducePlan (Note [Reduction engine]):
// size-1 dims dropped, reduced dims innermost, coalesced. Output shapes,
// dtypes and errors come from the op's Meta kernel.
//
// Note [CUDA reduction schedules]
// Each op is an accumulator (a, b, i) with identity, step, a commutative
// combine and a final write, spelled in CUDA C++. Two schedules:
//  - block: one block per output, threads stride over the reduced positions
//    and combine through warp shuffles and shared memory (a reduced dim that
//    is contiguous: rows). 32 threads when the reduction is short, 256 else;
//  - thread: one thread per output walking its reduction serially, so
//    neighbouring threads read neighbouring elements when the kept dim is the
//    dense one (summing dim 0 of a row-major matrix), or the reduction is tiny.
// A block schedule over few outputs and long reductions is split: blockIdx.y
// takes a chunk of the reduced positions, each block writes its Acc to a
// workspace, and the last block of an output to finish (a counter per
// output, zeroed at launch) combines the chunks' Accs in chunk order with
// the same combine and writes the result: deterministic, no float atomics.
// Accumulators: float32 for 16-bit and 32-bit floats, float64 for float64,
// int64 for integer sums and products (as PyTorch on CUDA). Ties in
// max/min/argmax/argmin go to the smaller position, NaN wins over numbers.

#include "runtime/cpu/reduce.h"

#include <cuda_runtime_api.h>

#include <bit>
#include <cmath>

#include "jit/codegen_cuda/kernel_loader.h"
#include "jit/codegen_cuda/op_kernels/op_sources.h"
#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_guard.h"

#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

enum class Kind : int {
  Sum,
  Mean,
  Prod,
  Amax,
  Amin,
  MaxIdx,  // value and index outputs (max.dim)
  MinIdx,
  ArgMax,  // index output only
  ArgMin,
  Var,
  Std,
  LogSumExp,
  All,
  Any,
  Norm0,
  Norm1,
  Norm2,
  NormInf,
  NormNegInf,
  NormP,
};
constexpr const char* kKindNames[] = {
    "sum", "mean", "prod", "amax", "amin",  "maxi",  "mini",  "argmax",  "argmin",   "var",
    "std", "lse",  "all",  "any",  "norm0", "norm1", "norm2", "norminf", "normninf", "normp"};

struct ReduceSpec {
  Kind kind = Kind::Sum;
  DType in = kFloat32;   // input dtype
  DType out = kFloat32;  // value output dtype (int64 for argmax/argmin)
  bool per_thread = false;
  int block = 256;
  bool split = false;  // blockIdx.y chunks combined by the last block
};

bool has_index(Kind k) {
  return k == Kind::MaxIdx || k == Kind::MinIdx || k == Kind::ArgMax || k == Kind::ArgMin;
}
bool is_max_like(Kind k) {
  return k == Kind::Amax || k == Kind::MaxIdx || k == Kind::ArgMax;
}

// The dtype the accumulator computes in.
DType compute_dtype(const ReduceSpec& s) {
  switch (s.kind) {
    case Kind::Amax:
    case Kind::Amin:
    case Kind::MaxIdx:
    case Kind::MinIdx:
    case Kind::ArgMax:
    case Kind::ArgMin:
      return s.in;
    case Kind::All:
    case Kind::Any:
      return kInt64;
    case Kind::Sum:
    case Kind::Mean:
      // Note [CUDA float sums]: float32 and 16-bit sums accumulate in
      // float64. The CPU kernel sums in float32 pairwise (error ~ log2(n)
      // ulp); a float32 running sum per thread drifts by ~sqrt(R / threads)
      // ulp, 1.7e-6 relative over a 90,000-long row. A memory-bound sum does
      // one add per element loaded, so float64 adds cost nothing measurable.
      return is_floating(s.out) ? kFloat64 : s.out;
    default:
      return s.out;
  }
}

std::string reduce_name(const ReduceSpec& s) {
  return std::string("kiln_reduce_") + kKindNames[static_cast<int>(s.kind)] + "_" +
         dtype_tag(s.in) + "_" + dtype_tag(s.out) +
         (compute_dtype(s) != s.out && is_floating(s.out) ? "_acc64" : "") +
         (s.per_thread ? "_thread" : "_block") + std::to_string(s.block) +
         (s.split ? "_split" : "");
}

// The element read as the accumulator's value: converted as the CPU kernel
// converts (a dtype= cast rounds to the result dtype first).
std::string convert(const ReduceSpec& s, const std::string& elem) {
  const DType c = compute_dtype(s);
  const std::string A = acc_type(c);
  std::string v = load_expr(s.in, elem);
  if (s.kind == Kind::All || s.kind == Kind::Any) return "(i64)(" + v + " != 0)";
  if (c == s.in) return "(" + A + ")" + v;
  if (is_floating(c) && c != s.out) {
    // A widened accumulator (Note [CUDA float sums]) still sees each element
    // rounded to the result dtype first, as the CPU kernel does.
    if (s.in == s.out) return "(" + A + ")" + v;
    return "(" + A + ")" + round_expr(s.out, "(" + std::string(acc_type(s.out)) + ")" + v);
  }
  if (is_floating(c)) return round_expr(c, "(" + A + ")" + v);
  if (c == kBool) return "(i64)(" + v + " != 0)";
  return "(" + A + ")" + v;  // to an integer accumulator: truncates floats
}

std::string ops_source(const ReduceSpec& s) {
  const DType c = compute_dtype(s);
  const std::string A = acc_type(c);
  const bool fl = is_floating(c);
  const std::string lo = fl ? "-kiln_inf((" + A + ")0)" : "(i64)(-0x7fffffffffffffffll - 1)";
  const std::string hi = fl ? "kiln_inf((" + A + ")0)" : "(i64)0x7fffffffffffffffll";
  std::string o = "struct Acc { " + A + " a; " + A + " b; i64 i; };\n";
  std::string ident = "0, 0, 0", step, comb, fin;
  // `p` is the op's scalar parameter (count, correction, or norm's p).
  switch (s.kind) {
    case Kind::Sum:
    case Kind::Mean:
      step = "r.a += x;";
      comb = "p.a += q.a;";
      fin = s.kind == Kind::Mean ? "r.a / p" : "r.a";
      break;
    case Kind::Prod:
      ident = "1, 0, 0";
      step = "r.a *= x;";
      comb = "p.a *= q.a;";
      fin = "r.a";
      break;
    case Kind::Amax:
    case Kind::Amin:
      ident = (s.kind == Kind::Amax ? lo : hi) + ", 0, 0";
      step = std::string("r.a = ") + (s.kind == Kind::Amax ? "kiln_max" : "kiln_min") + "(r.a, x);";
      comb =
          std::string("p.a = ") + (s.kind == Kind::Amax ? "kiln_max" : "kiln_min") + "(p.a, q.a);";
      fin = "r.a";
      break;
    case Kind::MaxIdx:
    case Kind::MinIdx:
    case Kind::ArgMax:
    case Kind::ArgMin: {
      const std::string better = is_max_like(s.kind) ? ">" : "<";
      ident = "0, 0, -1";
      // Is (v, j) preferred over (r.a, r.i)? NaN first, then the extreme, then the smaller
      // position.
      o += "__device__ __forceinline__ bool kiln_better(" + A +
           " v, i64 j, const Acc& r) {\n"
           "  if (r.i < 0) return true;\n"
           "  if (v != v) return !(r.a != r.a) || j < r.i;\n"
           "  if (r.a != r.a) return false;\n"
           "  return v " +
           better + " r.a || (v == r.a && j < r.i);\n}\n";
      step = "if (kiln_better(x, pos, r)) { r.a = x; r.i = pos; }";
      comb = "if (q.i >= 0 && kiln_better(q.a, q.i, p)) p = q;";
      fin = "r.a";
      break;
    }
    case Kind::Var:
    case Kind::Std:
      // Welford: a = mean, b = sum of squared deviations, i = count.
      step = "r.i += 1; { const " + A + " d = x - r.a; r.a += d / (" + A +
             ")r.i; r.b += d * (x - r.a); }";
      comb = "if (q.i > 0) { if (p.i == 0) { p = q; } else { const " + A + " n = (" + A +
             ")(p.i + q.i), d = q.a - p.a; p.a += d * ((" + A +
             ")q.i / n); p.b += q.b + d * d * ((" + A + ")p.i * (" + A +
             ")q.i / n); p.i += q.i; } }";
      fin = std::string(s.kind == Kind::Std ? "kiln_sqrt" : "") + "(r.b / kiln_max((" + A +
            ")r.i - p, (" + A + ")0))";
      break;
    case Kind::LogSumExp:
      ident = lo + ", 0, 0";
      o += "__device__ __forceinline__ void kiln_lse_add(Acc& r, " + A + " m2, " + A +
           " s2) {\n"
           "  const " +
           A +
           " mx = kiln_max(r.a, m2);\n"
           "  if (mx == -kiln_inf(mx) || mx == kiln_inf(mx)) { r.a = mx; r.b += s2; return; }\n"
           "  r.b = r.b * kiln_exp(r.a - mx) + s2 * kiln_exp(m2 - mx); r.a = mx;\n}\n";
      step = "if (x != -kiln_inf(x)) kiln_lse_add(r, x, (" + A + ")1);";
      comb = "kiln_lse_add(p, q.a, q.b);";
      fin = "(r.a == kiln_inf(r.a) || r.a == -kiln_inf(r.a)) ? r.a : r.a + kiln_log(r.b)";
      break;
    case Kind::All:
      ident = "1, 0, 0";
      step = "r.a = r.a && x;";
      comb = "p.a = p.a && q.a;";
      fin = "r.a";
      break;
    case Kind::Any:
      step = "r.a = r.a || x;";
      comb = "p.a = p.a || q.a;";
      fin = "r.a";
      break;
    case Kind::Norm0:
      step = "r.a += (x != 0);";
      comb = "p.a += q.a;";
      fin = "r.a";
      break;
    case Kind::Norm1:
      step = "r.a += kiln_abs(x);";
      comb = "p.a += q.a;";
      fin = "r.a";
      break;
    case Kind::Norm2:
      step = "r.a += x * x;";
      comb = "p.a += q.a;";
      fin = "kiln_sqrt(r.a)";
      break;
    case Kind::NormP:
      step = "r.a += kiln_pow(kiln_abs(x), p);";
      comb = "p.a += q.a;";
      fin = "kiln_pow(r.a, (" + A + ")1 / p)";
      break;
    case Kind::NormInf:
    case Kind::NormNegInf:
      ident = (s.kind == Kind::NormInf ? "0" : hi) + std::string(", 0, 0");
      step = std::string("r.a = ") + (s.kind == Kind::NormInf ? "kiln_max" : "kiln_min") +
             "(r.a, kiln_abs(x));";
      comb = std::string("p.a = ") + (s.kind == Kind::NormInf ? "kiln_max" : "kiln_min") +
             "(p.a, q.a);";
      fin = "r.a";
      break;
  }
  o += "__device__ __forceinline__ Acc kiln_ident() { Acc r = {" + ident + "}; return r; }\n";
  o += "__device__ __forceinline__ void kiln_step(Acc& r, " + A + " x, i64 pos, " + A + " p) { " +
       step + " }\n";
  o += "__device__ __forceinline__ void kiln_comb(Acc& p, const Acc& q) { " + comb + " }\n";
  o += "__device__ __forceinline__ " + A + " kiln_fin(const Acc& r, " + A + " p) { return " + fin +
       "; }\n";
  return o;
}

std::string reduce_source(const ReduceSpec& s) {
  const DType c = compute_dtype(s);
  const std::string A = acc_type(c), B = std::to_string(s.block);
  const bool idx = has_index(s.kind), vals = s.kind != Kind::ArgMax && s.kind != Kind::ArgMin;
  std::string src = op_prelude() + ops_source(s);
  src += "extern \"C\" __global__ void __launch_bounds__(" + B + ") " + reduce_name(s) + "(" +
         mem_type(s.out) + "* __restrict__ y, i64* __restrict__ yi, const " + mem_type(s.in) +
         "* __restrict__ x, i64 M, i64 R, int ond, KilnDims osize, KilnDims os_in, KilnDims "
         "os_y, KilnDims os_yi, int rnd, KilnDims rsize, KilnDims rs, " +
         A + " p" + (s.split ? ", i64 chunk, void* ws" : "") + ") {\n  kiln_grid_enter();\n";
  auto write = [&](const std::string& ind) {
    std::string w;
    if (vals)
      w += ind + "y[kiln_offset(m, ond, osize, os_y)] = " + store_expr(s.out, "kiln_fin(r, p)") +
           ";\n";
    if (idx) w += ind + "yi[kiln_offset(m, ond, osize, os_yi)] = r.i < 0 ? 0 : r.i;\n";
    return w;
  };
  const std::string load = convert(s, "x[base + kiln_offset(pos, rnd, rsize, rs)]");
  if (s.per_thread) {
    src += "  for (i64 m = (i64)blockIdx.x * " + B +
           " + threadIdx.x; m < M; m += (i64)gridDim.x * " + B +
           ") {\n"
           "    const i64 base = kiln_offset(m, ond, osize, os_in);\n"
           "    Acc r = kiln_ident();\n"
           "    for (i64 pos = 0; pos < R; ++pos) kiln_step(r, " +
           load + ", pos, p);\n" + write("    ") + "  }\n}\n";
    return src;
  }
  src += "  __shared__ Acc part[32];\n";
  src +=
      "  for (i64 m = blockIdx.x; m < M; m += gridDim.x) {\n"
      "    const i64 base = kiln_offset(m, ond, osize, os_in);\n"
      "    Acc r = kiln_ident();\n";
  if (s.split) {
    src += "    const i64 lo = (i64)blockIdx.y * chunk, hi = min(R, lo + chunk);\n";
    src += "    for (i64 pos = lo + threadIdx.x; pos < hi; pos += " + B + ") kiln_step(r, " + load +
           ", pos, p);\n";
  } else {
    src += "    for (i64 pos = threadIdx.x; pos < R; pos += " + B + ") kiln_step(r, " + load +
           ", pos, p);\n";
  }
  src +=
      "    for (int k = 16; k > 0; k >>= 1) {\n"
      "      Acc q; q.a = kiln_shfl_xor(r.a, k); q.b = kiln_shfl_xor(r.b, k); q.i = "
      "kiln_shfl_xor(r.i, k);\n"
      "      kiln_comb(r, q);\n    }\n";
  if (s.block > 32) {
    src +=
        "    __syncthreads();\n"
        "    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = r;\n"
        "    __syncthreads();\n"
        "    r = part[0];\n"
        "    for (int w = 1; w < " +
        B + " / 32; ++w) kiln_comb(r, part[w]);\n";
  }
  if (s.split) {
    src +=
        "    if (threadIdx.x == 0) {\n"
        "      volatile Acc* w = (volatile Acc*)ws + m * gridDim.y;\n"
        "      unsigned* count = (unsigned*)((Acc*)ws + M * gridDim.y) + m;\n"
        "      w[blockIdx.y].a = r.a; w[blockIdx.y].b = r.b; w[blockIdx.y].i = r.i;\n"
        "      __threadfence();\n"
        "      if (atomicAdd(count, 1u) == gridDim.y - 1) {\n"
        "        __threadfence();\n"
        "        r.a = w[0].a; r.b = w[0].b; r.i = w[0].i;\n"
        "        for (unsigned c = 1; c < gridDim.y; ++c) {\n"
        "          Acc q; q.a = w[c].a; q.b = w[c].b; q.i = w[c].i;\n"
        "          kiln_comb(r, q);\n        }\n" +
        write("        ") + "      }\n    }\n  }\n}\n";
    return src;
  }
  src += "    if (threadIdx.x == 0) {\n" + write("      ") + "    }\n  }\n}\n";
  return src;
}

// Fills `out` (innermost last) from the plan's innermost-first dims, in elements.
int to_dims(const DimVector& v, int64_t elem, KilnDims& out, const char* op) {
  const int nd = static_cast<int>(v.size());
  KILN_CHECK(nd <= kMaxKernelDims, "[", op, "] expected at most ", kMaxKernelDims,
             " dim groups after merging on cuda, got ", nd);
  for (int d = 0; d < nd; ++d) out.v[nd - 1 - d] = elem ? v[d] / elem : v[d];
  return nd;
}

// Runs kind over `self` reduced by `mask` into `values` (and `indices`).
void run_reduce(Kind kind, const char* op, const Tensor& self, uint64_t mask, const Tensor& values,
                const Tensor& indices, double param) {
  const Tensor& first = values.defined() ? values : indices;
  if (first.numel() == 0) return;
  std::vector<Tensor> outs;
  if (values.defined()) outs.push_back(values);
  if (indices.defined()) outs.push_back(indices);
  cpu::ReducePlan plan(self, mask, outs, has_index(kind));
  ReduceSpec spec;
  spec.kind = kind;
  spec.in = self.dtype();
  spec.out = values.defined() ? values.dtype() : kInt64;
  const int64_t isz = static_cast<int64_t>(self.element_size());
  KilnDims osize, os_in, os_y, os_yi, rsize, rs;
  const int ond = to_dims(plan.osize, 0, osize, op);
  to_dims(plan.ostride_in, isz, os_in, op);
  if (values.defined()) to_dims(plan.ostride_out[0], values.element_size(), os_y, op);
  if (indices.defined()) to_dims(plan.ostride_out[outs.size() - 1], 8, os_yi, op);
  const int rnd = to_dims(plan.rsize, 0, rsize, op);
  to_dims(plan.rstride, isz, rs, op);
  const int64_t M = plan.num_outputs, R = plan.reduce_size;
  // Outputs adjacent in memory with a strided reduction, or tiny reductions: a thread each.
  const bool outer = plan.osize[0] > 1 && plan.ostride_in[0] == isz && plan.rstride[0] != isz;
  spec.per_thread = R <= 16 || (outer && M >= 1024);
  spec.block = spec.per_thread ? 128 : R <= 1024 ? 32 : 256;
  // Few outputs over long reductions: chunks of at least kSplitMin positions,
  // about two blocks per multiprocessor in all.
  constexpr int64_t kSplitMin = 16 * 1024;
  const int sms = kiln::cuda::device_properties(self.device().index()).multiProcessorCount;
  int64_t splits = 1, chunk = R;
  if (!spec.per_thread && R >= 4 * kSplitMin && M < sms) {
    const int64_t want = std::min<int64_t>(R / kSplitMin, 2 * int64_t{sms} / M);
    if (want >= 2) {
      chunk = (R + want - 1) / want;
      chunk = (chunk + 4095) / 4096 * 4096;
      splits = (R + chunk - 1) / chunk;
      spec.split = splits > 1;
    }
  }
  cudaKernel_t k = load_kernel(
      reduce_name(spec), [&] { return reduce_source(spec); }, self.device().index());
  KernelArgs a;
  a.ptr(values).ptr(indices).ptr(self).i64(M).i64(R).i32(ond).dims(osize).dims(os_in);
  a.dims(os_y).dims(os_yi).i32(rnd).dims(rsize).dims(rs);
  if (compute_dtype(spec) == kFloat64) {
    a.f64(param);
  } else if (is_floating(compute_dtype(spec))) {
    a.f32(static_cast<float>(param));
  } else {
    a.i64(static_cast<int64_t>(param));
  }
  Tensor workspace;  // split: M * splits Accs, then a counter per output
  if (spec.split) {
    const int64_t acc_bytes = std::string(acc_type(compute_dtype(spec))) == "float" ? 16 : 24;
    const int64_t counters = M * splits * acc_bytes;
    workspace = empty_tensor({(counters + M * 4 + 7) / 8}, kFloat64, self.device());
    kiln::cuda::DeviceGuard guard(self.device().index());
    cudaStream_t stream = kiln::cuda::raw(kiln::cuda::Stream::current(self.device()));
    KILN_CUDA_CHECK_DEVICE(cudaMemsetAsync(static_cast<char*>(workspace.data_ptr()) + counters, 0,
                                           static_cast<size_t>(M * 4), stream),
                           self.device().index());
    a.i64(chunk).ptr(workspace);
  }
  const unsigned blocks = spec.per_thread ? grid_for(M, spec.block) : grid_for(M, 1);
  launch(k, self.device(), dim3(blocks, static_cast<unsigned>(splits)), spec.block, 0, a);
  for (const Tensor& t : outs) t.impl()->bump_version();
}

// A fresh result on self's device with the meta result's geometry.
Tensor like(const Tensor& meta, const Tensor& self) {
  return empty_tensor(meta.sizes(), meta.dtype(), self.device());
}

uint64_t mask_of(std::optional<IntArrayRef> dim, const Tensor& self, const char* op) {
  return cpu::reduction_dims(dim ? *dim : IntArrayRef(), self.dim(), op);
}

Tensor simple(Kind kind, const char* op, const Tensor& self, uint64_t mask, const Tensor& meta,
              double param = 0) {
  Tensor y = like(meta, self);
  run_reduce(kind, op, self, mask, y, Tensor(), param);
  return y;
}

using OptD = std::optional<DType>;
using OptIL = std::optional<IntArrayRef>;

int64_t count_of(const Tensor& self, uint64_t mask) {
  return cpu::reduced_count(self.sizes(), mask);
}

Tensor sum(const Tensor& s, OptD dtype) {
  return simple(Kind::Sum, "sum", s, mask_of(std::nullopt, s, "sum"), kiln::sum(meta_of(s), dtype));
}
Tensor sum_dim(const Tensor& s, OptIL dim, bool keepdim, OptD dtype) {
  Tensor meta = kiln::sum(meta_of(s), dim ? *dim : IntArrayRef(), keepdim, dtype);
  return simple(Kind::Sum, "sum", s, mask_of(dim, s, "sum"), meta);
}
Tensor mean(const Tensor& s, OptD dtype) {
  uint64_t mask = mask_of(std::nullopt, s, "mean");
  return simple(Kind::Mean, "mean", s, mask, kiln::mean(meta_of(s), dtype),
                static_cast<double>(count_of(s, mask)));
}
Tensor mean_dim(const Tensor& s, OptIL dim, bool keepdim, OptD dtype) {
  Tensor meta = kiln::mean(meta_of(s), dim ? *dim : IntArrayRef(), keepdim, dtype);
  uint64_t mask = mask_of(dim, s, "mean");
  return simple(Kind::Mean, "mean", s, mask, meta, static_cast<double>(count_of(s, mask)));
}
Tensor prod(const Tensor& s, OptD dtype) {
  return simple(Kind::Prod, "prod", s, mask_of(std::nullopt, s, "prod"),
                kiln::prod(meta_of(s), dtype));
}
Tensor prod_dim(const Tensor& s, int64_t dim, bool keepdim, OptD dtype) {
  return simple(Kind::Prod, "prod", s, mask_of(IntArrayRef(dim), s, "prod"),
                kiln::prod(meta_of(s), dim, keepdim, dtype));
}
Tensor amax(const Tensor& s, IntArrayRef dim, bool keepdim) {
  return simple(Kind::Amax, "amax", s, mask_of(dim, s, "amax"),
                kiln::amax(meta_of(s), dim, keepdim));
}
Tensor amin(const Tensor& s, IntArrayRef dim, bool keepdim) {
  return simple(Kind::Amin, "amin", s, mask_of(dim, s, "amin"),
                kiln::amin(meta_of(s), dim, keepdim));
}
Tensor max_all(const Tensor& s) {
  return simple(Kind::Amax, "max", s, mask_of(std::nullopt, s, "max"), kiln::max(meta_of(s)));
}
Tensor min_all(const Tensor& s) {
  return simple(Kind::Amin, "min", s, mask_of(std::nullopt, s, "min"), kiln::min(meta_of(s)));
}
std::tuple<Tensor, Tensor> minmax_dim(bool is_max, const Tensor& s, int64_t dim, bool keepdim) {
  const char* op = is_max ? "max" : "min";
  auto [mv, mi] =
      is_max ? kiln::max(meta_of(s), dim, keepdim) : kiln::min(meta_of(s), dim, keepdim);
  Tensor v = like(mv, s), i = like(mi, s);
  run_reduce(is_max ? Kind::MaxIdx : Kind::MinIdx, op, s, mask_of(IntArrayRef(dim), s, op), v, i,
             0);
  return {v, i};
}
std::tuple<Tensor, Tensor> max_dim(const Tensor& s, int64_t dim, bool keepdim) {
  return minmax_dim(true, s, dim, keepdim);
}
std::tuple<Tensor, Tensor> min_dim(const Tensor& s, int64_t dim, bool keepdim) {
  return minmax_dim(false, s, dim, keepdim);
}
Tensor arg_impl(bool is_max, const Tensor& s, std::optional<int64_t> dim, bool keepdim) {
  const char* op = is_max ? "argmax" : "argmin";
  Tensor meta =
      is_max ? kiln::argmax(meta_of(s), dim, keepdim) : kiln::argmin(meta_of(s), dim, keepdim);
  Tensor i = like(meta, s);
  uint64_t mask = dim ? mask_of(IntArrayRef(*dim), s, op) : mask_of(std::nullopt, s, op);
  // With dim=None the input is reduced whole; a keepdim result then has s's rank in ones.
  Tensor target = i;
  if (!dim && i.dim() != s.dim() && i.dim() != 0) target = i.reshape(DimVector(s.dim(), 1));
  run_reduce(is_max ? Kind::ArgMax : Kind::ArgMin, op, s, mask, Tensor(), target, 0);
  return i;
}
Tensor argmax(const Tensor& s, std::optional<int64_t> dim, bool keepdim) {
  return arg_impl(true, s, dim, keepdim);
}
Tensor argmin(const Tensor& s, std::optional<int64_t> dim, bool keepdim) {
  return arg_impl(false, s, dim, keepdim);
}
Tensor var_impl(bool is_std, const Tensor& s, OptIL dim, std::optional<int64_t> correction,
                bool keepdim) {
  const char* op = is_std ? "std" : "var";
  IntArrayRef d = dim ? *dim : IntArrayRef();
  Tensor meta = is_std ? kiln::std(meta_of(s), d, correction, keepdim)
                       : kiln::var(meta_of(s), d, correction, keepdim);
  return simple(is_std ? Kind::Std : Kind::Var, op, s, mask_of(dim, s, op), meta,
                static_cast<double>(correction.value_or(1)));
}
Tensor var(const Tensor& s, OptIL dim, std::optional<int64_t> correction, bool keepdim) {
  return var_impl(false, s, dim, correction, keepdim);
}
Tensor std_(const Tensor& s, OptIL dim, std::optional<int64_t> correction, bool keepdim) {
  return var_impl(true, s, dim, correction, keepdim);
}
Tensor logsumexp(const Tensor& s, IntArrayRef dim, bool keepdim) {
  Tensor meta = kiln::logsumexp(meta_of(s), dim, keepdim);
  return simple(Kind::LogSumExp, "logsumexp", s, mask_of(dim, s, "logsumexp"), meta);
}
Tensor all(const Tensor& s) {
  return simple(Kind::All, "all", s, mask_of(std::nullopt, s, "all"), kiln::all(meta_of(s)));
}
Tensor all_dim(const Tensor& s, int64_t dim, bool keepdim) {
  return simple(Kind::All, "all", s, mask_of(IntArrayRef(dim), s, "all"),
                kiln::all(meta_of(s), dim, keepdim));
}
Tensor any(const Tensor& s) {
  return simple(Kind::Any, "any", s, mask_of(std::nullopt, s, "any"), kiln::any(meta_of(s)));
}
Tensor any_dim(const Tensor& s, int64_t dim, bool keepdim) {
  return simple(Kind::Any, "any", s, mask_of(IntArrayRef(dim), s, "any"),
                kiln::any(meta_of(s), dim, keepdim));
}
Tensor norm_impl(const Tensor& s, const Scalar& p, IntArrayRef dim, bool keepdim,
                 const Tensor& meta) {
  const double pv = p.to_double();
  Kind kind = pv == 0           ? Kind::Norm0
              : pv == 1         ? Kind::Norm1
              : pv == 2         ? Kind::Norm2
              : pv == INFINITY  ? Kind::NormInf
              : pv == -INFINITY ? Kind::NormNegInf
                                : Kind::NormP;
  Tensor y = like(meta, s);
  if (s.numel() == 0) {
    y.zero_();  // PyTorch 1.13 returns zeros for an empty input, whatever p
    return y;
  }
  run_reduce(kind, "norm", s, mask_of(dim, s, "norm"), y, Tensor(), pv);
  return y;
}
Tensor norm_scalar(const Tensor& s, const Scalar& p) {
  return norm_impl(s, p, IntArrayRef(), false, kiln::norm(meta_of(s), p));
}
Tensor norm_dim(const Tensor& s, const std::optional<Scalar>& p, IntArrayRef dim, bool keepdim) {
  return norm_impl(s, p.value_or(Scalar(2)), dim, keepdim, kiln::norm(meta_of(s), p, dim, keepdim));
}

}  // namespace

NamedSources reduce_source_samples() {
  NamedSources out;
  for (int k = 0; k <= static_cast<int>(Kind::NormP); ++k) {
    const Kind kind = static_cast<Kind>(k);
    std::vector<std::pair<DType, DType>> types;
    if (kind == Kind::All || kind == Kind::Any) {
      types = {{kBool, kBool}, {kFloat32, kBool}, {kUInt8, kUInt8}};
    } else if (kind == Kind::ArgMax || kind == Kind::ArgMin) {
      types = {{kFloat32, kInt64}, {kBFloat16, kInt64}, {kInt32, kInt64}};
    } else if (kind == Kind::Sum || kind == Kind::Prod) {
      types = {{kFloat32, kFloat32}, {kFloat16, kFloat16},  {kInt32, kInt64},
               {kBool, kInt64},      {kFloat32, kBFloat16}, {kFloat64, kFloat64}};
    } else if (kind == Kind::Amax || kind == Kind::Amin || kind == Kind::MaxIdx ||
               kind == Kind::MinIdx) {
      types = {{kFloat32, kFloat32}, {kBFloat16, kBFloat16}, {kInt64, kInt64}, {kBool, kBool}};
    } else {
      types = {{kFloat32, kFloat32}, {kFloat16, kFloat16}, {kFloat64, kFloat64}};
    }
    for (auto [in, o] : types) {
      for (bool per_thread : {false, true}) {
        ReduceSpec s{kind, in, o, per_thread, per_thread ? 128 : 256};
        out.emplace_back(reduce_name(s), reduce_source(s));
      }
      ReduceSpec s{kind, in, o, false, 256, true};
      out.emplace_back(reduce_name(s), reduce_source(s));
    }
  }
  return out;
}

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("sum", &sum);
  m.impl("sum.dim_IntList", &sum_dim);
  m.impl("mean", &mean);
  m.impl("mean.dim", &mean_dim);
  m.impl("prod", &prod);
  m.impl("prod.dim_int", &prod_dim);
  m.impl("amax", &amax);
  m.impl("amin", &amin);
  m.impl("max", &max_all);
  m.impl("min", &min_all);
  m.impl("max.dim", &max_dim);
  m.impl("min.dim", &min_dim);
  m.impl("argmax", &argmax);
  m.impl("argmin", &argmin);
  m.impl("var.correction", &var);
  m.impl("std.correction", &std_);
  m.impl("logsumexp", &logsumexp);
  m.impl("all", &all);
  m.impl("all.dim", &all_dim);
  m.impl("any", &any);
  m.impl("any.dim", &any_dim);
  m.impl("norm.Scalar", &norm_scalar);
  m.impl("norm.ScalarOpt_dim", &norm_dim);
}

}  // namespace kiln::jit::cuda
