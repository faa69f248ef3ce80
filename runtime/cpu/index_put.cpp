// index_put and index_put_: composites of index_copy_ and index_add_, so
// that every device and mode has them as those ops are.
//
// Note [index_put]
// self[i0, i1, ..., ik-1] = values for index tensors i0..ik-1 on self's
// leading dims (int64, or bool/uint8 masks, each standing for its nonzero()
// indices over as many dims as it has). The index tensors broadcast to one
// shape B; the indexed result is B + self's remaining sizes, and values
// broadcast to it. Each index is checked against its own dim (negative ones
// count from the end) by an index_select of that dim's positions, so an
// index out of range raises in every mode: naming index_put where the index
// is on the host, else (through index_select's check, renamed) with the
// index as counted from the start and the dim as 0 (Note [Composite ops name
// themselves]); then the positions, flattened over the
// leading dims, go to index_copy_ (accumulate false: of repeated positions,
// one write wins, as in PyTorch) or index_add_ (accumulate true: they add
// up). self's leading dims are written through one view where they merge,
// else through a copy written back. Every index must be defined: kiln's
// lists hold no None, so a full slice of a leading dim is arange(size)
// shaped to broadcast (cache.index_put_({arange(B).unsqueeze(1), pos}, x)
// for PyTorch's cache[:, pos] = x). A mask's indices are read on the host
// (Note [Sizes read on the host]); int64 indices are not.

#include <vector>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/composite_errors.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/core/type_promotion.h"
#include "runtime/cpu/index_utils.h"

namespace kiln::cpu {
namespace {

// The index tensors, masks replaced by their nonzero() indices.
std::vector<Tensor> expand_masks(const char* op, const Tensor& self, TensorList indices) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < indices.size(); ++i) {
    const Tensor& t = indices[i];
    check_defined(t, op, "indices");
    const DType d = t.dtype();
    KILN_CHECK(d == kInt64 || d == kBool || d == kUInt8, "[", op, "] expected index tensors of ",
               "dtype int64, bool or uint8, got ", d, " at position ", i);
    if (d == kInt64) {
      out.push_back(t);
      continue;
    }
    const int64_t at = static_cast<int64_t>(out.size());
    KILN_CHECK(at + t.dim() <= self.dim(), "[", op, "] expected at most ", self.dim(),
               " indexed dims for self of sizes ", self.sizes(), ", got ", at + t.dim());
    for (int64_t d2 = 0; d2 < t.dim(); ++d2) {
      KILN_CHECK(t.size(d2) == self.size(at + d2), "[", op, "] expected mask ", i,
                 " of sizes matching self's ", self.sizes(), " from dim ", at, ", got ", t.sizes());
    }
    const Tensor nz = kiln::nonzero(t);
    for (int64_t d2 = 0; d2 < t.dim(); ++d2) out.push_back(nz.select(1, d2));
  }
  return out;
}

Tensor index_put_impl(const char* op, const Tensor& self, TensorList indices, const Tensor& values,
                      bool accumulate) {
  check_defined(self, op, "self");
  check_defined(values, op, "values");
  KILN_CHECK(!indices.empty(), "[", op, "] expected at least one index tensor, got none");
  KILN_CHECK(values.dtype() == self.dtype(), "[", op, "] expected values of self's dtype ",
             self.dtype(), ", got ", values.dtype());
  std::vector<Tensor> idx = expand_masks(op, self, indices);
  const int64_t k = static_cast<int64_t>(idx.size());
  KILN_CHECK(k <= self.dim(), "[", op, "] expected at most ", self.dim(),
             " index tensors for self of sizes ", self.sizes(), ", got ", k);
  check_no_internal_overlap(self, op);
  check_no_overlap(self, values, op);

  // The broadcast index shape B, and each index checked against its dim.
  DimVector b;
  for (const Tensor& t : idx) b = broadcast_shapes(b, t.sizes(), op);
  int64_t positions = 1;
  for (int64_t s : b) positions *= s;
  Tensor flat_index;
  int64_t lead = 1;
  for (int64_t d = k - 1; d >= 0; --d) {
    const int64_t size = self.size(d);
    const Tensor& t = idx[static_cast<size_t>(d)];
    if (auto v = host_indices(t)) {
      for (int64_t x : *v) {
        KILN_CHECK(x >= -size && x < size, "[", op, "] index ", x,
                   " is out of bounds for dimension ", d, " with size ", size);
      }
    }
    Tensor wrapped = kiln::where(kiln::lt(t, Scalar(int64_t{0})), kiln::add(t, Scalar(size)), t);
    Tensor place = rename_errors(op, "index_select", [&] {
      return kiln::index_select(kiln::arange(size, TensorOptions(kInt64).device(t.device())), 0,
                                wrapped.reshape({t.numel()}));
    });
    place = kiln::mul(place.reshape(t.sizes()), Scalar(lead)).expand(b).reshape({positions});
    flat_index = flat_index.defined() ? kiln::add(flat_index, place) : place;
    lead *= size;
  }
  // values broadcast to B + self's other sizes, as [positions, rest...].
  DimVector indexed = b, flat_shape{positions}, target_shape{0};
  for (int64_t d = k; d < self.dim(); ++d) {
    indexed.push_back(self.size(d));
    flat_shape.push_back(self.size(d));
    target_shape.push_back(self.size(d));
  }
  bool fits = values.dim() <= static_cast<int64_t>(indexed.size());
  for (int64_t i = 1; fits && i <= values.dim(); ++i) {
    const int64_t v = values.size(-i), want = indexed[indexed.size() - static_cast<size_t>(i)];
    fits = v == 1 || v == want;
  }
  KILN_CHECK(fits, "[", op, "] expected values that broadcast to the indexed shape ", indexed,
             ", got sizes ", values.sizes());
  Tensor src = values.expand(indexed).reshape(flat_shape);

  target_shape[0] = lead;
  Tensor target = self.reshape(target_shape);
  const bool aliased = same_storage(target, self);
  if (accumulate) {
    rename_errors(op, "index_add_", [&] { return kiln::index_add_(target, 0, flat_index, src); });
  } else {
    rename_errors(op, "index_copy_", [&] { return kiln::index_copy_(target, 0, flat_index, src); });
  }
  if (!aliased) {
    Tensor dst = self;
    kiln::copy_(dst, target.view(self.sizes()));
  }
  return self;
}

Tensor index_put_(const Tensor& self, TensorList indices, const Tensor& values, bool accumulate) {
  return index_put_impl("index_put_", self, indices, values, accumulate);
}

Tensor index_put(const Tensor& self, TensorList indices, const Tensor& values, bool accumulate) {
  return index_put_impl("index_put", kiln::clone(self), indices, values, accumulate);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("index_put", &index_put);
  m.impl("index_put_", &index_put_);
}

}  // namespace kiln::cpu
