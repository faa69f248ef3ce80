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
// e^r on [-ln2/2, ln2/2], degree 5 for sigmoid, eval rel err 1.63e-07
constexpr float kExpPoly5[] = {0x1p+0f,        0x1p+0f,        0x1.fffdfcp-2f,
                               0x1.5557aep-3f, 0x1.5729e6p-5f, 0x1.10625ap-7f};

constexpr float kLog2e = 0x1.715476p+0f;
// ln 2 = kLn2Hi + kLn2Lo; with FMA the reduction x - n ln2 needs no zero bits in kLn2Hi.
constexpr float kLn2Hi = 0x1.62e430p-1f;
constexpr float kLn2Lo = -0x1.05c610p-29f;
constexpr float kLn2 = 0x1.62e430p-1f;
// exp(x) overflows above 88.7228 and is below half the smallest denormal under
// -103.973: clamping to these keeps 2^n within the two-step scaling range
// (down to 2^-252).
constexpr float kExpMax = 88.8f;
// The largest x with e^-x = inf in float32 (e^88.72283935546875 rounds past
// the largest float): sigmoid's 1/(1 + e^-x) is 0 from here down.
constexpr float kSigmoidZero = -0x1.62e430p+6f;
constexpr float kExpMin = -104.5f;

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

void fast_reciprocal(Emitter& e, const Vec& dst, const Vec& a) {
  KILN_INTERNAL_ASSERT(dst.id() != a.id(), "fast_reciprocal: dst aliases a");
  if (!e.avx512()) {
    // AVX2's 12-bit estimate leaves 1 - 2^-24 for 1/1 after one step, and
    // sigmoid(+inf) must be 1: divide (AVX2 is not the fast path).
    e.set_f32(dst, 1.0f);
    e.div(dst, dst, a);
    return;
  }
  e.as().vrcp14ps(dst, a);            // relative error <= 2^-14
  e.fnmadd(a, a, dst, e.f32c(1.0f));  // 1 - a r, in place: a is not needed again
  e.fmadd(dst, dst, a, dst);          // r + r (1 - a r)
}

void clamp(Emitter& e, const Vec& dst, const Vec& x, float lo, float hi) {
  Scratch s(e);
  Vec lim = s.vec();
  // x86 min/max return their second source when either is NaN: x goes second.
  e.set_f32(lim, hi);
  e.min(dst, lim, x);
  e.set_f32(lim, lo);
  e.max(dst, lim, dst);
}

void scale_to(Emitter& e, const Vec& dst, const Vec& src, const Vec& n) {
  if (e.avx512()) {
    e.as().vscalefps(dst, src, n);
    return;
  }
  Scratch s(e);
  Vec m = s.vec();
  e.mov(m, n);
  if (dst.id() != src.id()) e.mov(dst, src);
  scale_by_pow2(e, dst, m);
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

void emit_expm1(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = result_reg(s, dst, {x});
  detail::expm1_core(e, r, x);
  e.fixup(r, x,
          FixupTable().on(FixClass::kNaN, FixTo::kNaNInput).on(FixClass::kZero, FixTo::kInput));
  e.mov(dst, r);
}

namespace detail {

// expm1(x) = 2^n expm1(r) + (2^n - 1), evaluated as 2 (s p + (s - 1/2)) with
// s = 2^(n-1), so neither 2^n (n = 128) nor the small result cancels. A NaN
// x gives a number (the clamps take it); the callers fix NaN up.
void expm1_core(Emitter& e, const Vec& r, const Vec& x) {
  KILN_INTERNAL_ASSERT(r.id() != x.id(), "expm1_core operands");
  Scratch s(e);
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
}

}  // namespace detail

// Note [Fast sigmoid]
// sigmoid(|x|) = 1/(1 + z) and sigmoid(-|x|) = z/(1 + z), z = e^-|x| <= 1, so
// e^ never overflows. The reduction uses one ln 2 constant: its 1.9e-9 error
// times |n| <= 151 stays under 3e-7 relative. The reciprocal is the hardware
// estimate and one Newton step. Below x = -87.3, z is denormal and z/(1 + z)
// = z is exact, so unlike sigmoid_core (whose product with x can be normal
// again) no scaled tail is needed; from kSigmoidZero down the result is 0,
// as the eager kernel's 1/(1 + e^-x) is. A NaN flows through every step, and the
// two branches are selected by x's sign bit with integer/bitwise ops: on
// AVX-512 cores that run 512-bit FMAs at one per cycle, multiplies, compares
// and fixups share those pipes and bound the fused kernels, while min/max,
// integer shifts and ternary logic run beside them.
void emit_sigmoid(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = result_reg(s, dst, {x});
  Vec t = s.vec(), n = s.vec(), z = s.vec();
  e.or_(t, x, e.u32c(0x80000000u));  // -|x|
  e.set_f32(n, kExpMin);
  e.max(t, n, t);  // NaN stays
  e.mul(n, t, e.f32c(kLog2e));
  e.round(n, n, Round::kNearest);
  e.fnmadd(t, n, e.f32c(kLn2), t);
  horner(e, z, t, kExpPoly5);
  detail::scale_to(e, z, z, n);  // z, rounded once into denormals
  e.add(t, z, e.f32c(1.0f));
  detail::fast_reciprocal(e, r, t);  // sigmoid(|x|)
  e.mul(z, z, r);                    // sigmoid(-|x|)
  // As the eager kernel (and PyTorch's), 1/(1 + e^-x): 0 where e^-x
  // overflows float32, not the denormal z (inf * sigmoid(-100) is NaN).
  Mask under = s.mask();
  e.cmp(under, x, e.f32c(kSigmoidZero), Cmp::kLe);
  e.blend(z, z, e.u32c(0), under);
  e.shr_i32(n, x, 31);  // all ones where x's sign is set
  if (e.avx512()) {
    e.as().vpternlogd(r, n, z, 0xb8);  // n ? z : r
  } else {
    e.blend(r, r, z, Mask{n});
  }
  e.mov(dst, r);
}

// x * sigmoid(x), as PyTorch: silu(-inf) = -inf * 0 = NaN.
void emit_silu(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = result_reg(s, dst, {x});
  detail::sigmoid_core(e, r, x, &x);
  e.mov(dst, r);
}

// tanh|x| = -m / (m + 2), m = expm1(-2|x|) in [-1, 0]: nothing overflows,
// m + 2 in [1, 2] cancels nothing, and a tiny x gives m = -2|x| to the ulp
// (a rational fit used before lost 1.7e-6 relative: 33 ulp). The reciprocal
// is the hardware estimate and one Newton step; the sign is x's (±0 keep
// theirs), NaN flows through.
void emit_tanh(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = result_reg(s, dst, {x});
  Vec m = s.vec(), q = s.vec();
  e.or_(q, x, e.u32c(0x80000000u));  // -|x|
  e.add(q, q, q);
  detail::expm1_core(e, m, q);
  e.add(q, m, e.f32c(2.0f));
  detail::fast_reciprocal(e, r, q);
  e.mul(r, r, m);                     // -tanh|x|
  e.and_(r, r, e.u32c(0x7fffffffu));  // tanh|x|
  e.and_(q, x, e.u32c(0x80000000u));  // x's sign
  e.or_(r, r, q);
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
