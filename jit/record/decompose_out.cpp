#include <string>
#include <unordered_map>

#include "jit/record/decompose_internal.h"
#include "jit/record/lazy_kernel.h"
#include "runtime/core/thread_cache.h"

namespace kiln::jit::decomp {

// Note [Out forms]
// An out= form ("exp.out", "lt.Tensor_out", "div.out_mode") and an in-place
// comparison ("lt_.Tensor") compute what their functional op computes, in
// that op's dtype (from the inputs alone), and convert it to the target's
// dtype on the store, as the eager TensorIter does.
std::string functional_name(const std::string& name) {
  const size_t dot = name.find('.');
  if (dot == std::string::npos) return "";
  std::string base = name.substr(0, dot), overload = name.substr(dot + 1);
  if (overload == "out") return base;
  if (overload == "out_mode") return base + ".Tensor_mode";
  if (overload.size() > 4 && overload.compare(overload.size() - 4, 4, "_out") == 0) {
    return base + "." + overload.substr(0, overload.size() - 4);
  }
  if (base.size() > 1 && base.back() == '_')
    return base.substr(0, base.size() - 1) + "." + overload;
  return "";
}

// The functional ops whose integer inputs give float results.
bool promotes_to_float(const std::string& name) {
  static const char* const kFloatOps[] = {
      "exp",  "log",  "sqrt", "rsqrt", "reciprocal", "sin",   "cos",   "tanh",       "sigmoid",
      "erf",  "erfc", "silu", "gelu",  "expm1",      "log1p", "asin",  "acos",       "atan",
      "sinh", "cosh", "tan",  "exp2",  "log2",       "log10", "atan2", "div.Tensor", "softplus"};
  for (const char* f : kFloatOps) {
    if (name == f) return true;
  }
  return false;
}

OutForm out_form(const OperatorEntry* op) {
  // Note [Thread caches at thread exit]
  using Forms = ThreadCache<std::unordered_map<const OperatorEntry*, OutForm>, struct FormsTag>;
  std::unordered_map<const OperatorEntry*, OutForm>* forms = Forms::get();
  if (forms) {
    auto it = forms->find(op);
    if (it != forms->end()) return it->second;
  }
  OutForm f;
  std::string name = functional_name(op->name());
  if (!name.empty()) {
    f.functional = lookup(name, true);
    if (!f.functional && name.find('.') == std::string::npos) {
      name += ".Tensor";  // "add.out" is add.Tensor's
      f.functional = lookup(name, true);
    }
    f.to_float = promotes_to_float(name);
  }
  if (forms) forms->emplace(op, f);
  return f;
}

bool is_bool_op(Decomposition d) {
  static const Decomposition ops[] = {d_compare<Prim::Eq>,         d_compare<Prim::Ne>,
                                      d_compare<Prim::Lt>,         d_compare<Prim::Le>,
                                      d_compare<Prim::Gt>,         d_compare<Prim::Ge>,
                                      d_predicate<Prim::IsNan>,    d_predicate<Prim::IsInf>,
                                      d_predicate<Prim::IsFinite>, d_logical_not,
                                      d_logical<Prim::LogicalAnd>, d_logical<Prim::LogicalOr>,
                                      d_logical<Prim::Ne>};
  for (Decomposition o : ops) {
    if (o == d) return true;
  }
  return false;
}

// The functional op's dtype for an out= or in-place node (Note [Out forms]).
DType functional_dtype(const Node& n, const OutForm& f) {
  if (is_bool_op(f.functional)) return kBool;
  ResultType rt;
  for (size_t i = 0; i < n.args.size(); ++i) {
    const IValue& v = n.args[i];
    // An out= target (the last argument) takes no part; an in-place self does.
    const bool target =
        !n.written.empty() && n.written[0] != 0 && static_cast<size_t>(n.written[0]) == i;
    if (v.is_tensor() && v.to_tensor().defined() && !target) rt.add(v.to_tensor());
    // clamp's bounds promote as tensors would.
    if (v.is_scalar() && f.functional == d_clamp) rt.add(v.to_scalar());
  }
  DType t = rt.result("fusion");
  if (f.to_float && !is_floating(t)) t = kFloat32;
  // True division (no rounding mode) of integers gives the default float
  // dtype; square is pow(x, 2), whose bool base gives int64.
  if (f.functional == d_div_mode && arg(n, 2).is_none() && !is_floating(t)) t = kFloat32;
  if (f.functional == d_square && t == kBool) t = kInt64;
  return t;
}

int32_t d_out_form(KernelBuilder& b, const Node& n, const std::vector<int32_t>& v) {
  const OutForm& f = out_form(n.op);
  Node fn = n;
  const DType t = functional_dtype(n, f);
  const Tensor& target = n.outputs[0];
  fn.outputs[0] = fresh_output(target.sizes(), target.strides(), 0, t, target.device());
  if (n.written[0] != 0) fn.args[n.written[0]] = IValue();  // the out= target
  fn.written.clear();
  int32_t r = f.functional(b, fn, v);
  if (r < 0) return -1;
  return b.cast(b.round_to(r, t), out_compute(n));
}

}  // namespace kiln::jit::decomp
