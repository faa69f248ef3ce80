// nonzero on the CPU (and on CUDA through the host); argwhere and
// masked_select, composites of it.
//
// Note [Sizes read on the host]
// nonzero's size is its count of nonzero elements, which only the data
// tells: it has no Meta kernel, so in lazy mode it runs at its call, after
// the ops its input needs (a flush), and inside jit::compile it is a graph
// break (README, Compiled functions): the entry runs lazily from then on,
// and each call counts afresh. masked_select and argwhere inherit that. On
// CUDA the input is copied to the host, searched there, and the indices
// copied back, as PyTorch's CUDA nonzero also synchronizes to learn the
// count.

#include <cstdint>
#include <vector>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/composite_errors.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/core/type_promotion.h"

namespace kiln::cpu {
namespace {

Tensor nonzero_cpu(const Tensor& self) {
  check_defined(self, "nonzero", "self");
  const Tensor x = self.contiguous();
  const int64_t n = x.numel(), nd = x.dim();
  std::vector<int64_t> hits;
  visit_dtype(x.dtype(), kAllMask, "nonzero", [&]<class T>() {
    const T* p = x.data_ptr<T>();
    for (int64_t i = 0; i < n; ++i) {
      bool set;
      if constexpr (std::is_same_v<T, bool>) {
        set = p[i];
      } else if constexpr (std::is_integral_v<T>) {
        set = p[i] != 0;
      } else {
        set = static_cast<double>(p[i]) != 0.0;  // NaN counts, -0.0 does not
      }
      if (set) hits.push_back(i);
    }
  });
  const int64_t count = static_cast<int64_t>(hits.size());
  Tensor out = empty_tensor({count, nd}, kInt64, Device::cpu(), "nonzero");
  int64_t* o = out.data_ptr<int64_t>();
  for (int64_t r = 0; r < count; ++r) {
    int64_t flat = hits[static_cast<size_t>(r)];
    for (int64_t d = nd - 1; d >= 0; --d) {
      const int64_t s = x.sizes()[d];
      o[r * nd + d] = flat % s;
      flat /= s;
    }
  }
  return out;
}

Tensor nonzero_cuda(const Tensor& self) {
  check_defined(self, "nonzero", "self");
  return kiln::nonzero(self.to(Device::cpu())).to(self.device());
}

Tensor argwhere(const Tensor& self) {
  return rename_errors("argwhere", "nonzero", [&] { return kiln::nonzero(self); });
}

Tensor masked_select(const Tensor& self, const Tensor& mask) {
  const char* op = "masked_select";
  check_defined(self, op, "self");
  check_defined(mask, op, "mask");
  KILN_CHECK(mask.dtype() == kBool || mask.dtype() == kUInt8, "[masked_select] expected a mask of ",
             "dtype bool (or uint8), got ", mask.dtype());
  const DimVector shape = broadcast_shapes(self.sizes(), mask.sizes(), op);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  const Tensor values = self.expand(shape).reshape({n});
  const Tensor index = kiln::nonzero(mask.expand(shape).reshape({n})).view({-1});
  return kiln::index_select(values, 0, index);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("nonzero", &nonzero_cpu);
}
KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("nonzero", &nonzero_cuda);
}
KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("argwhere", &argwhere);
  m.impl("masked_select", &masked_select);
}

}  // namespace kiln::cpu
