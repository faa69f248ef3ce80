#pragma once

// Note [Common subexpressions]
// Two live nodes compute the same value when they run the same op, with
// equal non-tensor arguments, on the same tensors: the same storage seen
// through the same geometry (offset, sizes, strides, dtype) and in the same
// state, i.e. no node writes that storage between them. Wrapped numbers
// (`x * 2.0`) compare by value. Only deterministic, functional ops of kiln's
// own namespace take part: random and uninitialized factories, in-place and
// out= ops, custom ops (whose purity kiln cannot know) and ops returning an
// argument are left alone, as are nodes whose outputs any node writes
// afterwards (a consumer redirected to the earlier output would then see that
// write, or miss it).
//
// A merged node's consumers read the earlier node's output instead (views of
// it keep their geometry). When nothing outside the trace holds the later
// output, the later node becomes dead and dead-code elimination drops it. When
// the user holds it, it still has to be computed:
//   - a fusible (pointwise) node is left as it is: inside a fused group the
//     kernel builder folds the duplicate for free, and across groups it costs
//     one pointwise pass, as a copy would; a copy would be an extern node and
//     cut the group.
//   - any other node (a matmul, a reduction) becomes copy_(later, earlier),
//     which costs one memory pass instead of recomputing.

#include <cstddef>
#include <unordered_set>
#include <vector>

#include "jit/record/trace_buffer.h"

namespace kiln::jit {

struct CseResult {
  size_t merged = 0;  // later nodes whose consumers now read an earlier node's output
  size_t copies = 0;  // of those, nodes turned into a copy because the user holds their output
};

// Merges the duplicates among `live` (node indices in record order): rewrites
// the arguments of their consumers in `nodes`, and turns user-held extern
// duplicates into copies. `external`: the storages held outside the trace
// (external_storages(), which CSE leaves unchanged). Run live_nodes() again
// afterwards to drop the dead.
CseResult eliminate_common_subexpressions(std::vector<Node>& nodes, const std::vector<size_t>& live,
                                          const std::unordered_set<const StorageImpl*>& external);

}  // namespace kiln::jit
