#include "jit/trace_buffer.h"

#include "jit/pipeline.h"
#include "kiln/logging.h"

namespace kiln::jit {

TraceBuffer& TraceBuffer::current() {
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

void TraceBuffer::append(Node node) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  node.id = next_id_++;
  nodes_.push_back(std::move(node));
  if (nodes_.size() >= kMaxNodes) flush();
}

void TraceBuffer::mark_written(StorageImpl* storage) {
  const auto& p = storage->pending();
  auto* lazy = dynamic_cast<LazyStorage*>(p.get());
  if (lazy && lazy->trace() == this) return;
  if (p) {
    // Written by another thread's trace (run it first so writes stay ordered),
    // or left by a failed trace (raise its error).
    materialize(storage);
  }
  if (!marker_) marker_ = IntrusivePtr<LazyStorage>::make(IntrusivePtr<TraceBuffer>::retain(this));
  storage->set_pending(marker_);
}

void TraceBuffer::flush() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (nodes_.empty()) return;
  std::vector<Node> nodes;
  nodes.swap(nodes_);
  run_trace(std::move(nodes));
}

std::string TraceBuffer::describe_pending() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return describe_plan(nodes_);
}

void materialize(StorageImpl* storage) {
  const auto& p = storage->pending();
  if (!p) return;
  if (auto* failed = dynamic_cast<FailedStorage*>(p.get())) {
    KILN_FAIL("[lazy] this tensor was never computed: its trace failed with: ", failed->message());
  }
  // Keep the trace alive: flushing clears the marker that owns a reference to it.
  IntrusivePtr<TraceBuffer> trace =
      IntrusivePtr<TraceBuffer>::retain(static_cast<LazyStorage*>(p.get())->trace());
  trace->flush();
}

}  // namespace kiln::jit
