#pragma once

// What autocast does to each op (Note [Autocast] in autocast.cpp), asked
// rather than listed again: tests and tools read it here.

#include <optional>
#include <string_view>

#include "kiln/autocast.h"

namespace kiln {

// The policy of op `name` ("mm", "sum.dim_IntList", "myns::op"): a built-in
// op's, or the one set_autocast_policy gave it; nullopt for an op autocast
// passes through (no Autocast kernel).
std::optional<AutocastPolicy> autocast_policy(std::string_view name);

}  // namespace kiln
