#pragma once

#include "kiln/tensor.h"

namespace kiln::cpu {

// Writes `src` into `dst` (both on the CPU): broadcasts src to dst's shape and
// converts dtypes, as Tensor::copy_ does.
void copy_into(const Tensor& dst, const Tensor& src);

}  // namespace kiln::cpu
