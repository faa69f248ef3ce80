#include "kiln/nn/rotary.h"

#include <cmath>
#include <numbers>

#include "kiln/jit.h"
#include "kiln/ops.h"

namespace kiln::nn {

std::vector<float> rope_inverse_frequencies(int64_t dim, double theta, const RopeScaling& s) {
  KILN_CHECK(dim > 0 && dim % 2 == 0 && dim <= kMaxRopeHeadDim,
             "[rope] expected an even head dim in [2, ", kMaxRopeHeadDim, "], got ", dim);
  KILN_CHECK(theta > 0, "[rope] expected rope_theta > 0, got ", theta);
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(exponent)));
  }
  if (s.type == "default") return inv;
  KILN_CHECK(s.factor > 0, "[rope] expected rope_scaling factor > 0, got ", s.factor);
  if (s.type == "linear") {
    for (float& f : inv) f = static_cast<float>(f / s.factor);
    return inv;
  }
  KILN_CHECK(s.type == "llama3",
             "[rope] expected rope_scaling type default, linear or llama3, got '", s.type, "'");
  KILN_CHECK(s.high_freq_factor > s.low_freq_factor && s.low_freq_factor > 0 &&
                 s.original_max_position_embeddings > 0,
             "[rope] expected llama3 rope_scaling with 0 < low_freq_factor < high_freq_factor and "
             "original_max_position_embeddings > 0, got ",
             s.low_freq_factor, ", ", s.high_freq_factor, " and ",
             s.original_max_position_embeddings);
  // transformers' _compute_llama3_parameters, in float32 like its tensors.
  const float old_len = static_cast<float>(s.original_max_position_embeddings);
  const float factor = static_cast<float>(s.factor);
  const float low = static_cast<float>(s.low_freq_factor);
  const float high = static_cast<float>(s.high_freq_factor);
  const float low_freq_wavelen = old_len / low, high_freq_wavelen = old_len / high;
  for (float& f : inv) {
    const float wavelen = 2.0f * static_cast<float>(std::numbers::pi) / f;
    float scaled = wavelen > low_freq_wavelen ? f / factor : f;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) {
      const float smooth = (old_len / wavelen - low) / (high - low);
      scaled = (1 - smooth) * scaled / factor + smooth * scaled;
    }
    f = scaled;
  }
  return inv;
}

RotaryEmbedding RotaryEmbedding::make(int64_t head_dim, int64_t positions, double theta,
                                      const RopeScaling& scaling, TensorOptions options) {
  const std::vector<float> inv = rope_inverse_frequencies(head_dim, theta, scaling);
  KILN_CHECK(positions > 0, "[rope] expected a positive number of positions, got ", positions);
  const int64_t half = head_dim / 2;
  EagerGuard eager;
  // Host tables from kiln's allocator: a size past memory is a kiln::Error, not std::bad_alloc.
  Tensor c = empty({positions, head_dim}, kFloat32), s = empty({positions, head_dim}, kFloat32);
  float* cp = c.data_ptr<float>();
  float* sp = s.data_ptr<float>();
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv[i];  // rounded as float32, as transformers
      const float cv = static_cast<float>(std::cos(static_cast<double>(angle)));
      const float sv = static_cast<float>(std::sin(static_cast<double>(angle)));
      cp[p * head_dim + i] = cp[p * head_dim + half + i] = cv;
      sp[p * head_dim + i] = sp[p * head_dim + half + i] = sv;
    }
  }
  const DType dtype = options.dtype_.value_or(kFloat32);
  RotaryEmbedding r;
  r.cos = c.to(options.device_, dtype);
  r.sin = s.to(options.device_, dtype);
  r.first_half = eq(arange(2), 0).view({2, 1}).to(r.cos.device());
  return r;
}

namespace {

// cat(-x2, x1) over the last dim.
Tensor rotate_half(const Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return cat({neg(x.narrow(-1, half, half)), x.narrow(-1, 0, half)}, -1);
}

// The last dim [D] as [2, D / 2] (a view where the last dim is dense).
Tensor halves(const Tensor& t) {
  std::vector<int64_t> sizes = t.sizes().vec();
  const int64_t d = sizes.back();
  sizes.back() = 2;
  sizes.push_back(d / 2);
  return t.reshape(sizes);
}

}  // namespace

// x * c + rotate_half(x) * s (Note [Rotary embeddings in one kernel]).
Tensor RotaryEmbedding::rotate(const Tensor& x, const Tensor& c, const Tensor& s) const {
  if (!first_half.defined() || x.size(-1) % 2 != 0) return x * c + rotate_half(x) * s;
  const Tensor xv = halves(x);
  // Both picks at the pair's full shape, so that every op is over one shape
  // and the fuser makes one kernel of them.
  const Tensor x1 = xv.narrow(-2, 0, 1).expand(xv.sizes());
  const Tensor x2 = xv.narrow(-2, 1, 1).expand(xv.sizes());
  const Tensor rot = where(first_half, neg(x2), x1);
  const Tensor out = xv * halves(c) + rot * halves(s);
  return out.reshape(x.sizes());
}

Tensor RotaryEmbedding::apply(const Tensor& x) const {
  const int64_t t = x.size(-2);
  KILN_CHECK(t <= positions(), "[rope] expected at most ", positions(),
             " positions (the model's max_positions), got ", t);
  return rotate(x, cos.narrow(0, 0, t), sin.narrow(0, 0, t));
}

Tensor RotaryEmbedding::apply_at(const Tensor& x, const Tensor& pos) const {
  // [P] positions -> [P, 1, 1, D]: broadcast over heads (and over rows when P == 1).
  const Tensor p = pos.reshape({-1});
  const int64_t d = cos.size(1);
  Tensor c = index_select(cos, 0, p).view({-1, 1, 1, d});
  Tensor s = index_select(sin, 0, p).view({-1, 1, 1, d});
  return rotate(x, c, s);
}

void RotaryEmbedding::visit(const TensorVisitor& f, const std::string& prefix) {
  f(child_name(prefix, "cos"), cos, TensorKind::Buffer);
  f(child_name(prefix, "sin"), sin, TensorKind::Buffer);
  if (first_half.defined()) f(child_name(prefix, "first_half"), first_half, TensorKind::Buffer);
}

}  // namespace kiln::nn
