#include "kiln/nn/layers.h"

#include "kiln/jit.h"
#include "kiln/ops.h"

namespace kiln::nn {

Linear Linear::empty(int64_t in, int64_t out, bool bias, TensorOptions options) {
  Linear l;
  l.weight = kiln::empty({out, in}, options);
  if (bias) l.bias = kiln::empty({out}, options);
  return l;
}

Tensor Linear::forward(const Tensor& x) const {
  return linear(x, weight, bias);
}

void Linear::visit(const TensorVisitor& f, const std::string& prefix) {
  f(child_name(prefix, "weight"), weight, TensorKind::Parameter);
  if (bias) f(child_name(prefix, "bias"), *bias, TensorKind::Parameter);
}

Embedding Embedding::empty(int64_t num, int64_t dim, TensorOptions options) {
  return Embedding{kiln::empty({num, dim}, options)};
}

Tensor Embedding::forward(const Tensor& indices) const {
  return embedding(weight, indices);
}

void Embedding::visit(const TensorVisitor& f, const std::string& prefix) {
  f(child_name(prefix, "weight"), weight, TensorKind::Parameter);
}

LayerNorm LayerNorm::empty(int64_t dim, double eps, TensorOptions options) {
  return LayerNorm{kiln::empty({dim}, options), kiln::empty({dim}, options), eps};
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return layer_norm(x, {weight.size(0)}, weight, bias, eps);
}

void LayerNorm::visit(const TensorVisitor& f, const std::string& prefix) {
  f(child_name(prefix, "weight"), weight, TensorKind::Parameter);
  f(child_name(prefix, "bias"), bias, TensorKind::Parameter);
}

RMSNorm RMSNorm::empty(int64_t dim, double eps, TensorOptions options) {
  return RMSNorm{kiln::empty({dim}, options), eps};
}

Tensor RMSNorm::forward(const Tensor& x) const {
  return rms_norm(x, {weight.size(0)}, weight, eps);
}

void RMSNorm::visit(const TensorVisitor& f, const std::string& prefix) {
  f(child_name(prefix, "weight"), weight, TensorKind::Parameter);
}

void init_random(const VisitFn& visit, uint64_t seed, double std) {
  manual_seed(seed);
  materialize(visit, [&](const std::string& name, const Tensor& t, TensorKind kind) -> Tensor {
    if (kind == TensorKind::Buffer) return t;  // derived from the config, already set
    const Device device = t.is_meta() ? Device::cpu() : t.device();
    const TensorOptions options = TensorOptions(t.dtype()).device(device);
    if (t.dim() >= 2) return (randn(t.sizes()) * std).to(device, t.dtype());
    const bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    return is_bias ? zeros(t.sizes(), options) : ones(t.sizes(), options);
  });
}

}  // namespace kiln::nn
