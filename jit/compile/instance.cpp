#include "jit/compile/instance.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>

#include "graphs/graph.h"
#include "jit/codegen_cuda/launch_cuda.h"
#include "jit/compile/call_profile.h"
#include "jit/passes/dead_code.h"
#include "jit/plan/executor.h"
#include "kiln/logging.h"
#include "runtime/core/env.h"

// GCC 12 warns falsely on std::string concatenation at -O3.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit {
namespace {

// Note [Capture retries] (instance.h): captures an instance makes after its
// first run before it stays direct, and the runs between them.
constexpr int kCaptureAttempts = 3;
constexpr int kCaptureRetryRuns[kCaptureAttempts - 1] = {16, 256};

// Note [Results handed back]
// A replay writes each result into memory no earlier call's result still
// uses, so that a caller who keeps the results of call N sees them unchanged
// after calls N + 1, N + 2, ... (Note [Graph replay]). That memory need not be
// new: where the caller has let go of every tensor on the storage the last
// replay handed out, this instance holds the only reference, nothing can
// read it any more, and the replay writes there again. The graph's nodes
// then keep their pointers: no allocation, no node update (about 1 us of host
// time per kernel node holding a result on an H200's host, 2-3 us for a
// library node), and a library call's result can be patched rather than
// copied at no cost per call. A storage still held anywhere (a result kept,
// a view of it, a lazy op that reads it, an argument of this very call)
// counts a second reference, and the replay takes fresh memory as before.
// The memory stays with the instance between calls, as a graph's static
// outputs would, and goes with it; results past kHandedBackBytes are not
// kept (what a node update saves is nothing beside writing them). As with memory the caching
// allocator hands out again, a caller that reads a result on another stream must finish with it
// there before letting it go.
constexpr size_t kHandedBackBytes = size_t{16} << 20;
// KILN_RESULTS_HANDED_BACK=0 takes fresh memory every replay, to measure.
bool sole_holder(const StorageImpl& s) {
  static const bool on = env_flag("KILN_RESULTS_HANDED_BACK", true);
  if (!on || s.use_count() != 1) return false;
  // Pairs with the release of the reference dropped last, on any thread.
  std::atomic_thread_fence(std::memory_order_acquire);
  return true;
}

// Note [Plans of one kernel]
// The design keeps a plan of one kernel out of graphs (DESIGN.md, issue 13):
// a graph of one node seemed to add its capture and node updates for
// nothing. Measured on an H200 (perf/RESULTS.md, thirty-eighth session), it
// does not: the driver takes less host time to launch a graph of one node
// than the kernel itself (perf/probes/launch_cost.cu: 1.0 against 2.3 us),
// the kernel starts sooner after it (launch and synchronize 6.0 against 7.7
// us), and a replay skips the plan's host path (the step loop, the launch
// memo, the device checks' scope): chain16 4096 compiled went from
// 10.1-10.3 to 7.9-9.2 us per call. The rule stays the default, as the
// design has it; Options::graph_single_kernel captures such plans like any
// other, for their capture (0.3 ms, once per instance) and a private pool.
// KILN_GRAPH_SINGLE_KERNEL=1 or 0 overrides it for every compiled function,
// to measure.
bool graphs_for_one_step(bool asked) {
  static const std::optional<bool> forced = []() -> std::optional<bool> {
    const char* name = "KILN_GRAPH_SINGLE_KERNEL";
    const std::optional<std::string> v = env_string(name);
    if (!v) return std::nullopt;
    const std::optional<bool> on = parse_env_flag(*v);
    if (!on) warn_env_value(name, *v, "1/0, true/false, on/off or yes/no");
    return on;
  }();
  return forced.value_or(asked);
}

// Copies tensors onto storages of their own, keeping those in `keep`
// (captured) as they are; views of one storage stay views of one storage.
class Remap {
 public:
  explicit Remap(const std::unordered_set<const StorageImpl*>& keep) : keep_(keep) {}

  Tensor tensor(const Tensor& t) {
    if (!t.defined() || !t.impl()->has_storage()) return t;
    StorageImpl* s = t.impl()->storage().get();
    if (keep_.count(s)) return t;
    auto [it, fresh] = impls_.try_emplace(t.impl());
    if (fresh) {
      IntrusivePtr<StorageImpl>& ns = storages_[s];
      if (!ns) {
        ns = IntrusivePtr<StorageImpl>::make(nullptr, s->nbytes(), s->device(), nullptr, nullptr);
      }
      auto impl = IntrusivePtr<TensorImpl>::make(ns, t.dtype(), t.device(), t.sizes(), t.strides(),
                                                 t.storage_offset());
      impl->set_wrapped_number(t.impl()->is_wrapped_number());
      it->second = Tensor(std::move(impl));
    }
    return it->second;
  }

  IValue value(const IValue& v) {
    if (v.is_tensor()) return IValue(tensor(v.to_tensor()));
    if (v.is_tensor_list()) {
      std::vector<Tensor> list;
      list.reserve(v.to_tensor_list().size());
      for (const Tensor& t : v.to_tensor_list()) list.push_back(tensor(t));
      return IValue(std::move(list));
    }
    return v;
  }

  std::vector<Node> nodes(const std::vector<Node>& in) {
    std::vector<Node> out;
    out.reserve(in.size());
    for (const Node& n : in) {
      Node c;
      c.op = n.op;
      c.device = n.device;
      c.id = n.id;
      c.written = n.written;
      c.renames = n.renames;
      c.args.reserve(n.args.size());
      for (const IValue& v : n.args) c.args.push_back(value(v));
      c.outputs.reserve(n.outputs.size());
      for (const Tensor& t : n.outputs) c.outputs.push_back(tensor(t));
      out.push_back(std::move(c));
    }
    return out;
  }

 private:
  const std::unordered_set<const StorageImpl*>& keep_;
  std::unordered_map<const TensorImpl*, Tensor> impls_;
  std::unordered_map<const StorageImpl*, IntrusivePtr<StorageImpl>> storages_;
};

const StorageImpl* storage_of(const Tensor& t) {
  return t.defined() ? t.impl()->storage().get() : nullptr;
}

// Calls f(Tensor&) on every tensor a node holds.
template <class F>
void for_each_tensor(Node& n, F&& f) {
  for (IValue& v : n.args) {
    if (v.is_tensor()) {
      f(v.to_tensor());
    } else if (v.is_tensor_list()) {
      std::vector<Tensor> list = v.to_tensor_list();
      for (Tensor& t : list) f(t);
      v = IValue(std::move(list));
    }
  }
  for (Tensor& t : n.outputs) f(t);
}

void for_each_group_tensor(const FusedGroup& g, std::vector<const TensorImpl*>& out) {
  for (const Tensor& t : g.inputs) {
    if (t.defined()) out.push_back(t.impl());
  }
  for (const Tensor& t : g.outputs) {
    if (t.defined()) out.push_back(t.impl());
  }
}

}  // namespace

std::vector<VisibleWrite> visible_writes(const Pristine& p) {
  std::unordered_map<const StorageImpl*, int64_t> arguments;
  for (size_t i = 0; i < p.stand_ins.size(); ++i) {
    if (p.stand_ins[i].defined()) {
      arguments.try_emplace(p.stand_ins[i].impl()->storage().get(), static_cast<int64_t>(i));
    }
  }
  std::vector<VisibleWrite> out;
  std::string positions_by;  // the current node's op, when its values choose positions
  auto note = [&](const Tensor& t) {
    const StorageImpl* s = t.defined() ? t.impl()->storage().get() : nullptr;
    if (!s) return;
    VisibleWrite w;
    if (auto it = arguments.find(s); it != arguments.end()) {
      w.argument = it->second;
    } else if (p.captured.count(s)) {
      w.captured = s;
    } else {
      return;
    }
    w.offset = t.storage_offset();
    w.sizes.assign(t.sizes().begin(), t.sizes().end());
    w.strides.assign(t.strides().begin(), t.strides().end());
    w.positions_by = positions_by;
    out.push_back(std::move(w));
  };
  for (const Node& n : p.nodes) {
    positions_by.clear();
    for (const auto& param : n.op->schema().arguments) {
      if (param.name == "index" || param.name == "indices" || param.name == "mask" ||
          param.name == "cache_position") {
        positions_by = n.op->name();
      }
    }
    for (int k : n.written) {
      const IValue& a = n.args[static_cast<size_t>(k)];
      if (a.is_tensor()) note(a.to_tensor());
      if (a.is_tensor_list()) {
        for (const Tensor& t : a.to_tensor_list()) note(t);
      }
    }
  }
  return out;
}

Pristine make_pristine(Traced traced) {
  Pristine p;
  const PendingValue* marker = traced.trace->marker();
  std::unordered_set<const StorageImpl*> stand_in_storages;
  for (const Tensor& t : traced.stand_ins) {
    if (t.defined()) stand_in_storages.insert(storage_of(t));
  }
  // Captured: storages the trace did not make and that are not stand-ins.
  auto captured = [&](const Tensor& t) {
    const StorageImpl* s = storage_of(t);
    if (!s || stand_in_storages.count(s)) return false;
    return !(s->pending().get() == marker && marker && s->data() == nullptr);
  };
  // Aliases of the captured tensors, so the entry does not hold the caller's (Note [Guards]).
  std::unordered_map<const TensorImpl*, Tensor> aliases;
  std::unordered_map<const TensorImpl*, std::string> first_use;  // caller objects' uses
  std::unordered_set<const TensorImpl*> objects;                 // in p.caller_objects
  auto alias = [&](Tensor& t) {
    if (!captured(t)) return;
    p.captured.insert(storage_of(t));
    auto [it, fresh] = aliases.try_emplace(t.impl());
    if (fresh) {
      if (!t.impl()->is_wrapped_number()) {
        auto use = first_use.find(t.impl());
        // The object the caller holds: views the function made, followed back.
        TensorImpl* object = t.impl();
        for (auto v = traced.view_bases.find(object); v != traced.view_bases.end();
             v = traced.view_bases.find(object)) {
          object = v->second.second.get();
        }
        if (objects.insert(object).second) {
          p.caller_objects.emplace_back(IntrusivePtr<TensorImpl>::retain(object),
                                        use != first_use.end() ? use->second : "a result");
        }
      }
      auto impl = IntrusivePtr<TensorImpl>::make(t.impl()->storage(), t.dtype(), t.device(),
                                                 t.sizes(), t.strides(), t.storage_offset());
      impl->set_wrapped_number(t.impl()->is_wrapped_number());
      it->second = Tensor(std::move(impl));
    }
    t = it->second;
  };
  std::unordered_set<const StorageImpl*> described;
  for (size_t i = 0; i < traced.nodes.size(); ++i) {
    Node& n = traced.nodes[i];
    const auto& params = n.op->schema().arguments;
    for (size_t a = 0; a < n.args.size(); ++a) {
      auto note = [&](const Tensor& t) {
        if (!captured(t) || t.impl()->is_wrapped_number()) return;
        const bool storage_new = described.insert(storage_of(t)).second;
        if (!storage_new && first_use.count(t.impl())) return;
        const std::string arg = a < params.size() ? params[a].name : std::to_string(a);
        const std::string use = arg + " of op " + std::to_string(i) + " '" + n.op->name() + "'";
        first_use.try_emplace(t.impl(), use);
        if (storage_new) p.captured_uses.emplace_back(t.impl()->storage().get(), use);
      };
      if (n.args[a].is_tensor()) note(n.args[a].to_tensor());
      if (n.args[a].is_tensor_list()) {
        for (const Tensor& t : n.args[a].to_tensor_list()) note(t);
      }
    }
    for_each_tensor(n, alias);
  }
  for (Tensor& t : traced.outputs) {
    if (captured(t) && !t.impl()->is_wrapped_number() && described.insert(storage_of(t)).second) {
      p.captured_uses.emplace_back(t.impl()->storage().get(), "a result");
    }
    alias(t);
  }
  // The trace's markers go: the nodes are a recipe now, run by instances.
  auto clear = [&](const Tensor& t) {
    StorageImpl* s = t.defined() ? t.impl()->storage().get() : nullptr;
    if (!s || !s->pending()) return;
    if (s->pending().get() == marker || dynamic_cast<ReadWatch*>(s->pending().get())) {
      s->set_pending(nullptr);
    }
  };
  for (Node& n : traced.nodes) for_each_tensor(n, clear);
  for (const Tensor& t : traced.outputs) clear(t);
  for (const Tensor& t : traced.stand_ins) {
    clear(t);
    // Stand-ins borrowed the tracing call's memory: a pristine keeps none.
    if (t.defined()) t.impl()->storage()->reset_data();
  }
  traced.trace->drop_marker();
  for (const auto& [from, to] : aliases) p.captured_impls.push_back(to.impl());
  p.nodes = std::move(traced.nodes);
  p.outputs = std::move(traced.outputs);
  p.stand_ins = std::move(traced.stand_ins);
  p.held_refs = std::move(traced.held_refs);
  return p;
}

std::vector<std::string> trace_signature(const std::vector<Node>& nodes,
                                         const std::vector<Tensor>& stand_ins,
                                         const std::unordered_set<const StorageImpl*>& captured) {
  std::unordered_map<const StorageImpl*, std::string> role;
  for (size_t k = 0; k < stand_ins.size(); ++k) {
    if (stand_ins[k].defined()) role.emplace(storage_of(stand_ins[k]), "arg" + std::to_string(k));
  }
  size_t fresh = 0;
  auto describe = [&](const Tensor& t) {
    if (!t.defined()) return std::string("undefined");
    const StorageImpl* s = storage_of(t);
    auto it = role.find(s);
    if (it == role.end()) {
      std::string r = captured.count(s) ? (t.impl()->is_wrapped_number() ? "number " + t.str()
                                                                         : std::string("captured"))
                                        : "t" + std::to_string(fresh++);
      it = role.emplace(s, r).first;
    }
    std::string d = it->second + ":" + dtype_name(t.dtype()) + "[";
    for (int64_t k = 0; k < t.dim(); ++k) d += (k ? "," : "") + std::to_string(t.size(k));
    return d + "]";
  };
  std::vector<std::string> sig;
  sig.reserve(nodes.size());
  for (const Node& n : nodes) {
    std::string s = n.op->name() + "(";
    for (size_t a = 0; a < n.args.size(); ++a) {
      const IValue& v = n.args[a];
      s += a ? ", " : "";
      if (v.is_tensor()) {
        s += describe(v.to_tensor());
      } else if (v.is_tensor_list()) {
        s += "[";
        for (const Tensor& t : v.to_tensor_list()) s += describe(t) + " ";
        s += "]";
      } else {
        s += v.repr();
      }
    }
    sig.push_back(s + ")");
  }
  return sig;
}

struct Instance::GraphState {
  std::unique_ptr<graphs::Graph> graph;
  // Per argument storage: a binding, or a copy node in (and one back out when the plan writes it).
  std::vector<int> arg_binding, arg_copy, arg_writeback;
  std::vector<int64_t> arg_shift;  // per argument storage: its shift in bytes at the capture
  struct Out {
    StorageImpl* storage = nullptr;
    int binding = -1, copy = -1;
    // The storage the last replay wrote (Note [Results handed back]).
    IntrusivePtr<StorageImpl> last;
  };
  std::vector<Out> outs;  // per result storage the instance hands out fresh
  int library_steps = 0;  // extern steps whose library nodes replay patches
  // Argument storages a library kernel's patched pointer reads (Note
  // [Library node addresses]): replay checks only these for alignment.
  std::vector<size_t> library_args;
  bool misaligned_logged = false;
};

Instance::Instance(const Pristine& pristine, InstanceOptions options)
    : options_(std::move(options)) {
  std::vector<Node> nodes;
  {
    // The copy's tensors are held by its nodes, results and bindings only, as
    // the trace's were: the passes count what else holds them (dead code,
    // stores, the memory plan), so the copying tables must be gone first.
    Remap remap(pristine.captured);
    nodes = remap.nodes(pristine.nodes);
    for (const Tensor& t : pristine.outputs) outputs_.push_back(remap.tensor(t));
    for (const Tensor& t : pristine.stand_ins) {
      bindings_.push_back(t.defined() ? remap.tensor(t).impl()->storage() : nullptr);
      traced_offsets_.push_back(
          t.defined() ? t.storage_offset() * static_cast<int64_t>(t.element_size()) : 0);
    }
    shifts_.assign(bindings_.size(), 0);
  }
  plan_ = build_plan(std::move(nodes));
  place_memory(plan_);
  for (const PlannedBuffer& b : plan_.memory.buffers) planned_.insert(b.storage);

  // The device the plan runs on, and whether it is one device.
  bool first = true;
  for (const Node& n : plan_.nodes) {
    if (first) device_ = n.device;
    single_device_ = single_device_ && n.device == device_;
    first = false;
  }
  // Distinct argument storages and the bytes of each the views reach.
  for (size_t k = 0; k < bindings_.size(); ++k) {
    if (!bindings_[k]) continue;
    const Tensor& t = pristine.stand_ins[k];  // the same geometry
    size_t hi = 0, lo = SIZE_MAX;
    if (t.numel() > 0) {
      int64_t last = t.storage_offset();
      for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
      lo = static_cast<size_t>(t.storage_offset()) * t.element_size();
      hi = static_cast<size_t>(last + 1) * t.element_size();
    }
    auto same = std::find_if(arg_storages_.begin(), arg_storages_.end(), [&](const ArgStorage& a) {
      return bindings_[a.arg].get() == bindings_[k].get();
    });
    if (same == arg_storages_.end()) {
      arg_storages_.push_back({k, lo, hi});
    } else {
      same->lo = std::min(same->lo, lo);
      same->hi = std::max(same->hi, hi);
    }
  }
  for (ArgStorage& a : arg_storages_) {
    if (a.lo > a.hi) a.lo = a.hi = 0;
  }
  for (const Node& n : plan_.nodes) {
    for (int w : n.written) {
      if (n.args[w].is_tensor()) written_.insert(n.args[w].to_tensor().impl()->storage().get());
    }
  }
  for (size_t k = 0; k < bindings_.size(); ++k) {
    if (bindings_[k] && written_.count(bindings_[k].get())) written_args_.push_back(k);
  }
  for (const StorageImpl* s : written_) {
    if (pristine.captured.count(s)) written_captured_.push_back(s);
  }
  // Memory every run takes anew: results and what extern steps allocate.
  std::unordered_set<const StorageImpl*> bound, seen;
  for (const auto& b : bindings_) bound.insert(b.get());
  std::vector<const TensorImpl*> impls;
  auto visit = [&](const Tensor& t) {
    if (!t.defined()) return;
    impls.push_back(t.impl());
    StorageImpl* s = t.impl()->storage().get();
    if (!s || pristine.captured.count(s) || bound.count(s) || planned_.count(s)) return;
    if (seen.insert(s).second) transient_.push_back(s);
  };
  for (const Node& n : plan_.nodes) {
    for_each_input(n, visit);
    for (const Tensor& t : n.outputs) visit(t);
  }
  for (const Tensor& t : outputs_) visit(t);
  for (const Step& step : plan_.steps) {
    if (step.kind == Step::Kind::Fused) for_each_group_tensor(step.group, impls);
    if (step.kind == Step::Kind::Reduction) {
      for_each_group_tensor(step.reduction.prologue, impls);
      for_each_group_tensor(step.reduction.epilogue, impls);
    }
  }
  for (const Tensor& t : outputs_) {
    KILN_INTERNAL_ASSERT(!planned_.count(storage_of(t)),
                         "a compiled function's result was given an arena slice");
  }
  // Distinct tensors on captured storages: references the guards discount.
  std::sort(impls.begin(), impls.end());
  impls.erase(std::unique(impls.begin(), impls.end()), impls.end());
  for (const TensorImpl* impl : impls) {
    const StorageImpl* s = impl->storage().get();
    if (s && pristine.captured.count(s)) captured_impls_.push_back(impl);
  }
}

Instance::~Instance() = default;

void Instance::release_after_run() {
  for (StorageImpl* s : transient_) {
    if (s->data()) s->reset_data();
    s->set_pending(nullptr);
  }
  for (const auto& b : bindings_) {
    if (!b) continue;
    b->reset_data();
    b->set_pending(nullptr);
  }
}

size_t Instance::graph_nodes() const {
  return graph_ ? graph_->graph->nodes() : 0;
}

size_t Instance::graph_early_edges() const {
  return graph_ ? graph_->graph->early_edges() : 0;
}

void Instance::bind_arguments(const std::vector<const Tensor*>& tensors) {
  KILN_INTERNAL_ASSERT(tensors.size() == bindings_.size(), "a compiled instance got ",
                       tensors.size(), " tensor arguments, its trace had ", bindings_.size());
  // Note [Dynamic storage offsets]: an argument at another offset than the
  // trace's is read shifted by the difference. (Arguments that share a
  // storage shift by the same bytes: the guards hold their distances.)
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = *tensors[k];
    shifts_[k] = t.defined() ? t.storage_offset() * static_cast<int64_t>(t.element_size()) -
                                   traced_offsets_[k]
                             : 0;
    StorageImpl* b = bindings_[k].get();
    if (b && b->data() == nullptr) b->set_data(argument_base(tensors, k), nullptr, nullptr);
  }
}

char* Instance::argument_base(const std::vector<const Tensor*>& tensors, size_t k) const {
  char* data = static_cast<char*>(tensors[k]->impl()->storage()->data());
  return data ? data + shifts_[k] : data;  // an empty storage has no memory to shift
}

// After a failed run or capture: the instance's own storages start clean;
// arguments and captured tensors keep what steps that ran wrote (a captured
// one written by a step that did not run carries the error, unless nothing
// ran at all: a failed capture ran nothing).
void Instance::recover(bool nothing_ran) {
  for (const Node& n : plan_.nodes) {
    auto clean = [&](const Tensor& t) {
      StorageImpl* s = t.defined() ? t.impl()->storage().get() : nullptr;
      if (!s || !s->pending()) return;
      if (planned_.count(s) || (nothing_ran && dynamic_cast<FailedStorage*>(s->pending().get()))) {
        s->set_pending(nullptr);
      }
    };
    for (const Tensor& t : n.outputs) clean(t);
    for (int w : n.written) {
      if (n.args[w].is_tensor()) clean(n.args[w].to_tensor());
    }
  }
  release_after_run();
}

void Instance::run_steps() {
  RunFailures failures;
  try {
    failures = run_plan(plan_);
  } catch (...) {
    recover(false);
    throw;
  }
  // The call's results come back together: a failed step fails the call
  // (Note [Failures in a trace]).
  if (!failures.empty()) {
    recover(false);
    std::rethrow_exception(failures.errors.front());
  }
}

std::vector<Tensor> Instance::collect(
    const std::vector<const Tensor*>& tensors,
    const std::function<IntrusivePtr<StorageImpl>(StorageImpl*)>& fresh) {
  std::vector<Tensor> results;
  results.reserve(outputs_.size());
  std::unordered_map<const StorageImpl*, IntrusivePtr<StorageImpl>> handed;
  for (const Tensor& o : outputs_) {
    if (!o.defined()) {
      results.push_back(o);
      continue;
    }
    StorageImpl* s = o.impl()->storage().get();
    IntrusivePtr<StorageImpl> target;
    auto bound = std::find_if(bindings_.begin(), bindings_.end(),
                              [&](const auto& b) { return b.get() == s; });
    int64_t offset = o.storage_offset();
    if (bound != bindings_.end()) {
      const size_t k = static_cast<size_t>(bound - bindings_.begin());
      target = tensors[k]->impl()->storage();
      KILN_INTERNAL_ASSERT(shifts_[k] % static_cast<int64_t>(o.element_size()) == 0,
                           "an argument shifted by a part of its result's element");
      offset += shifts_[k] / static_cast<int64_t>(o.element_size());
    } else if (std::find(transient_.begin(), transient_.end(), s) == transient_.end()) {
      target = o.impl()->storage();  // captured: the result is (a view of) it
    } else {
      IntrusivePtr<StorageImpl>& f = handed[s];
      if (!f) f = fresh(s);
      target = f;
    }
    results.emplace_back(IntrusivePtr<TensorImpl>::make(std::move(target), o.dtype(), o.device(),
                                                        o.sizes(), o.strides(), offset));
  }
  return results;
}

void Instance::order_after_previous_run() {
  if (!device_.is_cuda() || !last_stream_) return;
  const kiln::cuda::Stream now = kiln::cuda::Stream::current(device_);
  if (now != *last_stream_) now.wait(*done_);
}

void Instance::mark_run_done() {
  if (!device_.is_cuda()) return;
  const kiln::cuda::Stream now = kiln::cuda::Stream::current(device_);
  if (!done_) done_.emplace();
  done_->record(now);
  last_stream_ = now;
}

std::vector<Tensor> Instance::run(const std::vector<IValue>& args) {
  // An error an earlier replay's kernel met whose results nobody read (Note
  // [Errors of replayed kernels] in runtime/cuda/launch_record.h).
  if (graph_) graph_->graph->check_errors();
  CallTimer bind(CallPhase::kBind);
  std::vector<const Tensor*> tensors = tensor_arguments(args);
  order_after_previous_run();
  bind_arguments(tensors);
  if ((!written_args_.empty() || !written_captured_.empty()) && TraceBuffer::reads_pending()) {
    // Rule 6: another thread's recorded reads of what this run writes run first.
    std::vector<const StorageImpl*> written(written_captured_);
    for (size_t k : written_args_) written.push_back(tensors[k]->impl()->storage().get());
    TraceBuffer::flush_readers_of(written);
  }
  bind.stop();
  const bool graphs =
      options_.graphs && device_.is_cuda() && single_device_ &&
      capture_failures_ < kCaptureAttempts && runs_ >= next_capture_run_ &&
      (plan_.steps.size() > 1 ||
       (plan_.steps.size() == 1 && graphs_for_one_step(options_.graph_single_kernel)));
  // Note [Capture hints]: an entry that has captured captures a new
  // instance's first run, which finds the kernels to build itself.
  const bool capture_first = graphs && runs_ == 0 && options_.hint &&
                             options_.hint->captured.load(std::memory_order_acquire);
  if (runs_ == 0 && !capture_first && device_.is_cuda() && single_device_ &&
      cuda::parallel_build_enabled()) {
    CallTimer building(CallPhase::kCompile);
    build_kernels_ahead(tensors);
  }
  std::vector<Tensor> results;
  if ((graph_ && replayable(tensors)) ||
      (!graph_ && graphs && (runs_ >= 1 || capture_first) && capture(tensors, runs_ == 0))) {
    results = replay(tensors);
  } else {
    {
      CallTimer launch(CallPhase::kLaunch);
      run_steps();
    }
    CallTimer collecting(CallPhase::kResults);
    results = collect(tensors, [](StorageImpl* s) {
      auto f = IntrusivePtr<StorageImpl>::make(nullptr, s->nbytes(), s->device(), nullptr, nullptr);
      f->adopt_data(*s);
      return f;
    });
  }
  CallTimer release(CallPhase::kRelease);
  release_after_run();
  mark_run_done();
  ++runs_;
  return results;
}

// Note [Opaque steps]
// Replay moves every pointer of a kernel kiln launched (Note [Graph
// addresses]); what a library kernel's (cuBLASLt's) parameters mean it does
// not know. Memory that such a kernel reads or writes and that changes per
// call (an argument, a fresh result) goes through the graph's own buffer and
// a copy node, unless a probe finds its pointers. The plan does not say which
// steps launch library kernels: an extern step may run kiln's own op kernels
// (an embedding, attention), a library call, or copies. The capture watches
// instead. After each step it counts the nodes the step added that it cannot
// see into (Capture::opaque_nodes(): kernels no launch record stands for,
// copies from the host, whose bytes may be a table of pointers, and nodes of
// other kinds). An extern step that added some and touches enough per-call
// memory (Note [Which library calls are probed] in graphs/graph.h) is probed
// (Note [Library node addresses] there): where the probe shows its pointers,
// they are patched like kiln's. The storages of any other step that added
// opaque nodes are opaque. An instance's first capture copies none; where an
// opaque step touched an argument or result that it bound, that capture is
// dropped and one more copies exactly those storages (a second surprise
// fails the capture: the plan then runs directly). Before, every storage an
// extern step touched was copied: GPT-2's hidden-state argument passed
// through a copy node at the head of every replay, though at one token only
// kiln's own kernels read it.

namespace {

// Collects the storages of the steps that add opaque nodes, except the
// extern steps a probe shows to be patchable (Note [Opaque steps], Note
// [Library node addresses] in graphs/graph.h).
class OpaqueSteps final : public StepObserver {
 public:
  // `per_call`: the storages bound per call (arguments and results not copied).
  OpaqueSteps(graphs::Capture& capture, const Plan& plan,
              std::unordered_set<const StorageImpl*> per_call, std::string name)
      : capture_(capture), plan_(plan), per_call_(std::move(per_call)), name_(std::move(name)) {}

  void before_step(const Step&) override { capture_.begin_step(); }
  void after_step(const Step& step) override {
    if (!capture_.step_added_opaque()) return;
    std::unordered_set<const StorageImpl*> touched;
    auto note = [&](const Tensor& t) {
      if (t.defined() && t.impl()->storage()) touched.insert(t.impl()->storage().get());
    };
    auto note_node = [&](size_t i) {
      for_each_input(plan_.nodes[i], note);
      for (const Tensor& t : plan_.nodes[i].outputs) note(t);
    };
    if (step.kind == Step::Kind::Extern) {
      note_node(step.node);
    } else {
      for (size_t m :
           step.kind == Step::Kind::Fused ? step.group.members : step.reduction.members) {
        note_node(m);
      }
    }
    bool per_call = false;
    size_t bytes = 0;  // Note [Which library calls are probed]
    for (const StorageImpl* s : touched) {
      if (!per_call_.count(s)) continue;
      per_call = true;
      bytes += s->nbytes();
    }
    if (per_call && step.kind == Step::Kind::Extern && bytes >= graphs::library_probe_bytes() &&
        probe(step.node)) {
      ++patched_steps;
      return;
    }
    storages.insert(touched.begin(), touched.end());
  }

  std::unordered_set<const StorageImpl*> storages;
  int patched_steps = 0;

 private:
  // Runs extern node `index` once more with its per-call memory moved, and
  // lets the capture compare (Note [Library node addresses]).
  bool probe(size_t index) {
    const Node& n = plan_.nodes[index];
    std::vector<graphs::Capture::Move> moves;
    std::unordered_map<const StorageImpl*, IntrusivePtr<StorageImpl>> moved;
    auto elsewhere = [&](const Tensor& t) -> Tensor {
      StorageImpl* s = t.defined() ? t.impl()->storage().get() : nullptr;
      if (!s || !per_call_.count(s) || !s->data()) return t;
      auto [it, fresh] = moved.try_emplace(s);
      if (fresh) {
        // At the same offset modulo the alignment library kernels are picked for.
        const uintptr_t want = reinterpret_cast<uintptr_t>(s->data()) % graphs::kLibraryAlignment;
        auto* buf =
            static_cast<char*>(capture_.static_buffer(s->nbytes() + graphs::kLibraryAlignment));
        const uintptr_t have = reinterpret_cast<uintptr_t>(buf) % graphs::kLibraryAlignment;
        char* to = buf + (want + graphs::kLibraryAlignment - have) % graphs::kLibraryAlignment;
        it->second =
            IntrusivePtr<StorageImpl>::make(nullptr, s->nbytes(), s->device(), nullptr, nullptr);
        it->second->set_data(to, nullptr, nullptr);
        moves.push_back({s->data(), s->nbytes(), to});
      }
      auto impl = IntrusivePtr<TensorImpl>::make(it->second, t.dtype(), t.device(), t.sizes(),
                                                 t.strides(), t.storage_offset());
      impl->set_wrapped_number(t.impl()->is_wrapped_number());
      return Tensor(std::move(impl));
    };
    Node again;
    again.op = n.op;
    again.device = n.device;
    again.written = n.written;
    again.outputs = n.outputs;
    for (const IValue& v : n.args) {
      if (v.is_tensor()) {
        again.args.emplace_back(elsewhere(v.to_tensor()));
      } else if (v.is_tensor_list()) {
        std::vector<Tensor> list;
        for (const Tensor& t : v.to_tensor_list()) list.push_back(elsewhere(t));
        again.args.emplace_back(std::move(list));
      } else {
        again.args.push_back(v);
      }
    }
    capture_.begin_probe();
    std::vector<Tensor> results;  // alive until the capture has compared
    bool ran = true;
    std::string why;
    try {
      auto into = plan_.memory.out_variants.find(index);
      if (into != plan_.memory.out_variants.end() && into->second) {
        execute_node_into(again, *into->second);  // into the step's own arena slice
      } else {
        ExcludeKeyGuard no_lazy(DispatchKey::Lazy);
        for (IValue& v : call_normalized(*n.op, again.args)) {
          if (v.is_tensor()) results.push_back(v.to_tensor());
          if (v.is_tensor_list()) {
            for (const Tensor& t : v.to_tensor_list()) results.push_back(t);
          }
        }
        ran = results.size() == n.outputs.size();
        if (!ran) why = "the probe returned another number of results";
        // Fresh results sit elsewhere than the step's.
        for (size_t i = 0; ran && i < results.size(); ++i) {
          const StorageImpl* was = n.outputs[i].impl()->storage().get();
          const StorageImpl* now = results[i].impl()->storage().get();
          if (was && now && was->data() && now->data() != was->data()) {
            moves.push_back({was->data(), was->nbytes(), now->data()});
          }
        }
      }
    } catch (const Error& e) {
      ran = false;
      why = std::string("the probe failed: ") + e.what();
    }
    if (ran && !why.empty()) ran = false;
    std::string compared;
    const bool same = capture_.end_probe(moves, &compared);
    if (why.empty()) why = compared;
    if (!ran || !same) {
      KILN_LOG(Graphs, name_, ": op ", index, " '", n.op->name(),
               "': its library nodes keep their memory on copies: ", why);
    }
    return ran && same;
  }

  graphs::Capture& capture_;
  const Plan& plan_;
  std::unordered_set<const StorageImpl*> per_call_;
  std::string name_;  // for logs
};

}  // namespace

void Instance::build_kernels_ahead(const std::vector<const Tensor*>& tensors) {
  cuda::KernelDiscovery discovery;
  bool through = false;
  {
    std::optional<graphs::Capture> cap;
    try {
      cap.emplace(device_);
      allow_host_values(*cap, tensors);
      cap->begin();
      through = run_plan(plan_).empty();
    } catch (...) {
      // A step that cannot run captured ends the pass early; the run below
      // meets it as it comes (and reports any error of its own).
    }
    discovery.stop();
    recover(true);  // the capture ran nothing
  }
  bind_arguments(tensors);
  const size_t kept = discovery.kept();
  if (kept == 0) return;
  const size_t built = discovery.build_kept();
  KILN_LOG(Perf, options_.name, ": ", built, " of ", kept, " kernels built side by side",
           through ? "" : " (the pass that found them stopped early)");
}

std::vector<const StorageImpl*> Instance::take_hint() {
  std::vector<const StorageImpl*> hinted;
  if (!options_.hint || !opaque_touched_.empty()) return hinted;
  std::lock_guard<std::mutex> lock(options_.hint->mu);
  for (size_t k : options_.hint->args) {
    if (k < bindings_.size() && bindings_[k]) hinted.push_back(bindings_[k].get());
  }
  // Results this instance hands out fresh (not an argument or a captured tensor).
  for (size_t i : options_.hint->results) {
    StorageImpl* s = i < outputs_.size() && outputs_[i].defined()
                         ? outputs_[i].impl()->storage().get()
                         : nullptr;
    if (s && std::find(transient_.begin(), transient_.end(), s) != transient_.end()) {
      hinted.push_back(s);
    }
  }
  opaque_touched_.insert(hinted.begin(), hinted.end());
  return hinted;
}

void Instance::write_hint() {
  if (!options_.hint) return;
  std::vector<size_t> args, results;
  for (size_t k = 0; k < bindings_.size(); ++k) {
    if (bindings_[k] && opaque_touched_.count(bindings_[k].get())) args.push_back(k);
  }
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (outputs_[i].defined() && opaque_touched_.count(outputs_[i].impl()->storage().get())) {
      results.push_back(i);
    }
  }
  std::lock_guard<std::mutex> lock(options_.hint->mu);
  options_.hint->args = std::move(args);
  options_.hint->results = std::move(results);
  options_.hint->captured.store(true, std::memory_order_release);
}

bool Instance::capture(const std::vector<const Tensor*>& tensors, bool first_run) {
  // A first run finds the kernels not yet built as build_kernels_ahead does
  // (Note [Kernels compiled side by side]): placeholders stand in for them,
  // and the capture is made again once they are built.
  std::optional<cuda::KernelDiscovery> discovery;
  if (first_run && cuda::parallel_build_enabled()) discovery.emplace();
  auto found = [&] { return discovery && discovery->kept() > 0; };
  // Builds what the placeholders stood for; later captures build as they go.
  auto build_found = [&] {
    discovery->stop();
    const size_t kept = discovery->kept();
    const size_t built = discovery->build_kept();
    KILN_LOG(Perf, options_.name, ": ", built, " of ", kept, " kernels built side by side");
    discovery.reset();
  };
  // The hinted capture and, where it was wrong for this plan, one more.
  auto attempt = [&]() -> std::unique_ptr<GraphState> {
    const std::vector<const StorageImpl*> hinted = take_hint();
    std::unordered_set<const StorageImpl*> opaque;
    std::unique_ptr<GraphState> g =
        capture_once(tensors, &opaque, discovery ? &*discovery : nullptr);
    if (!g && found()) return nullptr;
    // Note [Capture hints]: a hinted storage no opaque step touched was copied for nothing.
    size_t needless = 0;
    for (const StorageImpl* s : hinted) {
      if (g && !opaque.count(s)) needless += opaque_touched_.erase(s);
    }
    if (g && needless == 0) return g;
    if (g) {
      KILN_LOG(Graphs, options_.name, ": ", needless,
               needless == 1 ? " argument or result" : " arguments and results",
               " the entry's other captures copied need no copy here; capturing again");
      g.reset();
      recover(true);
      bind_arguments(tensors);
    } else {
      KILN_LOG(Graphs, options_.name, ": library kernels touch memory the capture bound; ",
               "capturing again with it copied through the graph's buffers");
      opaque_touched_.insert(opaque.begin(), opaque.end());
    }
    opaque.clear();
    g = capture_once(tensors, &opaque, discovery ? &*discovery : nullptr);
    KILN_CHECK(g != nullptr || found(),
               "[graphs] a step added nodes kiln cannot see into over memory that the ",
               "previous capture found none in (Note [Opaque steps])");
    return g;
  };
  std::unique_ptr<GraphState> g;
  try {
    g = attempt();
    if (found()) {
      build_found();
      opaque_touched_.clear();  // only the hint was in it: take it again
      g = attempt();
    }
  } catch (const Error& e) {
    if (found()) build_found();
    std::string then = "this run goes directly and the next captures: ";
    if (!first_run) {  // Note [Capture retries]
      ++capture_failures_;
      if (capture_failures_ < kCaptureAttempts) {
        const int wait = kCaptureRetryRuns[capture_failures_ - 1];
        next_capture_run_ = runs_ + 1 + wait;
        then = "the plan runs its kernels directly and captures again in " + std::to_string(wait) +
               " calls: ";
      } else {
        then = "the plan runs its kernels directly from now on: ";
      }
    }
    KILN_LOG(Graphs, options_.name, ": capture failed, ", then, e.what());
    recover(true);
    bind_arguments(tensors);
    return false;
  }
  graph_ = std::move(g);
  write_hint();
  for (size_t k = 0; k < arg_storages_.size(); ++k) {
    const int b = graph_->arg_binding[k];
    if (b >= 0 && graph_->graph->holds_library_pointers(b)) graph_->library_args.push_back(k);
  }
  size_t copies = 0;
  for (size_t k = 0; k < arg_storages_.size(); ++k) copies += graph_->arg_copy[k] >= 0;
  for (const GraphState::Out& out : graph_->outs) copies += out.copy >= 0;
  KILN_LOG(Graphs, options_.name, ": captured a graph of ", graph_->graph->nodes(), " nodes (",
           graph_->graph->patched_nodes(), " patched per replay, ", graph_->library_steps,
           " library calls among them, ", copies, " arguments and results copied, ",
           plan_.steps.size(), " steps), arena ", plan_.memory.planned_bytes,
           " bytes, private pool ", graph_->graph->pool_bytes(), " bytes, in ",
           graph_->graph->capture_ms(), " ms (", graph_->graph->instantiate_ms(),
           " instantiating)");
  return true;
}

std::unique_ptr<Instance::GraphState> Instance::capture_once(
    const std::vector<const Tensor*>& tensors, std::unordered_set<const StorageImpl*>* opaque,
    const cuda::KernelDiscovery* discovery) {
  auto g = std::make_unique<GraphState>();
  graphs::Capture cap(device_);
  g->arg_binding.assign(arg_storages_.size(), -1);
  g->arg_copy.assign(arg_storages_.size(), -1);
  g->arg_writeback.assign(arg_storages_.size(), -1);
  g->arg_shift.assign(arg_storages_.size(), 0);
  for (size_t k = 0; k < arg_storages_.size(); ++k) g->arg_shift[k] = shifts_[arg_storages_[k].arg];
  std::vector<char*> statics(arg_storages_.size(), nullptr);
  allow_host_values(cap, tensors);
  // Arguments library kernels read go through a static buffer of the graph.
  for (size_t k = 0; k < arg_storages_.size(); ++k) {
    const ArgStorage& a = arg_storages_[k];
    StorageImpl* b = bindings_[a.arg].get();
    if (!opaque_touched_.count(b) || a.hi == 0) continue;
    statics[k] = static_cast<char*>(cap.static_buffer(a.hi));
    b->reset_data();
    b->set_data(statics[k], nullptr, nullptr);
  }
  cap.begin();
  for (size_t k = 0; k < arg_storages_.size(); ++k) {
    const ArgStorage& a = arg_storages_[k];
    if (!statics[k]) continue;
    const char* user = argument_base(tensors, a.arg);
    g->arg_copy[k] = cap.copy_in(statics[k] + a.lo, user + a.lo, a.hi - a.lo);
  }
  // Memory bound per call: arguments not copied, and results (Note [Opaque steps]).
  std::unordered_set<const StorageImpl*> per_call;
  for (size_t k = 0; k < arg_storages_.size(); ++k) {
    if (!statics[k] && arg_storages_[k].hi > 0)
      per_call.insert(bindings_[arg_storages_[k].arg].get());
  }
  for (const Tensor& o : outputs_) {
    StorageImpl* s = o.defined() ? o.impl()->storage().get() : nullptr;
    if (s && !opaque_touched_.count(s) &&
        std::find(transient_.begin(), transient_.end(), s) != transient_.end()) {
      per_call.insert(s);
    }
  }
  OpaqueSteps watch(cap, plan_, std::move(per_call), options_.name);
  if (RunFailures f = run_plan(plan_, &watch); !f.empty()) std::rethrow_exception(f.errors.front());
  if (discovery && discovery->kept() > 0) {  // placeholders ran: the caller builds and comes back
    recover(true);
    bind_arguments(tensors);
    return nullptr;
  }
  g->library_steps = watch.patched_steps;
  // Results that are not arguments or captured tensors: handed out fresh.
  std::vector<StorageImpl*> results;
  std::unordered_set<const StorageImpl*> seen;
  for (const Tensor& o : outputs_) {
    StorageImpl* s = o.defined() ? o.impl()->storage().get() : nullptr;
    if (!s || !seen.insert(s).second || s->nbytes() == 0 || !s->data()) continue;
    if (std::find(transient_.begin(), transient_.end(), s) == transient_.end()) continue;
    results.push_back(s);
  }
  // Bound memory an opaque step touched: the try is dropped (Note [Opaque steps]).
  bool surprised = false;
  for (size_t k = 0; k < arg_storages_.size(); ++k) {
    const StorageImpl* b = bindings_[arg_storages_[k].arg].get();
    surprised = surprised || (!statics[k] && arg_storages_[k].hi > 0 && watch.storages.count(b));
  }
  for (const StorageImpl* s : results) {
    surprised = surprised || (watch.storages.count(s) && !opaque_touched_.count(s));
  }
  if (surprised) {
    *opaque = std::move(watch.storages);
    recover(true);
    bind_arguments(tensors);
    return nullptr;
  }
  for (size_t k = 0; k < arg_storages_.size(); ++k) {
    const ArgStorage& a = arg_storages_[k];
    if (!statics[k] || !written_.count(bindings_[a.arg].get())) continue;
    char* user = argument_base(tensors, a.arg);
    g->arg_writeback[k] = cap.copy_out(user + a.lo, statics[k] + a.lo, a.hi - a.lo);
  }
  for (StorageImpl* s : results) {
    GraphState::Out out{s};
    if (opaque_touched_.count(s)) {
      out.copy = cap.copy_out(cap.static_buffer(s->nbytes()), s->data(), s->nbytes());
    } else {
      out.binding = cap.bind(s->data(), s->nbytes(), "a result");
    }
    g->outs.push_back(out);
  }
  for (size_t k = 0; k < arg_storages_.size(); ++k) {
    if (statics[k]) continue;
    const ArgStorage& a = arg_storages_[k];
    // The whole allocation tells the argument's pointers apart; replay
    // moves them by the change of address and of shift since the capture.
    const StorageImpl* user = tensors[a.arg]->impl()->storage().get();
    const size_t reach = static_cast<size_t>(std::max<int64_t>(
        static_cast<int64_t>(a.hi) + shifts_[a.arg], static_cast<int64_t>(user->nbytes())));
    g->arg_binding[k] = cap.bind(user->data(), reach, "argument " + std::to_string(a.arg));
  }
  g->graph = cap.finish();
  *opaque = std::move(watch.storages);
  return g;
}

void Instance::allow_host_values(graphs::Capture& cap,
                                 const std::vector<const Tensor*>& tensors) const {
  for (const ArgStorage& a : arg_storages_) {
    const StorageImpl* user = tensors[a.arg]->impl()->storage().get();
    if (user && user->data() && user->device().is_cpu()) {
      cap.allow_host_values(user->data(), user->nbytes());
    }
  }
  for (const TensorImpl* t : captured_impls_) {
    const StorageImpl* s = t->storage().get();
    if (s && s->data() && s->device().is_cpu()) cap.allow_host_values(s->data(), s->nbytes());
  }
}

bool Instance::replayable(const std::vector<const Tensor*>& tensors) {
  for (size_t k : graph_->library_args) {
    const char* base = argument_base(tensors, arg_storages_[k].arg) - graph_->arg_shift[k];
    if (graph_->graph->keeps_alignment(graph_->arg_binding[k], base)) continue;
    if (!graph_->misaligned_logged) {
      graph_->misaligned_logged = true;
      KILN_LOG(Graphs, options_.name, ": argument ", arg_storages_[k].arg,
               " moved by other than a multiple of ", graphs::kLibraryAlignment,
               " bytes from where a library kernel was captured to read it: such calls run ",
               "the plan directly (Note [Library node addresses])");
    }
    return false;
  }
  return true;
}

std::vector<Tensor> Instance::replay(const std::vector<const Tensor*>& tensors) {
  CallTimer bind(CallPhase::kBind);
  graphs::Graph& graph = *graph_->graph;
  for (size_t k = 0; k < arg_storages_.size(); ++k) {
    const ArgStorage& a = arg_storages_[k];
    char* user = argument_base(tensors, a.arg);
    if (graph_->arg_copy[k] >= 0) graph.set_copy_source(graph_->arg_copy[k], user + a.lo);
    if (graph_->arg_writeback[k] >= 0) {
      graph.set_copy_destination(graph_->arg_writeback[k], user + a.lo);
    }
    if (graph_->arg_binding[k] >= 0) {
      graph.set_binding(graph_->arg_binding[k], user - graph_->arg_shift[k]);
    }
  }
  std::unordered_map<const StorageImpl*, IntrusivePtr<StorageImpl>> fresh;
  for (GraphState::Out& out : graph_->outs) {
    // Note [Results handed back]: the last replay's storage, where nothing
    // but this instance holds it any more.
    IntrusivePtr<StorageImpl> f = out.last && sole_holder(*out.last)
                                      ? out.last
                                      : StorageImpl::allocate(out.storage->nbytes(), device_);
    out.last = f->nbytes() <= kHandedBackBytes ? f : IntrusivePtr<StorageImpl>();
    if (out.binding >= 0) graph.set_binding(out.binding, f->data());
    if (out.copy >= 0) graph.set_copy_destination(out.copy, f->data());
    fresh.emplace(out.storage, std::move(f));
  }
  graph.update();
  bind.stop();
  {
    CallTimer launch(CallPhase::kLaunch);
    graph.launch();
  }
  CallTimer results(CallPhase::kResults);
  return collect(tensors, [&](StorageImpl* s) {
    auto it = fresh.find(s);
    if (it != fresh.end()) return it->second;
    return IntrusivePtr<StorageImpl>::make(nullptr, s->nbytes(), s->device(), nullptr, nullptr);
  });
}

}  // namespace kiln::jit
