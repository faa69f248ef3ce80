#pragma once

// kiln's thin layer over asmjit's x86::Assembler: one function per Emitter, an
// explicit register plan (pools with acquire/release), a deferred frame, a
// constant pool, and ISA-neutral lane operations that read the same on AVX-512
// (zmm, k-masks) and AVX2 (ymm, vector masks). Vector math (vecmath.h) and the
// fused-kernel generator are written against this interface only.

#include <asmjit/x86.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln::jit::cpu {

// Note [CPU ISA levels]
// kiln generates AVX-512 code (F+BW+DQ+VL, 16 float lanes, 32 vector registers,
// k-masks) where the CPU has it, else AVX2 (+FMA+F16C, 8 lanes, 16 registers).
// There is no scalar or SSE fallback: on an older CPU the CPU code generator
// refuses with a kiln::Error and the caller runs eager kernels instead.
enum class Isa : uint8_t { kAvx2, kAvx512 };

const char* isa_name(Isa isa);
// Whether this CPU (and OS) can run code generated for `isa`.
bool isa_supported(Isa isa);
// The best ISA of this CPU, capped by KILN_CPU_ISA=avx2|avx512 when set; throws
// kiln::Error when the CPU lacks AVX2+FMA+F16C.
Isa host_isa();
// Float32 lanes per vector register.
constexpr int isa_lanes(Isa isa) {
  return isa == Isa::kAvx512 ? 16 : 8;
}

using Gp = asmjit::x86::Gp;
using Vec = asmjit::x86::Vec;
using Mem = asmjit::x86::Mem;
using Label = asmjit::Label;
using Operand = asmjit::Operand;

// A per-lane predicate: a k register on AVX-512; on AVX2 a vector register
// whose lanes are all ones (true) or all zeros (false).
struct Mask {
  asmjit::x86::Reg reg;
};

// The lanes [0, count) of a partial vector, for masked loads and stores.
// `count` (1 .. lanes-1) is read, not owned; the mask is owned by the TailMask.
struct TailMask {
  Mask mask;
  Gp count;
};

// Comparison predicates (quiet: NaN operands never trap).
enum class Cmp : uint8_t {
  kEq = 0x00,     // ordered ==
  kLt = 0x11,     // ordered <
  kLe = 0x12,     // ordered <=
  kUnord = 0x03,  // either is NaN
  kNeq = 0x04,    // unordered != (true when either is NaN)
  kNlt = 0x15,    // !(a < b), true on NaN
  kNle = 0x16,    // !(a <= b), true on NaN
  kOrd = 0x07,    // neither is NaN
  kEqU = 0x08,    // == or either is NaN
  kGe = 0x1d,     // ordered >=
  kGt = 0x1e,     // ordered >
};

enum class Round : uint8_t { kNearest = 0, kFloor = 1, kCeil = 2, kTrunc = 3 };

// Special-value patching after a computation (Note [Fixups]). Input classes:
enum class FixClass : uint8_t {
  kNaN,     // quiet or signaling NaN
  kZero,    // +0 or -0
  kPosOne,  // +1.0 exactly
  kNegInf,
  kPosInf,
  kNegFinite,  // finite and < 0 (denormals included)
  kPosFinite,  // finite and > 0, except +1.0
};
// ... and what a lane of that class becomes.
enum class FixTo : uint8_t {
  kKeep = 0,      // the computed value
  kInput = 1,     // the classified input itself
  kNaNInput = 2,  // the input NaN, quieted
  kNaN = 3,       // the default NaN (0xffc00000)
  kNegInf = 4,
  kPosInf = 5,
  kNegZero = 7,
  kPosZero = 8,
  kNegOne = 9,
  kPosOne = 10,
};
class FixupTable {
 public:
  FixupTable& on(FixClass c, FixTo r);
  FixTo at(FixClass c) const;
  uint32_t avx512_bits() const { return bits_; }

 private:
  uint32_t bits_ = 0;  // vfixupimmps nibbles: QNaN, SNaN, zero, +1, -inf, +inf, <0, >0
};

struct EmitterOptions {
  // (optional) Keep the assembly listing even when KILN_LOGS=output_code is off
  // (tests print it). Default off: logging costs compile time.
  bool keep_listing = false;
  // (optional) Have asmjit validate every instruction (slower; tests turn it on).
  bool validate = false;
};

// Emits one function `void name(int64_t/pointer args...)` for the host C ABI.
// Usage: construct, take arguments with arg(), emit the body (acquiring and
// releasing registers), then JitRuntime::add(emitter) finishes and loads it.
// Any misuse (pool exhausted, unsupported dtype, encoding failure) throws
// kiln::Error; nothing is global: an Emitter owns all of its state.
class Emitter {
 public:
  Emitter(Isa isa, std::string name, int num_args, EmitterOptions options = {});
  ~Emitter();
  Emitter(const Emitter&) = delete;
  Emitter& operator=(const Emitter&) = delete;

  Isa isa() const { return isa_; }
  bool avx512() const { return isa_ == Isa::kAvx512; }
  int lanes() const { return isa_lanes(isa_); }
  int vec_bytes() const { return lanes() * 4; }
  const std::string& name() const { return name_; }
  // Escape hatch for instructions this interface does not wrap; registers used
  // through it must come from the pools.
  asmjit::x86::Assembler& as() { return as_; }

  // --- Register plan --------------------------------------------------------
  // Argument i's register (ABI order), held by the function until released.
  Gp arg(int i) const;
  Vec acquire_vec();
  Gp acquire_gp();
  Mask acquire_mask();  // AVX2: takes a vector register
  void release(const Vec& v);
  void release(const Gp& g);
  void release(const Mask& m);
  int free_vecs() const;
  int free_gps() const;
  // Most vector registers held at once so far (vector masks on AVX2 included).
  int peak_vecs() const { return peak_vecs_; }
  // A stack slot valid for the whole function: [rsp + offset] after the prolog.
  Mem stack_slot(uint32_t bytes, uint32_t align);

  // --- Constants --------------------------------------------------------------
  // Memory operands of a constant splat across the lanes, for the last source
  // of an arithmetic instruction (an {1toN} broadcast on AVX-512, a full
  // vector on AVX2). Equal constants share one pool entry.
  Mem f32c(float v);
  Mem u32c(uint32_t bits);
  Mem i32c(int32_t v) { return u32c(static_cast<uint32_t>(v)); }
  Mem f64c(double v);
  Mem u64c(uint64_t bits) { return const_mem(bits, 8); }
  // A full-width vector constant of per-lane values (lanes() entries).
  Mem vec_u32(const uint32_t* lanes);
  // Raw read-only data (tables for gathers), `align` bytes aligned.
  Mem data(const void* bytes, size_t size, size_t align);
  // dst = v in every lane.
  void set_f32(const Vec& dst, float v);

  // --- Control flow -------------------------------------------------------------
  Label new_label() { return as_.newLabel(); }
  void bind(const Label& l);
  // Returns from the function (jumps to the epilog); the end of the body
  // returns without it.
  void ret();
  // Branches when some (or no) lane of `m` is set.
  void jump_if_any(const Mask& m, const Label& target);
  void jump_if_none(const Mask& m, const Label& target);

  // --- Memory -------------------------------------------------------------------------
  // dst = lanes() elements of dtype `dt` (Float32, Float16, BFloat16) at src,
  // converted to float32 exactly as kiln's Half/BFloat16 do (Note [fp16 and
  // bf16 conversions]). With `tail`, only the lanes it names are read; the
  // others are zero, and no byte past them is touched.
  void load(const Vec& dst, const Mem& src, DType dt, const TailMask* tail = nullptr);
  // Stores lanes() float32 lanes of src as `dt` (round to nearest even); src is
  // unchanged. With `tail`, only its lanes are written.
  void store(const Mem& dst, const Vec& src, DType dt, const TailMask* tail = nullptr);
  // dst = one element at src, converted, in every lane.
  void load_broadcast(const Vec& dst, const Mem& src, DType dt);
  // dst = lanes() elements of dtype `dt` at base, base + s, base + 2s, ...
  // where s is the int64 byte step at `stride` (|s| * (lanes() - 1) < 2^31),
  // converted as load() does (Note [Strided operands] in pointwise_cpu.h).
  // With `tail`, only its lanes are read; the others are zero. May move base.
  void load_strided(const Vec& dst, const Gp& base, const Mem& stride, DType dt,
                    const TailMask* tail = nullptr);
  // Stores lanes() float32 lanes of src as `dt` at base, base + s, base + 2s,
  // ... (s as in load_strided), converted as store() does: float32 with a
  // scatter on AVX-512, otherwise one store per lane (AVX2 has no scatter; a
  // dword scatter of 16-bit elements would write their neighbours). With
  // `tail`, only its lanes are written. src is unchanged; may move base.
  void store_strided(const Gp& base, const Mem& stride, const Vec& src, DType dt,
                     const TailMask* tail = nullptr);
  // Builds the mask of lanes [0, count); release with release_tail().
  TailMask make_tail_mask(const Gp& count);
  void release_tail(const TailMask& t) { release(t.mask); }

  // --- Lane operations (float32 unless named otherwise) ---------------------------
  // `b` may be a register or a memory operand (constants from f32c()).
  void mov(const Vec& dst, const Vec& src);
  void zero(const Vec& dst);
  void add(const Vec& d, const Vec& a, const Operand& b);
  void sub(const Vec& d, const Vec& a, const Operand& b);
  void mul(const Vec& d, const Vec& a, const Operand& b);
  void div(const Vec& d, const Vec& a, const Operand& b);
  // x86 min/max: when either is NaN, the result is b.
  void min(const Vec& d, const Vec& a, const Operand& b);
  void max(const Vec& d, const Vec& a, const Operand& b);
  void sqrt(const Vec& d, const Operand& a);
  // d = a*b + c, d = a*b - c, d = -(a*b) + c with one rounding. At most one of
  // b, c is a memory operand; any of a, b, c may alias d.
  void fmadd(const Vec& d, const Vec& a, const Operand& b, const Operand& c);
  void fmsub(const Vec& d, const Vec& a, const Operand& b, const Operand& c);
  void fnmadd(const Vec& d, const Vec& a, const Operand& b, const Operand& c);
  // Bitwise: d = a & b, a | b, a ^ b, ~a & b.
  void and_(const Vec& d, const Vec& a, const Operand& b);
  void or_(const Vec& d, const Vec& a, const Operand& b);
  void xor_(const Vec& d, const Vec& a, const Operand& b);
  void andn(const Vec& d, const Vec& a, const Operand& b);
  void round(const Vec& d, const Vec& a, Round mode);
  // int32 lanes.
  void add_i32(const Vec& d, const Vec& a, const Operand& b);
  void sub_i32(const Vec& d, const Vec& a, const Operand& b);
  void shl_i32(const Vec& d, const Vec& a, int bits);
  void shr_u32(const Vec& d, const Vec& a, int bits);
  void shr_i32(const Vec& d, const Vec& a, int bits);
  void cvt_f32_i32(const Vec& d, const Vec& a);   // float -> int32, nearest even
  void cvtt_f32_i32(const Vec& d, const Vec& a);  // float -> int32, toward zero
  void cvt_i32_f32(const Vec& d, const Vec& a);
  void cmp_i32_gt(const Mask& m, const Vec& a, const Operand& b);
  void cmp_i32_eq(const Mask& m, const Vec& a, const Operand& b);

  // --- Masks ------------------------------------------------------------------------
  void cmp(const Mask& m, const Vec& a, const Operand& b, Cmp pred);
  // d = m ? b : a, lane by lane. `b` may be a constant from f32c().
  void blend(const Vec& d, const Vec& a, const Operand& b, const Mask& m);
  void mask_and(const Mask& d, const Mask& a, const Mask& b);
  void mask_or(const Mask& d, const Mask& a, const Mask& b);
  void mask_andn(const Mask& d, const Mask& a, const Mask& b);  // ~a & b
  // Lanes of `x` in a class of `table` get the class's value in d, others keep
  // d (Note [Fixups]). d must not alias x.
  void fixup(const Vec& d, const Vec& x, const FixupTable& table);

  // --- Finishing --------------------------------------------------------------------
  // Emits epilog, prolog and constants; idempotent. JitRuntime::add calls it.
  void finish();
  bool finished() const { return finished_; }
  asmjit::CodeHolder& code() { return code_; }
  // The assembly listing (empty unless output_code logging or keep_listing).
  const std::string& listing() const { return listing_; }
  // Bytes of code and data emitted (valid after finish()).
  size_t code_size() const;

 private:
  // idx = lane * stride in every lane: the byte offsets of a strided access
  // (`stride` a 32-bit memory operand holding the byte stride).
  void lane_offsets(const Vec& idx, const Mem& stride);
  struct ConstKey;
  Mem const_mem(uint64_t bits, int size);
  Label const_label(const void* data, size_t size, size_t align);
  Label new_const(const void* data, size_t size, size_t align);
  void check_pool(bool ok, const char* what) const;
  // dst: memory, or a register taking the packed 16-bit lanes (xmm on AVX2,
  // ymm on AVX-512; tail must then be null).
  void store_f16(const Operand& dst, const Vec& src, const TailMask* tail);
  void store_bf16(const Operand& dst, const Vec& src, const TailMask* tail);
  void f16_to_f32(const Vec& dst, const Operand& src, const TailMask* tail);
  void avx2_tail_copy16(const Mem& dst, const Mem& src, const Gp& count);
  Mem avx2_tail_slot();
  void emit3(asmjit::InstId id, const Operand& d, const Operand& a, const Operand& b);
  void emit_fma(asmjit::InstId f132, asmjit::InstId f213, asmjit::InstId f231, const Vec& d,
                const Vec& a, const Operand& b, const Operand& c);
  void note_vec_use();
  void check_asmjit() const;

  Isa isa_;
  std::string name_;
  int num_args_;
  bool finished_ = false;

  asmjit::CodeHolder code_;
  std::unique_ptr<asmjit::StringLogger> logger_;
  std::unique_ptr<asmjit::ErrorHandler> errors_;
  asmjit::x86::Assembler as_;
  asmjit::FuncDetail func_;
  std::vector<Gp> args_;

  Label body_, prolog_, epilog_;
  uint32_t free_vec_mask_ = 0;  // bit i: register i is free
  uint32_t free_gp_mask_ = 0;
  uint32_t free_k_mask_ = 0;
  uint32_t used_vec_mask_ = 0;  // ever acquired: dirty for the frame
  uint32_t used_gp_mask_ = 0;
  int peak_vecs_ = 0;
  uint32_t stack_size_ = 0;
  uint32_t stack_align_ = 0;
  Mem tail_slot_;
  bool has_tail_slot_ = false;

  struct PoolEntry {
    std::vector<uint8_t> bytes;
    size_t align;
    Label label;
  };
  std::vector<PoolEntry> pool_;
  struct SplatMap {
    struct Slot {
      uint64_t bits = 0;
      int size = 0;  // 0: empty
      Label label;
    };
    std::vector<Slot> slots;
    size_t used = 0;
    Label* find_or_insert(uint64_t bits, int size, bool* inserted);
  };
  SplatMap splats_;
  std::string listing_;
};

// dst and scratch registers for one emit call: everything acquired through a
// Scratch is released when it goes out of scope.
class Scratch {
 public:
  explicit Scratch(Emitter& e) : e_(e) {}
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Vec vec();
  Mask mask();
  Gp gp();

 private:
  static constexpr int kMax = 16;
  Emitter& e_;
  Vec vecs_[kMax];
  Mask masks_[kMax];
  Gp gps_[kMax];
  int num_vecs_ = 0, num_masks_ = 0, num_gps_ = 0;
};

}  // namespace kiln::jit::cpu
