#pragma once

// Rotary position embeddings (RoPE) as Llama-family models apply them:
// q' = q * cos + rotate_half(q) * sin, with rotate_half(x) = cat(-x2, x1) over
// the two halves of the head dim.

#include <cstdint>
#include <string>

#include "kiln/api.h"
#include "kiln/nn/module.h"
#include "kiln/tensor.h"

namespace kiln::nn {

// Hugging Face's rope_scaling: "default" (none), "linear" (positions divided
// by factor) or "llama3" (Llama 3.1's: long wavelengths divided by factor,
// short ones kept, a smooth blend between).
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

// The largest head dim rotary tables are made for: far above any model's
// (64 to 256), low enough that a mistyped config is an error, not a
// terabyte allocation.
constexpr int64_t kMaxRopeHeadDim = 65536;

// The inverse frequencies theta^(-2i/dim), i < dim/2, after scaling, in
// float32 as transformers computes them; dim even, in [2, kMaxRopeHeadDim].
KILN_API std::vector<float> rope_inverse_frequencies(int64_t dim, double theta,
                                                     const RopeScaling& scaling);

// cos and sin tables [positions, head_dim] (buffers: they follow to(), in the
// model's dtype, as transformers casts them to the activations' dtype).
//
// Note [Rotary embeddings in one kernel]
// rotate_half written with cat is three kernels per tensor (neg, cat: a copy
// of its own, then the products). apply() views the head dim as [2, half]
// instead: rotate_half(x) is, per half, -x2 or x1, picked by where() against
// `first_half` ([2, 1]: true, false) from views of x broadcast over the pair.
// Everything is then pointwise, one fused kernel per tensor, with the same
// values (a selection; no arithmetic is added). A RotaryEmbedding without
// `first_half` (made by hand) takes the cat form.
struct KILN_API RotaryEmbedding {
  Tensor cos, sin;
  Tensor first_half;  // bool [2, 1]: true, false (a buffer, made by make())

  // Tables for positions [0, positions), computed on the host in double
  // precision from float32 angles (pos * inv_freq rounded to float32).
  static RotaryEmbedding make(int64_t head_dim, int64_t positions, double theta,
                              const RopeScaling& scaling, TensorOptions options);
  int64_t positions() const { return cos.size(0); }

  // x [B, H, T, D] at positions 0..T-1.
  Tensor apply(const Tensor& x) const;
  // x [B, H, 1, D] at `pos`: one int64 element (every row) or [B] (per row).
  Tensor apply_at(const Tensor& x, const Tensor& pos) const;
  void visit(const TensorVisitor& f, const std::string& prefix);

 private:
  Tensor rotate(const Tensor& x, const Tensor& c, const Tensor& s) const;
};

}  // namespace kiln::nn
