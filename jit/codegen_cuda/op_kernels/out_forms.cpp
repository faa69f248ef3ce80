// out= forms of the CUDA op kernels: cat.out, cumsum.out, cumprod.out,
// sum.IntList_out, mean.out, amax.out, amin.out, gather.out, index_select.out.
//
// Note [CUDA out= forms]
// Each runs the op's own out= Meta kernel on meta twins first (shape, dtype and
// every error as on the CPU), then the functional CUDA kernel, computing in
// the dtype the CPU kernel computes in when out is given (out's dtype for the
// scans and sum/mean), and writes the result into `out`: resized as
// PyTorch's resize_ does when its shape differs, else kept in its layout.

#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::jit::cuda {
namespace {

using T = const Tensor&;
using OptD = std::optional<DType>;
using OptIL = std::optional<IntArrayRef>;

const Tensor& write_out(const char* op, const Tensor& out, const Tensor& meta,
                        const Tensor& value) {
  check_device(out, value.device(), op, "out");
  resize_out(out, meta.sizes());
  copy_into_cuda(out, value);
  return out;
}

Tensor cat_out(TensorList tensors, int64_t dim, T out) {
  static const TypedOp<Tensor(TensorList, int64_t, T)> op("cat.out");
  Tensor meta = op(meta_of(tensors), dim, meta_of(out));
  return write_out("cat.out", out, meta, kiln::cat(tensors, dim));
}

template <bool kProd>
Tensor scan_out(T self, int64_t dim, OptD dtype, T out) {
  static const TypedOp<Tensor(T, int64_t, OptD, T)> op(kProd ? "cumprod.out" : "cumsum.out");
  static const TypedOp<Tensor(T, int64_t, OptD)> fn(kProd ? "cumprod" : "cumsum");
  Tensor meta = op(meta_of(self), dim, dtype, meta_of(out));
  return write_out(kProd ? "cumprod.out" : "cumsum.out", out, meta,
                   fn(self, dim, dtype.value_or(out.dtype())));
}

template <bool kMean>
Tensor sum_out(T self, OptIL dim, bool keepdim, OptD dtype, T out) {
  static const TypedOp<Tensor(T, OptIL, bool, OptD, T)> op(kMean ? "mean.out" : "sum.IntList_out");
  static const TypedOp<Tensor(T, OptIL, bool, OptD)> fn(kMean ? "mean.dim" : "sum.dim_IntList");
  Tensor meta = op(meta_of(self), dim, keepdim, dtype, meta_of(out));
  return write_out(kMean ? "mean.out" : "sum.IntList_out", out, meta,
                   fn(self, dim, keepdim, dtype.value_or(out.dtype())));
}

template <bool kMax>
Tensor extreme_out(T self, IntArrayRef dim, bool keepdim, T out) {
  static const TypedOp<Tensor(T, IntArrayRef, bool, T)> op(kMax ? "amax.out" : "amin.out");
  static const TypedOp<Tensor(T, IntArrayRef, bool)> fn(kMax ? "amax" : "amin");
  Tensor meta = op(meta_of(self), dim, keepdim, meta_of(out));
  return write_out(kMax ? "amax.out" : "amin.out", out, meta, fn(self, dim, keepdim));
}

Tensor gather_out(T self, int64_t dim, T index, bool sparse_grad, T out) {
  static const TypedOp<Tensor(T, int64_t, T, bool, T)> op("gather.out");
  static const TypedOp<Tensor(T, int64_t, T, bool)> fn("gather");
  Tensor meta = op(meta_of(self), dim, meta_of(index), sparse_grad, meta_of(out));
  return write_out("gather.out", out, meta, fn(self, dim, index, sparse_grad));
}

Tensor index_select_out(T self, int64_t dim, T index, T out) {
  static const TypedOp<Tensor(T, int64_t, T, T)> op("index_select.out");
  static const TypedOp<Tensor(T, int64_t, T)> fn("index_select");
  Tensor meta = op(meta_of(self), dim, meta_of(index), meta_of(out));
  return write_out("index_select.out", out, meta, fn(self, dim, index));
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("cat.out", &cat_out);
  m.impl("cumsum.out", &scan_out<false>);
  m.impl("cumprod.out", &scan_out<true>);
  m.impl("sum.IntList_out", &sum_out<false>);
  m.impl("mean.out", &sum_out<true>);
  m.impl("amax.out", &extreme_out<true>);
  m.impl("amin.out", &extreme_out<false>);
  m.impl("gather.out", &gather_out);
  m.impl("index_select.out", &index_select_out);
}

}  // namespace kiln::jit::cuda
