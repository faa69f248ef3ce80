// sin and cos.

#include <algorithm>
#include <cmath>
#include <vector>

#include "jit/codegen_cpu/vecmath.h"
#include "jit/codegen_cpu/vecmath_impl.h"

namespace kiln::jit::cpu {

namespace {

// Fitted by tools/fit_vecmath.py.
// sin(r)/r in r^2 on [0, pi/4]
constexpr float kSinPoly[] = {0x1p+0f, -0x1.555546p-3f, 0x1.11073cp-7f, -0x1.9943f2p-13f};
// cos(r) in r^2 on [0, pi/4]
constexpr float kCosPoly[] = {0x1p+0f, -0x1p-1f, 0x1.55554ap-5f, -0x1.6c0c34p-10f, 0x1.99eba2p-16f};

constexpr float kTwoOverPi = 0x1.45f306p-1f;
// pi/2 = kPio2A + kPio2B + kPio2C (float32 parts; with FMA each step is exact
// enough that no trailing zero bits are needed).
constexpr float kPio2A = 0x1.921fb6p+0f;
constexpr float kPio2B = -0x1.777a5cp-25f;
constexpr float kPio2C = -0x1.ee59dap-50f;

// Note [Large trig arguments]
// Cody-Waite (three float parts of pi/2, FMA) reduces |x| < 2^19 to 2e-7. Past
// that, when any lane needs it, a Payne-Hanek reduction in double precision
// runs: for x = M 2^E (M a 24-bit integer), the bits of 2/pi above weight
// 2^-(E-1) contribute multiples of 4 to x 2/pi and are dropped; the next 96
// bits, as four 24-bit chunks T1..T4 (pre-scaled by 2^E, gathered from a table
// indexed by x's exponent), give x 2/pi mod 4 = sum M Tj with every product
// exact in double and an error near 2^-50.
constexpr int kLargeBiasedExp = 127 + 19;  // |x| >= 2^19 takes the slow path

// Binary digits of 2/pi after the point, 32 per word (tools/fit_vecmath.py).
constexpr uint32_t kTwoOverPiBits[] = {0xa2f9836e, 0x4e441529, 0xfc2757d1, 0xf534ddc0, 0xdb629599,
                                       0x3c439041, 0xfe5163ab, 0xdebbc561, 0xb7246e3a, 0x424dd2e0};

// Four doubles per biased exponent b in [kLargeBiasedExp, 255].
const std::vector<double>& payne_hanek_table() {
  static const std::vector<double> table = [] {
    auto bit = [](int i) {  // i-th bit after the point, from 1
      return (kTwoOverPiBits[(i - 1) / 32] >> (31 - (i - 1) % 32)) & 1u;
    };
    std::vector<double> t;
    for (int b = kLargeBiasedExp; b <= 255; ++b) {
      int exp = b - 150;
      int first = std::max(exp - 1, 1);
      for (int j = 0; j < 4; ++j) {
        int p = first + 24 * j;
        uint32_t chunk = 0;
        for (int i = 0; i < 24; ++i) chunk = chunk << 1 | bit(p + i);
        t.push_back(b == 255 ? 0.0 : std::ldexp(double(chunk), exp - (p + 23)));
      }
    }
    return t;
  }();
  return table;
}

// Replaces t (reduced argument) and k (int32 quadrant) in lanes where |x| >= 2^19.
void reduce_large(Emitter& e, const Vec& t, const Vec& k, const Vec& x) {
  namespace x86 = asmjit::x86;
  auto& a = e.as();
  Scratch s(e);
  Vec ib = s.vec(), mf = s.vec();
  Label done = e.new_label();
  auto large_lanes = [&](const Mask& m) {
    e.and_(ib, x, e.u32c(0x7fffffffu));
    e.cmp_i32_gt(m, ib, e.i32c((kLargeBiasedExp << 23) - 1));
  };
  {
    Scratch s2(e);
    Mask large = s2.mask();
    large_lanes(large);
    e.jump_if_none(large, done);
  }
  Vec md = s.vec(), g = s.vec(), y = s.vec(), kd = s.vec(), tp = s.vec(), kp = s.vec();
  {
    Scratch s2(e);
    Mask gm = s2.mask();
    Gp base = s2.gp();
    const std::vector<double>& table = payne_hanek_table();
    a.lea(base, e.data(table.data(), table.size() * sizeof(double), 64));
    e.and_(mf, ib, e.u32c(0x007fffffu));
    e.or_(mf, mf, e.u32c(0x00800000u));
    e.cvt_i32_f32(mf, mf);  // M, exact
    e.shr_u32(ib, ib, 23);
    e.sub_i32(ib, ib, e.i32c(kLargeBiasedExp));
    a.vpmaxsd(ib, ib, e.i32c(0));
    e.shl_i32(ib, ib, 2);  // four doubles per entry
    auto gather = [&](int j) {
      Mem m = x86::ptr(base, ib.half(), 3, j * 8);
      if (e.avx512()) {
        auto kg = gm.reg.as<x86::KReg>();
        a.kxnorw(kg, kg, kg);
        a.k(kg).vgatherdpd(g, m);
      } else {
        Vec v = gm.reg.as<Vec>();
        a.vpcmpeqd(v, v, v);
        a.vgatherdpd(g, m, v);
      }
    };
    for (int h = 0; h < 2; ++h) {
      if (h == 0) {
        a.vcvtps2pd(md, mf.half());
      } else {
        // The high halves of indices and mantissas move down in place.
        if (e.avx512()) {
          a.vextracti64x4(ib.half(), ib, 1);
          a.vextractf64x4(md.half(), mf, 1);
        } else {
          a.vextracti128(ib.half(), ib, 1);
          a.vextractf128(md.half(), mf, 1);
        }
        a.vcvtps2pd(md, md.half());
      }
      gather(0);
      a.vmulpd(y, md, g);  // M T1 < 2^26, exact; keep it mod 4
      a.vmulpd(kd, y, e.f64c(0.25));
      if (e.avx512()) {
        a.vrndscalepd(kd, kd, 0x9);
      } else {
        a.vroundpd(kd, kd, 0x9);
      }
      a.vfnmadd231pd(y, kd, e.f64c(4.0));
      for (int j = 1; j < 4; ++j) {
        gather(j);
        a.vfmadd231pd(y, md, g);
      }
      if (e.avx512()) {
        a.vrndscalepd(kd, y, 0x8);
      } else {
        a.vroundpd(kd, y, 0x8);
      }
      a.vsubpd(y, y, kd);
      a.vmulpd(y, y, e.f64c(1.57079632679489661923));
      if (h == 0) {
        a.vcvtpd2ps(tp.half(), y);
        a.vcvtpd2dq(kp.half(), kd);
      } else {
        a.vcvtpd2ps(y.half(), y);
        a.vcvtpd2dq(kd.half(), kd);
        if (e.avx512()) {
          a.vinsertf64x4(tp, tp, y.half(), 1);
          a.vinserti64x4(kp, kp, kd.half(), 1);
        } else {
          a.vinsertf128(tp, tp, y.half(), 1);
          a.vinserti128(kp, kp, kd.half(), 1);
        }
      }
    }
  }
  // The reduction ran on |x|: negate r and k for negative x.
  e.shr_i32(mf, x, 31);
  e.xor_(kp, kp, mf);
  e.sub_i32(kp, kp, mf);
  e.and_(mf, x, e.u32c(0x80000000u));
  e.xor_(tp, tp, mf);
  {
    Scratch s2(e);
    Mask large = s2.mask();
    large_lanes(large);
    e.blend(t, t, tp, large);
    e.blend(k, k, kp, large);
  }
  e.bind(done);
}

// x = k pi/2 + r, |r| <= pi/4; sin x = ±sin r or ±cos r by the quadrant
// k mod 4 (cos: quadrant k + 1).
void sin_cos(Emitter& e, const Vec& dst, const Vec& x, bool cosine) {
  Scratch s(e);
  Vec r = detail::result_reg(s, dst, {x});
  Vec k = s.vec(), t = s.vec();
  e.mul(k, x, e.f32c(kTwoOverPi));
  e.round(k, k, Round::kNearest);
  e.fnmadd(t, k, e.f32c(kPio2A), x);
  e.fnmadd(t, k, e.f32c(kPio2B), t);
  e.fnmadd(t, k, e.f32c(kPio2C), t);
  e.cvt_f32_i32(k, k);
  reduce_large(e, t, k, x);
  Vec r2 = s.vec(), c = s.vec();
  Mask odd = s.mask();
  e.mul(r2, t, t);
  detail::horner(e, r, r2, kSinPoly);
  e.mul(r, r, t);  // r (1 + r^2 Q): sin(-0) = -0
  detail::horner(e, c, r2, kCosPoly);
  if (cosine) e.add_i32(k, k, e.i32c(1));
  e.and_(t, k, e.u32c(1));
  e.cmp_i32_eq(odd, t, e.u32c(1));
  e.blend(r, r, c, odd);
  e.shl_i32(k, k, 30);
  e.and_(k, k, e.u32c(0x80000000u));
  e.xor_(r, r, k);
  FixupTable fix;
  fix.on(FixClass::kNaN, FixTo::kNaNInput)
      .on(FixClass::kPosInf, FixTo::kNaN)
      .on(FixClass::kNegInf, FixTo::kNaN);
  if (!cosine) fix.on(FixClass::kZero, FixTo::kInput);
  e.fixup(r, x, fix);
  e.mov(dst, r);
}

}  // namespace

void emit_sin(Emitter& e, const Vec& dst, const Vec& x) {
  sin_cos(e, dst, x, false);
}
void emit_cos(Emitter& e, const Vec& dst, const Vec& x) {
  sin_cos(e, dst, x, true);
}

}  // namespace kiln::jit::cpu
