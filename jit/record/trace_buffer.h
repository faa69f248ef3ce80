#pragma once

// Note [Lazy trace]
// Every op called with the Lazy key active is appended to its thread's
// TraceBuffer as a Node: the op, its normalized argument stack (tensors by
// handle, so views keep their geometry) and the tensors it produces. A
// functional op's outputs get fresh storages with no memory yet; an op that
// writes an argument (add_, copy_, index_copy_, out=) records a new write to
// that argument's storage. Each written storage carries a LazyStorage marker
// (Note [Pending storage]) naming the trace that will compute it, so touching
// its data anywhere runs that trace. A trace runs in record order: a node
// that read an older state of a storage runs before the write that replaces
// it. It runs whole, but for the steps that depend on a failed one (Note
// [Failures in a trace] in jit/plan/pipeline.h).

#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/dispatch.h"
#include "kiln/tensor.h"
#include "runtime/core/composite_errors.h"

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
  ErrorRenames
      renames;  // rename_errors scopes open at the call (Note [Composite ops name themselves])
};

// Empty buffers for a new node, from the thread's spares when it has some.
Stack node_stack();
std::vector<Tensor> node_outputs();

// Note [Pending state across threads]
// Any thread may hold a tensor whose storage another thread's trace will
// compute (Note [Pending storage]). Five rules keep reads, writes and
// recording from other threads correct:
// 1. A marker comes off a storage only once its value exists. A flush runs
//    its plan, then clears the markers of the storages it wrote (or puts the
//    error of a failed step there instead: Note [Failures in a trace]), all
//    under its trace's lock. Recording into a trace takes the same lock. So a
//    thread that finds a storage pending takes that lock, which waits out a
//    flush in progress, and runs only what is still pending for it
//    (materialize).
// 2. While a plan runs on a thread, that thread's data access does not
//    materialize: the storages the steps touch still carry their marker
//    (rule 1), and record order already put each step after what it reads.
// 3. A trace holds no node that reads or writes a storage pending on another
//    trace: append() computes such an argument first, holding no trace lock
//    (the hand-off flushes). So a flush never needs another trace's lock, and
//    threads passing tensors back and forth cannot deadlock.
// 4. A marker is read without a lock (the fast path of data()), taken hold of
//    under the process-wide pending lock, and replaced under it or by a
//    compare-and-swap from a marker the replacing thread keeps alive. A
//    trace's marker lives as long as its trace; dropping it passes
//    StorageImpl::pending_barrier() first.
// 5. On CUDA a trace remembers, per device, the stream its ops were recorded
//    on, and runs on it whichever thread flushes. Recording on a device under
//    another stream first runs what was recorded under the old one, and the
//    new stream waits for it. A thread that materializes work of another
//    stream makes its own current stream wait for that work. (A tensor already
//    computed and handed to another stream is the caller's to order, as in
//    eager mode.)
// 6. A write recorded on one trace to a storage that another thread's trace
//    has recorded a read of, and not run yet, runs that trace first (a
//    thread that records `y = x * 2`, then hands `x` to a thread that
//    records `x.add_(1)`: y is computed from the old x). Each thread's trace
//    keeps a filter of the storages its nodes read (Note [Reads across
//    traces]); a write checks the other threads' filters, and a hit flushes
//    that trace, holding no trace lock, as rule 3 does. A compiled call's
//    run checks them for the arguments and captured tensors its plan
//    writes (flush_readers_of), and kiln::sync() runs every thread's trace.
// Not covered: a host write through data_ptr(), an eager write on another
// thread (inside its EagerGuard), or a write while jit::compile traces,
// to a storage a pending trace reads: write such memory once what reads it
// is computed (kiln::sync(), or a read of it). (The same thread's eager
// writes are ordered: Note [Entering eager mode].)

// Marks a storage whose latest contents come from a trace that has not run.
class LazyStorage final : public PendingValue {
 public:
  explicit LazyStorage(IntrusivePtr<TraceBuffer> trace) : trace_(std::move(trace)) {}
  TraceBuffer* trace() const { return trace_.get(); }

 private:
  IntrusivePtr<TraceBuffer> trace_;
};

// Marks a storage that a failed step (or one that depended on it) should have
// written: touching it raises that step's error (Note [Failures in a trace]).
class FailedStorage final : public PendingValue {
 public:
  explicit FailedStorage(std::exception_ptr error);
  [[noreturn]] void raise() const { std::rethrow_exception(error_); }
  const std::string& message() const { return message_; }

 private:
  std::exception_ptr error_;
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

// True when `op` writes argument `arg` (the tensor `t`) without reading it
// (fill_, zero_, copy_, an out= argument) and `t` covers its whole storage:
// after it, nothing of the storage's earlier contents is left.
bool overwrites_storage(const OperatorEntry& op, size_t arg, const Tensor& t);

// True when `op` can fail on the values of its inputs, which no Meta kernel
// sees: it takes an index tensor (an argument named index or indices) or a
// cache position (Note [Cache positions in range]).
bool checks_values(const OperatorEntry& op);
// The same for a recorded node, which also sees its dtypes: integer
// division and remainder fail on a zero divisor.
bool checks_values(const Node& node);

// True when `op` draws from the random generator (rand, randn, randint,
// and ops named like PyTorch's random ones): Note [Random ops run at the call].
bool draws_random(const FunctionSchema& schema);

// Why a trace runs before its owner asked for a result: what a tracing
// observer reports as a graph break. `storage`: a storage whose value was
// needed (the node that wrote it is looked up); `op`: an op that had to run
// at once; `what`: the rest of the story.
struct FlushCause {
  const char* what = "kiln::sync() or jit::flush()";
  const StorageImpl* storage = nullptr;
  const OperatorEntry* op = nullptr;
  // Work runs outside the trace right after (an op run at once, an
  // EagerGuard): a break even where nothing was recorded yet (Note [Work
  // outside a traced function]).
  bool outside = false;
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
  // Whether a TraceScope installed the calling thread's trace (a traced
  // function's, not the thread's own).
  static bool scoped();
  // Rule 6 for work that runs outside any trace (a compiled call's plan):
  // runs first each other thread's trace that has recorded a read, not yet
  // run, of one of `written`. Holds no trace lock; cheap when no other
  // thread has reads pending.
  static void flush_readers_of(const std::vector<const StorageImpl*>& written);
  // Whether some thread's trace has recorded reads not yet run (a cheap test
  // before flush_readers_of).
  static bool reads_pending();
  // Runs every thread's own trace (kiln::sync()): a failed step's error
  // stays with what it should have written, and one that nothing held with
  // the thread that recorded it.
  static void flush_all_threads();

  // Appends a node and marks what it writes (its fresh outputs: those on no
  // argument's storage; its written arguments) as written by this trace. An
  // argument pending on another trace is computed first (Note [Pending state
  // across threads], rule 3); one that a failed step should have written
  // raises that error, unless the node overwrites it whole. May flush first
  // when the trace is full, or when a CUDA node comes under another stream.
  void append(Node&& node);
  // Runs every recorded node (after dead-code elimination) and clears the
  // trace. A step that fails does not make this throw: its error stays with
  // what it should have written (Note [Failures in a trace]).
  void flush(FlushCause cause = {});
  // Runs the trace if `storage` still carries `found`, this trace's marker
  // (which the caller holds): else it was computed meanwhile.
  void flush_for(StorageImpl* storage, const PendingValue* found, FlushCause cause);
  size_t size();
  // What flush() would run, without running it (golden tests of fusion).
  std::string describe_pending();

  // The first error of a failed op whose results nobody held (Note
  // [Failures in a trace]), taken off the trace; null when none.
  std::exception_ptr take_unclaimed();

  // Hands the recorded nodes over without running them (jit::compile builds
  // its plan from them). Their storages keep this trace's marker.
  std::vector<Node> take_nodes();
  // Reports the first flush before take_nodes() to `observer` (null: none),
  // which must outlive its observation.
  void set_observer(TraceObserver* observer) { observer_ = observer; }
  // Whether a compiled function's trace is being recorded here.
  bool observed() const { return observer_ != nullptr; }
  // The marker this trace gives the storages it writes (null before the first).
  const PendingValue* marker() const { return marker_.get(); }
  // Drops the marker's reference to this trace (a trace not owned by a
  // thread, once no storage carries its marker any more).
  void drop_marker();

 private:
  // Recursive: appending may flush, and running a trace may record and run a
  // one-node trace on the same thread (Note [Eager CUDA ops]). The owning
  // thread re-enters without atomics. The outermost lock is one word (0 free,
  // 1 held, 2 held with waiters): uncontended, as nearly every append is, it
  // costs one compare-and-swap and one exchange, against about 55
  // instructions for a pthread mutex; other threads sleep in an atomic wait
  // (a futex), as a flush may hold the lock for milliseconds.
  class Lock {
   public:
    void lock() {
      const std::thread::id me = std::this_thread::get_id();
      if (owner_.load(std::memory_order_relaxed) == me) {
        ++depth_;
        return;
      }
      int free = 0;
      if (!state_.compare_exchange_strong(free, 1, std::memory_order_acquire)) lock_contended();
      owner_.store(me, std::memory_order_relaxed);
      depth_ = 1;
    }
    void unlock() {
      if (--depth_ > 0) return;
      owner_.store(std::thread::id(), std::memory_order_relaxed);
      if (state_.exchange(0, std::memory_order_release) == 2) state_.notify_one();
    }

   private:
    void lock_contended();

    std::atomic<int> state_{0};
    std::atomic<std::thread::id> owner_{};
    int depth_ = 0;
  };

  // Whether `node`'s arguments may go in as they are (rule 3); else the
  // storage to compute first (`*wait`). Throws the error of a failed one.
  bool arguments_ready(const Node& node, StorageImpl** wait);
  // Note [Reads across traces]
  // Rule 6 needs to know, at a write, which other traces read the storage
  // and have not run. Listing readers on each storage would cost every
  // recorded op a write to shared memory (weights are read by every thread's
  // trace). Instead each thread's own trace keeps a Bloom filter of the
  // storages its pending nodes read: 8192 bits, one per hash of the
  // storage's address, set by the owner while recording (a load and, the
  // first time, a store per tensor argument) and cleared once the trace has
  // run (release stores, so a writer that then finds the bit clear writes
  // after those reads). A write recorded on another trace checks the filters
  // of the registered traces (only when some trace besides its own has
  // reads): a false hit, about 4% with 300 storages read, flushes a trace
  // early, never wrongly.
  static constexpr int kReadWords = 128;
  // A storage's bit: its address past the low bits every StorageImpl shares,
  // folded onto 13 bits (8192 = 64 * kReadWords).
  static uint32_t read_bit(const StorageImpl* s) {
    const auto a = reinterpret_cast<uintptr_t>(s);
    return static_cast<uint32_t>(((a >> 6) ^ (a >> 19)) & 8191);
  }
  // Sets `s`'s bit (owner only, under mu_; others read the filter).
  void note_read(const StorageImpl* s) {
    const uint32_t bit = read_bit(s);
    std::atomic<uint64_t>& word = reads_[bit >> 6];
    const uint64_t mask = uint64_t{1} << (bit & 63);
    const uint64_t w = word.load(std::memory_order_relaxed);
    if (!(w & mask)) word.store(w | mask, std::memory_order_relaxed);
  }
  void clear_reads();
  bool may_read(uint32_t bit) const;
  // The first other registered trace that may read what `node` writes.
  IntrusivePtr<TraceBuffer> reader_of_written(const Node& node);
  friend struct TraceRegistry;
  void mark(const Node& node);
  void flush_locked(FlushCause cause);
  // Tells the observer (set) why the trace runs early, and forgets it.
  void report_early_flush(const FlushCause& cause);
  void note_stream(const Node& node);

  Lock mu_;
  std::vector<Node> nodes_;
  // The marker this trace gives the storages it writes: one per trace, not
  // one per output, read and replaced under mu_. Its reference to this trace
  // is dropped when the owning thread exits (drop_marker).
  IntrusivePtr<LazyStorage> marker_;
  TraceObserver* observer_ = nullptr;
  uint32_t next_id_ = 0;
  std::vector<std::exception_ptr> unclaimed_;
  // CUDA: per device, the stream the recorded nodes run on (rule 5).
  std::vector<std::pair<Device, void*>> streams_;
  // Rule 6: the storages the pending nodes read (owner-written, read by
  // others), whether any bit is set, and whether a thread owns this trace
  // (only those are registered and keep a filter).
  std::array<std::atomic<uint64_t>, kReadWords> reads_{};
  bool reading_ = false;
  bool registered_ = false;
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

// Materializes `storage` (the runtime hook for data access on a pending
// storage), then raises the unclaimed error of this thread's trace, if any.
void materialize(StorageImpl* storage);
// The same, saying what needs it when that is not a read of its data.
void materialize(StorageImpl* storage, FlushCause cause);
// Computes `storage` for an op being recorded on another trace (Note
// [Pending state across threads], rule 3); raises only its own error.
void materialize_for_recording(StorageImpl* storage);

}  // namespace kiln::jit
