#include "tests/oracle/oracle_modes.h"

#include <map>

namespace kiln::oracle {
namespace {

// kwargs[name], or `fallback` when the case leaves it out.
IValue kwarg(const Kwargs& kwargs, const std::string& name, IValue fallback) {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return v;
  }
  return fallback;
}

Tensor tensor_at(const Stack& args, size_t i) {
  KILN_CHECK(i < args.size() && args[i].is_tensor(), "[oracle] expected a tensor argument ", i);
  return args[i].to_tensor();
}

using ApiCall = Stack (*)(const Stack& args, const Kwargs& kwargs);

// Note [Oracle API cases]
const std::map<std::string, ApiCall>& api_calls() {
  static const std::map<std::string, ApiCall> calls = {
      {"Tensor.where",
       [](const Stack& a, const Kwargs&) -> Stack {
         const Tensor self = tensor_at(a, 0), cond = tensor_at(a, 1);
         if (a.at(2).is_tensor()) return {self.where(cond, a[2].to_tensor())};
         return {self.where(cond, a[2].to_scalar())};
       }},
      {"Tensor.narrow",
       [](const Stack& a, const Kwargs&) -> Stack {
         return {tensor_at(a, 0).narrow(a.at(1).to_int(), tensor_at(a, 2), a.at(3).to_int())};
       }},
      {"api.max",
       [](const Stack& a, const Kwargs&) -> Stack {
         return {kiln::max(tensor_at(a, 0), tensor_at(a, 1))};
       }},
      {"api.min",
       [](const Stack& a, const Kwargs&) -> Stack {
         return {kiln::min(tensor_at(a, 0), tensor_at(a, 1))};
       }},
      // var / std (self, dim, unbiased, keepdim) through the bool overloads.
      {"api.var",
       [](const Stack& a, const Kwargs&) -> Stack {
         const bool unbiased = a.at(2).to_bool();
         return {kiln::var(tensor_at(a, 0), a.at(1).to_int_list(), unbiased, a.at(3).to_bool())};
       }},
      {"api.std",
       [](const Stack& a, const Kwargs&) -> Stack {
         const bool unbiased = a.at(2).to_bool();
         return {kiln::std(tensor_at(a, 0), a.at(1).to_int_list(), unbiased, a.at(3).to_bool())};
       }},
      // embedding(weight, indices, padding_idx=, max_norm=, norm_type=, scale_grad_by_freq=)
      {"api.embedding",
       [](const Stack& a, const Kwargs& kw) -> Stack {
         const IValue pad = kwarg(kw, "padding_idx", IValue());
         const IValue max_norm = kwarg(kw, "max_norm", IValue());
         return {kiln::embedding(
             tensor_at(a, 0), tensor_at(a, 1), pad.is_none() ? -1 : pad.to_int(),
             max_norm.is_none() ? std::nullopt
                                : std::optional<double>(max_norm.to_scalar().to_double()),
             kwarg(kw, "norm_type", IValue(2.0)).to_scalar().to_double(),
             kwarg(kw, "scale_grad_by_freq", IValue(false)).to_bool())};
       }},
  };
  return calls;
}

Stack call_any(const std::string& op, const Stack& args, const Kwargs& kwargs) {
  if (!is_api_case(op)) return call_op(op, args, kwargs);
  auto it = api_calls().find(op);
  KILN_CHECK(it != api_calls().end(), "[oracle] no API call named ", op);
  return it->second(args, kwargs);
}

}  // namespace

bool is_api_case(const std::string& op) {
  return op.rfind("api.", 0) == 0 || op.rfind("Tensor.", 0) == 0;
}

Mode parse_mode(const std::string& s) {
  if (s == "eager") return Mode::Eager;
  if (s == "lazy") return Mode::Lazy;
  throw Error("[oracle] expected mode eager or lazy, got '" + s + "'");
}

const char* mode_name(Mode m) {
  return m == Mode::Eager ? "eager" : "lazy";
}

Stack call(Mode mode, const std::string& op, const Stack& args, const Kwargs& kwargs) {
  if (mode == Mode::Eager) {
    EagerGuard eager;
    return call_any(op, args, kwargs);
  }
  // Lazy: record, then run the trace here so errors the kernels raise at run
  // time count as the call's errors.
  KILN_CHECK(jit::is_lazy(), "[oracle] lazy mode requested but recording is off (KILN_EAGER?)");
  Stack out = call_any(op, args, kwargs);
  jit::flush();
  // A failed op's error stays with its results (Note [Failures in a trace]):
  // reading them raises it as the call's error.
  for (const IValue& v : out) {
    if (v.is_tensor() && v.to_tensor().defined()) (void)v.to_tensor().data_ptr();
    if (v.is_tensor_list()) {
      for (const Tensor& t : v.to_tensor_list()) {
        if (t.defined()) (void)t.data_ptr();
      }
    }
  }
  return out;
}

}  // namespace kiln::oracle
