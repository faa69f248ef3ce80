#include "jit/codegen_cpu/emitter.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "kiln/error.h"
#include "kiln/logging.h"

namespace kiln::jit::cpu {

namespace x86 = asmjit::x86;
using asmjit::InstId;
namespace Inst = asmjit::x86::Inst;

// --- ISA ----------------------------------------------------------------------------

const char* isa_name(Isa isa) {
  return isa == Isa::kAvx512 ? "avx512" : "avx2";
}

bool isa_supported(Isa isa) {
  const auto& f = asmjit::CpuInfo::host().features().x86();
  bool avx2 = f.hasAVX2() && f.hasFMA() && f.hasF16C();
  if (isa == Isa::kAvx2) return avx2;
  return avx2 && f.hasAVX512_F() && f.hasAVX512_BW() && f.hasAVX512_DQ() && f.hasAVX512_VL() &&
         f.hasBMI2();
}

Isa host_isa() {
  KILN_CHECK(isa_supported(Isa::kAvx2),
             "[codegen_cpu] expected a CPU with AVX2, FMA and F16C for generated kernels, got one "
             "without (kiln has no scalar code generator; use eager mode)");
  Isa best = isa_supported(Isa::kAvx512) ? Isa::kAvx512 : Isa::kAvx2;
  if (const char* env = std::getenv("KILN_CPU_ISA"); env != nullptr && *env != '\0') {
    std::string_view v(env);
    KILN_CHECK(v == "avx2" || v == "avx512",
               "[codegen_cpu] KILN_CPU_ISA: expected avx2 or avx512, got '", v, "'");
    Isa want = v == "avx512" ? Isa::kAvx512 : Isa::kAvx2;
    KILN_CHECK(isa_supported(want), "[codegen_cpu] KILN_CPU_ISA=", v, " but this CPU lacks it");
    best = want;
  }
  return best;
}

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

// --- Emitter -------------------------------------------------------------------------

namespace {

class ErrorCollector : public asmjit::ErrorHandler {
 public:
  void handleError(asmjit::Error err, const char* message, asmjit::BaseEmitter*) override {
    if (first_ == asmjit::kErrorOk) {
      first_ = err;
      message_ = message != nullptr ? message : asmjit::DebugUtils::errorAsString(err);
    }
  }
  asmjit::Error first_ = asmjit::kErrorOk;
  std::string message_;
};

// General-purpose registers in the order they are handed out: caller-saved
// first, so small kernels need no pushes. rsp is the stack; rbp stays out so
// asmjit may use it for a dynamically aligned frame.
constexpr uint8_t kGpOrder[] = {0, 1, 2, 6, 7, 8, 9, 10, 11, 3, 12, 13, 14, 15};

bool same_reg(const Operand& op, const asmjit::BaseReg& r) {
  return op.isReg() && op.as<asmjit::BaseReg>().group() == r.group() &&
         op.as<asmjit::BaseReg>().id() == r.id();
}

}  // namespace

Emitter::Emitter(Isa isa, std::string name, int num_args, EmitterOptions options)
    : isa_(isa), name_(std::move(name)), num_args_(num_args) {
  KILN_CHECK(isa_supported(isa), "[codegen_cpu] expected an ISA this CPU runs, got ",
             isa_name(isa));
  KILN_INTERNAL_ASSERT(num_args >= 0 && num_args <= 4, "kernels take at most 4 register arguments");
  code_.init(asmjit::Environment::host());
  errors_ = std::make_unique<ErrorCollector>();
  code_.setErrorHandler(errors_.get());
  if (options.keep_listing || log_enabled(LogChannel::OutputCode)) {
    logger_ = std::make_unique<asmjit::StringLogger>();
    code_.setLogger(logger_.get());
  }
  code_.attach(&as_);
  if (options.validate) as_.addDiagnosticOptions(asmjit::DiagnosticOptions::kValidateAssembler);

  asmjit::FuncSignatureBuilder sig(asmjit::CallConvId::kHost);
  sig.setRetT<void>();
  for (int i = 0; i < num_args; ++i) sig.addArgT<int64_t>();
  func_.init(sig, code_.environment());

  free_vec_mask_ = avx512() ? 0xffffffffu : 0xffffu;
  free_k_mask_ = avx512() ? 0xfeu : 0u;  // k0 cannot predicate
  for (uint8_t id : kGpOrder) free_gp_mask_ |= 1u << id;
  for (int i = 0; i < num_args; ++i) {
    const asmjit::FuncValue& v = func_.arg(i);
    KILN_INTERNAL_ASSERT(v.isReg(), "argument ", i, " is not passed in a register");
    Gp g = x86::gpq(v.regId());
    KILN_INTERNAL_ASSERT(free_gp_mask_ & (1u << g.id()), "argument register outside the pool");
    free_gp_mask_ &= ~(1u << g.id());
    used_gp_mask_ |= 1u << g.id();
    args_.push_back(g);
  }

  // Note [Deferred frame]
  // Which registers the body dirties and how much stack it needs are known only
  // at its end, while the prolog must run first. The entry jumps to a prolog
  // emitted after the body; the prolog jumps back. The epilog directly follows
  // the body. Two jumps per call cost ~1 cycle and keep one pass over the body.
  body_ = as_.newLabel();
  prolog_ = as_.newLabel();
  epilog_ = as_.newLabel();
  as_.jmp(prolog_);
  as_.bind(body_);
}

Emitter::~Emitter() = default;

Gp Emitter::arg(int i) const {
  KILN_INTERNAL_ASSERT(i >= 0 && i < num_args_, "argument ", i, " of ", num_args_);
  return args_[i];
}

void Emitter::check_pool(bool ok, const char* what) const {
  KILN_INTERNAL_ASSERT(ok, "[codegen_cpu] kernel '", name_, "' ran out of ", what, " registers (",
                       isa_name(isa_), "); the code generator must split the kernel");
}

void Emitter::note_vec_use() {
  int held = (avx512() ? 32 : 16) - std::popcount(free_vec_mask_);
  if (held > peak_vecs_) peak_vecs_ = held;
}

Vec Emitter::acquire_vec() {
  check_pool(free_vec_mask_ != 0, "vector");
  int id = std::countr_zero(free_vec_mask_);
  free_vec_mask_ &= ~(1u << id);
  used_vec_mask_ |= 1u << id;
  note_vec_use();
  return avx512() ? Vec(x86::zmm(id)) : Vec(x86::ymm(id));
}

Gp Emitter::acquire_gp() {
  for (uint8_t id : kGpOrder) {
    if (free_gp_mask_ & (1u << id)) {
      free_gp_mask_ &= ~(1u << id);
      used_gp_mask_ |= 1u << id;
      return x86::gpq(id);
    }
  }
  check_pool(false, "general-purpose");
  return Gp();
}

Mask Emitter::acquire_mask() {
  if (!avx512()) return Mask{acquire_vec()};
  check_pool(free_k_mask_ != 0, "mask");
  int id = std::countr_zero(free_k_mask_);
  free_k_mask_ &= ~(1u << id);
  return Mask{x86::k(id)};
}

void Emitter::release(const Vec& v) {
  uint32_t bit = 1u << v.id();
  KILN_INTERNAL_ASSERT(!(free_vec_mask_ & bit), "vector register ", v.id(), " released twice");
  free_vec_mask_ |= bit;
}

void Emitter::release(const Gp& g) {
  uint32_t bit = 1u << g.id();
  KILN_INTERNAL_ASSERT(!(free_gp_mask_ & bit), "gp register ", g.id(), " released twice");
  free_gp_mask_ |= bit;
}

void Emitter::release(const Mask& m) {
  if (!avx512()) return release(m.reg.as<Vec>());
  uint32_t bit = 1u << m.reg.id();
  KILN_INTERNAL_ASSERT(!(free_k_mask_ & bit), "mask register ", m.reg.id(), " released twice");
  free_k_mask_ |= bit;
}

int Emitter::free_vecs() const {
  return std::popcount(free_vec_mask_);
}
int Emitter::free_gps() const {
  return std::popcount(free_gp_mask_);
}

Mem Emitter::stack_slot(uint32_t bytes, uint32_t align) {
  KILN_INTERNAL_ASSERT(!finished_, "stack_slot after finish");
  align = std::max<uint32_t>(align, 8);
  stack_size_ = (stack_size_ + align - 1) & ~(align - 1);
  Mem m = x86::ptr(x86::rsp, static_cast<int32_t>(stack_size_));
  stack_size_ += bytes;
  stack_align_ = std::max(stack_align_, align);
  return m;
}

// --- Constants --------------------------------------------------------------------------

Label Emitter::const_label(const void* data, size_t size, size_t align) {
  KILN_INTERNAL_ASSERT(!finished_, "constant after finish");
  for (const PoolEntry& e : pool_) {
    if (e.bytes.size() == size && e.align >= align &&
        std::memcmp(e.bytes.data(), data, size) == 0) {
      return e.label;
    }
  }
  PoolEntry e;
  e.bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + size);
  e.align = align;
  e.label = as_.newLabel();
  pool_.push_back(std::move(e));
  return pool_.back().label;
}

// A constant of `size` bytes splat across the vector: on AVX-512 stored once and
// read with an {1toN} broadcast; on AVX2 (no embedded broadcast) stored as a
// full 32-byte vector.
Mem Emitter::const_mem(uint64_t bits, int size) {
  if (avx512()) {
    Label l = const_label(&bits, size, size);
    Mem m = x86::ptr(l);
    return size == 4 ? m._1to16() : m._1to8();
  }
  uint8_t buf[32];
  for (int i = 0; i < 32; i += size) std::memcpy(buf + i, &bits, size);
  return x86::ptr(const_label(buf, 32, 32));
}

Mem Emitter::f32c(float v) {
  return const_mem(std::bit_cast<uint32_t>(v), 4);
}
Mem Emitter::u32c(uint32_t bits) {
  return const_mem(bits, 4);
}
Mem Emitter::f64c(double v) {
  return const_mem(std::bit_cast<uint64_t>(v), 8);
}

Mem Emitter::vec_u32(const uint32_t* lanes_data) {
  return x86::ptr(const_label(lanes_data, vec_bytes(), vec_bytes()));
}

Mem Emitter::data(const void* bytes, size_t size, size_t align) {
  return x86::ptr(const_label(bytes, size, align));
}

void Emitter::set_f32(const Vec& dst, float v) {
  uint32_t bits = std::bit_cast<uint32_t>(v);
  if (bits == 0) return zero(dst);
  if (avx512()) {
    as_.vbroadcastss(dst, x86::dword_ptr(const_label(&bits, 4, 4)));
  } else {
    as_.vmovaps(dst, f32c(v));
  }
}

// --- Control flow ------------------------------------------------------------------

void Emitter::bind(const Label& l) {
  as_.bind(l);
}

void Emitter::ret() {
  as_.jmp(epilog_);
}

void Emitter::jump_if_any(const Mask& m, const Label& target) {
  if (avx512()) {
    as_.kortestw(m.reg.as<x86::KReg>(), m.reg.as<x86::KReg>());
  } else {
    as_.vtestps(m.reg.as<Vec>(), m.reg.as<Vec>());
  }
  as_.jnz(target);
}

void Emitter::jump_if_none(const Mask& m, const Label& target) {
  if (avx512()) {
    as_.kortestw(m.reg.as<x86::KReg>(), m.reg.as<x86::KReg>());
  } else {
    as_.vtestps(m.reg.as<Vec>(), m.reg.as<Vec>());
  }
  as_.jz(target);
}

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

void Emitter::store_f16(const Mem& dst, const Vec& src, const TailMask* tail) {
  Scratch s(*this);
  Vec t = s.vec();
  Mask nan = s.mask();
  Mem m = dst;
  m.setSize(vec_bytes() / 2);
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
  if (tail != nullptr) {
    as_.k(tail->mask.reg.as<x86::KReg>()).vcvtps2ph(m, t, 0);
  } else {
    as_.vcvtps2ph(m, t, 0);
  }
}

void Emitter::store_bf16(const Mem& dst, const Vec& src, const TailMask* tail) {
  Scratch s(*this);
  Vec hi = s.vec(), r = s.vec();
  Mask nan = s.mask();
  Mem m = dst;
  m.setSize(vec_bytes() / 2);
  as_.vpsrld(hi, src, 16);
  as_.vandps(r, hi, u32c(1));
  as_.vpaddd(r, r, src);
  as_.vpaddd(r, r, u32c(0x7fff));
  as_.vpsrld(r, r, 16);
  as_.vorps(hi, hi, u32c(0x40));
  cmp(nan, src, src, Cmp::kUnord);
  blend(r, r, hi, nan);
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
  if (FixTo r = t.at(FixClass::kPosFinite); r != FixTo::kKeep) {
    Mask m2 = s.mask();
    cmp(m, x, u32c(0), Cmp::kGt);
    cmp(m2, x, f32c(kInf), Cmp::kLt);
    mask_and(m, m, m2);
    if (t.at(FixClass::kPosOne) == FixTo::kKeep) {
      cmp(m2, x, f32c(1.0f), Cmp::kNeq);
      mask_and(m, m, m2);
    }
    blend(d, d, value(r), m);
  }
  if (FixTo r = t.at(FixClass::kNegFinite); r != FixTo::kKeep) {
    cmp(m, x, u32c(0), Cmp::kLt);
    if (t.at(FixClass::kNegInf) == FixTo::kKeep) {
      Mask m2 = s.mask();
      cmp(m2, x, f32c(-kInf), Cmp::kGt);
      mask_and(m, m, m2);
    }
    blend(d, d, value(r), m);
  }
  struct Exact {
    FixClass c;
    float v;
  };
  for (Exact e : {Exact{FixClass::kZero, 0.0f}, Exact{FixClass::kPosOne, 1.0f},
                  Exact{FixClass::kNegInf, -kInf}, Exact{FixClass::kPosInf, kInf}}) {
    if (FixTo r = t.at(e.c); r != FixTo::kKeep) {
      cmp(m, x, f32c(e.v), Cmp::kEq);
      blend(d, d, value(r), m);
    }
  }
  if (FixTo r = t.at(FixClass::kNaN); r != FixTo::kKeep) {
    cmp(m, x, x, Cmp::kUnord);
    blend(d, d, value(r), m);
  }
}

// --- Finishing ------------------------------------------------------------------------------

void Emitter::finish() {
  if (finished_) return;
  as_.bind(epilog_);
  asmjit::FuncFrame frame;
  frame.init(func_);
  frame.setAvxEnabled();
  if (avx512()) frame.setAvx512Enabled();
  frame.setAvxCleanup();  // vzeroupper: callers may run SSE code next
  frame.setDirtyRegs(asmjit::RegGroup::kGp, used_gp_mask_);
  frame.setDirtyRegs(asmjit::RegGroup::kVec, used_vec_mask_);
  if (stack_size_ > 0) {
    frame.setLocalStackSize(stack_size_);
    frame.setLocalStackAlignment(stack_align_);
  }
  asmjit::FuncArgsAssignment args(&func_);
  for (int i = 0; i < num_args_; ++i) args.assignReg(i, args_[i]);
  args.updateFuncFrame(frame);
  frame.finalize();
  KILN_INTERNAL_ASSERT(frame.localStackOffset() == 0, "stack slots assume no call stack");
  as_.emitEpilog(frame);
  as_.bind(prolog_);
  as_.emitProlog(frame);
  as_.emitArgsAssignment(frame, args);
  as_.jmp(body_);

  if (!pool_.empty()) {
    as_.align(asmjit::AlignMode::kData, 64);
    for (const PoolEntry& e : pool_) {
      as_.align(asmjit::AlignMode::kData, static_cast<uint32_t>(e.align));
      as_.bind(e.label);
      as_.embed(e.bytes.data(), e.bytes.size());
    }
  }
  finished_ = true;
  check_asmjit();
  if (logger_ != nullptr) {
    listing_.assign(logger_->data(), logger_->dataSize());
    KILN_LOG(OutputCode, "cpu kernel '", name_, "' (", isa_name(isa_), ", ", code_size(),
             " bytes):\n", listing_);
  }
}

void Emitter::check_asmjit() const {
  const auto* errors = static_cast<const ErrorCollector*>(errors_.get());
  KILN_INTERNAL_ASSERT(errors->first_ == asmjit::kErrorOk, "[codegen_cpu] asmjit rejected kernel '",
                       name_, "' (", isa_name(isa_), "): ", errors->message_);
}

size_t Emitter::code_size() const {
  return code_.codeSize();
}

// --- Scratch -----------------------------------------------------------------------------

Scratch::~Scratch() {
  for (auto it = gps_.rbegin(); it != gps_.rend(); ++it) e_.release(*it);
  for (auto it = masks_.rbegin(); it != masks_.rend(); ++it) e_.release(*it);
  for (auto it = vecs_.rbegin(); it != vecs_.rend(); ++it) e_.release(*it);
}

Vec Scratch::vec() {
  return vecs_.emplace_back(e_.acquire_vec());
}
Mask Scratch::mask() {
  return masks_.emplace_back(e_.acquire_mask());
}
Gp Scratch::gp() {
  return gps_.emplace_back(e_.acquire_gp());
}

}  // namespace kiln::jit::cpu
