#include "runtime/cpu/copy.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cstring>

#include "runtime/core/dtype_dispatch.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/index_utils.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {

namespace {

template <class To, class From>
To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(v) != 0.0f || static_cast<double>(v) != 0.0;
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return static_cast<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

void parallel_memcpy(char* dst, const char* src, size_t n) {
  constexpr size_t kChunk = size_t{1} << 20;
  if (n < 2 * kChunk) {
    std::memcpy(dst, src, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<size_t>(0, n, kChunk),
                    [&](const tbb::blocked_range<size_t>& r) {
                      std::memcpy(dst + r.begin(), src + r.begin(), r.end() - r.begin());
                    });
}

}  // namespace

void check_copy(const Tensor& self, const Tensor& src) {
  check_defined(self, "copy_", "self");
  check_defined(src, "copy_", "src");
  check_no_internal_overlap(self, "copy_");
  const int64_t nd = self.dim();
  bool broadcasts = src.dim() <= nd;
  for (int64_t i = 0; broadcasts && i < src.dim(); ++i) {
    const int64_t size = src.size(i);
    broadcasts = size == 1 || size == self.size(nd - src.dim() + i);
  }
  KILN_CHECK(broadcasts, "[copy_] expected src of shape ", self.sizes(),
             " or one that broadcasts to it, got ", src.sizes());
  // The eager pointwise kernels' words (TensorIter), src being input 0.
  KILN_CHECK(!partly_overlaps(self, src),
             "[copy_] expected an output that is an input or shares no memory with it, got one "
             "that partly overlaps input 0; clone() it first");
}

void copy_into(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous() &&
      dst.sizes() == src.sizes()) {
    char* d = static_cast<char*>(dst.data_ptr());
    const char* s = static_cast<const char*>(src.data_ptr());
    if (d != s) parallel_memcpy(d, s, dst.nbytes());
    return;
  }
  Tensor out = dst;
  TensorIter it("copy_");
  it.output(out).input(src).keep_input_dtypes().compute_dtype(dst.dtype()).shape(dst.sizes());
  it.build();
  visit_dtype(dst.dtype(), kAllMask, "copy_", [&]<class To>() {
    visit_dtype(src.dtype(), kAllMask, "copy_", [&]<class From>() {
      it.for_each([](char** data, const int64_t* strides, int64_t n) {
        if (strides[0] == sizeof(To) && strides[1] == sizeof(From)) {
          To* o = reinterpret_cast<To*>(data[0]);
          const From* i = reinterpret_cast<const From*>(data[1]);
          for (int64_t k = 0; k < n; ++k) o[k] = convert<To>(i[k]);
          return;
        }
        for (int64_t k = 0; k < n; ++k) {
          *reinterpret_cast<To*>(data[0] + k * strides[0]) =
              convert<To>(*reinterpret_cast<const From*>(data[1] + k * strides[1]));
        }
      });
    });
  });
}

}  // namespace kiln::cpu
