// Emitter: ISA-neutral lane operations, masks and special-value fixups.

#include <limits>

#include "jit/codegen_cpu/emitter.h"
#include "kiln/error.h"

namespace kiln::jit::cpu {

namespace x86 = asmjit::x86;
namespace Inst = asmjit::x86::Inst;
using asmjit::InstId;

namespace {

bool same_reg(const Operand& op, const asmjit::BaseReg& r) {
  return op.isReg() && op.as<asmjit::BaseReg>().group() == r.group() &&
         op.as<asmjit::BaseReg>().id() == r.id();
}

}  // namespace

// --- Fixup tables --------------------------------------------------------------------

namespace {
// vfixupimmps token (nibble) indices.
constexpr int kTokQNaN = 0, kTokSNaN = 1, kTokZero = 2, kTokPosOne = 3, kTokNegInf = 4,
              kTokPosInf = 5, kTokNeg = 6, kTokPos = 7;

int token_of(FixClass c) {
  switch (c) {
    case FixClass::kNaN:
      return kTokQNaN;
    case FixClass::kZero:
      return kTokZero;
    case FixClass::kPosOne:
      return kTokPosOne;
    case FixClass::kNegInf:
      return kTokNegInf;
    case FixClass::kPosInf:
      return kTokPosInf;
    case FixClass::kNegFinite:
      return kTokNeg;
    case FixClass::kPosFinite:
      return kTokPos;
  }
  return kTokQNaN;
}
}  // namespace

FixupTable& FixupTable::on(FixClass c, FixTo r) {
  auto set = [&](int tok) {
    bits_ &= ~(0xfu << (4 * tok));
    bits_ |= static_cast<uint32_t>(r) << (4 * tok);
  };
  set(token_of(c));
  if (c == FixClass::kNaN) set(kTokSNaN);
  return *this;
}

FixTo FixupTable::at(FixClass c) const {
  return static_cast<FixTo>((bits_ >> (4 * token_of(c))) & 0xfu);
}

// --- Lane operations --------------------------------------------------------------------

void Emitter::emit3(InstId id, const Operand& d, const Operand& a, const Operand& b) {
  as_.emit(id, d, a, b);
}

void Emitter::mov(const Vec& dst, const Vec& src) {
  if (dst.id() != src.id()) as_.vmovaps(dst, src);
}
void Emitter::zero(const Vec& dst) {
  as_.vxorps(dst, dst, dst);
}
void Emitter::add(const Vec& d, const Vec& a, const Operand& b) {
  emit3(Inst::kIdVaddps, d, a, b);
}
void Emitter::sub(const Vec& d, const Vec& a, const Operand& b) {
  emit3(Inst::kIdVsubps, d, a, b);
}
void Emitter::mul(const Vec& d, const Vec& a, const Operand& b) {
  emit3(Inst::kIdVmulps, d, a, b);
}
void Emitter::div(const Vec& d, const Vec& a, const Operand& b) {
  emit3(Inst::kIdVdivps, d, a, b);
}
void Emitter::min(const Vec& d, const Vec& a, const Operand& b) {
  emit3(Inst::kIdVminps, d, a, b);
}
void Emitter::max(const Vec& d, const Vec& a, const Operand& b) {
  emit3(Inst::kIdVmaxps, d, a, b);
}
void Emitter::sqrt(const Vec& d, const Operand& a) {
  as_.emit(Inst::kIdVsqrtps, d, a);
}
void Emitter::and_(const Vec& d, const Vec& a, const Operand& b) {
  emit3(Inst::kIdVandps, d, a, b);
}
void Emitter::or_(const Vec& d, const Vec& a, const Operand& b) {
  emit3(Inst::kIdVorps, d, a, b);
}
void Emitter::xor_(const Vec& d, const Vec& a, const Operand& b) {
  emit3(Inst::kIdVxorps, d, a, b);
}
void Emitter::andn(const Vec& d, const Vec& a, const Operand& b) {
  emit3(Inst::kIdVandnps, d, a, b);
}
void Emitter::add_i32(const Vec& d, const Vec& a, const Operand& b) {
  emit3(Inst::kIdVpaddd, d, a, b);
}
void Emitter::sub_i32(const Vec& d, const Vec& a, const Operand& b) {
  emit3(Inst::kIdVpsubd, d, a, b);
}
void Emitter::shl_i32(const Vec& d, const Vec& a, int bits) {
  as_.vpslld(d, a, bits);
}
void Emitter::shr_u32(const Vec& d, const Vec& a, int bits) {
  as_.vpsrld(d, a, bits);
}
void Emitter::shr_i32(const Vec& d, const Vec& a, int bits) {
  as_.vpsrad(d, a, bits);
}
void Emitter::cvt_f32_i32(const Vec& d, const Vec& a) {
  as_.vcvtps2dq(d, a);
}
void Emitter::cvtt_f32_i32(const Vec& d, const Vec& a) {
  as_.vcvttps2dq(d, a);
}
void Emitter::cvt_i32_f32(const Vec& d, const Vec& a) {
  as_.vcvtdq2ps(d, a);
}

void Emitter::round(const Vec& d, const Vec& a, Round mode) {
  uint32_t imm = static_cast<uint32_t>(mode) | 0x8u;  // suppress the inexact exception
  if (avx512()) {
    as_.vrndscaleps(d, a, imm);
  } else {
    as_.vroundps(d, a, imm);
  }
}

// x86 FMA overwrites one of its operands and takes memory only as the last:
// pick the form that fits, moving `a` into d only when d aliases nothing.
void Emitter::emit_fma(InstId f132, InstId f213, InstId f231, const Vec& d, const Vec& a,
                       const Operand& b, const Operand& c) {
  KILN_INTERNAL_ASSERT(!(b.isMem() && c.isMem()), "fma with two memory operands");
  if (same_reg(c, d)) return emit3(f231, d, a, b);  // d = a*b + d
  if (!same_reg(a, d)) {
    if (same_reg(b, d)) return emit3(f213, d, a, c);  // d = a*d + c
    as_.vmovaps(d, a);
  }
  if (b.isMem()) return emit3(f132, d, c, b);  // d = d*b + c
  emit3(f213, d, b, c);                        // d = b*d + c
}

void Emitter::fmadd(const Vec& d, const Vec& a, const Operand& b, const Operand& c) {
  emit_fma(Inst::kIdVfmadd132ps, Inst::kIdVfmadd213ps, Inst::kIdVfmadd231ps, d, a, b, c);
}
void Emitter::fmsub(const Vec& d, const Vec& a, const Operand& b, const Operand& c) {
  emit_fma(Inst::kIdVfmsub132ps, Inst::kIdVfmsub213ps, Inst::kIdVfmsub231ps, d, a, b, c);
}
void Emitter::fnmadd(const Vec& d, const Vec& a, const Operand& b, const Operand& c) {
  emit_fma(Inst::kIdVfnmadd132ps, Inst::kIdVfnmadd213ps, Inst::kIdVfnmadd231ps, d, a, b, c);
}

// --- Masks --------------------------------------------------------------------------------

void Emitter::cmp(const Mask& m, const Vec& a, const Operand& b, Cmp pred) {
  as_.emit(Inst::kIdVcmpps, m.reg, a, b, asmjit::Imm(static_cast<uint32_t>(pred)));
}

void Emitter::cmp_i32_gt(const Mask& m, const Vec& a, const Operand& b) {
  emit3(Inst::kIdVpcmpgtd, m.reg, a, b);
}
void Emitter::cmp_i32_eq(const Mask& m, const Vec& a, const Operand& b) {
  emit3(Inst::kIdVpcmpeqd, m.reg, a, b);
}

void Emitter::blend(const Vec& d, const Vec& a, const Operand& b, const Mask& m) {
  if (avx512()) {
    as_.k(m.reg.as<x86::KReg>());
    emit3(Inst::kIdVblendmps, d, a, b);
  } else {
    as_.emit(Inst::kIdVblendvps, d, a, b, m.reg);
  }
}

void Emitter::mask_and(const Mask& d, const Mask& a, const Mask& b) {
  emit3(avx512() ? Inst::kIdKandw : Inst::kIdVandps, d.reg, a.reg, b.reg);
}
void Emitter::mask_or(const Mask& d, const Mask& a, const Mask& b) {
  emit3(avx512() ? Inst::kIdKorw : Inst::kIdVorps, d.reg, a.reg, b.reg);
}
void Emitter::mask_andn(const Mask& d, const Mask& a, const Mask& b) {
  emit3(avx512() ? Inst::kIdKandnw : Inst::kIdVandnps, d.reg, a.reg, b.reg);
}

// Note [Fixups]
// Special inputs (NaN, ±0, ±inf, negatives) are patched after the main
// computation instead of being steered around it: the computation runs on
// whatever the lanes hold, then lanes of a special class take a fixed value.
// AVX-512 does this with one vfixupimmps (the table is its 8 nibbles); AVX2
// emulates it with a compare and a blend per class that changes anything,
// applied from the widest class to the narrowest so later ones win.
void Emitter::fixup(const Vec& d, const Vec& x, const FixupTable& t) {
  KILN_INTERNAL_ASSERT(d.id() != x.id(), "fixup destination aliases its input");
  if (avx512()) {
    as_.vfixupimmps(d, x, u32c(t.avx512_bits()), 0);
    return;
  }
  auto value = [&](FixTo r) -> Operand {
    switch (r) {
      case FixTo::kInput:
      case FixTo::kNaNInput:
        return x;
      case FixTo::kNaN:
        return u32c(0xffc00000u);
      case FixTo::kNegInf:
        return u32c(0xff800000u);
      case FixTo::kPosInf:
        return u32c(0x7f800000u);
      case FixTo::kNegZero:
        return u32c(0x80000000u);
      case FixTo::kPosZero:
        return u32c(0);
      case FixTo::kNegOne:
        return f32c(-1.0f);
      case FixTo::kPosOne:
        return f32c(1.0f);
      case FixTo::kKeep:
        break;
    }
    KILN_INTERNAL_ASSERT(false, "unsupported fixup response");
    return x;
  };
  Scratch s(*this);
  Mask m = s.mask();
  const float kInf = std::numeric_limits<float>::infinity();
  // A wide class (x > 0, x < 0) also covers +1, +inf (resp. -inf): those are
  // cut out of it only when they keep their value, and need no step of their
  // own when they take the wide class's.
  const FixTo pos = t.at(FixClass::kPosFinite), neg = t.at(FixClass::kNegFinite);
  auto narrow = [&](FixClass c, const Mask& wide_mask, FixTo wide, float v) {
    if (wide != FixTo::kKeep && t.at(c) == FixTo::kKeep) {
      Mask m2 = s.mask();
      cmp(m2, x, f32c(v), Cmp::kNeq);
      mask_and(wide_mask, wide_mask, m2);
    }
  };
  if (pos != FixTo::kKeep) {
    cmp(m, x, u32c(0), Cmp::kGt);
    narrow(FixClass::kPosOne, m, pos, 1.0f);
    narrow(FixClass::kPosInf, m, pos, kInf);
    blend(d, d, value(pos), m);
  }
  if (neg != FixTo::kKeep) {
    cmp(m, x, u32c(0), Cmp::kLt);
    narrow(FixClass::kNegInf, m, neg, -kInf);
    blend(d, d, value(neg), m);
  }
  struct Exact {
    FixClass c;
    float v;
    FixTo wide;
  };
  for (Exact e : {Exact{FixClass::kZero, 0.0f, FixTo::kKeep}, Exact{FixClass::kPosOne, 1.0f, pos},
                  Exact{FixClass::kNegInf, -kInf, neg}, Exact{FixClass::kPosInf, kInf, pos}}) {
    if (FixTo r = t.at(e.c); r != FixTo::kKeep && r != e.wide) {
      cmp(m, x, f32c(e.v), Cmp::kEq);
      blend(d, d, value(r), m);
    }
  }
  if (FixTo r = t.at(FixClass::kNaN); r != FixTo::kKeep) {
    cmp(m, x, x, Cmp::kUnord);
    blend(d, d, value(r), m);
  }
}

}  // namespace kiln::jit::cpu
