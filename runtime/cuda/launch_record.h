#pragma once

// Note [Launch records]
// While a thread captures a CUDA graph, every launch of a kernel kiln
// generated reports what it launched: the function, the launch shape and each
// parameter's bytes (launch sites call note_launch() right after
// cudaLaunchKernel). The graph layer keeps these per captured node, so it
// knows every pointer its own kernel nodes hold and can point them at new
// memory on replay (Note [Graph addresses]). Library kernels (cuBLASLt)
// report nothing. With no recorder installed a report costs one thread-local
// load, and one relaxed load more for the profiler, which times each
// reported launch while a Profile times GPU work (Note [Profiler GPU timing]).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cuda {

class LaunchRecorder {
 public:
  virtual ~LaunchRecorder() = default;
  virtual void on_launch(cudaStream_t stream, const void* func, dim3 grid, dim3 block,
                         size_t shared_bytes, void* const* params, const size_t* sizes,
                         int count) = 0;
  // Scratch for a library call (cuBLASLt's workspace) queued on `stream`: at
  // least `bytes`, the same block for every call of one capture (they run one
  // after another), or null to let the caller allocate its own.
  virtual void* library_scratch(cudaStream_t stream, size_t bytes) = 0;
  // Memory for a kernel's counters queued on `stream`, `bytes` long, that is
  // zero when each replay starts provided the kernels that use it leave it
  // zero (Note [Counters that reset themselves]); null to clear its own.
  virtual void* zeroed_scratch(cudaStream_t stream, size_t bytes) = 0;
  // A copy of `bytes` (at most kHostValueLimit) from host memory at `src` to
  // device memory at `dst`, queued on `stream` (Note [Host values under
  // capture]): true where the recorder took it, false to leave it to the caller.
  virtual bool host_value(cudaStream_t stream, void* dst, const void* src, size_t bytes) = 0;
  // Two words for a kernel's error flag while captured on `stream` (Note
  // [Errors of replayed kernels]), or null to leave the kernel without one.
  // `what` is the error, with "{}" where word 1's value goes.
  virtual int64_t* error_slot(cudaStream_t stream, std::string what) = 0;
};

// Note [Errors of replayed kernels]
// Some kernels find errors in device data: an index out of range (Note [CUDA
// index bounds]), a KV-cache position past the cache's end. Run directly they
// set a flag in device memory that the op reads back, raising at the op. A
// captured graph cannot read anything back, so those kernels ran without a
// flag: a replay skipped the bad element and its call returned a wrong
// answer without a word. Now, while captured, each such launch asks the
// capture for an error slot: two words of mapped host memory owned by the
// graph, which the kernel writes (the value, then a fence to the system,
// then word 0: plain stores, no atomics over the bus). kiln reads the slots
// of the graphs replayed on a stream where it waits for that stream: after a
// copy to the host (a result read with cpu() or item()) and in
// kiln::cuda::synchronize() and kiln::sync(). A set slot is cleared and
// raised there as a kiln::Error naming the op and the value, saying that the
// results of the call whose replay met it are wrong. A compiled call also
// checks its graph's slots before it starts, which catches an error whose
// results were never read once that replay has finished (the check does not
// wait for it: a replay still running is caught at the next read or sync). The slots of a capture
// come from one slab of 512 taken before it begins (pinned memory cannot be allocated while a
// stream captures) and kept in a pool. A capture with more such kernels than its slab has slots, or
// whose slab could not be had, is not kept: its replays would leave those kernels' errors
// unreported, so the work runs directly (the capture's failure is logged, Note [Capture retries]).
// The cost: nothing on the device unless a kernel meets an error; a few host loads per check.

// A graph's error slots, as the registry below sees them.
struct ErrorSlot {
  volatile int64_t* words = nullptr;  // host address of the two words
  std::string what;
};
// The registry of slots whose graphs may replay: `owner` (a graph) adds its
// slots once, notes each launch's stream, and removes itself before it frees them.
void watch_errors(const void* owner, const std::vector<ErrorSlot>* slots);
void unwatch_errors(const void* owner);
void note_replay(const void* owner, cudaStream_t stream);
// Raises the first error that a replay on `stream` (null: on any stream) left
// in its slots since the last check, clearing it.
void check_replay_errors(cudaStream_t stream);
// The same for one graph's slots.
void check_errors(const std::vector<ErrorSlot>& slots);
// An error slot's message: `what` with "{}" replaced by `value`.
std::string error_text(std::string what, int64_t value);
// The error slot of the capture on `device`'s current stream, or null when
// it is not captured (an error flag in device memory is then the caller's).
int64_t* error_slot(int device, std::string what);

// Note [Host values under capture]
// A host to device copy captured as a memcpy node would read the same host
// address at every replay, and a copy from pageable memory cannot be captured
// at all (Note [Host copies under capture] in runtime/cuda/copy.cpp). Yet
// small ones are common inside a compiled function: a 0-dim CPU tensor taken
// as a scalar by a CUDA op (Note [One device per CUDA op]), or a position
// held on the host and moved with .to(cuda). While a graph is captured, such
// a copy of at most kHostValueLimit bytes whose source is laid out as its
// destination becomes kernels that write the bytes they hold as their
// parameters (kiln_graph_put, kiln_graph_put_large), one per kHostValueBytes
// (4080: a kernel's 4 KiB of parameters less the destination and the count;
// each such node adds about a kernel's floor to a replay, so the limit is
// 16 of them). The graph reads the source again at every
// replay, where the argument it belongs to now lives (Note [Graph addresses]),
// and updates the node's parameters when the bytes changed: the value a
// replay writes is the one the host held when the replay was launched, as an
// eager copy reads it when it is queued. Only sources the capture was told
// of qualify (Capture::allow_host_values: the compiled function's host
// arguments and captured host tensors): a capture records and runs nothing,
// so a copy from a temporary host buffer, or one whose destination outlives
// the graph (CUDA arange's cache of device values, filled on a miss), must
// not wait for a replay; those, and larger copies, still end the capture.
inline constexpr size_t kHostValueBytes = 4080;
inline constexpr size_t kHostValueLimit = 16 * kHostValueBytes;

// Note [Counters that reset themselves]
// Some kernels elect a last block with an atomic counter per group (the
// decode attention's combine, Note [Decode combine]). Eager calls clear the
// counters with a memset before each launch. In a captured graph that memset
// is a node of its own on every replay (a fill kernel, about 1.6 us on an
// H200, and a full stop for early launch, Note [Early launch]). So while
// captured, the counters are the graph's own memory, cleared once when the
// capture ends, and the elected block sets its counter back to zero: every
// other block has already counted, so nothing reads it again in that launch,
// and the next replay finds it zero. One graph exec never runs concurrently
// with itself, so its counters have one user at a time.

// This thread's recorder, or null.
LaunchRecorder* launch_recorder();

// Installs `recorder` for this thread's launches (null: none); returns the previous one.
LaunchRecorder* set_launch_recorder(LaunchRecorder* recorder);

// Reports a launch that just succeeded on `stream`: params[i] points at the
// i-th parameter's value, sizes[i] bytes long.
void note_launch(cudaStream_t stream, const void* func, dim3 grid, dim3 block, size_t shared_bytes,
                 void* const* params, const size_t* sizes, int count);

}  // namespace kiln::cuda
