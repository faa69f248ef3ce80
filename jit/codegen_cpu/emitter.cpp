#include "jit/codegen_cpu/emitter.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "kiln/error.h"
#include "kiln/logging.h"
#include "runtime/core/cpu_isa.h"

namespace kiln::jit::cpu {

namespace x86 = asmjit::x86;
using asmjit::InstId;
namespace Inst = asmjit::x86::Inst;

// --- ISA ----------------------------------------------------------------------------

const char* isa_name(Isa isa) {
  return isa == Isa::kAvx512 ? "avx512" : "avx2";
}

// The features each ISA needs and KILN_CPU_ISA are runtime/'s (Note [CPU ISA choice]).
bool isa_supported(Isa isa) {
  return cpu_isa_supported(isa == Isa::kAvx512 ? CpuIsa::kAvx512 : CpuIsa::kAvx2);
}

Isa host_isa() {
  KILN_CHECK(isa_supported(Isa::kAvx2),
             "[codegen_cpu] expected a CPU with AVX2, FMA and F16C for generated kernels, got one "
             "without (kiln has no scalar code generator; use eager mode)");
  return current_cpu_isa() == CpuIsa::kAvx512 ? Isa::kAvx512 : Isa::kAvx2;
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

Label Emitter::new_const(const void* data, size_t size, size_t align) {
  KILN_INTERNAL_ASSERT(!finished_, "constant after finish");
  PoolEntry e;
  e.bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + size);
  e.align = align;
  e.label = as_.newLabel();
  pool_.push_back(std::move(e));
  return pool_.back().label;
}

Label Emitter::const_label(const void* data, size_t size, size_t align) {
  for (const PoolEntry& e : pool_) {
    if (e.bytes.size() == size && e.align >= align &&
        std::memcmp(e.bytes.data(), data, size) == 0) {
      return e.label;
    }
  }
  return new_const(data, size, align);
}

// Open addressing over (bits, size): a long body asks for thousands of splats.
Label* Emitter::SplatMap::find_or_insert(uint64_t bits, int size, bool* inserted) {
  if ((used + 1) * 2 > slots.size()) {
    std::vector<Slot> old = std::move(slots);
    slots.assign(std::max<size_t>(64, old.size() * 2), Slot{});
    used = 0;
    for (const Slot& o : old) {
      if (o.size == 0) continue;
      bool ins = false;
      *find_or_insert(o.bits, o.size, &ins) = o.label;
    }
  }
  size_t mask = slots.size() - 1;
  size_t h = static_cast<size_t>((bits ^ (uint64_t(size) << 60)) * 0x9e3779b97f4a7c15ull >> 32);
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    Slot& sl = slots[i];
    if (sl.size == 0) {
      sl.bits = bits;
      sl.size = size;
      ++used;
      *inserted = true;
      return &sl.label;
    }
    if (sl.bits == bits && sl.size == size) {
      *inserted = false;
      return &sl.label;
    }
  }
}

// A constant of `size` bytes splat across the vector: on AVX-512 stored once and
// read with an {1toN} broadcast; on AVX2 (no embedded broadcast) stored as a
// full 32-byte vector.
Mem Emitter::const_mem(uint64_t bits, int size) {
  bool inserted = false;
  Label* l = splats_.find_or_insert(bits, size, &inserted);
  if (inserted) {
    if (avx512()) {
      *l = new_const(&bits, size, size);
    } else {
      uint8_t buf[32];
      for (int i = 0; i < 32; i += size) std::memcpy(buf + i, &bits, size);
      *l = new_const(buf, 32, 32);
    }
  }
  Mem m = x86::ptr(*l);
  if (avx512()) return size == 4 ? m._1to16() : m._1to8();
  return m;
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
    Mem m = f32c(v);
    m.resetBroadcast();
    m.setSize(4);
    as_.vbroadcastss(dst, m);
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
  while (num_gps_ > 0) e_.release(gps_[--num_gps_]);
  while (num_masks_ > 0) e_.release(masks_[--num_masks_]);
  while (num_vecs_ > 0) e_.release(vecs_[--num_vecs_]);
}

Vec Scratch::vec() {
  KILN_INTERNAL_ASSERT(num_vecs_ < kMax, "Scratch holds at most ", kMax, " vectors");
  return vecs_[num_vecs_++] = e_.acquire_vec();
}
Mask Scratch::mask() {
  KILN_INTERNAL_ASSERT(num_masks_ < kMax, "Scratch holds at most ", kMax, " masks");
  return masks_[num_masks_++] = e_.acquire_mask();
}
Gp Scratch::gp() {
  KILN_INTERNAL_ASSERT(num_gps_ < kMax, "Scratch holds at most ", kMax, " gp registers");
  return gps_[num_gps_++] = e_.acquire_gp();
}

}  // namespace kiln::jit::cpu
