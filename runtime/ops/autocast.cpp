// Note [Autocast]
// An AutocastGuard puts the Autocast key in the thread's included keys and
// sets the thread's autocast dtype. Ops with an Autocast kernel then run it
// first: it casts the floating tensor arguments by the op's policy and calls
// the op again with Autocast excluded (a redispatch), so the cast inputs take
// the ordinary backend, lazy or meta kernels. Ops without one are skipped by
// the dispatcher at no cost. The policies and lists follow PyTorch's autocast:
//  - LowerPrecision (matrix products, linear, attention): float32 and the
//    other 16-bit dtype go to the autocast dtype; float64 is left alone.
//  - Float32 (reductions, norms, softmax, and pointwise ops whose 16-bit
//    results lose too much: exp, log, pow...): float16 and bfloat16 go to
//    float32, so results are float32; a call that passes dtype= runs as given.
//  - Promote (ops mixing inputs: cat, stack, where, index_copy...): every
//    floating tensor goes to the widest floating dtype among them (wrapped
//    numbers neither count nor change).
// In-place and out= forms have no Autocast kernel: their result dtype is the
// caller's. kiln's own matrix and nn ops take typed kernels (no boxing on the
// hot path); the other ops take boxed kernels that read the arguments off the
// stack, so they hold whatever C++ signature those ops' kernels have.
// Casts go through Tensor::to, so a lazy trace records them.

#include "kiln/autocast.h"

#include <map>
#include <mutex>
#include <string>

#include "kiln/dispatch.h"
#include "runtime/ops/autocast_policy.h"

namespace kiln {
namespace {

thread_local std::optional<DType> t_autocast_dtype;

// The lower-precision dtype of the current autocast region. The Autocast key
// may be included without a guard (IncludeKeyGuard); PyTorch's CPU default
// applies then.
DType lower_dtype() {
  return t_autocast_dtype.value_or(kBFloat16);
}

bool lower_eligible(const Tensor& t, DType target) {
  return t.defined() && is_floating(t.dtype()) && t.dtype() != kFloat64 && t.dtype() != target;
}
bool fp32_eligible(const Tensor& t) {
  return t.defined() && is_reduced_float(t.dtype());
}

// Casts for typed kernels: tensors and optional tensors change, everything
// else passes through untouched.
struct ToLower {
  DType target;
  Tensor operator()(const Tensor& t) const { return lower_eligible(t, target) ? t.to(target) : t; }
  std::optional<Tensor> operator()(const std::optional<Tensor>& t) const {
    if (!t) return t;
    return (*this)(*t);
  }
  template <class A>
  const A& operator()(const A& a) const {
    return a;
  }
};
struct ToFloat32 {
  Tensor operator()(const Tensor& t) const { return fp32_eligible(t) ? t.to(kFloat32) : t; }
  std::optional<Tensor> operator()(const std::optional<Tensor>& t) const {
    if (!t) return t;
    return (*this)(*t);
  }
  template <class A>
  const A& operator()(const A& a) const {
    return a;
  }
};

// An op name as a template argument.
template <size_t N>
struct OpName {
  char str[N];
  constexpr OpName(const char (&s)[N]) {  // NOLINT(implicit)
    for (size_t i = 0; i < N; ++i) str[i] = s[i];
  }
};

template <OpName Name, class Cast, class Sig>
struct TypedKernel;
template <OpName Name, class Cast, class... Args>
struct TypedKernel<Name, Cast, Tensor(Args...)> {
  static Tensor call(Args... args) {
    static const TypedOp<Tensor(Args...)> op(Name.str);
    const Cast cast = make_cast();
    return op.redispatch(DispatchKey::Autocast, cast(args)...);
  }
  static Cast make_cast() {
    if constexpr (std::is_same_v<Cast, ToLower>) {
      return ToLower{lower_dtype()};
    } else {
      return Cast{};
    }
  }
};

template <OpName Name, class Sig>
using Lower = TypedKernel<Name, ToLower, Sig>;
template <OpName Name, class Sig>
using Fp32 = TypedKernel<Name, ToFloat32, Sig>;

// softmax with dtype= unset on a 16-bit input computes and returns float32.
template <OpName Name>
Tensor softmax_fp32(const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  static const TypedOp<Tensor(const Tensor&, int64_t, std::optional<DType>)> op(Name.str);
  if (!dtype && fp32_eligible(self)) dtype = kFloat32;
  return op.redispatch(DispatchKey::Autocast, self, dim, dtype);
}

// --- Boxed kernels ---------------------------------------------------------------------

void redispatch_boxed(const OperatorEntry& op, Stack& stack) {
  ExcludeKeyGuard below(DispatchKey::Autocast, /*and_above=*/true);
  stack = call_normalized(op, std::move(stack));
}

// Calls f(tensor) -> tensor on every tensor argument, list elements included.
template <class F>
void map_tensors(Stack& stack, F&& f) {
  for (IValue& v : stack) {
    if (v.is_tensor()) {
      v = IValue(f(v.to_tensor()));
    } else if (v.is_tensor_list()) {
      std::vector<Tensor> list = v.to_tensor_list();
      for (Tensor& t : list) t = f(t);
      v = IValue(std::move(list));
    }
  }
}

void boxed_lower(const OperatorEntry& op, Stack& stack) {
  const DType target = lower_dtype();
  map_tensors(stack, [&](const Tensor& t) { return lower_eligible(t, target) ? t.to(target) : t; });
  redispatch_boxed(op, stack);
}

void boxed_fp32(const OperatorEntry& op, Stack& stack) {
  const int d = op.schema().argument_index("dtype");
  const bool dtype_given = d >= 0 && d < static_cast<int>(stack.size()) && !stack[d].is_none();
  if (!dtype_given) {
    map_tensors(stack, [](const Tensor& t) { return fp32_eligible(t) ? t.to(kFloat32) : t; });
  }
  redispatch_boxed(op, stack);
}

void boxed_promote(const OperatorEntry& op, Stack& stack) {
  auto counts = [](const Tensor& t) {
    return t.defined() && is_floating(t.dtype()) && !t.impl()->is_wrapped_number();
  };
  std::optional<DType> widest;
  map_tensors(stack, [&](const Tensor& t) {
    if (counts(t)) widest = widest ? promote_types(*widest, t.dtype()) : t.dtype();
    return t;
  });
  if (widest) {
    map_tensors(stack, [&](const Tensor& t) {
      return counts(t) && t.dtype() != *widest ? t.to(*widest) : t;
    });
  }
  redispatch_boxed(op, stack);
}

// Every op's policy, as its Autocast kernel was registered (autocast_policy()).
struct Policies {
  std::mutex mu;
  std::map<std::string, AutocastPolicy, std::less<>> by_op;
};
Policies& policies() {
  static auto* p = new Policies();  // leaked: registrations run at load, queries until exit
  return *p;
}

// Op names as FunctionSchema::full_name() writes them (no "kiln::").
std::string_view op_name(std::string_view name) {
  return name.substr(0, 6) == "kiln::" ? name.substr(6) : name;
}

void record_policy(std::string_view name, AutocastPolicy policy) {
  Policies& p = policies();
  std::lock_guard<std::mutex> lock(p.mu);
  p.by_op[std::string(op_name(name))] = policy;
}

// Registers `kernel` as op `name`'s typed Autocast kernel, of `policy`.
template <class Kernel>
void typed(Library& m, const char* name, AutocastPolicy policy, Kernel kernel) {
  m.impl(name, kernel);
  record_policy(name, policy);
}

BoxedKernel boxed_kernel(AutocastPolicy policy) {
  switch (policy) {
    case AutocastPolicy::LowerPrecision:
      return &boxed_lower;
    case AutocastPolicy::Float32:
      return &boxed_fp32;
    case AutocastPolicy::Promote:
      return &boxed_promote;
  }
  KILN_INTERNAL_ASSERT(false, "unknown autocast policy");
  return nullptr;
}

// Built-in ops whose kernels live in other files, by policy.
const char* const kFloat32Ops[] = {
    "sum",
    "sum.dim_IntList",
    "mean",
    "mean.dim",
    "prod",
    "prod.dim_int",
    "cumsum",
    "cumprod",
    "logsumexp",
    "norm.Scalar",
    "norm.ScalarOpt_dim",
    "var.correction",
    "std.correction",
    "exp",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "reciprocal",
    "rsqrt",
    "sinh",
    "cosh",
    "tan",
    "asin",
    "acos",
    "pow.Tensor_Tensor",
    "pow.Tensor_Scalar",
    "pow.Scalar",
    "softplus",
};
const char* const kPromoteOps[] = {
    "cat", "stack", "index_copy", "addcmul", "addcdiv", "where.self", "atan2", "scatter_add",
};

using T = const Tensor&;
using OptT = const std::optional<Tensor>&;
using S = const Scalar&;

}  // namespace

// --- The public surface -------------------------------------------------------------

AutocastGuard::AutocastGuard(DType dtype, bool enabled)
    : saved_included_(detail::local_keys().included), saved_dtype_(t_autocast_dtype) {
  check_dtype("AutocastGuard", "dtype", dtype);
  KILN_CHECK(dtype == kFloat16 || dtype == kBFloat16,
             "[AutocastGuard] expected dtype float16 or bfloat16, got ", dtype);
  if (enabled) {
    detail::local_keys().included |= key_bit(DispatchKey::Autocast);
    t_autocast_dtype = dtype;
  } else {
    detail::local_keys().included &= ~key_bit(DispatchKey::Autocast);
    t_autocast_dtype = std::nullopt;
  }
}

AutocastGuard::~AutocastGuard() {
  detail::local_keys().included = saved_included_;
  t_autocast_dtype = saved_dtype_;
}

std::optional<DType> autocast_dtype() {
  return t_autocast_dtype;
}

void set_autocast_policy(std::string_view name, AutocastPolicy policy) {
  KILN_CHECK(policy == AutocastPolicy::LowerPrecision || policy == AutocastPolicy::Float32 ||
                 policy == AutocastPolicy::Promote,
             "[set_autocast_policy] expected policy LowerPrecision, Float32 or Promote, got an "
             "invalid policy (",
             static_cast<int>(policy), ")");
  Library lib(Library::Kind::Impl, "_", DispatchKey::Autocast);
  lib.impl_boxed(name, boxed_kernel(policy));
  record_policy(name, policy);
}

std::optional<AutocastPolicy> autocast_policy(std::string_view name) {
  Policies& p = policies();
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.by_op.find(op_name(name));
  if (it == p.by_op.end()) return std::nullopt;
  return it->second;
}

KILN_LIBRARY_IMPL(kiln, Autocast, m) {
  constexpr AutocastPolicy kLow = AutocastPolicy::LowerPrecision, kF32 = AutocastPolicy::Float32;
  typed(m, "matmul", kLow, &Lower<"matmul", Tensor(T, T)>::call);
  typed(m, "mm", kLow, &Lower<"mm", Tensor(T, T)>::call);
  typed(m, "bmm", kLow, &Lower<"bmm", Tensor(T, T)>::call);
  typed(m, "mv", kLow, &Lower<"mv", Tensor(T, T)>::call);
  typed(m, "outer", kLow, &Lower<"outer", Tensor(T, T)>::call);
  typed(m, "addmm", kLow, &Lower<"addmm", Tensor(T, T, T, S, S)>::call);
  typed(m, "baddbmm", kLow, &Lower<"baddbmm", Tensor(T, T, T, S, S)>::call);
  typed(m, "linear", kLow, &Lower<"linear", Tensor(T, T, OptT)>::call);
  typed(m, "scaled_dot_product_attention", kLow,
        &Lower<"scaled_dot_product_attention",
               Tensor(T, T, T, OptT, double, bool, std::optional<double>, bool)>::call);

  typed(m, "softmax.int", kF32, &softmax_fp32<"softmax.int">);
  typed(m, "log_softmax.int", kF32, &softmax_fp32<"log_softmax.int">);
  typed(m, "layer_norm", kF32,
        &Fp32<"layer_norm", Tensor(T, IntArrayRef, OptT, OptT, double, bool)>::call);
  typed(m, "rms_norm", kF32,
        &Fp32<"rms_norm", Tensor(T, IntArrayRef, OptT, std::optional<double>)>::call);

  for (const char* name : kFloat32Ops) {
    m.impl_boxed(name, &boxed_fp32);
    record_policy(name, kF32);
  }
  for (const char* name : kPromoteOps) {
    m.impl_boxed(name, &boxed_promote);
    record_policy(name, AutocastPolicy::Promote);
  }
}

}  // namespace kiln
