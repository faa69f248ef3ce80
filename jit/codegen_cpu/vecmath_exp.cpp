// The exponential family: exp, exp2, expm1, sigmoid, silu, tanh, softplus.

#include <limits>

#include "jit/codegen_cpu/vecmath.h"
#include "jit/codegen_cpu/vecmath_impl.h"
#include "kiln/error.h"

namespace kiln::jit::cpu {

namespace {

// Fitted by tools/fit_vecmath.py (relative error of the float32 evaluation in
// the comments).
// e^r on [-ln2/2, ln2/2], eval rel err 6.15e-08
constexpr float kExpPoly[] = {0x1p+0f,        0x1p+0f,       0x1.fffffcp-2f, 0x1.555492p-3f,
                              0x1.5558f2p-5f, 0x1.1239dp-7f, 0x1.6a242ap-10f};
// expm1(r)/r on [-ln2/2, ln2/2], eval rel err 1.27e-07
constexpr float kExpm1Poly[] = {0x1p+0f,        0x1.fffffep-2f, 0x1.5554bp-3f,
                                0x1.555674p-5f, 0x1.122762p-7f, 0x1.6bebf2p-10f};
// tanh(x)/x in x^2 on [0, 0.625]
constexpr float kTanhPoly[] = {0x1p+0f,         -0x1.555532p-2f, 0x1.110726p-3f,
                               -0x1.b83c5cp-5f, 0x1.5226a6p-6f,  -0x1.75e1f8p-8f};

constexpr float kLog2e = 0x1.715476p+0f;
// ln 2 = kLn2Hi + kLn2Lo; with FMA the reduction x - n ln2 needs no zero bits in kLn2Hi.
constexpr float kLn2Hi = 0x1.62e430p-1f;
constexpr float kLn2Lo = -0x1.05c610p-29f;
constexpr float kLn2 = 0x1.62e430p-1f;
// exp(x) overflows above 88.7228 and is below half the smallest denormal under
// -103.973: clamping to these keeps 2^n within the two-step scaling range
// (down to 2^-252).
constexpr float kExpMax = 88.8f;
constexpr float kExpMin = -104.5f;
// Below this tanh(x) = x (1 + x^2 P(x^2)); above, (e^2x - 1)/(e^2x + 1).
constexpr float kTanhSmall = 0.625f;
// tanh rounds to ±1 in float32 beyond |x| = 9.01.
constexpr float kTanhMax = 9.1f;

}  // namespace

namespace detail {

void horner(Emitter& e, const Vec& acc, const Vec& t, std::span<const float> c) {
  KILN_INTERNAL_ASSERT(acc.id() != t.id() && c.size() >= 2, "horner operands");
  e.set_f32(acc, c.back());
  for (size_t i = c.size() - 1; i-- > 0;) e.fmadd(acc, acc, t, e.f32c(c[i]));
}

Vec result_reg(Scratch& s, const Vec& dst, std::initializer_list<Vec> inputs) {
  for (const Vec& v : inputs) {
    if (v.id() == dst.id()) return s.vec();
  }
  return dst;
}

void keep_nan(Emitter& e, const Vec& dst, const Vec& x) {
  e.fixup(dst, x, FixupTable().on(FixClass::kNaN, FixTo::kNaNInput));
}

void scale_by_pow2(Emitter& e, const Vec& dst, const Vec& n) {
  if (e.avx512()) {
    // vscalefps rounds once, into denormals too.
    e.as().vscalefps(dst, dst, n);
    return;
  }
  // 2^n as two normal factors 2^(n>>1) and 2^(n - (n>>1)): each within
  // [-75, 64], so the product rounds once, at the last multiplication.
  Scratch s(e);
  Vec n1 = s.vec();
  e.cvt_f32_i32(n, n);
  e.shr_i32(n1, n, 1);
  e.sub_i32(n, n, n1);
  e.add_i32(n1, n1, e.i32c(127));
  e.shl_i32(n1, n1, 23);
  e.mul(dst, dst, n1);
  e.add_i32(n, n, e.i32c(127));
  e.shl_i32(n, n, 23);
  e.mul(dst, dst, n);
}

// e^x = 2^n e^r, n = round(x log2 e), r = x - n ln 2 in [-ln2/2, ln2/2].
void exp_core(Emitter& e, const Vec& dst, const Vec& x, int bias) {
  Scratch s(e);
  Vec t = s.vec(), n = s.vec();
  e.min(t, x, e.f32c(kExpMax));
  e.max(t, t, e.f32c(kExpMin - static_cast<float>(bias) * kLn2));
  e.mul(n, t, e.f32c(kLog2e));
  e.round(n, n, Round::kNearest);
  e.fnmadd(t, n, e.f32c(kLn2Hi), t);
  e.fnmadd(t, n, e.f32c(kLn2Lo), t);
  horner(e, dst, t, kExpPoly);
  if (bias != 0) e.add(n, n, e.f32c(static_cast<float>(bias)));
  scale_by_pow2(e, dst, n);
}

// Note [Scaled sigmoid tail]
// sigmoid(x) = 1/(1 + z) for x >= 0 and z/(1 + z) for x < 0, z = e^-|x| <= 1,
// so e^ never overflows. Below x = -87, z is denormal and has lost relative
// precision before x * sigmoid(x) (silu, gelu) makes the product normal
// again; so the x < 0 branch carries z 2^32 and scales back once, at the end.
void sigmoid_core(Emitter& e, const Vec& dst, const Vec& x, const Vec* factor) {
  constexpr int kBias = 32;
  Scratch s(e);
  Vec z = s.vec(), d = s.vec();
  Mask neg = s.mask();
  e.or_(z, x, e.u32c(0x80000000u));  // -|x|
  exp_core(e, z, z, kBias);          // z 2^32
  e.mul(d, z, e.f32c(0x1p-32f));
  e.add(d, d, e.f32c(1.0f));
  e.set_f32(dst, 1.0f);
  e.div(dst, dst, d);  // 1 / (1 + z)
  e.mul(z, z, dst);    // 2^32 z / (1 + z)
  if (factor != nullptr) {
    e.mul(z, z, *factor);
    e.mul(dst, dst, *factor);
  }
  e.mul(z, z, e.f32c(0x1p-32f));
  e.cmp(neg, x, e.u32c(0), Cmp::kLt);
  e.blend(dst, dst, z, neg);
}

}  // namespace detail

using detail::exp_core;
using detail::horner;
using detail::keep_nan;
using detail::result_reg;

void emit_exp(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = result_reg(s, dst, {x});
  exp_core(e, r, x);
  keep_nan(e, r, x);
  e.mov(dst, r);
}

// 2^x = 2^n e^(r ln2), n = round(x), r = x - n exact.
void emit_exp2(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = result_reg(s, dst, {x});
  Vec t = s.vec(), n = s.vec();
  e.min(t, x, e.f32c(128.5f));
  e.max(t, t, e.f32c(-151.0f));
  e.round(n, t, Round::kNearest);
  e.sub(t, t, n);
  e.mul(t, t, e.f32c(kLn2));
  horner(e, r, t, kExpPoly);
  detail::scale_by_pow2(e, r, n);
  keep_nan(e, r, x);
  e.mov(dst, r);
}

// expm1(x) = 2^n expm1(r) + (2^n - 1), evaluated as 2 (s p + (s - 1/2)) with
// s = 2^(n-1), so neither 2^n (n = 128) nor the small result cancels.
void emit_expm1(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = result_reg(s, dst, {x});
  Vec t = s.vec(), n = s.vec(), p = s.vec();
  e.min(t, x, e.f32c(kExpMax));
  e.max(t, t, e.f32c(-80.0f));  // expm1 is -1 in float32 below -17.33
  e.mul(n, t, e.f32c(kLog2e));
  e.round(n, n, Round::kNearest);
  e.fnmadd(t, n, e.f32c(kLn2Hi), t);
  e.fnmadd(t, n, e.f32c(kLn2Lo), t);
  horner(e, p, t, kExpm1Poly);
  e.mul(p, p, t);  // expm1(r) = r (1 + r q(r)): ±0 stay signed
  e.cvt_f32_i32(n, n);
  e.add_i32(n, n, e.i32c(126));
  e.shl_i32(n, n, 23);  // s = 2^(n-1)
  e.sub(t, n, e.f32c(0.5f));
  e.fmadd(r, n, p, t);
  e.add(r, r, r);
  e.fixup(r, x,
          FixupTable().on(FixClass::kNaN, FixTo::kNaNInput).on(FixClass::kZero, FixTo::kInput));
  e.mov(dst, r);
}

void emit_sigmoid(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = result_reg(s, dst, {x});
  detail::sigmoid_core(e, r, x);
  keep_nan(e, r, x);
  e.mov(dst, r);
}

// x * sigmoid(x), as PyTorch: silu(-inf) = -inf * 0 = NaN.
void emit_silu(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = result_reg(s, dst, {x});
  detail::sigmoid_core(e, r, x, &x);
  e.mov(dst, r);
}

void emit_tanh(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = result_reg(s, dst, {x});
  Vec a = s.vec(), t = s.vec(), u = s.vec();
  Mask small = s.mask();
  // |x| >= 0.625: (e^2|x| - 1) / (e^2|x| + 1), no cancellation since e^2|x| > 3.4.
  e.and_(a, x, e.u32c(0x7fffffffu));
  e.min(t, a, e.f32c(kTanhMax));
  e.add(t, t, t);
  exp_core(e, t, t);
  e.add(u, t, e.f32c(1.0f));
  e.sub(t, t, e.f32c(1.0f));
  e.div(r, t, u);
  e.and_(t, x, e.u32c(0x80000000u));
  e.or_(r, r, t);
  // |x| < 0.625: x (1 + x^2 P(x^2)).
  e.mul(t, x, x);
  horner(e, u, t, kTanhPoly);
  e.mul(u, u, x);
  e.cmp(small, a, e.f32c(kTanhSmall), Cmp::kLt);
  e.blend(r, r, u, small);
  keep_nan(e, r, x);
  e.mov(dst, r);
}

// softplus = max(y, 0) + log1p(e^-|y|) (the same function as PyTorch's
// log1p(e^y) but without overflow), divided by beta; x itself past threshold.
void emit_softplus(Emitter& e, const Vec& dst, const Vec& x, float beta, float threshold) {
  Scratch s(e);
  Vec r = result_reg(s, dst, {x});
  Vec y = s.vec(), z = s.vec();
  Mask over = s.mask();
  if (beta == 1.0f) {
    e.mov(y, x);
  } else {
    e.mul(y, x, e.f32c(beta));
  }
  e.or_(z, y, e.u32c(0x80000000u));
  exp_core(e, z, z);
  detail::log1p_core(e, r, z);
  e.max(z, y, e.u32c(0));
  e.add(r, r, z);
  if (beta != 1.0f) e.div(r, r, e.f32c(beta));
  e.cmp(over, y, e.f32c(threshold), Cmp::kGt);
  e.blend(r, r, x, over);
  keep_nan(e, r, x);
  e.mov(dst, r);
}

}  // namespace kiln::jit::cpu
