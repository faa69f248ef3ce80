#pragma once

// The basic layers, each a plain struct of its parameters with forward() as
// op code (eager, lazy or compiled alike) and visit() naming its tensors as
// Hugging Face does (kiln/nn/module.h).

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/api.h"
#include "kiln/nn/module.h"
#include "kiln/tensor.h"

namespace kiln::nn {

// y = x @ weight.T + bias; weight is [out, in].
struct KILN_API Linear {
  Tensor weight;
  std::optional<Tensor> bias;  // (optional)

  // Parameters of the right shapes with no values yet (pass Device::meta()
  // for shapes only; materialize() or load_state_dict() fills them).
  static Linear empty(int64_t in, int64_t out, bool bias, TensorOptions options);
  Tensor forward(const Tensor& x) const;
  void visit(const TensorVisitor& f, const std::string& prefix);
};

struct KILN_API Embedding {
  Tensor weight;  // [num, dim]

  static Embedding empty(int64_t num, int64_t dim, TensorOptions options);
  Tensor forward(const Tensor& indices) const;
  void visit(const TensorVisitor& f, const std::string& prefix);
};

struct KILN_API LayerNorm {
  Tensor weight;
  Tensor bias;
  double eps = 1e-5;

  static LayerNorm empty(int64_t dim, double eps, TensorOptions options);
  Tensor forward(const Tensor& x) const;
  void visit(const TensorVisitor& f, const std::string& prefix);
};

// x / sqrt(mean(x^2) + eps) * weight over the last dim, computed in float32
// for 16-bit inputs.
struct KILN_API RMSNorm {
  Tensor weight;
  double eps = 1e-6;

  static RMSNorm empty(int64_t dim, double eps, TensorOptions options);
  Tensor forward(const Tensor& x) const;
  void visit(const TensorVisitor& f, const std::string& prefix);
};

// Seeded values for a skeleton's tensors, as Hugging Face initializes these
// models: matrices normal(0, std), biases zero, other vectors (norm weights) one.
KILN_API void init_random(const VisitFn& visit, uint64_t seed, double std = 0.02);

}  // namespace kiln::nn
