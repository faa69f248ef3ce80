#include "runtime/cuda/blas_lt_layout.h"

#include <algorithm>
#include <limits>

#include "kiln/error.h"
#include "runtime/core/matrix_view.h"

namespace kiln::cuda {
namespace {

// The column-major layout of a [r, c] matrix with strides (rs, cs), as stored.
std::optional<LtMatrix> column_major(int64_t r, int64_t c, int64_t rs, int64_t cs) {
  if (rs < 0 || cs < 0) return std::nullopt;
  const int64_t min_ld = std::max<int64_t>(r, 1);
  if ((r <= 1 || rs == 1) && (c <= 1 || cs >= min_ld)) {
    return LtMatrix{false, r, c, c <= 1 ? min_ld : cs};
  }
  return std::nullopt;
}

// An operand: as stored, or as the transpose of its column-major transpose.
std::optional<LtMatrix> operand(int64_t r, int64_t c, int64_t rs, int64_t cs) {
  if (auto m = column_major(r, c, rs, cs)) return m;
  if (auto m = column_major(c, r, cs, rs)) return LtMatrix{true, m->rows, m->cols, m->ld};
  return std::nullopt;
}

struct BatchDim {
  int64_t size, out, a, b;  // size and the three strides
};

// Batch dims of size > 1, adjacent ones merged where all three tensors step evenly.
std::vector<BatchDim> collapse_batch(const Tensor& out, const Tensor& a, const Tensor& b) {
  std::vector<BatchDim> dims;
  for (int64_t d = 0; d + 2 < out.dim(); ++d) {
    if (out.size(d) == 1) continue;
    BatchDim cur{out.size(d), out.stride(d), a.stride(d), b.stride(d)};
    if (!dims.empty()) {
      BatchDim& prev = dims.back();
      if (prev.out == cur.out * cur.size && prev.a == cur.a * cur.size &&
          prev.b == cur.b * cur.size) {
        prev = {prev.size * cur.size, cur.out, cur.a, cur.b};
        continue;
      }
    }
    dims.push_back(cur);
  }
  return dims;
}

}  // namespace

std::optional<Problem> plan_problem(const Tensor& out, const Tensor& a, const Tensor& b,
                                    bool swap) {
  const int64_t nd = out.dim();
  int64_t m = out.size(nd - 2), n = out.size(nd - 1);
  const int64_t k = a.size(nd - 1);
  int64_t ors = out.stride(nd - 2), ocs = out.stride(nd - 1);
  int64_t ars = a.stride(nd - 2), acs = a.stride(nd - 1);
  const int64_t brs = b.stride(nd - 2), bcs = b.stride(nd - 1);
  std::vector<BatchDim> batch = collapse_batch(out, a, b);
  // A batch times one shared matrix is one product with more rows (matmul of
  // [B, T, K] by [K, N]); with one row per entry the row stride is the batch's.
  if (!batch.empty() && batch_is_broadcast(b)) {
    std::optional<int64_t> ra = folded_row_stride(a), ro = folded_row_stride(out);
    int64_t count = 1;
    for (const BatchDim& d : batch) count *= d.size;
    if (ra && ro && m * count <= std::numeric_limits<int32_t>::max()) {
      m *= count;
      ars = *ra;
      ors = *ro;
      batch.clear();
    }
  }
  Problem p;
  std::optional<LtMatrix> ma, mb, md;
  if (!swap) {
    md = column_major(m, n, ors, ocs);
    ma = operand(m, k, ars, acs);
    mb = operand(k, n, brs, bcs);
    p.m = m;
    p.n = n;
  } else {
    md = column_major(n, m, ocs, ors);
    ma = operand(n, k, bcs, brs);
    mb = operand(k, m, acs, ars);
    p.m = n;
    p.n = m;
  }
  if (!ma || !mb || !md) return std::nullopt;
  p.a = *ma;
  p.b = *mb;
  p.d = *md;
  p.k = k;
  p.swapped = swap;
  if (!batch.empty()) {
    const BatchDim inner = batch.back();
    if (inner.out == 0) return std::nullopt;  // entries would write the same memory
    KILN_CHECK(inner.size <= std::numeric_limits<int32_t>::max(),
               "[matmul] expected fewer than 2^31 matrices in a batch on CUDA, got ", inner.size);
    p.batch = static_cast<int32_t>(inner.size);
    p.stride_d = inner.out;
    p.stride_a = swap ? inner.b : inner.a;
    p.stride_b = swap ? inner.a : inner.b;
    batch.pop_back();
    for (const BatchDim& d : batch) {
      if (d.out == 0) return std::nullopt;
    }
    // Offsets (slot a, slot b, d) of every outer entry, in row-major order.
    p.offsets.clear();
    int64_t outer = 1;
    for (const BatchDim& d : batch) outer *= d.size;
    std::vector<int64_t> index(batch.size(), 0);
    std::array<int64_t, 3> off{0, 0, 0};
    for (int64_t e = 0; e < outer; ++e) {
      p.offsets.push_back(swap ? std::array<int64_t, 3>{off[1], off[0], off[2]}
                               : std::array<int64_t, 3>{off[0], off[1], off[2]});
      for (size_t i = batch.size(); i-- > 0;) {
        const BatchDim& d = batch[i];
        if (++index[i] < d.size) {
          off[0] += d.a;
          off[1] += d.b;
          off[2] += d.out;
          break;
        }
        index[i] = 0;
        off[0] -= d.a * (d.size - 1);
        off[1] -= d.b * (d.size - 1);
        off[2] -= d.out * (d.size - 1);
      }
    }
  }
  return p;
}

}  // namespace kiln::cuda
