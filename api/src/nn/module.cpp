#include "kiln/nn/module.h"

#include <set>

#include "kiln/jit.h"
#include "kiln/ops.h"

namespace kiln::nn {

std::string child_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

void to(const VisitFn& visit, Device device, std::optional<DType> dtype) {
  // The dtype is the floating tensors': an integer or bool one would make
  // weights of truncated values (a GPT-2 to(int64) held zeros and ran).
  if (dtype) check_dtype("to", "dtype", *dtype);  // before any tensor moves
  KILN_CHECK(!dtype || is_floating(*dtype),
             "[to] expected a floating dtype for a module's floating tensors, got ", *dtype);
  EagerGuard eager;  // weights are made once: compute them now, not in someone's trace
  visit([&](const std::string&, Tensor& t, TensorKind) {
    if (!t.defined()) return;
    const DType dt = dtype && is_floating(t.dtype()) ? *dtype : t.dtype();
    if (t.device() != device || t.dtype() != dt) t = t.to(device, dt);
  });
}

void materialize(const VisitFn& visit,
                 const std::function<Tensor(const std::string&, const Tensor&, TensorKind)>& make) {
  EagerGuard eager;
  visit([&](const std::string& name, Tensor& t, TensorKind kind) { t = make(name, t, kind); });
}

void check_parameter_shape(const std::string& model, const std::string& name, IntArrayRef expected,
                           IntArrayRef actual, const std::string& where) {
  KILN_CHECK(expected == actual, "[", model, "] expected parameter '", name, "' of shape ",
             expected, " in ", where, ", got shape ", actual);
}

// Note [Atomic loads]
// load_state_dict checks every entry (names, definedness, shapes, values to
// read, strict extras) before it replaces any parameter, so a state dict that
// does not fit leaves the module as it was. Values to read: a lazy entry is
// computed in the checking pass, so that one whose computation fails (a bad
// index upstream) raises before anything is replaced. The replacing pass then
// only converts (device, dtype) one parameter at a time, so peak memory stays
// one parameter above the module's; running out of memory in that pass is
// the one failure that leaves the parameters converted so far replaced.
void load_state_dict(const VisitFn& visit, const StateDict& state, const std::string& model,
                     bool strict) {
  std::set<std::string> used;
  EagerGuard eager;
  visit([&](const std::string& name, Tensor& t, TensorKind kind) {
    if (kind != TensorKind::Parameter) return;
    KILN_CHECK(t.defined(), "[", model, "] expected parameter '", name,
               "' of the module to be a defined tensor (a skeleton's or a loaded one), got an "
               "undefined one");
    auto it = state.find(name);
    KILN_CHECK(it != state.end(), "[", model, "] expected parameter '", name, "' of shape ",
               t.sizes(), " in the state dict, got none");
    const Tensor& src = it->second;
    KILN_CHECK(src.defined(), "[", model, "] expected parameter '", name, "' of shape ", t.sizes(),
               " in the state dict, got an undefined tensor");
    check_parameter_shape(model, name, t.sizes(), src.sizes(), "the state dict");
    KILN_CHECK(t.is_meta() || !src.is_meta(), "[", model, "] expected parameter '", name,
               "' in the state dict to hold values for a module on ", t.device(),
               ", got a meta tensor");
    if (!t.is_meta()) (void)src.data_ptr();  // a pending value computed (or its failure raised) now
    used.insert(name);
  });
  if (strict) {
    for (const auto& [name, t] : state) {
      KILN_CHECK(used.count(name), "[", model,
                 "] expected only its own parameters in the state "
                 "dict, got '",
                 name, "'");
    }
  }
  visit([&](const std::string& name, Tensor& t, TensorKind kind) {
    if (kind != TensorKind::Parameter) return;
    const Tensor& src = state.at(name);
    t = t.is_meta() ? src : src.to(t.device(), t.dtype());
  });
}

}  // namespace kiln::nn
