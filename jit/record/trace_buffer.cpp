#include "jit/record/trace_buffer.h"

#include "jit/plan/pipeline.h"
#include "kiln/logging.h"

namespace kiln::jit {

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kSpareDepth = 0;
#else
constexpr size_t kSpareDepth = 2048;  // as many as the impl pools keep (Note [Impl pools])
#endif
constexpr size_t kSpareCapacity = 8;  // larger buffers go back to the heap

// The thread's spare node buffers (Note [Node buffers]).
struct Spares {
  std::vector<Stack> stacks;
  std::vector<std::vector<Tensor>> outputs;
  static inline thread_local bool gone = false;
  ~Spares() { gone = true; }
  static Spares* get() {
    static thread_local Spares spares;
    return gone ? nullptr : &spares;
  }
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

namespace {
// The trace a TraceScope installed on this thread (null: the thread's own).
thread_local TraceBuffer* t_scoped = nullptr;
}  // namespace

TraceScope::TraceScope(TraceBuffer* trace) : saved_(t_scoped) {
  t_scoped = trace;
}
TraceScope::~TraceScope() {
  t_scoped = saved_;
}

TraceBuffer& TraceBuffer::current() {
  if (t_scoped) return *t_scoped;
  // Held by the thread and by every LazyStorage it marked, so a trace that
  // another thread needs stays alive after its thread exits. Nodes hold their
  // outputs, whose markers hold the trace: the thread flushes on exit to break
  // that cycle (running what someone still references, dropping the rest).
  struct Holder {
    IntrusivePtr<TraceBuffer> trace = IntrusivePtr<TraceBuffer>::make();
    ~Holder() {
      try {
        trace->flush();
      } catch (const Error& e) {
        KILN_LOG(Perf, "a trace left by an exiting thread failed: ", e.what());
      }
      trace->marker_.reset();  // the marker's reference to the trace
    }
  };
  static thread_local Holder holder;
  return *holder.trace;
}

void TraceBuffer::append(Node&& node) {
  std::lock_guard<Lock> lock(mu_);
  node.id = next_id_++;
  nodes_.push_back(std::move(node));
  if (nodes_.size() >= kMaxNodes && !observer_) flush({"the trace is full"});
}

void TraceBuffer::mark_written(StorageImpl* storage) {
  const auto& p = storage->pending();
  auto* lazy = dynamic_cast<LazyStorage*>(p.get());
  if (lazy && lazy->trace() == this) return;
  if (p && !dynamic_cast<ReadWatch*>(p.get())) {
    // Written by another thread's trace (run it first so writes stay ordered),
    // or left by a failed trace (raise its error).
    materialize(storage);
  }
  if (!marker_) marker_ = IntrusivePtr<LazyStorage>::make(IntrusivePtr<TraceBuffer>::retain(this));
  storage->set_pending(marker_);
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

void TraceBuffer::flush(FlushCause cause) {
  std::lock_guard<Lock> lock(mu_);
  if (nodes_.empty()) return;
  if (observer_) {
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
  std::vector<Node> nodes;
  nodes.swap(nodes_);
  // The next trace is likely as long as this one: spare it the regrowth.
  nodes_.reserve(nodes.capacity());
  run_trace(std::move(nodes));
}

std::vector<Node> TraceBuffer::take_nodes() {
  std::lock_guard<Lock> lock(mu_);
  observer_ = nullptr;
  std::vector<Node> nodes;
  nodes.swap(nodes_);
  return nodes;
}

std::string TraceBuffer::describe_pending() {
  std::lock_guard<Lock> lock(mu_);
  return describe_plan(nodes_);
}

void materialize(StorageImpl* storage) {
  materialize(storage, {"item(), data_ptr(), printing or a copy to the host"});
}

void materialize(StorageImpl* storage, FlushCause cause) {
  const auto& p = storage->pending();
  if (!p) return;
  if (auto* watch = dynamic_cast<ReadWatch*>(p.get())) {
    IntrusivePtr<PendingValue> keep = p;  // clearing drops the storage's reference
    storage->set_pending(nullptr);
    watch->on_read(storage);
    return;
  }
  if (auto* failed = dynamic_cast<FailedStorage*>(p.get())) {
    KILN_FAIL("[lazy] this tensor was never computed: its trace failed with: ", failed->message());
  }
  // Keep the trace alive: flushing clears the marker that owns a reference to it.
  IntrusivePtr<TraceBuffer> trace =
      IntrusivePtr<TraceBuffer>::retain(static_cast<LazyStorage*>(p.get())->trace());
  cause.storage = storage;
  trace->flush(cause);
}

}  // namespace kiln::jit
