// Typed Lazy kernels for the common pointwise ops: they record a node with
// the output geometry computed directly, and hand every call they are not
// sure about to the boxed fallback.
//
// Note [Typed lazy recording]
// The boxed fallback (lazy_kernel.cpp) records any op, but pays for it: the
// caller boxes its arguments, the fallback builds meta twins, copies the stack
// and calls the Meta kernel to learn the output's geometry. For pointwise ops
// on row-major inputs that geometry is simple: the broadcast shape, row-major
// strides, the promoted dtype (TensorIter lays its output out that way: every
// operand then agrees on the dim order). The kernels here compute it without
// meta tensors, and only take calls the Meta kernel would accept: floating
// results (no integer alpha or bool subtraction rules to apply), no meta or
// empty tensors, inputs that are row-major and shaped like a suffix of the
// broadcast shape (or 0-dim), in-place targets of the broadcast shape that no
// input partly overlaps. Anything else, including every error, goes to the
// fallback, so the two paths cannot disagree. LazyRecording tests compare the
// geometry of both on the ops registered here.

#include <array>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <type_traits>

#include "jit/plan/pipeline.h"
#include "jit/record/lazy_kernel.h"
#include "jit/record/trace_buffer.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/core/thread_cache.h"
#include "runtime/core/type_promotion.h"

namespace kiln::jit {
namespace {

// How the output dtype follows from the inputs' promoted dtype.
enum class Rule : uint8_t {
  Float,        // the promoted dtype, which must be floating (add, mul, exp, ...)
  ToFloat,      // the promoted dtype, integers and bool going to float32 (div)
  FloatNoBool,  // as Float, and no input may be bool (sub)
  Bool,         // bool, any inputs (comparisons)
};

struct Geometry {
  IntArrayRef sizes;  // the broadcast shape (borrowed from an input)
  DType dtype = kFloat32;
  Device device = Device::cpu();
};

// A storage that wraps memory another one wraps too takes the fallback, which
// runs the op at its call (Note [Memory wrapped twice] in
// runtime/core/tensor_impl.cpp).
bool wrapped_twice(const TensorImpl* t) {
  return KILN_UNLIKELY(StorageImpl::any_shares_memory()) && t->has_storage() &&
         t->storage()->shares_memory();
}

bool row_major(const TensorImpl* t) {
  IntArrayRef sizes = t->sizes(), strides = t->strides();
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// Sets the output dtype that `rule` makes of the operands' promoted dtype;
// false when the rule refuses it.
bool apply_rule(Rule rule, DType promoted, Geometry& g) {
  switch (rule) {
    case Rule::Float:
    case Rule::FloatNoBool:
      g.dtype = promoted;
      return is_floating(promoted);
    case Rule::ToFloat:
      g.dtype = to_floating(promoted);
      return true;
    case Rule::Bool:
      g.dtype = kBool;
      return true;
  }
  return false;
}

// The geometry of a pointwise op's fresh output when the inputs allow the
// direct computation (Note [Typed lazy recording]); false sends the call to
// the fallback.
bool pointwise_geometry(std::initializer_list<const Tensor*> inputs, Rule rule, Geometry& g) {
  const TensorImpl* widest = nullptr;
  bool same_shape = true;
  ResultType rt;
  for (const Tensor* t : inputs) {
    if (!t->defined()) return false;
    const TensorImpl* impl = t->impl();
    Device d = impl->device();
    if (d.is_meta() || !impl->is_contiguous() || impl->numel() == 0 || wrapped_twice(impl)) {
      return false;
    }
    if (rule == Rule::FloatNoBool && impl->dtype() == kBool) return false;
    if (d.is_cuda() && g.device.is_cpu()) g.device = d;
    if (widest == nullptr) {
      widest = impl;
    } else if (!(impl->sizes() == widest->sizes())) {
      same_shape = false;
      if (impl->dim() > widest->dim()) widest = impl;
    }
    rt.add(*t);
  }
  if (g.device.is_cuda()) {
    // Note [One device per CUDA op] (lazy_kernel.cpp): only wrapped numbers
    // may sit on the CPU; anything else off the device takes the fallback.
    for (const Tensor* t : inputs) {
      if (t->device() != g.device && !t->impl()->is_wrapped_number()) return false;
    }
  }
  g.sizes = widest->sizes();
  if (!same_shape) {
    // TensorIter orders dims by the operands' strides here: row-major ones
    // and suffix shapes keep its order (and the output) row-major.
    for (const Tensor* t : inputs) {
      const TensorImpl* impl = t->impl();
      if (impl->dim() == 0) continue;
      if (!row_major(impl)) return false;
      IntArrayRef s = impl->sizes();
      const size_t off = g.sizes.size() - s.size();
      for (size_t d = 0; d < s.size(); ++d) {
        if (s[d] != g.sizes[off + d]) return false;
      }
    }
  }
  return apply_rule(rule, rt.result("lazy"), g);
}

// pointwise_geometry() of one operand: its sizes, and its dtype as promotion
// leaves it (a wrapped float number takes the default dtype). One operand
// needs none of the promotion's bookkeeping, about 4% of recording a sigmoid.
// Its operand checks repeat pointwise_geometry()'s on purpose: a shared
// helper changed how add's recording inlines (+21 instructions per add).
bool unary_geometry(const Tensor& self, Rule rule, Geometry& g) {
  if (!self.defined()) return false;
  const TensorImpl* impl = self.impl();
  const Device d = impl->device();
  if (d.is_meta() || !impl->is_contiguous() || impl->numel() == 0 || wrapped_twice(impl)) {
    return false;
  }
  if (rule == Rule::FloatNoBool && impl->dtype() == kBool) return false;
  if (d.is_cuda()) g.device = d;
  g.sizes = impl->sizes();
  const DType dtype = impl->dtype();
  return apply_rule(rule, impl->is_wrapped_number() && is_floating(dtype) ? kFloat32 : dtype, g);
}

// A functional op's node with one fresh output.
Tensor record_functional(const OperatorEntry& op, Stack args, const Geometry& g) {
  Tensor out = unallocated_tensor(g.sizes, g.dtype, g.device);
  Node node;
  node.op = &op;
  node.device = g.device;
  node.outputs = node_outputs();
  node.outputs.push_back(out);
  node.args = std::move(args);
  TraceBuffer::current().append(std::move(node));  // marks `out` written by the trace
  count_recorded();
  return out;
}

// An in-place op's node: it writes and returns argument 0, `self`.
void record_in_place(const OperatorEntry& op, Stack args, const Tensor& self, Device device) {
  Node node;
  node.op = &op;
  node.device = device;
  node.written.push_back(0);
  node.outputs = node_outputs();
  node.outputs.push_back(self);
  // The write happens now as far as anyone can tell: bump the version at the call.
  self.impl()->bump_version();
  node.args = std::move(args);
  TraceBuffer::current().append(std::move(node));
  count_recorded();
}

// True when `self` can take the result in place: it has the broadcast shape,
// its elements do not share memory, no other input partly overlaps it, and
// the (floating) result converts to its floating dtype.
bool in_place_ok(const Tensor& self, std::initializer_list<const Tensor*> inputs,
                 const Geometry& g) {
  const TensorImpl* s = self.impl();
  if (!(s->sizes() == g.sizes) || !is_floating(s->dtype()) || !is_floating(g.dtype)) return false;
  for (const Tensor* t : inputs) {
    const TensorImpl* impl = t->impl();
    if (impl != s && impl->storage().get() == s->storage().get()) return false;
  }
  return true;
}

// The arguments boxed as the dispatcher boxes them for the fallback. Tensors
// and Scalars box as IValue's own constructor does: built in place, with no
// temporary IValue to move and destroy.
template <class A>
void push_boxed(Stack& s, const A& a) {
  if constexpr (std::is_same_v<A, Tensor> || std::is_same_v<A, Scalar>) {
    s.emplace_back(a);
  } else {
    s.push_back(detail::box(a));
  }
}

template <class... A>
Stack make_stack(const A&... args) {
  Stack s = node_stack();
  s.reserve(sizeof...(A));
  (push_boxed(s, args), ...);
  return s;
}

// The boxed fallback for a typed call.
Tensor fallback(const OperatorEntry& op, Stack stack) {
  lazy_fallback(op, stack);
  return std::move(stack.at(0).to_tensor());
}

// The op's entry, found on the first call (kernels register before ops may).
template <const char* kName>
const OperatorEntry& entry() {
  static const OperatorEntry* e = &find_op(kName).entry();
  return *e;
}

// name(self, other, extra...), e.g. add(self, other, alpha).
// add/sub's alpha (their one extra argument): one the eager kernel refuses
// takes the fallback, whose Meta kernel raises at the call.
template <class... Extra>
bool extras_ok(const Geometry& g, const Extra&... extra) {
  if constexpr (sizeof...(Extra) == 1) {
    return alpha_ok(g.dtype, extra...);
  } else {
    return true;
  }
}

template <const char* kName, Rule kRule, class... Extra>
Tensor binary(const Tensor& self, const Tensor& other, Extra... extra) {
  Geometry g;
  if (KILN_LIKELY(pointwise_geometry({&self, &other}, kRule, g) && extras_ok(g, extra...))) {
    return record_functional(entry<kName>(), make_stack(self, other, extra...), g);
  }
  return fallback(entry<kName>(), make_stack(self, other, extra...));
}

// name_(self, other, extra...), e.g. add_(self, other, alpha).
template <const char* kName, Rule kRule, class... Extra>
Tensor binary_(const Tensor& self, const Tensor& other, Extra... extra) {
  Geometry g;
  if (KILN_LIKELY(pointwise_geometry({&self, &other}, kRule, g) && extras_ok(g, extra...) &&
                  in_place_ok(self, {&other}, g))) {
    record_in_place(entry<kName>(), make_stack(self, other, extra...), self, g.device);
    return self;
  }
  return fallback(entry<kName>(), make_stack(self, other, extra...));
}

// A unary op of floating inputs that keeps their dtype.
template <const char* kName>
Tensor unary(const Tensor& self) {
  Geometry g;
  if (KILN_LIKELY(unary_geometry(self, Rule::Float, g))) {
    return record_functional(entry<kName>(), make_stack(self), g);
  }
  return fallback(entry<kName>(), make_stack(self));
}

template <const char* kName>
Tensor unary_(const Tensor& self) {
  Geometry g;
  if (KILN_LIKELY(unary_geometry(self, Rule::Float, g) && in_place_ok(self, {}, g))) {
    record_in_place(entry<kName>(), make_stack(self), self, g.device);
    return self;
  }
  return fallback(entry<kName>(), make_stack(self));
}

// Note [Wrapped number cache]
// `x * 0.5` records mul.Tensor with 0.5 as a wrapped 0-dim tensor, the node
// the Composite kernel leads to, so every pass and generator sees what it
// always saw (they read wrapped numbers as constants). Making that tensor
// costs three allocations, more than the rest of the record. Nothing writes a
// wrapped number (it is only ever a read operand of the Tensor overload, and
// these kernels hand it to no one else), so nodes may share one: each thread
// keeps the last few it made, found by value (Scalar::equal: kind and bits,
// so 0.0 and -0.0 stay apart). A loop recording `x * 0.5` allocates none.
Tensor wrapped(const Scalar& s) {
  struct Entry {
    Scalar value;
    Tensor tensor;
  };
  struct Cache {
    std::array<Entry, 8> entries;
    uint32_t next = 0;
  };
  // Note [Thread caches at thread exit]
  Cache* cache = ThreadCache<Cache>::get();
  if (!cache) return wrap_scalar(s);
  for (const Entry& e : cache->entries) {
    if (e.tensor.defined() && e.value.equal(s)) return e.tensor;
  }
  Entry& e = cache->entries[cache->next++ % cache->entries.size()];
  e.value = s;
  e.tensor = wrap_scalar(s);
  return e.tensor;
}

// name.Scalar(self, other, extra...): the node the Composite kernel would
// lead to (name.Tensor with `other` a wrapped number, Note [Typed lazy
// recording]), without its second dispatch; declined calls take the same
// fallback the Tensor overload takes.
template <const char* kName, Rule kRule, class... Extra>
Tensor binary_scalar(const Tensor& self, const Scalar& other, Extra... extra) {
  return binary<kName, kRule, Extra...>(self, wrapped(other), extra...);
}

template <const char* kName, Rule kRule, class... Extra>
Tensor binary_scalar_(const Tensor& self, const Scalar& other, Extra... extra) {
  return binary_<kName, kRule, Extra...>(self, wrapped(other), extra...);
}

// Ops whose Scalar arguments stay in the node (pow.Tensor_Scalar, clamp,
// masked_fill.Scalar: their decompositions read them as constants): only
// floating `self` is taken, whose dtype a number never changes, so the
// result keeps self's dtype.
bool floating_self(const Tensor& self, Geometry& g) {
  return self.defined() && is_floating(self.dtype()) && unary_geometry(self, Rule::Float, g);
}

// Whether a number fits the floating dtype it is converted to: the eager
// kernels' own test (scalar_overflows, behind scalar_to and
// check_convertible), so that a call they refuse takes the fallback, whose
// Meta kernel raises at the call with their message.
bool fits(const Scalar& v, DType t) {
  return !scalar_overflows(v, t);
}

constexpr char kPow[] = "pow.Tensor_Scalar";
constexpr char kPow_[] = "pow_.Scalar";
constexpr char kClamp[] = "clamp";
constexpr char kClamp_[] = "clamp_";
constexpr char kMaskedFill[] = "masked_fill.Scalar";
constexpr char kMaskedFill_[] = "masked_fill_.Scalar";

// A 16-bit self takes the exponent in its own dtype, checked (the Meta kernel
// raises at the call when it does not fit).
bool pow_ok(const Tensor& self, const Scalar& exponent, Geometry& g) {
  return floating_self(self, g) &&
         (!is_reduced_float(self.dtype()) || fits(exponent, self.dtype()));
}

Tensor pow_scalar(const Tensor& self, const Scalar& exponent) {
  Geometry g;
  if (KILN_LIKELY(pow_ok(self, exponent, g))) {
    return record_functional(entry<kPow>(), make_stack(self, exponent), g);
  }
  return fallback(entry<kPow>(), make_stack(self, exponent));
}

Tensor pow_scalar_(const Tensor& self, const Scalar& exponent) {
  Geometry g;
  if (KILN_LIKELY(pow_ok(self, exponent, g) && in_place_ok(self, {}, g))) {
    record_in_place(entry<kPow_>(), make_stack(self, exponent), self, g.device);
    return self;
  }
  return fallback(entry<kPow_>(), make_stack(self, exponent));
}

using OptScalar = const std::optional<Scalar>&;

// Number bounds are converted to self's dtype, checked (the Meta kernel
// raises at the call when one does not fit; recorded unchecked, the fused
// kernel clamped to inf, or not at all).
bool clamp_ok(const Tensor& self, OptScalar min, OptScalar max, Geometry& g) {
  return (min || max) && floating_self(self, g) && (!min || fits(*min, self.dtype())) &&
         (!max || fits(*max, self.dtype()));
}

Tensor clamp(const Tensor& self, OptScalar min, OptScalar max) {
  Geometry g;
  if (KILN_LIKELY(clamp_ok(self, min, max, g))) {
    return record_functional(entry<kClamp>(), make_stack(self, min, max), g);
  }
  return fallback(entry<kClamp>(), make_stack(self, min, max));
}

Tensor clamp_(const Tensor& self, OptScalar min, OptScalar max) {
  Geometry g;
  if (KILN_LIKELY(clamp_ok(self, min, max, g) && in_place_ok(self, {}, g))) {
    record_in_place(entry<kClamp_>(), make_stack(self, min, max), self, g.device);
    return self;
  }
  return fallback(entry<kClamp_>(), make_stack(self, min, max));
}

// masked_fill's output is a fresh row-major tensor of the broadcast shape
// whatever the operands' layouts: taken when the mask is a bool tensor that
// broadcasts to self's shape, on self's device, and the value fits self's
// dtype (the eager kernel's checks).
bool masked_fill_ok(const Tensor& self, const Tensor& mask, const Scalar& value, Geometry& g) {
  if (!mask.defined() || mask.dtype() != kBool || mask.device() != self.device() ||
      mask.numel() == 0 || mask.dim() > self.dim() || wrapped_twice(mask.impl()) ||
      !floating_self(self, g)) {
    return false;
  }
  if (!fits(value, self.dtype())) return false;
  IntArrayRef s = self.sizes(), m = mask.sizes();
  const size_t off = s.size() - m.size();
  for (size_t d = 0; d < m.size(); ++d) {
    if (m[d] != 1 && m[d] != s[off + d]) return false;
  }
  return true;
}

Tensor masked_fill(const Tensor& self, const Tensor& mask, const Scalar& value) {
  Geometry g;
  if (KILN_LIKELY(masked_fill_ok(self, mask, value, g))) {
    return record_functional(entry<kMaskedFill>(), make_stack(self, mask, value), g);
  }
  return fallback(entry<kMaskedFill>(), make_stack(self, mask, value));
}

Tensor masked_fill_(const Tensor& self, const Tensor& mask, const Scalar& value) {
  Geometry g;
  if (KILN_LIKELY(masked_fill_ok(self, mask, value, g) && in_place_ok(self, {&mask}, g))) {
    record_in_place(entry<kMaskedFill_>(), make_stack(self, mask, value), self, g.device);
    return self;
  }
  return fallback(entry<kMaskedFill_>(), make_stack(self, mask, value));
}

bool gelu_mode_ok(std::string_view approximate) {
  return approximate == "none" || approximate == "tanh";
}

constexpr char kGelu[] = "gelu";
constexpr char kGelu_[] = "gelu_";

Tensor gelu(const Tensor& self, std::string_view approximate) {
  Geometry g;
  if (gelu_mode_ok(approximate) && unary_geometry(self, Rule::Float, g)) {
    return record_functional(entry<kGelu>(), make_stack(self, approximate), g);
  }
  return fallback(entry<kGelu>(), make_stack(self, approximate));
}

Tensor gelu_(const Tensor& self, std::string_view approximate) {
  Geometry g;
  if (gelu_mode_ok(approximate) && unary_geometry(self, Rule::Float, g) &&
      in_place_ok(self, {}, g)) {
    record_in_place(entry<kGelu_>(), make_stack(self, approximate), self, g.device);
    return self;
  }
  return fallback(entry<kGelu_>(), make_stack(self, approximate));
}

#define KILN_NAME(var, text) constexpr char var[] = text;
KILN_NAME(kAdd, "add.Tensor")
KILN_NAME(kAdd_, "add_.Tensor")
KILN_NAME(kSub, "sub.Tensor")
KILN_NAME(kSub_, "sub_.Tensor")
KILN_NAME(kMul, "mul.Tensor")
KILN_NAME(kMul_, "mul_.Tensor")
KILN_NAME(kDiv, "div.Tensor")
KILN_NAME(kDiv_, "div_.Tensor")
KILN_NAME(kMaximum, "maximum")
KILN_NAME(kMinimum, "minimum")
KILN_NAME(kEq, "eq.Tensor")
KILN_NAME(kNe, "ne.Tensor")
KILN_NAME(kLt, "lt.Tensor")
KILN_NAME(kLe, "le.Tensor")
KILN_NAME(kGt, "gt.Tensor")
KILN_NAME(kGe, "ge.Tensor")
#define KILN_UNARY_NAMES(name) \
  KILN_NAME(k_##name, #name)   \
  KILN_NAME(k_##name##_, #name "_")
#define KILN_UNARY_OPS(X) \
  X(neg)                  \
  X(abs)                  \
  X(exp)                  \
  X(expm1)                \
  X(log)                  \
  X(log1p)                \
  X(sqrt)                 \
  X(rsqrt)                \
  X(reciprocal)           \
  X(sin)                  \
  X(cos)                  \
  X(tanh)                 \
  X(sigmoid)              \
  X(relu)                 \
  X(silu)                 \
  X(erf)
KILN_UNARY_OPS(KILN_UNARY_NAMES)
#undef KILN_UNARY_NAMES
#undef KILN_NAME

using S = const Scalar&;

}  // namespace

KILN_LIBRARY_IMPL(kiln, Lazy, m) {
  m.impl("add.Tensor", &binary<kAdd, Rule::Float, S>);
  m.impl("add_.Tensor", &binary_<kAdd_, Rule::Float, S>);
  m.impl("sub.Tensor", &binary<kSub, Rule::FloatNoBool, S>);
  m.impl("sub_.Tensor", &binary_<kSub_, Rule::FloatNoBool, S>);
  m.impl("mul.Tensor", &binary<kMul, Rule::Float>);
  m.impl("mul_.Tensor", &binary_<kMul_, Rule::Float>);
  m.impl("div.Tensor", &binary<kDiv, Rule::ToFloat>);
  m.impl("div_.Tensor", &binary_<kDiv_, Rule::ToFloat>);
  m.impl("maximum", &binary<kMaximum, Rule::Float>);
  m.impl("minimum", &binary<kMinimum, Rule::Float>);
  m.impl("eq.Tensor", &binary<kEq, Rule::Bool>);
  m.impl("ne.Tensor", &binary<kNe, Rule::Bool>);
  m.impl("lt.Tensor", &binary<kLt, Rule::Bool>);
  m.impl("le.Tensor", &binary<kLe, Rule::Bool>);
  m.impl("gt.Tensor", &binary<kGt, Rule::Bool>);
  m.impl("ge.Tensor", &binary<kGe, Rule::Bool>);
#define KILN_REGISTER_UNARY(name)  \
  m.impl(#name, &unary<k_##name>); \
  m.impl(#name "_", &unary_<k_##name##_>);
  KILN_UNARY_OPS(KILN_REGISTER_UNARY)
#undef KILN_REGISTER_UNARY
  m.impl("gelu", &gelu);
  m.impl("gelu_", &gelu_);
  m.impl("add.Scalar", &binary_scalar<kAdd, Rule::Float, S>);
  m.impl("add_.Scalar", &binary_scalar_<kAdd_, Rule::Float, S>);
  m.impl("sub.Scalar", &binary_scalar<kSub, Rule::FloatNoBool, S>);
  m.impl("sub_.Scalar", &binary_scalar_<kSub_, Rule::FloatNoBool, S>);
  m.impl("mul.Scalar", &binary_scalar<kMul, Rule::Float>);
  m.impl("mul_.Scalar", &binary_scalar_<kMul_, Rule::Float>);
  m.impl("div.Scalar", &binary_scalar<kDiv, Rule::ToFloat>);
  m.impl("div_.Scalar", &binary_scalar_<kDiv_, Rule::ToFloat>);
  m.impl("eq.Scalar", &binary_scalar<kEq, Rule::Bool>);
  m.impl("ne.Scalar", &binary_scalar<kNe, Rule::Bool>);
  m.impl("lt.Scalar", &binary_scalar<kLt, Rule::Bool>);
  m.impl("le.Scalar", &binary_scalar<kLe, Rule::Bool>);
  m.impl("gt.Scalar", &binary_scalar<kGt, Rule::Bool>);
  m.impl("ge.Scalar", &binary_scalar<kGe, Rule::Bool>);
  m.impl("pow.Tensor_Scalar", &pow_scalar);
  m.impl("pow_.Scalar", &pow_scalar_);
  m.impl("clamp", &clamp);
  m.impl("clamp_", &clamp_);
  m.impl("masked_fill.Scalar", &masked_fill);
  m.impl("masked_fill_.Scalar", &masked_fill_);
}
#undef KILN_UNARY_OPS

}  // namespace kiln::jit
