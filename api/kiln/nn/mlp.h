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
  // gate and up as one product (Note [Fused projections]); set by fuse_projections().
  FusedLinears gate_up;

  static GatedMLP empty(int64_t dim, int64_t hidden, bool bias, TensorOptions options);
  Tensor forward(const Tensor& x) const;
  // Makes gate's and up's weights views of one tensor (Note [Fused projections]).
  void fuse_projections();
  void visit(const TensorVisitor& f, const std::string& prefix);
};

}  // namespace kiln::nn
