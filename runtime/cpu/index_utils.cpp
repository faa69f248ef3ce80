#include "runtime/cpu/index_utils.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/parallel.h"

namespace kiln::cpu {
namespace {

struct Dim {
  int64_t size;
  int64_t dst;  // strides in bytes
  int64_t src;
};

// Dims of size > 1, outermost first by destination stride, neighbours that
// step as one merged. Empty when the layout has no elements.
std::vector<Dim> plan_dims(IntArrayRef dst_strides, IntArrayRef src_strides, IntArrayRef sizes,
                           size_t elem, bool* empty) {
  std::vector<Dim> dims;
  *empty = false;
  const int64_t e = static_cast<int64_t>(elem);
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) *empty = true;
    if (sizes[d] <= 1) continue;
    dims.push_back({sizes[d], dst_strides[d] * e, src_strides[d] * e});
  }
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) {
    return std::llabs(a.dst) > std::llabs(b.dst);
  });
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (!merged.empty()) {
      Dim& outer = merged.back();
      if (outer.dst == d.dst * d.size && outer.src == d.src * d.size) {
        outer.size *= d.size;
        outer.dst = d.dst;
        outer.src = d.src;
        continue;
      }
    }
    merged.push_back(d);
  }
  return merged;
}

template <class T>
void run_elements(char* dst, const char* src, int64_t n, int64_t ds, int64_t ss) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * ds, src + i * ss, sizeof(T));
  }
}

void run_inner(char* dst, const char* src, int64_t n, int64_t ds, int64_t ss, size_t elem) {
  const int64_t e = static_cast<int64_t>(elem);
  if (ds == e && ss == e) {
    std::memcpy(dst, src, static_cast<size_t>(n) * elem);
    return;
  }
  switch (elem) {
    case 1:
      return run_elements<uint8_t>(dst, src, n, ds, ss);
    case 2:
      return run_elements<uint16_t>(dst, src, n, ds, ss);
    case 4:
      return run_elements<uint32_t>(dst, src, n, ds, ss);
    default:
      return run_elements<uint64_t>(dst, src, n, ds, ss);
  }
}

}  // namespace

void copy_strided(char* dst, IntArrayRef dst_strides, const char* src, IntArrayRef src_strides,
                  IntArrayRef sizes, size_t elem) {
  bool empty = false;
  std::vector<Dim> dims = plan_dims(dst_strides, src_strides, sizes, elem, &empty);
  if (empty) return;
  if (dims.empty()) {
    std::memcpy(dst, src, elem);
    return;
  }
  const Dim inner = dims.back();
  dims.pop_back();
  int64_t outer = 1;
  for (const Dim& d : dims) outer *= d.size;
  const int64_t nd = static_cast<int64_t>(dims.size());
  auto body = [&](int64_t begin, int64_t end) {
    // Offsets of the first outer index, then an odometer over the outer dims.
    DimVector counter(nd);
    int64_t rem = begin, doff = 0, soff = 0;
    for (int64_t d = nd - 1; d >= 0; --d) {
      counter[d] = rem % dims[d].size;
      rem /= dims[d].size;
      doff += counter[d] * dims[d].dst;
      soff += counter[d] * dims[d].src;
    }
    for (int64_t i = begin; i < end; ++i) {
      run_inner(dst + doff, src + soff, inner.size, inner.dst, inner.src, elem);
      for (int64_t d = nd - 1; d >= 0; --d) {
        doff += dims[d].dst;
        soff += dims[d].src;
        if (++counter[d] < dims[d].size) break;
        doff -= dims[d].size * dims[d].dst;
        soff -= dims[d].size * dims[d].src;
        counter[d] = 0;
      }
    }
  };
  parallel_range(outer, body, std::max<int64_t>(1, kDefaultGrain / inner.size));
}

void zero_strided(char* dst, IntArrayRef strides, IntArrayRef sizes, size_t elem) {
  static const uint64_t kZero = 0;
  DimVector zero_strides(sizes.size(), 0);
  copy_strided(dst, strides, reinterpret_cast<const char*>(&kZero), zero_strides, sizes, elem);
}

void check_no_internal_overlap(const Tensor& t, const char* op) {
  if (t.numel() == 0) return;
  for (int64_t d = 0; d < t.dim(); ++d) {
    KILN_CHECK(!(t.sizes()[d] > 1 && t.strides()[d] == 0), "[", op,
               "] expected a target whose elements are distinct memory locations, got sizes ",
               t.sizes(), " with strides ", t.strides(), " (expanded?); clone() it first");
  }
}

bool same_storage(const Tensor& a, const Tensor& b) {
  const auto& sa = a.impl()->storage();
  const auto& sb = b.impl()->storage();
  return sa && sb && sa.get() == sb.get();
}

bool partly_overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.impl() == b.impl() || a.numel() == 0 || b.numel() == 0) {
    return false;
  }
  if (!a.impl()->has_storage() || !b.impl()->has_storage() ||
      a.impl()->storage().get() != b.impl()->storage().get()) {
    return false;
  }
  if (!non_overlapping_and_dense(a) || !non_overlapping_and_dense(b)) return false;  // too hard
  const auto a0 = a.storage_offset() * static_cast<int64_t>(a.element_size());
  const auto b0 = b.storage_offset() * static_cast<int64_t>(b.element_size());
  const auto a1 = a0 + a.numel() * static_cast<int64_t>(a.element_size());
  const auto b1 = b0 + b.numel() * static_cast<int64_t>(b.element_size());
  if (a0 == b0 && a1 == b1) return !(a.strides() == b.strides());
  return a0 < b1 && b0 < a1;
}

void check_no_overlap(const Tensor& out, const Tensor& in, const char* op) {
  if (out.numel() == 0 || in.numel() == 0) return;
  bool overlap = out.is_same(in);
  if (!overlap && same_storage(out, in) && non_overlapping_and_dense(out) &&
      non_overlapping_and_dense(in)) {
    const int64_t ob = out.storage_offset() * static_cast<int64_t>(out.element_size());
    const int64_t ib = in.storage_offset() * static_cast<int64_t>(in.element_size());
    const int64_t oe = ob + static_cast<int64_t>(out.nbytes());
    const int64_t ie = ib + static_cast<int64_t>(in.nbytes());
    overlap = ob < ie && ib < oe;
  }
  KILN_CHECK(!overlap, "[", op,
             "] expected inputs that do not share memory with the written-to tensor, got an "
             "overlapping input; clone() it first");
}

std::vector<int64_t> read_indices(const Tensor& index) {
  Tensor c = index.contiguous();
  const int64_t n = c.numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (n == 0) return out;
  if (c.dtype() == kInt64) {
    std::memcpy(out.data(), c.data_ptr(), static_cast<size_t>(n) * sizeof(int64_t));
  } else {
    KILN_INTERNAL_ASSERT(c.dtype() == kInt32, "index of dtype ", c.dtype());
    const int32_t* p = static_cast<const int32_t*>(c.data_ptr());
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  }
  return out;
}

void check_indices(const std::vector<int64_t>& idx, int64_t size, int64_t dim, const char* op) {
  for (int64_t v : idx) {
    KILN_CHECK(v >= 0 && v < size, "[", op, "] index ", v, " is out of bounds for dimension ", dim,
               " with size ", size);
  }
}

std::optional<std::vector<int64_t>> host_indices(const Tensor& index) {
  if (!index.device().is_cpu() || index.is_pending() ||
      !(index.dtype() == kInt64 || index.dtype() == kInt32)) {
    return std::nullopt;
  }
  // Read in place (contiguous() would record a copy in lazy mode).
  const int64_t n = index.numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (n == 0) return out;
  const DimVector sizes = nonempty_sizes(index), strides = nonempty_strides(index);
  // Through the storage, not data(): a check that only names the op in an
  // error is no host read of a traced value (Note [Host reads while tracing]
  // in jit/compile/tracing.h); an index out of range still raises from the
  // ops the composite records.
  const char* base = static_cast<const char*>(index.impl()->storage()->data()) +
                     index.storage_offset() * static_cast<int64_t>(index.element_size());
  const int64_t elem = static_cast<int64_t>(index.element_size());
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, at = 0;
    for (size_t d = sizes.size(); d-- > 0;) {
      at += rem % sizes[d] * strides[d];
      rem /= sizes[d];
    }
    const char* p = base + at * elem;
    out[static_cast<size_t>(i)] = index.dtype() == kInt64 ? *reinterpret_cast<const int64_t*>(p)
                                                          : *reinterpret_cast<const int32_t*>(p);
  }
  return out;
}

DimVector nonempty_sizes(const Tensor& t) {
  return t.dim() == 0 ? DimVector(1, 1) : DimVector(t.sizes());
}

DimVector nonempty_strides(const Tensor& t) {
  return t.dim() == 0 ? DimVector(1, 1) : DimVector(t.strides());
}

DimVector drop_dim(IntArrayRef sizes, int64_t dim) {
  DimVector out;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    if (d != dim) out.push_back(sizes[d]);
  }
  return out;
}

}  // namespace kiln::cpu
