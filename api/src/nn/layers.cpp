#include "kiln/nn/layers.h"

#include "kiln/jit.h"
#include "kiln/ops.h"

namespace kiln::nn {
namespace {

// A default-constructed layer has no weight: say which layer, not which accessor.
void check_weight(const Tensor& weight, const char* layer) {
  KILN_CHECK(weight.defined(), "[", layer, "] expected a defined weight (from ", layer,
             "::empty, a checkpoint or a state dict), got an undefined one");
}

}  // namespace

Linear Linear::empty(int64_t in, int64_t out, bool bias, TensorOptions options) {
  Linear l;
  l.weight = kiln::empty({out, in}, options);
  if (bias) l.bias = kiln::empty({out}, options);
  return l;
}

Tensor Linear::forward(const Tensor& x) const {
  check_weight(weight, "Linear");
  return linear(x, weight, bias);
}

void Linear::visit(const TensorVisitor& f, const std::string& prefix) {
  f(child_name(prefix, "weight"), weight, TensorKind::Parameter);
  if (bias) f(child_name(prefix, "bias"), *bias, TensorKind::Parameter);
}

namespace {

// Whether `part` is the view of `whole` that starts at row `row` (same
// dtype, device, inner sizes and strides).
bool view_at(const Tensor& part, const Tensor& whole, int64_t row) {
  if (!part.defined() || part.dim() != whole.dim() || part.dtype() != whole.dtype() ||
      part.device() != whole.device() ||
      part.impl()->storage().get() != whole.impl()->storage().get() ||
      part.storage_offset() != whole.storage_offset() + row * whole.stride(0)) {
    return false;
  }
  for (int64_t d = 0; d < whole.dim(); ++d) {
    if (part.stride(d) != whole.stride(d) || (d > 0 && part.size(d) != whole.size(d))) return false;
  }
  return true;
}

}  // namespace

FusedLinears FusedLinears::fuse(const std::vector<Linear*>& parts) {
  if (parts.size() < 2) return {};
  const Tensor& first = parts[0]->weight;
  if (!first.defined() || first.dim() != 2 || first.device().is_meta()) return {};
  const bool biased = parts[0]->bias.has_value();
  std::vector<Tensor> weights, biases;
  for (const Linear* p : parts) {
    const Tensor& w = p->weight;
    if (!w.defined() || w.dim() != 2 || w.size(1) != first.size(1) || w.dtype() != first.dtype() ||
        w.device() != first.device() || p->bias.has_value() != biased) {
      return {};
    }
    if (biased && (p->bias->dim() != 1 || p->bias->size(0) != w.size(0) ||
                   p->bias->dtype() != w.dtype() || p->bias->device() != w.device())) {
      return {};
    }
    weights.push_back(w);
    if (biased) biases.push_back(*p->bias);
  }
  EagerGuard eager;  // a copy made now, once: not an op of a trace
  FusedLinears f;
  f.weight = cat(weights, 0);
  if (biased) f.bias = cat(biases, 0);
  int64_t row = 0;
  for (Linear* p : parts) {
    const int64_t n = p->weight.size(0);
    p->weight = f.weight.narrow(0, row, n);
    if (biased) p->bias = f.bias->narrow(0, row, n);
    row += n;
  }
  return f;
}

bool FusedLinears::holds(const std::vector<const Linear*>& parts) const {
  if (!weight.defined()) return false;
  int64_t row = 0;
  for (const Linear* p : parts) {
    if (!view_at(p->weight, weight, row) || p->bias.has_value() != bias.has_value()) return false;
    if (bias && (!view_at(*p->bias, *bias, row) || p->bias->size(0) != p->weight.size(0)))
      return false;
    row += p->weight.size(0);
  }
  return row == weight.size(0);
}

std::vector<Tensor> FusedLinears::forward(const Tensor& x,
                                          const std::vector<const Linear*>& parts) const {
  std::vector<Tensor> out;
  out.reserve(parts.size());
  if (!holds(parts)) {
    for (const Linear* p : parts) out.push_back(p->forward(x));
    return out;
  }
  // A compiled function reads `weight` only: its guard must see every part,
  // and this tensor, still held (a part replaced drops one of them).
  const auto held = static_cast<int32_t>(parts.size() + 1);
  jit::guard_held_references(weight, held);
  if (bias) jit::guard_held_references(*bias, held);
  const Tensor y = linear(x, weight, bias);
  int64_t at = 0;
  for (const Linear* p : parts) {
    const int64_t n = p->weight.size(0);
    out.push_back(y.narrow(-1, at, n));
    at += n;
  }
  return out;
}

Embedding Embedding::empty(int64_t num, int64_t dim, TensorOptions options) {
  return Embedding{kiln::empty({num, dim}, options)};
}

Tensor Embedding::forward(const Tensor& indices) const {
  check_weight(weight, "Embedding");
  return embedding(weight, indices);
}

void Embedding::visit(const TensorVisitor& f, const std::string& prefix) {
  f(child_name(prefix, "weight"), weight, TensorKind::Parameter);
}

LayerNorm LayerNorm::empty(int64_t dim, double eps, TensorOptions options) {
  return LayerNorm{kiln::empty({dim}, options), kiln::empty({dim}, options), eps};
}

Tensor LayerNorm::forward(const Tensor& x) const {
  check_weight(weight, "LayerNorm");
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
  check_weight(weight, "RMSNorm");
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
