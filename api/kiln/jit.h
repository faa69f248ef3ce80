#pragma once

// Lazy execution controls. By default every op is recorded into a per-thread
// trace and runs, fused and compiled, when a value is needed (item(),
// data_ptr(), printing, kiln::sync(), a full trace). KILN_EAGER=1 turns
// recording off for the whole process; EagerGuard for a scope.

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/api.h"
#include "kiln/dispatch.h"
#include "kiln/error.h"
#include "kiln/ivalue.h"

namespace kiln {

// Ops inside the scope run at once through their backend kernels.
class KILN_API EagerGuard {
 public:
  EagerGuard();
  ~EagerGuard();
  EagerGuard(const EagerGuard&) = delete;
  EagerGuard& operator=(const EagerGuard&) = delete;

 private:
  ExcludeKeyGuard guard_;
};

namespace jit {

// True when ops on this thread are recorded (not in an EagerGuard, not KILN_EAGER=1).
KILN_API bool is_lazy();
// Runs what this thread recorded; raises a dropped result's failure (Note [Failures in a trace]).
KILN_API void flush();
// While jit::compile traces a function: the entry's guard on `t`'s storage (a
// captured tensor, Note [Guards]) asks for at least `held` references held
// outside the trace, where it otherwise asks for one. For views of one
// storage that a function chooses its path by (Note [Fused projections] in
// kiln/nn/layers.h): one of them replaced by another tensor then fails the
// guard. Nothing outside a trace.
KILN_API void guard_held_references(const Tensor& t, int32_t held);
// Counters of this process's lazy execution, for tests and benchmarks.
struct TraceStats {
  int64_t recorded_ops = 0;     // ops recorded
  int64_t flushes = 0;          // times a trace ran
  int64_t executed_nodes = 0;   // nodes that ran
  int64_t dead_nodes = 0;       // nodes dropped because nothing needed them
  int64_t eager_fallbacks = 0;  // ops run eagerly because they could not be traced
  int64_t cse_merged = 0;       // nodes whose consumers read an identical earlier node's output
  int64_t planned_bytes = 0;    // last run: the memory plan's arenas (Note [Memory plan])
  int64_t naive_bytes = 0;      // last run: the same buffers allocated one by one
};
KILN_API TraceStats trace_stats();

// ---------------------------------------------------------------------------
// jit::compile
//
//   auto step = kiln::jit::compile(
//       [&](const kiln::Tensor& ids, const kiln::Tensor& pos) { return model.decode_step(ids, pos,
//       cache); },
//       {.name = "decode", .input_names = {"ids", "pos"}});
//   kiln::Tensor logits = step(ids, pos);
//
// The first call traces `fn` with stand-ins for its tensor arguments, runs the
// passes, compiles the kernels and keeps the resulting plan behind guards
// (Note [Guards] in guards/guards.h). Later calls whose arguments pass the
// guards run the plan on the new arguments: no call of `fn`, no recording, no
// passes. `fn` must be pure in its arguments: what else it reads (weights,
// a KV cache, C++ variables) is bound when it is traced; tensors it reads are
// read again on every call (a weight updated in place is seen), and a
// captured tensor replaced by another recompiles. A value read on the host
// while tracing (item(), data_ptr(), printing, to(cpu)) is a graph break: the
// entry then runs `fn` uncompiled (lazily), logged, never wrong.
//
// Arguments: Tensor, std::vector<Tensor>, integers, floating numbers, bool.
// Results: Tensor, std::vector<Tensor>, std::tuple or std::pair of those
// (nested too), with at most one std::vector<Tensor> (Note [Result shapes]).
// Results are fresh tensors on every call (a later call never overwrites
// them), except those that are an argument or a captured tensor itself.
//
// Concurrency: calls from several threads run side by side, each on its own
// instance of the plan (its own intermediates; on CUDA, the caller's current
// stream); an entry builds a second instance only when two calls overlap.
// Copies of a Compiled share its cache; give each thread a copy (or keep the
// object alive until every call on it has returned: destroying or assigning
// to a Compiled while another thread calls that same object is a data race).
// A moved-from Compiled raises on every use. Writes that another thread
// makes to a captured tensor (a weight updated in place) are not ordered
// with the calls running meanwhile: a call may read part old and part new
// values. Order them as for eager writes (README, Compiled functions).

enum class Mode {
  ReduceOverhead,  // on CUDA: the plan replays as one CUDA graph (default)
  Default,         // the plan's kernels launched one by one
  // As ReduceOverhead, and an entry's first run (never captured) times
  // each few-row matmul both ways (cuBLASLt, or the generated skinny kernel
  // with or without its norm prologue) and keeps the faster, on disk too
  // (Note [Skinny matmul choice]); KILN_LOGS=perf prints each choice.
  MaxAutotune,
};

// What a call does when no entry holds and `cache_limit` entries exist.
enum class OnLimit {
  RunUncompiled,  // runs `fn` lazily; says so once, loudly, on stderr
  Throw,          // raises kiln::Error
};

struct DynamicDim {
  int input = 0;    // argument index (for a list argument: each element)
  int64_t dim = 0;  // negative counts from the end
};

struct Options {
  std::string name = "compiled";  // in every log line
  Mode mode = Mode::ReduceOverhead;
  int cache_limit = 8;               // entries (different guards) kept
  std::vector<DynamicDim> dynamic;   // dims dynamic from the first compile
  std::vector<int> dynamic_scalars;  // scalar arguments not guarded as constants
  bool automatic_dynamic = true;     // dims and offsets that changed are dynamic next time
  OnLimit on_limit = OnLimit::RunUncompiled;
  // Traces `fn` again on every call and compares the trace with the cached
  // entry: a difference (host control flow that changed) raises an error
  // naming the first op that differs. KILN_COMPILE_VERIFY=1 turns it on for
  // every compiled function.
  bool verify = false;
  std::vector<std::string> input_names;  // argument names for logs (optional)
  // Sizes the `dynamic` dims are padded up to (with zeros), e.g. {1, 2, 4,
  // 8, 16, 32}: one plan per bucket; empty: one plan per size. Dims of the
  // same size are padded together; results come back at the sizes the
  // function gives unpadded (learned once per argument sizes by a trace).
  // Rows along a padded dim must not mix: the first call at each size of a
  // function that writes nothing but its results also runs it unpadded and
  // compares, and a difference turns buckets off (logged). Note [Buckets].
  std::vector<int64_t> buckets;
  // Distinct sizes (or dynamic scalar values) one entry specializes for
  // before it warns and runs further ones uncompiled.
  int specialization_limit = 32;
  // On CUDA, ReduceOverhead and MaxAutotune: a plan of a single kernel is
  // captured and replayed as a graph of one node too. Off (the design's
  // rule), it launches its kernel directly. On an H200 a graph of one node
  // waits less than the kernel's own launch (chain16 4096: 10.1-10.3 ->
  // 7.9-9.2 us per call), for a capture (0.3 ms) and a private pool per
  // instance (Note [Plans of one kernel] in jit/compile/instance.cpp).
  bool graph_single_kernel = false;
};

struct CompileStats {
  int64_t calls = 0;
  int64_t hits = 0;              // calls whose arguments an entry's guards passed, without
                                 // a new entry (its plan for new sizes may be built then)
  int64_t entries = 0;           // entries built (the first compile and every recompile)
  int64_t specializations = 0;   // plans built for new sizes of a dynamic entry
  int64_t uncompiled_calls = 0;  // calls that ran `fn` lazily (graph break, limit, eager mode)
  int64_t graph_breaks = 0;
  int64_t instances = 0;         // plan instances (one more per overlapping caller)
  int64_t verified = 0;          // calls re-traced and compared (verify)
  int64_t kernels_per_call = 0;  // steps of the last plan run: generated kernels and extern calls
  int64_t graph_nodes = 0;       // nodes of the last call's CUDA graph (0: no graph)
  double last_compile_ms = 0;    // the last entry's trace, passes, compile and first run
};

// What explain() reports (jit/compile/explain.cpp prints it).
// One plan of an entry: what a call of it launches.
struct ExplainPlan {
  std::vector<int64_t> sizes;  // the dynamic dims' sizes it is for (empty: static)
  // What it is for, named: "input 0 'ids' dim 1 = 17, argument 2 't' = 0.7" (empty: static).
  std::string specialized_for;
  int64_t steps = 0;              // generated kernels and extern calls, in order
  int64_t generated_kernels = 0;  // fused pointwise and reduction kernels
  int64_t extern_calls = 0;       // ops run by their own kernels (matmul, ...)
  std::vector<std::string>
      kernels;  // per step: "fused kernel: mul, add over [4, 16]", "extern: mm"
  std::vector<std::string> externs;  // the extern steps' ops
  int64_t arena_bytes = 0;           // the plan's planned intermediate memory
  int64_t graph_nodes = 0;           // nodes of its CUDA graph (0: none captured)
  // Kernels of the graph that start while the one before them finishes
  // (Hopper's programmatic dependent launch; 0 before sm_90 or with KILN_PDL=0).
  int64_t early_launches = 0;
};

// One entry: the guards its calls pass and the plans built under them.
struct ExplainEntry {
  int index = 0;           // 1-based, in creation order
  std::string reason;      // why it was built: "first call", the guard failure
  bool compiled = false;   // false: it runs the function uncompiled
  std::string uncompiled;  // why it runs uncompiled ("graph break: ...")
  std::vector<std::string> guards;
  std::vector<ExplainPlan> plans;
};

// A trace that broke: where, and why.
struct GraphBreak {
  int entry = 0;
  int64_t op_index = -1;   // the recorded op whose value was needed (-1: an argument was read)
  std::string op;          // its name ("" when none)
  int64_t after_ops = -1;  // ops recorded when it broke (-1: unknown)
  std::string reason;      // as the trace gave it
};

// An entry or a plan built after a call matched none (the recompile log's lines).
struct Recompile {
  int entry = 0;  // the entry built or specialized (0: none, the cache limit was reached)
  std::string reason;
};

struct KILN_API Explanation {
  std::string name;
  CompileStats stats;
  std::vector<ExplainEntry> entries;
  std::vector<GraphBreak> graph_breaks;
  std::vector<Recompile> recompiles;
  std::string str() const;
};
KILN_API std::ostream& operator<<(std::ostream& os, const Explanation& e);

namespace boxed {

// Calls the typed function with type-erased arguments (stand-ins while tracing).
struct Body {
  void* self;
  std::vector<Tensor> (*call)(void* self, const std::vector<IValue>& args);
};

// Raises the kiln::Error of a call on a moved-from Compiled.
[[noreturn]] KILN_API void raise_moved_from();

class KILN_API CompiledCore {
 public:
  explicit CompiledCore(Options options);
  ~CompiledCore();
  CompiledCore(const CompiledCore&) = delete;
  CompiledCore& operator=(const CompiledCore&) = delete;

  std::vector<Tensor> call(const std::vector<IValue>& args, Body body);
  void mark_dynamic(int input, int64_t dim);
  CompileStats stats() const;
  Explanation explain() const;
  const Options& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

template <class T>
IValue to_ivalue(const T& v) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, Tensor> || std::is_same_v<D, std::vector<Tensor>>) {
    return IValue(v);
  } else if constexpr (std::is_same_v<D, bool>) {
    return IValue(v);
  } else if constexpr (std::is_integral_v<D>) {
    return IValue(static_cast<int64_t>(v));
  } else if constexpr (std::is_floating_point_v<D>) {
    return IValue(static_cast<double>(v));
  } else {
    static_assert(sizeof(D) == 0,
                  "jit::compile: arguments are Tensor, std::vector<Tensor>, integers, floating "
                  "numbers or bool");
  }
}

template <class T>
T from_ivalue(const IValue& v) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, Tensor>) {
    return v.to_tensor();
  } else if constexpr (std::is_same_v<D, std::vector<Tensor>>) {
    return v.to_tensor_list();
  } else if constexpr (std::is_same_v<D, bool>) {
    return v.to_bool();
  } else if constexpr (std::is_integral_v<D>) {
    return static_cast<D>(v.to_int());
  } else {
    return static_cast<D>(v.to_double());
  }
}

// Note [Result shapes]
// A compiled call's results come back from the plan as one flat list, and a
// replay never calls `fn`, so a result type is unpacked from that list by
// its type alone: each Tensor takes one, and a std::vector<Tensor> takes
// what the others leave, wherever it stands in a tuple (it used to take
// everything after it, so a tensor after it in a tuple read past the list).
// Two vectors in one result could not be told apart: that does not compile.
template <class R>
struct ResultShape {
  static constexpr bool valid = false;
  static constexpr size_t tensors = 0, vectors = 0;
};
template <>
struct ResultShape<Tensor> {
  static constexpr bool valid = true;
  static constexpr size_t tensors = 1, vectors = 0;
};
template <>
struct ResultShape<std::vector<Tensor>> {
  static constexpr bool valid = true;
  static constexpr size_t tensors = 0, vectors = 1;
};
template <class... T>
struct ResultShape<std::tuple<T...>> {
  static constexpr bool valid = (ResultShape<std::decay_t<T>>::valid && ...);
  static constexpr size_t tensors = (size_t{0} + ... + ResultShape<std::decay_t<T>>::tensors);
  static constexpr size_t vectors = (size_t{0} + ... + ResultShape<std::decay_t<T>>::vectors);
};
template <class T, class U>
struct ResultShape<std::pair<T, U>> : ResultShape<std::tuple<T, U>> {};

template <class R>
void flatten_into(const R& r, std::vector<Tensor>& out) {
  if constexpr (std::is_same_v<R, Tensor>) {
    out.push_back(r);
  } else if constexpr (std::is_same_v<R, std::vector<Tensor>>) {
    out.insert(out.end(), r.begin(), r.end());
  } else {
    std::apply([&](const auto&... t) { (flatten_into(t, out), ...); }, r);
  }
}

// Takes `R` from `v` at `k`; a vector in it takes `vector_length` tensors.
template <class R>
R unflatten(std::vector<Tensor>& v, size_t& k, size_t vector_length);

template <class R, size_t... I>
R unflatten_tuple(std::vector<Tensor>& v, size_t& k, size_t vector_length,
                  std::index_sequence<I...>) {
  // Braces: the elements are taken in order.
  return R{unflatten<std::decay_t<std::tuple_element_t<I, R>>>(v, k, vector_length)...};
}

template <class R>
R unflatten(std::vector<Tensor>& v, size_t& k, size_t vector_length) {
  if constexpr (std::is_same_v<R, Tensor>) {
    return std::move(v[k++]);
  } else if constexpr (std::is_same_v<R, std::vector<Tensor>>) {
    const auto first = v.begin() + static_cast<std::ptrdiff_t>(k);
    std::vector<Tensor> r(
        std::make_move_iterator(first),
        std::make_move_iterator(first + static_cast<std::ptrdiff_t>(vector_length)));
    k += vector_length;
    return r;
  } else {
    return unflatten_tuple<R>(v, k, vector_length,
                              std::make_index_sequence<std::tuple_size_v<R>>{});
  }
}

// The result of type `R` from a call's flat results (Note [Result shapes]).
template <class R>
R unflatten_result(std::vector<Tensor>& v) {
  using Shape = ResultShape<R>;
  KILN_CHECK(v.size() >= Shape::tensors && (Shape::vectors == 1 || v.size() == Shape::tensors),
             "[jit::compile] expected ", Shape::tensors, Shape::vectors ? " or more" : "",
             " results for the function's result type, got ", v.size());
  size_t k = 0;
  return unflatten<R>(v, k, v.size() - Shape::tensors);
}

}  // namespace boxed

// A compiled function (copies share one cache).
template <class F>
class Compiled {
 public:
  Compiled(F fn, Options options)
      : fn_(std::make_shared<F>(std::move(fn))),
        core_(std::make_shared<boxed::CompiledCore>(std::move(options))) {}

  template <class... A>
  auto operator()(const A&... args) {
    using R = std::decay_t<std::invoke_result_t<F&, const A&...>>;
    if (!core_) boxed::raise_moved_from();
    static_assert(boxed::ResultShape<R>::valid,
                  "jit::compile: a compiled function returns a Tensor, a std::vector<Tensor>, "
                  "or a std::tuple / std::pair of those");
    static_assert(boxed::ResultShape<R>::vectors <= 1,
                  "jit::compile: a result holds at most one std::vector<Tensor> (Note [Result "
                  "shapes] in kiln/jit.h): return the others as one vector, or as tensors");
    std::vector<IValue> boxed;
    boxed.reserve(sizeof...(A));
    (boxed.push_back(boxed::to_ivalue(args)), ...);
    auto body = [](void* self, const std::vector<IValue>& in) {
      F& fn = *static_cast<F*>(self);
      std::vector<Tensor> out;
      invoke_boxed<A...>(fn, in, out, std::index_sequence_for<A...>{});
      return out;
    };
    std::vector<Tensor> out = core_->call(boxed, boxed::Body{fn_.get(), body});
    return boxed::unflatten_result<R>(out);
  }

  // Makes dim `dim` of argument `input` dynamic for the entries built from now on.
  void mark_dynamic(int input, int64_t dim) { live().mark_dynamic(input, dim); }
  CompileStats stats() const { return live().stats(); }
  // Its entries and guards, plans, graph breaks and recompiles so far.
  Explanation explain() const { return live().explain(); }

 private:
  template <class... A, size_t... I>
  static void invoke_boxed(F& fn, const std::vector<IValue>& in, std::vector<Tensor>& out,
                           std::index_sequence<I...>) {
    boxed::flatten_into(fn(boxed::from_ivalue<A>(in[I])...), out);
  }

  boxed::CompiledCore& live() const {
    if (!core_) boxed::raise_moved_from();
    return *core_;
  }

  std::shared_ptr<F> fn_;
  std::shared_ptr<boxed::CompiledCore> core_;
};

template <class F>
Compiled<std::decay_t<F>> compile(F&& fn, Options options = {}) {
  return Compiled<std::decay_t<F>>(std::forward<F>(fn), std::move(options));
}

// Compiles `fn`, calls it once on `args` and says what that did (as
// torch._dynamo.explain): its entry and guards, plan, graph breaks.
template <class F, class... A>
Explanation explain(F&& fn, const A&... args) {
  auto compiled = compile(std::forward<F>(fn), {.name = "explain"});
  (void)compiled(args...);
  return compiled.explain();
}

}  // namespace jit
}  // namespace kiln
