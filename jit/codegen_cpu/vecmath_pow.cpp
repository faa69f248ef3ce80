// Powers and roots: pow, pow with a constant exponent, sqrt, rsqrt, reciprocal.

#include <cmath>
#include <limits>

#include "jit/codegen_cpu/vecmath.h"
#include "jit/codegen_cpu/vecmath_impl.h"

namespace kiln::jit::cpu {

namespace x86 = asmjit::x86;

namespace {

constexpr double kTwoLog2e = 2.0 / 0.69314718055994530942;
// log(1 + f) = 2 atanh(s), s = f/(2 + f), |s| <= 0.1716: the series in s^2
// through s^14 is below 2^-50 relative; plain Taylor coefficients suffice in
// double precision.
constexpr double kAtanhSeries[] = {1.0,     1.0 / 3,  1.0 / 5,  1.0 / 7,
                                   1.0 / 9, 1.0 / 11, 1.0 / 13, 1.0 / 15};
// 2^r = sum (r ln2)^k / k! for |r| <= 1/2, through k = 10: below 2^-40.
constexpr double kExp2Series[] = {
    1.0,
    0.69314718055994530942,
    0.24022650695910071233,
    0.055504108664821579953,
    0.0096181291076284771620,
    0.0013333558146428443423,
    0.00015403530393381609955,
    1.5252733804059840280e-05,
    1.3215486790144309488e-06,
    1.0178086009239699727e-07,
    7.0549116208011233298e-09,
};
// The product y log2|x| is clamped here: 2^±200 is far past float32's range
// but exact in double.
constexpr double kPowZMax = 200.0;

void horner_f64(Emitter& e, const Vec& acc, const Vec& t, const double* c, int n) {
  auto& a = e.as();
  Mem first = e.f64c(c[n - 1]);
  first.resetBroadcast();
  first.setSize(8);
  a.vbroadcastsd(acc, first);
  for (int i = n - 2; i >= 0; --i) a.vfmadd213pd(acc, t, e.f64c(c[i]));
}

// dst (doubles) = the low (h = 0) or high (h = 1) half of the float lanes of v.
void widen_half(Emitter& e, const Vec& dst, const Vec& v, int h) {
  auto& a = e.as();
  if (h == 0) {
    a.vcvtps2pd(dst, v.half());
    return;
  }
  if (e.avx512()) {
    a.vextractf64x4(dst.half(), v, 1);
  } else {
    a.vextractf128(dst.half(), v, 1);
  }
  a.vcvtps2pd(dst, dst.half());
}

// |x|^y = 2^(y log2|x|) in double precision for finite nonzero x; other lanes
// give numbers. r must not alias x or y.
void pow_core(Emitter& e, const Vec& r, const Vec& x, const Vec& y) {
  auto& a = e.as();
  Scratch s(e);
  Vec m = s.vec(), k = s.vec(), f = s.vec(), kd = s.vec(), yd = s.vec(), t = s.vec(), p = s.vec();
  e.and_(f, x, e.u32c(0x7fffffffu));
  detail::decompose(e, m, k, f);
  for (int h = 0; h < 2; ++h) {
    widen_half(e, f, m, h);
    widen_half(e, kd, k, h);
    widen_half(e, yd, y, h);
    // log2|x| = k + 2 log2(e) s P(s^2), s = (m - 1)/(m + 1).
    a.vsubpd(f, f, e.f64c(1.0));
    a.vaddpd(t, f, e.f64c(2.0));
    a.vdivpd(f, f, t);
    a.vmulpd(t, f, f);
    horner_f64(e, p, t, kAtanhSeries, 8);
    a.vmulpd(p, p, f);
    a.vfmadd132pd(p, kd, e.f64c(kTwoLog2e));
    // 2^z, z = y log2|x| = n + r, |r| <= 1/2.
    a.vmulpd(p, p, yd);
    a.vminpd(p, p, e.f64c(kPowZMax));
    a.vmaxpd(p, p, e.f64c(-kPowZMax));
    if (e.avx512()) {
      a.vrndscalepd(kd, p, 0x8);
    } else {
      a.vroundpd(kd, p, 0x8);
    }
    a.vsubpd(p, p, kd);
    horner_f64(e, t, p, kExp2Series, 11);
    // 2^n from the low bits of n + 1.5 2^52; one rounding to float32 at the end,
    // denormal results included.
    a.vaddpd(kd, kd, e.f64c(0x1.8p52));
    a.vpaddq(kd, kd, e.u64c(1023));
    a.vpsllq(kd, kd, 52);
    a.vmulpd(t, t, kd);
    if (h == 0) {
      a.vcvtpd2ps(r.half(), t);
    } else {
      a.vcvtpd2ps(t.half(), t);
      if (e.avx512()) {
        a.vinsertf64x4(r, r, t.half(), 1);
      } else {
        a.vinsertf128(r, r, t.half(), 1);
      }
    }
  }
}

}  // namespace

// C99 pow special cases, in an order where later rules override earlier ones.
void emit_pow(Emitter& e, const Vec& dst, const Vec& x, const Vec& y) {
  Scratch s(e);
  Vec r = detail::result_reg(s, dst, {x, y});
  pow_core(e, r, x, y);
  Vec ax = s.vec(), t = s.vec(), u = s.vec();
  Mask m = s.mask(), ylt0 = s.mask(), isint = s.mask();
  const float kInf = std::numeric_limits<float>::infinity();
  e.and_(ax, x, e.u32c(0x7fffffffu));
  // |x| = 0: 0 for y > 0, inf for y < 0; |x| = inf: the reverse.
  e.cmp(ylt0, y, e.u32c(0), Cmp::kLt);
  e.zero(u);
  e.blend(t, u, e.f32c(kInf), ylt0);
  e.cmp(m, ax, e.u32c(0), Cmp::kEq);
  e.blend(r, r, t, m);
  e.set_f32(t, kInf);
  e.blend(t, t, u, ylt0);
  e.cmp(m, ax, e.f32c(kInf), Cmp::kEq);
  e.blend(r, r, t, m);
  // Negative x (-0 and -inf included) and odd integer y: negate.
  e.round(t, y, Round::kTrunc);
  e.cmp(isint, t, y, Cmp::kEq);
  e.cvtt_f32_i32(t, y);  // |y| >= 2^31 gives 0x80000000: even, as such y are
  e.and_(t, t, e.u32c(1));
  e.cmp_i32_eq(m, t, e.u32c(1));
  e.mask_and(m, m, isint);
  e.and_(t, x, e.u32c(0x80000000u));
  e.blend(u, u, t, m);
  e.xor_(r, r, u);
  // Negative finite x and non-integer y (NaN y included): NaN.
  e.cmp(m, x, e.u32c(0), Cmp::kLt);
  e.cmp(ylt0, x, e.f32c(-kInf), Cmp::kGt);
  e.mask_and(m, m, ylt0);
  e.mask_andn(m, isint, m);
  e.blend(r, r, e.u32c(0x7fc00000u), m);
  // NaN operands propagate ...
  e.cmp(m, x, y, Cmp::kUnord);
  e.add(t, x, y);
  e.blend(r, r, t, m);
  // ... except that (±1)^±inf = 1, 1^y = 1 and x^0 = 1.
  e.cmp(m, ax, e.f32c(1.0f), Cmp::kEq);
  e.and_(t, y, e.u32c(0x7fffffffu));
  e.cmp(ylt0, t, e.f32c(kInf), Cmp::kEq);
  e.mask_and(m, m, ylt0);
  e.cmp(ylt0, x, e.f32c(1.0f), Cmp::kEq);
  e.mask_or(m, m, ylt0);
  e.cmp(ylt0, y, e.u32c(0), Cmp::kEq);
  e.mask_or(m, m, ylt0);
  e.blend(r, r, e.f32c(1.0f), m);
  e.mov(dst, r);
}

// PyTorch's pow(tensor, scalar) special-cases these exponents with plain
// arithmetic (so 0.5 is sqrt: pow(-0., 0.5) = -0 and pow(-inf, 0.5) = NaN there).
void emit_pow_scalar(Emitter& e, const Vec& dst, const Vec& x, float y) {
  Scratch s(e);
  if (y == 0.0f) return e.set_f32(dst, 1.0f);
  if (y == 1.0f) return e.mov(dst, x);
  if (y == 2.0f) return e.mul(dst, x, x);
  if (y == 3.0f) {
    Vec t = s.vec();
    e.mul(t, x, x);
    return e.mul(dst, t, x);
  }
  if (y == 0.5f) return emit_sqrt(e, dst, x);
  if (y == -0.5f) return emit_rsqrt(e, dst, x);
  if (y == -1.0f) return emit_reciprocal(e, dst, x);
  if (y == -2.0f) {
    Vec t = s.vec();
    e.mul(t, x, x);
    return emit_reciprocal(e, dst, t);
  }
  Vec yv = s.vec();
  e.set_f32(yv, y);
  emit_pow(e, dst, x, yv);
}

void emit_sqrt(Emitter& e, const Vec& dst, const Vec& x) {
  e.sqrt(dst, x);
}

void emit_rsqrt(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec t = s.vec();
  e.sqrt(t, x);
  e.set_f32(dst, 1.0f);
  e.div(dst, dst, t);
}

void emit_reciprocal(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec one = s.vec();
  e.set_f32(one, 1.0f);
  e.div(dst, one, x);
}

}  // namespace kiln::jit::cpu
