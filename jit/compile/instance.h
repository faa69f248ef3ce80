#pragma once

// Note [Compiled instances]
// A traced function becomes a Pristine: its nodes with every tensor that the
// trace made (results, intermediates) and every stand-in over storages that
// never get memory, and every captured tensor (a weight, a KV cache: made
// before the trace) replaced by an alias of the entry's own, so that the
// caller's tensor is not kept alive by the entry (Note [Guards]). An
// Instance is a copy of the Pristine with storages of its own, run through
// the passes once (the same steps every time: the passes are deterministic)
// and given one arena that it keeps. A call then:
// - binds each stand-in storage to its argument's memory (borrowed);
// - runs the steps (plan/pipeline.cpp's run_plan);
// - hands each result out as a fresh storage taking the memory its step
//   wrote (so a later call never overwrites what an earlier one returned),
//   or as the argument or captured tensor it is;
// - releases what extern steps allocated and unbinds the arguments.
// Intermediates in the arena keep their addresses for the instance's life.
// One instance runs one call at a time; calls that overlap get instances of
// their own (CompiledCore keeps a pool per plan).

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "jit/compile/tracing.h"
#include "jit/plan/pipeline.h"
#include "kiln/cuda.h"

namespace kiln::jit::cuda {
class KernelDiscovery;  // jit/codegen_cuda/launch_cuda.h
}  // namespace kiln::jit::cuda
namespace kiln::graphs {
class Capture;  // graphs/graph.h
}  // namespace kiln::graphs

namespace kiln::jit {

// A trace made replayable: nodes over storages that never get memory.
struct Pristine {
  std::vector<Node> nodes;
  std::vector<Tensor> outputs;
  std::vector<Tensor> stand_ins;  // per tensor argument (guard order); undefined for undefined ones
  std::unordered_set<const StorageImpl*> captured;  // storages made before the trace
  // Per captured storage (wrapped numbers aside): which node argument first
  // reads it ("weight of op 5 'linear'").
  std::vector<std::pair<StorageImpl*, std::string>> captured_uses;
  std::vector<const TensorImpl*> captured_impls;  // the aliases on captured storages
  // The caller's tensor objects the trace read captured tensors through,
  // with their first use (CapturedObject in guards/guards.h). The entry's
  // first plan takes them for its guards; a pristine keeps none after.
  std::vector<std::pair<IntrusivePtr<TensorImpl>, std::string>> caller_objects;
  // Captured storages whose guards ask for more references held outside than
  // one (kiln::jit::guard_held_references).
  std::vector<std::pair<const StorageImpl*, int32_t>> held_refs;
};

// Builds the Pristine of a trace that did not break: aliases the captured
// tensors and clears the trace's markers.
Pristine make_pristine(Traced traced);

// A write of a trace that the caller sees: into a tensor argument (by guard
// order) or a captured storage, with the geometry of the view written.
struct VisibleWrite {
  int64_t argument = -1;
  const StorageImpl* captured = nullptr;
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;
  // The op, where an index, mask or position operand chooses the positions
  // written (index_copy_, scatter_, masked_fill_, kv_cache_attention_write):
  // the view above is then only where they may land.
  std::string positions_by;
  bool operator==(const VisibleWrite& o) const = default;
};
// The trace's writes into its arguments and captured tensors, in record
// order; empty where it writes only memory it made (its results).
std::vector<VisibleWrite> visible_writes(const Pristine& p);

// "op 3 'add.Tensor' (2 tensors: ...)" per node, for verify mode: equal
// signatures mean the same ops on the same kinds of tensors.
std::vector<std::string> trace_signature(const std::vector<Node>& nodes,
                                         const std::vector<Tensor>& stand_ins,
                                         const std::unordered_set<const StorageImpl*>& captured);

// Note [Graph replay]
// An instance on one CUDA device in Mode::ReduceOverhead runs its first call
// directly (the warm-up: kernels compiled, cuBLASLt algorithms chosen, extern
// outputs sized), captures the second into a CUDA graph (graphs/graph.h) and
// replays that graph from then on; once its entry has captured, a later
// instance captures its first call instead (Note [Capture hints]). An
// argument or result storage that a library kernel touches is copied
// through the graph's own buffer (Note [Opaque steps] in instance.cpp);
// every other one is a binding whose kernel parameters replay patches (Note
// [Graph addresses]). Results go to memory no kept result uses (fresh, or
// the last replay's where the caller let go of it: Note [Results handed
// back] in instance.cpp), written through patched pointers or a patched copy
// node. A plan of one kernel (unless Options::graph_single_kernel: Note
// [Plans of one kernel] in instance.cpp), a plan on the CPU or over several
// devices, and a plan whose capture fails (logged under KILN_LOGS=graphs)
// run their kernels directly;
// the last tries again a bounded number of times (Note [Capture retries]).

// Note [Capture retries]
// A capture can fail for good (a step reads a value on the host) or for a
// while (memory runs short in the capture, or something the process does
// at that moment). An instance whose capture failed used to run its kernels
// directly for the rest of its life: after a moment of memory pressure, a
// decode step two to three times slower until the process restarted. Now a
// failure after the first run sends the runs direct and schedules one more
// capture kCaptureRetryRuns[i] runs later; after kCaptureAttempts failures
// the instance stays direct. Each failure is logged with what failed. A
// capture that cannot succeed thus costs two more failed captures (a few
// milliseconds each), spread over the instance's first few hundred runs.

// Note [Capture hints]
// What an entry's captures learned, for the instances it makes later (a plan
// for a new size, or another instance for an overlapping caller): that its
// work captures, and which arguments and results, by position, library
// kernels read or write unpatched (Note [Opaque steps] in instance.cpp).
// - An instance whose entry has captured captures its first run, where it
//   would otherwise run it directly and capture the second. That capture
//   finds the kernels not yet built as the throwaway pass of Note [Kernels
//   compiled side by side] does (placeholders stand in for them), and only
//   where it found some are they built and the capture made again; the
//   throwaway pass itself is left out. A first capture that fails only sends
//   that run direct, and the second tries again.
// - Its capture copies the hinted arguments and results at once, where it
//   would otherwise bind everything, find out, and capture again. A hint
//   wrong for this plan (another size may send a product to another kernel)
//   costs what it saved: a storage an opaque step touched unhinted drops the
//   capture as before, and a hinted one that no opaque step touched was
//   copied for nothing, so the capture is made again without it.
// The last successful capture writes the hint. Measured on GPT-2's blocks
// at 65-72 tokens (H200, kiln-compile-overhead --new-sizes, the base in the
// same command; perf/RESULTS.md): a new size's first two calls took 4.7-6.3
// ms (a direct run) and 4.6-7.1 ms (two captures), now 5.0-5.3 ms (one
// capture, replayed) and 0.42 ms.
struct CaptureHint {
  std::atomic<bool> captured{false};
  std::mutex mu;
  std::vector<size_t> args;     // tensor arguments copied through the graph's buffers
  std::vector<size_t> results;  // results copied out of the graph's buffers
};

struct InstanceOptions {
  bool graphs = false;                // ReduceOverhead: capture and replay on CUDA
  bool graph_single_kernel = false;   // Options::graph_single_kernel
  std::string name;                   // for logs: "decode: entry 1"
  std::shared_ptr<CaptureHint> hint;  // the entry's (null: none)
};

class Instance {
 public:
  explicit Instance(const Pristine& pristine, InstanceOptions options = {});
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;
  ~Instance();

  // Runs the plan on `args` (which passed the entry's guards); returns the results.
  std::vector<Tensor> run(const std::vector<IValue>& args);

  // The distinct tensors this instance holds on captured storages.
  const std::vector<const TensorImpl*>& captured_impls() const { return captured_impls_; }
  // Steps per run: generated kernels and extern calls.
  size_t steps() const { return plan_.steps.size(); }
  size_t arena_bytes() const { return plan_.memory.planned_bytes; }
  const Plan& plan() const { return plan_; }  // for explain()
  // Nodes of the captured graph (0 before the capture or without one).
  size_t graph_nodes() const;
  size_t graph_early_edges() const;  // Note [Early launch]
  // Calls run so far.
  int runs() const { return runs_; }

 private:
  struct GraphState;
  void release_after_run();
  void recover(bool nothing_ran);
  void bind_arguments(const std::vector<const Tensor*>& tensors);
  // Where argument `k`'s stand-in storage starts this run: the argument's
  // storage moved by its shift (Note [Dynamic storage offsets]).
  char* argument_base(const std::vector<const Tensor*>& tensors, size_t k) const;
  void run_steps();
  std::vector<Tensor> collect(const std::vector<const Tensor*>& tensors,
                              const std::function<IntrusivePtr<StorageImpl>(StorageImpl*)>& fresh);
  // `first_run`: the instance's first run, captured on its entry's hint (Note
  // [Capture hints]); a failure there leaves the next run to try again.
  bool capture(const std::vector<const Tensor*>& tensors, bool first_run);
  // Note [Capture hints]: the hinted storages (added to opaque_touched_), and
  // the hint written back after a capture.
  std::vector<const StorageImpl*> take_hint();
  void write_hint();
  // Note [Kernels compiled side by side] (jit/codegen_cuda/launch_cuda.h):
  // before the first run on CUDA, a run under a capture that is thrown away
  // finds the kernels not yet built, and they are built side by side.
  void build_kernels_ahead(const std::vector<const Tensor*>& tensors);
  // One try of capture(): the graph, or null where a step that added opaque
  // nodes touched memory bound rather than copied, or where `discovery`
  // kept kernels not yet built (the instance is then as before the try);
  // throws kiln::Error where the work could not be captured. On a graph or
  // a surprise, `opaque` receives the storages of the steps that added
  // opaque nodes.
  std::unique_ptr<GraphState> capture_once(const std::vector<const Tensor*>& tensors,
                                           std::unordered_set<const StorageImpl*>* opaque,
                                           const cuda::KernelDiscovery* discovery);
  // Tells `cap` which host memory small copies may read at every replay: the
  // host arguments and captured host tensors (Note [Host values under capture]).
  void allow_host_values(graphs::Capture& cap, const std::vector<const Tensor*>& tensors) const;
  // Whether the captured graph can take these arguments (Note [Library node addresses]).
  bool replayable(const std::vector<const Tensor*>& tensors);
  std::vector<Tensor> replay(const std::vector<const Tensor*>& tensors);
  void order_after_previous_run();
  void mark_run_done();

  Plan plan_;
  std::vector<Tensor> outputs_;
  std::vector<IntrusivePtr<StorageImpl>> bindings_;  // per tensor argument: its stand-in storage
  std::vector<int64_t> traced_offsets_;  // per tensor argument: its storage offset in bytes, traced
  std::vector<int64_t> shifts_;          // per tensor argument: this run's offset less the traced
  std::vector<StorageImpl*> transient_;  // memory each run takes and releases
  std::unordered_set<const StorageImpl*> planned_;  // storages with an arena slice
  std::vector<const TensorImpl*> captured_impls_;

  InstanceOptions options_;
  Device device_;  // the device every step runs on (CUDA), else cpu
  bool single_device_ = true;
  // Distinct argument storages: the first tensor argument on each, and the
  // byte range of its storage the trace's views reach.
  struct ArgStorage {
    size_t arg = 0;
    size_t lo = 0, hi = 0;
  };
  std::vector<ArgStorage> arg_storages_;
  // Storages that steps adding opaque nodes touch, learned by a capture (Note
  // [Opaque steps]): copied through the graph's buffers.
  std::unordered_set<const StorageImpl*> opaque_touched_;
  std::unordered_set<const StorageImpl*> written_;  // storages some node writes
  // Rule 6 of Note [Pending state across threads]: the tensor arguments and
  // captured storages some node writes, whose readers on other threads run first.
  std::vector<size_t> written_args_;
  std::vector<const StorageImpl*> written_captured_;
  int runs_ = 0;
  // Note [Capture retries]: failed captures after the first run, and the run
  // from which the next may be tried.
  int capture_failures_ = 0;
  int next_capture_run_ = 0;
  std::unique_ptr<GraphState> graph_;
  // CUDA: the stream of the last run and an event after it, so that a run on
  // another stream waits for the arena and graph to be free.
  std::optional<kiln::cuda::Stream> last_stream_;
  std::optional<kiln::cuda::Event> done_;
};

}  // namespace kiln::jit
