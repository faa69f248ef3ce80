#pragma once

// Note [Lazy trace]
// Every op called with the Lazy key active is appended to its thread's
// TraceBuffer as a Node: the op, its normalized argument stack (tensors by
// handle, so views keep their geometry) and the tensors it produces. A
// functional op's outputs get fresh storages with no memory yet; an op that
// writes an argument (add_, copy_, index_copy_, out=) records a new write to
// that argument's storage. Each written storage carries a LazyStorage marker
// (Note [Pending storage]) naming the trace that will compute it, so touching
// its data anywhere runs that trace. A trace runs whole, in record order: a
// node that read an older state of a storage runs before the write that
// replaces it.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/dispatch.h"
#include "kiln/tensor.h"

namespace kiln::jit {

class TraceBuffer;

// Note [Node buffers]
// Recording is malloc-bound when every node allocates its argument stack and
// output list: nodes live until their trace runs, so glibc's small per-thread
// caches run dry within a trace and each allocation takes the slow path. A
// dying node hands its two buffers (emptied, capacity kept) to its thread's
// spares, and the recording kernels take theirs from there (node_stack,
// node_outputs). The impl pools do the same for the output's TensorImpl and
// StorageImpl (Note [Impl pools]). Sanitized builds keep no spares.
struct Node {
  Node() = default;
  Node(const Node&) = default;
  Node(Node&&) = default;
  Node& operator=(const Node&) = default;
  Node& operator=(Node&&) = default;
  ~Node();

  const OperatorEntry* op = nullptr;
  Stack args;                   // normalized arguments; tensors are the caller's handles
  std::vector<Tensor> outputs;  // what the op returns (fresh lazy tensors or written args)
  std::vector<int> written;     // indices into args of arguments the op writes
  Device device;                // where it runs
  uint32_t id = 0;
};

// Empty buffers for a new node, from the thread's spares when it has some.
Stack node_stack();
std::vector<Tensor> node_outputs();

// Marks a storage whose latest contents come from a trace that has not run.
class LazyStorage final : public PendingValue {
 public:
  explicit LazyStorage(IntrusivePtr<TraceBuffer> trace) : trace_(std::move(trace)) {}
  TraceBuffer* trace() const { return trace_.get(); }

 private:
  IntrusivePtr<TraceBuffer> trace_;
};

// Marks a storage whose trace failed: touching it raises the original error
// instead of handing out memory that was never written.
class FailedStorage final : public PendingValue {
 public:
  explicit FailedStorage(std::string message) : message_(std::move(message)) {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// Marks a storage whose memory holds its value but whose reads on the host
// someone watches (jit::compile's input stand-ins, Note [Tracing stand-ins]):
// materializing it calls on_read() and clears the marker; a recorded write
// replaces it like any other.
class ReadWatch : public PendingValue {
 public:
  virtual void on_read(StorageImpl* storage) = 0;
};

// Why a trace runs before its owner asked for a result: what a tracing
// observer reports as a graph break. `storage`: a storage whose value was
// needed (the node that wrote it is looked up); `op`: an op that had to run
// at once; `what`: the rest of the story.
struct FlushCause {
  const char* what = "kiln::sync() or jit::flush()";
  const StorageImpl* storage = nullptr;
  const OperatorEntry* op = nullptr;
};

// Watches a trace that records a compiled function (Note [Tracing stand-ins]).
class TraceObserver {
 public:
  virtual ~TraceObserver() = default;
  // The trace is about to run before tracing ended; `description` says why,
  // naming the op and its position in the trace.
  virtual void on_early_flush(const std::string& description) = 0;
};

class TraceBuffer final : public RefCounted {
 public:
  // Traces flush when they reach this many nodes (not while observed).
  static constexpr size_t kMaxNodes = 4096;

  // The calling thread's trace: the one a TraceScope installed, else its own
  // (created on first use).
  static TraceBuffer& current();

  // Appends a node; may flush first when the trace is full.
  void append(Node&& node);
  // Marks `storage` as written by this trace.
  void mark_written(StorageImpl* storage);
  // Runs every recorded node (after dead-code elimination) and clears the trace.
  void flush(FlushCause cause = {});
  size_t size() const { return nodes_.size(); }
  // What flush() would run, without running it (golden tests of fusion).
  std::string describe_pending();

  // Hands the recorded nodes over without running them (jit::compile builds
  // its plan from them). Their storages keep this trace's marker.
  std::vector<Node> take_nodes();
  // Reports the first flush before take_nodes() to `observer` (null: none),
  // which must outlive its observation.
  void set_observer(TraceObserver* observer) { observer_ = observer; }
  // The marker this trace gives the storages it writes (null before the first).
  const PendingValue* marker() const { return marker_.get(); }
  // Drops the marker's reference to this trace (a trace not owned by a
  // thread, once no storage carries its marker any more).
  void drop_marker() { marker_.reset(); }

 private:
  // Recursive: appending may flush, and running a trace may materialize a
  // storage it wrote. The owning thread re-enters without atomics; other
  // threads (materializing a storage this trace wrote) wait on the mutex.
  class Lock {
   public:
    void lock() {
      const std::thread::id me = std::this_thread::get_id();
      if (owner_.load(std::memory_order_relaxed) == me) {
        ++depth_;
        return;
      }
      mu_.lock();
      owner_.store(me, std::memory_order_relaxed);
      depth_ = 1;
    }
    void unlock() {
      if (--depth_ > 0) return;
      owner_.store(std::thread::id(), std::memory_order_relaxed);
      mu_.unlock();
    }

   private:
    std::mutex mu_;
    std::atomic<std::thread::id> owner_{};
    int depth_ = 0;
  };
  Lock mu_;
  std::vector<Node> nodes_;
  // The marker mark_written() gives storages: one per trace, not one per
  // output. Only the owning thread touches it (mark_written is called on
  // current()); its reference to this trace is dropped when the thread exits.
  IntrusivePtr<LazyStorage> marker_;
  TraceObserver* observer_ = nullptr;
  uint32_t next_id_ = 0;
};

// Makes `trace` the calling thread's current trace for its lifetime.
class TraceScope {
 public:
  explicit TraceScope(TraceBuffer* trace);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  TraceBuffer* saved_;
};

// Materializes `storage` (the runtime hook for data access on a pending storage).
void materialize(StorageImpl* storage);
// The same, saying what needs it when that is not a read of its data.
void materialize(StorageImpl* storage, FlushCause cause);

}  // namespace kiln::jit
