#pragma once

// The device code every generated CUDA source starts with: the i64 type,
// float16/bfloat16 conversions in inline PTX (no toolkit header is included,
// Note [CUDA pointwise ABI]) and NaN-propagating max/min.

namespace kiln::jit::cuda {

extern const char kDevicePrelude[];

}  // namespace kiln::jit::cuda
