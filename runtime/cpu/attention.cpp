// scaled_dot_product_attention, inference only: softmax(q @ k^T * scale + mask) @ v
// over broadcast batch dims, as PyTorch 2.x's math path computes it.
// float16 and bfloat16 compute in float32 and round once at the end. A row
// whose keys are all masked out is NaN (softmax of only -inf), as PyTorch's
// math path gives.

#include <cmath>
#include <limits>

#include "kiln/dispatch.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/blas_tensor.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// The broadcast of the batch dims (all but the last two) of q, k and v.
DimVector attention_batch(const Tensor& q, const Tensor& k, const Tensor& v) {
  size_t nb = 0;
  for (const Tensor* t : {&q, &k, &v}) nb = std::max(nb, static_cast<size_t>(t->dim() - 2));
  DimVector batch(nb, 1);
  for (const Tensor* t : {&q, &k, &v}) {
    const size_t own = static_cast<size_t>(t->dim() - 2);
    for (size_t i = 0; i < own; ++i) {
      int64_t s = t->size(static_cast<int64_t>(i));
      int64_t& b = batch[nb - own + i];
      KILN_CHECK(s == b || s == 1 || b == 1, "[", kOp, "] query, key and value of shapes ",
                 q.sizes(), ", ", k.sizes(), " and ", v.sizes(),
                 " have batch dims that do not broadcast");
      if (b == 1) b = s;
    }
  }
  return batch;
}

// Adds the mask to (or, for a bool mask, sets -inf in) each row of `scores`
// [rows, s], then replaces the row by its softmax. `mask` is contiguous and of
// the scores' full shape, or undefined.
template <class M>
void mask_softmax(M* scores, const Tensor& mask, bool is_causal, int64_t rows, int64_t l,
                  int64_t s) {
  const bool* bmask = mask.defined() && mask.dtype() == kBool ? mask.data_ptr<bool>() : nullptr;
  const M* fmask = mask.defined() && mask.dtype() != kBool ? mask.data_ptr<M>() : nullptr;
  constexpr M kNegInf = -std::numeric_limits<M>::infinity();
  parallel_range(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          M* row = scores + r * s;
          const int64_t i = r % l;
          for (int64_t j = 0; j < s; ++j) {
            if (bmask && !bmask[r * s + j]) row[j] = kNegInf;
            if (fmask) row[j] += fmask[r * s + j];
            if (is_causal && j > i) row[j] = kNegInf;
          }
          M mx = kNegInf;
          for (int64_t j = 0; j < s; ++j) mx = std::max(mx, row[j]);
          double sum = 0;
          for (int64_t j = 0; j < s; ++j) {
            row[j] = std::exp(row[j] - mx);
            sum += row[j];
          }
          const M inv = static_cast<M>(1.0 / sum);
          for (int64_t j = 0; j < s; ++j) row[j] *= inv;
        }
      },
      std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(s, 1)));
}

// The view of `t` ([..., a, b]) with its last two dims swapped.
Tensor swap_last(const Tensor& t) {
  DimVector sizes(t.sizes()), strides(t.strides());
  std::swap(sizes[sizes.size() - 1], sizes[sizes.size() - 2]);
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  return make_view(t, sizes, strides, t.storage_offset());
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const std::optional<Tensor>& attn_mask, double dropout_p,
                                    bool is_causal, std::optional<double> scale) {
  check_defined(q, kOp, "query");
  check_defined(k, kOp, "key");
  check_defined(v, kOp, "value");
  const bool has_mask = attn_mask && attn_mask->defined();
  KILN_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, "[", kOp,
             "] expected query, key and value of at least 2 dims, got shapes ", q.sizes(), ", ",
             k.sizes(), " and ", v.sizes());
  KILN_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), "[", kOp,
             "] expected query, key and value of the same dtype, got ", q.dtype(), ", ", k.dtype(),
             " and ", v.dtype());
  KILN_CHECK(is_floating(q.dtype()), "[", kOp,
             "] expected query, key and value of a floating dtype, got ", q.dtype());
  KILN_CHECK(dropout_p == 0.0, "[", kOp,
             "] expected dropout_p == 0 (kiln's attention is for inference), got ", dropout_p);
  KILN_CHECK(!(is_causal && has_mask), "[", kOp,
             "] expected either attn_mask or is_causal, got both (an explicit attn_mask should "
             "not be set when is_causal=True)");
  const int64_t l = q.size(-2), e = q.size(-1), s = k.size(-2), ev = v.size(-1);
  KILN_CHECK(k.size(-1) == e && v.size(-2) == s, "[", kOp,
             "] expected query [..., L, E], key [..., S, E] and value [..., S, Ev], got shapes ",
             q.sizes(), ", ", k.sizes(), " and ", v.sizes());
  DimVector batch = attention_batch(q, k, v);
  DimVector score_shape = batch;
  score_shape.push_back(l);
  score_shape.push_back(s);
  if (has_mask) {
    const DType mt = attn_mask->dtype();
    KILN_CHECK(mt == kBool || is_floating(mt), "[", kOp,
               "] expected a bool or floating attn_mask, got ", mt);
    KILN_CHECK(broadcasts_to(attn_mask->sizes(), score_shape), "[", kOp,
               "] expected attn_mask to broadcast to the attention weights' shape ",
               score_shape.ref(), ", got shape ", attn_mask->sizes());
  }
  DimVector out_shape = batch;
  out_shape.push_back(l);
  out_shape.push_back(ev);
  Device dev = product_device(kOp, {&q, &k, &v, has_mask ? &*attn_mask : &q});
  if (dev.is_meta()) return empty_tensor(out_shape, q.dtype(), dev);

  const DType ct = q.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(e));
  Tensor scores = empty_tensor(score_shape, ct, dev);
  Tensor out = empty_tensor(out_shape, ct, dev);
  if (scores.numel() > 0) {
    matmul_into(scores, expand_batch(cast(q, ct), batch, 2),
                swap_last(expand_batch(cast(k, ct), batch, 2)), 0, sc);
    Tensor mask;
    if (has_mask) {
      Tensor m = cast(*attn_mask, attn_mask->dtype() == kBool ? kBool : ct);
      mask = expand_batch(m, score_shape, 0).contiguous();
    }
    const int64_t rows = scores.numel() / s;
    if (ct == kFloat64) {
      mask_softmax<double>(scores.data_ptr<double>(), mask, is_causal, rows, l, s);
    } else {
      mask_softmax<float>(scores.data_ptr<float>(), mask, is_causal, rows, l, s);
    }
  }
  matmul_into(out, scores, expand_batch(cast(v, ct), batch, 2));
  return cast(out, q.dtype());
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("scaled_dot_product_attention", &scaled_dot_product_attention);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("scaled_dot_product_attention", &scaled_dot_product_attention);
}

}  // namespace kiln::cpu
