#pragma once

// The index map of reflect, replicate and circular padding, shared by the CPU
// kernels (shape_pad.cpp) and the CUDA remap kernel
// (jit/codegen_cuda/op_kernels/shape_ops.cpp).

#include <cstdint>
#include <vector>

#include "kiln/tensor.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::cpu {

// Note [Pad modes]
// reflection_padNd, replication_padNd and _pad_circular (what pad's modes
// "reflect", "replicate" and "circular" call, as torch.nn.functional.pad does)
// write a dense result whose element at coordinate j of a padded dim reads
// the input at coordinate i = j - left, mapped into the input by the mode:
//   reflect    i < 0 -> -i, i >= n -> 2 (n - 1) - i (pads below n keep it inside);
//   replicate  i clamped to [0, n - 1];
//   circular   the input cropped by the negative pads, [lo, lo + m), wrapped:
//              lo + (i - lo) mod m (pads of at most m wrap once).
// Negative pads crop under every mode: reflect and replicate still reflect
// and clamp at the edges of the whole input, as PyTorch does. Dims that are
// not padded read coordinate j. The map is pure index math, so every dtype
// pads (PyTorch 1.13's CPU has only float32 and float64 for reflect and
// replicate, a gap of that build). As PyTorch 2 does, every mode takes an
// unbatched input (one dim before the padded ones) or a batched one (two);
// reflect and replicate refuse empty dims other than the batch dim. In lazy
// mode they are extern steps, like constant_pad_nd: the kernel IR has no
// gathers, so a pad does not fuse with the pointwise ops around it.

enum class PadMode : int { Reflect, Replicate, Circular };

// One padded dim: its index in the input and the map above.
struct PadDim {
  int64_t dim = 0;
  int64_t left = 0;  // i = j - left
  int64_t lo = 0;    // the extent read is [lo, lo + n): circular crops, others read all
  int64_t n = 0;
};

struct PadGeometry {
  DimVector sizes;  // of the result
  std::vector<PadDim> dims;
};

// Checks the arguments of `op` (spatial: the number of padded dims, 0 to take
// it from pad's length) and returns the result's sizes and the padded dims' maps.
PadGeometry pad_mode_geometry(const char* op, PadMode mode, const Tensor& self, IntArrayRef pad,
                              int64_t spatial);

// The input coordinate that output coordinate j of padded dim `d` reads.
inline int64_t pad_source(PadMode mode, const PadDim& d, int64_t j) {
  const int64_t i = j - d.left;
  switch (mode) {
    case PadMode::Reflect:
      return i < 0 ? -i : (i >= d.n ? 2 * (d.n - 1) - i : i);
    case PadMode::Replicate:
      return i < 0 ? 0 : (i >= d.n ? d.n - 1 : i);
    case PadMode::Circular:
      break;
  }
  const int64_t r = (i - d.lo) % d.n;
  return d.lo + (r < 0 ? r + d.n : r);
}

}  // namespace kiln::cpu
