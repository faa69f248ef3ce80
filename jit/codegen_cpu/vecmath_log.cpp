// The logarithm family: log, log2, log10, log1p.

#include <cfloat>

#include "jit/codegen_cpu/vecmath.h"
#include "jit/codegen_cpu/vecmath_impl.h"

namespace kiln::jit::cpu {

namespace {

// log1p(f) = f + f^2 (f Q(f) - 1/2) on [sqrt(1/2) - 1, sqrt(2) - 1], eval rel
// err 9.16e-08 (tools/fit_vecmath.py).
constexpr float kLogPoly[] = {0x1.5556d8p-2f, -0x1.000382p-2f, 0x1.98d7f2p-3f, -0x1.53824cp-3f,
                              0x1.317456p-3f, -0x1.2432aap-3f, 0x1.645e92p-4f};

constexpr float kLn2Hi = 0x1.62e430p-1f;  // ln 2 = kLn2Hi + kLn2Lo
constexpr float kLn2Lo = -0x1.05c610p-29f;
constexpr float kLog2e = 0x1.715476p+0f;
constexpr float kLog10e = 0x1.bcb7b2p-2f;
constexpr float kLog10_2Hi = 0x1.344136p-2f;  // log10(2) = hi + lo
constexpr float kLog10_2Lo = -0x1.ec10c0p-27f;
// Adding kSqrtHalfShift to the bits of x moves mantissas >= sqrt(2) into the
// next binade, so the mantissa lands in [sqrt(1/2), sqrt(2)).
constexpr int32_t kSqrtHalfBits = 0x3f3504f3;
constexpr int32_t kSqrtHalfShift = 0x3f800000 - kSqrtHalfBits;

// log(x) for x <= 0, inf and NaN.
FixupTable log_fixups() {
  return FixupTable()
      .on(FixClass::kNaN, FixTo::kNaNInput)
      .on(FixClass::kZero, FixTo::kNegInf)
      .on(FixClass::kNegFinite, FixTo::kNaN)
      .on(FixClass::kNegInf, FixTo::kNaN)
      .on(FixClass::kPosInf, FixTo::kPosInf);
}

}  // namespace

namespace detail {

void decompose(Emitter& e, const Vec& m, const Vec& k, const Vec& x) {
  Scratch s(e);
  Mask den = s.mask();
  // Denormals: scale by 2^23 first and take 23 off the exponent.
  e.cmp(den, x, e.f32c(FLT_MIN), Cmp::kLt);
  e.mul(m, x, e.f32c(0x1p23f));
  e.blend(m, x, m, den);
  if (e.avx512()) {
    e.zero(k);
    e.blend(k, k, e.f32c(23.0f), den);
  } else {
    e.and_(k, den.reg.as<Vec>(), e.f32c(23.0f));  // AVX2 masks are all-ones lanes
  }
  {
    Scratch s2(e);
    Vec b = s2.vec();
    e.add_i32(m, m, e.i32c(kSqrtHalfShift));
    e.shr_u32(b, m, 23);
    e.sub_i32(b, b, e.i32c(127));
    e.cvt_i32_f32(b, b);
    e.sub(k, b, k);
  }
  e.and_(m, m, e.u32c(0x007fffffu));
  e.add_i32(m, m, e.i32c(kSqrtHalfBits));
}

// x = 2^k m, f = m - 1 exactly; log x = k ln2 + log1p(f).
void log_core(Emitter& e, const Vec& dst, const Vec& x, LogBase base) {
  Scratch s(e);
  Vec u = s.vec(), f = s.vec(), k = s.vec();
  decompose(e, u, k, x);
  e.sub(f, u, e.f32c(1.0f));
  horner(e, dst, f, kLogPoly);
  e.fmsub(dst, dst, f, e.f32c(0.5f));
  e.mul(u, f, f);
  e.fmadd(dst, dst, u, f);  // log1p(f)
  switch (base) {
    case LogBase::kE:
      e.fmadd(dst, k, e.f32c(kLn2Lo), dst);
      e.fmadd(dst, k, e.f32c(kLn2Hi), dst);
      break;
    case LogBase::k2:
      e.fmadd(dst, dst, e.f32c(kLog2e), k);
      break;
    case LogBase::k10:
      e.mul(dst, dst, e.f32c(kLog10e));
      e.fmadd(dst, k, e.f32c(kLog10_2Lo), dst);
      e.fmadd(dst, k, e.f32c(kLog10_2Hi), dst);
      break;
  }
}

// log1p(x) = log(u) - c/u with u = 1 + x rounded and c = (u - 1) - x its
// rounding error: exact for u = 1 (tiny x) and for x in [-1/2, 1].
void log1p_core(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec u = s.vec(), c = s.vec();
  e.add(u, x, e.f32c(1.0f));
  e.sub(c, u, e.f32c(1.0f));
  e.sub(c, c, x);
  log_core(e, dst, u, LogBase::kE);
  e.div(c, c, u);
  e.sub(dst, dst, c);
}

}  // namespace detail

namespace {
void emit_log_base(Emitter& e, const Vec& dst, const Vec& x, detail::LogBase base) {
  Scratch s(e);
  Vec r = detail::result_reg(s, dst, {x});
  detail::log_core(e, r, x, base);
  e.fixup(r, x, log_fixups());
  e.mov(dst, r);
}
}  // namespace

void emit_log(Emitter& e, const Vec& dst, const Vec& x) {
  emit_log_base(e, dst, x, detail::LogBase::kE);
}
void emit_log2(Emitter& e, const Vec& dst, const Vec& x) {
  emit_log_base(e, dst, x, detail::LogBase::k2);
}
void emit_log10(Emitter& e, const Vec& dst, const Vec& x) {
  emit_log_base(e, dst, x, detail::LogBase::k10);
}

void emit_log1p(Emitter& e, const Vec& dst, const Vec& x) {
  Scratch s(e);
  Vec r = detail::result_reg(s, dst, {x});
  Vec u = s.vec();
  detail::log1p_core(e, r, x);
  e.add(u, x, e.f32c(1.0f));
  e.fixup(r, u, log_fixups());
  e.fixup(r, x, FixupTable().on(FixClass::kZero, FixTo::kInput));  // log1p(-0) = -0
  e.mov(dst, r);
}

}  // namespace kiln::jit::cpu
