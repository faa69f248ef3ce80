// jit::compile's cache: entries behind guards (Note [Guards]), each with a
// plan per specialization (a size of a dynamic dim, a value of a dynamic
// scalar) and a pool of instances of it (Note [Compiled instances]); the
// recompile log; graph breaks; the cache limit; verify mode.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "guards/guards.h"
#include "jit/codegen_cpu/launch_cpu.h"
#include "jit/codegen_cuda/launch_cuda.h"
#include "jit/compile/buckets.h"
#include "jit/compile/call_profile.h"
#include "jit/compile/explain.h"
#include "jit/compile/instance.h"
#include "jit/compile/tracing.h"
#include "jit/record/trace_buffer.h"
#include "kiln/jit.h"
#include "kiln/logging.h"
#include "kiln/ops.h"
#include "runtime/core/env.h"
#include "runtime/cuda/blas_lt.h"

// GCC 12 warns falsely on std::string concatenation at -O3.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::ReduceOverhead:
      return "reduce-overhead";
    case Mode::Default:
      return "default";
    case Mode::MaxAutotune:
      return "max-autotune";
  }
  return "?";
}

bool verify_everywhere() {
  static const bool on = env_flag("KILN_COMPILE_VERIFY", false);
  return on;
}

// Note [What a specialization is for]
// A specialization's key is the sizes of its entry's dynamic dims and the
// values of its dynamic scalars, as int64 words (a double's bits). Logs and
// explain() say what those words are: "input 0 'ids' dim 1 = 17, argument 2
// 'temperature' = 0.7" in the recompile log and explain(), "17, temperature
// = 0.7" where an instance is named. Sizes are kernel arguments, and so is a
// scalar's value where a fused kernel reads it (Note [Numbers as kernel
// arguments]), but the value is a constant of the trace: a new value is a
// new plan (traced, planned and, on CUDA, captured again), and where the
// value picks the code (pow's exponent) it builds new kernels. The recompile
// log counts the kernels each new plan compiled; a value that changes every
// call belongs in a 0-dim tensor argument, which kernels read from memory.
struct SpecializedFor {
  std::vector<int64_t> sizes;  // the dynamic dims' sizes, in key order
  std::string text;            // every part, named
  std::string label;           // every part, compact
  bool scalars = false;        // whether a dynamic scalar is among them
};

// One plan of an entry: a pristine trace and the instances made from it.
struct Specialization {
  std::vector<int64_t> key;  // sizes of the dynamic dims, values of dynamic scalars
  // What the key stands for (Note [What a specialization is for]).
  SpecializedFor what;
  Pristine pristine;
  std::vector<std::string> signature;  // verify mode
  std::mutex mu;
  std::vector<std::unique_ptr<Instance>> idle;
  size_t steps = 0;
  // Note [Captured tensors of later plans]
  // An entry's guards hold the captured tensors of its first plan. A later
  // plan (a new size of a dynamic dim, a new value of a dynamic scalar) may
  // read others: `fn` chose its path by a size. Those used to be guarded by
  // nothing, so a weight replaced after such a plan was built went on being
  // read at that size, the old tensor kept alive by the plan. The plan
  // guards them itself (as the entry does: Note [Guards]); a call at its
  // key that finds one replaced marks it stale and builds a new plan (the
  // stale one, kept as a replaced entry is, counts towards
  // specialization_limit: a weight replaced at every call costs plans up to
  // the limit, then uncompiled calls, not memory without bound). A
  // later plan that writes or returns a tensor it made from host values is
  // not kept either (Note [Tensors a trace made from host values]): calls
  // at its key run uncompiled, where replays used to accumulate into one
  // tensor and hand every caller its memory. Nor can it take an argument at
  // another offset than traced where it made a view of it at an explicit
  // storage offset (Note [Dynamic storage offsets]): the shift moved that
  // view, and reads went elsewhere.
  std::vector<guards::Captured> captured;
  std::vector<guards::CapturedObject> objects;
  bool stale = false;  // e.mu
  // It writes an argument or a captured tensor: a call whose argument is a
  // tensor it captures runs uncompiled (Note [Arguments that are captured
  // tensors]).
  bool writes = false;
  // Why calls at its key run `fn` uncompiled (empty: they run the plan): it
  // writes or returns a tensor it made from host values (Note [Tensors a
  // trace made from host values]). Such a specialization keeps no plan.
  std::string uncompiled;
  // Tensor arguments (guard order) it made a view of at an explicit storage
  // offset, and that offset: where the entry takes any offset, a call at
  // another runs uncompiled (Note [Dynamic storage offsets]; the entry's
  // first plan keeps those offsets guarded instead).
  std::vector<std::pair<size_t, int64_t>> exact_offsets;
  bool holds() const {
    for (const guards::CapturedObject& o : objects) {
      if (!o.holds()) return false;
    }
    for (const guards::Captured& c : captured) {
      if (!c.holds()) return false;
    }
    return true;
  }
};

struct Entry {
  int index = 0;  // 1-based, in creation order
  guards::GuardSet guards;
  std::atomic<bool> uncompiled{false};  // runs `fn` as it is (graph break, eager mode)
  std::string why;
  std::string reason;        // why it was built (explain)
  std::string break_reason;  // the trace's, when it broke (explain)
  std::mutex mu;             // specs
  std::vector<std::unique_ptr<Specialization>> specs;
  // What its instances' captures learned (Note [Capture hints]).
  std::shared_ptr<CaptureHint> capture_hint = std::make_shared<CaptureHint>();
  bool specs_warned = false;
  // Distinct tensors the entry holds on captured storages, and per storage
  // the references they make, counted on the storage as compiled ones (Note
  // [Guards]) until the entry is gone.
  std::mutex refs_mu;
  std::unordered_set<const TensorImpl*> captured_impls;
  struct Hold {
    explicit Hold(StorageImpl* s) {
      s->add_compiled_refs(1);  // its own reference, counted before it is taken
      storage = IntrusivePtr<StorageImpl>::retain(s);
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() { storage->add_compiled_refs(-(tensors + 1)); }
    IntrusivePtr<StorageImpl> storage;  // keeps it alive for the count's sake
    int32_t tensors = 0;
  };
  std::unordered_map<const StorageImpl*, Hold> holds;

  // Counts the tensors `impls` adds on captured storages; returns those it
  // counted (for release()).
  using Counted = std::vector<std::pair<const TensorImpl*, const StorageImpl*>>;
  Counted hold(const std::vector<const TensorImpl*>& impls) {
    std::lock_guard<std::mutex> lock(refs_mu);
    Counted counted;
    for (const TensorImpl* impl : impls) {
      if (!captured_impls.insert(impl).second) continue;
      StorageImpl* s = impl->storage().get();
      ++holds.try_emplace(s, s).first->second.tensors;
      s->add_compiled_refs(1);
      counted.emplace_back(impl, s);
    }
    return counted;
  }
  // Note [A plan that failed to build]
  // Takes back what hold() counted for a plan that was dropped (its first
  // run raised: an index out of range at a new size). The counts used to
  // stay: the storage then showed one reference held outside too few, every
  // guard on that weight failed, and each later call compiled a new entry,
  // up to the cache limit. forget() goes before the plan's tensors are
  // freed (a tensor made meanwhile at a freed one's address is another
  // tensor), release() after them (Note [Guards]: a race then reads too few
  // references held outside, not too many).
  void forget(const Counted& counted) {
    std::lock_guard<std::mutex> lock(refs_mu);
    for (const auto& [impl, storage] : counted) captured_impls.erase(impl);
  }
  void release(const Counted& counted) {
    std::lock_guard<std::mutex> lock(refs_mu);
    for (const auto& [impl, storage] : counted) {
      Hold& h = holds.find(storage)->second;
      --h.tensors;
      h.storage->add_compiled_refs(-1);
    }
  }

  // The plans (and their tensors) go before the counts of their references.
  ~Entry() { specs.clear(); }
};

// Hands an instance back to its pool when the call ends (or throws).
class Lease {
 public:
  Lease(Specialization& spec, std::unique_ptr<Instance> inst)
      : spec_(spec), inst_(std::move(inst)) {}
  ~Lease() {
    std::lock_guard<std::mutex> lock(spec_.mu);
    spec_.idle.push_back(std::move(inst_));
  }
  Instance& operator*() { return *inst_; }

 private:
  Specialization& spec_;
  std::unique_ptr<Instance> inst_;
};

// The captured storages a trace writes or returns (Note [Tensors a trace
// made from host values]).
std::unordered_set<const StorageImpl*> changed_storages(const Pristine& p,
                                                        const std::vector<VisibleWrite>& writes) {
  std::unordered_set<const StorageImpl*> changed;
  for (const VisibleWrite& w : writes) changed.insert(w.captured);
  for (const Tensor& t : p.outputs) {
    if (t.defined()) changed.insert(t.impl()->storage().get());
  }
  return changed;
}

// Kernels compiled or loaded from disk in this process so far, CPU and CUDA
// (other threads' too: a count for logs).
int64_t kernels_built() {
  const cuda::CudaKernelStats k = cuda::cuda_kernel_stats();
  return cpu::cpu_kernels_compiled() + k.compiled + k.disk_hits;
}

// A double as the shortest decimal that reads back as it: 0.7, not 0.700000.
std::string shortest_double(double v) {
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace

struct boxed::CompiledCore::Impl {
  Options options;
  bool verify = false;
  std::vector<IValue::Tag> kinds;  // the first call's argument kinds
  std::once_flag kinds_once;

  mutable std::shared_mutex entries_mu;
  std::vector<std::shared_ptr<Entry>> entries;
  std::mutex compile_mu;             // one entry built at a time
  std::vector<DynamicDim> dynamic;   // grows: marked, and automatic
  std::vector<bool> automatic;       // per dynamic dim: lifted by automatic_dynamic
  std::vector<int> dynamic_offsets;  // arguments whose storage offset changed (automatic)
  bool limit_warned = false;

  std::atomic<int64_t> calls{0}, hits{0}, built{0}, specializations{0}, uncompiled{0}, breaks{0},
      instances{0}, verified{0}, steps{0}, graph_nodes{0};
  std::atomic<bool> shared_memory_logged{false};
  std::atomic<double> compile_ms{0};
  mutable std::mutex history_mu;
  std::vector<Recompile> history;  // explain(): entries and plans built, and why
  // Padding to Options::buckets (Note [Buckets]); what turns them off goes
  // to the recompile log and explain().
  Buckets buckets{options, [this](const std::string& what) {
                    remember(0, what);
                    kiln::detail::log_line(LogChannel::Recompiles, what);
                  }};

  void remember(int entry, std::string reason) {
    std::lock_guard<std::mutex> lock(history_mu);
    history.push_back({entry, std::move(reason)});
  }

  // `hit_counted`: where a call dispatches more than once (a bucket's first
  // call runs padded several ways), the hit is counted once.
  std::vector<Tensor> dispatch(const std::vector<IValue>& args, Body body,
                               bool* hit_counted = nullptr);
  void count_hit(bool* hit_counted) {
    if (hit_counted && std::exchange(*hit_counted, true)) return;
    hits.fetch_add(1, std::memory_order_relaxed);
  }
  void check_arguments(const std::vector<IValue>& args);
  guards::DynamicDims dynamic_for(const std::vector<IValue>& args) const;
  Entry* lookup(const std::vector<IValue>& args) const;
  std::vector<Tensor> compile(const std::vector<IValue>& args, Body body, Entry** hit);
  // Automatic dynamic: every moved size and offset turns dynamic at once;
  // returns the log's note ("; dim 0 is dynamic from now on").
  std::string lift(const guards::Moved& moved, int failed_input, const std::vector<IValue>& args);
  std::vector<Tensor> run(Entry& e, const std::vector<IValue>& args, Body body, bool* hit_counted);
  Specialization* specialize(Entry& e, const std::vector<IValue>& args, Body body,
                             std::vector<Tensor>* results);
  std::vector<int64_t> spec_key(const Entry& e, const std::vector<IValue>& args) const;
  SpecializedFor specialized_for(const Entry& e, const std::vector<IValue>& args) const;
  std::string argument_name(size_t i, const char* kind) const {
    std::string s = std::string(kind) + " " + std::to_string(i);
    if (i < options.input_names.size() && !options.input_names[i].empty()) {
      s += " '" + options.input_names[i] + "'";
    }
    return s;
  }
  using CallerObjects = std::vector<std::pair<IntrusivePtr<TensorImpl>, std::string>>;
  // Returns the use of a tensor the trace made from host values and writes
  // or returns (Note [Tensors a trace made from host values]), or "".
  std::string guard_captured(Entry& e, const Pristine& p, const Instance& first,
                             CallerObjects callers);
  // Note [Captured tensors of later plans]: guards what `spec` captures
  // beyond its entry's guards. After its entry counted its tensors.
  // Returns the use of a tensor the trace made from host values and writes
  // or returns, or "" (as guard_captured).
  std::string guard_later_captures(const Entry& e, Specialization& spec, CallerObjects callers);
  // Note [Arguments that are captured tensors].
  bool aliases_captured(Entry& e, const std::vector<IValue>& args, const Pristine& p);
  // `counted` (optional): receives what the entry counted for it (Entry::hold).
  std::unique_ptr<Instance> new_instance(Entry& e, const Specialization& spec,
                                         const std::vector<IValue>& args,
                                         Entry::Counted* counted = nullptr);
  // The Instance of `spec` for a call with `args` (Note [Calls that fail
  // before they run]).
  std::unique_ptr<Instance> make_instance(const Entry& e, const Specialization& spec,
                                          const std::vector<IValue>& args);
  // Logs name an instance "decode: entry 1" and, with dynamic dims or
  // scalars, what the specialization is for: "decode: entry 1, bucket 8",
  // "step: entry 1, sizes 17, temperature = 0.7".
  InstanceOptions instance_options(const Entry& e, const SpecializedFor& what) const {
    std::string name = options.name + ": entry " + std::to_string(e.index);
    if (!what.label.empty()) {
      const bool sized = !what.sizes.empty();
      name += sized ? (options.buckets.empty() ? ", sizes " : ", bucket ") : ", ";
      name += what.label;
    }
    return {options.mode != Mode::Default, options.graph_single_kernel, std::move(name),
            e.capture_hint};
  }
};

namespace boxed {

void raise_moved_from() {
  KILN_FAIL("[jit::compile] expected a compiled function, got a moved-from one (its cache went ",
            "with the move; call the object it was moved into)");
}

CompiledCore::CompiledCore(Options options) : impl_(std::make_unique<Impl>()) {
  // Every log line and error names the function: "[jit::compile] : expected"
  // and ": entry 1/8" named nothing.
  KILN_CHECK(!options.name.empty(), "[jit::compile] expected a non-empty Options::name, got \"\"");
  const std::string who = "[jit::compile] " + options.name + ": expected ";
  KILN_CHECK(options.mode == Mode::ReduceOverhead || options.mode == Mode::Default ||
                 options.mode == Mode::MaxAutotune,
             who, "Options::mode ReduceOverhead, Default or MaxAutotune, got an invalid mode (",
             static_cast<int>(options.mode), ")");
  KILN_CHECK(options.on_limit == OnLimit::RunUncompiled || options.on_limit == OnLimit::Throw, who,
             "Options::on_limit RunUncompiled or Throw, got an invalid value (",
             static_cast<int>(options.on_limit), ")");
  KILN_CHECK(options.cache_limit >= 1, who, "a cache_limit of at least 1 entry, got ",
             options.cache_limit);
  KILN_CHECK(options.specialization_limit >= 1, who, "a specialization_limit of at least 1, got ",
             options.specialization_limit);
  for (size_t i = 0; i < options.buckets.size(); ++i) {
    KILN_CHECK(options.buckets[i] >= 1 && (i == 0 || options.buckets[i] > options.buckets[i - 1]),
               who, "buckets of increasing sizes of at least 1, got ",
               IntArrayRef(options.buckets));
  }
  for (const DynamicDim& d : options.dynamic) {
    KILN_CHECK(d.input >= 0, who, "dynamic dims of arguments 0 and up, got argument ", d.input);
  }
  for (int i : options.dynamic_scalars) {
    KILN_CHECK(i >= 0, who, "dynamic scalars of arguments 0 and up, got argument ", i);
  }
  impl_->verify = options.verify || verify_everywhere();
  impl_->dynamic = options.dynamic;
  impl_->automatic.assign(options.dynamic.size(), false);
  impl_->options = std::move(options);
}

CompiledCore::~CompiledCore() = default;

Explanation CompiledCore::explain() const {
  const Impl& m = *impl_;
  Explanation out;
  out.name = m.options.name;
  out.stats = stats();
  std::vector<std::shared_ptr<Entry>> entries;
  {
    std::shared_lock<std::shared_mutex> read(m.entries_mu);
    entries = m.entries;
  }
  for (const auto& e : entries) {
    ExplainEntry x;
    x.index = e->index;
    x.reason = e->reason;
    x.guards = e->guards.describe(m.options.input_names);
    // A later plan that breaks writes these under it.
    std::lock_guard<std::mutex> lock(e->mu);
    x.compiled = !e->uncompiled;
    if (e->uncompiled) x.uncompiled = e->why;
    for (const auto& spec : e->specs) {
      std::lock_guard<std::mutex> spec_lock(spec->mu);
      if (spec->idle.empty()) {  // every instance is running: what is known without one
        ExplainPlan p;
        p.sizes = spec->what.sizes;
        p.specialized_for = spec->what.text;
        p.steps = static_cast<int64_t>(spec->steps);
        x.plans.push_back(std::move(p));
        continue;
      }
      x.plans.push_back(explain_plan(*spec->idle.front(), spec->what.sizes, spec->what.text));
    }
    if (!e->break_reason.empty())
      out.graph_breaks.push_back(describe_break(e->index, e->break_reason));
    out.entries.push_back(std::move(x));
  }
  std::lock_guard<std::mutex> lock(m.history_mu);
  out.recompiles = m.history;
  return out;
}

const Options& CompiledCore::options() const {
  return impl_->options;
}

void CompiledCore::mark_dynamic(int input, int64_t dim) {
  KILN_CHECK(input >= 0, "[jit::compile] ", impl_->options.name,
             ": expected mark_dynamic of argument 0 and up, got argument ", input);
  std::lock_guard<std::mutex> lock(impl_->compile_mu);
  impl_->dynamic.push_back({input, dim});
  impl_->automatic.push_back(false);
}

CompileStats CompiledCore::stats() const {
  const Impl& i = *impl_;
  CompileStats s;
  s.calls = i.calls.load();
  s.hits = i.hits.load();
  s.entries = i.built.load();
  s.specializations = i.specializations.load();
  s.uncompiled_calls = i.uncompiled.load();
  s.graph_breaks = i.breaks.load();
  s.instances = i.instances.load();
  s.verified = i.verified.load();
  s.kernels_per_call = i.steps.load();
  s.graph_nodes = i.graph_nodes.load();
  s.last_compile_ms = i.compile_ms.load();
  return s;
}

std::vector<Tensor> CompiledCore::call(const std::vector<IValue>& args, Body body) {
  // A compiled function called while another is traced is part of that trace.
  if (is_tracing()) return body.call(body.self, args);
  Impl& m = *impl_;
  m.calls.fetch_add(1, std::memory_order_relaxed);
  profile_call_done(false);  // drops what a call that did not count left behind
  profiler::detail::Scope call_event(profiler::EventKind::Compiled,
                                     [&] { return "jit::compile " + m.options.name; });
  CallTimer enter(CallPhase::kEnter);
  m.check_arguments(args);
  // A compile boundary: what this thread recorded runs first, and arguments
  // still pending (here or on another thread) are computed.
  if (TraceBuffer::current().size() > 0) TraceBuffer::current().flush();
  // Note [Memory wrapped twice] in runtime/core/tensor_impl.cpp: storages
  // are looked at only in a process that ever wrapped memory twice.
  const bool any_shared = StorageImpl::any_shares_memory();
  bool shared = false;
  auto prepare = [&](const Tensor& t) {
    if (!t.defined()) return;
    if (t.is_pending()) (void)t.data_ptr();
    shared =
        shared || (any_shared && t.impl()->has_storage() && t.impl()->storage()->shares_memory());
  };
  for (const IValue& a : args) {
    if (a.is_tensor()) prepare(a.to_tensor());
    if (a.is_tensor_list()) {
      for (const Tensor& t : a.to_tensor_list()) prepare(t);
    }
  }
  enter.stop();
  if (shared) {
    // A trace orders memory by storage: two storages over one buffer cannot be planned.
    if (!m.shared_memory_logged.exchange(true)) {
      KILN_LOG(Recompiles, m.options.name,
               ": a tensor argument wraps memory another from_blob tensor wraps too; such calls "
               "run uncompiled (lazily)");
    }
    m.uncompiled.fetch_add(1, std::memory_order_relaxed);
    return body.call(body.self, args);
  }
  if (m.buckets.on() && is_lazy()) {
    bool hit_counted = false;
    // The entry `known` found for the padded arguments serves their run
    // right after it (entries are never dropped), so their guards are
    // checked once.
    Entry* known = nullptr;
    std::optional<std::vector<Tensor>> padded = m.buckets.call(
        args, body,
        [&](const std::vector<IValue>& a, bool just_known) {
          if (just_known && known != nullptr) {
            return m.run(*std::exchange(known, nullptr), a, body, &hit_counted);
          }
          return m.dispatch(a, body, &hit_counted);
        },
        [&](const std::vector<IValue>& a) {
          CallTimer guard_check(CallPhase::kGuards);
          known = m.lookup(a);
          return known != nullptr;
        });
    if (padded) return std::move(*padded);
  }
  return m.dispatch(args, body);
}

}  // namespace boxed

std::vector<Tensor> boxed::CompiledCore::Impl::dispatch(const std::vector<IValue>& args, Body body,
                                                        bool* hit_counted) {
  CallTimer guard_check(CallPhase::kGuards);
  Entry* found = lookup(args);
  guard_check.stop();
  if (found) return run(*found, args, body, hit_counted);
  Entry* hit = nullptr;
  std::vector<Tensor> results = compile(args, body, &hit);
  if (hit) return run(*hit, args, body, hit_counted);  // another thread built it meanwhile
  return results;
}

void boxed::CompiledCore::Impl::check_arguments(const std::vector<IValue>& args) {
  std::call_once(kinds_once, [&] {
    for (const IValue& a : args) kinds.push_back(a.tag());
  });
  auto arg_name = [&](size_t i) { return argument_name(i, "argument"); };
  KILN_CHECK(args.size() == kinds.size(), "[jit::compile] ", options.name, ": expected ",
             kinds.size(), " arguments (as in its first call), got ", args.size());
  KILN_CHECK(options.input_names.size() <= args.size(), "[jit::compile] ", options.name,
             ": expected at most one of Options::input_names per argument (", args.size(),
             "), got ", options.input_names.size());
  for (size_t i = 0; i < args.size(); ++i) {
    KILN_CHECK(args[i].tag() == kinds[i], "[jit::compile] ", options.name, ": ", arg_name(i),
               " expected ", IValue::tag_name(kinds[i]), " (as in its first call), got ",
               args[i].type_name());
    if (args[i].is_tensor()) {
      KILN_CHECK(args[i].to_tensor().defined(), "[jit::compile] ", options.name, ": ", arg_name(i),
                 " expected a defined Tensor, got an undefined one");
    }
    if (args[i].is_tensor_list()) {
      const std::vector<Tensor>& list = args[i].to_tensor_list();
      for (size_t k = 0; k < list.size(); ++k) {
        KILN_CHECK(list[k].defined(), "[jit::compile] ", options.name, ": ", arg_name(i),
                   " expected defined Tensors, got an undefined one at index ", k);
      }
    }
  }
}

guards::DynamicDims boxed::CompiledCore::Impl::dynamic_for(const std::vector<IValue>& args) const {
  guards::DynamicDims d;
  d.dims.assign(args.size(), 0);
  d.scalars.assign(args.size(), false);
  d.offsets.assign(args.size(), false);
  for (int i : dynamic_offsets) {
    if (i >= 0 && static_cast<size_t>(i) < args.size()) d.offsets[i] = true;
  }
  const std::string who = "[jit::compile] " + options.name + ": expected ";
  for (int i : options.dynamic_scalars) {
    KILN_CHECK(static_cast<size_t>(i) < args.size() && args[i].is_number(), who,
               "Options::dynamic_scalars to name number arguments, got argument ", i, " of a call ",
               "with ", args.size(), " arguments",
               static_cast<size_t>(i) < args.size()
                   ? std::string(" (a ") + args[i].type_name() + ")"
                   : std::string());
    d.scalars[i] = true;
  }
  for (size_t j = 0; j < dynamic.size(); ++j) {
    const DynamicDim& dd = dynamic[j];
    const auto k = static_cast<size_t>(dd.input);
    KILN_CHECK(k < args.size() && (args[k].is_tensor() || args[k].is_tensor_list()), who,
               "dynamic dims (Options::dynamic, mark_dynamic) of tensor arguments, got argument ",
               dd.input, " of a call with ", args.size(), " arguments",
               k < args.size() ? std::string(" (a ") + args[k].type_name() + ")" : std::string());
    const IValue& a = args[dd.input];
    // A dim kiln lifted itself names no contract: a call of another rank
    // simply misses the entry's guards.
    if (a.is_tensor() && a.to_tensor().defined() && !automatic[j]) {
      const int64_t rank = a.to_tensor().dim();
      KILN_CHECK(dd.dim >= -rank && dd.dim < rank, who, "dynamic dim ", dd.dim, " of argument ",
                 dd.input, " within its rank, got a tensor of rank ", rank);
    }
    // One mask per argument: a list's elements may differ in rank, so a dim
    // counted from the end marks its place in each (an element that has a
    // dim of that place but not that role takes it dynamic too: more plans,
    // never a wrong one).
    auto mark = [&](int64_t rank) {
      const int64_t dim = dd.dim < 0 ? dd.dim + rank : dd.dim;
      if (dim >= 0 && dim < rank && dim < 64) d.dims[dd.input] |= uint64_t{1} << dim;
    };
    if (a.is_tensor()) mark(a.to_tensor().dim());
    if (a.is_tensor_list()) {
      for (const Tensor& t : a.to_tensor_list()) mark(t.dim());
    }
  }
  return d;
}

Entry* boxed::CompiledCore::Impl::lookup(const std::vector<IValue>& args) const {
  std::shared_lock<std::shared_mutex> lock(entries_mu);
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if ((*it)->guards.check(args)) return it->get();
  }
  return nullptr;
}

std::vector<int64_t> boxed::CompiledCore::Impl::spec_key(const Entry& e,
                                                         const std::vector<IValue>& args) const {
  std::vector<int64_t> key;
  const guards::DynamicDims& d = e.guards.dynamic();
  for (size_t i = 0; i < args.size(); ++i) {
    const IValue& a = args[i];
    const uint64_t dims = i < d.dims.size() ? d.dims[i] : 0;
    auto sizes = [&](const Tensor& t) {
      for (int64_t k = 0; k < t.dim() && k < 64; ++k) {
        if ((dims >> k) & 1u) key.push_back(t.size(k));
      }
    };
    if (a.is_tensor() && dims) sizes(a.to_tensor());
    if (a.is_tensor_list() && dims) {
      for (const Tensor& t : a.to_tensor_list()) sizes(t);
    }
    if (i < d.scalars.size() && d.scalars[i]) key.push_back(scalar_key(a));
  }
  return key;
}

// The parts of spec_key(), in its order, said (Note [What a specialization is for]).
SpecializedFor boxed::CompiledCore::Impl::specialized_for(const Entry& e,
                                                          const std::vector<IValue>& args) const {
  SpecializedFor f;
  std::string sizes_label, scalars_label;
  const guards::DynamicDims& d = e.guards.dynamic();
  auto add = [&](std::string& to, const char* sep, const std::string& part) {
    to += (to.empty() ? "" : sep) + part;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const IValue& a = args[i];
    const uint64_t dims = i < d.dims.size() ? d.dims[i] : 0;
    auto sizes = [&](const Tensor& t, const std::string& who) {
      for (int64_t k = 0; k < t.dim() && k < 64; ++k) {
        if (!((dims >> k) & 1u)) continue;
        f.sizes.push_back(t.size(k));
        add(f.text, ", ", who + " dim " + std::to_string(k) + " = " + std::to_string(t.size(k)));
        add(sizes_label, "x", std::to_string(t.size(k)));
      }
    };
    if (a.is_tensor() && dims) sizes(a.to_tensor(), argument_name(i, "input"));
    if (a.is_tensor_list() && dims) {
      const std::vector<Tensor> list = a.to_tensor_list();
      for (size_t j = 0; j < list.size(); ++j) {
        sizes(list[j], argument_name(i, "input") + " [" + std::to_string(j) + "]");
      }
    }
    if (i < d.scalars.size() && d.scalars[i]) {
      std::string value = a.is_double() ? shortest_double(a.to_double())
                          : a.is_bool() ? (a.to_bool() ? "true" : "false")
                          : a.is_int()  ? std::to_string(a.to_int())
                                        : a.type_name();
      f.scalars = true;
      add(f.text, ", ", argument_name(i, "argument") + " = " + value);
      const bool named = i < options.input_names.size() && !options.input_names[i].empty();
      add(scalars_label, ", ",
          (named ? options.input_names[i] : argument_name(i, "argument")) + " = " + value);
    }
  }
  f.label = sizes_label;
  if (!scalars_label.empty()) f.label += (f.label.empty() ? "" : ", ") + scalars_label;
  return f;
}

// Note [Arguments that are captured tensors]
// Tracing gives each tensor argument a stand-in storage of its own (Note
// [Tracing stand-ins]), so a trace never learns that an argument is a tensor
// the function also captures: f(state) where f writes `state` and reads its
// argument ran the read and the write as two unrelated storages, in either
// order, and returned the value from before the write. Calls like that are
// rare and cannot be planned from such a trace: where an argument's storage
// is one the trace captured and the trace writes an argument or a captured
// tensor, the entry runs uncompiled (lazily, which is right), logged, and
// guards that argument to be that very storage, so that calls with other
// tensors keep matching the compiled entries. (Read-only functions are
// planned as usual: two names for memory nobody writes cannot disagree. Their
// entries also take such arguments later: the guard that an argument is on
// no captured storage used to fail every call f(w) of a function reading
// `w`, compiling a new entry per call up to the cache limit.) A later plan
// of an entry (another size) may write where its first did not: a call of
// such a plan given a tensor it captures runs uncompiled, and the entry,
// published and run by other threads meanwhile, is left as it is.
bool boxed::CompiledCore::Impl::aliases_captured(Entry& e, const std::vector<IValue>& args,
                                                 const Pristine& p) {
  if (p.captured.empty() || visible_writes(p).empty()) return false;
  const std::vector<const Tensor*> tensors = tensor_arguments(args);
  bool aliased = false;
  for (size_t k = 0; k < tensors.size(); ++k) {
    StorageImpl* s = tensors[k]->defined() ? tensors[k]->impl()->storage().get() : nullptr;
    if (!s || !p.captured.count(s)) continue;
    const std::string what = "argument " + std::to_string(k) + " in guard order";
    if (!e.specs.empty()) {
      // A later plan (a path only some sizes take writes): the entry is
      // published, and other threads check its guards and run its plans,
      // so neither changes; this call runs lazily and its plan is not kept.
      KILN_LOG(Recompiles, options.name, ": entry ", e.index, ": tensor ", what,
               " is a tensor the function also captures, and the plan for ",
               specialized_for(e, args).text, " writes: this call runs uncompiled (lazily)");
      return true;
    }
    e.guards.require_storage(k, s, what);
    if (!aliased) {
      e.uncompiled = true;
      e.why = "tensor " + what +
              " is a tensor the function also captures, and the function writes: a trace "
              "cannot model that";
      KILN_LOG(Recompiles, options.name, ": entry ", e.index, ": ", e.why,
               "; the entry runs uncompiled (lazily) for such calls");
    }
    aliased = true;
  }
  return aliased;
}

std::string boxed::CompiledCore::Impl::guard_later_captures(const Entry& e, Specialization& spec,
                                                            CallerObjects callers) {
  // As guard_captured: `callers` holds one reference on each object, and
  // through it one on its storage; they go before the storages are counted.
  for (const auto& [object, what] : callers) {
    if (object->use_count() - object->compiled_refs() - 1 > 0) {
      spec.objects.emplace_back(object.get(), what);
    }
  }
  callers.clear();
  const Pristine& p = spec.pristine;
  const std::unordered_set<const StorageImpl*> changed = changed_storages(p, visible_writes(p));
  std::string constant;
  for (const auto& [storage, what] : p.captured_uses) {
    if (e.guards.is_captured(storage)) continue;
    // Nothing outside compiled functions holds it: made while traced.
    if (storage->use_count() <= storage->compiled_refs()) {
      if (constant.empty() && changed.count(storage)) constant = what;
      continue;
    }
    spec.captured.emplace_back(storage, 1, what);
    for (const auto& [held_storage, held] : p.held_refs) {
      if (held_storage == storage && held > 1) {
        spec.captured.back().min_refs.fetch_add(held - 1, std::memory_order_relaxed);
      }
    }
  }
  return constant;
}

// The first plan of an entry fixes which captured storages are guarded:
// those that something outside the entry holds (Note [Guards]).
std::string boxed::CompiledCore::Impl::guard_captured(Entry& e, const Pristine& p,
                                                      const Instance& first,
                                                      CallerObjects callers) {
  e.hold(p.captured_impls);
  e.hold(first.captured_impls());
  // `callers` holds one reference on each object, and through it one on its
  // storage: they go before the storages are counted.
  for (const auto& [object, what] : callers) e.guards.guard_captured_object(object.get(), 1, what);
  callers.clear();
  // Note [Tensors a trace made from host values]
  // A tensor the function made from host values while traced (kiln::tensor,
  // from_blob of its own buffer) is captured like a weight, but nothing
  // outside holds it: a constant of the trace, shared by every replay. Read,
  // that is right. Written or returned, it is not: eager mode makes a fresh
  // one per call, where replays would accumulate into one (acc.add_(x)) or
  // hand every caller the same memory. Such an entry runs uncompiled.
  const std::vector<VisibleWrite> writes = visible_writes(p);
  const std::unordered_set<const StorageImpl*> changed = changed_storages(p, writes);
  // Note [Arguments that are captured tensors]: reads alone cannot disagree.
  if (writes.empty()) e.guards.allow_captured_arguments();
  std::string constant;
  for (const auto& [storage, what] : p.captured_uses) {
    if (!e.guards.guard_captured(storage, what) && constant.empty() && changed.count(storage)) {
      constant = what;
    }
  }
  for (const auto& [storage, held] : p.held_refs) e.guards.require_held_references(storage, held);
  return constant;
}

// Note [Calls that fail before they run]
// An instance whose memory cannot be planned (its arena does not fit) fails
// the call before any step runs. As a lazy trace whose plan fails (Note
// [Failures in a trace]), what the call writes into its arguments and
// captured tensors then carries the error: a KV cache is not left looking
// as if the step had never been asked for, and a compiled call fails as its
// lazy run would.
std::unique_ptr<Instance> boxed::CompiledCore::Impl::make_instance(
    const Entry& e, const Specialization& spec, const std::vector<IValue>& args) {
  try {
    auto inst = std::make_unique<Instance>(spec.pristine, instance_options(e, spec.what));
    instances.fetch_add(1, std::memory_order_relaxed);
    return inst;
  } catch (...) {
    auto failed = IntrusivePtr<FailedStorage>::make(std::current_exception());
    const std::vector<const Tensor*> tensors = tensor_arguments(args);
    for (const VisibleWrite& w : visible_writes(spec.pristine)) {
      StorageImpl* s = const_cast<StorageImpl*>(w.captured);
      const auto k = static_cast<size_t>(w.argument);
      if (!s && w.argument >= 0 && k < tensors.size() && tensors[k]->defined()) {
        s = tensors[k]->impl()->storage().get();
      }
      if (s) s->set_pending(failed);
    }
    throw;
  }
}

std::unique_ptr<Instance> boxed::CompiledCore::Impl::new_instance(Entry& e,
                                                                  const Specialization& spec,
                                                                  const std::vector<IValue>& args,
                                                                  Entry::Counted* counted) {
  auto inst = make_instance(e, spec, args);
  Entry::Counted held = e.hold(inst->captured_impls());
  if (counted) counted->insert(counted->end(), held.begin(), held.end());
  return inst;
}

Specialization* boxed::CompiledCore::Impl::specialize(Entry& e, const std::vector<IValue>& args,
                                                      Body body, std::vector<Tensor>* results) {
  const auto t0 = std::chrono::steady_clock::now();
  CallTimer tracing(CallPhase::kTrace);
  Traced traced = trace_function(args, body);
  tracing.stop();
  if (traced.broken) {
    breaks.fetch_add(1, std::memory_order_relaxed);
    e.uncompiled = true;
    e.why = "graph break: " + traced.break_reason;
    e.break_reason = traced.break_reason;
    KILN_LOG(Recompiles, options.name, ": entry ", e.index, "/", options.cache_limit, ": ", e.why,
             "; the entry runs uncompiled (lazily) from now on");
    *results = std::move(traced.outputs);
    return nullptr;
  }
  // The entry's first plan, before it is published (Note [Dynamic storage offsets]).
  if (e.specs.empty()) e.guards.keep_offsets(traced.fixed_offsets);
  CallTimer compiling(CallPhase::kCompile);
  auto spec = std::make_unique<Specialization>();
  if (!e.specs.empty()) {  // a later plan: its own (Note [Captured tensors of later plans])
    const std::vector<const Tensor*> tensors = tensor_arguments(args);
    for (size_t k = 0; k < traced.fixed_offsets.size() && k < tensors.size(); ++k) {
      if (traced.fixed_offsets[k])
        spec->exact_offsets.emplace_back(k, tensors[k]->storage_offset());
    }
  }
  spec->key = spec_key(e, args);
  spec->what = specialized_for(e, args);
  spec->pristine = make_pristine(std::move(traced));
  // The caller's objects leave the pristine: the entry's guards hold them.
  CallerObjects callers = std::move(spec->pristine.caller_objects);
  spec->pristine.caller_objects.clear();
  if (aliases_captured(e, args, spec->pristine)) {
    *results = body.call(body.self, args);  // the trace never ran: run it lazily
    return nullptr;
  }
  if (verify) {
    spec->signature =
        trace_signature(spec->pristine.nodes, spec->pristine.stand_ins, spec->pristine.captured);
  }
  spec->writes = !visible_writes(spec->pristine).empty();
  std::unique_ptr<Instance> inst;
  // A later plan of a published entry: what it counts goes back if it fails
  // (Note [A plan that failed to build]).
  Entry::Counted counted;
  struct Undo {
    Entry& e;
    std::unique_ptr<Specialization>& spec;
    std::unique_ptr<Instance>& inst;
    Entry::Counted& counted;
    ~Undo() {
      if (counted.empty()) return;
      e.forget(counted);
      inst.reset();
      spec.reset();
      e.release(counted);
    }
  } undo{e, spec, inst, counted};
  if (e.specs.empty()) {
    inst = make_instance(e, *spec, args);
    // Before results hold anything.
    const std::string constant = guard_captured(e, spec->pristine, *inst, std::move(callers));
    if (!constant.empty()) {
      e.uncompiled = true;
      e.why = "the function writes or returns a tensor it made from host values (" + constant +
              "): each call needs a fresh one";
      KILN_LOG(Recompiles, options.name, ": entry ", e.index, ": ", e.why,
               "; the entry runs uncompiled (lazily) from now on");
      *results = body.call(body.self, args);  // the trace never ran: run it lazily
      return nullptr;
    }
  } else {
    counted = e.hold(spec->pristine.captured_impls);
    inst = new_instance(e, *spec, args, &counted);
    const std::string constant = guard_later_captures(e, *spec, std::move(callers));
    if (!constant.empty()) {
      // As for a first plan, but only calls at this key run uncompiled.
      auto marker = std::make_unique<Specialization>();
      marker->key = spec->key;
      marker->what = spec->what;
      marker->uncompiled = "the function writes or returns a tensor it made from host values (" +
                           constant + "): each call needs a fresh one";
      KILN_LOG(Recompiles, options.name, ": entry ", e.index, ": the plan for ", spec->what.text,
               ": ", marker->uncompiled, "; such calls run uncompiled (lazily) from now on");
      e.specs.push_back(std::move(marker));
      *results = body.call(body.self, args);  // the trace never ran: run it lazily
      return nullptr;
    }
  }
  spec->steps = inst->steps();
  compiling.stop();
  *results = inst->run(args);
  steps.store(static_cast<int64_t>(spec->steps), std::memory_order_relaxed);
  spec->idle.push_back(std::move(inst));
  compile_ms.store(ms_since(t0), std::memory_order_relaxed);
  Specialization* raw = spec.get();
  e.specs.push_back(std::move(spec));
  counted.clear();  // kept: the plan is the entry's now
  return raw;
}

std::string boxed::CompiledCore::Impl::lift(const guards::Moved& moved, int failed_input,
                                            const std::vector<IValue>& args) {
  auto whose = [&](int input) {
    return input == failed_input ? std::string()
                                 : " of " + argument_name(static_cast<size_t>(input), "input");
  };
  // A dim the options declared dynamic moved only off a size of 0 or 1,
  // which the guards keep exact (Note [Guards]): said so, not "from now on".
  auto declared = [&](int input, int64_t dim) {
    for (const DynamicDim& d : options.dynamic) {
      if (d.input != input) continue;
      int64_t want = d.dim;
      const auto i = static_cast<size_t>(input);
      if (want < 0 && i < args.size() && args[i].is_tensor() && args[i].to_tensor().defined()) {
        want += args[i].to_tensor().dim();
      }
      if (want == dim) return true;
    }
    return false;
  };
  std::vector<std::string> parts, already;
  for (const auto& [input, dim] : moved.dims) {
    dynamic.push_back({input, dim});
    automatic.push_back(true);
    (declared(input, dim) ? already : parts).push_back("dim " + std::to_string(dim) + whose(input));
  }
  for (int input : moved.offsets) {
    dynamic_offsets.push_back(input);
    parts.push_back(input == failed_input ? "its storage offset"
                                          : "the storage offset" + whose(input));
  }
  auto listed = [](const std::vector<std::string>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) {
      out += i == 0 ? "" : i + 1 == v.size() ? " and " : ", ";
      out += v[i];
    }
    return out;
  };
  // A size of 0 or 1 stays exact in any case (Note [Guards]): a call of one
  // builds an entry of its own, said so.
  bool small = false;
  for (const auto& [input, dim] : moved.dims) {
    const auto i = static_cast<size_t>(input);
    if (i < args.size() && args[i].is_tensor() && args[i].to_tensor().defined() &&
        dim < args[i].to_tensor().dim() && args[i].to_tensor().size(dim) <= 1) {
      small = true;
    }
  }
  std::string note;
  if (!parts.empty()) {
    note += "; " + listed(parts) + (parts.size() == 1 ? " is" : " are") + " dynamic from now on";
    if (small) note += " (sizes 0 and 1 stay exact: this call's entry keeps its size)";
  }
  if (!already.empty()) {
    note += "; " + listed(already) + (already.size() == 1 ? " was" : " were") +
            " declared dynamic, but sizes 0 and 1 are kept exact: the entry before took the "
            "first call's, this one takes the other sizes";
  }
  return note;
}

std::vector<Tensor> boxed::CompiledCore::Impl::compile(const std::vector<IValue>& args, Body body,
                                                       Entry** hit) {
  std::lock_guard<std::mutex> lock(compile_mu);
  if (Entry* e = lookup(args)) {
    *hit = e;
    return {};
  }
  std::string reason = "first call";
  std::string dynamic_note;
  {
    std::shared_lock<std::shared_mutex> read(entries_mu);
    if (!entries.empty()) {
      guards::Failure f = entries.back()->guards.explain(args, options.input_names);
      reason = f.reason;
      if (options.automatic_dynamic && (f.size_dim >= 0 || f.offset) && f.input >= 0) {
        dynamic_note = lift(entries.back()->guards.moved(args), f.input, args);
      }
    }
  }
  const int count = static_cast<int>(entries.size());
  if (count >= options.cache_limit) {
    const std::string what = options.name + ": cache limit of " +
                             std::to_string(options.cache_limit) +
                             " entries reached; last guard failure: " + reason;
    KILN_CHECK(options.on_limit != OnLimit::Throw, "[jit::compile] ", what);
    if (!limit_warned) remember(0, what);
    if (!limit_warned) {
      limit_warned = true;
      kiln::detail::log_line(
          LogChannel::Recompiles,
          what + "; calls that match no entry run uncompiled (lazily) from now on");
    }
    uncompiled.fetch_add(1, std::memory_order_relaxed);
    return body.call(body.self, args);
  }
  auto e = std::make_shared<Entry>();
  e->index = count + 1;
  e->guards = guards::GuardSet::from_call(args, dynamic_for(args));
  if (!entries.empty()) e->guards.cap_alignment(entries.back()->guards);
  e->reason = reason + dynamic_note;
  buckets.forget();  // a captured tensor replaced may give results other sizes
  KILN_LOG(Recompiles, options.name, ": entry ", e->index, "/", options.cache_limit, ": ", reason,
           dynamic_note,
           count == 0 ? std::string("; compiling (mode ") + mode_name(options.mode) + ")"
                      : std::string(""));
  if (options.mode == Mode::MaxAutotune) {
    KILN_LOG(Recompiles, options.name,
             ": mode max-autotune times its skinny products both ways on the first run");
  }
  std::vector<Tensor> results;
  if (!is_lazy()) {
    e->uncompiled = true;
    e->why = "the caller runs eagerly (an EagerGuard or KILN_EAGER=1)";
    KILN_LOG(Recompiles, options.name, ": entry ", e->index, ": ", e->why,
             "; the entry runs the function eagerly");
    uncompiled.fetch_add(1, std::memory_order_relaxed);
    results = body.call(body.self, args);
  } else {
    std::lock_guard<std::mutex> spec_lock(e->mu);
    // The first run (never captured) times what it can (Note [Skinny matmul choice]).
    std::optional<kiln::cuda::MatmulTuning> tuning;
    if (options.mode == Mode::MaxAutotune) tuning.emplace();
    Specialization* spec = specialize(*e, args, body, &results);
    if (!spec) uncompiled.fetch_add(1, std::memory_order_relaxed);
  }
  if (log_enabled(LogChannel::Guards)) {
    for (const std::string& line : e->guards.describe(options.input_names)) {
      KILN_LOG(Guards, options.name, ": entry ", e->index, ": ", line);
    }
  }
  // Counted and in the history once built: a trace that threw built
  // nothing, and the next call's attempt would be listed twice.
  built.fetch_add(1, std::memory_order_relaxed);
  remember(e->index, e->reason);
  std::unique_lock<std::shared_mutex> write(entries_mu);
  entries.push_back(std::move(e));
  return results;
}

std::vector<Tensor> boxed::CompiledCore::Impl::run(Entry& e, const std::vector<IValue>& args,
                                                   Body body, bool* hit_counted) {
  if (e.uncompiled) {
    uncompiled.fetch_add(1, std::memory_order_relaxed);
    return body.call(body.self, args);
  }
  Specialization* spec = nullptr;
  std::vector<Tensor> results;
  CallTimer acquire(CallPhase::kAcquire);
  {
    std::lock_guard<std::mutex> lock(e.mu);
    if (e.specs.size() == 1 && !e.guards.dynamic().any()) {
      spec = e.specs[0].get();
    } else {
      const std::vector<int64_t> key = spec_key(e, args);
      for (const auto& s : e.specs) {
        if (!s->stale && s->key == key) spec = s.get();
      }
      // Note [Captured tensors of later plans].
      if (spec && !spec->holds()) {
        spec->stale = true;  // it still counts towards the limit: replacements are bounded
        KILN_LOG(Recompiles, options.name, ": entry ", e.index, ": the plan for ", spec->what.text,
                 " reads a captured tensor that was replaced; building it again");
        spec = nullptr;
      }
      if (!spec) {
        if (static_cast<int>(e.specs.size()) >= options.specialization_limit) {
          if (!e.specs_warned) {
            e.specs_warned = true;
            bool scalars = false;
            for (const auto& sp : e.specs) {
              scalars = scalars || sp->what.scalars;
            }
            std::string seen;  // "2, 3"; with scalars' values "4, t = 0.5; 5, t = 0.7"
            for (const auto& sp : e.specs) {
              seen += (seen.empty() ? "" : scalars ? "; " : ", ") + sp->what.label;
            }
            kiln::detail::log_line(
                LogChannel::Recompiles,
                options.name + ": entry " + std::to_string(e.index) + ": " +
                    std::to_string(e.specs.size()) +
                    (scalars ? " sizes and values of its dynamic dims and scalars"
                             : " sizes of its dynamic dims") +
                    " seen (" + seen +
                    "), the limit; further ones run uncompiled: consider Options::buckets" +
                    (scalars ? ", and a 0-dim tensor argument for a value that changes every call"
                             : ""));
          }
          uncompiled.fetch_add(1, std::memory_order_relaxed);
          return body.call(body.self, args);
        }
        const size_t number = e.specs.size() + 1;
        const std::string what = "a plan for " + specialized_for(e, args).text +
                                 " (specialization " + std::to_string(number) + ")";
        KILN_LOG(Recompiles, options.name, ": entry ", e.index, ": ", what);
        const int64_t kernels_before = kernels_built();
        if (!specialize(e, args, body, &results)) {
          uncompiled.fetch_add(1, std::memory_order_relaxed);  // as compile() counts it
          return results;
        }
        // Counted and remembered once built (a trace that threw built nothing).
        specializations.fetch_add(1, std::memory_order_relaxed);
        remember(e.index, what);
        // Note [What a specialization is for]: sizes are kernel arguments,
        // constants (a dynamic scalar's value) are compiled in.
        const int64_t kernels = kernels_built() - kernels_before;
        KILN_LOG(Recompiles, options.name, ": entry ", e.index, ": specialization ", number,
                 " compiled ", kernels, kernels == 1 ? " kernel" : " kernels",
                 kernels > 0 && e.specs.back()->what.scalars
                     ? " (a scalar's value picked the code of kernels that read it: pass a "
                       "value that changes every call as a 0-dim tensor)"
                     : "");
        count_hit(hit_counted);
        return results;
      }
    }
  }
  if (!spec->uncompiled.empty()) {
    uncompiled.fetch_add(1, std::memory_order_relaxed);
    return body.call(body.self, args);
  }
  if (!spec->exact_offsets.empty()) {
    const std::vector<const Tensor*> tensors = tensor_arguments(args);
    for (const auto& [k, offset] : spec->exact_offsets) {
      if (tensors[k]->storage_offset() == offset) continue;
      KILN_LOG(Recompiles, options.name, ": entry ", e.index, ": the plan for ", spec->what.text,
               " made a view of tensor argument ", k, " (guard order) at an explicit storage ",
               "offset, traced at offset ", offset, ", got ", tensors[k]->storage_offset(),
               ": this call runs uncompiled (lazily)");
      uncompiled.fetch_add(1, std::memory_order_relaxed);
      return body.call(body.self, args);
    }
  }
  // Note [Arguments that are captured tensors]: the entry's guards let such
  // an argument through where its first plan writes nothing; a later plan
  // that writes cannot take it. (Where the first plan writes, the guards
  // refused such an argument already: a writing step pays nothing here.)
  if (spec->writes && e.guards.captured_arguments_allowed() && !spec->pristine.captured.empty()) {
    const std::vector<const Tensor*> tensors = tensor_arguments(args);
    for (size_t k = 0; k < tensors.size(); ++k) {
      if (!spec->pristine.captured.count(tensors[k]->impl()->storage().get())) continue;
      KILN_LOG(Recompiles, options.name, ": entry ", e.index, ": tensor argument ", k,
               " in guard order is a tensor the function also captures, and the plan for ",
               spec->what.text, " writes: this call runs uncompiled (lazily)");
      uncompiled.fetch_add(1, std::memory_order_relaxed);
      return body.call(body.self, args);
    }
  }
  if (verify) {
    Traced again = trace_function(args, body);
    verified.fetch_add(1, std::memory_order_relaxed);
    KILN_CHECK(!again.broken, "[jit::compile] ", options.name, ": verify: tracing again broke (",
               again.break_reason, ") where the cached entry did not");
    Pristine p = make_pristine(std::move(again));
    std::vector<std::string> sig = trace_signature(p.nodes, p.stand_ins, p.captured);
    const size_t n = std::min(sig.size(), spec->signature.size());
    for (size_t i = 0; i <= n; ++i) {
      if (i == n && sig.size() == spec->signature.size()) break;
      const std::string expected = i < spec->signature.size() ? spec->signature[i] : "the end";
      const std::string got = i < sig.size() ? sig[i] : "the end";
      KILN_CHECK(expected == got, "[jit::compile] ", options.name,
                 ": verify: the function's trace differs from the cached entry ", e.index,
                 " at op ", i, ": expected ", expected, ", got ", got,
                 " (host control flow changed between calls)");
    }
  }
  std::unique_ptr<Instance> inst;
  {
    std::lock_guard<std::mutex> lock(spec->mu);
    if (!spec->idle.empty()) {
      inst = std::move(spec->idle.back());
      spec->idle.pop_back();
    }
  }
  if (!inst) inst = new_instance(e, *spec, args);
  acquire.stop();
  Lease lease(*spec, std::move(inst));
  count_hit(hit_counted);
  steps.store(static_cast<int64_t>(spec->steps), std::memory_order_relaxed);
  results = (*lease).run(args);
  graph_nodes.store(static_cast<int64_t>((*lease).graph_nodes()), std::memory_order_relaxed);
  profile_call_done((*lease).runs() > 2);
  return results;
}

}  // namespace kiln::jit
