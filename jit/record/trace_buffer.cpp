#include "jit/record/trace_buffer.h"

#include <memory>
#include <string>
#include <string_view>

#include "jit/plan/pipeline.h"
#include "kiln/cuda.h"
#include "kiln/logging.h"
#include "runtime/core/thread_cache.h"

namespace kiln::jit {

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kSpareDepth = 0;
#else
constexpr size_t kSpareDepth = 2048;  // as many as the impl pools keep (Note [Impl pools])
#endif
constexpr size_t kSpareCapacity = 8;  // larger buffers go back to the heap

// The thread's spare node buffers (Note [Node buffers]); nodes that die after
// them at thread exit free their buffers (Note [Thread caches at thread exit]).
struct Spares {
  std::vector<Stack> stacks;
  std::vector<std::vector<Tensor>> outputs;
  static Spares* get() { return ThreadCache<Spares>::get(); }
};

template <class V>
void keep(std::vector<V>& spares, V& buffer) {
  if (buffer.capacity() == 0 || buffer.capacity() > kSpareCapacity) return;
  // Clearing may destroy the last handle of a trace and with it other nodes,
  // which land here too: finish that before touching the spares.
  buffer.clear();
  if (spares.size() < kSpareDepth) spares.push_back(std::move(buffer));
}

template <class V>
V take(std::vector<V>& spares) {
  if (!spares.empty()) {
    V v = std::move(spares.back());
    spares.pop_back();
    return v;
  }
  V v;
  v.reserve(4);
  return v;
}

}  // namespace

Node::~Node() {
  if constexpr (kSpareDepth > 0) {
    if (args.capacity() == 0 && outputs.capacity() == 0) return;  // moved from
    if (Spares* s = Spares::get()) {
      keep(s->stacks, args);
      keep(s->outputs, outputs);
    }
  }
}

Stack node_stack() {
  if (Spares* s = Spares::get()) return take(s->stacks);
  return {};
}

std::vector<Tensor> node_outputs() {
  if (Spares* s = Spares::get()) return take(s->outputs);
  return {};
}

FailedStorage::FailedStorage(std::exception_ptr error) : error_(std::move(error)) {
  try {
    std::rethrow_exception(error_);
  } catch (const std::exception& e) {
    message_ = e.what();
  } catch (...) {
    message_ = "an exception that is not a std::exception";
  }
}

bool overwrites_storage(const OperatorEntry& op, size_t arg, const Tensor& t) {
  const FunctionSchema& schema = op.schema();
  if (arg >= schema.arguments.size() || !schema.arguments[arg].is_write) return false;
  bool write_only = schema.arguments[arg].name == "out";
  if (!write_only && arg == 0 && schema.ns == "kiln") {
    write_only = schema.name == "fill_" || schema.name == "zero_" || schema.name == "copy_";
  }
  if (!write_only || !t.defined() || !t.impl()->has_storage()) return false;
  return t.is_contiguous() && t.storage_offset() == 0 &&
         static_cast<size_t>(t.numel()) * t.element_size() == t.impl()->storage()->nbytes();
}

bool checks_values(const OperatorEntry& op) {
  for (const Argument& a : op.schema().arguments) {
    if ((a.type == ArgType::Tensor || a.type == ArgType::TensorList) &&
        (a.name == "index" || a.name == "indices" || a.name == "cache_position")) {
      return true;
    }
  }
  return false;
}

bool checks_values(const Node& node) {
  if (checks_values(*node.op)) return true;
  // An integer division or remainder fails on a zero divisor (Note [CUDA
  // integer division by zero]); a float one cannot fail.
  std::string_view n = node.op->schema().name;
  if (!n.empty() && n.back() == '_') n.remove_suffix(1);
  if (n != "div" && n != "floor_divide" && n != "remainder" && n != "fmod") return false;
  return !node.outputs.empty() && node.outputs[0].defined() &&
         is_integral(node.outputs[0].dtype(), false);
}

bool draws_random(const FunctionSchema& schema) {
  const std::string& n = schema.name;
  for (std::string_view prefix : {"rand", "bernoulli", "dropout", "native_dropout", "normal",
                                  "uniform", "multinomial", "exponential", "poisson"}) {
    if (n.compare(0, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

// Rule 6's registry: every thread-owned trace (Note [Reads across traces]),
// and how many of them have reads recorded.
struct TraceRegistry {
  std::mutex mu;
  std::vector<IntrusivePtr<TraceBuffer>> traces;
  std::atomic<int> reading{0};

  static TraceRegistry& get() {
    static auto* r = new TraceRegistry();  // leaked: threads exit during static teardown
    return *r;
  }
  IntrusivePtr<TraceBuffer> add(IntrusivePtr<TraceBuffer> t) {
    std::lock_guard<std::mutex> lock(mu);
    t->registered_ = true;
    traces.push_back(t);
    return t;
  }
  void remove(const TraceBuffer* t) {
    IntrusivePtr<TraceBuffer> gone;  // released after the lock
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < traces.size(); ++i) {
      if (traces[i].get() != t) continue;
      std::swap(traces[i], traces.back());
      gone = std::move(traces.back());
      traces.pop_back();
      return;
    }
  }
};

namespace {
// The trace a TraceScope installed on this thread (null: the thread's own).
thread_local TraceBuffer* t_scoped = nullptr;

// Makes each recorded CUDA stream current for a flush, and the flushing
// thread's own streams wait for the work (Note [Pending state across
// threads], rule 5).
class StreamScope {
 public:
  explicit StreamScope(const std::vector<std::pair<Device, void*>>& streams) {
    for (const auto& [device, handle] : streams) {
      const cuda::Stream recorded = cuda::Stream::from_external(handle, device);
      const cuda::Stream mine = cuda::Stream::current(device);
      if (mine != recorded) waits_.emplace_back(mine, recorded);
      guards_.push_back(std::make_unique<cuda::StreamGuard>(recorded));
    }
  }
  // The flushing thread's streams wait for the work just queued.
  void done() {
    for (const auto& [mine, recorded] : waits_) {
      cuda::Event e;
      e.record(recorded);
      mine.wait(e);
    }
  }

 private:
  std::vector<std::pair<cuda::Stream, cuda::Stream>> waits_;
  std::vector<std::unique_ptr<cuda::StreamGuard>> guards_;
};

}  // namespace

TraceScope::TraceScope(TraceBuffer* trace) : saved_(t_scoped) {
  t_scoped = trace;
}
TraceScope::~TraceScope() {
  t_scoped = saved_;
}

namespace {
// Set once this thread's own trace is gone (its Holder destroyed at thread
// exit); a plain bool, readable until the thread's storage goes.
thread_local bool t_trace_gone = false;
}  // namespace

bool TraceBuffer::scoped() {
  return t_scoped != nullptr;
}

TraceBuffer& TraceBuffer::current() {
  if (t_scoped) return *t_scoped;
  if (t_trace_gone) {
    // Note [Ops after the thread's trace is gone]
    // glibc destroys the main thread's thread_locals before it runs atexit
    // handlers and the destructors of globals, and a thread's other
    // thread_local destructors may run after the Holder's: ops there still
    // reach this thread. The Holder turned recording off for the thread, so
    // they run eagerly; what still asks for the trace (a flush, a sync) gets
    // an empty one of its own, kept for the rest of the thread (never freed:
    // the thread's storage is going).
    static thread_local IntrusivePtr<TraceBuffer>* after_exit = nullptr;
    if (after_exit == nullptr) {
      after_exit = new IntrusivePtr<TraceBuffer>(IntrusivePtr<TraceBuffer>::make());
    }
    return **after_exit;
  }
  // Held by the thread and by every LazyStorage it marked, so a trace that
  // another thread needs stays alive after its thread exits. Nodes hold their
  // outputs, whose markers hold the trace: the thread flushes on exit to break
  // that cycle (running what someone still references, dropping the rest).
  // That flush may find the thread's other thread_locals destroyed already:
  // Note [Thread caches at thread exit].
  struct Holder {
    IntrusivePtr<TraceBuffer> trace = TraceRegistry::get().add(IntrusivePtr<TraceBuffer>::make());
    ~Holder() {
      try {
        trace->flush();
      } catch (const std::exception& e) {
        KILN_LOG(Perf, "a trace left by an exiting thread failed: ", e.what());
      }
      TraceRegistry::get().remove(trace.get());
      while (std::exception_ptr unclaimed = trace->take_unclaimed()) {
        try {
          std::rethrow_exception(unclaimed);
        } catch (const std::exception& e) {
          KILN_LOG(Perf, "an exiting thread's trace had a failure nobody read: ", e.what());
        }
      }
      trace->drop_marker();
      // Note [Ops after the thread's trace is gone]
      t_trace_gone = true;
      detail::local_keys().excluded |= key_bit(DispatchKey::Lazy);
    }
  };
  static thread_local Holder holder;
  return *holder.trace;
}

namespace {

StorageImpl* storage_of(const Tensor& t) {
  const TensorImpl* impl = t.impl();
  return impl ? impl->storage().get() : nullptr;
}

bool on_argument(const Node& node, const StorageImpl* s) {
  for (const IValue& v : node.args) {
    if (v.is_tensor()) {
      if (storage_of(v.to_tensor()) == s) return true;
    } else if (v.is_tensor_list()) {
      for (const Tensor& a : v.to_tensor_list()) {
        if (storage_of(a) == s) return true;
      }
    }
  }
  return false;
}

// Rule 3 for an argument that carries a marker other than this trace's (out
// of line: the common case then saves no registers).
[[gnu::noinline]] bool arguments_ready_slow(const Node& node, const PendingValue* mine,
                                            StorageImpl** wait);

}  // namespace

[[gnu::always_inline]] inline bool TraceBuffer::arguments_ready(const Node& node,
                                                                StorageImpl** wait) {
  // The common case, kept cheap (it runs for every recorded op): no tensor
  // argument carries a marker but this trace's. The same pass notes what the
  // node reads (rule 6; harmless should the node not go in after all).
  const PendingValue* mine = marker_.get();
  bool plain = true;
  for (const IValue& v : node.args) {
    if (v.is_tensor()) {
      const StorageImpl* s = storage_of(v.to_tensor());
      if (!s) continue;
      const PendingValue* p = s->pending_marker();
      // Only a storage no trace writes needs its read noted: a write to one
      // pending here goes through rule 3 on any other trace.
      if (p == nullptr) {
        note_read(s);
      } else {
        plain &= p == mine;
      }
    } else if (v.is_tensor_list()) {
      for (const Tensor& t : v.to_tensor_list()) {
        if (const StorageImpl* s = storage_of(t)) note_read(s);
      }
      plain = false;
    }
  }
  return plain || arguments_ready_slow(node, mine, wait);
}

namespace {

bool arguments_ready_slow(const Node& node, const PendingValue* mine, StorageImpl** wait) {
  auto ready = [&](const Tensor& t, size_t arg, bool written) {
    StorageImpl* s = storage_of(t);
    if (!s) return true;
    const PendingValue* p = s->pending_marker();
    if (p == nullptr || p == mine) return true;
    IntrusivePtr<PendingValue> held = s->pending();
    if (!held || held.get() == mine) return true;
    // A stand-in read by a kernel, not on the host; a write replaces the watch.
    if (dynamic_cast<ReadWatch*>(held.get())) return true;
    if (auto* failed = dynamic_cast<FailedStorage*>(held.get())) {
      if (written && overwrites_storage(*node.op, arg, t)) return true;
      failed->raise();
    }
    // Pending on another trace (rule 3). Inside a running plan (a one-node
    // trace of Note [Eager CUDA ops]) the memory is read as it is (rule 2).
    if (plan_running()) return true;
    *wait = s;
    return false;
  };
  for (size_t a = 0; a < node.args.size(); ++a) {
    const IValue& v = node.args[a];
    if (v.is_tensor()) {
      bool written = false;
      for (int w : node.written) written |= static_cast<size_t>(w) == a;
      if (!ready(v.to_tensor(), a, written)) return false;
    } else if (v.is_tensor_list()) {
      for (const Tensor& t : v.to_tensor_list()) {
        if (!ready(t, a, false)) return false;
      }
    }
  }
  return true;
}

}  // namespace

void TraceBuffer::mark(const Node& node) {
  const PendingValue* mine = marker_.get();
  for (int w : node.written) {
    if (!node.args[w].is_tensor()) continue;
    StorageImpl* s = storage_of(node.args[w].to_tensor());
    if (!s || s->pending_marker() == mine) continue;
    // A watch, a failure being overwritten, or another trace's write that a
    // racing thread recorded meanwhile: replaced under the pending lock.
    if (!s->replace_pending(nullptr, marker_)) s->set_pending(marker_);
  }
  for (const Tensor& t : node.outputs) {
    StorageImpl* s = storage_of(t);
    if (!s) continue;
    const PendingValue* p = s->pending_marker();
    if (p == mine) continue;
    // An output on an argument's storage is that argument: written (marked
    // above) or handed back as it is (not written). A fresh output (no
    // memory, no marker: the common case) is none, and no other thread has
    // seen it yet.
    const bool fresh = p == nullptr && s->data() == nullptr;
    if (!fresh && on_argument(node, s)) continue;
    if (!s->replace_pending(nullptr, marker_)) s->set_pending(marker_);
  }
}

void TraceBuffer::note_stream(const Node& node) {
  // Without a GPU CUDA nodes are recorded (NVRTC tests) but never run: no stream.
  if (!node.device.is_cuda() || !cuda::is_available()) return;
  void* now = cuda::Stream::current(node.device).handle();
  for (auto& [device, handle] : streams_) {
    if (device != node.device) continue;
    if (handle == now) return;
    // Rule 5: what was recorded under the old stream runs there first, and
    // the new one (current here) waits for it (StreamScope::done).
    flush_locked({"a CUDA op was recorded under another stream"});
    break;
  }
  streams_.emplace_back(node.device, now);
}

void TraceBuffer::Lock::lock_contended() {
  // Mark the lock contended (2) and sleep until it is given back; whoever
  // takes it from here takes it as contended, so its unlock wakes the next.
  while (state_.exchange(2, std::memory_order_acquire) != 0) {
    state_.wait(2, std::memory_order_relaxed);
  }
}

void TraceBuffer::clear_reads() {
  if (!reading_) return;
  for (std::atomic<uint64_t>& w : reads_) {
    if (w.load(std::memory_order_relaxed) != 0) w.store(0, std::memory_order_release);
  }
  reading_ = false;
  TraceRegistry::get().reading.fetch_sub(1, std::memory_order_acq_rel);
}

bool TraceBuffer::may_read(uint32_t bit) const {
  return (reads_[bit >> 6].load(std::memory_order_acquire) >> (bit & 63)) & 1;
}

IntrusivePtr<TraceBuffer> TraceBuffer::reader_of_written(const Node& node) {
  // Inside a running plan (a one-node trace of Note [Eager CUDA ops]) record
  // order already placed this write (rule 2), as rule 3 does.
  if (plan_running()) return {};
  TraceRegistry& r = TraceRegistry::get();
  // Only this trace's own reads (or none) recorded anywhere: nothing to check.
  if (r.reading.load(std::memory_order_acquire) <= (reading_ ? 1 : 0)) return {};
  std::lock_guard<std::mutex> lock(r.mu);
  for (int w : node.written) {
    if (!node.args[w].is_tensor()) continue;
    const StorageImpl* s = storage_of(node.args[w].to_tensor());
    if (!s) continue;
    const uint32_t bit = read_bit(s);
    for (const IntrusivePtr<TraceBuffer>& t : r.traces) {
      if (t.get() != this && t->may_read(bit)) return t;
    }
  }
  return {};
}

void TraceBuffer::flush_readers_of(const std::vector<const StorageImpl*>& written) {
  TraceRegistry& r = TraceRegistry::get();
  if (written.empty() || plan_running()) return;
  const TraceBuffer* own = &current();
  for (;;) {
    if (r.reading.load(std::memory_order_acquire) == 0) return;
    IntrusivePtr<TraceBuffer> reader;
    {
      std::lock_guard<std::mutex> lock(r.mu);
      for (const StorageImpl* s : written) {
        const uint32_t bit = read_bit(s);
        for (const IntrusivePtr<TraceBuffer>& t : r.traces) {
          if (t.get() != own && t->may_read(bit)) reader = t;
        }
        if (reader) break;
      }
    }
    if (!reader) return;
    reader->flush({"a compiled call writes a tensor it reads"});
  }
}

bool TraceBuffer::reads_pending() {
  return TraceRegistry::get().reading.load(std::memory_order_acquire) > 0;
}

void TraceBuffer::flush_all_threads() {
  std::vector<IntrusivePtr<TraceBuffer>> traces;
  {
    TraceRegistry& r = TraceRegistry::get();
    std::lock_guard<std::mutex> lock(r.mu);
    traces = r.traces;
  }
  const TraceBuffer* own = &current();
  for (const IntrusivePtr<TraceBuffer>& t : traces) {
    if (t.get() != own) t->flush({"kiln::sync() on another thread"});
  }
}

void TraceBuffer::append(Node&& node) {
  for (;;) {
    StorageImpl* wait = nullptr;
    IntrusivePtr<TraceBuffer> reader;
    {
      std::lock_guard<Lock> lock(mu_);
      if (arguments_ready(node, &wait)) {
        // Rule 6: a write waits for another thread's recorded reads of it.
        if (!node.written.empty()) reader = reader_of_written(node);
        if (!reader) {
          if (!marker_) {
            marker_ = IntrusivePtr<LazyStorage>::make(IntrusivePtr<TraceBuffer>::retain(this));
          }
          if (node.device.is_cuda()) note_stream(node);
          mark(node);
          if (!reading_ && registered_) {
            reading_ = true;
            TraceRegistry::get().reading.fetch_add(1, std::memory_order_acq_rel);
          }
          node.id = next_id_++;
          if (detail::innermost_rename()) node.renames = open_renames();
          nodes_.push_back(std::move(node));
          if (nodes_.size() >= kMaxNodes && !observer_) flush_locked({"the trace is full"});
          return;
        }
      }
    }
    // Rules 3 and 6: the other trace runs first, with no trace lock held here.
    if (reader) {
      reader->flush({"another thread recorded a write to a tensor it reads"});
    } else {
      materialize_for_recording(wait);
    }
  }
}

namespace {

// "op 12 'sum.dim_IntList'": the last node among `nodes` that writes `storage`.
std::string writer_of(const std::vector<Node>& nodes, const StorageImpl* storage) {
  for (size_t i = nodes.size(); i-- > 0;) {
    const Node& n = nodes[i];
    bool writes = false;
    for (const Tensor& t : n.outputs) writes |= t.defined() && t.impl()->storage().get() == storage;
    for (int w : n.written) {
      writes |= n.args[w].is_tensor() && n.args[w].to_tensor().impl()->storage().get() == storage;
    }
    if (writes) return "op " + std::to_string(i) + " '" + n.op->name() + "'";
  }
  return "a tensor it wrote";
}

}  // namespace

// Note [Work outside a traced function]
// While jit::compile traces, an op that has to run at once (its written
// argument shares memory with another of its tensors, it resizes an out=
// argument, it has no Meta kernel, it touches memory wrapped twice) or an
// EagerGuard's body runs once, now, and is not recorded: replays would skip
// it. The flush before it reports the graph break; it used to do so only
// when something was recorded already, so such work as the function's first
// op (a write into a captured tensor) ran at the first call alone and the
// later calls returned without it.
void TraceBuffer::flush(FlushCause cause) {
  std::lock_guard<Lock> lock(mu_);
  if (!nodes_.empty()) {
    flush_locked(cause);
  } else if (observer_ && cause.outside) {
    report_early_flush(cause);
  }
}

void TraceBuffer::flush_for(StorageImpl* storage, const PendingValue* found, FlushCause cause) {
  std::lock_guard<Lock> lock(mu_);
  // Computed (or written again) while this thread waited for the lock.
  if (storage->pending_marker() != found) return;
  KILN_INTERNAL_ASSERT(found == marker_.get() && !nodes_.empty(),
                       "a storage pending on a trace with nothing recorded to compute it");
  flush_locked(cause);
}

void TraceBuffer::report_early_flush(const FlushCause& cause) {
  TraceObserver* observer = observer_;
  observer_ = nullptr;  // reported once; from here on an ordinary trace
  std::string why = cause.what;
  if (cause.storage) {
    why = "the value of " + writer_of(nodes_, cause.storage) + " was needed on the host (" +
          cause.what + ")";
  } else if (cause.op) {
    why = "op " + std::to_string(nodes_.size()) + " '" + cause.op->name() + "' " + cause.what;
  }
  observer->on_early_flush(why + ", after " + std::to_string(nodes_.size()) + " recorded ops");
}

void TraceBuffer::flush_locked(FlushCause cause) {
  if (observer_) report_early_flush(cause);
  std::vector<Node> nodes;
  nodes.swap(nodes_);
  // The next trace is likely as long as this one: spare it the regrowth.
  nodes_.reserve(nodes.capacity());
  std::vector<std::pair<Device, void*>> streams;
  streams.swap(streams_);
  std::vector<std::exception_ptr> unclaimed;
  if (streams.empty()) {
    unclaimed = run_trace(std::move(nodes), marker_.get());
  } else {
    StreamScope scope(streams);
    unclaimed = run_trace(std::move(nodes), marker_.get());
    scope.done();
  }
  clear_reads();                        // after the reads ran (rule 6)
  constexpr size_t kMaxUnclaimed = 16;  // the first ones say enough
  for (std::exception_ptr& e : unclaimed) {
    if (unclaimed_.size() < kMaxUnclaimed) unclaimed_.push_back(std::move(e));
  }
}

size_t TraceBuffer::size() {
  std::lock_guard<Lock> lock(mu_);
  return nodes_.size();
}

std::exception_ptr TraceBuffer::take_unclaimed() {
  std::lock_guard<Lock> lock(mu_);
  if (unclaimed_.empty()) return nullptr;
  std::exception_ptr e = std::move(unclaimed_.front());
  unclaimed_.erase(unclaimed_.begin());
  return e;
}

std::vector<Node> TraceBuffer::take_nodes() {
  std::lock_guard<Lock> lock(mu_);
  observer_ = nullptr;
  streams_.clear();
  std::vector<Node> nodes;
  nodes.swap(nodes_);
  clear_reads();  // the nodes are the caller's now
  return nodes;
}

std::string TraceBuffer::describe_pending() {
  std::lock_guard<Lock> lock(mu_);
  return describe_plan(nodes_);
}

void TraceBuffer::drop_marker() {
  // Rule 4: a thread that read the marker off a storage takes hold of it first.
  StorageImpl::pending_barrier();
  std::lock_guard<Lock> lock(mu_);
  marker_.reset();
}

namespace {

// Runs what `storage` is waiting for; raises the error it carries.
void compute(StorageImpl* storage, FlushCause cause) {
  for (;;) {
    IntrusivePtr<PendingValue> p = storage->pending();
    if (!p) return;
    if (auto* watch = dynamic_cast<ReadWatch*>(p.get())) {
      if (!storage->replace_pending(p.get(), nullptr)) continue;  // written meanwhile
      StorageImpl::pending_barrier();  // rule 4: `p` may die with this scope
      watch->on_read(storage);
      return;
    }
    if (auto* failed = dynamic_cast<FailedStorage*>(p.get())) failed->raise();
    // `p` keeps the trace alive while it runs: running it clears the marker.
    TraceBuffer* trace = static_cast<LazyStorage*>(p.get())->trace();
    cause.storage = storage;
    trace->flush_for(storage, p.get(), cause);
  }
}

}  // namespace

void materialize_for_recording(StorageImpl* storage) {
  compute(storage, {"an op on another thread read or wrote it"});
}

void materialize(StorageImpl* storage) {
  materialize(storage, {"item(), data_ptr(), printing or a copy to the host"});
}

void materialize(StorageImpl* storage, FlushCause cause) {
  if (plan_running()) {
    if (const PendingValue* running = running_marker()) {
      // Rule 2: the running flush computes it in record order, or it is
      // another trace's later write (memory read as it is); only a failure
      // stops the step.
      if (storage->pending_marker() == running) return;
      IntrusivePtr<PendingValue> p = storage->pending();
      if (auto* failed = dynamic_cast<FailedStorage*>(p.get())) failed->raise();
      return;
    }
    // A compiled instance's plan (no trace lock held): a captured tensor that
    // some trace still has to write is computed first.
    compute(storage, cause);
    return;
  }
  compute(storage, cause);
  if (std::exception_ptr e = TraceBuffer::current().take_unclaimed()) std::rethrow_exception(e);
}

}  // namespace kiln::jit
