#pragma once

// The iteration space of a fused group, as both launchers need it: dims
// ordered outermost first by the first output's strides, size-1 dims dropped,
// neighbours that step as one for every operand merged.

#include <vector>

#include "kiln/tensor.h"

namespace kiln::jit {

struct Iteration {
  DimVector sizes;                 // outermost first; at least one dim
  std::vector<DimVector> strides;  // per operand, in elements; 0 where it broadcasts
  int64_t numel = 1;
};

// Gives a fused group's output its memory (a lazy storage has none until it runs).
void ensure_memory(const Tensor& t);

// `ops`: outputs first, then inputs, each broadcastable to `shape`.
Iteration coalesce(IntArrayRef shape, const std::vector<Tensor>& ops, int num_outputs);

}  // namespace kiln::jit
