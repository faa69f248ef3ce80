// sort, sort.stable, argsort and topk on CUDA.
//
// Note [CUDA sort]
// Every line along `dim` is sorted by the total order of Note [Sort order]
// (key, then index: NaN above every number), so any correct sort gives the
// CPU kernel's result, ties included, and the sort is stable. Lines are first
// made dense with `dim` innermost. A line is cut into tiles of up to kTile
// elements; one block sorts a tile with a bitonic network in shared memory
// (padding past the line's end sorts last). A line of one tile is written out
// directly. Longer lines go to global scratch as (key, index) pairs and are
// merged pairwise, width doubling each pass, one thread per element: an
// element's place in the merged run is its place in its own run plus the
// number of elements of the other run that come before it (a binary search;
// the order is strict, so places never collide). Values are gathered from the
// input by index at the end, so NaN payloads and -0.0 survive as on the CPU.
// topk sorts the whole line and keeps its first k (largest: descending).
// Shapes, dtypes and errors come from the Meta kernels.

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

// Elements per tile: keys of 8 bytes and 4-byte positions fill 48 KiB.
constexpr int64_t kTile = 4096;
constexpr int kMaxThreads = 512;

// The key type a dtype sorts by: 16-bit floats compare as float.
std::string key_type(DType t) {
  return is_reduced_float(t) ? "float" : mem_type(t);
}

int64_t key_size(DType t) {
  return is_reduced_float(t) ? 4 : itemsize(t);
}

std::string sort_name(const char* kind, DType t, bool descending) {
  return std::string("kiln_sort_") + kind + "_" + dtype_tag(t) + (descending ? "_desc" : "_asc");
}

// kiln_before(a, ia, b, ib): a strict "a before b" (Note [Sort order]).
std::string before_source(DType t, bool descending) {
  const std::string K = key_type(t);
  std::string s =
      "__device__ __forceinline__ bool kiln_before(" + K + " a, i64 ia, " + K + " b, i64 ib) {\n";
  if (is_floating(t)) {
    s += "  const bool an = a != a, bn = b != b;\n";
    s += std::string("  if (an != bn) return ") + (descending ? "an" : "bn") + ";\n";
    s += "  if (!an && a != b) return ";
  } else {
    s += "  if (a != b) return ";
  }
  s += descending ? "b < a;\n" : "a < b;\n";
  s += "  return ia < ib;\n}\n";
  return s;
}

// One block per (line, tile): a bitonic sort of up to `tile` elements.
std::string tile_source(DType t, bool descending) {
  const std::string T = mem_type(t), K = key_type(t);
  std::string s = op_prelude() + before_source(t, descending);
  s += "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kMaxThreads) + ") " +
       sort_name("tile", t, descending) + "(const " + T +
       "* __restrict__ x, i64 rows, i64 n, i64 tile, i64 k, " + T +
       "* __restrict__ values, i64* __restrict__ indices, " + K +
       "* __restrict__ skeys, i64* __restrict__ sidx) {\n"
       "  kiln_grid_enter();\n"
       "  extern __shared__ unsigned long long kiln_smem_words[];\n"
       "  unsigned char* kiln_smem = (unsigned char*)kiln_smem_words;\n"
       "  int* pos = (int*)kiln_smem;\n"
       "  " +
       K + "* key = (" + K +
       "*)(kiln_smem + tile * sizeof(int));\n"
       "  const i64 tiles = (n + tile - 1) / tile;\n"
       "  for (i64 b = blockIdx.x; b < rows * tiles; b += gridDim.x) {\n"
       "    const i64 row = b / tiles, start = (b % tiles) * tile;\n"
       "    const i64 len = (n - start < tile ? n - start : tile);\n"
       "    const " +
       T +
       "* xr = x + row * n + start;\n"
       "    __syncthreads();\n"
       "    for (int i = threadIdx.x; i < tile; i += blockDim.x) {\n"
       "      pos[i] = i;\n"
       "      key[i] = i < len ? (" +
       K + ")" + (is_reduced_float(t) ? load_expr(t, "xr[i]") : "xr[i]") + " : (" + K +
       ")0;\n"
       "    }\n"
       "    for (int size = 2; size <= tile; size <<= 1) {\n"
       "      for (int stride = size >> 1; stride > 0; stride >>= 1) {\n"
       "        __syncthreads();\n"
       "        for (int h = threadIdx.x; h < tile / 2; h += blockDim.x) {\n"
       "          const int p = 2 * h - (h & (stride - 1)), q = p + stride;\n"
       "          const int ip = pos[p], iq = pos[q];\n"
       "          // Padding (positions past len) sorts after every element.\n"
       "          const bool q_first = (ip >= len || iq >= len) ? iq < ip\n"
       "                                : kiln_before(key[q], iq, key[p], ip);\n"
       "          const bool p_first = (ip >= len || iq >= len) ? ip < iq\n"
       "                                : kiln_before(key[p], ip, key[q], iq);\n"
       "          if ((p & size) == 0 ? q_first : p_first) {\n"
       "            pos[p] = iq; pos[q] = ip;\n"
       "            const " +
       K +
       " kp = key[p]; key[p] = key[q]; key[q] = kp;\n"
       "          }\n"
       "        }\n"
       "      }\n"
       "    }\n"
       "    __syncthreads();\n"
       "    if (tiles == 1) {\n"
       "      for (int i = threadIdx.x; i < k; i += blockDim.x) {\n"
       "        values[row * k + i] = xr[pos[i]];\n"
       "        indices[row * k + i] = pos[i];\n"
       "      }\n"
       "    } else {\n"
       "      for (int i = threadIdx.x; i < len; i += blockDim.x) {\n"
       "        skeys[row * n + start + i] = key[i];\n"
       "        sidx[row * n + start + i] = start + pos[i];\n"
       "      }\n"
       "    }\n"
       "  }\n"
       "}\n";
  return s;
}

// One thread per element: merges sorted runs of width w into runs of 2w.
std::string merge_source(DType t, bool descending) {
  const std::string K = key_type(t);
  std::string s = op_prelude() + before_source(t, descending);
  s += "extern \"C\" __global__ void __launch_bounds__(256) " + sort_name("merge", t, descending) +
       "(const " + K + "* __restrict__ ik, const i64* __restrict__ ii, " + K +
       "* __restrict__ ok, i64* __restrict__ oi, i64 rows, i64 n, i64 w) {\n"
       "  kiln_grid_enter();\n"
       "  for (i64 e = (i64)blockIdx.x * 256 + threadIdx.x; e < rows * n; e += (i64)gridDim.x * "
       "256) {\n"
       "    const i64 row = e / n, p = e % n, s = p / (2 * w) * (2 * w);\n"
       "    const " +
       K +
       " kv = ik[e];\n"
       "    const i64 iv = ii[e];\n"
       "    const bool in_a = p - s < w;\n"
       "    // The other run: [lo, hi) of this line.\n"
       "    const i64 lo = in_a ? (s + w < n ? s + w : n) : s, hi = in_a ? (s + 2 * w < n ? s + 2 "
       "* w : n) : s + w;\n"
       "    i64 a = lo, b = hi;  // first element of the other run not before this one\n"
       "    while (a < b) {\n"
       "      const i64 m = a + (b - a) / 2;\n"
       "      if (kiln_before(ik[row * n + m], ii[row * n + m], kv, iv)) a = m + 1; else b = m;\n"
       "    }\n"
       "    const i64 own = in_a ? p - s : p - s - w;\n"
       "    const i64 dst = row * n + s + own + (a - lo);\n"
       "    ok[dst] = kv;\n"
       "    oi[dst] = iv;\n"
       "  }\n"
       "}\n";
  return s;
}

// values/indices[row, i] from the merged line, i < k.
std::string gather_source(DType t) {
  const std::string T = mem_type(t);
  return op_prelude() + "extern \"C\" __global__ void __launch_bounds__(256) kiln_sort_gather_" +
         dtype_tag(t) + "(const " + T +
         "* __restrict__ x, const i64* __restrict__ sidx, i64 rows, i64 n, i64 k, " + T +
         "* __restrict__ values, i64* __restrict__ indices) {\n"
         "  kiln_grid_enter();\n"
         "  for (i64 e = (i64)blockIdx.x * 256 + threadIdx.x; e < rows * k; e += (i64)gridDim.x * "
         "256) {\n"
         "    const i64 row = e / k, i = e % k;\n"
         "    const i64 j = sidx[row * n + i];\n"
         "    values[e] = x[row * n + j];\n"
         "    indices[e] = j;\n"
         "  }\n"
         "}\n";
}

int64_t pow2_at_least(int64_t n) {
  int64_t p = 2;
  while (p < n) p <<= 1;
  return p;
}

// Sorts the lines of dense `x` ([rows, n]) into dense values/indices [rows, k].
void sort_rows(const Tensor& x, int64_t rows, int64_t n, int64_t k, bool descending,
               const Tensor& values, const Tensor& indices) {
  const DType t = x.dtype();
  const Device dev = x.device();
  const int index = dev.index();
  const int64_t tile = std::min(kTile, pow2_at_least(n));
  const int64_t tiles = (n + tile - 1) / tile;
  const int threads = static_cast<int>(std::min<int64_t>(tile / 2, kMaxThreads));
  const size_t shared = static_cast<size_t>(tile * (4 + key_size(t)));
  Tensor keys[2], idx[2];
  if (tiles > 1) {
    const DType kd = is_reduced_float(t) ? kFloat32 : t;
    for (int i = 0; i < 2; ++i) {
      keys[i] = empty_tensor({rows, n}, kd, dev);
      idx[i] = empty_tensor({rows, n}, kInt64, dev);
    }
  }
  cudaKernel_t tk = load_kernel(
      sort_name("tile", t, descending), [&] { return tile_source(t, descending); }, index);
  KernelArgs a;
  a.ptr(x).i64(rows).i64(n).i64(tile).i64(k).ptr(values).ptr(indices).ptr(keys[0]).ptr(idx[0]);
  launch(tk, dev, grid_for(rows * tiles, 1), threads, shared, a);
  if (tiles == 1) return;
  cudaKernel_t mk = load_kernel(
      sort_name("merge", t, descending), [&] { return merge_source(t, descending); }, index);
  int cur = 0;
  for (int64_t w = tile; w < n; w *= 2) {
    KernelArgs m;
    m.ptr(keys[cur]).ptr(idx[cur]).ptr(keys[1 - cur]).ptr(idx[1 - cur]).i64(rows).i64(n).i64(w);
    launch(mk, dev, grid_for(rows * n, 256 * 4), 256, 0, m);
    cur = 1 - cur;
  }
  const std::string gname = std::string("kiln_sort_gather_") + dtype_tag(t);
  cudaKernel_t gk = load_kernel(
      gname, [&] { return gather_source(t); }, index);
  KernelArgs g;
  g.ptr(x).ptr(idx[cur]).i64(rows).i64(n).i64(k).ptr(values).ptr(indices);
  launch(gk, dev, grid_for(rows * k, 256 * 4), 256, 0, g);
}

// Fills `values` and `indices` (shaped like the Meta results) with the first
// k of each sorted line along `dim` of `self`.
void run_sort(const Tensor& self, int64_t dim, int64_t k, bool descending, const Tensor& values,
              const Tensor& indices) {
  if (values.numel() == 0) return;
  const bool scalar = self.dim() == 0;
  const int64_t d = scalar ? 0 : dim;
  const int64_t last = scalar ? 0 : self.dim() - 1;
  // `dim` innermost, dense.
  Tensor x = dense(scalar ? self.reshape({1}) : self.transpose(d, last));
  const int64_t n = x.size(-1);
  const int64_t rows = x.numel() / n;
  Tensor vt = scalar ? values.reshape({1}) : values.transpose(d, last);
  Tensor it = scalar ? indices.reshape({1}) : indices.transpose(d, last);
  const bool direct = vt.is_contiguous() && it.is_contiguous();
  Tensor v = direct ? vt : empty_tensor(vt.sizes(), vt.dtype(), vt.device());
  Tensor i = direct ? it : empty_tensor(it.sizes(), kInt64, it.device());
  sort_rows(x, rows, n, k, descending, v, i);
  if (!direct) {
    copy_into_cuda(vt, v);
    copy_into_cuda(it, i);
  }
  values.impl()->bump_version();
  indices.impl()->bump_version();
}

std::tuple<Tensor, Tensor> sort_impl(const std::tuple<Tensor, Tensor>& meta, const Tensor& self,
                                     int64_t dim, bool descending, const char* op) {
  // Laid out as the Meta results (Note [Preserved layout]); run_sort writes any layout.
  const Tensor& mv = std::get<0>(meta);
  const Tensor& mi = std::get<1>(meta);
  Tensor values = empty_strided_tensor(mv.sizes(), mv.strides(), mv.dtype(), self.device());
  Tensor indices = empty_strided_tensor(mi.sizes(), mi.strides(), kInt64, self.device());
  const int64_t d = wrap_dim(dim, self.dim(), op);
  run_sort(self, d, self.dim() == 0 ? 1 : self.size(d), descending, values, indices);
  return {values, indices};
}

std::tuple<Tensor, Tensor> sort(const Tensor& self, int64_t dim, bool descending) {
  return sort_impl(kiln::sort(meta_of(self), dim, descending), self, dim, descending, "sort");
}
std::tuple<Tensor, Tensor> sort_stable(const Tensor& self, std::optional<bool> stable, int64_t dim,
                                       bool descending) {
  static const TypedOp<std::tuple<Tensor, Tensor>(const Tensor&, std::optional<bool>, int64_t,
                                                  bool)>
      op("sort.stable");
  return sort_impl(op(meta_of(self), stable, dim, descending), self, dim, descending,
                   "sort.stable");
}
Tensor argsort(const Tensor& self, int64_t dim, bool descending) {
  return std::get<1>(
      sort_impl(kiln::sort(meta_of(self), dim, descending), self, dim, descending, "argsort"));
}

std::tuple<Tensor, Tensor> topk(const Tensor& self, int64_t k, int64_t dim, bool largest,
                                bool sorted) {
  auto meta = kiln::topk(meta_of(self), k, dim, largest, sorted);
  Tensor values = empty_tensor(std::get<0>(meta).sizes(), self.dtype(), self.device());
  Tensor indices = empty_tensor(std::get<1>(meta).sizes(), kInt64, self.device());
  const int64_t d = wrap_dim(dim, self.dim(), "topk");
  // A 0-dim input comes back whole whatever k (the Meta kernel's rule).
  run_sort(self, d, self.dim() == 0 ? 1 : k, largest, values, indices);
  return {values, indices};
}

}  // namespace

NamedSources sort_source_samples() {
  NamedSources out;
  for (DType t :
       {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kInt16, kInt8, kUInt8, kBool}) {
    for (bool desc : {false, true}) {
      out.emplace_back(sort_name("tile", t, desc), tile_source(t, desc));
      out.emplace_back(sort_name("merge", t, desc), merge_source(t, desc));
    }
    out.emplace_back(std::string("kiln_sort_gather_") + dtype_tag(t), gather_source(t));
  }
  return out;
}

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("sort", &sort);
  m.impl("sort.stable", &sort_stable);
  m.impl("argsort", &argsort);
  m.impl("topk", &topk);
}

}  // namespace kiln::jit::cuda
