// The next token from a row of logits: greedy, or sampled by inverse CDF from
// the temperature-scaled distribution, cut to the top k and the top-p nucleus.

#include "api/src/nn/sampling.h"

#include <cmath>
#include <vector>

#include "jit/compile/tracing.h"
#include "kiln/nn/generate.h"
#include "kiln/ops.h"
#include "runtime/core/philox.h"

namespace kiln::nn {

float philox_uniform(uint64_t seed, uint64_t step, uint64_t row) {
  return static_cast<float>(philox4x32(seed, step, row).v[0] >> 8) * 0x1p-24f;
}

void check_sampling_options(const GenerateOptions& o, const char* op) {
  KILN_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, "[", op,
             "] expected a finite temperature >= 0, got ", o.temperature);
  KILN_CHECK(o.top_k >= 0, "[", op, "] expected top_k >= 0, got ", o.top_k);
  KILN_CHECK(o.top_p > 0 && o.top_p <= 1, "[", op, "] expected top_p in (0, 1], got ", o.top_p);
}

Tensor sample_tokens(const Tensor& logits, const GenerateOptions& o, const Tensor& uniform) {
  check_sampling_options(o, "sample_tokens");
  KILN_CHECK(logits.defined() && logits.dim() == 2,
             "[sample_tokens] expected logits [batch, vocab], got ",
             logits.defined() ? logits.sizes() : IntArrayRef());
  KILN_CHECK(logits.size(1) > 0,
             "[sample_tokens] expected a vocab of at least one token, got logits ", logits.sizes());
  if (o.temperature <= 0) return argmax(logits, -1);
  const int64_t b = logits.size(0), v = logits.size(1);
  KILN_CHECK(uniform.defined() && uniform.numel() == b,
             "[sample_tokens] expected one uniform per row (", b, "), got ",
             uniform.defined() ? uniform.numel() : 0);
  // A value outside [0, 1) (or NaN) would pick the last candidate whatever
  // the distribution. Checked where the values are on the host already (as
  // generate() passes them) and not being traced: reading a device tensor
  // would wait for the device, and a compiled function's trace would break.
  if (uniform.device().is_cpu() && !jit::is_tracing()) {
    const std::vector<double> u = uniform.tolist<double>();
    for (size_t row = 0; row < u.size(); ++row) {
      KILN_CHECK(u[row] >= 0 && u[row] < 1,
                 "[sample_tokens] expected uniform values in [0, 1), got ", u[row], " for row ",
                 row);
    }
  }
  // Scaled from each row's maximum, so that no temperature overflows: a tiny
  // one (1e-39, 1e-300) made logits / temperature infinite, and softmax then
  // NaN everywhere (token 0 whatever the logits). Shifted, the maximum stays
  // 0 (0 / 0 where the temperature underflows float32 is set to 0 too) and
  // the rest go to -inf at worst: mass 0, so the limit is greedy, as it
  // should be. Softmax does not see the shift.
  // The per-request values (the temperature, top_p) go in as 0-dim tensors,
  // not numbers: a number is compiled into the kernels that read it, one
  // kernel per value for the life of the process (README, Lazy mode), and a
  // server samples with a temperature per request.
  auto value = [&](double v) {
    return full({}, v, TensorOptions(kFloat32).device(logits.device()));
  };
  Tensor l = logits.to(kFloat32);
  // One reduction gives both: greedy's token (a NaN's where a row has one, as
  // PyTorch's argmax) and the row's maximum (NaN there, as amax).
  Tensor greedy = argmax(l, -1, /*keepdim=*/true);
  Tensor top = gather(l, -1, greedy);
  Tensor x = where(eq(l, top), 0.0, (l - top) / value(o.temperature));
  const bool cut = (o.top_k > 0 && o.top_k < v) || o.top_p < 1.0;
  // Without a cut the vocabulary's own order serves: any order has the same CDF jumps.
  Tensor candidates, order;
  if (!cut) {
    candidates = x;
  } else if (o.top_k > 0 && o.top_k < v) {
    std::tie(candidates, order) = topk(x, o.top_k, -1, /*largest=*/true, /*sorted=*/true);
  } else {
    std::tie(candidates, order) = sort(x, -1, /*descending=*/true);
  }
  Tensor probs = softmax(candidates, -1);
  if (o.top_p < 1.0) {
    // Keep a candidate while the mass before it is below top_p (the first always).
    Tensor before = cumsum(probs, -1) - probs;
    probs = where(lt(before, value(o.top_p)), probs, 0.0);
  }
  Tensor cdf = cumsum(probs, -1);
  const int64_t k = cdf.size(-1);
  Tensor target = uniform.to(kFloat32).to(logits.device()).view({b, 1}) * cdf.narrow(-1, k - 1, 1);
  // The first candidate whose cumulative mass exceeds the target (so never one of mass 0).
  Tensor pick = clamp(sum(le(cdf, target), {-1}, false, kInt64), 0, k - 1);
  Tensor token = cut ? gather(order, 1, pick.view({b, 1})).view({b}) : pick;
  // Note [Rows of NaN logits]
  // A row holding a NaN has no distribution: its maximum is NaN, every
  // probability NaN, no cumulative mass exceeds the target, and the row took
  // token 0 whatever its logits (or the top-k's first), where greedy takes
  // argmax's pick (the NaN, as PyTorch's argmax). Such a row takes greedy's
  // token at any temperature, so that a broken model's output does not
  // depend on the sampling options; checking on the host would wait for the
  // device every step.
  return where(isnan(top).view({b}), greedy.view({b}), token);
}

}  // namespace kiln::nn
