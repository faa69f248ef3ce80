// cat and stack. cat is one kernel for CPU and Meta (the shape and dtype
// rules are shared; meta tensors skip the copies); stack is a composite of
// unsqueeze and cat, so a lazy trace records those two ops.

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/composite_errors.h"
#include "runtime/core/type_promotion.h"
#include "runtime/cpu/copy.h"
#include "runtime/cpu/index_utils.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

// Note [Legacy cat skipping]
// Before tensors could have zero-size dims anywhere, the only empty tensor
// was the 1-D one of shape [0], so cat lets those take part whatever the
// other shapes are: they join the dtype promotion but not the shape checks,
// and the dim is wrapped against the first tensor that is not one of them.
// PyTorch 1.13 keeps the rule for that exact shape only.
bool skipped(const Tensor& t) {
  return t.dim() == 1 && t.numel() == 0;
}

Tensor cat_impl(const char* op, TensorList tensors, int64_t dim, const Tensor* out_arg) {
  bool meta = false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_defined(t, op, "tensors");
    KILN_CHECK(t.dim() > 0, "[", op,
               "] expected tensors with at least 1 dim, got a 0-dim tensor at position ", i);
    if (t.is_meta()) {
      meta = true;
    } else {
      check_cpu(t, op, "tensors");
    }
  }
  KILN_CHECK(!tensors.empty(), "[", op, "] expected a non-empty list of tensors");

  size_t valid = tensors.size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!skipped(tensors[i])) {
      valid = i;
      break;
    }
  }
  if (valid < tensors.size()) dim = wrap_dim(dim, tensors[valid].dim(), op);

  ResultType rt;
  for (const Tensor& t : tensors) rt.add(t);
  DType dtype = rt.result(op);
  if (out_arg) {
    KILN_CHECK(can_cast(dtype, out_arg->dtype()), "[", op, "] result type ", dtype,
               " can't be cast to the desired output type ", out_arg->dtype());
    dtype = out_arg->dtype();
  }

  DimVector sizes(1, 0);
  if (valid < tensors.size()) {
    const Tensor& ref = tensors[valid];
    sizes = DimVector(ref.sizes());
    int64_t total = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      if (skipped(t)) continue;
      KILN_CHECK(t.dim() == ref.dim(), "[", op, "] expected tensor ", i, " to have ", ref.dim(),
                 " dims like tensor ", valid, ", got ", t.dim(), " dims (sizes ", t.sizes(), ")");
      for (int64_t d = 0; d < ref.dim(); ++d) {
        if (d == dim) continue;
        KILN_CHECK(t.sizes()[d] == ref.sizes()[d], "[", op, "] expected tensor ", i,
                   " to have size ", ref.sizes()[d], " at dim ", d, " like tensor ", valid,
                   ", got ", t.sizes()[d], " (sizes must match except in dim ", dim, ")");
      }
      total = checked_add(total, t.sizes()[dim], op);
    }
    sizes[dim] = total;
  }

  Tensor out;
  if (out_arg) {
    out = *out_arg;
    if (!meta) check_cpu(out, op, "out");
    if (!(out.sizes() == sizes.ref())) resize_out(out, sizes);
    check_no_internal_overlap(out, op);
    for (const Tensor& t : tensors) check_no_overlap(out, t, op);
  } else {
    out = empty_tensor(sizes, dtype, meta ? Device::meta() : Device::cpu(), op);
  }
  if (meta || valid == tensors.size()) return out;

  int64_t offset = 0;
  const int64_t step = out.strides()[dim];
  for (const Tensor& t : tensors) {
    if (skipped(t)) continue;
    const int64_t n = t.sizes()[dim];
    if (n > 0 && t.numel() > 0) {
      DimVector part(out.sizes());
      part[dim] = n;
      Tensor dst = make_view(out, part, out.strides(), out.storage_offset() + offset * step);
      // See Note [Writes into shared storage].
      copy_into(dst, same_storage(out, t) ? t.clone() : t);
    }
    offset += n;
  }
  out.impl()->bump_version();
  return out;
}

Tensor cat(TensorList tensors, int64_t dim) {
  return cat_impl("cat", tensors, dim, nullptr);
}
Tensor cat_out(TensorList tensors, int64_t dim, const Tensor& out) {
  return cat_impl("cat.out", tensors, dim, &out);
}

// --- stack (composite) -------------------------------------------------------------

std::vector<Tensor> stack_inputs(const char* op, TensorList tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "[", op, "] expected a non-empty list of tensors");
  for (const Tensor& t : tensors) check_defined(t, op, "tensors");
  const Tensor& first = tensors[0];
  dim = wrap_dim(dim, first.dim() + 1, op);
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    KILN_CHECK(tensors[i].sizes() == first.sizes(), "[", op,
               "] expected tensors of equal sizes, got ", first.sizes(), " at entry 0 and ",
               tensors[i].sizes(), " at entry ", i);
    parts.push_back(tensors[i].unsqueeze(dim));
  }
  return parts;
}

Tensor stack(TensorList tensors, int64_t dim) {
  std::vector<Tensor> parts = stack_inputs("stack", tensors, dim);
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  // cat's checks are stack's (Note [Composite ops name themselves]).
  return rename_errors("stack", "cat", [&] { return kiln::cat(parts, d); });
}

Tensor stack_out(TensorList tensors, int64_t dim, const Tensor& out) {
  std::vector<Tensor> parts = stack_inputs("stack.out", tensors, dim);
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack.out");
  DimVector shape(parts[0].sizes());
  shape[d] = static_cast<int64_t>(parts.size());
  check_defined(out, "stack.out", "out");
  // An out of this shape is written as it is (no resize): name this op, not cat.out.
  if (out.sizes() == shape.ref()) check_no_internal_overlap(out, "stack.out");
  static const TypedOp<Tensor(TensorList, int64_t, const Tensor&)> cat_out_op("cat.out");
  rename_errors("stack.out", "cat.out", [&] { return cat_out_op(parts, d, out); });
  return out;
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("cat", &cat);
  m.impl("cat.out", &cat_out);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("cat", &cat);
  m.impl("cat.out", &cat_out);
}
KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("stack", &stack);
  m.impl("stack.out", &stack_out);
}

}  // namespace kiln::cpu
