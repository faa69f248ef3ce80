// Integer matrix products on CUDA (Note [Integer matmuls on CUDA]): one
// shared-memory tiled kernel per dtype for out = beta * self + alpha * (a @ b)
// over batched, arbitrarily strided operands. A correctness path, not a hot
// one: 16 x 16 output tiles, one element per thread.

#include <algorithm>

#include "jit/codegen_cuda/kernel_loader.h"
#include "jit/codegen_cuda/op_kernels/op_sources.h"
#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "kiln/error.h"
#include "runtime/core/hooks.h"
#include "runtime/core/tensor_utils.h"

// GCC 12 reports false stringop-overflow warnings for std::string
// concatenation inlined at -O3; this file builds strings.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

constexpr int kTile = 16;  // the block is kTile x kTile threads
constexpr unsigned kMaxGrid = 65535;

std::string kernel_name(DType t) {
  return std::string("kiln_int_mm_") + dtype_tag(t);
}

// Parameters: out, self (null when beta is zero), a, b; m, n, k, the batch
// count and its dims (sizes, then each operand's strides, after merging);
// `mat` holds the matrix strides: out (m, n), self (m, n), a (m, k), b (k, n).
// Elem is the stored type, Acc the unsigned arithmetic type, TILE kTile.
const char kIntMatmulBody[] = R"((Elem* out, const Elem* self, const Elem* a,
    const Elem* b, i64 m, i64 n, i64 k, i64 batch, int nbd, KilnDims bsizes, KilnDims out_b,
    KilnDims self_b, KilnDims a_b, KilnDims b_b, KilnDims mat, i64 alpha, i64 beta) {
  kiln_grid_enter();
  __shared__ Acc as[TILE][TILE];
  __shared__ Acc bs[TILE][TILE];
  const int tx = threadIdx.x % TILE, ty = threadIdx.x / TILE;
  const i64 tiles_m = (m + TILE - 1) / TILE, tiles_n = (n + TILE - 1) / TILE;
  const Acc ua = (Acc)alpha, ub = (Acc)beta;
  for (i64 z = blockIdx.z; z < batch; z += gridDim.z) {
    const Elem* az = a + kiln_offset(z, nbd, bsizes, a_b);
    const Elem* bz = b + kiln_offset(z, nbd, bsizes, b_b);
    for (i64 tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
      for (i64 tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
        const i64 row = tm * TILE + ty, col = tn * TILE + tx;
        Acc acc = 0;
        for (i64 k0 = 0; k0 < k; k0 += TILE) {
          // (i64) first: signed types sign-extend, then wrap into Acc.
          as[ty][tx] = row < m && k0 + tx < k ? (Acc)(i64)az[row * mat.v[4] + (k0 + tx) * mat.v[5]] : (Acc)0;
          bs[ty][tx] = k0 + ty < k && col < n ? (Acc)(i64)bz[(k0 + ty) * mat.v[6] + col * mat.v[7]] : (Acc)0;
          __syncthreads();
#pragma unroll
          for (int p = 0; p < TILE; ++p) acc += as[ty][p] * bs[p][tx];
          __syncthreads();
        }
        if (row < m && col < n) {
          Acc v = ua * acc;
          if (self) v += ub * (Acc)(i64)self[kiln_offset(z, nbd, bsizes, self_b) + row * mat.v[2] + col * mat.v[3]];
          out[kiln_offset(z, nbd, bsizes, out_b) + row * mat.v[0] + col * mat.v[1]] = (Elem)v;
        }
      }
    }
  }
}
)";

std::string int_matmul_source(DType t) {
  // Note [Integer matmuls on CUDA]: unsigned arithmetic of at least 32 bits.
  const char* acc = itemsize(t) == 8 ? "unsigned long long" : "unsigned int";
  return op_prelude() + "typedef " + mem_type(t) + " Elem;\ntypedef " + acc +
         " Acc;\n#define TILE " + std::to_string(kTile) +
         "\nextern \"C\" __global__ void __launch_bounds__(TILE * TILE) " + kernel_name(t) +
         kIntMatmulBody;
}

bool same_storage(const Tensor& x, const Tensor& y) {
  return x.defined() && y.defined() && x.numel() > 0 && y.numel() > 0 &&
         x.impl()->storage().get() == y.impl()->storage().get();
}

// `self`'s strides as a tensor of `sizes` (right-aligned, 0 where it broadcasts).
DimVector broadcast_strides(const Tensor& self, IntArrayRef sizes) {
  const int64_t nd = static_cast<int64_t>(sizes.size());
  const int64_t lead = nd - self.dim();
  KILN_INTERNAL_ASSERT(lead >= 0, "int_matmul: self has more dims than out");
  DimVector strides(static_cast<size_t>(nd), 0);
  for (int64_t d = lead; d < nd; ++d) {
    const int64_t s = self.size(d - lead);
    KILN_INTERNAL_ASSERT(s == sizes[d] || s == 1, "int_matmul: self does not broadcast");
    if (s == sizes[d] && s != 1) strides[d] = self.stride(d - lead);
  }
  return strides;
}

// Batch dims of out (sizes) and of each operand (strides), size-1 dims dropped
// and dims merged where every operand steps evenly across them.
struct Batch {
  DimVector sizes;
  DimVector strides[4];
};

Batch merge_batch(IntArrayRef sizes, const DimVector* strides[4]) {
  Batch r;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool merge = !r.sizes.empty();
    for (int i = 0; i < 4 && merge; ++i) {
      merge = r.strides[i].back() == (*strides[i])[d] * sizes[d];
    }
    if (merge) {
      r.sizes.back() *= sizes[d];
      for (int i = 0; i < 4; ++i) r.strides[i].back() = (*strides[i])[d];
    } else {
      r.sizes.push_back(sizes[d]);
      for (int i = 0; i < 4; ++i) r.strides[i].push_back((*strides[i])[d]);
    }
  }
  return r;
}

KilnDims to_dims(const DimVector& v) {
  KilnDims d;
  for (size_t i = 0; i < v.size(); ++i) d.v[i] = v[i];
  return d;
}

void int_matmul(const Tensor& out, const Tensor& self_in, const Tensor& a, const Tensor& b,
                const Scalar& beta, const Scalar& alpha) {
  const DType dt = out.dtype();
  KILN_INTERNAL_ASSERT(is_integral(dt, false) && a.dtype() == dt && b.dtype() == dt,
                       "int_matmul: expected integer operands of out's dtype");
  const int64_t rank = out.dim();
  KILN_INTERNAL_ASSERT(rank >= 2 && a.dim() == rank && b.dim() == rank,
                       "int_matmul: expected a, b and out of one rank >= 2");
  if (out.numel() == 0) return;
  const Tensor self = self_in.defined() && self_in.dtype() != dt ? dense(self_in, dt) : self_in;
  const bool self_is_out = self.defined() && self.data_ptr() == out.data_ptr() &&
                           self.sizes() == out.sizes() && self.strides() == out.strides();
  // Other blocks would read what this one writes: compute into scratch.
  if (same_storage(out, a) || same_storage(out, b) || (!self_is_out && same_storage(out, self))) {
    Tensor tmp = empty_tensor(out.sizes(), dt, out.device());
    int_matmul(tmp, self_is_out ? out : self, a, b, beta, alpha);
    copy_into_cuda(out, tmp);
    return;
  }
  const int64_t m = out.size(-2), n = out.size(-1), k = a.size(-1);
  KILN_INTERNAL_ASSERT(a.size(-2) == m && b.size(-2) == k && b.size(-1) == n,
                       "int_matmul: matrix sizes disagree");
  const IntArrayRef out_sizes = out.sizes();
  DimVector s_strides =
      self.defined() ? broadcast_strides(self, out_sizes) : DimVector(static_cast<size_t>(rank), 0);
  DimVector o_strides(out.strides()), a_strides(a.strides()), b_strides(b.strides());
  for (int64_t d = 0; d + 2 < rank; ++d) {
    KILN_INTERNAL_ASSERT(a.size(d) == out.size(d) && b.size(d) == out.size(d),
                         "int_matmul: batch sizes disagree");
  }
  const DimVector* all[4] = {&o_strides, &s_strides, &a_strides, &b_strides};
  Batch batch = merge_batch(out_sizes.slice(0, static_cast<size_t>(rank - 2)), all);
  const int nbd = static_cast<int>(batch.sizes.size());
  KILN_CHECK(nbd <= kMaxKernelDims, "[matmul] expected at most ", kMaxKernelDims,
             " batch dims after merging on CUDA, got ", nbd);
  int64_t count = 1;
  for (int64_t s : batch.sizes) count *= s;
  KilnDims mat;
  const size_t rm = static_cast<size_t>(rank - 2), rn = rm + 1;
  const int64_t mats[8] = {o_strides[rm], o_strides[rn], s_strides[rm], s_strides[rn],
                           a_strides[rm], a_strides[rn], b_strides[rm], b_strides[rn]};
  std::copy(std::begin(mats), std::end(mats), mat.v);
  cudaKernel_t kernel = load_kernel(
      kernel_name(dt), [&] { return int_matmul_source(dt); }, out.device().index());
  KernelArgs args;
  args.ptr(out)
      .ptr(self)
      .ptr(a)
      .ptr(b)
      .i64(m)
      .i64(n)
      .i64(k)
      .i64(count)
      .i32(nbd)
      .dims(to_dims(batch.sizes))
      .dims(to_dims(batch.strides[0]))
      .dims(to_dims(batch.strides[1]))
      .dims(to_dims(batch.strides[2]))
      .dims(to_dims(batch.strides[3]))
      .dims(mat)
      .i64(alpha.to_int())
      .i64(beta.to_int());
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((n + kTile - 1) / kTile, kMaxGrid)),
                  static_cast<unsigned>(std::min<int64_t>((m + kTile - 1) / kTile, kMaxGrid)),
                  static_cast<unsigned>(std::min<int64_t>(count, kMaxGrid)));
  launch(kernel, out.device(), grid, kTile * kTile, 0, args);
}

[[maybe_unused]] const bool g_registered = [] {
  kiln::cuda::set_int_matmul_kernel(&int_matmul);
  return true;
}();

}  // namespace

NamedSources int_matmul_source_samples() {
  NamedSources out;
  for (DType t : {kUInt8, kInt8, kInt16, kInt32, kInt64}) {
    out.emplace_back(kernel_name(t), int_matmul_source(t));
  }
  return out;
}

}  // namespace kiln::jit::cuda
