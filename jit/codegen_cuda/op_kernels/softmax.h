#pragma once

// softmax / log_softmax rows on CUDA, and the scaled, masked, causal softmax
// scaled_dot_product_attention uses.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::jit::cuda {

// softmax(scores * scale + mask) over the last dim of a contiguous
// [..., L, S] tensor, in scores' dtype. `mask` (optional): bool (true keeps)
// or additive, broadcastable to scores. `causal`: position j > i is masked
// (top-left aligned, as PyTorch's is_causal). A fully masked row is NaN.
Tensor attention_softmax(const Tensor& scores, double scale, const std::optional<Tensor>& mask,
                         bool causal);

std::vector<std::pair<std::string, std::string>> softmax_source_samples();

}  // namespace kiln::jit::cuda
