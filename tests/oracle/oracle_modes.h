#pragma once

// How the oracle runner executes a case: eager kernels now; lazy (traced,
// fused, compiled) when the jit exists.

#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::oracle {

enum class Mode { Eager, Lazy };

Mode parse_mode(const std::string& s);
const char* mode_name(Mode m);
// Calls `op` by name in `mode`; returns outputs with their values computed.
Stack call(Mode mode, const std::string& op, const Stack& args,
           const std::vector<std::pair<std::string, IValue>>& kwargs);

}  // namespace kiln::oracle
