#pragma once

// Named tensors of a module, after libtorch's C++ frontend: a module lists its
// parameters and buffers by dotted name (Hugging Face's names), and the
// functions here build state dicts, move modules between devices and dtypes,
// and fill them from checkpoints with every name and shape checked.
//
// A module is any type with
//   void visit(const TensorVisitor& f, const std::string& prefix);
// that calls f(child_name(prefix, name), tensor, kind) for each of its tensors,
// in a fixed order. Modules are plain structs (aggregates), so they copy cheaply
// (tensors are handles) and read like the code that uses them.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/api.h"
#include "kiln/tensor.h"

namespace kiln::nn {

// Parameters are loaded from checkpoints and saved in state dicts; buffers
// (e.g. rotary tables) are derived from the config and only follow to().
enum class TensorKind { Parameter, Buffer };
using TensorVisitor = std::function<void(const std::string& name, Tensor& t, TensorKind kind)>;
using StateDict = std::map<std::string, Tensor>;
// Calls a module's visit with a visitor (what the functions below take).
using VisitFn = std::function<void(const TensorVisitor&)>;

// "prefix.name", or "name" when the prefix is empty.
KILN_API std::string child_name(const std::string& prefix, const std::string& name);

// Moves every tensor to `device` and its floating ones to `dtype` (when set).
KILN_API void to(const VisitFn& visit, Device device, std::optional<DType> dtype = std::nullopt);
// Replaces every tensor by make(name, current): how skeletons (meta tensors of
// the right shapes) get their values, random or loaded.
KILN_API void materialize(const VisitFn& visit,
                          const std::function<Tensor(const std::string& name, const Tensor& current,
                                                     TensorKind kind)>& make);
// Replaces every parameter by the state dict's tensor of that name, moved to
// the parameter's device and dtype (a meta parameter takes the state dict's).
// A missing name, an undefined tensor or another shape is an error naming
// `model`; with `strict`, so is a name the module does not have. Every entry
// is checked before any parameter is replaced: a load that fails changes
// nothing (Note [Atomic loads] in module.cpp).
KILN_API void load_state_dict(const VisitFn& visit, const StateDict& state,
                              const std::string& model, bool strict = true);
// "[model] expected parameter 'name' of shape [..] in `where`, got shape [..]".
KILN_API void check_parameter_shape(const std::string& model, const std::string& name,
                                    IntArrayRef expected, IntArrayRef actual,
                                    const std::string& where);

template <class M>
VisitFn visitor_of(M& m) {
  return [&m](const TensorVisitor& f) { m.visit(f, ""); };
}

template <class M>
std::vector<std::pair<std::string, Tensor>> named_parameters(M& m) {
  std::vector<std::pair<std::string, Tensor>> out;
  m.visit(
      [&](const std::string& name, Tensor& t, TensorKind kind) {
        if (kind == TensorKind::Parameter) out.emplace_back(name, t);
      },
      "");
  return out;
}

template <class M>
std::vector<std::pair<std::string, Tensor>> named_buffers(M& m) {
  std::vector<std::pair<std::string, Tensor>> out;
  m.visit(
      [&](const std::string& name, Tensor& t, TensorKind kind) {
        if (kind == TensorKind::Buffer) out.emplace_back(name, t);
      },
      "");
  return out;
}

// The parameters by name (handles to the module's tensors, not copies).
template <class M>
StateDict state_dict(const M& m) {
  StateDict out;
  for (auto& [name, t] : named_parameters(const_cast<M&>(m))) out.emplace(name, t);
  return out;
}

template <class M>
void to(M& m, Device device, std::optional<DType> dtype = std::nullopt) {
  to(visitor_of(m), device, dtype);
}

template <class M>
void load_state_dict(M& m, const StateDict& state, const std::string& model, bool strict = true) {
  load_state_dict(visitor_of(m), state, model, strict);
}

}  // namespace kiln::nn
