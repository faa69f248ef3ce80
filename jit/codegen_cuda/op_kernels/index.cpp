// Indexing on CUDA: embedding, index_select, gather, scatter (src, value),
// scatter_add (atomics), the scatter reductions (Note [CUDA scatter
// reductions]), index_copy and index_copy_ (the KV-cache write), as one
// generated kernel family over an iteration space. Shapes, dtypes and
// argument errors come from the ops' Meta kernels.
//
// Note [CUDA index bounds]
// Index values live on the device, so they are checked there: an index
// outside [0, size) is skipped (no access out of bounds, its output element
// left as it was) and recorded in a two-word error flag, which the op reads
// back after the kernel and turns into "[op] index 7 is out of bounds for
// dimension 0 with size 5" (Note [Device error flags] in op_support.h: while
// a graph is captured, the flag is the graph's error slot).
//
// Note [Index kernel latency]
// These kernels are often tiny (a KV-cache write is one row per head, an
// embedding lookup one row per token), so their time is latency: an H200
// took 5.2 us for a 768-element index_copy_ when each of 256 threads took
// 3 elements of one block and split its linear index with 64-bit divisions.
// Now each block takes 256 elements, and the split uses 32-bit arithmetic
// when the element count and every size fit in int32 (offsets stay 64-bit).

#include <limits>

#include "jit/codegen_cuda/kernel_loader.h"
#include "jit/codegen_cuda/op_kernels/op_sources.h"
#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/index_scatter_reduce.h"
#include "runtime/cpu/index_utils.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/cuda/device_guard.h"

#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

// Which side the index value addresses, and how the element is written.
enum class Mode : int { Gather, Scatter, ScatterAdd, ScatterValue, ScatterAddOrdered };
constexpr const char* kModeNames[] = {"gather", "scatter", "scatter_add", "scatter_value",
                                      "scatter_add_ordered"};

struct IndexSpec {
  Mode mode = Mode::Gather;
  DType dtype = kFloat32;
  DType index = kInt64;
  bool narrow = false;  // 32-bit index arithmetic (Note [Index kernel latency])
};

std::string index_name(const IndexSpec& s) {
  return std::string("kiln_index_") + kModeNames[static_cast<int>(s.mode)] + "_" +
         dtype_tag(s.dtype) + "_" + dtype_tag(s.index) + (s.narrow ? "_n32" : "");
}

// An atomic add into a 1- or 2-byte element: a CAS loop on its aligned word.
std::string small_atomic_add(DType t) {
  const bool two = itemsize(t) == 2;
  std::string src =
      "__device__ __forceinline__ void kiln_atomic_add(" + std::string(mem_type(t)) + "* p, " +
      acc_type(t) +
      " v) {\n"
      "  unsigned* w = (unsigned*)((unsigned long long)p & ~3ull);\n"
      "  const unsigned shift = (unsigned)((unsigned long long)p & 3ull) * 8u;\n"
      "  const unsigned mask = " +
      (two ? "0xffffu" : "0xffu") +
      " << shift;\n"
      "  unsigned old = *w, assumed;\n"
      "  do {\n"
      "    assumed = old;\n"
      "    const " +
      mem_type(t) + " cur = (" + mem_type(t) + ")((assumed & mask) >> shift);\n    const " +
      mem_type(t) + " next = " + store_expr(t, load_expr(t, "cur") + " + v") +
      ";\n"
      "    old = atomicCAS(w, assumed, (assumed & ~mask) | (((unsigned)next << shift) & mask));\n"
      "  } while (assumed != old);\n}\n";
  return src;
}

// Note [CUDA ordered scatter_add]
// scatter_add into float16 / bfloat16 rounds after every addition, so the
// result depends on the order of the additions: atomics would give a different
// answer per run, several units in the last place away from the CPU's. These
// types take one thread per line along `dim` instead (lines write disjoint
// elements), adding in index order as the CPU kernel does: the same result,
// every run. Wider types keep atomics, whose order changes only the last bit.
std::string ordered_scatter_add(const IndexSpec& s) {
  return "    for (i64 j = 0; j < line; ++j) {\n"
         "      const i64 k = (i64)index[oi + j * idx_step];\n"
         "      if (k < 0 || k >= bound) {\n"
         "        if (err) { kiln_flag_error(err, k); }\n"
         "        break;\n"
         "      }\n"
         "      " +
         std::string(mem_type(s.dtype)) +
         "* p = dst + od + k * kstride;\n"
         "      *p = " +
         store_expr(s.dtype, load_expr(s.dtype, "*p") + " + " +
                                 load_expr(s.dtype, "src[os + j * src_step]")) +
         ";\n    }\n  }\n}\n";
}

std::string index_source(const IndexSpec& s) {
  const std::string T = mem_type(s.dtype);
  const std::string IX = s.narrow ? "int" : "i64";
  std::string src = op_prelude();
  if (s.mode == Mode::ScatterAdd && itemsize(s.dtype) <= 2) src += small_atomic_add(s.dtype);
  src += "extern \"C\" __global__ void __launch_bounds__(256) " + index_name(s) + "(" + T +
         "* __restrict__ dst, const " + T + "* __restrict__ src, const " + mem_type(s.index) +
         "* __restrict__ index, i64 n, int nd, KilnDims sizes, KilnDims dst_st, KilnDims src_st, "
         "KilnDims idx_st, i64 kstride, i64 bound, double value, i64* err, i64 line, "
         "i64 src_step, i64 idx_step) {\n"
         "  kiln_grid_enter();\n"
         "  for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < n; i += (i64)gridDim.x * 256) {\n"
         "    " +
         IX + " rem = (" + IX +
         ")i;\n"
         "    i64 od = 0, os = 0, oi = 0;\n"
         "    for (int d = nd - 1; d >= 0; --d) {\n"
         "      const " +
         IX + " sz = (" + IX +
         ")sizes.v[d];\n"
         "      const i64 c = rem % sz;\n"
         "      rem /= sz;\n"
         "      od += c * dst_st.v[d]; os += c * src_st.v[d]; oi += c * idx_st.v[d];\n"
         "    }\n";
  if (s.mode == Mode::ScatterAddOrdered) return src + ordered_scatter_add(s);
  src +=
      "    const i64 k = (i64)index[oi];\n"
      "    if (k < 0 || k >= bound) {\n"
      "      if (err) { kiln_flag_error(err, k); }\n"
      "      continue;\n"
      "    }\n";
  switch (s.mode) {
    case Mode::Gather:
      src += "    dst[od] = src[os + k * kstride];\n";
      break;
    case Mode::Scatter:
      src += "    dst[od + k * kstride] = src[os];\n";
      break;
    case Mode::ScatterValue:
      // A double reaches an integer type through int64, as on the CPU: -1 into
      // uint8 is 255 (a direct double -> unsigned conversion gives 0).
      src += "    dst[od + k * kstride] = " +
             store_expr(s.dtype, is_integral(s.dtype, false) ? "(i64)value" : "value") + ";\n";
      break;
    case Mode::ScatterAddOrdered:
      break;
    case Mode::ScatterAdd:
      if (itemsize(s.dtype) <= 2) {
        src +=
            "    kiln_atomic_add(dst + od + k * kstride, " + load_expr(s.dtype, "src[os]") + ");\n";
      } else if (s.dtype == kInt64) {
        src +=
            "    atomicAdd((unsigned long long*)(dst + od + k * kstride), (unsigned long "
            "long)src[os]);\n";
      } else {
        src += "    atomicAdd(dst + od + k * kstride, src[os]);\n";
      }
      break;
  }
  src += "  }\n}\n";
  return src;
}

// One launch: `iter` is the iteration shape; per operand strides over it (the
// indexed side's stride along `dim` is 0, `kstride` is its stride there).
struct IndexLaunch {
  DimVector iter;
  DimVector dst_st, src_st, idx_st;
  int64_t kstride = 0;
  int64_t bound = 0;
  int64_t dim = 0;
  double value = 0;
  // ScatterAddOrdered: each iteration is a line of `line` steps along dim.
  int64_t line = 1, src_step = 0, idx_step = 0;
};

// The error flag of an index launch (Note [CUDA index bounds]).
DeviceErrorFlag bounds_flag(const Tensor& dst, const char* op, const IndexLaunch& l) {
  return DeviceErrorFlag(dst.device(),
                         std::string("[") + op + "] index {} is out of bounds for dimension " +
                             std::to_string(l.dim) + " with size " + std::to_string(l.bound));
}

void run_index(const char* op, Mode mode, const Tensor& dst, const Tensor& src, const Tensor& index,
               const IndexLaunch& l) {
  int64_t n = 1;
  for (int64_t s : l.iter) n *= s;
  if (n == 0) return;
  const int nd = static_cast<int>(l.iter.size());
  KILN_CHECK(nd <= kMaxKernelDims, "[", op, "] expected at most ", kMaxKernelDims,
             " dims on cuda, got ", nd);
  KilnDims sizes, ds, ss, is;
  for (int d = 0; d < nd; ++d) {
    sizes.v[d] = l.iter[d];
    ds.v[d] = l.dst_st[d];
    ss.v[d] = src.defined() ? l.src_st[d] : 0;
    is.v[d] = l.idx_st[d];
  }
  // Note [Index kernel latency]: n bounds every size (none is 0 here).
  IndexSpec spec{mode, dst.dtype(), index.dtype(), n <= std::numeric_limits<int32_t>::max()};
  const DeviceErrorFlag flag = bounds_flag(dst, op, l);
  cudaKernel_t k = load_kernel(
      index_name(spec), [&] { return index_source(spec); }, dst.device().index());
  KernelArgs a;
  a.ptr(dst).ptr(src).ptr(index).i64(n).i32(nd).dims(sizes).dims(ds).dims(ss).dims(is);
  a.i64(l.kstride).i64(l.bound).f64(l.value).ptr(flag.ptr());
  a.i64(l.line).i64(l.src_step).i64(l.idx_step);
  launch(k, dst.device(), grid_for(n, 256), 256, 0, a);
  dst.impl()->bump_version();
  flag.check();
}

DimVector zero_at(DimVector st, int64_t dim) {
  st[dim] = 0;
  return st;
}

// Strides of a 1-D (or 0-d) index read along `dim` of an `nd`-dim iteration.
DimVector along(const Tensor& index, int64_t dim, size_t nd) {
  DimVector st(nd, 0);
  st[dim] = index.dim() == 0 ? 0 : index.stride(0);
  return st;
}

Tensor clone_of(const Tensor& self) {
  Tensor out = empty_tensor(self.sizes(), self.dtype(), self.device());
  copy_into_cuda(out, self);
  return out;
}

void check_devices(const char* op, const Tensor& self, const Tensor& index, const Tensor& other) {
  check_device(index, self.device(), op, "index");
  check_device(other, self.device(), op, "src");
}

Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index) {
  const char* op = "index_select";
  Tensor meta = kiln::index_select(meta_of(self), dim, meta_of(index));
  check_devices(op, self, index, Tensor());
  Tensor out = empty_tensor(meta.sizes(), meta.dtype(), self.device());
  const int64_t d = wrap_dim(dim, self.dim(), op);
  IndexLaunch l;
  l.iter = cpu::nonempty_sizes(out);
  l.dst_st = cpu::nonempty_strides(out);
  l.src_st = zero_at(cpu::nonempty_strides(self), d);
  l.idx_st = along(index, d, l.iter.size());
  l.kstride = cpu::nonempty_strides(self)[d];
  l.bound = cpu::nonempty_sizes(self)[d];
  l.dim = d;
  run_index(op, Mode::Gather, out, self, index, l);
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx,
                 bool scale_grad_by_freq, bool sparse) {
  Tensor meta = kiln::embedding(meta_of(weight), meta_of(indices), padding_idx);
  check_device(indices, weight.device(), "embedding", "indices");
  Tensor out = empty_tensor(meta.sizes(), meta.dtype(), weight.device());
  const Tensor idx = dense(indices);
  IndexLaunch l;
  // [indices..., D] walked as [N, D]: row k of the weight for position i.
  const int64_t n = idx.numel(), dcols = weight.size(1);
  l.iter = {n, dcols};
  l.dst_st = {dcols, 1};
  l.src_st = {0, weight.stride(1)};
  l.idx_st = {1, 0};
  l.kstride = weight.stride(0);
  l.bound = weight.size(0);
  if (dcols == 0) {
    // Indices are checked even when the rows are empty (a weight of shape [rows, 0]): a
    // pass that reads one element of a scratch tensor per index instead of weight rows.
    Tensor scratch = empty_tensor({n, 1}, weight.dtype(), weight.device());
    scratch.zero_();
    l.iter = {n, 1};
    l.src_st = {0, 0};
    l.dst_st = {1, 0};
    l.kstride = 0;
    run_index("embedding", Mode::Gather, scratch, scratch, idx, l);
    return out;
  }
  run_index("embedding", Mode::Gather, out, weight, idx, l);
  return out;
}

Tensor gather(const Tensor& self, int64_t dim, const Tensor& index, bool sparse_grad) {
  const char* op = "gather";
  Tensor meta = kiln::gather(meta_of(self), dim, meta_of(index));
  check_devices(op, self, index, Tensor());
  Tensor out = empty_tensor(meta.sizes(), meta.dtype(), self.device());
  const int64_t d = self.dim() == 0 ? 0 : wrap_dim(dim, self.dim(), op);
  IndexLaunch l;
  l.iter = cpu::nonempty_sizes(index);
  l.dst_st = cpu::nonempty_strides(out);
  l.src_st = zero_at(cpu::nonempty_strides(self), d);
  l.idx_st = cpu::nonempty_strides(index);
  l.kstride = cpu::nonempty_strides(self)[d];
  l.bound = cpu::nonempty_sizes(self)[d];
  l.dim = d;
  run_index(op, Mode::Gather, out, self, index, l);
  return out;
}

// The geometry of a scatter along dim d: the index's iteration space, out's
// strides with dim d zeroed (the index picks it), src's (or none for a value).
IndexLaunch scatter_launch(const Tensor& out, int64_t d, const Tensor& index, const Tensor& src) {
  IndexLaunch l;
  l.iter = cpu::nonempty_sizes(index);
  l.dst_st = zero_at(cpu::nonempty_strides(out), d);
  l.src_st = src.defined() ? cpu::nonempty_strides(src) : DimVector(l.iter.size(), 0);
  l.idx_st = cpu::nonempty_strides(index);
  l.kstride = cpu::nonempty_strides(out)[d];
  l.bound = cpu::nonempty_sizes(out)[d];
  l.dim = d;
  return l;
}

// Writes src (or value) into `out` at index positions along dim.
void scatter_into(const char* op, Mode mode, const Tensor& out, int64_t dim, const Tensor& index,
                  const Tensor& src, double value) {
  const int64_t d = out.dim() == 0 ? 0 : wrap_dim(dim, out.dim(), op);
  IndexLaunch l = scatter_launch(out, d, index, src);
  l.value = value;
  if (mode == Mode::ScatterAdd && is_reduced_float(out.dtype())) {
    // Note [CUDA ordered scatter_add]
    mode = Mode::ScatterAddOrdered;
    l.line = l.iter[d];
    l.src_step = l.src_st[d];
    l.idx_step = l.idx_st[d];
    l.iter[d] = 1;
  }
  run_index(op, mode, out, src, index, l);
}

Tensor scatter_src(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  kiln::scatter(meta_of(self), dim, meta_of(index), meta_of(src));
  check_devices("scatter", self, index, src);
  Tensor out = clone_of(self);
  scatter_into("scatter", Mode::Scatter, out, dim, index, dense(src, self.dtype()), 0);
  return out;
}
Tensor scatter_value(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value) {
  kiln::scatter(meta_of(self), dim, meta_of(index), value);
  check_devices("scatter", self, index, Tensor());
  Tensor out = clone_of(self);
  scatter_into("scatter", Mode::ScatterValue, out, dim, index, Tensor(), value.to_double());
  return out;
}
Tensor scatter_src_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor m = meta_of(self);
  kiln::scatter_(m, dim, meta_of(index), meta_of(src));
  check_devices("scatter_", self, index, src);
  scatter_into("scatter_", Mode::Scatter, self, dim, index, dense(src, self.dtype()), 0);
  return self;
}
Tensor scatter_value_(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value) {
  kiln::scatter(meta_of(self), dim, meta_of(index), value);  // scatter_'s checks
  check_devices("scatter_", self, index, Tensor());
  scatter_into("scatter_", Mode::ScatterValue, self, dim, index, Tensor(), value.to_double());
  return self;
}
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  kiln::scatter_add(meta_of(self), dim, meta_of(index), meta_of(src));
  check_devices("scatter_add", self, index, src);
  Tensor out = clone_of(self);
  scatter_into("scatter_add", Mode::ScatterAdd, out, dim, index, dense(src, self.dtype()), 0);
  return out;
}
Tensor scatter_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor m = meta_of(self);
  kiln::scatter_add_(m, dim, meta_of(index), meta_of(src));
  check_devices("scatter_add_", self, index, src);
  scatter_into("scatter_add_", Mode::ScatterAdd, self, dim, index, dense(src, self.dtype()), 0);
  return self;
}

// --- scatter reductions -------------------------------------------------------------

// Note [CUDA scatter reductions]
// scatter.reduce and scatter_reduce.two (Note [Scatter reductions] in
// runtime/cpu/index_scatter_reduce.h) take one thread per line of the index
// along dim, as the ordered scatter_add does (Note [CUDA ordered
// scatter_add]): lines write disjoint elements, so there are no atomics, and
// each thread combines its line in index order, rounding 16-bit floats at
// every step like the CPU kernel: the same bits as the CPU, every run. A
// thread first checks its line's indices (and, without include_self, writes
// the reduction's identity at them); "mean" counts the values per element in
// a dense int64 buffer, then divides each counted element once and clears its
// count. Parallelism is the number of lines, not the number of elements.
struct ReduceSpec {
  cpu::ScatterReduce op = cpu::ScatterReduce::Sum;
  bool include_self = true;
  bool value = false;  // scatter.value_reduce: one value, no src
  DType dtype = kFloat32;
};

std::string reduce_kernel_name(const ReduceSpec& s) {
  return std::string("kiln_scatter_") + cpu::scatter_reduce_name(s.op) +
         (s.include_self ? "" : "_exclude_self") + (s.value ? "_value" : "") + "_" +
         dtype_tag(s.dtype);
}

// a combined with b, both acc_type(t) expressions.
std::string combine_expr(const ReduceSpec& s, const std::string& a, const std::string& b) {
  using R = cpu::ScatterReduce;
  const bool sum = s.op == R::Sum || s.op == R::Mean;
  if (s.dtype == kBool) return sum || s.op == R::Max ? a + " | " + b : a + " & " + b;
  if (!is_floating(s.dtype)) {
    // Wraps as the CPU's unsigned 64-bit arithmetic does.
    if (sum) return "(i64)((unsigned long long)" + a + " + (unsigned long long)" + b + ")";
    if (s.op == R::Prod)
      return "(i64)((unsigned long long)" + a + " * (unsigned long long)" + b + ")";
    return s.op == R::Max ? "(" + a + " < " + b + " ? " + b + " : " + a + ")"
                          : "(" + b + " < " + a + " ? " + b + " : " + a + ")";
  }
  if (sum) return a + " + " + b;
  if (s.op == R::Prod) return a + " * " + b;
  // NaN wins, from either side.
  return s.op == R::Max
             ? "(" + b + " != " + b + " || " + a + " < " + b + " ? " + b + " : " + a + ")"
             : "(" + b + " != " + b + " || " + b + " < " + a + " ? " + b + " : " + a + ")";
}

// The reduction's identity as an acc_type expression.
std::string identity_expr(const ReduceSpec& s) {
  using R = cpu::ScatterReduce;
  if (s.op == R::Sum || s.op == R::Mean) return "0";
  if (s.op == R::Prod) return "1";
  const bool max = s.op == R::Max;
  if (is_floating(s.dtype)) {
    const std::string inf = std::string("kiln_inf((") + acc_type(s.dtype) + ")0)";
    return max ? "-" + inf : inf;
  }
  switch (s.dtype) {
    case kBool:
      return max ? "0" : "1";
    case kUInt8:
      return max ? "0" : "255";
    case kInt8:
      return max ? "-128" : "127";
    case kInt16:
      return max ? "-32768" : "32767";
    case kInt32:
      return max ? "(-2147483647ll - 1)" : "2147483647ll";
    default:
      return max ? "(-9223372036854775807ll - 1)" : "9223372036854775807ll";
  }
}

std::string reduce_source(const ReduceSpec& s) {
  const std::string T = mem_type(s.dtype), A = acc_type(s.dtype);
  const bool mean = s.op == cpu::ScatterReduce::Mean;
  std::string src = op_prelude();
  src += "extern \"C\" __global__ void __launch_bounds__(256) " + reduce_kernel_name(s) + "(" + T +
         "* __restrict__ dst, const " + T +
         "* __restrict__ src, const i64* __restrict__ index, i64 n, int nd, KilnDims sizes, "
         "KilnDims dst_st, KilnDims src_st, KilnDims idx_st, KilnDims cnt_st, i64 kstride, "
         "i64 bound, i64 value_bits, i64* err, i64 line, i64 src_step, i64 idx_step, "
         "i64* __restrict__ cnt, i64 cnt_kstride) {\n"
         "  kiln_grid_enter();\n"
         "  const " +
         T + " value = *(const " + T +
         "*)&value_bits;\n"
         "  for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < n; i += (i64)gridDim.x * 256) {\n"
         "    i64 rem = i, od = 0, os = 0, oi = 0, oc = 0;\n"
         "    for (int d = nd - 1; d >= 0; --d) {\n"
         "      const i64 c = rem % sizes.v[d]; rem /= sizes.v[d];\n"
         "      od += c * dst_st.v[d]; os += c * src_st.v[d]; oi += c * idx_st.v[d]; "
         "oc += c * cnt_st.v[d];\n"
         "    }\n"
         "    bool ok = true;\n"
         "    for (i64 j = 0; j < line; ++j) {\n"
         "      const i64 k = index[oi + j * idx_step];\n"
         "      if (k < 0 || k >= bound) { if (err) kiln_flag_error(err, k); "
         "ok = false; break; }\n";
  if (!s.include_self) {
    src += "      dst[od + k * kstride] = " + store_expr(s.dtype, identity_expr(s)) + ";\n";
  }
  src +=
      "    }\n"
      "    if (!ok) continue;\n"
      "    for (i64 j = 0; j < line; ++j) {\n"
      "      const i64 k = index[oi + j * idx_step];\n"
      "      " +
      T + "* p = dst + od + k * kstride;\n      const " + A + " a = " + load_expr(s.dtype, "*p") +
      ";\n      const " + A +
      " b = " + load_expr(s.dtype, s.value ? "value" : "src[os + j * src_step]") +
      ";\n      *p = " + store_expr(s.dtype, combine_expr(s, "a", "b")) + ";\n";
  if (mean) src += "      cnt[oc + k * cnt_kstride] += 1;\n";
  src += "    }\n";
  if (mean) {
    std::string div;
    if (is_floating(s.dtype)) {
      div =
          "      *p = " + store_expr(s.dtype, load_expr(s.dtype, "*p") + " / (" + A + ")m") + ";\n";
    } else {
      div = "      const i64 a = " + load_expr(s.dtype, "*p") +
            ";\n      i64 q = a / m;\n      if (a % m != 0 && a < 0) --q;\n      *p = " +
            store_expr(s.dtype, "q") + ";\n";
    }
    src +=
        "    for (i64 j = 0; j < line; ++j) {\n"
        "      const i64 k = index[oi + j * idx_step];\n"
        "      i64* c = cnt + oc + k * cnt_kstride;\n"
        "      if (*c == 0) continue;\n"
        "      const i64 m = *c + " +
        std::string(s.include_self ? "1" : "0") +
        ";\n"
        "      *c = 0;\n"
        "      if (m == 1) continue;\n"
        "      " +
        T + "* p = dst + od + k * kstride;\n" + div + "    }\n";
  }
  return src + "  }\n}\n";
}

// Combines src (or value) into `out` (self or its copy) along dim.
void scatter_reduce_into(const char* op, const Tensor& out, int64_t dim, const Tensor& index,
                         const Tensor& src, const Scalar* value, cpu::ScatterReduce r,
                         bool include_self) {
  if (index.numel() == 0) return;
  const int64_t d = out.dim() == 0 ? 0 : wrap_dim(dim, out.dim(), op);
  const ReduceSpec spec{r, include_self, value != nullptr, out.dtype()};
  IndexLaunch l = scatter_launch(out, d, index, src);
  l.line = l.iter[d];
  l.src_step = l.src_st[d];
  l.idx_step = l.idx_st[d];
  l.iter[d] = 1;
  DimVector cnt_st(l.iter.size(), 0);
  int64_t cnt_kstride = 0;
  Tensor cnt;
  if (r == cpu::ScatterReduce::Mean) {
    cnt = empty_tensor(cpu::nonempty_sizes(out), kInt64, out.device());
    cnt.zero_();
    cnt_st = zero_at(DimVector(cnt.strides()), d);
    cnt_kstride = cnt.stride(d);
  }
  uint64_t value_bits = 0;
  if (value) store_scalar(&value_bits, out.dtype(), *value);
  int64_t n = 1;
  for (int64_t x : l.iter) n *= x;
  const int nd = static_cast<int>(l.iter.size());
  KILN_CHECK(nd <= kMaxKernelDims, "[", op, "] expected at most ", kMaxKernelDims,
             " dims on cuda, got ", nd);
  KilnDims sizes, ds, ss, is, cs;
  for (int k = 0; k < nd; ++k) {
    sizes.v[k] = l.iter[k];
    ds.v[k] = l.dst_st[k];
    ss.v[k] = l.src_st[k];
    is.v[k] = l.idx_st[k];
    cs.v[k] = cnt_st[k];
  }
  const DeviceErrorFlag flag = bounds_flag(out, op, l);
  cudaKernel_t k = load_kernel(
      reduce_kernel_name(spec), [&] { return reduce_source(spec); }, out.device().index());
  KernelArgs a;
  a.ptr(out).ptr(src).ptr(index).i64(n).i32(nd).dims(sizes).dims(ds).dims(ss).dims(is).dims(cs);
  a.i64(l.kstride).i64(l.bound).i64(static_cast<int64_t>(value_bits)).ptr(flag.ptr()).i64(l.line);
  a.i64(l.src_step).i64(l.idx_step).ptr(cnt).i64(cnt_kstride);
  launch(k, out.device(), grid_for(n, 256), 256, 0, a);
  out.impl()->bump_version();
  flag.check();
}

// The reductions' shared path: `meta` (the op on meta twins) checks and shapes.
Tensor scatter_reduce_cuda(const char* op, bool in_place, const Tensor& self, int64_t dim,
                           const Tensor& index, const Tensor* src, const Scalar* value,
                           cpu::ScatterReduce r, bool include_self) {
  check_devices(op, self, index, src ? *src : Tensor());
  Tensor out = in_place ? self : clone_of(self);
  Tensor s;
  if (src) {
    // A src sharing self's storage is read from a copy (Note [Writes into shared storage]).
    s = in_place && cpu::same_storage(self, *src) ? clone_of(*src) : dense(*src, self.dtype());
  }
  scatter_reduce_into(op, out, dim, index, s, value, r, include_self);
  return out;
}

Tensor scatter_reduce_src(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                          std::string_view reduce) {
  kiln::scatter(meta_of(self), dim, meta_of(index), meta_of(src), reduce);
  return scatter_reduce_cuda("scatter", false, self, dim, index, &src, nullptr,
                             cpu::parse_scatter_reduce("scatter", reduce, false), true);
}
Tensor scatter_reduce_value(const Tensor& self, int64_t dim, const Tensor& index,
                            const Scalar& value, std::string_view reduce) {
  kiln::scatter(meta_of(self), dim, meta_of(index), value, reduce);
  return scatter_reduce_cuda("scatter", false, self, dim, index, nullptr, &value,
                             cpu::parse_scatter_reduce("scatter", reduce, false), true);
}
Tensor scatter_reduce_src_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                           std::string_view reduce) {
  Tensor m = meta_of(self);
  kiln::scatter_(m, dim, meta_of(index), meta_of(src), reduce);
  return scatter_reduce_cuda("scatter_", true, self, dim, index, &src, nullptr,
                             cpu::parse_scatter_reduce("scatter_", reduce, false), true);
}
Tensor scatter_reduce_value_(const Tensor& self, int64_t dim, const Tensor& index,
                             const Scalar& value, std::string_view reduce) {
  Tensor m = meta_of(self);
  kiln::scatter_(m, dim, meta_of(index), value, reduce);
  return scatter_reduce_cuda("scatter_", true, self, dim, index, nullptr, &value,
                             cpu::parse_scatter_reduce("scatter_", reduce, false), true);
}
Tensor scatter_reduce_two(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                          std::string_view reduce, bool include_self) {
  kiln::scatter_reduce(meta_of(self), dim, meta_of(index), meta_of(src), reduce, include_self);
  return scatter_reduce_cuda("scatter_reduce", false, self, dim, index, &src, nullptr,
                             cpu::parse_scatter_reduce("scatter_reduce", reduce, true),
                             include_self);
}
Tensor scatter_reduce_two_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                           std::string_view reduce, bool include_self) {
  Tensor m = meta_of(self);
  kiln::scatter_reduce_(m, dim, meta_of(index), meta_of(src), reduce, include_self);
  return scatter_reduce_cuda("scatter_reduce_", true, self, dim, index, &src, nullptr,
                             cpu::parse_scatter_reduce("scatter_reduce_", reduce, true),
                             include_self);
}

void index_copy_into(const char* op, const Tensor& out, int64_t dim, const Tensor& index,
                     const Tensor& source) {
  const int64_t d = out.dim() == 0 ? 0 : wrap_dim(dim, out.dim(), op);
  IndexLaunch l;
  l.iter = cpu::nonempty_sizes(source);
  l.dst_st = zero_at(cpu::nonempty_strides(out), d);
  l.src_st = cpu::nonempty_strides(source);
  l.idx_st = along(index, d, l.iter.size());
  l.kstride = cpu::nonempty_strides(out)[d];
  l.bound = cpu::nonempty_sizes(out)[d];
  l.dim = d;
  run_index(op, Mode::Scatter, out, source, index, l);
}

Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  kiln::index_copy(meta_of(self), dim, meta_of(index), meta_of(source));
  check_devices("index_copy", self, index, source);
  Tensor out = clone_of(self);
  index_copy_into("index_copy", out, dim, index, source);
  return out;
}
Tensor index_copy_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  Tensor m = meta_of(self);
  kiln::index_copy_(m, dim, meta_of(index), meta_of(source));
  check_devices("index_copy_", self, index, source);
  // A source sharing self's storage is read from a copy (Note [Writes into shared storage]).
  index_copy_into("index_copy_", self, dim, index,
                  cpu::same_storage(self, source) ? clone_of(source) : source);
  return self;
}

}  // namespace

NamedSources index_source_samples() {
  NamedSources out;
  for (int m = 0; m <= static_cast<int>(Mode::ScatterValue); ++m) {
    for (DType t :
         {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kInt8, kUInt8, kBool}) {
      for (DType i : {kInt64, kInt32}) {
        IndexSpec s{static_cast<Mode>(m), t, i};
        out.emplace_back(index_name(s), index_source(s));
      }
    }
  }
  for (DType t : {kFloat16, kBFloat16}) {
    IndexSpec s{Mode::ScatterAddOrdered, t, kInt64};
    out.emplace_back(index_name(s), index_source(s));
  }
  // 32-bit index arithmetic (Note [Index kernel latency]): every mode once.
  for (int m = 0; m <= static_cast<int>(Mode::ScatterAddOrdered); ++m) {
    IndexSpec s{static_cast<Mode>(m), kFloat16, kInt64, true};
    out.emplace_back(index_name(s), index_source(s));
  }
  using R = cpu::ScatterReduce;
  for (R r : {R::Sum, R::Prod, R::Mean, R::Max, R::Min}) {
    for (DType t :
         {kFloat32, kBFloat16, kFloat16, kFloat64, kInt64, kInt32, kInt16, kInt8, kUInt8, kBool}) {
      if (r == R::Mean && t == kBool) continue;
      for (bool include_self : {true, false}) {
        ReduceSpec s{r, include_self, false, t};
        out.emplace_back(reduce_kernel_name(s), reduce_source(s));
      }
      if (r == R::Sum || r == R::Prod) {
        ReduceSpec s{r, true, true, t};
        out.emplace_back(reduce_kernel_name(s), reduce_source(s));
      }
    }
  }
  return out;
}

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("embedding", &embedding);
  m.impl("index_select", &index_select);
  m.impl("gather", &gather);
  m.impl("scatter.src", &scatter_src);
  m.impl("scatter.value", &scatter_value);
  m.impl("scatter_.src", &scatter_src_);
  m.impl("scatter_.value", &scatter_value_);
  m.impl("scatter_add", &scatter_add);
  m.impl("scatter_add_", &scatter_add_);
  m.impl("scatter.reduce", &scatter_reduce_src);
  m.impl("scatter.value_reduce", &scatter_reduce_value);
  m.impl("scatter_.reduce", &scatter_reduce_src_);
  m.impl("scatter_.value_reduce", &scatter_reduce_value_);
  m.impl("scatter_reduce.two", &scatter_reduce_two);
  m.impl("scatter_reduce_.two", &scatter_reduce_two_);
  m.impl("index_copy", &index_copy);
  m.impl("index_copy_", &index_copy_);
}

}  // namespace kiln::jit::cuda
