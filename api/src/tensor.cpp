// Tensor's methods and operators: thin calls into the ops.

#include "kiln/tensor.h"

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"

namespace kiln {

#define KILN_CALL(name, Sig, ...)                     \
  do {                                                \
    static const ::kiln::TypedOp<Sig> kiln_op_(name); \
    return kiln_op_(__VA_ARGS__);                     \
  } while (0)

using T = const Tensor&;

int64_t Tensor::size(int64_t d) const {
  const TensorImpl* t = checked("size");
  KILN_CHECK(t->dim() > 0, "[size] expected a tensor with dims, got a 0-dim tensor (dim ", d, ")");
  return t->sizes()[wrap_dim(d, t->dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  const TensorImpl* t = checked("stride");
  KILN_CHECK(t->dim() > 0, "[stride] expected a tensor with dims, got a 0-dim tensor (dim ", d,
             ")");
  return t->strides()[wrap_dim(d, t->dim(), "stride")];
}

void Tensor::fail_item_range(const Scalar& v, size_t bits, bool is_signed) {
  KILN_FAIL("[item] expected a value that the requested ", is_signed ? "" : "unsigned ", bits,
            "-bit type holds, got ",
            v.is_floating_point() ? std::to_string(v.to_double()) : std::to_string(v.to_int()));
}

void Tensor::fail_undefined(const char* what) {
  KILN_FAIL("[Tensor::", what, "] expected a defined tensor, got an undefined one (a Tensor() ",
            "holds no data)");
}

void Tensor::check_dtype(DType expected, const char* what) const {
  KILN_CHECK(dtype() == expected, "[", what, "] expected a tensor of dtype ", expected, ", got ",
             dtype());
}

Scalar Tensor::item() const {
  KILN_CHECK(defined(), "[item] expected a defined tensor, got an undefined one");
  KILN_CHECK(numel() == 1, "[item] expected a tensor with one element, got ", numel(),
             " elements (sizes ", sizes(), ")");
  KILN_CHECK(!device().is_meta(), "[item] expected a tensor with data, got a meta tensor");
  Tensor c = device().is_cpu() ? *this : to(Device::cpu());
  return load_scalar(c.data_ptr(), c.dtype(), 0);
}

Tensor Tensor::view(IntArrayRef s) const {
  KILN_CALL("view", Tensor(T, IntArrayRef), *this, s);
}
Tensor Tensor::reshape(IntArrayRef s) const {
  KILN_CALL("reshape", Tensor(T, IntArrayRef), *this, s);
}
Tensor Tensor::permute(IntArrayRef dims) const {
  KILN_CALL("permute", Tensor(T, IntArrayRef), *this, dims);
}
Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  KILN_CALL("transpose.int", Tensor(T, int64_t, int64_t), *this, d0, d1);
}
Tensor Tensor::t() const {
  KILN_CALL("t", Tensor(T), *this);
}
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  KILN_CALL("narrow", Tensor(T, int64_t, int64_t, int64_t), *this, d, start, length);
}
Tensor Tensor::narrow(int64_t d, const Tensor& start, int64_t length) const {
  KILN_CALL("narrow.Tensor", Tensor(T, int64_t, T, int64_t), *this, d, start, length);
}
Tensor Tensor::slice(int64_t d, std::optional<int64_t> start, std::optional<int64_t> end,
                     int64_t step) const {
  using O = std::optional<int64_t>;
  KILN_CALL("slice.Tensor", Tensor(T, int64_t, O, O, int64_t), *this, d, start, end, step);
}
Tensor Tensor::select(int64_t d, int64_t index) const {
  KILN_CALL("select.int", Tensor(T, int64_t, int64_t), *this, d, index);
}
Tensor Tensor::expand(IntArrayRef s) const {
  KILN_CALL("expand", Tensor(T, IntArrayRef, bool), *this, s, false);
}
Tensor Tensor::squeeze() const {
  KILN_CALL("squeeze", Tensor(T), *this);
}
Tensor Tensor::squeeze(int64_t d) const {
  KILN_CALL("squeeze.dim", Tensor(T, int64_t), *this, d);
}
Tensor Tensor::unsqueeze(int64_t d) const {
  KILN_CALL("unsqueeze", Tensor(T, int64_t), *this, d);
}
Tensor Tensor::flatten(int64_t start, int64_t end) const {
  KILN_CALL("flatten.using_ints", Tensor(T, int64_t, int64_t), *this, start, end);
}
Tensor Tensor::unflatten(int64_t d, IntArrayRef s) const {
  KILN_CALL("unflatten.int", Tensor(T, int64_t, IntArrayRef), *this, d, s);
}
Tensor Tensor::as_strided(IntArrayRef s, IntArrayRef st, std::optional<int64_t> offset) const {
  KILN_CALL("as_strided", Tensor(T, IntArrayRef, IntArrayRef, std::optional<int64_t>), *this, s, st,
            offset);
}
Tensor Tensor::diagonal(int64_t offset, int64_t d1, int64_t d2) const {
  KILN_CALL("diagonal", Tensor(T, int64_t, int64_t, int64_t), *this, offset, d1, d2);
}
Tensor Tensor::unfold(int64_t dimension, int64_t size, int64_t step) const {
  KILN_CALL("unfold", Tensor(T, int64_t, int64_t, int64_t), *this, dimension, size, step);
}
Tensor Tensor::contiguous() const {
  KILN_CHECK(defined(), "[contiguous] expected a defined tensor, got an undefined one");
  if (is_contiguous()) return *this;
  KILN_CALL("contiguous", Tensor(T), *this);
}

Tensor Tensor::clone() const {
  return kiln::clone(*this);
}
namespace {
Tensor convert(const Tensor& self, Device d, DType t) {
  KILN_CHECK(self.defined(), "[to] expected a defined tensor, got an undefined one");
  check_dtype("to", "dtype", t);  // before the comparison below: Note [Enum arguments]
  using OD = std::optional<DType>;
  using ODev = std::optional<Device>;
  static const TypedOp<Tensor(T, OD, ODev, bool)> to_copy("_to_copy");
  return d == self.device() && t == self.dtype() ? self : to_copy(self, OD(t), ODev(d), false);
}
}  // namespace

// A cast alone is an ordinary op: it stays lazy.
Tensor Tensor::to(DType t) const {
  KILN_CHECK(defined(), "[to] expected a defined tensor, got an undefined one");
  return convert(*this, device(), t);
}
Tensor Tensor::to(Device d) const {
  KILN_CHECK(defined(), "[to] expected a defined tensor, got an undefined one");
  return to(d, dtype());
}
// Moving a tensor to the host (`cpu()`, `to(Device::cpu())`, from a device or
// on the CPU already) is a materialization point (Note [Lazy trace]): the
// result is computed before it is returned, so work queued for it (and any
// error it raises) happens at the call, not whenever it is first read. A
// tensor with nothing pending costs one check. While a compiled function is
// traced the result is handed to the host as memory it may read: a host
// read (Note [Host reads while tracing] in jit/compile/tracing.h).
Tensor Tensor::to(Device d, DType t) const {
  Tensor out = convert(*this, d, t);
  if (d.is_cpu() && out.defined() &&
      (out.impl()->is_pending() || TensorImpl::host_reads_watched())) {
    (void)out.data_ptr();
  }
  return out;
}

Tensor& Tensor::copy_(const Tensor& src) {
  kiln::copy_(*this, src);
  return *this;
}
Tensor& Tensor::fill_(const Scalar& v) {
  kiln::fill_(*this, v);
  return *this;
}
Tensor& Tensor::zero_() {
  kiln::zero_(*this);
  return *this;
}
Tensor& Tensor::add_(const Tensor& o, const Scalar& alpha) {
  kiln::add_(*this, o, alpha);
  return *this;
}
Tensor& Tensor::sub_(const Tensor& o, const Scalar& alpha) {
  kiln::sub_(*this, o, alpha);
  return *this;
}
Tensor& Tensor::mul_(const Tensor& o) {
  kiln::mul_(*this, o);
  return *this;
}
Tensor& Tensor::div_(const Tensor& o) {
  kiln::div_(*this, o);
  return *this;
}
Tensor& Tensor::add_(const Scalar& o) {
  return add_(wrap_scalar(o));
}
Tensor& Tensor::mul_(const Scalar& o) {
  return mul_(wrap_scalar(o));
}

Tensor Tensor::sum() const {
  return kiln::sum(*this);
}
Tensor Tensor::sum(IntArrayRef dims, bool keepdim) const {
  return kiln::sum(*this, dims, keepdim);
}
Tensor Tensor::mean(IntArrayRef dims, bool keepdim) const {
  return kiln::mean(*this, dims, keepdim);
}
Tensor Tensor::matmul(const Tensor& o) const {
  return kiln::matmul(*this, o);
}
Tensor Tensor::where(const Tensor& condition, const Tensor& other) const {
  return kiln::where(condition, *this, other);
}
Tensor Tensor::where(const Tensor& condition, const Scalar& other) const {
  return kiln::where(condition, *this, other);
}
Tensor Tensor::softmax(int64_t d) const {
  return kiln::softmax(*this, d);
}
Tensor Tensor::exp() const {
  return kiln::exp(*this);
}
Tensor Tensor::abs() const {
  return kiln::abs(*this);
}
Tensor Tensor::neg() const {
  return kiln::neg(*this);
}
Tensor Tensor::sqrt() const {
  return kiln::sqrt(*this);
}

// --- Operators -----------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator%(const Tensor& a, const Tensor& b) {
  return remainder(a, b);
}
Tensor operator+(const Tensor& a, const Scalar& b) {
  return add(a, wrap_scalar(b));
}
Tensor operator-(const Tensor& a, const Scalar& b) {
  return sub(a, wrap_scalar(b));
}
Tensor operator*(const Tensor& a, const Scalar& b) {
  return mul(a, wrap_scalar(b));
}
Tensor operator/(const Tensor& a, const Scalar& b) {
  return div(a, wrap_scalar(b));
}
Tensor operator+(const Scalar& a, const Tensor& b) {
  return add(wrap_scalar(a), b);
}
Tensor operator-(const Scalar& a, const Tensor& b) {
  return sub(wrap_scalar(a), b);
}
Tensor operator*(const Scalar& a, const Tensor& b) {
  return mul(wrap_scalar(a), b);
}
Tensor operator/(const Scalar& a, const Tensor& b) {
  return div(wrap_scalar(a), b);
}
Tensor operator-(const Tensor& a) {
  return neg(a);
}
Tensor operator~(const Tensor& a) {
  return bitwise_not(a);
}
Tensor operator&(const Tensor& a, const Tensor& b) {
  return bitwise_and(a, b);
}
Tensor operator|(const Tensor& a, const Tensor& b) {
  return bitwise_or(a, b);
}
Tensor operator^(const Tensor& a, const Tensor& b) {
  return bitwise_xor(a, b);
}
Tensor operator==(const Tensor& a, const Tensor& b) {
  return eq(a, b);
}
Tensor operator!=(const Tensor& a, const Tensor& b) {
  return ne(a, b);
}
Tensor operator<(const Tensor& a, const Tensor& b) {
  return lt(a, b);
}
Tensor operator<=(const Tensor& a, const Tensor& b) {
  return le(a, b);
}
Tensor operator>(const Tensor& a, const Tensor& b) {
  return gt(a, b);
}
Tensor operator>=(const Tensor& a, const Tensor& b) {
  return ge(a, b);
}
Tensor operator==(const Tensor& a, const Scalar& b) {
  return eq(a, wrap_scalar(b));
}
Tensor operator!=(const Tensor& a, const Scalar& b) {
  return ne(a, wrap_scalar(b));
}
Tensor operator<(const Tensor& a, const Scalar& b) {
  return lt(a, wrap_scalar(b));
}
Tensor operator<=(const Tensor& a, const Scalar& b) {
  return le(a, wrap_scalar(b));
}
Tensor operator>(const Tensor& a, const Scalar& b) {
  return gt(a, wrap_scalar(b));
}
Tensor operator>=(const Tensor& a, const Scalar& b) {
  return ge(a, wrap_scalar(b));
}
Tensor& operator+=(Tensor& a, const Tensor& b) {
  return a.add_(b);
}
Tensor& operator-=(Tensor& a, const Tensor& b) {
  return a.sub_(b);
}
Tensor& operator*=(Tensor& a, const Tensor& b) {
  return a.mul_(b);
}
Tensor& operator/=(Tensor& a, const Tensor& b) {
  return a.div_(b);
}
Tensor& operator+=(Tensor& a, const Scalar& b) {
  return a.add_(wrap_scalar(b));
}
Tensor& operator-=(Tensor& a, const Scalar& b) {
  return a.sub_(wrap_scalar(b));
}
Tensor& operator*=(Tensor& a, const Scalar& b) {
  return a.mul_(wrap_scalar(b));
}
Tensor& operator/=(Tensor& a, const Scalar& b) {
  return a.div_(wrap_scalar(b));
}

}  // namespace kiln
