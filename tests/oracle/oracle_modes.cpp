#include "tests/oracle/oracle_modes.h"

#include <map>

#include "tests/support/testing.h"

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

// Note [Oracle compile mode]
// The case's tensors (arguments, list elements, keyword arguments) become the
// arguments of a function compiled with jit::compile; its other arguments are
// constants of the trace. The function is called twice: first on copies of
// the tensors with the same storage layout (the entry is traced, compiled and
// run), then on the tensors themselves (the guards pass: the plan replays
// without tracing). The second call's results are the case's; a non-mutating
// case's first results are checked against the golden outputs too (not
// against the second's bit for bit: on CUDA an accumulation by atomics, as
// index_add's and scatter_add's, sums in another order each call). Outputs
// that are not tensors (an int) and undefined tensors come from the trace.
//
// Graph mode is the same function compiled with Mode::ReduceOverhead, called
// three times: on copies (traced; the entry's first run is direct), on other
// copies (on CUDA the run that is captured and replayed) and on the tensors
// themselves (a replay with every argument at a new address: the kernels'
// pointers and the library nodes' copies are patched, Note [Graph
// addresses]). The second call's results are the ones checked as "first",
// after the third call ran: a replay that wrote into them (Note [Results
// handed back]) fails the case.
IValue with_tensors(const IValue& v, const std::vector<Tensor>& ts, size_t* k) {
  if (v.is_tensor() && v.to_tensor().defined()) return IValue(ts.at((*k)++));
  if (v.is_tensor_list()) {
    std::vector<Tensor> list;
    for (size_t i = 0; i < v.to_tensor_list().size(); ++i) list.push_back(ts.at((*k)++));
    return IValue(std::move(list));
  }
  return v;
}

void tensors_of(const IValue& v, std::vector<Tensor>* out) {
  if (v.is_tensor() && v.to_tensor().defined()) out->push_back(v.to_tensor());
  if (v.is_tensor_list()) {
    for (const Tensor& t : v.to_tensor_list()) out->push_back(t);
  }
}

Stack call_compiled(const std::string& op, const Stack& args, const Kwargs& kwargs,
                    jit::Mode jit_mode, Stack* first_out) {
  std::vector<Tensor> inputs;
  for (const IValue& a : args) tensors_of(a, &inputs);
  for (const auto& kv : kwargs) tensors_of(kv.second, &inputs);
  Stack shape;  // the traced results, tensors replaced by the compiled ones
  auto fn = [&](const std::vector<Tensor>& ts) {
    size_t k = 0;
    Stack a;
    for (const IValue& v : args) a.push_back(with_tensors(v, ts, &k));
    Kwargs kw;
    for (const auto& [name, v] : kwargs) kw.emplace_back(name, with_tensors(v, ts, &k));
    shape = call_any(op, a, kw);
    std::vector<Tensor> out;
    for (const IValue& v : shape) tensors_of(v, &out);
    return out;
  };
  jit::Options options;
  options.name = op;
  options.mode = jit_mode;
  auto compiled = jit::compile(fn, options);
  auto copies = [&] {
    std::vector<Tensor> out;
    for (const Tensor& t : inputs) out.push_back(testing::same_layout_copy(t, t.device()));
    return out;
  };
  std::vector<Tensor> first = compiled(copies());
  if (jit_mode == jit::Mode::ReduceOverhead) first = compiled(copies());
  std::vector<Tensor> second = compiled(inputs);
  KILN_CHECK(first.size() == second.size(), "[oracle] compile: the calls gave ", first.size(),
             " and ", second.size(), " results");
  auto as_stack = [&](const std::vector<Tensor>& results) {
    size_t k = 0;
    Stack out;
    for (const IValue& v : shape) out.push_back(with_tensors(v, results, &k));
    return out;
  };
  if (first_out) *first_out = as_stack(first);
  return as_stack(second);
}

}  // namespace

bool is_api_case(const std::string& op) {
  return op.rfind("api.", 0) == 0 || op.rfind("Tensor.", 0) == 0;
}

Mode parse_mode(const std::string& s) {
  if (s == "eager") return Mode::Eager;
  if (s == "lazy") return Mode::Lazy;
  if (s == "compile") return Mode::Compile;
  if (s == "graph") return Mode::Graph;
  throw Error("[oracle] expected mode eager, lazy, compile or graph, got '" + s + "'");
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::Eager:
      return "eager";
    case Mode::Lazy:
      return "lazy";
    case Mode::Compile:
      return "compile";
    case Mode::Graph:
      return "graph";
  }
  return "?";
}

Stack call(Mode mode, const std::string& op, const Stack& args, const Kwargs& kwargs,
           Stack* first) {
  if (mode == Mode::Eager) {
    EagerGuard eager;
    return call_any(op, args, kwargs);
  }
  if (mode == Mode::Compile) return call_compiled(op, args, kwargs, jit::Mode::Default, first);
  if (mode == Mode::Graph) {
    return call_compiled(op, args, kwargs, jit::Mode::ReduceOverhead, first);
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
