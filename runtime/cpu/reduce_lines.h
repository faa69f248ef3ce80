#pragma once

// The 1-D lines of same-shaped tensors along one dim, for kernels that treat a
// whole line at once (cumsum/cumprod, sort, topk). The other dims are ordered
// by the first tensor's strides, innermost first, and coalesced, so walking
// consecutive lines walks memory in order where the layout allows.

#include <algorithm>
#include <climits>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::cpu {

class DimLines {
 public:
  static constexpr int kMaxTensors = 3;

  // `dim` is wrapped; a 0-dim tensor has one line of length 1.
  DimLines(IntArrayRef sizes, int64_t dim, ArrayRef<Tensor> ts) : n_(static_cast<int>(ts.size())) {
    const int64_t nd = static_cast<int64_t>(sizes.size());
    struct D {
      int64_t size;
      int64_t st[kMaxTensors];
    };
    std::vector<D> other;
    for (int64_t d = nd - 1; d >= 0; --d) {
      D x{sizes[d], {0, 0, 0}};
      for (int k = 0; k < n_; ++k) {
        x.st[k] = ts[k].stride(d) * static_cast<int64_t>(ts[k].element_size());
      }
      if (d == dim) {
        length_ = x.size;
        for (int k = 0; k < n_; ++k) line_stride_[k] = x.st[k];
        continue;
      }
      num_lines_ *= x.size;
      if (x.size != 1) other.push_back(x);
    }
    auto key = [](const D& x) { return x.st[0] == 0 ? INT64_MAX : x.st[0]; };
    std::stable_sort(other.begin(), other.end(),
                     [&](const D& a, const D& b) { return key(a) < key(b); });
    for (const D& x : other) {
      if (!sizes_.empty()) {
        bool ok = true;
        for (int k = 0; k < n_; ++k) ok = ok && x.st[k] == strides_[k].back() * sizes_.back();
        if (ok) {
          sizes_.back() *= x.size;
          continue;
        }
      }
      sizes_.push_back(x.size);
      for (int k = 0; k < n_; ++k) strides_[k].push_back(x.st[k]);
    }
    if (sizes_.empty()) {
      sizes_.push_back(1);
      for (int k = 0; k < n_; ++k) strides_[k].push_back(0);
    }
  }

  int64_t num_lines() const { return num_lines_; }
  int64_t length() const { return length_; }
  // Byte stride of tensor k along the line.
  int64_t line_stride(int k) const { return line_stride_[k]; }
  // The innermost other dim: its size and tensor k's byte stride.
  int64_t inner_size() const { return sizes_[0]; }
  int64_t inner_stride(int k) const { return strides_[k][0]; }

  // Calls f(offsets) for lines [begin, end): offsets[k] is the byte offset of
  // the line's first element in tensor k.
  template <class F>
  void for_lines(int64_t begin, int64_t end, F&& f) const {
    const int nd = static_cast<int>(sizes_.size());
    DimVector idx(static_cast<size_t>(nd));
    int64_t off[kMaxTensors] = {};
    int64_t rem = begin;
    for (int d = 0; d < nd; ++d) {
      idx[d] = rem % sizes_[d];
      rem /= sizes_[d];
      for (int k = 0; k < n_; ++k) off[k] += idx[d] * strides_[k][d];
    }
    for (int64_t l = begin; l < end; ++l) {
      f(static_cast<const int64_t*>(off));
      ++idx[0];
      for (int k = 0; k < n_; ++k) off[k] += strides_[k][0];
      for (int d = 0; d + 1 < nd && idx[d] == sizes_[d]; ++d) {
        for (int k = 0; k < n_; ++k) off[k] += strides_[k][d + 1] - idx[d] * strides_[k][d];
        idx[d] = 0;
        ++idx[d + 1];
      }
    }
  }

 private:
  int n_;
  int64_t num_lines_ = 1;
  int64_t length_ = 1;
  int64_t line_stride_[kMaxTensors] = {};
  DimVector sizes_;
  DimVector strides_[kMaxTensors];
};

}  // namespace kiln::cpu
