#include "jit/record/decompose_reduce.h"

#include <limits>
#include <string>

#include "runtime/core/type_promotion.h"

namespace kiln::jit {
namespace {

// Float32 math covers these exactly as the eager kernels' float32 math does;
// float64 stays with the eager kernels.
bool float_data(DType t) {
  return t == kFloat32 || t == kFloat16 || t == kBFloat16;
}

// Marks the dims named by `dims` (an int, an int list, or None/[] for all).
bool mark_dims(const IValue& dims, int64_t ndim, std::vector<bool>* reduced) {
  reduced->assign(static_cast<size_t>(ndim), false);
  std::vector<int64_t> list;
  if (dims.is_int()) list.push_back(dims.to_int());
  if (dims.is_int_list()) list = dims.to_int_list();
  if (!dims.is_none() && !dims.is_int() && !dims.is_int_list()) return false;
  if (list.empty()) {
    reduced->assign(static_cast<size_t>(ndim), true);
    return true;
  }
  for (int64_t d : list) {
    if (ndim == 0 && (d == 0 || d == -1)) continue;  // a 0-dim tensor reduces over "dim 0"
    if (d < 0) d += ndim;
    if (d < 0 || d >= ndim) return false;
    (*reduced)[static_cast<size_t>(d)] = true;
  }
  return true;
}

// As the eager rms_norm: the dtype's machine epsilon when eps is unset.
double default_rms_eps(DType t) {
  switch (t) {
    case kFloat16:
      return 0.0009765625;
    case kBFloat16:
      return 0.0078125;
    default:
      return std::numeric_limits<float>::epsilon();
  }
}

bool trailing_dims(const Node& n, int64_t ndim, std::vector<bool>* reduced) {
  const IValue& shape = n.args[1];
  if (!shape.is_int_list()) return false;
  const int64_t k = static_cast<int64_t>(shape.to_int_list().size());
  if (k == 0 || k > ndim) return false;
  reduced->assign(static_cast<size_t>(ndim), false);
  for (int64_t d = ndim - k; d < ndim; ++d) (*reduced)[static_cast<size_t>(d)] = true;
  return true;
}

const Tensor* optional_tensor(const Node& n, size_t i) {
  if (i >= n.args.size() || !n.args[i].is_tensor() || !n.args[i].to_tensor().defined()) {
    return nullptr;
  }
  return &n.args[i].to_tensor();
}

}  // namespace

bool match_reduction(const Node& node, ReductionSpec* spec) {
  if (node.outputs.size() != 1 || !node.written.empty() || node.args.empty()) return false;
  if (!node.args[0].is_tensor()) return false;
  const Tensor& x = node.args[0].to_tensor();
  const DType out = node.outputs[0].dtype();
  if (!x.defined() || !float_data(x.dtype()) || !float_data(out)) return false;
  const std::string& name = node.op->name();
  const int64_t ndim = x.dim();
  *spec = ReductionSpec{};
  spec->input_dtype = x.dtype();
  auto dtype_arg = [&](size_t i) {
    if (i < node.args.size() && node.args[i].is_dtype())
      spec->input_dtype = node.args[i].to_dtype();
    return float_data(spec->input_dtype);
  };
  if (name == "sum" || name == "mean" || name == "max" || name == "min") {
    spec->op = name == "sum"    ? RowOp::Sum
               : name == "mean" ? RowOp::Mean
               : name == "max"  ? RowOp::Max
                                : RowOp::Min;
    spec->reduced.assign(static_cast<size_t>(ndim), true);
    return name == "max" || name == "min" || dtype_arg(1);
  }
  if (name == "sum.dim_IntList" || name == "mean.dim") {
    spec->op = name == "sum.dim_IntList" ? RowOp::Sum : RowOp::Mean;
    spec->keepdim = node.args[2].to_bool();
    return mark_dims(node.args[1], ndim, &spec->reduced) && dtype_arg(3);
  }
  if (name == "amax" || name == "amin") {
    spec->op = name == "amax" ? RowOp::Max : RowOp::Min;
    spec->keepdim = node.args[2].to_bool();
    return mark_dims(node.args[1], ndim, &spec->reduced);
  }
  if (name == "var.correction" || name == "std.correction") {
    spec->op = RowOp::Var;
    spec->sqrt_result = name == "std.correction";
    spec->correction = node.args[2].is_none() ? 1 : node.args[2].to_int();
    spec->keepdim = node.args[3].to_bool();
    return mark_dims(node.args[1], ndim, &spec->reduced);
  }
  if (name == "softmax.int" || name == "log_softmax.int") {
    spec->op = name == "softmax.int" ? RowOp::Softmax : RowOp::LogSoftmax;
    spec->reduced.assign(static_cast<size_t>(ndim), false);
    if (ndim > 0) {
      int64_t d = node.args[1].to_int();
      if (d < 0) d += ndim;
      if (d < 0 || d >= ndim) return false;
      spec->reduced[static_cast<size_t>(d)] = true;
    }
    return dtype_arg(2);
  }
  if (name == "layer_norm") {
    spec->op = RowOp::LayerNorm;
    spec->eps = node.args[4].to_double();
    for (size_t i : {2, 3}) {
      const Tensor* p = optional_tensor(node, i);
      if (p && p->dtype() != x.dtype()) return false;
    }
    return trailing_dims(node, ndim, &spec->reduced);
  }
  if (name == "rms_norm") {
    spec->op = RowOp::RmsNorm;
    spec->eps = node.args[3].is_none() ? default_rms_eps(x.dtype()) : node.args[3].to_double();
    const Tensor* w = optional_tensor(node, 2);
    if (w && !float_data(w->dtype())) return false;
    return trailing_dims(node, ndim, &spec->reduced);
  }
  return false;
}

int32_t emit_reduction_prologue(KernelBuilder& b, const ReductionSpec& spec, int32_t x) {
  // dtype= converts the input first (to a 16-bit grid when it names one).
  return b.round_to(b.cast(x, kFloat32), spec.input_dtype);
}

int32_t emit_reduction_epilogue(KernelBuilder& b, const Node& node, const ReductionSpec& spec,
                                int32_t core,
                                const std::function<int32_t(const Tensor&)>& resolve) {
  const DType out = node.outputs[0].dtype();
  int32_t v = core;  // std's root is the kernel's (ReductionKernel::sqrt_result)
  if (spec.op == RowOp::LayerNorm) {
    // (x * rstd + shift) * weight + bias, rounded once as the eager kernel does.
    if (const Tensor* w = optional_tensor(node, 2)) {
      int32_t wv = resolve(*w);
      if (wv < 0) return -1;
      v = b.op(Prim::Mul, kFloat32, v, b.cast(wv, kFloat32));
    }
    if (const Tensor* bias = optional_tensor(node, 3)) {
      int32_t bv = resolve(*bias);
      if (bv < 0) return -1;
      v = b.op(Prim::Add, kFloat32, v, b.cast(bv, kFloat32));
    }
  }
  if (spec.op == RowOp::RmsNorm) {
    // Rounded to the input's dtype, then times weight with type promotion.
    if (const Tensor* w = optional_tensor(node, 2)) {
      int32_t wv = resolve(*w);
      if (wv < 0) return -1;
      v = b.round_to(v, node.args[0].to_tensor().dtype());
      v = b.op(Prim::Mul, kFloat32, v, b.cast(wv, kFloat32));
    }
  }
  return b.round_to(v, out);
}

}  // namespace kiln::jit
