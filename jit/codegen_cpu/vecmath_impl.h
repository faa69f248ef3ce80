#pragma once

// Building blocks shared by the vecmath_*.cpp families. "Core" routines compute
// on finite, in-range lanes and leave special lanes (NaN, infinities, domain
// errors) for the public op to patch (Note [Fixups] in emitter.cpp).

#include <initializer_list>
#include <span>

#include "jit/codegen_cpu/emitter.h"

namespace kiln::jit::cpu::detail {

// acc = c[0] + t*(c[1] + t*(c[2] + ...)) by Horner's rule. acc must not alias t.
void horner(Emitter& e, const Vec& acc, const Vec& t, std::span<const float> c);

// A register for a result that must not overwrite inputs still needed: dst
// itself when it aliases none of them, else a scratch from `s`.
Vec result_reg(Scratch& s, const Vec& dst, std::initializer_list<Vec> inputs);

// dst = e^x 2^bias. Clamps x first, so ±inf give 0 / inf and results are
// correctly scaled down into denormals; NaN lanes give a number. dst may alias
// x. bias in [0, 32] keeps tiny results normal for later rescaling.
void exp_core(Emitter& e, const Vec& dst, const Vec& x, int bias = 0);
// dst = expm1(x) for finite x (dst must not alias x; a NaN x gives a number).
void expm1_core(Emitter& e, const Vec& dst, const Vec& x);
// dst *= 2^n for integral n in [-150, 128] (float lanes); n is clobbered.
void scale_by_pow2(Emitter& e, const Vec& dst, const Vec& n);

// x = 2^k m with m in [sqrt(1/2), sqrt(2)) and k integral (float lanes), for
// positive finite x, denormals included; other lanes give numbers.
void decompose(Emitter& e, const Vec& m, const Vec& k, const Vec& x);

enum class LogBase : uint8_t { kE, k2, k10 };
// dst = log(x) for positive finite x (denormals included); other lanes give
// numbers. dst must not alias x.
void log_core(Emitter& e, const Vec& dst, const Vec& x, LogBase base);
// dst = log1p(x) for x > -1 finite; other lanes give numbers. dst must not alias x.
void log1p_core(Emitter& e, const Vec& dst, const Vec& x);

// dst = sigmoid(x) (times *factor when given, rounded once into denormals:
// Note [Scaled sigmoid tail]). NaN lanes of x give a number. dst must not
// alias x or *factor.
void sigmoid_core(Emitter& e, const Vec& dst, const Vec& x, const Vec* factor = nullptr);

// dst ~ 1/a within ~1 ulp for normal a (not 0 or inf): on AVX-512 the
// hardware estimate refined by one Newton step (1/1 comes out as 1 exactly),
// on AVX2 a division. a may be clobbered; dst must not alias it.
void fast_reciprocal(Emitter& e, const Vec& dst, const Vec& a);
// dst = min(max(x, lo), hi) with NaN lanes kept. dst may alias x.
void clamp(Emitter& e, const Vec& dst, const Vec& x, float lo, float hi);
// dst = src 2^n for integral n in [-151, 128] (float lanes), rounded once;
// n is kept. dst may alias src.
void scale_to(Emitter& e, const Vec& dst, const Vec& src, const Vec& n);

// Patches NaN lanes of dst with x's NaN.
void keep_nan(Emitter& e, const Vec& dst, const Vec& x);

}  // namespace kiln::jit::cpu::detail
