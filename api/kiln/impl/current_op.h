#pragma once

// Note [The op being run]
// The name of the op whose kernel runs on this thread, for errors raised
// below the dispatcher that know nothing of ops: an allocator's out-of-memory
// error names it (Note [Out of memory names the op]). The dispatcher sets it
// around every kernel call and puts the caller's value back on the way out,
// thrown or not, so nested ops name the innermost one and a kernel's own
// allocations after an inner op returns name the kernel's op again. A lazy
// flush clears it: the kernels it runs are not the op that made it flush.
// Null outside any op. A __thread pointer (Note [Dispatch TLS]): a call pays
// one load and two stores, and nothing is built until an error needs it.

#include "kiln/api.h"

namespace kiln::detail {

KILN_API extern __thread const char* tls_current_op __attribute__((tls_model("initial-exec")));

// The op being run on this thread, or null.
inline const char* current_op() {
  return tls_current_op;
}

// Makes `name` (null: no op) the op being run for the scope.
class CurrentOpScope {
 public:
  explicit CurrentOpScope(const char* name) : saved_(tls_current_op) { tls_current_op = name; }
  ~CurrentOpScope() { tls_current_op = saved_; }
  CurrentOpScope(const CurrentOpScope&) = delete;
  CurrentOpScope& operator=(const CurrentOpScope&) = delete;

 private:
  const char* saved_;
};

}  // namespace kiln::detail
