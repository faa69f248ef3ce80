#pragma once

#include "jit/record/trace_buffer.h"

namespace kiln::jit {

// Runs one recorded node through its backend kernel (the Lazy key excluded)
// and gives the node's fresh output storages the memory of the results.
void execute_node(const Node& node);

// Runs a node with one fresh output through `out_op`, its out= overload,
// writing straight into the memory the output already has (Note [Memory plan]).
// When it fails, the node's own op runs instead, so errors name that op.
void execute_node_into(const Node& node, const OperatorEntry& out_op);

}  // namespace kiln::jit
