#include "kiln/nn/mlp.h"

#include "kiln/ops.h"

namespace kiln::nn {

MLP MLP::empty(int64_t dim, int64_t hidden, bool bias, TensorOptions options) {
  return MLP{Linear::empty(dim, hidden, bias, options), Linear::empty(hidden, dim, bias, options)};
}

Tensor MLP::forward(const Tensor& x) const {
  return c_proj.forward(gelu(c_fc.forward(x), approximate));
}

void MLP::visit(const TensorVisitor& f, const std::string& prefix) {
  c_fc.visit(f, child_name(prefix, "c_fc"));
  c_proj.visit(f, child_name(prefix, "c_proj"));
}

GatedMLP GatedMLP::empty(int64_t dim, int64_t hidden, bool bias, TensorOptions options) {
  return GatedMLP{Linear::empty(dim, hidden, bias, options),
                  Linear::empty(dim, hidden, bias, options),
                  Linear::empty(hidden, dim, bias, options)};
}

Tensor GatedMLP::forward(const Tensor& x) const {
  const std::vector<Tensor> y = gate_up.forward(x, {&gate_proj, &up_proj});
  return down_proj.forward(silu(y[0]) * y[1]);
}

void GatedMLP::fuse_projections() {
  gate_up = FusedLinears::fuse({&gate_proj, &up_proj});
}

void GatedMLP::visit(const TensorVisitor& f, const std::string& prefix) {
  gate_proj.visit(f, child_name(prefix, "gate_proj"));
  up_proj.visit(f, child_name(prefix, "up_proj"));
  down_proj.visit(f, child_name(prefix, "down_proj"));
}

}  // namespace kiln::nn
