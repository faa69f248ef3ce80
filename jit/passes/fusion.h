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
// through the same view (both run row by row, interleaved), and the prologue
// stores every value the epilogue loads, whether or not a later node reads
// it: the reduction node itself reads its other arguments in the epilogue
// (layer_norm's weight and bias), and when one of them has the input's shape
// (a 1-D input, or a norm over every dim) its producer joins the prologue,
// with no later reader to ask for its store. An integer
// division joins neither: only a pointwise kernel reports a zero divisor
// (Note [CUDA integer division by zero]), so a group holding one is closed
// before a reduction starts, and one never joins an epilogue.

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "jit/ir/kernel_ir.h"
#include "jit/ir/reduction_ir.h"
#include "jit/record/trace_buffer.h"

namespace kiln::jit {

// Note [Launch memo]
// A backend may keep on a group what it worked out to launch it (the kernel
// handle, the argument layout, the grid), so that running the same group
// again (a compiled instance runs its plan on every call) only refreshes the
// data pointers after checking that the operands' geometry is what it was.
// A copy starts empty: a copied group holds other tensors, and copies run on
// other threads (one instance per thread at a time).
struct LaunchMemo {
  virtual ~LaunchMemo() = default;
};

class LaunchMemoSlot {
 public:
  LaunchMemoSlot() = default;
  LaunchMemoSlot(const LaunchMemoSlot&) {}
  LaunchMemoSlot& operator=(const LaunchMemoSlot&) {
    memo.reset();
    return *this;
  }
  LaunchMemoSlot(LaunchMemoSlot&&) noexcept = default;
  LaunchMemoSlot& operator=(LaunchMemoSlot&&) noexcept = default;
  ~LaunchMemoSlot() = default;

  mutable std::unique_ptr<LaunchMemo> memo;
};

struct FusedGroup {
  PointwiseKernel kernel;
  DimVector shape;              // the iteration shape
  std::vector<Tensor> inputs;   // loaded tensors (broadcast into `shape`)
  std::vector<Tensor> outputs;  // stored tensors (of `shape`)
  std::vector<size_t> members;  // node indices, in record order
  LaunchMemoSlot launch;        // Note [Launch memo]
};

// The sizes and strides of a group's operands (outputs, then inputs) as a
// launch memo recorded them (Note [Launch memo]).
struct OperandGeometry {
  std::vector<DimVector> sizes, strides;

  void record(const FusedGroup& g);
  // Whether `g`'s operands still have these sizes and strides.
  bool matches(const FusedGroup& g) const;
};

// A reduction group: prologue and epilogue are pointwise groups whose input
// 0 (epilogue) and output 0 (prologue) are undefined tensors standing for the
// reduction's float32 input and result.
struct ReductionGroup {
  RowOp op = RowOp::Sum;
  int64_t correction = 0;
  bool sqrt_result = false;  // ReductionKernel::sqrt_result
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
// The same with external_storages(nodes) already at hand (live_nodes() hands it
// back), so that a flush does not count every handle again.
std::vector<Step> fuse(const std::vector<Node>& nodes, const std::vector<size_t>& live,
                       const std::unordered_set<const StorageImpl*>& external,
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
// offset, coalesce() (jit/ir/iteration.h) turns them into per-operand element
// strides over the group's iteration space, and broadcast dims become stride
// 0. So a view of a weight, of an input, or of an intermediate that an
// earlier step stored costs no copy kernel; reshape of a tensor strides cannot
// express becomes one copy_ into a fresh row-major tensor, read through the view.
// A value produced in the same group and read through another geometry
// (`(x * 2).transpose(0, 1) + 1`) is recomputed at the viewed elements
// (GroupBuilder::fold_view in jit/passes/group_builder.cpp, so pointwise groups
// and reduction prologues and epilogues alike): when the producer's output is
// dense and the view walks its dims by an affine map without carries (permutes,
// transposes, strided or narrowed walks within a dim, broadcasts), every load
// of the producing members is re-viewed through the same map (ViewIndexMap) and
// the members are re-emitted; the kernel builder shares what repeats. Not
// folded, so the group is cut, the value stored (a planned arena buffer, Note
// [Memory plan]) and loaded through the view by the next group: producers that
// are in-place or read memory the group writes (other elements may already be
// overwritten), a reduction's result in its epilogue (it holds one value per
// row), views with carries, views of views of group values, and on the CPU
// views that would make a load strided in the innermost dim (the asmjit
// generator would then run the whole group node by node).
