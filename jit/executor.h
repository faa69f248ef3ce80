#pragma once

#include "jit/trace_buffer.h"

namespace kiln::jit {

// Runs one recorded node through its backend kernel (the Lazy key excluded)
// and gives the node's fresh output storages the memory of the results.
void execute_node(const Node& node);

}  // namespace kiln::jit
