#pragma once

// Grows one pointwise body from trace nodes (Note [Fusion groups]): the
// pointwise groups, and the prologue and epilogue of reduction groups (Note
// [Reduction kernels]), are each built by one GroupBuilder.

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "jit/passes/fusion.h"
#include "jit/record/decompose.h"

namespace kiln::jit {

struct ViewIndexMap;  // Note [View folding]

// Which nodes of a trace read each storage, by position in `live`: built once
// per fuse() so that closing a group does not scan the rest of the trace
// (which made fusion quadratic in the trace's length).
class LaterReads {
 public:
  LaterReads(const std::vector<Node>& nodes, const std::vector<size_t>& live);
  // True when a node at `live[pos]` or later reads `s`.
  bool any(const StorageImpl* s, size_t pos) const;

 private:
  std::unordered_map<const StorageImpl*, std::vector<size_t>> readers_;  // ascending positions
};

class GroupBuilder {
 public:
  GroupBuilder(const std::vector<Node>& nodes, const FusionOptions& options)
      : nodes_(nodes), options_(options) {}

  bool empty() const { return members_.empty(); }
  size_t size() const { return members_.size(); }
  const DimVector& shape() const { return shape_; }
  // Fixes the iteration shape before any member joins (prologues, epilogues).
  void set_shape(IntArrayRef shape) {
    shape_ = shape;
    has_shape_ = true;
  }
  const std::vector<size_t>& members() const { return members_; }

  // Adds node `idx` or explains why not (the group is left unchanged then).
  bool try_add(size_t idx, Decomposition d, std::string* why);

  // The value of tensor `t` inside the group: a member's result, a folded
  // constant, or a load; -1 (with `why`) when it cannot be read here.
  int32_t resolve(const Tensor& t, std::string* why);
  // Loads an input that has no tensor (a reduction's result); the group's
  // `inputs` hold an undefined tensor in its place.
  int32_t placeholder_input(DType memory_dtype);
  // Makes node `idx` a member whose result (written to `target`) is `value`;
  // `d`, when given, lets fold_view recompute it at other elements.
  void add_member(size_t idx, const Tensor& target, int32_t value, Decomposition d = nullptr);
  // Members may not read or write memory that `other` (built first, run
  // interleaved with this group) writes or reads, except through the same view.
  void set_neighbour(const GroupBuilder* other) { neighbour_ = other; }

  KernelBuilder& builder() { return builder_; }

  // Finishes the group: stores what nodes from `live[next_live_pos]` on,
  // outside tensors or `reader` need. `first_store`, when >= 0, becomes
  // output 0 (float32, no tensor). `reader` (optional, default none) is the
  // group whose neighbour this one is (a reduction's epilogue, Note [Fusion
  // groups]): what it loads of this group's values is stored too.
  FusedGroup finish(size_t next_live_pos, const LaterReads& reads,
                    const std::unordered_set<const StorageImpl*>& external,
                    int32_t first_store = -1, const GroupBuilder* reader = nullptr);

 private:
  bool neighbour_conflict(const Tensor& t, bool write) const;
  bool loads_from(const StorageImpl* s) const;
  int32_t fold_view(const Tensor& t);
  int32_t emit_at(size_t k, const ViewIndexMap& map);
  int32_t load(const Tensor& t);
  int32_t number(const Tensor& t);

  struct Produced {
    Tensor view;
    int32_t value;
  };

  const std::vector<Node>& nodes_;
  const FusionOptions& options_;
  const GroupBuilder* neighbour_ = nullptr;
  KernelBuilder builder_;
  DimVector shape_;
  bool has_shape_ = false;
  std::vector<size_t> members_;
  std::vector<Decomposition> decomps_;  // per member; null where none rebuilds it
  std::vector<Tensor> loads_;
  std::vector<Produced> produced_;
  // The wrapped numbers read so far and their Params (Note [Numbers as kernel arguments]).
  std::vector<std::pair<const TensorImpl*, int32_t>> numbers_;
  std::unordered_set<const StorageImpl*> writes_;
};

}  // namespace kiln::jit
