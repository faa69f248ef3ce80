// Emitter: loads, stores, f16/bf16 conversions and masked tails.

#include <limits>

#include "jit/codegen_cpu/emitter.h"
#include "kiln/error.h"

namespace kiln::jit::cpu {

namespace x86 = asmjit::x86;
namespace Inst = asmjit::x86::Inst;
using asmjit::InstId;

// --- Memory ---------------------------------------------------------------------------

// Note [fp16 and bf16 conversions]
// Loads and stores convert exactly as kiln's Half and BFloat16 (api/kiln/half.h),
// so a fused kernel and an eager one agree bit for bit, NaNs included:
// - f16 -> f32: vcvtph2ps, except that it quiets signaling NaNs and Half does
//   not; NaN lanes get their quiet bit back from the half's own bit 9.
// - f32 -> f16: vcvtps2ph with round-to-nearest-even, except that NaNs become
//   sign | 0x7e00 as in Half (vcvtps2ph would keep payload bits).
// - bf16 <-> f32: integer ops only (AVX2 has no bf16 instructions; AVX-512's
//   vcvtneps2bf16 flushes denormals): x + 0x7fff + ((x >> 16) & 1), then >> 16;
//   NaN -> (x >> 16) | 0x40.

TailMask Emitter::make_tail_mask(const Gp& count) {
  Mask m = acquire_mask();
  if (avx512()) {
    Scratch s(*this);
    Gp g = s.gp();
    as_.mov(g.r32(), -1);
    as_.bzhi(g.r32(), g.r32(), count.r32());
    as_.kmovw(m.reg.as<x86::KReg>(), g.r32());
  } else {
    Vec v = m.reg.as<Vec>();
    static constexpr uint32_t kIota[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    as_.vmovd(v.xmm(), count.r32());
    as_.vpbroadcastd(v, v.xmm());
    as_.vpcmpgtd(v, v, vec_u32(kIota));
  }
  return TailMask{m, count};
}

Mem Emitter::avx2_tail_slot() {
  if (!has_tail_slot_) {
    tail_slot_ = stack_slot(32, 32);
    has_tail_slot_ = true;
  }
  return tail_slot_;
}

// Copies `count` (>= 1) 16-bit elements; AVX2 has no 16-bit masked moves.
void Emitter::avx2_tail_copy16(const Mem& dst, const Mem& src, const Gp& count) {
  Scratch s(*this);
  Gp ps = s.gp(), pd = s.gp(), i = s.gp(), v = s.gp();
  as_.lea(ps, src);
  as_.lea(pd, dst);
  as_.xor_(i.r32(), i.r32());
  Label loop = as_.newLabel();
  as_.bind(loop);
  as_.movzx(v.r32(), x86::word_ptr(ps, i, 1));
  as_.mov(x86::word_ptr(pd, i, 1), v.r16());
  as_.inc(i);
  as_.cmp(i, count);
  as_.jb(loop);
}

void Emitter::f16_to_f32(const Vec& dst, const Operand& src, const TailMask* tail) {
  Scratch s(*this);
  Vec h = s.vec();
  Mask nan = s.mask();
  if (tail != nullptr) {
    auto k = tail->mask.reg.as<x86::KReg>();
    as_.k(k).z().vcvtph2ps(dst, src.as<Mem>());
    as_.k(k).z().vpmovzxwd(h, src.as<Mem>());
  } else {
    as_.emit(Inst::kIdVcvtph2ps, dst, src);
    as_.emit(Inst::kIdVpmovzxwd, h, src);
  }
  cmp(nan, dst, dst, Cmp::kUnord);
  as_.vpslld(h, h, 13);
  if (avx512()) {
    // NaN lanes: dst &= (h << 13) | ~quiet_bit, one ternary-logic op.
    as_.k(nan.reg.as<x86::KReg>()).vpternlogd(dst, h, u32c(0xffbfffffu), 0xe0);
  } else {
    as_.vorps(h, h, u32c(0xffbfffffu));
    as_.vandps(h, h, dst);
    as_.vblendvps(dst, dst, h, nan.reg.as<Vec>());
  }
}

void Emitter::load(const Vec& dst, const Mem& src, DType dt, const TailMask* tail) {
  if (dt == DType::Float32) {
    Mem m = src;
    m.setSize(vec_bytes());
    if (tail == nullptr) {
      as_.vmovups(dst, m);
    } else if (avx512()) {
      as_.k(tail->mask.reg.as<x86::KReg>()).z().vmovups(dst, m);
    } else {
      as_.vmaskmovps(dst, tail->mask.reg.as<Vec>(), m);
    }
    return;
  }
  KILN_CHECK(dt == DType::Float16 || dt == DType::BFloat16,
             "[codegen_cpu] load: expected float32, float16 or bfloat16, got ", dt);
  Mem m = src;
  if (tail != nullptr && !avx512()) {
    Mem slot = avx2_tail_slot();
    zero(dst);
    as_.vmovdqu(slot, dst.xmm());  // dst is free scratch until written below
    avx2_tail_copy16(slot, src, tail->count);
    m = slot;
    tail = nullptr;
  }
  m.setSize(vec_bytes() / 2);
  if (dt == DType::Float16) return f16_to_f32(dst, m, tail);
  if (tail != nullptr) {
    as_.k(tail->mask.reg.as<x86::KReg>()).z().vpmovzxwd(dst, m);
  } else {
    as_.vpmovzxwd(dst, m);
  }
  as_.vpslld(dst, dst, 16);
}

void Emitter::store(const Mem& dst, const Vec& src, DType dt, const TailMask* tail) {
  if (dt == DType::Float32) {
    Mem m = dst;
    m.setSize(vec_bytes());
    if (tail == nullptr) {
      as_.vmovups(m, src);
    } else if (avx512()) {
      as_.k(tail->mask.reg.as<x86::KReg>()).vmovups(m, src);
    } else {
      as_.vmaskmovps(m, tail->mask.reg.as<Vec>(), src);
    }
    return;
  }
  KILN_CHECK(dt == DType::Float16 || dt == DType::BFloat16,
             "[codegen_cpu] store: expected float32, float16 or bfloat16, got ", dt);
  if (tail != nullptr && !avx512()) {
    Mem slot = avx2_tail_slot();
    if (dt == DType::Float16)
      store_f16(slot, src, nullptr);
    else
      store_bf16(slot, src, nullptr);
    avx2_tail_copy16(dst, slot, tail->count);
    return;
  }
  if (dt == DType::Float16)
    store_f16(dst, src, tail);
  else
    store_bf16(dst, src, tail);
}

void Emitter::store_f16(const Operand& dst, const Vec& src, const TailMask* tail) {
  Scratch s(*this);
  Vec t = s.vec();
  Mask nan = s.mask();
  cmp(nan, src, src, Cmp::kUnord);
  if (avx512()) {
    auto k = nan.reg.as<x86::KReg>();
    as_.k(k).vblendmps(t, src, u32c(0x7fc00000u));
    as_.k(k).vpternlogd(t, src, u32c(0x80000000u), 0xf8);  // t | (src & sign)
  } else {
    as_.vandps(t, src, u32c(0x80000000u));
    as_.vorps(t, t, u32c(0x7fc00000u));
    as_.vblendvps(t, src, t, nan.reg.as<Vec>());
  }
  if (dst.isReg()) {
    Vec r = dst.as<Vec>();
    if (avx512()) {
      as_.vcvtps2ph(r.ymm(), t, 0);
    } else {
      as_.vcvtps2ph(r.xmm(), t, 0);
    }
    return;
  }
  Mem m = dst.as<Mem>();
  m.setSize(vec_bytes() / 2);
  if (tail != nullptr) {
    as_.k(tail->mask.reg.as<x86::KReg>()).vcvtps2ph(m, t, 0);
  } else {
    as_.vcvtps2ph(m, t, 0);
  }
}

void Emitter::store_bf16(const Operand& dst, const Vec& src, const TailMask* tail) {
  Scratch s(*this);
  Vec hi = s.vec(), r = s.vec();
  Mask nan = s.mask();
  as_.vpsrld(hi, src, 16);
  as_.vandps(r, hi, u32c(1));
  as_.vpaddd(r, r, src);
  as_.vpaddd(r, r, u32c(0x7fff));
  as_.vpsrld(r, r, 16);
  as_.vorps(hi, hi, u32c(0x40));
  cmp(nan, src, src, Cmp::kUnord);
  blend(r, r, hi, nan);
  if (dst.isReg()) {
    Vec d = dst.as<Vec>();
    if (avx512()) {
      as_.vpmovdw(d.ymm(), r);
    } else {
      as_.vextracti128(hi.xmm(), r, 1);
      as_.vpackusdw(d.xmm(), r.xmm(), hi.xmm());
    }
    return;
  }
  Mem m = dst.as<Mem>();
  m.setSize(vec_bytes() / 2);
  if (avx512()) {
    if (tail != nullptr) {
      as_.k(tail->mask.reg.as<x86::KReg>()).vpmovdw(m, r);
    } else {
      as_.vpmovdw(m, r);
    }
  } else {
    as_.vextracti128(hi.xmm(), r, 1);
    as_.vpackusdw(hi.xmm(), r.xmm(), hi.xmm());
    as_.vmovdqu(m, hi.xmm());
  }
}

void Emitter::load_broadcast(const Vec& dst, const Mem& src, DType dt) {
  if (dt == DType::Float32) {
    Mem m = src;
    m.setSize(4);
    as_.vbroadcastss(dst, m);
    return;
  }
  KILN_CHECK(dt == DType::Float16 || dt == DType::BFloat16,
             "[codegen_cpu] load_broadcast: expected float32, float16 or bfloat16, got ", dt);
  Scratch s(*this);
  Vec t = s.vec().half();
  Mem m = src;
  m.setSize(2);
  as_.vpbroadcastw(t, m);
  if (dt == DType::Float16) return f16_to_f32(dst, t, nullptr);
  as_.vpmovzxwd(dst, t);
  as_.vpslld(dst, dst, 16);
}

void Emitter::lane_offsets(const Vec& idx, const Mem& stride) {
  static constexpr uint32_t kIota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  Mem sm = stride;
  sm.setSize(4);
  as_.vpbroadcastd(idx, sm);
  as_.vpmulld(idx, idx, vec_u32(kIota));
}

void Emitter::load_strided(const Vec& dst, const Gp& base, const Mem& stride, DType dt,
                           const TailMask* tail) {
  Scratch s(*this);
  if (dt == DType::Float32) {
    // Byte offsets lane * s; masked-off lanes are neither read nor written,
    // so dst is cleared first (it also breaks the gather's dependency on dst).
    Vec idx = s.vec();
    lane_offsets(idx, stride);
    Mem src = x86::ptr(base, idx);
    src.setSize(4);
    zero(dst);
    if (avx512()) {
      auto k = s.mask().reg.as<x86::KReg>();
      if (tail != nullptr) {
        as_.kmovw(k, tail->mask.reg.as<x86::KReg>());
      } else {
        as_.kxnorw(k, k, k);
      }
      as_.k(k).vgatherdps(dst, src);
    } else {
      Vec m = s.vec();
      if (tail != nullptr) {
        as_.vmovaps(m, tail->mask.reg.as<Vec>());
      } else {
        as_.vpcmpeqd(m, m, m);
      }
      as_.vgatherdps(dst, src, m);
    }
    return;
  }
  KILN_CHECK(dt == DType::Float16 || dt == DType::BFloat16,
             "[codegen_cpu] load_strided: expected float32, float16 or bfloat16, got ", dt);
  // One 16-bit insert per lane: nothing outside the elements is read.
  Gp step = s.gp();
  as_.mov(step, stride);
  Vec lo = s.vec();
  Vec hi = avx512() ? s.vec() : lo;
  zero(lo);
  if (avx512()) zero(hi);
  Label end = as_.newLabel();
  for (int j = 0; j < lanes(); ++j) {
    if (tail != nullptr && j > 0) {
      as_.cmp(tail->count, j);
      as_.jbe(end);
    }
    Vec x = j < 8 ? lo : hi;
    as_.vpinsrw(x.xmm(), x.xmm(), x86::word_ptr(base), j % 8);
    if (j + 1 < lanes()) as_.add(base, step);
  }
  as_.bind(end);
  Vec h = lo.xmm();
  if (avx512()) {
    as_.vinserti32x4(lo.ymm(), lo.ymm(), hi.xmm(), 1);
    h = lo.ymm();
  }
  if (dt == DType::Float16) return f16_to_f32(dst, h, nullptr);
  as_.vpmovzxwd(dst, h);
  as_.vpslld(dst, dst, 16);
}

void Emitter::store_strided(const Gp& base, const Mem& stride, const Vec& src, DType dt,
                            const TailMask* tail) {
  KILN_CHECK(dt == DType::Float32 || dt == DType::Float16 || dt == DType::BFloat16,
             "[codegen_cpu] store_strided: expected float32, float16 or bfloat16, got ", dt);
  Scratch s(*this);
  if (dt == DType::Float32 && avx512()) {
    // Byte offsets lane * s (as load_strided); the scatter clears its mask.
    Vec idx = s.vec();
    lane_offsets(idx, stride);
    auto k = s.mask().reg.as<x86::KReg>();
    if (tail != nullptr) {
      as_.kmovw(k, tail->mask.reg.as<x86::KReg>());
    } else {
      as_.kxnorw(k, k, k);
    }
    Mem dst = x86::ptr(base, idx);
    dst.setSize(4);
    as_.k(k).vscatterdps(dst, src);
    return;
  }
  // One store per lane from two 128-bit halves: float32 lanes 0-3 and 4-7
  // (AVX2), or 16-bit lanes 0-7 and 8-15 (converted first).
  Gp step = s.gp();
  as_.mov(step, stride);
  Vec lo = src, hi = s.vec();
  const bool wide = dt == DType::Float32;
  if (wide) {
    as_.vextractf128(hi.xmm(), src.ymm(), 1);
  } else {
    lo = s.vec();
    if (dt == DType::Float16) {
      store_f16(lo, src, nullptr);
    } else {
      store_bf16(lo, src, nullptr);
    }
    if (avx512()) as_.vextracti128(hi.xmm(), lo.ymm(), 1);
  }
  const int per_half = wide ? 4 : 8;
  Label end = as_.newLabel();
  for (int j = 0; j < lanes(); ++j) {
    if (tail != nullptr && j > 0) {
      as_.cmp(tail->count, j);
      as_.jbe(end);
    }
    x86::Xmm x = j < per_half ? lo.xmm() : hi.xmm();
    if (wide) {
      as_.vextractps(x86::dword_ptr(base), x, j % per_half);
    } else {
      as_.vpextrw(x86::word_ptr(base), x, j % per_half);
    }
    if (j + 1 < lanes()) as_.add(base, step);
  }
  as_.bind(end);
}

}  // namespace kiln::jit::cpu
