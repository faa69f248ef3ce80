#pragma once

// Strided copies as a few 2D memory copies (Note [Copies without kernels]).
// Toolkit-free and header-only, so CI tests the planning on machines without CUDA.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kiln/array_ref.h"
#include "kiln/impl/small_vector.h"

namespace kiln::cuda {

// One cudaMemcpy2D: `height` rows of `width` bytes, row r from
// src + src_offset + r * src_pitch to dst + dst_offset + r * dst_pitch.
// height == 1 is a plain memcpy of `width` bytes.
struct Copy2D {
  int64_t dst_offset;
  int64_t src_offset;
  int64_t width;
  int64_t height;
  int64_t dst_pitch;
  int64_t src_pitch;
};

// Elements between the lowest and the highest address of a layout, both
// included (0 when empty). Strides must be non-negative.
inline int64_t span_elements(IntArrayRef sizes, IntArrayRef strides) {
  int64_t span = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return 0;
    span += (sizes[i] - 1) * strides[i];
  }
  return span;
}

// True when the elements fill their span exactly, each once, in some dim order
// (contiguous, transposed, permuted; not sliced, not expanded).
inline bool is_dense(IntArrayRef sizes, IntArrayRef strides) {
  std::vector<size_t> dims;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return true;
    if (sizes[i] != 1) dims.push_back(i);
  }
  std::sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t expected = 1;
  for (size_t d : dims) {
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// Plans copying elements of `itemsize` bytes, laid out by `sizes` and
// `dst_strides` / `src_strides` (in elements, non-negative; src strides may be
// 0 to broadcast), as at most `max_copies` 2D copies with pitches up to
// `max_pitch` bytes. False when more copies would be needed (or a stride is
// negative); `out` is then unspecified.
inline bool plan_strided_copy(IntArrayRef sizes, IntArrayRef dst_strides, IntArrayRef src_strides,
                              int64_t itemsize, size_t max_copies, int64_t max_pitch,
                              std::vector<Copy2D>* out) {
  out->clear();
  struct Dim {
    int64_t size, dst, src;
  };
  std::vector<Dim> dims;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return true;
    if (dst_strides[i] < 0 || src_strides[i] < 0) return false;
    if (sizes[i] != 1) dims.push_back({sizes[i], dst_strides[i], src_strides[i]});
  }
  // Outermost first by the destination's strides, then merge dims that are
  // contiguous with their inner neighbour on both sides.
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) {
    return a.dst != b.dst ? a.dst > b.dst : a.src > b.src;
  });
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (!merged.empty()) {
      Dim& outer = merged.back();
      // `d` is inner to `outer`: merge when outer steps over exactly d's extent.
      if (outer.dst == d.dst * d.size && outer.src == d.src * d.size) {
        outer = {outer.size * d.size, d.dst, d.src};
        continue;
      }
    }
    merged.push_back(d);
  }
  int64_t width = itemsize;
  if (!merged.empty() && merged.back().dst == 1 && merged.back().src == 1) {
    width = merged.back().size * itemsize;
    merged.pop_back();
  }
  int64_t height = 1, dst_pitch = 0, src_pitch = 0;
  if (!merged.empty()) {
    const Dim& r = merged.back();
    const int64_t dp = r.dst * itemsize, sp = r.src * itemsize;
    if (dp >= width && sp >= width && dp <= max_pitch && sp <= max_pitch) {
      height = r.size;
      dst_pitch = dp;
      src_pitch = sp;
      merged.pop_back();
    }
  }
  size_t count = 1;
  for (const Dim& d : merged) {
    count *= static_cast<size_t>(d.size);
    if (count > max_copies) return false;
  }
  out->reserve(count);
  std::vector<int64_t> index(merged.size(), 0);
  for (size_t c = 0; c < count; ++c) {
    int64_t dst_off = 0, src_off = 0;
    for (size_t k = 0; k < merged.size(); ++k) {
      dst_off += index[k] * merged[k].dst * itemsize;
      src_off += index[k] * merged[k].src * itemsize;
    }
    out->push_back({dst_off, src_off, width, height, dst_pitch, src_pitch});
    for (size_t k = merged.size(); k-- > 0;) {
      if (++index[k] < merged[k].size) break;
      index[k] = 0;
    }
  }
  return true;
}

}  // namespace kiln::cuda
