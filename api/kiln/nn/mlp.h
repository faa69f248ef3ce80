#pragma once

// The two feed-forward blocks of decoder models.

#include <cstdint>
#include <string>

#include "kiln/api.h"
#include "kiln/nn/layers.h"

namespace kiln::nn {

// proj(gelu(fc(x))), GPT-2's (tanh-approximated GELU); names c_fc, c_proj.
struct KILN_API MLP {
  Linear c_fc, c_proj;
  std::string approximate = "tanh";  // gelu's: "tanh" or "none"

  static MLP empty(int64_t dim, int64_t hidden, bool bias, TensorOptions options);
  Tensor forward(const Tensor& x) const;
  void visit(const TensorVisitor& f, const std::string& prefix);
};

// SwiGLU: down_proj(silu(gate_proj(x)) * up_proj(x)), Llama's.
struct KILN_API GatedMLP {
  Linear gate_proj, up_proj, down_proj;

  static GatedMLP empty(int64_t dim, int64_t hidden, bool bias, TensorOptions options);
  Tensor forward(const Tensor& x) const;
  void visit(const TensorVisitor& f, const std::string& prefix);
};

}  // namespace kiln::nn
