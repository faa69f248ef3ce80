#pragma once

// Note [Rows along the padded dim]
// Padding to a bucket (Note [Buckets]) is exact only where every real
// element of every result is computed from real elements alone. That used
// to be tested on data (the padded plan run with zeros, +8 and -8 padding),
// which proves nothing: a maximum over rows above 8, an argmax over integer
// rows (padded with zeros only), an index_select along the padded dim whose
// index is past the real rows but inside the bucket, a function that
// writes state (never run twice), all passed it and returned wrong values.
// Now the first call at each size also traces the function at the bucket's
// sizes (nothing runs, even where it throws) and walks both traces side by
// side. A tensor's padded dims are those whose size differs between them.
// Padding stays on only when, node by node:
// - the two traces record the same ops with the same numbers (a number
//   that follows the size, `x * x.size(0)`, or a size-dependent branch,
//   turns it off), reading and writing the same memory roles (an argument,
//   a captured tensor, the n-th fresh buffer);
// - every tensor a node reads or writes, and every result, reaches the same
//   logical element of its buffer at both sizes for each index inside the
//   call's own sizes, and only real elements of it (a view of the last row
//   picks a padded row at the bucket's size; a reshape that interleaves the
//   padded dim with another mixes them); checked at the index space's
//   corners and at pseudo-random points, since a view is affine in its
//   index and the buffers are dense;
// - the op keeps the padded dims apart: pointwise ops; reductions, scans,
//   sorts and softmaxes over other dims; products that do not contract a
//   padded dim; norms over other dims; gathers and scatters along other
//   dims; attention whose keys are not padded, or causal self-attention
//   over a padded sequence; factories whose size follows the padded one
//   (zeros, arange). Random draws, and any op this table does not know, turn
//   padding off, naming the op.
// A function that fails at the bucket's sizes, or whose trace there breaks,
// runs at its own sizes. The data checks stay behind this one for what it
// cannot see (a host value the function computes before it is traced).

#include <string>

#include "jit/compile/instance.h"

namespace kiln::jit {

// "" when padding provably leaves every real element of `own`'s results as
// it is at the call's own sizes, `at_bucket` being the same function traced
// at the bucket's sizes; otherwise why not ("op 3 'sum' reduces over padded
// dim 0 of its argument 'self'").
std::string padded_rows_mix(const Pristine& own, const Pristine& at_bucket);

}  // namespace kiln::jit
