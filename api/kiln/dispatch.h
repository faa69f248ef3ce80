#pragma once

// The dispatcher: every op call goes through here. Public because custom ops
// (KILN_LIBRARY) are registered and called through the same machinery.

#include <atomic>
#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <typeinfo>
#include <utility>
#include <vector>

#include "kiln/api.h"
#include "kiln/impl/current_op.h"
#include "kiln/ivalue.h"
#include "kiln/logging.h"
#include "kiln/schema.h"
#include "kiln/tensor.h"

namespace kiln {

// Highest first when picking a kernel: Autocast, Lazy, then the backends, then Meta.
enum class DispatchKey : uint8_t {
  Meta = 0,
  CPU = 1,
  CUDA = 2,
  Lazy = 3,
  Autocast = 4,
  kCount = 5,
  // Registration-only aliases. AllBackends fills Meta, CPU and CUDA (device-independent
  // kernels such as views); Composite also fills Lazy, so a lazy trace records the
  // ops the composite calls.
  AllBackends = 16,
  Composite = 17,
};
constexpr int kNumDispatchKeys = static_cast<int>(DispatchKey::kCount);

KILN_API const char* dispatch_key_name(DispatchKey k);
constexpr uint64_t key_bit(DispatchKey k) {
  return uint64_t{1} << static_cast<int>(k);
}
constexpr DispatchKey backend_key(Device d) {
  return d.is_cuda() ? DispatchKey::CUDA : d.is_meta() ? DispatchKey::Meta : DispatchKey::CPU;
}

// Keys added to and removed from every call on this thread (RAII guards below).
struct LocalDispatchKeySet {
  uint64_t included = 0;
  uint64_t excluded = 0;
};
namespace detail {
// Note [Dispatch TLS]
// `__thread` on a trivially constructible struct compiles to one
// segment-relative load (initial-exec model): no TLS wrapper call on the hot path.
KILN_API extern __thread LocalDispatchKeySet tls_local_keys
    __attribute__((tls_model("initial-exec")));
inline LocalDispatchKeySet& local_keys() {
  return tls_local_keys;
}
// Keys every thread includes unless it excludes them: Lazy, unless KILN_EAGER=1.
KILN_API extern uint64_t g_default_keys;

// Who observes op calls (Note [Dispatch observers] in runtime/dispatch/dispatcher.cpp):
// one word, zero when nobody does.
constexpr uint32_t kDispatchLogHook = 1;  // KILN_LOGS=dispatch
constexpr uint32_t kProfilerHook = 2;     // a kiln::profiler::Profile records
KILN_API extern std::atomic<uint32_t> g_dispatch_hooks;
KILN_API void set_dispatch_hook(uint32_t hook, bool on);
inline bool dispatch_observed() {
  return g_dispatch_hooks.load(std::memory_order_relaxed) != 0;
}
}  // namespace detail

class KILN_API IncludeKeyGuard {
 public:
  explicit IncludeKeyGuard(DispatchKey k);
  ~IncludeKeyGuard();
  IncludeKeyGuard(const IncludeKeyGuard&) = delete;
  IncludeKeyGuard& operator=(const IncludeKeyGuard&) = delete;

 private:
  uint64_t saved_;
};

// Excludes a key, or with `and_above` the key and every higher one (how a
// transforming layer redispatches below itself).
class KILN_API ExcludeKeyGuard {
 public:
  explicit ExcludeKeyGuard(DispatchKey k, bool and_above = false);
  ~ExcludeKeyGuard();
  ExcludeKeyGuard(const ExcludeKeyGuard&) = delete;
  ExcludeKeyGuard& operator=(const ExcludeKeyGuard&) = delete;

 private:
  uint64_t saved_;
};

class OperatorEntry;
using BoxedKernel = void (*)(const OperatorEntry& op, Stack& stack);
// Calls a typed kernel with arguments taken from a normalized stack; leaves the results.
using UnboxedCaller = void (*)(void* fn, Stack& stack);

// One registered op: its schema and, per key, the kernel chosen at registration.
class KILN_API OperatorEntry {
 public:
  explicit OperatorEntry(FunctionSchema schema);

  const FunctionSchema& schema() const { return schema_; }
  const std::string& name() const { return name_; }
  // Keys with a kernel (direct, composite or backend fallback), as bits.
  uint64_t kernel_mask() const { return mask_; }
  void* unboxed(int key) const { return unboxed_[key]; }
  BoxedKernel boxed(int key) const { return boxed_[key]; }
  UnboxedCaller unboxed_caller() const { return unboxed_caller_; }
  const std::type_info* signature() const { return signature_; }

  // Throws "[op] no kernel for CUDA (kernels: CPU, Meta)".
  [[noreturn]] void fail_no_kernel(uint64_t keys) const;
  // The kernel key for a call whose inputs carry `tensor_keys`, TLS applied.
  int pick_key(uint64_t tensor_keys) const {
    const LocalDispatchKeySet& l = detail::local_keys();
    uint64_t ks = (tensor_keys | l.included | detail::g_default_keys) & ~l.excluded;
    uint64_t hit = ks & mask_;
    if (KILN_UNLIKELY(hit == 0)) fail_no_kernel(ks);
    return 63 - __builtin_clzll(hit);
  }
  // Logs the choice pick_key(tensor_keys) made (KILN_LOGS=dispatch).
  void log_dispatch(uint64_t tensor_keys, int key) const;

 private:
  friend class Dispatcher;

  FunctionSchema schema_;
  std::string name_;
  void* unboxed_[kNumDispatchKeys] = {};
  BoxedKernel boxed_[kNumDispatchKeys] = {};
  uint64_t mask_ = 0;
  UnboxedCaller unboxed_caller_ = nullptr;
  const std::type_info* signature_ = nullptr;
  // Kernels as registered, before the table is computed.
  struct Registered {
    void* unboxed = nullptr;
    BoxedKernel boxed = nullptr;
  };
  Registered direct_[kNumDispatchKeys];
  Registered composite_;
  Registered all_backends_;
};

// ---------------------------------------------------------------------------
// Boxing: C++ argument types <-> IValue and schema types.

namespace detail {

inline uint64_t keys_of(const Tensor& t) {
  return t.defined() ? t.impl()->key_bits() : 0;
}
inline uint64_t keys_of(const std::optional<Tensor>& t) {
  return t ? keys_of(*t) : 0;
}
inline uint64_t keys_of(TensorList l) {
  uint64_t k = 0;
  for (const Tensor& t : l) k |= keys_of(t);
  return k;
}
inline uint64_t keys_of(Device d) {
  return key_bit(backend_key(d));
}
inline uint64_t keys_of(std::optional<Device> d) {
  return d ? keys_of(*d) : 0;
}
template <class T>
inline uint64_t keys_of(const T&) {
  return 0;
}
// Calls with no tensor and no device (factories with defaults) run on the CPU.
inline uint64_t default_keys(uint64_t k) {
  return k ? k : key_bit(DispatchKey::CPU);
}

KILN_API uint64_t keys_of_stack(const Stack& stack);

template <class T>
struct ArgTraits;
#define KILN_ARG_TRAITS(CppType, SchemaType, Opt)        \
  template <>                                            \
  struct ArgTraits<CppType> {                            \
    static constexpr ArgType type = ArgType::SchemaType; \
    static constexpr bool optional = Opt;                \
  };
KILN_ARG_TRAITS(Tensor, Tensor, false)
KILN_ARG_TRAITS(std::optional<Tensor>, Tensor, true)
KILN_ARG_TRAITS(TensorList, TensorList, false)
KILN_ARG_TRAITS(int64_t, Int, false)
KILN_ARG_TRAITS(std::optional<int64_t>, Int, true)
KILN_ARG_TRAITS(IntArrayRef, IntList, false)
KILN_ARG_TRAITS(std::optional<IntArrayRef>, IntList, true)
KILN_ARG_TRAITS(ArrayRef<double>, FloatList, false)
KILN_ARG_TRAITS(std::optional<ArrayRef<double>>, FloatList, true)
KILN_ARG_TRAITS(double, Float, false)
KILN_ARG_TRAITS(std::optional<double>, Float, true)
KILN_ARG_TRAITS(bool, Bool, false)
KILN_ARG_TRAITS(std::optional<bool>, Bool, true)
KILN_ARG_TRAITS(Scalar, Scalar, false)
KILN_ARG_TRAITS(std::optional<Scalar>, Scalar, true)
KILN_ARG_TRAITS(DType, DType, false)
KILN_ARG_TRAITS(std::optional<DType>, DType, true)
KILN_ARG_TRAITS(Device, Device, false)
KILN_ARG_TRAITS(std::optional<Device>, Device, true)
KILN_ARG_TRAITS(std::string_view, Str, false)
KILN_ARG_TRAITS(std::optional<std::string_view>, Str, true)
#undef KILN_ARG_TRAITS

template <class T>
using Bare = std::remove_cvref_t<T>;

// Argument -> IValue.
inline IValue box(const Tensor& t) {
  return IValue(t);
}
inline IValue box(TensorList l) {
  return IValue(l.vec());
}
inline IValue box(IntArrayRef l) {
  return IValue(l.vec());
}
inline IValue box(ArrayRef<double> l) {
  return IValue(l.vec());
}
inline IValue box(std::string_view s) {
  return IValue(std::string(s));
}
inline IValue box(int64_t v) {
  return IValue(v);
}
inline IValue box(double v) {
  return IValue(v);
}
inline IValue box(bool v) {
  return IValue(v);
}
inline IValue box(const Scalar& v) {
  return IValue(v);
}
inline IValue box(DType v) {
  return IValue(v);
}
inline IValue box(Device v) {
  return IValue(v);
}
template <class T>
IValue box(const std::optional<T>& v) {
  return v ? box(*v) : IValue();
}

// IValue -> argument. The IValue outlives the call, so views into it are safe.
template <class T>
struct Unbox;
template <>
struct Unbox<Tensor> {
  static const Tensor& get(const IValue& v) { return v.to_tensor(); }
};
template <>
struct Unbox<TensorList> {
  static TensorList get(const IValue& v) { return TensorList(v.to_tensor_list()); }
};
template <>
struct Unbox<IntArrayRef> {
  static IntArrayRef get(const IValue& v) { return IntArrayRef(v.to_int_list()); }
};
template <>
struct Unbox<ArrayRef<double>> {
  static ArrayRef<double> get(const IValue& v) { return ArrayRef<double>(v.to_double_list()); }
};
template <>
struct Unbox<std::string_view> {
  static std::string_view get(const IValue& v) { return v.to_string(); }
};
template <>
struct Unbox<int64_t> {
  static int64_t get(const IValue& v) { return v.to_int(); }
};
template <>
struct Unbox<double> {
  static double get(const IValue& v) { return v.to_double(); }
};
template <>
struct Unbox<bool> {
  static bool get(const IValue& v) { return v.to_bool(); }
};
template <>
struct Unbox<Scalar> {
  static Scalar get(const IValue& v) { return v.to_scalar(); }
};
template <>
struct Unbox<DType> {
  static DType get(const IValue& v) { return v.to_dtype(); }
};
template <>
struct Unbox<Device> {
  static Device get(const IValue& v) { return v.to_device(); }
};
template <class T>
struct Unbox<std::optional<T>> {
  static std::optional<T> get(const IValue& v) {
    if (v.is_none()) return std::nullopt;
    return Unbox<T>::get(v);
  }
};

// Results -> stack and back.
inline void push_result(Stack& s, Tensor t) {
  s.emplace_back(std::move(t));
}
inline void push_result(Stack& s, std::vector<Tensor> v) {
  s.emplace_back(std::move(v));
}
template <class... Ts>
void push_result(Stack& s, std::tuple<Ts...> t) {
  std::apply([&](auto&... e) { (s.emplace_back(std::move(e)), ...); }, t);
}
template <class R>
struct PopResult;
template <>
struct PopResult<Tensor> {
  static Tensor get(Stack& s) { return std::move(s.at(0).to_tensor()); }
};
template <>
struct PopResult<std::vector<Tensor>> {
  static std::vector<Tensor> get(Stack& s) { return s.at(0).to_tensor_list(); }
};
template <class... Ts>
struct PopResult<std::tuple<Ts...>> {
  static std::tuple<Ts...> get(Stack& s) { return get(s, std::index_sequence_for<Ts...>()); }
  template <size_t... I>
  static std::tuple<Ts...> get(Stack& s, std::index_sequence<I...>) {
    return std::tuple<Ts...>(std::move(s.at(I).to_tensor())...);
  }
};

// Calls the typed kernel `fn` of signature R(Args...) with arguments from the stack,
// then replaces the stack with its results.
template <class R, class... Args>
struct UnboxedCall {
  static void call(void* fn, Stack& stack) { call(fn, stack, std::index_sequence_for<Args...>()); }
  template <size_t... I>
  static void call(void* fn, Stack& stack, std::index_sequence<I...>) {
    auto* f = reinterpret_cast<R (*)(Args...)>(fn);
    R r = f(Unbox<Bare<Args>>::get(stack[I])...);
    stack.clear();
    push_result(stack, std::move(r));
  }
};

KILN_API void check_signature(const FunctionSchema& schema, const ArgType* types,
                              const bool* optional, size_t n, const char* what);

template <class R, class... Args>
void check_signature(const FunctionSchema& schema, const char* what) {
  constexpr size_t n = sizeof...(Args);
  const ArgType types[n + 1] = {ArgTraits<Bare<Args>>::type..., ArgType::Tensor};
  const bool optional[n + 1] = {ArgTraits<Bare<Args>>::optional..., false};
  check_signature(schema, types, optional, n, what);
}

KILN_API Stack call_boxed_kernel(const OperatorEntry& op, int key, Stack stack);

// An argument's sizes, as the profiler records them ([] for a non-tensor).
inline std::vector<int64_t> arg_sizes(const Tensor& t) {
  return t.defined() ? std::vector<int64_t>(t.sizes().begin(), t.sizes().end())
                     : std::vector<int64_t>();
}
template <class T>
std::vector<int64_t> arg_sizes(const T&) {
  return {};
}

// One op call while observed: logs the dispatch, and while a profile records,
// records the call from start() to destruction.
class KILN_API ObservedCall {
 public:
  ObservedCall(const OperatorEntry& op, uint64_t tensor_keys, int key);
  ~ObservedCall();
  ObservedCall(const ObservedCall&) = delete;
  ObservedCall& operator=(const ObservedCall&) = delete;
  // Whether start() wants the arguments' sizes.
  bool wants_sizes() const { return wants_sizes_; }
  void start(std::vector<std::vector<int64_t>> sizes);

 private:
  const OperatorEntry& op_;
  int key_;
  bool wants_sizes_ = false;
  // The recorder's open event (runtime/profiler/recorder.h's Handle) and,
  // for a CUDA kernel while GPU work is timed, its GpuSpan.
  void* buffer_ = nullptr;
  uint64_t session_ = 0;
  int32_t index_ = -1;
  void* gpu_span_ = nullptr;
};

}  // namespace detail

// A handle to a registered op; typed calls go straight to the kernel table.
class KILN_API OpHandle {
 public:
  OpHandle() = default;
  explicit OpHandle(const OperatorEntry* entry) : entry_(entry) {}

  const OperatorEntry& entry() const { return *entry_; }
  const FunctionSchema& schema() const { return entry_->schema(); }

  template <class Sig>
  struct Caller;

  // Typed call: `op.call<Tensor(const Tensor&, const Scalar&)>(x, 2)`.
  // The signature must match the schema (checked when typed kernels register).
  template <class Sig, class... Ts>
  decltype(auto) call(Ts&&... args) const {
    return Caller<Sig>::call(*entry_, std::forward<Ts>(args)...);
  }
  // Call below `key`: the keys from `key` up are excluded for the duration.
  template <class Sig, class... Ts>
  decltype(auto) redispatch(DispatchKey key, Ts&&... args) const {
    ExcludeKeyGuard guard(key, /*and_above=*/true);
    return Caller<Sig>::call(*entry_, std::forward<Ts>(args)...);
  }

 private:
  const OperatorEntry* entry_ = nullptr;
};

namespace detail {
// Turns a std::bad_alloc that escaped `op`'s kernel into kiln::Error (Note
// [Out of memory in a kernel], runtime/dispatch/dispatcher.cpp).
[[noreturn]] KILN_API void fail_out_of_memory(const OperatorEntry& op);

// Every DType argument is checked before any kernel sees it (Note [Enum
// arguments], runtime/dispatch/dispatcher.cpp); other arguments cost nothing.
[[noreturn]] KILN_API void fail_invalid_dtype_arg(const OperatorEntry& op, size_t index, DType t);
template <class T>
inline void check_enum_arg(const OperatorEntry&, size_t, const T&) {}
inline void check_enum_arg(const OperatorEntry& op, size_t index, DType t) {
  if (KILN_UNLIKELY(!is_valid_dtype(t))) fail_invalid_dtype_arg(op, index, t);
}
inline void check_enum_arg(const OperatorEntry& op, size_t index, const std::optional<DType>& t) {
  if (t) check_enum_arg(op, index, *t);
}
template <size_t... I, class... A>
inline void check_enum_args(const OperatorEntry& op, std::index_sequence<I...>, const A&... args) {
  (check_enum_arg(op, I, args), ...);
}

// Whether a call's tensor and device keys mix meta with data (Note [One
// device per op], runtime/dispatch/dispatcher.cpp).
inline bool mixes_meta(uint64_t keys) {
  constexpr uint64_t kData = key_bit(DispatchKey::CPU) | key_bit(DispatchKey::CUDA);
  return (keys & key_bit(DispatchKey::Meta)) && (keys & kData);
}
// Checks such a call (the boxed arguments) and returns the keys it dispatches on.
KILN_API uint64_t meta_call_keys(const OperatorEntry& op, const Stack& stack, uint64_t keys);
}  // namespace detail

template <class R, class... Args>
struct OpHandle::Caller<R(Args...)> {
  static R call(const OperatorEntry& op, Args... args) {
    detail::check_enum_args(op, std::index_sequence_for<Args...>(), args...);
    uint64_t keys = detail::default_keys((detail::keys_of(args) | ... | uint64_t{0}));
    if (KILN_UNLIKELY(detail::mixes_meta(keys))) keys = meta_call_keys(op, keys, args...);
    int key = op.pick_key(keys);
    if (KILN_UNLIKELY(detail::dispatch_observed())) return call_observed(op, keys, key, args...);
    return run(op, key, args...);
  }
  [[gnu::noinline]] static uint64_t meta_call_keys(const OperatorEntry& op, uint64_t keys,
                                                   Args... args) {
    Stack stack;
    stack.reserve(sizeof...(Args));
    (stack.push_back(detail::box(args)), ...);
    return detail::meta_call_keys(op, stack, keys);
  }
  [[gnu::noinline]] static R call_observed(const OperatorEntry& op, uint64_t keys, int key,
                                           Args... args) {
    detail::ObservedCall observed(op, keys, key);
    if (observed.wants_sizes()) {
      observed.start({detail::arg_sizes(args)...});
    } else {
      observed.start({});
    }
    return run(op, key, args...);
  }
  static R run(const OperatorEntry& op, int key, Args... args) {
    const detail::CurrentOpScope current(op.name().c_str());  // Note [The op being run]
    if (void* fn = op.unboxed(key)) {
      try {
        return reinterpret_cast<R (*)(Args...)>(fn)(args...);
      } catch (const std::bad_alloc&) {
        detail::fail_out_of_memory(op);
      }
    }
    Stack stack;
    stack.reserve(sizeof...(Args));
    (stack.push_back(detail::box(args)), ...);
    Stack out = detail::call_boxed_kernel(op, key, std::move(stack));
    return detail::PopResult<R>::get(out);
  }
};

// Looks an op up by name: "add.Tensor", "myns::myop". Throws when it is not registered.
KILN_API OpHandle find_op(std::string_view name);

namespace detail {
template <class R>
struct ReturnTraits;
template <>
struct ReturnTraits<Tensor> {
  static constexpr int count = 1;
  static constexpr bool list = false;
};
template <>
struct ReturnTraits<std::vector<Tensor>> {
  static constexpr int count = 1;
  static constexpr bool list = true;
};
template <class... Ts>
struct ReturnTraits<std::tuple<Ts...>> {
  static constexpr int count = sizeof...(Ts);
  static constexpr bool list = false;
};
KILN_API void check_returns(const FunctionSchema& schema, int count, bool list, const char* what);
// Checks a kernel's or caller's C++ signature against the schema.
template <class R, class... Args>
void check_kernel(const FunctionSchema& schema, const char* what) {
  check_signature<R, Args...>(schema, what);
  check_returns(schema, ReturnTraits<R>::count, ReturnTraits<R>::list, what);
}
}  // namespace detail

// A typed handle found once by name; its C++ signature is checked against the
// schema then, so every later call is a table lookup:
//   static const TypedOp<Tensor(const Tensor&, const Scalar&)> op("myns::scale");
//   Tensor y = op(x, 2.0);
template <class Sig>
class TypedOp;
template <class R, class... Args>
class TypedOp<R(Args...)> {
 public:
  explicit TypedOp(std::string_view name) : entry_(&find_op(name).entry()) {
    detail::check_kernel<R, Args...>(entry_->schema(), "call");
  }
  R operator()(Args... args) const { return OpHandle::Caller<R(Args...)>::call(*entry_, args...); }
  // The call with `key` and every key above it excluded.
  R redispatch(DispatchKey key, Args... args) const {
    ExcludeKeyGuard guard(key, /*and_above=*/true);
    return OpHandle::Caller<R(Args...)>::call(*entry_, args...);
  }
  const OperatorEntry& entry() const { return *entry_; }

 private:
  const OperatorEntry* entry_;
};
// All registered ops, in registration order.
KILN_API std::vector<OpHandle> all_ops();

// Boxed call by name, PyTorch-style: positional arguments, then keyword arguments.
// Checks every argument against the schema ("[add.Tensor] argument 'other' expected
// Tensor, got int") and fills defaults.
KILN_API Stack call_op(std::string_view name, Stack args,
                       const std::vector<std::pair<std::string, IValue>>& kwargs = {});
// Fills defaults and checks types: the stack a kernel sees.
KILN_API Stack normalize_arguments(const FunctionSchema& schema, Stack args,
                                   const std::vector<std::pair<std::string, IValue>>& kwargs);
// Calls a normalized stack through the dispatcher.
KILN_API Stack call_normalized(const OperatorEntry& op, Stack stack);

// ---------------------------------------------------------------------------
// Registration.

class KILN_API Library {
 public:
  enum class Kind { Def, Impl };
  Library(Kind kind, std::string ns, std::optional<DispatchKey> key);

  // Declares an op; a kernel per key comes from KILN_LIBRARY_IMPL.
  Library& def(std::string_view schema);
  // Registers a typed kernel for this library's key.
  template <class R, class... Args>
  Library& impl(std::string_view name, R (*fn)(Args...)) {
    impl_typed(name, reinterpret_cast<void*>(fn), &typeid(R(Args...)),
               &detail::UnboxedCall<R, Args...>::call, &detail::check_kernel<R, Args...>);
    return *this;
  }
  // Registers a kernel that takes and returns a stack.
  Library& impl_boxed(std::string_view name, BoxedKernel fn);
  // (KILN_LIBRARY_IMPL(_, Key, m) only) A boxed kernel for every op lacking one for Key.
  Library& fallback(BoxedKernel fn);
  // (KILN_LIBRARY_IMPL(_, Key, m) only) Ops without a kernel for Key skip it.
  Library& fallthrough();

 private:
  using SignatureCheck = void (*)(const FunctionSchema&, const char*);
  void impl_typed(std::string_view name, void* fn, const std::type_info* sig, UnboxedCaller caller,
                  SignatureCheck check);
  std::string qualify(std::string_view name) const;

  Kind kind_;
  std::string ns_;
  std::optional<DispatchKey> key_;
};

namespace detail {
using LibraryInit = void (*)(Library&);
struct KILN_API LibraryRegistrar {
  LibraryRegistrar(Library::Kind kind, const char* ns, std::optional<DispatchKey> key,
                   LibraryInit init, const char* file, int line);
};
}  // namespace detail

}  // namespace kiln

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)

// Declares ops of namespace `ns`:
//   KILN_LIBRARY(myns, m) { m.def("myop(Tensor x, float alpha) -> Tensor"); }
#define KILN_LIBRARY(ns, m)                                                                     \
  static void KILN_CONCAT(kiln_library_def_##ns##_, __LINE__)(::kiln::Library&);                \
  static const ::kiln::detail::LibraryRegistrar KILN_CONCAT(kiln_library_def_registrar_##ns##_, \
                                                            __LINE__)(                          \
      ::kiln::Library::Kind::Def, #ns, std::nullopt,                                            \
      &KILN_CONCAT(kiln_library_def_##ns##_, __LINE__), __FILE__, __LINE__);                    \
  static void KILN_CONCAT(kiln_library_def_##ns##_, __LINE__)(::kiln::Library & m)

// Registers kernels of namespace `ns` (use `_` for every namespace, with fallback())
// for a dispatch key:
//   KILN_LIBRARY_IMPL(myns, CPU, m) { m.impl("myop", &myop_cpu); }
//   KILN_LIBRARY_IMPL(myns, Meta, m) { m.impl("myop", &myop_meta); }
#define KILN_LIBRARY_IMPL(ns, key, m)                                                     \
  static void KILN_CONCAT(kiln_library_impl_##ns##_##key##_, __LINE__)(::kiln::Library&); \
  static const ::kiln::detail::LibraryRegistrar KILN_CONCAT(                              \
      kiln_library_impl_registrar_##ns##_##key##_, __LINE__)(                             \
      ::kiln::Library::Kind::Impl, #ns, ::kiln::DispatchKey::key,                         \
      &KILN_CONCAT(kiln_library_impl_##ns##_##key##_, __LINE__), __FILE__, __LINE__);     \
  static void KILN_CONCAT(kiln_library_impl_##ns##_##key##_, __LINE__)(::kiln::Library & m)
