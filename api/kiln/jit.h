#pragma once

// Lazy execution controls. By default every op is recorded into a per-thread
// trace and runs, fused and compiled, when a value is needed (item(),
// data_ptr(), printing, kiln::sync(), a full trace). KILN_EAGER=1 turns
// recording off for the whole process; EagerGuard for a scope.

#include <cstdint>

#include "kiln/api.h"
#include "kiln/dispatch.h"

namespace kiln {

// Ops inside the scope run at once through their backend kernels.
class KILN_API EagerGuard {
 public:
  EagerGuard();
  ~EagerGuard();
  EagerGuard(const EagerGuard&) = delete;
  EagerGuard& operator=(const EagerGuard&) = delete;

 private:
  ExcludeKeyGuard guard_;
};

namespace jit {

// True when ops on this thread are recorded (not in an EagerGuard, not KILN_EAGER=1).
KILN_API bool is_lazy();
// Runs everything this thread has recorded.
KILN_API void flush();
// Counters of this process's lazy execution, for tests and benchmarks.
struct TraceStats {
  int64_t recorded_ops = 0;     // ops recorded
  int64_t flushes = 0;          // times a trace ran
  int64_t executed_nodes = 0;   // nodes that ran
  int64_t dead_nodes = 0;       // nodes dropped because nothing needed them
  int64_t eager_fallbacks = 0;  // ops run eagerly because they could not be traced
  int64_t cse_merged = 0;       // nodes whose consumers read an identical earlier node's output
  int64_t planned_bytes = 0;    // last run: the memory plan's arenas (Note [Memory plan])
  int64_t naive_bytes = 0;      // last run: the same buffers allocated one by one
};
KILN_API TraceStats trace_stats();

}  // namespace jit
}  // namespace kiln
