#pragma once

// The basic layers, each a plain struct of its parameters with forward() as
// op code (eager, lazy or compiled alike) and visit() naming its tensors as
// Hugging Face does (kiln/nn/module.h).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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

// Note [Fused projections]
// Linears that read one input (attention's q, k and v; a gated MLP's gate
// and up) run as one product when their weights are views of one tensor: one
// kernel streams all of them, and a norm before them has one consumer, which
// folds it into the product's prologue (a decode step's q, k and v are then
// one kernel where they were four). fuse() makes it so: it copies the parts'
// weights (and biases, when every part has one) into one tensor, eagerly,
// and makes each part's tensors views of it. The parts stay what callers and
// checkpoints see: an in-place write to q_proj.weight writes the fused
// tensor. forward() checks that the parts are still those views and
// otherwise runs them one by one, so a part replaced by another tensor is
// honored. A compiled function reads the fused tensor alone, so its guard on
// that storage asks for every part and the fused tensor still held
// (jit::guard_held_references): a part replaced, or all of them by
// load_state_dict, fails it and the function is traced again.
struct KILN_API FusedLinears {
  Tensor weight;  // [sum of the parts' out, in]; undefined: not fused
  std::optional<Tensor> bias;

  // Fuses `parts` (same in, dtype and device, on a device that holds memory);
  // leaves them alone, and returns an unfused value, otherwise.
  static FusedLinears fuse(const std::vector<Linear*>& parts);
  // Whether `parts` are, in order, the views fuse() made of `weight` and `bias`.
  bool holds(const std::vector<const Linear*>& parts) const;
  // Each part's x @ weight.T + bias: one product, narrowed, when holds(parts).
  std::vector<Tensor> forward(const Tensor& x, const std::vector<const Linear*>& parts) const;
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
