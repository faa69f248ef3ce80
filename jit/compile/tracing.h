#pragma once

// Note [Tracing stand-ins]
// A compiled function is traced by calling it with stand-ins for its tensor
// arguments, recording into a trace of its own (TraceScope) rather than the
// thread's. A stand-in has its argument's geometry over a storage of its own
// that borrows the argument's memory (no copy, not owned), so that if the
// trace has to run early its results are the call's true results. Two
// arguments sharing a storage share one stand-in storage: the trace models
// their aliasing, and the guards hold it to that. One tensor passed twice (or
// in two lists) gets one stand-in: an out= op that resizes it through one
// name resizes it for the other too, as in eager mode.
//
// Stand-in storages carry a ReadWatch marker: a host read of an argument's
// value while tracing (item(), data_ptr(), printing, to(cpu)) is reported,
// as is the trace running before the function returned (a read of a pending
// result, an op that had to run at once, kiln::sync()). Either is a graph
// break: what the function did from there on may depend on values, so the
// trace cannot be replayed. The trace then simply runs, as lazy mode would,
// and the call's results are exact; the entry runs the function uncompiled
// from then on. Writes to a stand-in are recorded like any other.
//
// A compiled function called while another one is being traced on the same
// thread is traced inline: its body is recorded into the outer trace.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jit/record/trace_buffer.h"
#include "kiln/jit.h"

namespace kiln::jit {

struct Traced {
  std::vector<Node> nodes;          // the trace (empty when it broke)
  std::vector<Tensor> outputs;      // what the function returned
  std::vector<Tensor> stand_ins;    // per tensor argument in guard order (lists flattened)
  IntrusivePtr<TraceBuffer> trace;  // its marker tells the fresh storages and the writes
  // Per tensor argument (guard order): the function made a view of it at an
  // explicit storage offset, so its offset stays guarded (Note [Dynamic
  // storage offsets] in guards/guards.h).
  std::vector<bool> fixed_offsets;
  // Captured storages and the references held outside that their guards ask
  // for (guard_held_references).
  std::vector<std::pair<const StorageImpl*, int32_t>> held_refs;
  // Views the function made of tensors with memory (captured ones among
  // them), each to the tensor it was made of: a captured tensor's guard
  // follows them back to the caller's object (Note [Guards]). Both held.
  std::unordered_map<const TensorImpl*,
                     std::pair<IntrusivePtr<TensorImpl>, IntrusivePtr<TensorImpl>>>
      view_bases;
  bool broken = false;
  std::string break_reason;  // "the value of op 12 'sum' was needed on the host ..."
};

// Traces `body` on `args` (Note [Tracing stand-ins]). When the trace breaks,
// it has run and `outputs` are the call's results (stand-ins replaced by the
// arguments); otherwise nothing has run and the nodes are handed back with
// their storages still pending. If `body` throws, what it recorded runs (as
// lazy mode would have run it) and the exception propagates.
Traced trace_function(const std::vector<IValue>& args, boxed::Body body);

// True while this thread traces a compiled function.
bool is_tracing();

// The tensors of `args` in guard order: each tensor argument, each element of
// a list argument.
std::vector<const Tensor*> tensor_arguments(const std::vector<IValue>& args);

// A number argument as one word of a cache key: an int or a bool as it is, a
// double's bits (0.0 and -0.0 apart); 0 for anything else.
int64_t scalar_key(const IValue& a);

}  // namespace kiln::jit
