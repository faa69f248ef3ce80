#pragma once

// Note [Device checks at the end of a run]
// A CUDA op that checks device data (an index, a cache position, an integer
// divisor: Note [Device error flags] in jit/codegen_cuda/op_kernels/
// op_support.h) raised its error by waiting for its stream after its kernel.
// Run directly, outside a graph, that is a wait per such op: in a lazy
// flush or a Mode::Default call of GPT-2's decode step, thirteen waits (the
// embedding, an attention per layer), each one draining the queue the host
// had built ahead and leaving the GPU idle while the host queued the next
// kernels. While run_plan runs a plan, the checks wait instead once, after
// its last step (DeferredChecks::finish): each check that found an error
// fails its step then, and every later step that read what a failed step
// wrote is marked failed too (those ran, on the values the bad element
// left), so that what a run hands back follows Note [Failures in a trace]
// as if the failed step had raised at once. Where nothing fails, a run
// waits for its device once instead of once per checking op. Eager calls
// (no run_plan) still check at the op. A plan run under graph capture has
// nothing to defer: its kernels' flags are the capture's error slots.

#include <cstddef>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

namespace kiln::detail {

// A check that waits for the device and raises what it found; its
// destructor releases what it holds, waiting first if run() never ran.
class PendingCheck {
 public:
  virtual ~PendingCheck() = default;
  virtual void run() = 0;
};

class DeferredChecks {
 public:
  // Checks past this many in one run wait at once (their slots stay bounded).
  static constexpr size_t kLimit = 64;

  DeferredChecks();
  ~DeferredChecks();
  DeferredChecks(const DeferredChecks&) = delete;
  DeferredChecks& operator=(const DeferredChecks&) = delete;

  // The innermost scope of this thread, or null (checks then wait at once).
  static DeferredChecks* current();
  // Whether a check made now may wait for the end of the run.
  bool has_room() const { return pending_.size() < kLimit; }
  void set_step(size_t step) { step_ = step; }
  void add(std::unique_ptr<PendingCheck> check);

  // Runs the checks in the order they were made; returns, in that order, the
  // step and error of each that raised.
  std::vector<std::pair<size_t, std::exception_ptr>> finish();

 private:
  DeferredChecks* saved_;
  size_t step_ = 0;
  std::vector<std::pair<size_t, std::unique_ptr<PendingCheck>>> pending_;
};

}  // namespace kiln::detail
