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
// A value produced in the same group and read through another geometry
// (`(x * 2).transpose(0, 1) + 1`) is recomputed at the viewed elements
// (GroupBuilder::fold_view): when the producer's output is dense and the view
// walks its dims by an affine map without carries (permutes, transposes,
// strided or narrowed walks within a dim, broadcasts), every load of the
// producing members is re-viewed through the same map (ViewIndexMap) and the
// members are re-emitted; the kernel builder shares what repeats. Not folded,
// so the group is cut, the value stored (a planned arena buffer, Note [Memory
// plan]) and loaded through the view by the next group: producers that are
// in-place or read memory the group writes (other elements may already be
// overwritten), views with carries, views of views of group values, and on
// the CPU views that would make a load strided in the innermost dim (the
// asmjit generator would then run the whole group node by node).
