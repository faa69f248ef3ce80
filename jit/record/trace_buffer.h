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

class TraceBuffer final : public RefCounted {
 public:
  // Traces flush when they reach this many nodes.
  static constexpr size_t kMaxNodes = 4096;

  // The calling thread's trace (created on first use).
  static TraceBuffer& current();

  // Appends a node; may flush first when the trace is full.
  void append(Node&& node);
  // Marks `storage` as written by this trace.
  void mark_written(StorageImpl* storage);
  // Runs every recorded node (after dead-code elimination) and clears the trace.
  void flush();
  size_t size() const { return nodes_.size(); }
  // What flush() would run, without running it (golden tests of fusion).
  std::string describe_pending();

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
  uint32_t next_id_ = 0;
};

// Materializes `storage` (the runtime hook for data access on a pending storage).
void materialize(StorageImpl* storage);

}  // namespace kiln::jit
