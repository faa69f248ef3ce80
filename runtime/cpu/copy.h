#pragma once

#include "kiln/tensor.h"

namespace kiln::cpu {

// Writes `src` into `dst` (both on the CPU): broadcasts src to dst's shape and
// converts dtypes, as Tensor::copy_ does.
void copy_into(const Tensor& dst, const Tensor& src);

// What copy_ checks at the call, on every device and in its Meta kernel (so
// lazy mode raises where eager mode does): both defined; a target whose
// elements are distinct (Note [Writes into shared storage]); a source that
// broadcasts to the target, never the other way; and, as PyTorch, a source
// that is the target or shares no memory with it: one that partly overlaps
// it (y[1:].copy_(y[:-1]), y.copy_(y.t())) is refused. Layouts the overlap
// check cannot judge pass; the kernels read those from a copy.
void check_copy(const Tensor& self, const Tensor& src);

}  // namespace kiln::cpu
