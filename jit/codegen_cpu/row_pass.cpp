#include "jit/codegen_cpu/row_pass.h"

#include <cstddef>
#include <limits>
#include <memory>
#include <mutex>

#include "jit/codegen_cpu/vecmath.h"
#include "jit/codegen_cpu/vector_loop.h"
#include "kiln/error.h"
#include "kiln/logging.h"

namespace kiln::jit::cpu {

namespace x86 = asmjit::x86;

const char* pass_name(Pass p) {
  static const char* const names[] = {"sum",        "max",          "min",     "sqdev",
                                      "expsum",     "expsum_store", "affine",  "subsub",
                                      "acc_sum",    "acc_max",      "acc_min", "acc_sqdev",
                                      "acc_expsum", "expsubmul",    "subsubz"};
  return names[static_cast<int>(p)];
}

namespace {

float identity_of(Pass p) {
  if (p == Pass::kMax || p == Pass::kAccMax) return -std::numeric_limits<float>::infinity();
  if (p == Pass::kMin || p == Pass::kAccMin) return std::numeric_limits<float>::infinity();
  return 0.0f;
}

bool is_max(Pass p) {
  return p == Pass::kMax || p == Pass::kAccMax;
}
bool is_min(Pass p) {
  return p == Pass::kMin || p == Pass::kAccMin;
}

class PassEmitter {
 public:
  PassEmitter(Emitter& e, Pass p) : e_(e), p_(p) {}

  void emit() {
    auto& as = e_.as();
    Gp args = e_.arg(0);
    x_ = e_.acquire_gp();
    y_ = e_.acquire_gp();
    z_ = e_.acquire_gp();
    n_ = e_.acquire_gp();
    as.mov(x_, x86::qword_ptr(args, offsetof(PassArgs, x)));
    as.mov(y_, x86::qword_ptr(args, offsetof(PassArgs, y)));
    as.mov(z_, x86::qword_ptr(args, offsetof(PassArgs, z)));
    as.mov(n_, x86::qword_ptr(args, offsetof(PassArgs, n)));
    if (p_ == Pass::kExpSubMul || p_ == Pass::kSubSubZ) {
      w_ = e_.acquire_gp();
      as.mov(w_, x86::qword_ptr(args, offsetof(PassArgs, w)));
    }
    c0_ = e_.acquire_vec();
    c1_ = e_.acquire_vec();
    e_.load_broadcast(c0_, x86::dword_ptr(args, offsetof(PassArgs, c0)), kFloat32);
    e_.load_broadcast(c1_, x86::dword_ptr(args, offsetof(PassArgs, c1)), kFloat32);
    const bool acc = is_accumulating(p_);
    wide_ = is_wide(p_);
    // Wide accumulators are pairs (low and high halves of the float lanes).
    const int unroll = acc ? (wide_ ? 2 : 4) : 1;
    if (acc) {
      lanes_ = e_.acquire_gp();
      as.mov(lanes_, x86::qword_ptr(args, offsetof(PassArgs, lanes)));
      for (int u = 0; u < unroll; ++u) {
        acc_[u] = e_.acquire_vec();
        if (wide_) {
          acc_hi_[u] = e_.acquire_vec();
          if (u == 0) {
            as.vmovupd(acc_[0], x86::ptr(lanes_));
            as.vmovupd(acc_hi_[0], x86::ptr(lanes_, e_.vec_bytes()));
          } else {
            e_.zero(acc_[u]);
            e_.zero(acc_hi_[u]);
          }
        } else if (u == 0) {
          e_.load(acc_[0], x86::ptr(lanes_), kFloat32);
        } else {
          e_.set_f32(acc_[u], identity_of(p_));
        }
      }
    }
    const int lanes = e_.lanes();
    // Note [Vector loops]; wide passes leave the tail to the caller.
    emit_vector_loop(
        e_, n_, unroll, /*masked_tail=*/!wide_,
        [&](int vectors, const TailMask* tail) {
          for (int u = 0; u < vectors; ++u) step(u, u * lanes, tail);
        },
        [&](int elems) { advance(elems); });
    if (acc && wide_) {
      for (int u = 1; u < unroll; ++u) {
        as.vaddpd(acc_[0], acc_[0], acc_[u]);
        as.vaddpd(acc_hi_[0], acc_hi_[0], acc_hi_[u]);
      }
      as.vmovupd(x86::ptr(lanes_), acc_[0]);
      as.vmovupd(x86::ptr(lanes_, e_.vec_bytes()), acc_hi_[0]);
    } else if (acc) {
      for (int u = 1; u < unroll; ++u) combine(acc_[0], acc_[u]);
      e_.store(x86::ptr(lanes_), acc_[0], kFloat32);
    }
  }

 private:
  void advance(int elems) {
    auto& as = e_.as();
    as.add(x_, elems * 4);
    as.add(
        y_,
        elems * (p_ == Pass::kAccSum || p_ == Pass::kAccSqDev || p_ == Pass::kAccExpSum ? 8 : 4));
    as.add(z_, elems * 4);
    if (w_.isValid()) as.add(w_, elems * 4);
    as.sub(n_, elems);
  }

  // lo, hi = the low and high halves of v's float lanes, as doubles.
  void widen(const Vec& lo, const Vec& hi, const Vec& v) {
    auto& as = e_.as();
    if (e_.avx512()) {
      as.vcvtps2pd(lo, v.ymm());
      as.vextractf32x8(hi.ymm(), v, 1);
      as.vcvtps2pd(hi, hi.ymm());
    } else {
      as.vcvtps2pd(lo, v.xmm());
      as.vextractf128(hi.xmm(), v, 1);
      as.vcvtps2pd(hi, hi.xmm());
    }
  }

  // A deviation squared in float64, as the eager kernels square theirs: in
  // float32 a deviation past about 1.8e19 squares to inf (std of values
  // near 1e20 was inf where eager's is finite).
  void square_wide(const Vec& lo, const Vec& hi) {
    auto& as = e_.as();
    as.vmulpd(lo, lo, lo);
    as.vmulpd(hi, hi, hi);
  }

  // acc = acc op v, NaN sticking for max/min.
  void combine(const Vec& acc, const Vec& v) {
    if (!is_max(p_) && !is_min(p_)) {
      e_.add(acc, acc, v);
      return;
    }
    Scratch s(e_);
    Vec t = s.vec();
    // x86 max/min return the second source when either is NaN: acc (sticky);
    // a NaN v is blended in.
    if (is_max(p_)) {
      e_.max(t, v, acc);
    } else {
      e_.min(t, v, acc);
    }
    Mask m = s.mask();
    e_.cmp(m, v, v, Cmp::kUnord);
    e_.blend(acc, t, v, m);
  }

  void step(int u, int offset, const TailMask* tail) {
    Scratch s(e_);
    Vec v = s.vec();
    const int off = offset * 4;
    e_.load(v, x86::ptr(x_, off), kFloat32, tail);
    switch (p_) {
      case Pass::kSum:
      case Pass::kMax:
      case Pass::kMin:
        break;
      case Pass::kSqDev:
        e_.sub(v, v, c0_);  // squared once widened, below
        break;
      case Pass::kExpSum:
      case Pass::kExpSumStore:
        e_.sub(v, v, c0_);
        emit_exp(e_, v, v);
        if (p_ == Pass::kExpSumStore) e_.store(x86::ptr(y_, off), v, kFloat32, tail);
        break;
      case Pass::kAffine:
        e_.mul(v, v, c0_);
        e_.add(v, v, c1_);
        e_.store(x86::ptr(y_, off), v, kFloat32, tail);
        return;
      case Pass::kSubSub:
        e_.sub(v, v, c0_);
        e_.sub(v, v, c1_);
        e_.store(x86::ptr(y_, off), v, kFloat32, tail);
        return;
      case Pass::kExpSubMul:
      case Pass::kSubSubZ: {
        Vec m = s.vec();
        e_.load(m, x86::ptr(z_, off), kFloat32, tail);
        e_.sub(v, v, m);
        e_.load(m, x86::ptr(w_, off), kFloat32, tail);
        if (p_ == Pass::kExpSubMul) {
          emit_exp(e_, v, v);
          e_.mul(v, v, m);
        } else {
          e_.sub(v, v, m);
        }
        e_.store(x86::ptr(y_, off), v, kFloat32, tail);
        return;
      }
      case Pass::kAccSum:
      case Pass::kAccSqDev:
      case Pass::kAccExpSum: {
        if (p_ == Pass::kAccSqDev || p_ == Pass::kAccExpSum) {
          Vec m = s.vec();
          e_.load(m, x86::ptr(z_, off), kFloat32, tail);
          e_.sub(v, v, m);
          if (p_ == Pass::kAccExpSum) emit_exp(e_, v, v);
        }
        Vec lo = s.vec(), hi = s.vec();
        widen(lo, hi, v);
        auto& as = e_.as();
        if (p_ == Pass::kAccSqDev) square_wide(lo, hi);
        // y is float64: twice the float offsets.
        as.vaddpd(lo, lo, x86::ptr(y_, 2 * off));
        as.vaddpd(hi, hi, x86::ptr(y_, 2 * off + e_.vec_bytes()));
        as.vmovupd(x86::ptr(y_, 2 * off), lo);
        as.vmovupd(x86::ptr(y_, 2 * off + e_.vec_bytes()), hi);
        return;
      }
      case Pass::kAccMax:
      case Pass::kAccMin: {
        Vec a = s.vec();
        e_.load(a, x86::ptr(y_, off), kFloat32, tail);
        if (p_ == Pass::kAccSqDev) {
          Vec m = s.vec();
          e_.load(m, x86::ptr(z_, off), kFloat32, tail);
          e_.sub(v, v, m);
          e_.mul(v, v, v);
        }
        combine(a, v);
        e_.store(x86::ptr(y_, off), a, kFloat32, tail);
        return;
      }
      default:
        KILN_INTERNAL_ASSERT(false, "unknown row pass");
    }
    if (wide_) {
      Vec lo = s.vec(), hi = s.vec();
      widen(lo, hi, v);
      if (p_ == Pass::kSqDev) square_wide(lo, hi);
      e_.as().vaddpd(acc_[u], acc_[u], lo);
      e_.as().vaddpd(acc_hi_[u], acc_hi_[u], hi);
      return;
    }
    if (tail) {
      // Lanes past the row's end hold the identity.
      Vec id = s.vec();
      e_.set_f32(id, identity_of(p_));
      e_.blend(v, id, v, tail->mask);
    }
    combine(acc_[u], v);
  }

  Emitter& e_;
  Pass p_;
  Gp x_, y_, z_, n_, lanes_, w_;
  Vec c0_, c1_;
  Vec acc_[4], acc_hi_[4];
  bool wide_ = false;
};

struct PassCache {
  std::mutex mu;
  JitRuntime runtime;
  std::unique_ptr<RowPassKernel> passes[2][static_cast<int>(Pass::kNumPasses)];
};

}  // namespace

RowPassKernel::RowPassKernel(JitRuntime& rt, Isa isa, Pass pass) {
  Emitter e(isa, std::string("row_") + pass_name(pass), 1);
  PassEmitter(e, pass).emit();
  code_ = JitCode(rt, e);
  listing_ = e.listing();
  KILN_LOG(OutputCode, "row pass ", pass_name(pass), " (", isa_name(isa), "):\n", listing_);
}

const RowPassKernel& row_pass(Pass pass, Isa isa) {
  static auto* cache = new PassCache();  // leaked: kernels may run during static teardown
  std::lock_guard<std::mutex> lock(cache->mu);
  auto& slot = cache->passes[static_cast<int>(isa)][static_cast<int>(pass)];
  if (!slot) slot = std::make_unique<RowPassKernel>(cache->runtime, isa, pass);
  return *slot;
}

}  // namespace kiln::jit::cpu
