#include "runtime/core/matrix_view.h"

#include "runtime/core/tensor_utils.h"

namespace kiln {

std::optional<int64_t> folded_row_stride(const Tensor& t) {
  std::optional<int64_t> stride;
  int64_t expected = 0;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (!stride) {
      stride = t.stride(d);
    } else if (t.stride(d) != expected) {
      return std::nullopt;
    }
    expected = t.stride(d) * t.size(d);
  }
  return stride ? stride : std::optional<int64_t>(1);
}

bool batch_is_broadcast(const Tensor& t) {
  for (int64_t d = 0; d + 2 < t.dim(); ++d) {
    if (t.size(d) != 1 && t.stride(d) != 0) return false;
  }
  return true;
}

bool shares_storage(const Tensor& a, const Tensor& b) {
  return a.numel() > 0 && b.numel() > 0 && a.impl()->storage().get() == b.impl()->storage().get();
}

Tensor expand_batch(const Tensor& t, IntArrayRef batch, int64_t keep) {
  const int64_t nb = static_cast<int64_t>(batch.size());
  const int64_t own = t.dim() - keep;
  KILN_INTERNAL_ASSERT(own <= nb, "expand_batch: more batch dims than the target");
  DimVector sizes(batch), strides(static_cast<size_t>(nb), 0);
  for (int64_t i = 0; i < own; ++i) {
    int64_t d = nb - own + i;
    if (t.size(i) == batch[d]) strides[d] = t.stride(i);
  }
  for (int64_t i = own; i < t.dim(); ++i) {
    sizes.push_back(t.size(i));
    strides.push_back(t.stride(i));
  }
  return make_view(t, sizes, strides, t.storage_offset());
}

Tensor as_matrix(const Tensor& t) {
  const int64_t cols = t.size(-1);
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) rows *= t.size(d);
  if (t.dim() == 1) return make_view(t, {1, cols}, {cols, t.stride(0)}, t.storage_offset());
  if (std::optional<int64_t> rs = folded_row_stride(t)) {
    return make_view(t, {rows, cols}, {*rs, t.stride(-1)}, t.storage_offset());
  }
  Tensor c = t.contiguous();
  return make_view(c, {rows, cols}, {cols, 1}, c.storage_offset());
}

bool broadcasts_to(IntArrayRef from, IntArrayRef to) {
  if (from.size() > to.size()) return false;
  const size_t shift = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] != 1 && from[i] != to[shift + i]) return false;
  }
  return true;
}

LinearMatrices linear_matrices(const Tensor& out, const Tensor& input, const Tensor& weight) {
  const int64_t in_features = weight.size(-1);
  const int64_t out_features = weight.dim() == 2 ? weight.size(0) : 1;
  const int64_t rows = out.numel() / out_features;
  LinearMatrices m;
  m.out2 = make_view(out, {rows, out_features}, {out_features, 1}, out.storage_offset());
  m.w2 = weight.dim() == 2
             ? make_view(weight, {in_features, out_features}, {weight.stride(1), weight.stride(0)},
                         weight.storage_offset())
             : make_view(weight, {in_features, 1}, {weight.stride(0), 1}, weight.storage_offset());
  m.in2 = as_matrix(input);
  return m;
}

}  // namespace kiln
