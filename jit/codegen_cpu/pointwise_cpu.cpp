#include "jit/codegen_cpu/pointwise_cpu.h"

#include <algorithm>
#include <cstddef>
#include <optional>

#include "jit/codegen_cpu/vecmath.h"
#include "kiln/error.h"
#include "kiln/logging.h"

namespace kiln::jit::cpu {

namespace x86 = asmjit::x86;

namespace {

// Note [Prims without CPU code]: the Prims only the CUDA generator emits.
bool has_cpu_code(Prim p) {
  return !((p >= Prim::Asin && p <= Prim::BitNot) || (p >= Prim::Atan2 && p <= Prim::BitXor) ||
           p == Prim::Erfc);
}

bool memory_dtype_ok(DType t) {
  return t == kFloat32 || t == kFloat16 || t == kBFloat16;
}

int shift_of(DType t) {
  return itemsize(t) == 4 ? 2 : 1;
}

MathOp math_of(Prim p) {
  switch (p) {
    case Prim::Exp:
      return MathOp::kExp;
    case Prim::Log:
      return MathOp::kLog;
    case Prim::Sqrt:
      return MathOp::kSqrt;
    case Prim::Rsqrt:
      return MathOp::kRsqrt;
    case Prim::Reciprocal:
      return MathOp::kReciprocal;
    case Prim::Sin:
      return MathOp::kSin;
    case Prim::Cos:
      return MathOp::kCos;
    case Prim::Tanh:
      return MathOp::kTanh;
    case Prim::Sigmoid:
      return MathOp::kSigmoid;
    case Prim::Erf:
      return MathOp::kErf;
    case Prim::GeluErf:
      return MathOp::kGelu;
    case Prim::GeluTanh:
      return MathOp::kGeluTanh;
    case Prim::Silu:
      return MathOp::kSilu;
    case Prim::Expm1:
      return MathOp::kExpm1;
    case Prim::Log1p:
      return MathOp::kLog1p;
    default:
      return MathOp::kNumOps;
  }
}

// Note [Unrolled body]
// The vector math of one value is a long dependent chain (a sigmoid is ~20
// instructions in sequence, ~60 cycles of latency); one vector per loop trip
// leaves the core waiting on it, since the reorder window spans little more
// than one trip of a chain16 body. The main loop therefore evaluates the body
// for up to kMaxCopies consecutive vectors, interleaved op by op, so that the
// copies' chains overlap; a one-vector loop and the masked tail finish the run.
// chain16 (AVX-512, one core): 1 copy 138 ms, 2: 61, 4: 41, 6 and 8: 36 (the
// FMA pipe is then ~80% busy); AVX2 (16 registers) fits 8 copies of chain16
// too. The copy count is estimated from the values each copy keeps between
// ops and the largest need of one op (body_copies), capped so the unrolled
// code stays within ~kMaxUnrolledInstrs and long bodies do not spill out of
// the instruction cache; if the estimate still runs out of registers, the
// kernel is generated again with one copy fewer.
constexpr int kMaxCopies = 8;
constexpr int kMaxUnrolledInstrs = 3000;

// One body evaluation over a vector of lanes, registers freed at last use.
class BodyEmitter {
 public:
  BodyEmitter(Emitter& e, const PointwiseKernel& k, const std::vector<RunLayout>& layouts,
              const Gp& args, const Gp& index, const Gp& tmp)
      : e_(e), k_(k), layouts_(layouts), args_(args), index_(index), tmp_(tmp) {
    last_use_.assign(k.body.size(), -1);
    for (size_t n = 0; n < k.body.size(); ++n) {
      const Instr& in = k.body[n];
      for (int32_t o : {in.a, in.b, in.c}) {
        if (o >= 0) last_use_[o] = static_cast<int>(n);
      }
    }
    for (int32_t s : k.stores) last_use_[s] = static_cast<int>(k.body.size());
  }

  // Emits the body for `copies` consecutive vectors (Note [Unrolled body]);
  // copy c reads and writes lanes [c * lanes, (c + 1) * lanes) from the index.
  void emit(const TailMask* tail, int copies = 1) {
    KILN_INTERNAL_ASSERT(copies >= 1 && (tail == nullptr || copies == 1), "body copies");
    for (int c = 0; c < copies; ++c) {
      regs_[c].assign(k_.body.size(), Vec());
      has_reg_[c].assign(k_.body.size(), false);
    }
    // One copy may spill (Note [Spilled values]); more copies than fit are
    // tried again with fewer instead.
    spill_ = copies == 1;
    spilled_.assign(k_.body.size(), false);
    const int nout = static_cast<int>(k_.outputs.size());
    for (size_t n = 0; n < k_.body.size(); ++n) {
      const Instr& in = k_.body[n];
      if (folded(n) || last_use_[n] < 0) continue;  // constants fold into uses
      for (copy_ = 0; copy_ < copies; ++copy_) {
        if (spill_) make_room(in);
        Vec d = e_.acquire_vec();
        instr(in, d, nout, tail);
        regs_[copy_][n] = d;
        has_reg_[copy_][n] = true;
        for (int32_t o : {in.a, in.b, in.c}) {
          if (o >= 0 && last_use_[o] == static_cast<int>(n)) free(o);
        }
      }
    }
    for (int o = 0; o < nout; ++o) {
      for (copy_ = 0; copy_ < copies; ++copy_) {
        if (spill_ && spilled_[k_.stores[o]]) {
          evict_until(1 + kStoreScratch, -1, -1, -1);
          reload(k_.stores[o]);
        }
        pointer(o);
        Vec v = reg(k_.stores[o]);
        if (layouts_[o] == RunLayout::Strided) {
          strided_pointer(o);
          e_.store_strided(tmp_, stride(o), v, k_.outputs[o], tail);
        } else {
          e_.store(x86::ptr(tmp_, index_, shift_of(k_.outputs[o]), disp(k_.outputs[o])), v,
                   k_.outputs[o], tail);
        }
        if (!has_reg_[copy_][k_.stores[o]]) e_.release(v);
      }
    }
    for (copy_ = 0; copy_ < copies; ++copy_) {
      for (int32_t s : k_.stores) {
        if (has_reg_[copy_][s]) free(s);
      }
    }
    copy_ = 0;
  }

  // Vector registers one body copy holds: `resident` between two ops (values
  // still to be used), `peak` while an op runs (its operands and destination
  // besides), for choosing how many copies fit the register file.
  struct Live {
    int resident = 0, peak = 0;
  };
  Live live_values() const {
    Live l;
    int live = 0;
    std::vector<int> ends(k_.body.size() + 1, 0);
    for (size_t n = 0; n < k_.body.size(); ++n) {
      if (folded(static_cast<int32_t>(n)) || last_use_[n] < 0) continue;
      ++live;
      l.peak = std::max(l.peak, live);
      ++ends[last_use_[n]];
      live -= ends[n];
      l.resident = std::max(l.resident, live);
    }
    return l;
  }

 private:
  // Note [Spilled values]
  // A body whose values and an op's scratch need more vector registers than
  // the ISA has (AVX2's 16, with sin, cos and gelu in one group) would be
  // refused and run node by node. Instead, with one copy, the values an op
  // does not read are moved to stack slots until the op has the registers it
  // needs: first those used last (the furthest last use, an approximation of
  // the furthest next use), each to its own slot; a value is loaded back
  // when an op reads it or it is stored. A spill is a store and a load per
  // vector, far cheaper than running the group's nodes one by one.
  static constexpr int kStoreScratch = 3;  // an output conversion's registers

  // Registers op `in` takes besides its destination and its operands.
  int op_scratch(const Instr& in) const {
    int need = 2;                       // a mask and a vector at most, for the plain ops
    if (in.op == Prim::Load) need = 3;  // conversions and gathers
    if (in.op == Prim::Pow) {
      need = std::max(math_scratch_vecs(MathOp::kPow, e_.isa()),
                      math_scratch_vecs(MathOp::kPowScalar, e_.isa())) +
             1;
    } else if (math_of(in.op) != MathOp::kNumOps) {
      need = math_scratch_vecs(math_of(in.op), e_.isa());
    }
    for (int32_t o : {in.a, in.b, in.c}) {
      if (o >= 0 && folded(o)) ++need;  // reg() sets a constant
    }
    return need + 1;
  }
  // Frees registers for `in` (its destination and scratch), then loads its
  // spilled operands back.
  void make_room(const Instr& in) {
    int reloads = 0;
    for (int32_t o : {in.a, in.b, in.c}) {
      if (o >= 0 && spilled_[o]) ++reloads;
    }
    evict_until(1 + op_scratch(in) + reloads, in.a, in.b, in.c);
    for (int32_t o : {in.a, in.b, in.c}) {
      if (o >= 0 && spilled_[o]) reload(o);
    }
  }
  // Spills values other than a, b, c until `want` registers are free (or
  // nothing is left to spill: the op then fails as it would have).
  void evict_until(int want, int32_t a, int32_t b, int32_t c) {
    while (e_.free_vecs() < want) {
      int32_t victim = -1;
      for (size_t v = 0; v < k_.body.size(); ++v) {
        const auto iv = static_cast<int32_t>(v);
        if (!has_reg_[0][v] || iv == a || iv == b || iv == c) continue;
        if (victim < 0 || last_use_[v] > last_use_[victim]) victim = iv;
      }
      if (victim < 0) return;
      if (slots_.size() < k_.body.size()) slots_.resize(k_.body.size());
      if (!slots_[victim]) slots_[victim] = e_.stack_slot(e_.vec_bytes(), e_.vec_bytes());
      e_.as().vmovups(*slots_[victim], wide(regs_[0][victim]));
      e_.release(regs_[0][victim]);
      has_reg_[0][victim] = false;
      spilled_[victim] = true;
    }
  }
  void reload(int32_t v) {
    Vec r = e_.acquire_vec();
    e_.as().vmovups(wide(r), *slots_[v]);
    regs_[0][v] = r;
    has_reg_[0][v] = true;
    spilled_[v] = false;
  }
  Vec wide(const Vec& v) const { return e_.avx512() ? Vec(v.zmm()) : Vec(v.ymm()); }

  void free(int32_t v) {
    if (has_reg_[copy_][v]) {
      e_.release(regs_[copy_][v]);
      has_reg_[copy_][v] = false;
    }
  }
  // Byte offset of the current copy's lanes for an operand of dtype t.
  int32_t disp(DType t) const { return copy_ * e_.lanes() * static_cast<int32_t>(itemsize(t)); }
  // tmp = the operand's pointer.
  void pointer(int operand) { e_.as().mov(tmp_, x86::qword_ptr(args_, 8 + 8 * operand)); }
  // The operand's byte step (CpuRun::strides).
  Mem stride(int operand) const {
    return x86::qword_ptr(args_, static_cast<int32_t>(offsetof(CpuRun, strides)) + 8 * operand);
  }
  // tmp (the operand's pointer) += (index + this copy's first lane) * step.
  void strided_pointer(int operand) {
    Scratch s(e_);
    Gp g = s.gp();
    auto& as = e_.as();
    if (copy_ == 0) {
      as.mov(g, index_);
    } else {
      as.lea(g, x86::ptr(index_, copy_ * e_.lanes()));
    }
    as.imul(g, stride(operand));
    as.add(tmp_, g);
  }
  // A register holding value v (a fresh one for constants: release it after use).
  Vec reg(int32_t v) {
    if (has_reg_[copy_][v]) return regs_[copy_][v];
    KILN_INTERNAL_ASSERT(folded(v), "value without a register");
    Vec r = e_.acquire_vec();
    if (k_.body[v].op == Prim::Param) {
      e_.load_broadcast(r, param_mem(v), kFloat32);
    } else {
      e_.set_f32(r, static_cast<float>(k_.body[v].imm));
    }
    return r;
  }
  // A register or a constant-pool operand for the second source of an instruction.
  Operand src(int32_t v) {
    if (k_.body[v].op == Prim::Const) return e_.f32c(static_cast<float>(k_.body[v].imm));
    if (k_.body[v].op == Prim::Param) {
      // AVX-512 broadcasts lane 0 from memory; AVX2 reads the whole splat.
      return e_.avx512() ? param_mem(v)._1to16() : param_mem(v);
    }
    return regs_[copy_][v];
  }
  // A Const or a Param: no register of its own, read where it is used.
  bool folded(int32_t v) const {
    return k_.body[v].op == Prim::Const || k_.body[v].op == Prim::Param;
  }
  // Param v's splat in the CpuRun (Note [Numbers as kernel arguments]).
  Mem param_mem(int32_t v) const {
    const auto off = offsetof(CpuRun, params) + sizeof(CpuRun::params[0]) * k_.body[v].operand;
    return x86::ptr(args_, static_cast<int32_t>(off));
  }
  void done_with(int32_t v, const Vec& r) {
    if (!has_reg_[copy_][v]) e_.release(r);
  }

  void instr(const Instr& in, const Vec& d, int nout, const TailMask* tail) {
    switch (in.op) {
      case Prim::Load: {
        int operand = nout + in.operand;
        DType mem = k_.inputs[in.operand];
        pointer(operand);
        if (layouts_[operand] == RunLayout::Broadcast) {
          e_.load_broadcast(d, x86::ptr(tmp_), mem);
        } else if (layouts_[operand] == RunLayout::Strided) {
          strided_pointer(operand);
          e_.load_strided(d, tmp_, stride(operand), mem, tail);
        } else {
          e_.load(d, x86::ptr(tmp_, index_, shift_of(mem), disp(mem)), mem, tail);
        }
        return;
      }
      case Prim::Neg: {
        Vec a = reg(in.a);
        e_.xor_(d, a, e_.u32c(0x80000000u));
        done_with(in.a, a);
        return;
      }
      case Prim::Abs: {
        Vec a = reg(in.a);
        e_.and_(d, a, e_.u32c(0x7fffffffu));
        done_with(in.a, a);
        return;
      }
      case Prim::Relu: {
        // max(0, x) keeps a NaN x: x86 max returns its second source on NaN.
        Vec a = reg(in.a);
        e_.zero(d);
        e_.max(d, d, a);
        done_with(in.a, a);
        return;
      }
      case Prim::Floor:
      case Prim::Ceil:
      case Prim::Trunc:
      case Prim::Round: {
        Vec a = reg(in.a);
        Round m = in.op == Prim::Floor   ? Round::kFloor
                  : in.op == Prim::Ceil  ? Round::kCeil
                  : in.op == Prim::Trunc ? Round::kTrunc
                                         : Round::kNearest;
        e_.round(d, a, m);
        done_with(in.a, a);
        return;
      }
      case Prim::Cast: {
        // float32 <-> bool (0/1 lanes): to bool is `x != 0` (NaN is true).
        Vec a = reg(in.a);
        if (in.dtype == kBool && k_.body[in.a].dtype != kBool) {
          to_bool(d, a, Cmp::kNeq);
        } else {
          e_.mov(d, a);
        }
        done_with(in.a, a);
        return;
      }
      case Prim::RoundF16: {
        // Through the hardware's round-to-nearest-even conversion and back.
        Vec a = reg(in.a);
        auto& as = e_.as();
        if (e_.avx512()) {
          as.vcvtps2ph(d.ymm(), a.zmm(), 0);
          as.vcvtph2ps(d.zmm(), d.ymm());
        } else {
          as.vcvtps2ph(d.xmm(), a.ymm(), 0);
          as.vcvtph2ps(d.ymm(), d.xmm());
        }
        done_with(in.a, a);
        return;
      }
      case Prim::RoundBF16: {
        // bits + 0x7fff + lsb, low half cleared; NaN lanes keep the input.
        Vec a = reg(in.a);
        Scratch s(e_);
        Vec lsb = s.vec();
        e_.shr_u32(lsb, a, 16);
        e_.and_(lsb, lsb, e_.u32c(1));
        e_.add_i32(lsb, lsb, e_.u32c(0x7fff));
        e_.add_i32(d, a, lsb);
        e_.and_(d, d, e_.u32c(0xffff0000u));
        Mask nan = s.mask();
        e_.cmp(nan, a, a, Cmp::kUnord);
        e_.blend(d, d, a, nan);
        done_with(in.a, a);
        return;
      }
      case Prim::LogicalNot: {
        Vec a = reg(in.a);
        to_bool(d, a, Cmp::kEq);
        done_with(in.a, a);
        return;
      }
      case Prim::Add:
      case Prim::Sub:
      case Prim::Mul:
      case Prim::Div: {
        Vec a = reg(in.a);
        Operand b = src(in.b);
        if (in.op == Prim::Add) e_.add(d, a, b);
        if (in.op == Prim::Sub) e_.sub(d, a, b);
        if (in.op == Prim::Mul) e_.mul(d, a, b);
        if (in.op == Prim::Div) e_.div(d, a, b);
        done_with(in.a, a);
        return;
      }
      case Prim::LogicalAnd:
      case Prim::LogicalOr: {
        // On 0/1 lanes: and = min, or = max.
        Vec a = reg(in.a);
        if (in.op == Prim::LogicalAnd) e_.min(d, a, src(in.b));
        if (in.op == Prim::LogicalOr) e_.max(d, a, src(in.b));
        done_with(in.a, a);
        return;
      }
      case Prim::Max:
      case Prim::Min: {
        // As the eager kernels (a < b ? b : a, NaN from either side): x86
        // max/min return their second source on a tie (+0 and -0) and where
        // either is NaN, so `a` goes second (a tie gives a, as eagerly:
        // clamp(-0.0, min=0) stays -0) and a NaN `b` is blended back in.
        Vec a = reg(in.a);
        Vec b = reg(in.b);
        Scratch s(e_);
        Vec t = s.vec();
        if (in.op == Prim::Max) e_.max(t, b, a);
        if (in.op == Prim::Min) e_.min(t, b, a);
        Mask m = s.mask();
        e_.cmp(m, b, b, Cmp::kUnord);
        e_.blend(d, t, b, m);
        done_with(in.b, b);
        done_with(in.a, a);
        return;
      }
      case Prim::Eq:
      case Prim::Ne:
      case Prim::Lt:
      case Prim::Le:
      case Prim::Gt:
      case Prim::Ge: {
        Vec a = reg(in.a);
        Cmp p = in.op == Prim::Eq   ? Cmp::kEq
                : in.op == Prim::Ne ? Cmp::kNeq
                : in.op == Prim::Lt ? Cmp::kLt
                : in.op == Prim::Le ? Cmp::kLe
                : in.op == Prim::Gt ? Cmp::kGt
                                    : Cmp::kGe;
        Scratch s(e_);
        Mask m = s.mask();
        e_.cmp(m, a, src(in.b), p);
        e_.zero(d);
        e_.blend(d, d, e_.f32c(1.0f), m);
        done_with(in.a, a);
        return;
      }
      case Prim::Where: {
        Vec c = reg(in.a);
        Vec a = reg(in.b);
        Vec b = reg(in.c);
        Scratch s(e_);
        Mask m = s.mask();
        Vec zero = s.vec();
        e_.zero(zero);
        e_.cmp(m, c, zero, Cmp::kNeq);
        e_.blend(d, b, a, m);
        done_with(in.a, c);
        done_with(in.b, a);
        done_with(in.c, b);
        return;
      }
      case Prim::Pow: {
        Vec a = reg(in.a);
        const double y = k_.body[in.b].op == Prim::Const ? k_.body[in.b].imm : 0.5;
        // Exponents whose short forms agree with C pow at every special value;
        // others (0.5 included: C pow(-inf, 0.5) is +inf) take the general path.
        if (k_.body[in.b].op == Prim::Const &&
            (y == 0 || y == 1 || y == 2 || y == 3 || y == -1 || y == -2)) {
          emit_pow_scalar(e_, d, a, static_cast<float>(y));
        } else {
          Vec b = reg(in.b);
          emit_pow(e_, d, a, b);
          done_with(in.b, b);
        }
        done_with(in.a, a);
        return;
      }
      default: {
        MathOp op = math_of(in.op);
        KILN_INTERNAL_ASSERT(op != MathOp::kNumOps, "no CPU code for ", prim_name(in.op));
        Vec a = reg(in.a);
        emit_math(e_, op, d, a);
        done_with(in.a, a);
      }
    }
  }

  // d = (a pred 0) ? 1 : 0
  void to_bool(const Vec& d, const Vec& a, Cmp pred) {
    Scratch s(e_);
    Mask m = s.mask();
    Vec zero = s.vec();
    e_.zero(zero);
    e_.cmp(m, a, zero, pred);
    e_.zero(d);
    e_.blend(d, d, e_.f32c(1.0f), m);
  }

  Emitter& e_;
  const PointwiseKernel& k_;
  const std::vector<RunLayout>& layouts_;
  Gp args_, index_, tmp_;
  std::vector<int> last_use_;
  std::vector<Vec> regs_[kMaxCopies];
  std::vector<bool> has_reg_[kMaxCopies];
  bool spill_ = false;
  std::vector<bool> spilled_;              // copy 0's values now in their stack slot
  std::vector<std::optional<Mem>> slots_;  // per value, once it has spilled
  int copy_ = 0;
};

// How many body copies the unrolled loop evaluates (Note [Unrolled body]).
// While copy c runs an op, the other copies hold their resident values.
int body_copies(const PointwiseKernel& k, BodyEmitter::Live live, Isa isa) {
  int scratch = 0, instrs = 0;
  for (const Instr& in : k.body) {
    if (in.op == Prim::Const || in.op == Prim::Param) continue;
    if (in.op == Prim::Pow) {
      scratch = std::max({scratch, math_scratch_vecs(MathOp::kPow, isa),
                          math_scratch_vecs(MathOp::kPowScalar, isa)});
      instrs += 60;
      continue;
    }
    MathOp op = math_of(in.op);
    scratch = std::max(scratch, op == MathOp::kNumOps ? 2 : math_scratch_vecs(op, isa));
    instrs += op == MathOp::kNumOps ? 3 : 30;  // rough: vecmath ops are 15-45
  }
  const int regs = isa == Isa::kAvx512 ? 32 : 16;
  const int resident = std::max(live.resident, 1);
  // Besides: a constant operand's register; the stores' conversion scratch.
  int copies = (regs - live.peak - scratch - 1) / resident + 1;
  copies = std::min(copies, (regs - 3) / resident);
  copies = std::min({copies, kMaxCopies, kMaxUnrolledInstrs / std::max(instrs, 1)});
  return std::max(copies, 1);
}

// Emits the kernel's loops into e with `copies` body copies in the unrolled
// loop; a negative count is first set to body_copies' estimate. Sets
// `body_bytes` to the machine code of one vector's body (Note [Task grain]).
void generate(Emitter& e, const PointwiseKernel& kernel, const std::vector<RunLayout>& layouts,
              int& copies, size_t& body_bytes) {
  auto& as = e.as();
  Gp args = e.arg(0);
  Gp n = e.acquire_gp(), i = e.acquire_gp(), tmp = e.acquire_gp(), rem = e.acquire_gp();
  as.mov(n, x86::qword_ptr(args));
  as.xor_(i, i);
  BodyEmitter body(e, kernel, layouts, args, i, tmp);
  if (copies < 0) copies = body_copies(kernel, body.live_values(), e.isa());
  Label one = e.new_label(), tail = e.new_label(), done = e.new_label();
  if (copies > 1) {
    Label loop = e.new_label();
    e.bind(loop);
    as.mov(rem, n);
    as.sub(rem, i);
    as.cmp(rem, copies * e.lanes());
    as.jl(one);
    body.emit(nullptr, copies);
    as.add(i, copies * e.lanes());
    as.jmp(loop);
  }
  e.bind(one);
  as.mov(rem, n);
  as.sub(rem, i);
  as.cmp(rem, e.lanes());
  as.jl(tail);
  const size_t body_start = as.offset();
  body.emit(nullptr);
  body_bytes = as.offset() - body_start;
  as.add(i, e.lanes());
  as.jmp(one);
  e.bind(tail);
  as.test(rem, rem);
  as.jle(done);
  {
    TailMask t = e.make_tail_mask(rem);
    body.emit(&t);
    e.release_tail(t);
  }
  e.bind(done);
}

}  // namespace

bool cpu_supports(const PointwiseKernel& kernel, std::string* why) {
  for (DType t : kernel.inputs) {
    if (!memory_dtype_ok(t)) return *why = std::string("input dtype ") + dtype_name(t), false;
  }
  for (DType t : kernel.outputs) {
    if (!memory_dtype_ok(t)) return *why = std::string("output dtype ") + dtype_name(t), false;
  }
  if (kernel.inputs.size() + kernel.outputs.size() > static_cast<size_t>(kMaxRunOperands)) {
    return *why = "too many operands", false;
  }
  for (const Instr& in : kernel.body) {
    if (in.op == Prim::Param && in.operand >= kMaxRunParams) {
      return *why = "too many number arguments", false;
    }
  }
  for (const Instr& in : kernel.body) {
    if (!has_cpu_code(in.op)) return *why = std::string("primitive ") + prim_name(in.op), false;
    if (in.dtype != kFloat32 && in.dtype != kBool) {
      return *why = std::string("compute dtype ") + dtype_name(in.dtype), false;
    }
    if (in.op == Prim::Cast && in.dtype != kBool && in.a >= 0 && kernel.body[in.a].dtype != kBool &&
        kernel.body[in.a].dtype != kFloat32) {
      return *why = "a cast between non-float types", false;
    }
  }
  return true;
}

void set_params(const PointwiseKernel& kernel, CpuRun& run) {
  for (const Instr& in : kernel.body) {
    if (in.op == Prim::Param) std::fill_n(run.params[in.operand], 8, static_cast<float>(in.imm));
  }
}

CpuPointwiseKernel::CpuPointwiseKernel(JitRuntime& rt, Isa isa, const PointwiseKernel& kernel,
                                       const std::vector<RunLayout>& layouts) {
  std::string why;
  KILN_CHECK(cpu_supports(kernel, &why), "[codegen_cpu] fused kernel: unsupported ", why);
  KILN_CHECK(layouts.size() == kernel.inputs.size() + kernel.outputs.size(),
             "[codegen_cpu] fused kernel: expected one layout per operand");
  for (size_t o = 0; o < kernel.outputs.size(); ++o) {
    KILN_CHECK(layouts[o] != RunLayout::Broadcast,
               "[codegen_cpu] fused kernel: expected dense or strided outputs, output ", o,
               " broadcasts");
  }
  char name[40];
  std::snprintf(name, sizeof name, "fused_%016llx", static_cast<unsigned long long>(kernel.hash()));
  // The copy count is an estimate; should the unrolled body still run out of
  // registers, fewer copies are tried (one copy fits whenever the body does).
  int copies = -1;
  size_t body_bytes = 0;
  for (;;) {
    Emitter e(isa, name, 1);
    try {
      generate(e, kernel, layouts, copies, body_bytes);
    } catch (const Error&) {
      if (copies <= 1) throw;
      --copies;
      continue;
    }
    code_ = JitCode(rt, e);
    listing_ = e.listing();
    code_bytes_per_element_ = static_cast<double>(body_bytes) / isa_lanes(isa);
    break;
  }
  KILN_LOG(OutputCode, "fused CPU kernel ", name, " (", isa_name(isa), ", ", copies,
           " vectors per unrolled trip, ", code_bytes_per_element_, " code bytes per element):\n",
           kernel.str(), listing_);
}

}  // namespace kiln::jit::cpu
