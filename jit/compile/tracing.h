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
//
// Host reads of any other tensor: Note [Host reads while tracing].

// Note [Host reads while tracing]
// A value read on the host while a function is traced (item(), data_ptr(),
// printing, to(cpu), tolist(), a write through data_ptr()) may steer what
// the function records from there on, or be baked into it as a number: the
// trace cannot be replayed, whatever the tensor is. TensorImpl::data() is
// where every such read reaches memory (to(cpu) materializes its result
// through it while a trace is watched). While some thread traces
// (TensorImpl::host_reads_watched(), a process-wide count kept around the
// traced body: the fast path of data() pays one relaxed load, and other
// threads the slow path only meanwhile) data() tells the host read hook
// (note_host_read in tracing.cpp), and on the tracing thread the read is a
// graph break:
// - an argument's stand-in: its ReadWatch reports it (Note [Tracing stand-ins]);
// - a value the trace computes (pending here): running the trace early
//   reports it, naming the op that wrote it;
// - anything else with memory: a tensor the function captured (a weight, a
//   state tensor), a view of one, one pending on the thread's own trace or
//   another thread's: reported here. It used to go unnoticed, and the value
//   read at the first call was the function's forever.
// Kernels read memory through data() too: while a plan runs (an early
// flush, or another trace run first by Note [Pending state across threads])
// they are not host reads. A kernel run at once while tracing (an op with no
// Meta kernel, an EagerGuard) follows a flush that reported the break first.
// Exempt: wrapped numbers (`x * 2.0`), which are the C++ numbers the
// function passed, bound at trace time like any C++ value; fresh memory the
// runtime fills on the host (scalar_tensor, from_data: written through the
// storage, not data()); and index checks that only name the op in an error
// (host_indices: an index out of range still raises from the recorded ops).
// A tensor made inside the function from constants (arange(4).sum().item())
// breaks too: it is pending here like any computed value, and telling it
// from one that depends on an input would need the ancestry of every node
// (no stand-in, no captured storage, no random draw, no memory the host can
// write, as a from_blob inside the function may be) and running those nodes
// apart from the trace while keeping them in the replay. A break is never
// wrong, the log names it, and such a number is better computed once outside
// the function and captured as a C++ value.

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
// lazy mode would have run it) and the exception propagates; with
// `run_if_thrown` false it is dropped instead, nothing it wrote changed (a
// trace that only asks what the function would do, Note [Rows along the
// padded dim]).
Traced trace_function(const std::vector<IValue>& args, boxed::Body body, bool run_if_thrown = true);

// True while this thread traces a compiled function.
bool is_tracing();

// The tensors of `args` in guard order: each tensor argument, each element of
// a list argument.
std::vector<const Tensor*> tensor_arguments(const std::vector<IValue>& args);

// A number argument as one word of a cache key: an int or a bool as it is, a
// double's bits (0.0 and -0.0 apart); 0 for anything else.
int64_t scalar_key(const IValue& a);

}  // namespace kiln::jit
