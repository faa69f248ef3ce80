// The op registry and the dispatcher's slow paths: registration, table
// computation, boxed calls by name, argument normalization.

#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "allocator/allocator.h"
#include "kiln/dispatch.h"
#include "runtime/profiler/recorder.h"

namespace kiln {

const char* dispatch_key_name(DispatchKey k) {
  switch (k) {
    case DispatchKey::Meta:
      return "Meta";
    case DispatchKey::CPU:
      return "CPU";
    case DispatchKey::CUDA:
      return "CUDA";
    case DispatchKey::Lazy:
      return "Lazy";
    case DispatchKey::Autocast:
      return "Autocast";
    case DispatchKey::AllBackends:
      return "AllBackends";
    case DispatchKey::Composite:
      return "Composite";
    case DispatchKey::kCount:
      break;
  }
  return "?";
}

namespace {

std::string key_list(uint64_t bits) {
  std::string s;
  for (int k = kNumDispatchKeys - 1; k >= 0; --k) {
    if ((bits >> k) & 1) {
      if (!s.empty()) s += ", ";
      s += dispatch_key_name(static_cast<DispatchKey>(k));
    }
  }
  return s.empty() ? "none" : s;
}

}  // namespace

namespace detail {

__thread LocalDispatchKeySet tls_local_keys __attribute__((tls_model("initial-exec")));
__thread const char* tls_current_op __attribute__((tls_model("initial-exec"))) = nullptr;
uint64_t g_default_keys = 0;

}  // namespace detail

namespace {

// A key a call can carry: not an alias, not a cast integer (key_bit of one
// would shift past 64 bits). Note [Enum arguments].
void check_call_key(DispatchKey k, const char* what) {
  KILN_CHECK(static_cast<int>(k) < kNumDispatchKeys, "[", what,
             "] expected a dispatch key Meta, CPU, CUDA, Lazy or Autocast, got ",
             dispatch_key_name(k), " (", static_cast<int>(k), ")");
}

}  // namespace

IncludeKeyGuard::IncludeKeyGuard(DispatchKey k) : saved_(detail::local_keys().included) {
  check_call_key(k, "IncludeKeyGuard");
  detail::local_keys().included |= key_bit(k);
}
IncludeKeyGuard::~IncludeKeyGuard() {
  detail::local_keys().included = saved_;
}

ExcludeKeyGuard::ExcludeKeyGuard(DispatchKey k, bool and_above)
    : saved_(detail::local_keys().excluded) {
  check_call_key(k, "ExcludeKeyGuard");
  uint64_t bits = and_above ? ~(key_bit(k) - 1) : key_bit(k);
  detail::local_keys().excluded |= bits;
}
ExcludeKeyGuard::~ExcludeKeyGuard() {
  detail::local_keys().excluded = saved_;
}

// ---------------------------------------------------------------------------
// OperatorEntry

OperatorEntry::OperatorEntry(FunctionSchema schema)
    : schema_(std::move(schema)), name_(schema_.full_name()) {}

void OperatorEntry::fail_no_kernel(uint64_t keys) const {
  KILN_FAIL("[", name_, "] no kernel for ", key_list(keys), " (kernels: ", key_list(mask_), ")");
}

void OperatorEntry::log_dispatch(uint64_t tensor_keys, int key) const {
  const LocalDispatchKeySet& l = detail::local_keys();
  const uint64_t ks = (tensor_keys | l.included | detail::g_default_keys) & ~l.excluded;
  detail::log_line(LogChannel::Dispatch,
                   detail::str(name_, ": keys {", key_list(ks), "} -> ",
                               dispatch_key_name(static_cast<DispatchKey>(key)),
                               unboxed_[key] ? "" : " (boxed)"));
}

// ---------------------------------------------------------------------------
// Observers

// Note [Dispatch observers]
// The dispatch log and the profiler watch every op call. Unobserved, a call
// pays one relaxed load of g_dispatch_hooks and a predicted branch (after
// choosing its kernel, so the load overlaps that work); observed, it takes the
// out-of-line call_observed, which logs and records around the same kernel
// call. Each observer owns a bit: set_logs() sets kDispatchLogHook when the
// dispatch channel is on, a recording Profile sets kProfilerHook.
namespace detail {

std::atomic<uint32_t> g_dispatch_hooks{0};

void set_dispatch_hook(uint32_t hook, bool on) {
  if (on) {
    g_dispatch_hooks.fetch_or(hook, std::memory_order_relaxed);
  } else {
    g_dispatch_hooks.fetch_and(~hook, std::memory_order_relaxed);
  }
}

ObservedCall::ObservedCall(const OperatorEntry& op, uint64_t tensor_keys, int key)
    : op_(op), key_(key) {
  if (log_enabled(LogChannel::Dispatch)) op.log_dispatch(tensor_keys, key);
  wants_sizes_ = profiler::detail::recording() && profiler::detail::record_shapes();
}

void ObservedCall::start(std::vector<std::vector<int64_t>> sizes) {
  if (!profiler::detail::recording()) return;
  const profiler::detail::Handle h =
      profiler::detail::begin(profiler::EventKind::Op, op_.name(), std::move(sizes));
  buffer_ = h.buffer;
  session_ = h.session;
  index_ = h.index;
  if (key_ == static_cast<int>(DispatchKey::CUDA) && profiler::detail::gpu_recording()) {
    gpu_span_ = new profiler::detail::GpuSpan(-1, profiler::EventKind::GpuOp, op_.name());
  }
}

ObservedCall::~ObservedCall() {
  delete static_cast<profiler::detail::GpuSpan*>(gpu_span_);
  if (buffer_) {
    profiler::detail::end(
        {static_cast<profiler::detail::ThreadBuffer*>(buffer_), session_, index_});
  }
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Registry

class Dispatcher {
 public:
  static Dispatcher& get() {
    static auto* d = new Dispatcher();  // leaked: ops are called during static teardown
    return *d;
  }

  void def(FunctionSchema schema) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    std::string name = schema.full_name();
    KILN_CHECK(ops_.find(name) == ops_.end(), "[KILN_LIBRARY] op '", name, "' is defined twice");
    auto entry = std::make_unique<OperatorEntry>(std::move(schema));
    OperatorEntry* e = entry.get();
    ops_[name] = std::move(entry);
    order_.push_back(e);
    auto pending = pending_.find(name);
    if (pending != pending_.end()) {
      for (auto& p : pending->second) apply_impl(*e, p);
      pending_.erase(pending);
    }
    compute_table(*e);
  }

  struct PendingImpl {
    DispatchKey key;
    void* unboxed = nullptr;
    BoxedKernel boxed = nullptr;
    const std::type_info* sig = nullptr;
    UnboxedCaller caller = nullptr;
    void (*check)(const FunctionSchema&, const char*) = nullptr;
  };

  void impl(const std::string& name, PendingImpl p) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    auto it = ops_.find(name);
    if (it == ops_.end()) {
      pending_[name].push_back(p);
      return;
    }
    apply_impl(*it->second, p);
    compute_table(*it->second);
  }

  void fallback(DispatchKey key, BoxedKernel fn) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    KILN_CHECK(static_cast<int>(key) < kNumDispatchKeys, "[KILN_LIBRARY_IMPL] fallback for ",
               dispatch_key_name(key), ": expected a dispatch key, got an alias");
    fallbacks_[static_cast<int>(key)] = fn;
    for (OperatorEntry* e : order_) compute_table(*e);
  }

  const OperatorEntry* find(std::string_view name) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    auto it = ops_.find(std::string(name));
    if (it != ops_.end()) return it->second.get();
    if (name.substr(0, 6) == "kiln::") return find(name.substr(6));
    return nullptr;
  }

  std::vector<OpHandle> all() {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    std::vector<OpHandle> v;
    for (const OperatorEntry* e : order_) v.emplace_back(e);
    return v;
  }

  bool has_pending(std::string_view name) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return pending_.count(std::string(name)) > 0;
  }

 private:
  void apply_impl(OperatorEntry& e, const PendingImpl& p) {
    const char* key_name = dispatch_key_name(p.key);
    if (p.unboxed) {
      if (e.signature_ == nullptr) {
        p.check(e.schema_, key_name);
        e.signature_ = p.sig;
        e.unboxed_caller_ = p.caller;
      } else {
        KILN_CHECK(*e.signature_ == *p.sig, "[KILN_LIBRARY_IMPL] kernel for ", e.name_, " (",
                   key_name, ") has a different C++ signature than the op's other kernels");
      }
    }
    OperatorEntry::Registered r{p.unboxed, p.boxed};
    switch (p.key) {
      case DispatchKey::Composite:
        e.composite_ = r;
        break;
      case DispatchKey::AllBackends:
        e.all_backends_ = r;
        break;
      default:
        e.direct_[static_cast<int>(p.key)] = r;
    }
  }

  // Note [Kernel table]
  // Per op and key, the kernel is chosen once, here: a kernel registered for
  // the key itself; else Composite (Meta, CPU, CUDA, Lazy); else AllBackends
  // (Meta, CPU, CUDA); else the key's boxed fallback; else none, and the key
  // is skipped on calls (it falls through to the next key below it).
  void compute_table(OperatorEntry& e) {
    e.mask_ = 0;
    for (int k = 0; k < kNumDispatchKeys; ++k) {
      auto key = static_cast<DispatchKey>(k);
      bool backend_or_meta =
          key == DispatchKey::Meta || key == DispatchKey::CPU || key == DispatchKey::CUDA;
      OperatorEntry::Registered r = e.direct_[k];
      if (!r.unboxed && !r.boxed && (backend_or_meta || key == DispatchKey::Lazy)) {
        r = e.composite_;
      }
      if (!r.unboxed && !r.boxed && backend_or_meta) r = e.all_backends_;
      if (!r.unboxed && !r.boxed) r.boxed = fallbacks_[k];
      e.unboxed_[k] = r.unboxed;
      e.boxed_[k] = r.boxed;
      if (r.unboxed || r.boxed) e.mask_ |= key_bit(key);
    }
  }

  std::recursive_mutex mu_;
  std::map<std::string, std::unique_ptr<OperatorEntry>, std::less<>> ops_;
  std::vector<OperatorEntry*> order_;
  std::map<std::string, std::vector<PendingImpl>> pending_;
  BoxedKernel fallbacks_[kNumDispatchKeys] = {};
};

// ---------------------------------------------------------------------------
// Library

Library::Library(Kind kind, std::string ns, std::optional<DispatchKey> key)
    : kind_(kind), ns_(std::move(ns)), key_(key) {
  KILN_CHECK(kind == Kind::Def || kind == Kind::Impl,
             "[Library] expected kind Def or Impl, got an invalid kind (", static_cast<int>(kind),
             ")");
  if (key && *key != DispatchKey::AllBackends && *key != DispatchKey::Composite) {
    check_call_key(*key, "Library");
  }
}

std::string Library::qualify(std::string_view name) const {
  if (name.find("::") != std::string_view::npos || ns_ == "kiln" || ns_ == "_") {
    return std::string(name);
  }
  return ns_ + "::" + std::string(name);
}

Library& Library::def(std::string_view schema) {
  KILN_CHECK(kind_ == Kind::Def, "[KILN_LIBRARY_IMPL] def('", schema,
             "'): expected defs in a KILN_LIBRARY block, got one in KILN_LIBRARY_IMPL");
  Dispatcher::get().def(parse_schema(schema, ns_));
  return *this;
}

void Library::impl_typed(std::string_view name, void* fn, const std::type_info* sig,
                         UnboxedCaller caller, SignatureCheck check) {
  KILN_CHECK(kind_ == Kind::Impl && key_, "[KILN_LIBRARY] impl('", name,
             "'): expected kernels in a KILN_LIBRARY_IMPL block");
  Dispatcher::PendingImpl p;
  p.key = *key_;
  p.unboxed = fn;
  p.sig = sig;
  p.caller = caller;
  p.check = check;
  Dispatcher::get().impl(qualify(name), p);
}

Library& Library::impl_boxed(std::string_view name, BoxedKernel fn) {
  KILN_CHECK(kind_ == Kind::Impl && key_, "[KILN_LIBRARY] impl_boxed('", name,
             "'): expected kernels in a KILN_LIBRARY_IMPL block");
  Dispatcher::PendingImpl p;
  p.key = *key_;
  p.boxed = fn;
  Dispatcher::get().impl(qualify(name), p);
  return *this;
}

Library& Library::fallback(BoxedKernel fn) {
  KILN_CHECK(kind_ == Kind::Impl && key_,
             "[KILN_LIBRARY] fallback: expected a KILN_LIBRARY_IMPL block");
  Dispatcher::get().fallback(*key_, fn);
  return *this;
}

Library& Library::fallthrough() {
  KILN_CHECK(kind_ == Kind::Impl && key_,
             "[KILN_LIBRARY] fallthrough: expected a KILN_LIBRARY_IMPL block");
  Dispatcher::get().fallback(*key_, nullptr);
  return *this;
}

namespace detail {

LibraryRegistrar::LibraryRegistrar(Library::Kind kind, const char* ns,
                                   std::optional<DispatchKey> key, LibraryInit init,
                                   const char* file, int line) {
  Library lib(kind, ns, key);
  try {
    init(lib);
  } catch (const Error& e) {
    // A registration error during static initialization would terminate the
    // process without a word; say where it came from first.
    std::fprintf(stderr, "[kiln] registration failed at %s:%d: %s\n", file, line, e.what());
    throw;
  }
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Lookup and boxed calls

OpHandle find_op(std::string_view name) {
  const OperatorEntry* e = Dispatcher::get().find(name);
  if (!e) {
    KILN_CHECK(!Dispatcher::get().has_pending(name), "[find_op] op '", name,
               "' has kernels registered but no schema: expected a KILN_LIBRARY def for it");
    KILN_FAIL("[find_op] expected a registered op name such as 'add.Tensor', got '", name, "'");
  }
  return OpHandle(e);
}

std::vector<OpHandle> all_ops() {
  return Dispatcher::get().all();
}

namespace detail {

uint64_t keys_of_stack(const Stack& stack) {
  uint64_t k = 0;
  for (const IValue& v : stack) {
    if (v.is_tensor()) {
      k |= keys_of(v.to_tensor());
    } else if (v.is_tensor_list()) {
      k |= keys_of(TensorList(v.to_tensor_list()));
    } else if (v.is_device()) {
      k |= keys_of(v.to_device());
    }
  }
  return k;
}

// Note [Out of memory in a kernel]
// Kernels allocate scratch memory (sort buffers, packed matrices, index
// lists) with the standard library, whose failure is std::bad_alloc; tensors
// come from the allocators, which already throw kiln::Error. kiln promises
// one exception type, so every kernel call (typed ones in
// OpHandle::Caller::call, boxed ones here) turns a std::bad_alloc into a
// kiln::Error naming the op. Memory held by the CPU allocator's cache may be
// what the kernel lacked, so the cache is emptied first and the next request
// can have it. The op is not retried: an in-place op may have written part of
// its target. The try block costs nothing on the path that does not throw.
void fail_out_of_memory(const OperatorEntry& op) {
  alloc::Allocator& cpu = alloc::cpu_allocator();
  cpu.empty_cache();
  const alloc::MemoryStats stats = cpu.stats();
  KILN_FAIL("[", op.name(), "] out of memory: expected the op's host scratch memory to be ",
            "available, got std::bad_alloc (kiln's CPU allocator: ", stats.allocated_bytes.current,
            " bytes allocated, ", stats.reserved_bytes.current,
            " reserved; its cache was emptied)");
}

// Note [Enum arguments]
// DType, like every kiln enum, is a byte: static_cast<DType>(99) compiles,
// names no dtype, and a kernel indexing a table by it reads past the end. Op
// calls are where users hand dtypes in (factories, to(), sum(dtype=),
// softmax(dtype=)...), so the dispatcher checks every DType argument of
// every call, typed (OpHandle::Caller::call) or boxed (call_normalized),
// before any layer (autocast, lazy trace, kernel) sees it; an in-place or
// out= op has written nothing yet. Public functions that take a DType
// without dispatching call check_dtype themselves. A Device checks its type
// when built, so it needs nothing here.
void fail_invalid_dtype_arg(const OperatorEntry& op, size_t index, DType t) {
  const auto& params = op.schema().arguments;
  const std::string arg = index < params.size() ? "'" + params[index].name + "'" : "dtype";
  fail_invalid_dtype(op.name().c_str(), arg.c_str(), t);
}

// Note [One device per op]
// As in PyTorch, the tensors of one op share its device, except that a 0-dim
// CPU tensor that the op only reads is a scalar on any device. For CPU and
// CUDA, the CUDA layer enforces it (Note [One device per CUDA op]). Meta
// kernels are mostly the CPU kernels registered again, so a call that mixed
// meta and CPU tensors picked the CPU kernel and each kernel decided on its
// own: pointwise ops raised, others answered on meta or read the meta
// tensor's missing data. The dispatcher decides instead, for every op,
// before any layer (autocast, lazy trace, kernel) runs:
// - a call whose keys mix Meta with CPU or CUDA raises "[op] expected all
//   tensors on one device, got meta and cpu (an input 'other' of [3])"
//   unless every tensor not on meta is a 0-dim CPU input; then it dispatches
//   on Meta, and its result is a meta tensor;
// - ops that move data between devices, copy_ (into its self) and those
//   with a Device argument (to() is _to_copy), go by their destination
//   instead: to meta they only take shapes (dispatched on Meta), and a meta
//   source for a destination with data raises: it has no data to copy.
// The check costs a test of the key bits every call computes anyway.
uint64_t meta_call_keys(const OperatorEntry& op, const Stack& stack, uint64_t keys) {
  constexpr uint64_t kData = key_bit(DispatchKey::CPU) | key_bit(DispatchKey::CUDA);
  const auto& params = op.schema().arguments;
  auto where = [&](const Tensor& t, size_t i, bool written) {
    const std::string name = i < params.size() ? " '" + params[i].name + "'" : "";
    return str("(", written ? "a written argument" : "an input", name, " of ", t.sizes(), ")");
  };
  const bool is_copy = op.schema().ns == "kiln" && op.schema().name == "copy_" && !stack.empty() &&
                       stack[0].is_tensor() && stack[0].to_tensor().defined();
  std::optional<Device> destination;
  if (is_copy) destination = stack[0].to_tensor().device();
  for (size_t i = 0; i < params.size() && i < stack.size(); ++i) {
    if (params[i].type == ArgType::Device && stack[i].is_device()) {
      destination = stack[i].to_device();
    }
  }
  if (destination) {
    if (destination->is_meta()) return keys & ~kData;
    for (size_t i = is_copy ? 1 : 0; i < stack.size(); ++i) {
      if (!stack[i].is_tensor() || !stack[i].to_tensor().defined()) continue;
      const Tensor& t = stack[i].to_tensor();
      KILN_CHECK(!t.is_meta(), "[", op.name(),
                 "] expected a source with data for a destination on ", *destination,
                 ", got one on meta ", where(t, i, false));
    }
    return keys;
  }
  auto check = [&](const Tensor& t, size_t i) {
    if (!t.defined() || t.is_meta()) return;
    const bool written = i < params.size() && params[i].is_write;
    if (t.is_cpu() && t.dim() == 0 && !written) return;
    KILN_FAIL("[", op.name(), "] expected all tensors on one device, got meta and ", t.device(),
              " ", where(t, i, written));
  };
  for (size_t i = 0; i < stack.size(); ++i) {
    if (stack[i].is_tensor()) {
      check(stack[i].to_tensor(), i);
    } else if (stack[i].is_tensor_list()) {
      for (const Tensor& t : stack[i].to_tensor_list()) check(t, i);
    }
  }
  return keys & ~kData;
}

Stack call_boxed_kernel(const OperatorEntry& op, int key, Stack stack) {
  BoxedKernel fn = op.boxed(key);
  KILN_INTERNAL_ASSERT(fn != nullptr, "no boxed kernel for ", op.name(), " at key ", key);
  try {
    fn(op, stack);
  } catch (const std::bad_alloc&) {
    fail_out_of_memory(op);
  }
  return stack;
}

void check_signature(const FunctionSchema& schema, const ArgType* types, const bool* optional,
                     size_t n, const char* what) {
  KILN_CHECK(n == schema.arguments.size(), "[KILN_LIBRARY_IMPL] ", schema.full_name(), " (", what,
             "): expected a kernel of ", schema.arguments.size(),
             " arguments as the schema says, got ", n);
  for (size_t i = 0; i < n; ++i) {
    const Argument& a = schema.arguments[i];
    // A fixed-size int list such as int[2] is still an IntArrayRef.
    KILN_CHECK(a.type == types[i] && a.optional == optional[i], "[KILN_LIBRARY_IMPL] ",
               schema.full_name(), " (", what, "): argument ", i, " '", a.name,
               "' expected C++ type for ", arg_type_name(a.type), a.optional ? "?" : "",
               ", got one for ", arg_type_name(types[i]), optional[i] ? "?" : "");
  }
}

}  // namespace detail

namespace {

// Converts `v` to what argument `a` takes, or throws naming both.
IValue coerce(const FunctionSchema& schema, const Argument& a, size_t index, IValue v) {
  auto fail = [&]() {
    KILN_FAIL("[", schema.full_name(), "] argument '", a.name, "' (position ", index, ") expected ",
              arg_type_name(a.type), a.optional ? "?" : "", ", got ", v.type_name());
  };
  if (v.is_none()) {
    if (!a.optional) fail();
    return v;
  }
  switch (a.type) {
    case ArgType::Tensor:
      if (!v.is_tensor()) fail();
      if (!v.to_tensor().defined()) {
        KILN_CHECK(a.optional, "[", schema.full_name(), "] argument '", a.name, "' (position ",
                   index, ") expected a defined Tensor, got an undefined one (Tensor())");
        return IValue();
      }
      return v;
    case ArgType::TensorList:
      if (!v.is_tensor_list()) fail();
      for (size_t i = 0; i < v.to_tensor_list().size(); ++i) {
        KILN_CHECK(v.to_tensor_list()[i].defined(), "[", schema.full_name(), "] argument '", a.name,
                   "' (position ", index,
                   ") expected a list of defined Tensors, got an undefined one (Tensor()) at "
                   "index ",
                   i);
      }
      return v;
    case ArgType::Int:
      if (!v.is_int()) fail();
      return v;
    case ArgType::IntList:
      if (v.is_int()) {
        return IValue(std::vector<int64_t>(a.fixed_size > 0 ? a.fixed_size : 1, v.to_int()));
      }
      // As PyTorch: N in int[N] is how far a single int broadcasts; a list of
      // any length passes (roll's int[1] shifts take one per rolled dim).
      if (!v.is_int_list()) fail();
      return v;
    case ArgType::Float:
      if (v.is_int()) return IValue(static_cast<double>(v.to_int()));
      if (!v.is_double()) fail();
      return v;
    case ArgType::FloatList:
      if (v.is_int() || v.is_double()) {  // one number for every element, as int[N] takes
        const double x = v.is_int() ? static_cast<double>(v.to_int()) : v.to_double();
        return IValue(std::vector<double>(a.fixed_size > 0 ? a.fixed_size : 1, x));
      }
      if (v.is_int_list()) {
        std::vector<double> d(v.to_int_list().begin(), v.to_int_list().end());
        return IValue(std::move(d));
      }
      if (!v.is_double_list()) fail();
      return v;
    case ArgType::Bool:
      if (!v.is_bool()) fail();
      return v;
    case ArgType::Scalar:
      if (!v.is_number()) fail();
      return IValue(v.to_scalar());
    case ArgType::DType:
      if (v.is_string()) return IValue(parse_dtype(v.to_string()));
      if (!v.is_dtype()) fail();
      return v;
    case ArgType::Device:
      if (v.is_string()) return IValue(Device(v.to_string()));
      if (!v.is_device()) fail();
      return v;
    case ArgType::Str:
      if (!v.is_string()) fail();
      return v;
  }
  KILN_INTERNAL_ASSERT(false, "unknown argument type");
  return v;
}

}  // namespace

Stack normalize_arguments(const FunctionSchema& schema, Stack args,
                          const std::vector<std::pair<std::string, IValue>>& kwargs) {
  const auto& params = schema.arguments;
  size_t positional = 0;
  while (positional < params.size() && !params[positional].kwarg_only) ++positional;
  KILN_CHECK(args.size() <= positional, "[", schema.full_name(), "] expected at most ", positional,
             " positional arguments, got ", args.size());
  std::vector<bool> given(params.size(), false);
  Stack out(params.size());
  for (size_t i = 0; i < args.size(); ++i) {
    out[i] = coerce(schema, params[i], i, std::move(args[i]));
    given[i] = true;
  }
  for (const auto& [name, value] : kwargs) {
    int idx = schema.argument_index(name);
    KILN_CHECK(idx >= 0, "[", schema.full_name(), "] expected an argument named in '", schema.str(),
               "', got unknown keyword '", name, "'");
    KILN_CHECK(!given[idx], "[", schema.full_name(), "] argument '", name,
               "' given twice (by position and by keyword)");
    out[idx] = coerce(schema, params[idx], idx, value);
    given[idx] = true;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (given[i]) continue;
    KILN_CHECK(params[i].default_value.has_value() || params[i].optional, "[", schema.full_name(),
               "] missing argument '", params[i].name, "' (position ", i, ")");
    if (params[i].default_value) out[i] = *params[i].default_value;
  }
  return out;
}

Stack call_normalized(const OperatorEntry& op, Stack stack) {
  for (size_t i = 0; i < stack.size(); ++i) {  // Note [Enum arguments]
    if (stack[i].is_dtype()) detail::check_enum_arg(op, i, stack[i].to_dtype());
  }
  uint64_t keys = detail::default_keys(detail::keys_of_stack(stack));
  if (KILN_UNLIKELY(detail::mixes_meta(keys))) keys = detail::meta_call_keys(op, stack, keys);
  int key = op.pick_key(keys);
  std::optional<detail::ObservedCall> observed;
  if (KILN_UNLIKELY(detail::dispatch_observed())) {
    observed.emplace(op, keys, key);
    std::vector<std::vector<int64_t>> sizes;
    if (observed->wants_sizes()) {
      for (const IValue& v : stack) {
        sizes.push_back(v.is_tensor() ? detail::arg_sizes(v.to_tensor()) : std::vector<int64_t>());
      }
    }
    observed->start(std::move(sizes));
  }
  const detail::CurrentOpScope current(op.name().c_str());  // Note [The op being run]
  if (void* fn = op.unboxed(key)) {
    try {
      op.unboxed_caller()(fn, stack);
    } catch (const std::bad_alloc&) {
      detail::fail_out_of_memory(op);
    }
    return stack;
  }
  return detail::call_boxed_kernel(op, key, std::move(stack));
}

Stack call_op(std::string_view name, Stack args,
              const std::vector<std::pair<std::string, IValue>>& kwargs) {
  OpHandle h = find_op(name);
  return call_normalized(h.entry(), normalize_arguments(h.schema(), std::move(args), kwargs));
}

}  // namespace kiln

namespace kiln::detail {

void check_returns(const FunctionSchema& schema, int count, bool list, const char* what) {
  bool schema_list = schema.returns.size() == 1 && schema.returns[0].type == ArgType::TensorList;
  bool ok = static_cast<int>(schema.returns.size()) == count && schema_list == list;
  for (const Argument& r : schema.returns) {
    ok = ok && (r.type == ArgType::Tensor || r.type == ArgType::TensorList);
  }
  KILN_CHECK(ok, "[KILN_LIBRARY_IMPL] ", schema.full_name(), " (", what,
             "): expected a C++ return type for ", schema.returns.size(),
             schema_list ? " Tensor[]" : " Tensor(s)", ", got one for ", count,
             list ? " Tensor[]" : " Tensor(s)");
}

}  // namespace kiln::detail
