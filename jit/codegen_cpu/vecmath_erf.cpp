// The error-function family: erf, erfc, gelu (erf and tanh forms).

#include "jit/codegen_cpu/vecmath.h"
#include "jit/codegen_cpu/vecmath_impl.h"

namespace kiln::jit::cpu {

namespace {

// Fitted by tools/fit_vecmath.py.
// erf(x)/x in x^2 on [0, 1]
constexpr float kErfPoly[] = {0x1.20dd74p+0f,  -0x1.812674p-2f, 0x1.ce0944p-4f,
                              -0x1.b5a35ep-6f, 0x1.4246dep-8f,  -0x1.273fd2p-11f};
// erfc(x) e^(x^2) in t = 1/(1 + x/2), x in [0.5, 10.5] (relative error
// 3.1e-7 in float32 evaluation; gelu takes it from 0.5, Note [gelu's tail])
constexpr float kErfcPoly[] = {-0x1.f60f98p-17f, 0x1.214112p-2f,  0x1.1cba9ep-2f,
                               0x1.149e9ap-2f,   0x1.9042ep-4f,   0x1.e31106p-3f,
                               -0x1.29474ep-3f,  -0x1.ffaa7cp-5f, 0x1.6422ccp-5f};

constexpr float kInvSqrt2 = 0x1.6a09e6p-1f;
// Below 1, erf(x) = x P(x^2); above, erfc(x) = e^(-x^2) G(1/(1 + x/2)).
constexpr float kErfSmall = 1.0f;
// erfc(10.5) is 0 in float32; clamping keeps x^2 and its error term finite.
constexpr float kErfMax = 10.5f;
// 2 sqrt(2/pi) and 2 sqrt(2/pi) 0.044715 for gelu's tanh form.
constexpr float kGeluK1 = 0x1.988454p+0f;
constexpr float kGeluK2 = 0x1.2444f2p-4f;

// dst = erfc(a) for a in [0.5, 10.5] (a >= 0 anywhere gives a finite number),
// given a^2 = a2 + a2_lo exactly: e^(-a^2) loses no accuracy to the rounding
// of a^2, which would cost up to 100 ulp near a = 10.
void erfc_large(Emitter& e, const Vec& dst, const Vec& a, const Vec& a2, const Vec& a2_lo) {
  Scratch s(e);
  Vec t = s.vec(), g = s.vec();
  e.mul(t, a, e.f32c(0.5f));
  e.add(t, t, e.f32c(1.0f));
  e.set_f32(g, 1.0f);
  e.div(t, g, t);
  detail::horner(e, g, t, kErfcPoly);
  e.xor_(t, a2, e.u32c(0x80000000u));
  detail::exp_core(e, dst, t);
  e.fnmadd(dst, dst, a2_lo, dst);  // e^(-a2) (1 - a2_lo)
  e.mul(dst, dst, g);
}

// a = min(|x|, kErfMax) and a^2 = a2 + a2_lo.
void abs_and_square(Emitter& e, const Vec& a, const Vec& a2, const Vec& a2_lo, const Vec& x) {
  e.and_(a, x, e.u32c(0x7fffffffu));
  e.min(a, a, e.f32c(kErfMax));
  e.mul(a2, a, a);
  e.fmsub(a2_lo, a, a, a2);
}

}  // namespace

void emit_erf(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = detail::result_reg(s, dst, {x});
  Vec a = s.vec(), a2 = s.vec(), a2_lo = s.vec();
  Mask small = s.mask();
  abs_and_square(e, a, a2, a2_lo, x);
  erfc_large(e, r, a, a2, a2_lo);
  // sign(x) (1 - erfc|x|) = (erfc|x| - 1) with the sign bit flipped for x > 0.
  e.sub(r, r, e.f32c(1.0f));
  e.andn(a2_lo, x, e.u32c(0x80000000u));
  e.xor_(r, r, a2_lo);
  detail::horner(e, a2_lo, a2, kErfPoly);
  e.mul(a2_lo, a2_lo, x);
  e.cmp(small, a, e.f32c(kErfSmall), Cmp::kLt);
  e.blend(r, r, a2_lo, small);
  detail::keep_nan(e, r, x);
  e.mov(dst, r);
}

void emit_erfc(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = detail::result_reg(s, dst, {x});
  Vec a = s.vec(), a2 = s.vec(), a2_lo = s.vec();
  Mask m = s.mask();
  abs_and_square(e, a, a2, a2_lo, x);
  erfc_large(e, r, a, a2, a2_lo);
  e.set_f32(a2_lo, 2.0f);
  e.sub(a2_lo, a2_lo, r);
  e.cmp(m, x, e.u32c(0), Cmp::kLt);
  e.blend(r, r, a2_lo, m);  // erfc(-a) = 2 - erfc(a)
  detail::horner(e, a2_lo, a2, kErfPoly);
  e.fnmadd(a2_lo, a2_lo, x, e.f32c(1.0f));  // 1 - x P(x^2)
  e.cmp(m, a, e.f32c(kErfSmall), Cmp::kLt);
  e.blend(r, r, a2_lo, m);
  detail::keep_nan(e, r, x);
  e.mov(dst, r);
}

// gelu(x) = x/2 erfc(-x/sqrt 2): no cancellation for negative x, unlike
// 1 + erf. w^2 = x^2/2 is formed exactly from x. Multiplying by x last carries
// NaN through, and gives NaN at -inf as PyTorch's formula does.
// Note [gelu's tail]
// The small-|w| form erfc(w) = 1 - w P(w^2) cancels for w = -x/sqrt 2 in
// [0.5, 1) (x in (-sqrt 2, -0.7]): erfc(1) = 0.16 from 1 - 0.84 magnified
// erf's error five times (10.6 ulp at x = -1.41). There the fit of erfc
// itself takes over; the small form keeps -0.5 < x/sqrt 2 < 1.
void emit_gelu(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = detail::result_reg(s, dst, {x});
  Vec a = s.vec(), w2 = s.vec(), w2_lo = s.vec();
  Mask m = s.mask();
  e.min(a, x, e.f32c(15.0f));
  e.max(a, a, e.f32c(-15.0f));
  e.mul(w2, a, a);
  e.fmsub(w2_lo, a, a, w2);
  e.mul(w2, w2, e.f32c(0.5f));
  e.mul(w2_lo, w2_lo, e.f32c(0.5f));
  e.mul(a, a, e.f32c(kInvSqrt2));  // -w
  {
    Scratch s2(e);
    Vec aw = s2.vec();
    e.and_(aw, a, e.u32c(0x7fffffffu));
    erfc_large(e, r, aw, w2, w2_lo);
  }
  {
    Scratch s2(e);
    Mask above = s2.mask();
    e.cmp(m, a, e.f32c(kErfSmall), Cmp::kLt);
    e.cmp(above, a, e.f32c(-0.5f), Cmp::kGt);
    e.mask_and(m, m, above);
  }
  // erfc(w) = erfc(|w|) for x <= 0, 2 - erfc(|w|) for x > 0.
  {
    Scratch s2(e);
    Vec t = s2.vec();
    Mask pos = s2.mask();
    e.set_f32(t, 2.0f);
    e.sub(t, t, r);
    e.cmp(pos, a, e.u32c(0), Cmp::kGt);
    e.blend(r, r, t, pos);
  }
  // Small |w|: erfc(w) = 1 + (x/sqrt 2) P(w^2).
  detail::horner(e, w2_lo, w2, kErfPoly);
  e.fmadd(w2_lo, w2_lo, a, e.f32c(1.0f));
  e.blend(r, r, w2_lo, m);
  e.mul(a, x, e.f32c(0.5f));  // x/2 first: gelu(FLT_MAX) must not overflow
  e.mul(r, r, a);
  e.mov(dst, r);
}

// 0.5 x (1 + tanh(y)) = x sigmoid(2y), 2y = x (k1 + k2 x^2): no cancellation
// for negative x.
void emit_gelu_tanh(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = detail::result_reg(s, dst, {x});
  Vec v = s.vec(), u = s.vec();
  e.mul(v, x, x);
  e.set_f32(u, kGeluK1);
  e.fmadd(u, v, e.f32c(kGeluK2), u);
  e.mul(v, u, x);
  detail::sigmoid_core(e, r, v, &x);
  e.mov(dst, r);
}

}  // namespace kiln::jit::cpu
