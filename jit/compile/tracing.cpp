#include "jit/compile/tracing.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <unordered_map>

#include "jit/plan/pipeline.h"
#include "kiln/logging.h"
#include "runtime/core/hooks.h"

// GCC 12 warns falsely on std::string concatenation at -O3.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit {
namespace {

thread_local int t_tracing = 0;

// The session's observer and the stand-ins' read watch.
class Session final : public TraceObserver {
 public:
  void on_early_flush(const std::string& description) override { broke(description); }
  void broke(const std::string& why) {
    if (broken_) return;
    broken_ = true;
    reason_ = why;
  }
  bool broken() const { return broken_; }
  const std::string& reason() const { return reason_; }

  // Tensor arguments (guard order) on each stand-in storage, and those a
  // view was made of at an explicit storage offset.
  std::unordered_map<const StorageImpl*, std::vector<size_t>> inputs_on;
  std::vector<bool> fixed_offsets;
  std::unordered_map<const StorageImpl*, int32_t> held_refs;
  // Traced::view_bases.
  std::unordered_map<const TensorImpl*,
                     std::pair<IntrusivePtr<TensorImpl>, IntrusivePtr<TensorImpl>>>
      view_bases;
  TraceBuffer* trace = nullptr;  // the trace it records into

 private:
  bool broken_ = false;
  std::string reason_;
};

// The session tracing on this thread (the outermost: an inner compiled
// function is traced inline).
thread_local Session* t_session = nullptr;

// as_strided with a storage offset, on a stand-in's storage: that argument's
// offset matters as it is (Note [Dynamic storage offsets]).
void note_absolute_view(const StorageImpl* storage) {
  if (!t_session) return;
  auto it = t_session->inputs_on.find(storage);
  if (it == t_session->inputs_on.end()) return;
  for (size_t input : it->second) t_session->fixed_offsets[input] = true;
}

[[maybe_unused]] const bool g_absolute_view_hook = [] {
  set_absolute_view_hook(&note_absolute_view);
  return true;
}();

// A view of a tensor with memory (not pending: not a stand-in, not a lazy
// result), made while tracing: Traced::view_bases. Both are held until the
// trace is made a pristine, so that no address is reused meanwhile.
void note_view(TensorImpl* base, TensorImpl* view) {
  if (!t_session) return;
  StorageImpl* s = base->storage().get();
  if (!s || s->data() == nullptr || s->pending()) return;
  t_session->view_bases.try_emplace(view, IntrusivePtr<TensorImpl>::retain(view),
                                    IntrusivePtr<TensorImpl>::retain(base));
}

[[maybe_unused]] const bool g_view_hook = [] {
  set_view_hook(&note_view);
  return true;
}();

// A host read of a value on the tracing thread (Note [Host reads while tracing]).
void note_host_read(TensorImpl* t) {
  Session* s = t_session;
  if (!s || s->broken() || plan_running() || t->is_wrapped_number()) return;
  StorageImpl* storage = t->storage().get();
  if (!storage) return;  // a meta tensor: data() raises
  if (s->inputs_on.count(storage)) return;
  const PendingValue* mine = s->trace ? s->trace->marker() : nullptr;
  if (mine && storage->pending_marker() == mine) return;
  std::ostringstream what;
  what << "the value of a tensor the function did not get as an argument (sizes " << t->sizes()
       << ", " << t->dtype()
       << ": a captured tensor, a view of one, or one computed outside the trace) was read on the "
          "host (item(), data_ptr(), printing or a copy to the host), after "
       << (s->trace ? s->trace->size() : 0) << " recorded ops";
  s->broke(what.str());
}

[[maybe_unused]] const bool g_host_read_hook = [] {
  set_host_read_hook(&note_host_read);
  return true;
}();

class StandInWatch final : public ReadWatch {
 public:
  StandInWatch(Session* session, int input) : session_(session), input_(input) {}
  void on_read(StorageImpl*) override {
    session_->broke("the value of input " + std::to_string(input_) +
                    " was read on the host (item(), data_ptr(), printing or a copy to the host)");
  }

 private:
  Session* session_;
  int input_;
};

// A stand-in for `t` over `storage` (its own geometry).
Tensor stand_in(const Tensor& t, IntrusivePtr<StorageImpl> storage) {
  auto impl = IntrusivePtr<TensorImpl>::make(std::move(storage), t.dtype(), t.device(), t.sizes(),
                                             t.strides(), t.storage_offset());
  impl->set_wrapped_number(t.impl()->is_wrapped_number());
  return Tensor(std::move(impl));
}

// The argument tensor a stand-in result stands for: same geometry over the argument's storage.
Tensor unstand(const Tensor& out, const std::unordered_map<const StorageImpl*, Tensor>& real) {
  if (!out.defined()) return out;
  auto it = real.find(out.impl()->storage().get());
  if (it == real.end()) return out;
  return Tensor(IntrusivePtr<TensorImpl>::make(it->second.impl()->storage(), out.dtype(),
                                               out.device(), out.sizes(), out.strides(),
                                               out.storage_offset()));
}

// Forgets what `trace` recorded without running it: the storages it would
// have written keep their values (their markers go), and the stand-ins
// give back the memory they borrowed.
void drop_unrun(TraceBuffer& trace, const std::vector<Tensor>& stand_ins) {
  const PendingValue* marker = trace.marker();
  auto clear = [&](const Tensor& t) {
    StorageImpl* s = t.defined() ? t.impl()->storage().get() : nullptr;
    if (s && s->pending() && s->pending().get() == marker) s->set_pending(nullptr);
  };
  std::vector<Node> nodes = trace.take_nodes();
  for (const Node& n : nodes) {
    for (const IValue& v : n.args) {
      if (v.is_tensor()) clear(v.to_tensor());
      if (v.is_tensor_list()) {
        for (const Tensor& t : v.to_tensor_list()) clear(t);
      }
    }
    for (const Tensor& t : n.outputs) clear(t);
  }
  for (const Tensor& t : stand_ins) {
    if (!t.defined()) continue;
    t.impl()->storage()->set_pending(nullptr);
    t.impl()->storage()->reset_data();
  }
}

}  // namespace

bool is_tracing() {
  return t_tracing > 0;
}

void guard_held_references(const Tensor& t, int32_t held) {
  if (!t_session || !t.defined()) return;
  int32_t& h = t_session->held_refs[t.impl()->storage().get()];
  h = std::max(h, held);
}

std::vector<const Tensor*> tensor_arguments(const std::vector<IValue>& args) {
  std::vector<const Tensor*> out;
  for (const IValue& a : args) {
    if (a.is_tensor()) {
      out.push_back(&a.to_tensor());
    } else if (a.is_tensor_list()) {
      for (const Tensor& t : a.to_tensor_list()) out.push_back(&t);
    }
  }
  return out;
}

int64_t scalar_key(const IValue& a) {
  if (a.is_double()) {
    int64_t bits;
    const double v = a.to_double();
    std::memcpy(&bits, &v, sizeof bits);
    return bits;
  }
  if (a.is_int()) return a.to_int();
  if (a.is_bool()) return a.to_bool();
  return 0;
}

Traced trace_function(const std::vector<IValue>& args, boxed::Body body, bool run_if_thrown) {
  Traced result;
  const std::vector<const Tensor*> real_args = tensor_arguments(args);
  Session session;
  std::vector<IntrusivePtr<StandInWatch>> watches;
  std::unordered_map<const StorageImpl*, IntrusivePtr<StorageImpl>> by_real;
  std::unordered_map<const StorageImpl*, Tensor> real_of;   // stand-in storage -> an argument
  std::unordered_map<const TensorImpl*, Tensor> by_object;  // argument object -> its stand-in
  int slot = 0;
  auto make = [&](const Tensor& t) -> Tensor {
    const int input = slot++;
    if (!t.defined()) {
      result.stand_ins.push_back(t);
      return t;
    }
    // One tensor passed twice is one object in the function: what changes
    // its geometry (an out= resize) through one name shows through the other.
    if (auto seen = by_object.find(t.impl()); seen != by_object.end()) {
      session.inputs_on[seen->second.impl()->storage().get()].push_back(result.stand_ins.size());
      result.stand_ins.push_back(seen->second);
      return seen->second;
    }
    StorageImpl* real = t.impl()->storage().get();
    IntrusivePtr<StorageImpl>& s = by_real[real];
    if (!s) {
      s = IntrusivePtr<StorageImpl>::make(real->data(), real->nbytes(), real->device(), nullptr,
                                          nullptr);
      watches.push_back(IntrusivePtr<StandInWatch>::make(&session, input));
      s->set_pending(watches.back());
      real_of.emplace(s.get(), t);
    }
    Tensor st = stand_in(t, s);
    by_object.emplace(t.impl(), st);
    session.inputs_on[s.get()].push_back(result.stand_ins.size());
    result.stand_ins.push_back(st);
    return st;
  };
  std::vector<IValue> in;
  in.reserve(args.size());
  for (const IValue& a : args) {
    if (a.is_tensor()) {
      in.emplace_back(make(a.to_tensor()));
    } else if (a.is_tensor_list()) {
      std::vector<Tensor> list;
      for (const Tensor& t : a.to_tensor_list()) list.push_back(make(t));
      in.emplace_back(std::move(list));
    } else {
      in.push_back(a);
    }
  }

  session.fixed_offsets.assign(result.stand_ins.size(), false);
  result.trace = IntrusivePtr<TraceBuffer>::make();
  TraceBuffer& trace = *result.trace;
  trace.set_observer(&session);
  session.trace = &trace;
  std::vector<Tensor> outputs;
  {
    TraceScope scope(&trace);
    IncludeKeyGuard lazy(DispatchKey::Lazy);
    ++t_tracing;
    Session* outer = t_session;
    if (!outer) t_session = &session;
    // Note [Host reads while tracing]
    TensorImpl::watch_host_reads(1);
    struct Leave {
      Session* outer;
      ~Leave() {
        TensorImpl::watch_host_reads(-1);
        --t_tracing;
        t_session = outer;
      }
    } leave{outer};
    try {
      outputs = body.call(body.self, in);
    } catch (...) {
      trace.set_observer(nullptr);
      if (run_if_thrown) {
        try {
          trace.flush();
        } catch (const Error& e) {
          KILN_LOG(Recompiles, "a trace interrupted by an exception failed too: ", e.what());
        }
      } else {
        drop_unrun(trace, result.stand_ins);
      }
      trace.drop_marker();
      throw;
    }
  }
  trace.set_observer(nullptr);
  // Note [Arguments resized while traced]
  // An out= op may resize the tensor it writes; on an argument that is a
  // stand-in, which the caller never sees. Such a resize runs the op at once
  // (a graph break), and once the trace has run the argument takes its
  // stand-in's sizes, strides, offset and, where the resize grew it, storage,
  // as it would have in eager mode. A stand-in changed without a break would
  // make a replay that cannot resize the caller's tensor: it breaks too.
  auto moved = [&](size_t i) {
    const Tensor& st = result.stand_ins[i];
    if (!st.defined()) return false;
    const Tensor& arg = *real_args[i];
    return st.impl()->storage().get() != by_real[arg.impl()->storage().get()].get() ||
           !(st.sizes() == arg.sizes()) || !(st.strides() == arg.strides()) ||
           st.storage_offset() != arg.storage_offset();
  };
  for (size_t i = 0; i < result.stand_ins.size() && !session.broken(); ++i) {
    if (moved(i)) session.broke("input " + std::to_string(i) + " was resized");
  }
  if (!session.broken()) {
    result.nodes = trace.take_nodes();
    result.outputs = std::move(outputs);
    result.fixed_offsets = std::move(session.fixed_offsets);
    result.held_refs.assign(session.held_refs.begin(), session.held_refs.end());
    result.view_bases = std::move(session.view_bases);
    return result;
  }
  // A graph break: finish the call as lazy mode would, with the arguments' own memory.
  result.broken = true;
  result.break_reason = session.reason();
  trace.flush();
  trace.drop_marker();
  for (size_t i = 0; i < result.stand_ins.size(); ++i) {
    if (!moved(i)) continue;
    const Tensor& st = result.stand_ins[i];
    TensorImpl* arg = real_args[i]->impl();
    if (st.impl()->storage().get() != by_real[arg->storage().get()].get()) {
      arg->set_storage(st.impl()->storage());
    }
    arg->set_geometry(st.sizes(), st.strides(), st.storage_offset());
  }
  for (Tensor& t : outputs) t = unstand(t, real_of);
  result.outputs = std::move(outputs);
  result.stand_ins.clear();
  return result;
}

}  // namespace kiln::jit
