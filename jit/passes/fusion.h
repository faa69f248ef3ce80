#pragma once

// Note [Fusion groups]
// Fusion walks the live nodes in record order and grows one pointwise group at
// a time: a node joins when it has a decomposition, its output has the group's
// iteration shape, and everything it reads is either computed in the group
// (read back with the geometry it was produced with) or loaded from memory
// that no member writes with another geometry. Anything else closes the group:
// the reason is logged under KILN_LOGS=fusion. Members' results are stored
// only when someone outside the group needs them (a later node, or a tensor
// the user holds); in-place members always store into their target.
//
// A reduction or row normalization (decompose_reduce.h) starts a reduction
// group (Note [Reduction kernels]): the open pointwise group becomes its
// prologue when it has the reduction's input shape (else it is closed), and
// the pointwise nodes that follow join its epilogue while they have the
// epilogue's shape. The epilogue may read what the prologue wrote only
// through the same view (both run row by row, interleaved).

#include <string>
#include <vector>

#include "jit/kernel_ir.h"
#include "jit/reduction_ir.h"
#include "jit/trace_buffer.h"

namespace kiln::jit {

struct FusedGroup {
  PointwiseKernel kernel;
  DimVector shape;              // the iteration shape
  std::vector<Tensor> inputs;   // loaded tensors (broadcast into `shape`)
  std::vector<Tensor> outputs;  // stored tensors (of `shape`)
  std::vector<size_t> members;  // node indices, in record order
};

// A reduction group: prologue and epilogue are pointwise groups whose input
// 0 (epilogue) and output 0 (prologue) are undefined tensors standing for the
// reduction's float32 input and result.
struct ReductionGroup {
  RowOp op = RowOp::Sum;
  int64_t correction = 0;
  double eps = 0;
  DimVector in_shape;           // the prologue's shape (the reduced tensor's)
  std::vector<bool> reduced;    // per dim of in_shape
  FusedGroup prologue;          // over in_shape
  FusedGroup epilogue;          // over the result's shape
  std::vector<size_t> members;  // every node index, in record order
  size_t node = 0;              // the reduction's node

  // The kernel both generators take (prologue and epilogue bodies, op).
  ReductionKernel kernel() const;
};

struct Step {
  enum class Kind { Extern, Fused, Reduction } kind;
  size_t node = 0;           // Extern: the node's index
  FusedGroup group;          // Fused
  ReductionGroup reduction;  // Reduction
};

struct FusionOptions {
  size_t max_nodes = 64;
  size_t max_operands = 128;
};

// `live` are node indices in record order; `external` the storages a tensor
// outside the trace references (see live_nodes()).
std::vector<Step> fuse(const std::vector<Node>& nodes, const std::vector<size_t>& live,
                       const FusionOptions& options = {});

// "fused[add.Tensor mul.Tensor] extern[mm]" — for logs and golden tests.
std::string describe(const std::vector<Node>& nodes, const std::vector<Step>& steps);

}  // namespace kiln::jit
