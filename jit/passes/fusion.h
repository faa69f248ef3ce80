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

#include <string>
#include <vector>

#include "jit/kernel_ir.h"
#include "jit/trace_buffer.h"

namespace kiln::jit {

struct FusedGroup {
  PointwiseKernel kernel;
  DimVector shape;              // the iteration shape
  std::vector<Tensor> inputs;   // loaded tensors (broadcast into `shape`)
  std::vector<Tensor> outputs;  // stored tensors (of `shape`)
  std::vector<size_t> members;  // node indices, in record order
};

struct Step {
  enum class Kind { Extern, Fused } kind;
  size_t node = 0;   // Extern: the node's index
  FusedGroup group;  // Fused
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

// Note [View folding]
// Views never reach the trace: view ops (t, transpose, narrow, slice, expand,
// view, permute...) are Composite kernels that run at record time and make a
// TensorImpl over the same storage, so a chain of views collapses into one
// (sizes, strides, offset) before any pass sees it. Fusion then folds that
// geometry into index arithmetic: a load keeps its tensor's strides and
// offset, coalesce() (jit/iteration.h) turns them into per-operand element
// strides over the group's iteration space, and broadcast dims become stride
// 0. So a view of a weight, of an input, or of an intermediate that an
// earlier step stored costs no copy kernel; reshape of a tensor strides cannot
// express becomes a fused clone that loads through the view.
// What is not folded: reading a value produced in the same group through
// another geometry (`(x * 2).t() + 1`). The group is cut there, the value is
// stored (a planned arena buffer, Note [Memory plan]) and the next group loads
// it through the view. Folding it would mean re-emitting the producing members
// with their loads composed with the view, which is affine only when the
// producer's output is dense and the view maps onto its dims without carries;
// it trades one store and load for recomputation.
