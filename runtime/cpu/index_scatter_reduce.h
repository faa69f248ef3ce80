#pragma once

// The reductions of scatter.reduce and scatter_reduce.two, shared by the CPU
// kernels (index_gather.cpp) and the CUDA ones
// (jit/codegen_cuda/op_kernels/scatter_reduce.cpp).

#include <string_view>

namespace kiln::cpu {

// Note [Scatter reductions]
// scatter.reduce ("add", "multiply") and scatter_reduce.two ("sum", "prod",
// "mean", "amax", "amin") combine each src element (or the value) into self at
// its index, in the index's row-major order: per element of the result, in
// index order along dim. A 16-bit float is rounded after every step, as
// PyTorch's CPU kernel (and kiln's scatter_add) do, so the result is defined
// by that order; the CUDA kernel walks each line along dim in the same order
// and gives the same bits. amax and amin propagate NaN. Integer sums and
// products wrap; bool sums and amax are "or", products and amin "and". With
// include_self=false every element an index names starts from the
// reduction's identity (0, 1, -inf or the lowest value, +inf or the highest),
// so self's value there is ignored. "mean" then divides each element by the
// number of values combined into it (self's included when include_self; at
// least 1), flooring for integers; bool has no mean, as in PyTorch.
enum class ScatterReduce : int { Sum, Prod, Mean, Max, Min };

// The reduction `reduce` names: "add" / "multiply" for scatter.reduce
// (two = false), "sum" / "prod" / "mean" / "amax" / "amin" for
// scatter_reduce.two; anything else throws naming `op`.
ScatterReduce parse_scatter_reduce(const char* op, std::string_view reduce, bool two);
// "sum", "prod", "mean", "amax", "amin".
const char* scatter_reduce_name(ScatterReduce r);

}  // namespace kiln::cpu
