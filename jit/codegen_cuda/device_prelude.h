#pragma once

// The device code every generated CUDA source starts with: the i64 type,
// float16/bfloat16 conversions in inline PTX (no toolkit header is included,
// Note [CUDA pointwise ABI]), NaN-propagating max/min, and kiln_grid_enter
// (Note [Early launch] in kernel_loader.h).

#include "kiln/dtype.h"

namespace kiln::jit::cuda {

extern const char kDevicePrelude[];
// The C++ type a tensor of dtype `t` is stored as in device memory.
const char* mem_type(DType t);

}  // namespace kiln::jit::cuda
