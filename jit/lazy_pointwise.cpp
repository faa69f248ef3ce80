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

#include <initializer_list>
#include <string_view>

#include "jit/lazy_kernel.h"
#include "jit/pipeline.h"
#include "jit/trace_buffer.h"
#include "runtime/core/tensor_utils.h"
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

bool row_major(const TensorImpl* t) {
  IntArrayRef sizes = t->sizes(), strides = t->strides();
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
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
    if (d.is_meta() || !impl->is_contiguous() || impl->numel() == 0) return false;
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
  DType promoted = rt.result("lazy");
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

// A functional op's node with one fresh output.
Tensor record_functional(const OperatorEntry& op, Stack args, const Geometry& g) {
  Tensor out = fresh_output(g.sizes, contiguous_strides(g.sizes), 0, g.dtype, g.device);
  TraceBuffer& trace = TraceBuffer::current();
  trace.mark_written(out.impl()->storage().get());
  Node node;
  node.op = &op;
  node.device = g.device;
  node.outputs.push_back(out);
  node.args = std::move(args);
  trace.append(std::move(node));
  count_recorded();
  return out;
}

// An in-place op's node: it writes and returns argument 0, `self`.
void record_in_place(const OperatorEntry& op, Stack args, const Tensor& self, Device device) {
  TraceBuffer& trace = TraceBuffer::current();
  Node node;
  node.op = &op;
  node.device = device;
  node.written.push_back(0);
  node.outputs.push_back(self);
  // The write happens now as far as anyone can tell: bump the version at the call.
  self.impl()->bump_version();
  trace.mark_written(self.impl()->storage().get());
  node.args = std::move(args);
  trace.append(std::move(node));
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

// The arguments boxed as the dispatcher boxes them for the fallback.
template <class... A>
Stack make_stack(const A&... args) {
  Stack s;
  s.reserve(sizeof...(A));
  (s.push_back(detail::box(args)), ...);
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
template <const char* kName, Rule kRule, class... Extra>
Tensor binary(const Tensor& self, const Tensor& other, Extra... extra) {
  Geometry g;
  if (KILN_LIKELY(pointwise_geometry({&self, &other}, kRule, g))) {
    return record_functional(entry<kName>(), make_stack(self, other, extra...), g);
  }
  return fallback(entry<kName>(), make_stack(self, other, extra...));
}

// name_(self, other, extra...), e.g. add_(self, other, alpha).
template <const char* kName, Rule kRule, class... Extra>
Tensor binary_(const Tensor& self, const Tensor& other, Extra... extra) {
  Geometry g;
  if (KILN_LIKELY(pointwise_geometry({&self, &other}, kRule, g) &&
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
  if (KILN_LIKELY(pointwise_geometry({&self}, Rule::Float, g))) {
    return record_functional(entry<kName>(), make_stack(self), g);
  }
  return fallback(entry<kName>(), make_stack(self));
}

template <const char* kName>
Tensor unary_(const Tensor& self) {
  Geometry g;
  if (KILN_LIKELY(pointwise_geometry({&self}, Rule::Float, g) && in_place_ok(self, {}, g))) {
    record_in_place(entry<kName>(), make_stack(self), self, g.device);
    return self;
  }
  return fallback(entry<kName>(), make_stack(self));
}

bool gelu_mode_ok(std::string_view approximate) {
  return approximate == "none" || approximate == "tanh";
}

constexpr char kGelu[] = "gelu";
constexpr char kGelu_[] = "gelu_";

Tensor gelu(const Tensor& self, std::string_view approximate) {
  Geometry g;
  if (gelu_mode_ok(approximate) && pointwise_geometry({&self}, Rule::Float, g)) {
    return record_functional(entry<kGelu>(), make_stack(self, approximate), g);
  }
  return fallback(entry<kGelu>(), make_stack(self, approximate));
}

Tensor gelu_(const Tensor& self, std::string_view approximate) {
  Geometry g;
  if (gelu_mode_ok(approximate) && pointwise_geometry({&self}, Rule::Float, g) &&
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
}
#undef KILN_UNARY_OPS

}  // namespace kiln::jit
