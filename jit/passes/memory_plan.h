#pragma once

// Note [Memory plan]
// After fusion, every storage that the plan writes fresh and that nothing
// outside the trace holds (outputs of fused groups and of reduction groups'
// prologues and epilogues read by later steps, outputs of extern nodes that
// can write into given memory) gets a slice of one arena per device,
// allocated once per run. Liveness is counted in steps: a buffer
// lives from the first step that touches it (its write) to the last step that
// reads or writes it, both ends included, so a group never reads and writes
// one slice (broadcast loads and views would make such aliasing unsafe).
// Offsets come from greedy best fit over buffers sorted by size, largest
// first: large buffers are the hardest to place, and the small ones then fill
// the gaps between them; on inference graphs this lands close to the lower
// bound (the peak of the live bytes) at O(n^2) cost for n buffers.
//
// Each planned storage holds a reference to the arena's storage (its deleter
// drops it), so the arena lives as long as its last slice. On CUDA the arena
// comes from the caching allocator on the current stream, where the steps run
// in order: slices reused by buffers whose lifetimes do not overlap are safe.
// Storages held outside keep their own allocation. Extern nodes write into
// their slice through their op's out= overload (mm.out for mm); empty and
// empty_strided do not run at all, their slice being their result; any other
// extern (no out= overload, several outputs, or on CUDA) keeps the memory its
// kernel returns and is not planned.

#include <cstddef>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "jit/passes/fusion.h"

namespace kiln::jit {

struct PlannedBuffer {
  const StorageImpl* storage = nullptr;  // identity only
  size_t bytes = 0;                      // rounded up to the arena's alignment
  size_t first = 0, last = 0;            // steps, inclusive
  size_t offset = 0;
  Device device;
};

struct MemoryPlan {
  std::vector<PlannedBuffer> buffers;
  // Extern steps (by node index) whose output is a slice: they run through
  // their op's out= overload, or, where it is null, do not run at all (empty).
  std::unordered_map<size_t, const OperatorEntry*> out_variants;
  struct Arena {
    Device device;
    size_t bytes = 0;
    const void* base = nullptr;  // where it was allocated (for tests), once applied
  };
  std::vector<Arena> arenas;
  size_t planned_bytes = 0;  // the arenas' sizes
  size_t naive_bytes = 0;    // one allocation per buffer (same rounding)
};

// Plans the run of `steps` and gives every planned storage its slice of a
// freshly allocated arena. `external`: storages held outside the trace.
MemoryPlan plan_memory(const std::vector<Node>& nodes, const std::vector<Step>& steps,
                       const std::unordered_set<const StorageImpl*>& external);

// Assigns offsets (multiples of `alignment`) to `buffers` so that no two whose
// step ranges overlap share a byte; returns the arena size.
size_t assign_offsets(std::vector<PlannedBuffer>& buffers, size_t alignment);

// The plan of this thread's last run, less out_variants (for tests).
const MemoryPlan& last_memory_plan();

}  // namespace kiln::jit
