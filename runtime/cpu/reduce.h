#pragma once

// Note [Reduction engine]
// Every reduction (sum, mean, prod, amax/amin, max/min, argmax/argmin, var,
// std, logsumexp, norm, all, any) describes its arithmetic as an Ops object and
// runs through reduce(). ReducePlan drops size-1 dims, puts the reduced dims
// innermost and coalesces dims that are contiguous with each other. Reduced
// dims are sorted by stride, except for ops that report positions (max.dim,
// argmax): those keep the logical order, so a linear position in the reduced
// space is the row-major index PyTorch returns, and first-of-ties falls out of
// walking positions in increasing order.
//
// reduce() then picks one of three schedules:
//  - many outputs: TBB over outputs. Each output walks 1-D runs along the
//    innermost reduced dim; a dense run takes the op's `contig` loop when it
//    has one (written with independent accumulators so it vectorizes);
//  - outer reductions (the innermost output dim is dense in the input, e.g.
//    summing dim 0 of a row-major matrix): a segment of up to 512
//    neighbouring outputs accumulates together, so the innermost loop reads
//    dense memory and each row visit reads a few KB;
//  - few outputs and a long reduction: the reduced space is cut into chunks
//    that are reduced in parallel, and the partial results are combined in
//    chunk order, so a result never depends on thread scheduling.
//
// An Ops type provides:
//   using in_t;                                  element type read
//   using acc_t;                                 accumulator
//   acc_t identity() const;                      what an empty reduction starts from
//   acc_t step(acc_t a, in_t x, int64_t pos) const;   pos: linear position in the reduced space
//   acc_t combine(acc_t a, acc_t b) const;       a covers earlier positions than b
//   void write(char* const* out, acc_t a) const; out[k]: the element of output k
//   (optional) acc_t contig(acc_t a, const in_t* p, int64_t n, int64_t pos) const;

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kiln/tensor.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/parallel.h"

namespace kiln::cpu {

// Reductions take up to 64 dims (the dim masks are 64-bit).
constexpr int kMaxReduceDims = 64;

// The dims a reduction runs over, as a bitmask. Wraps negative dims and rejects
// repeats (a 0-dim tensor accepts 0 and -1, once); empty `dims` means every dim.
uint64_t reduction_dims(IntArrayRef dims, int64_t ndim, const char* op);
// The sizes of `sizes` reduced over `mask`, the reduced dims kept as 1 or dropped.
DimVector reduced_sizes(IntArrayRef sizes, uint64_t mask, bool keepdim);
// The number of elements each output reduces (1 for a 0-dim input).
int64_t reduced_count(IntArrayRef sizes, uint64_t mask);
// Throws as PyTorch does when a reduced dim is empty (amax, max.dim, argmax...).
void check_reduced_nonempty(IntArrayRef sizes, uint64_t mask, const char* op);
// Throws unless `t` lives on the CPU or is a meta tensor.
void check_cpu_or_meta(const Tensor& t, const char* op, const char* name);
// The result tensor of a reduction: a fresh one on `self`'s device, or the
// caller's `out` (checked to be on a matching device, resized when its shape differs).
Tensor reduction_result(const Tensor& self, IntArrayRef shape, DType dtype, const Tensor* out,
                        const char* op);

// The geometry of one reduction; see Note [Reduction engine].
struct ReducePlan {
  static constexpr int kMaxOutputs = 2;

  // `outs` have the shape of `in` reduced over `mask`, with or without the
  // reduced dims (their strides are arbitrary). `logical_order` keeps reduced
  // dims in row-major order (ops that report positions need it).
  ReducePlan(const Tensor& in, uint64_t mask, ArrayRef<Tensor> outs, bool logical_order);

  int64_t num_outputs = 1;  // M
  int64_t reduce_size = 1;  // R
  int nout = 0;
  const char* in_data = nullptr;
  char* out_data[kMaxOutputs] = {};
  // Output dims, innermost first: sizes, input strides and output strides, in bytes.
  DimVector osize, ostride_in;
  DimVector ostride_out[kMaxOutputs];
  // Reduced dims, innermost first: sizes and input strides in bytes.
  DimVector rsize, rstride;
};

// The threads reduce() may use: the current TBB arena's concurrency.
int reduce_threads();

namespace detail {

template <class Ops>
concept HasContig = requires(const Ops& o, typename Ops::acc_t a, const typename Ops::in_t* p) {
  {o.contig(a, p, int64_t{0}, int64_t{0})};
};

// Walks positions [begin, end) of the reduced space from `base`, calling
// run(ptr, stride, n, pos) for each 1-D run along the innermost reduced dim.
template <class F>
void for_each_run(const ReducePlan& p, const char* base, int64_t begin, int64_t end, F&& run) {
  const int nd = static_cast<int>(p.rsize.size());
  if (nd == 1) {
    if (begin < end) run(base + begin * p.rstride[0], p.rstride[0], end - begin, begin);
    return;
  }
  int64_t idx[kMaxReduceDims];
  int64_t rem = begin;
  const char* ptr = base;
  for (int d = 0; d < nd; ++d) {
    idx[d] = rem % p.rsize[d];
    rem /= p.rsize[d];
    ptr += idx[d] * p.rstride[d];
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t n = std::min(p.rsize[0] - idx[0], end - pos);
    run(ptr, p.rstride[0], n, pos);
    pos += n;
    ptr += n * p.rstride[0];
    idx[0] += n;
    for (int d = 0; d + 1 < nd && idx[d] == p.rsize[d]; ++d) {
      ptr += p.rstride[d + 1] - idx[d] * p.rstride[d];
      idx[d] = 0;
      ++idx[d + 1];
    }
  }
}

// Offsets of consecutive outputs, starting at output `m`.
struct OutputCursor {
  OutputCursor(const ReducePlan& p, int64_t m) : p_(p) {
    const int nd = static_cast<int>(p.osize.size());
    for (int d = 0; d < nd; ++d) {
      idx_[d] = m % p.osize[d];
      m /= p.osize[d];
      in_ += idx_[d] * p.ostride_in[d];
      for (int k = 0; k < p.nout; ++k) out_[k] += idx_[d] * p.ostride_out[k][d];
    }
  }
  // Moves `n` outputs along the innermost output dim, carrying into outer dims.
  void advance(int64_t n) {
    const int nd = static_cast<int>(p_.osize.size());
    idx_[0] += n;
    in_ += n * p_.ostride_in[0];
    for (int k = 0; k < p_.nout; ++k) out_[k] += n * p_.ostride_out[k][0];
    for (int d = 0; d + 1 < nd && idx_[d] >= p_.osize[d]; ++d) {
      in_ += p_.ostride_in[d + 1] - idx_[d] * p_.ostride_in[d];
      for (int k = 0; k < p_.nout; ++k) {
        out_[k] += p_.ostride_out[k][d + 1] - idx_[d] * p_.ostride_out[k][d];
      }
      idx_[d] = 0;
      ++idx_[d + 1];
    }
  }
  const ReducePlan& p_;
  int64_t idx_[kMaxReduceDims] = {};
  int64_t in_ = 0;
  int64_t out_[ReducePlan::kMaxOutputs] = {};
};

template <class Ops>
typename Ops::acc_t reduce_range(const Ops& ops, const ReducePlan& p, const char* base,
                                 int64_t begin, int64_t end, typename Ops::acc_t acc) {
  using In = typename Ops::in_t;
  for_each_run(p, base, begin, end, [&](const char* ptr, int64_t stride, int64_t n, int64_t pos) {
    if constexpr (HasContig<Ops>) {
      if (stride == static_cast<int64_t>(sizeof(In))) {
        acc = ops.contig(acc, reinterpret_cast<const In*>(ptr), n, pos);
        return;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      acc = ops.step(acc, *reinterpret_cast<const In*>(ptr + i * stride), pos + i);
    }
  });
  return acc;
}

template <class Ops>
void write_at(const Ops& ops, const ReducePlan& p, const OutputCursor& c, int64_t j,
              typename Ops::acc_t acc) {
  char* outs[ReducePlan::kMaxOutputs] = {};
  for (int k = 0; k < p.nout; ++k) outs[k] = p.out_data[k] + c.out_[k] + j * p.ostride_out[k][0];
  ops.write(outs, acc);
}

// Outputs [begin, end), one reduction each.
template <class Ops>
void reduce_outputs(const Ops& ops, const ReducePlan& p, int64_t begin, int64_t end) {
  OutputCursor c(p, begin);
  for (int64_t m = begin; m < end; ++m) {
    auto acc = reduce_range(ops, p, p.in_data + c.in_, 0, p.reduce_size, ops.identity());
    write_at(ops, p, c, 0, acc);
    c.advance(1);
  }
}

// Outer reductions: `width` outputs adjacent in the input accumulate
// together, so the innermost loop streams over a dense row segment. Work unit
// u covers one segment of the innermost output dim.
template <class Ops>
void reduce_output_blocks(const Ops& ops, const ReducePlan& p, int64_t width, int64_t ubegin,
                          int64_t uend) {
  using In = typename Ops::in_t;
  using Acc = typename Ops::acc_t;
  const int64_t n0 = p.osize[0];
  const int64_t blocks = (n0 + width - 1) / width;
  std::unique_ptr<Acc[]> buf(new Acc[width]);  // not vector: Acc may be bool
  Acc* acc = buf.get();
  for (int64_t u = ubegin; u < uend; ++u) {
    const int64_t outer = u / blocks, j0 = (u % blocks) * width;
    const int64_t nb = std::min(width, n0 - j0);
    OutputCursor c(p, outer * n0 + j0);
    for (int64_t j = 0; j < nb; ++j) acc[j] = ops.identity();
    for_each_run(p, p.in_data + c.in_, 0, p.reduce_size,
                 [&](const char* ptr, int64_t stride, int64_t n, int64_t pos) {
                   for (int64_t i = 0; i < n; ++i) {
                     const In* row = reinterpret_cast<const In*>(ptr + i * stride);
                     for (int64_t j = 0; j < nb; ++j) acc[j] = ops.step(acc[j], row[j], pos + i);
                   }
                 });
    for (int64_t j = 0; j < nb; ++j) write_at(ops, p, c, j, acc[j]);
  }
}

}  // namespace detail

// Runs the reduction `ops` over `p`; see Note [Reduction engine].
template <class Ops>
void reduce(const ReducePlan& p, const Ops& ops) {
  using In = typename Ops::in_t;
  using Acc = typename Ops::acc_t;
  const int64_t M = p.num_outputs, R = p.reduce_size;
  if (M == 0) return;
  if (R == 0) {
    parallel_range(M, [&](int64_t b, int64_t e) {
      detail::OutputCursor c(p, b);
      for (int64_t m = b; m < e; ++m, c.advance(1)) detail::write_at(ops, p, c, 0, ops.identity());
    });
    return;
  }
  const int threads = reduce_threads();
  const bool split = M < 2 * threads && R >= 2 * kDefaultGrain && threads > 1;
  if (!split) {
    const int64_t grain = std::max<int64_t>(1, kDefaultGrain / R);
    const bool blocked = p.osize[0] > 1 && p.ostride_in[0] == static_cast<int64_t>(sizeof(In)) &&
                         p.rstride[0] != static_cast<int64_t>(sizeof(In));
    if (blocked) {
      // Segments of up to 512 outputs (a few KB per row visit), narrower when
      // that leaves too few units for the threads.
      const int64_t n0 = p.osize[0], outer = M / n0;
      int64_t width = std::min<int64_t>(512, n0);
      if (width > 32 && outer * ((n0 + width - 1) / width) < 2 * threads) {
        width = std::clamp<int64_t>((n0 * outer + 2 * threads - 1) / (2 * threads), 32, width);
      }
      const int64_t units = outer * ((n0 + width - 1) / width);
      parallel_range(
          units, [&](int64_t b, int64_t e) { detail::reduce_output_blocks(ops, p, width, b, e); },
          std::max<int64_t>(1, grain / width));
    } else {
      parallel_range(
          M, [&](int64_t b, int64_t e) { detail::reduce_outputs(ops, p, b, e); }, grain);
    }
    return;
  }
  // Few outputs, long reductions: chunks of the reduced space, combined in order.
  const int64_t chunks = std::min<int64_t>(R / kDefaultGrain, 4 * static_cast<int64_t>(threads));
  const int64_t per = (R + chunks - 1) / chunks;
  std::vector<Acc> part(static_cast<size_t>(chunks * M));
  std::vector<int64_t> in_off(static_cast<size_t>(M));
  {
    detail::OutputCursor c(p, 0);
    for (int64_t m = 0; m < M; ++m, c.advance(1)) in_off[m] = c.in_;
  }
  tbb::parallel_for(int64_t{0}, chunks, [&](int64_t ch) {
    int64_t b = ch * per, e = std::min(R, b + per);
    for (int64_t m = 0; m < M; ++m) {
      part[ch * M + m] = detail::reduce_range(ops, p, p.in_data + in_off[m], b, e, ops.identity());
    }
  });
  detail::OutputCursor c(p, 0);
  for (int64_t m = 0; m < M; ++m, c.advance(1)) {
    Acc acc = part[m];
    for (int64_t ch = 1; ch < chunks; ++ch) acc = ops.combine(acc, part[ch * M + m]);
    detail::write_at(ops, p, c, 0, acc);
  }
}

}  // namespace kiln::cpu
