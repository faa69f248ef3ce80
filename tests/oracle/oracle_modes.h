#pragma once

// How the oracle runner executes a case: eager kernels, lazily (traced, fused,
// compiled when read), or inside jit::compile, its plan launched kernel by
// kernel or (graph) replayed as a CUDA graph (Note [Oracle compile mode]).

#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::oracle {

enum class Mode { Eager, Lazy, Compile, Graph };

Mode parse_mode(const std::string& s);
const char* mode_name(Mode m);
using Kwargs = std::vector<std::pair<std::string, IValue>>;

// Note [Oracle API cases]
// A case whose op is spelled "api.NAME" or "Tensor.NAME" names no schema: it
// calls kiln's C++ API, a function whose options only C++ spells (embedding's
// max_norm, var's bool unbiased) or a method form (x.where(cond, y)). The
// golden comes from the case's `ref` (generate.py), the call from the table
// in oracle_modes.cpp.
bool is_api_case(const std::string& op);

// Calls `op` by name (or its API case) in `mode`; returns outputs with their
// values computed. In compile and graph modes, `first` (when given) receives
// the results of an earlier call (Note [Oracle compile mode]).
Stack call(Mode mode, const std::string& op, const Stack& args, const Kwargs& kwargs,
           Stack* first = nullptr);

}  // namespace kiln::oracle
