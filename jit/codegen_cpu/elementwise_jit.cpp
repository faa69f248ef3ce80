#include "jit/codegen_cpu/elementwise_jit.h"

#include "jit/codegen_cpu/vector_loop.h"
#include "kiln/error.h"

namespace kiln::jit::cpu {

namespace x86 = asmjit::x86;

namespace {

bool is_vec_dtype(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16;
}

// Loads, computes and stores `count` vectors at once (count = unroll, or 1 for
// the remainder loop and the masked tail).
void emit_step(Emitter& e, const ElementwiseSpec& spec, int arity, const Gp* in, const Gp& out,
               int count, const TailMask* tail) {
  const int lanes = e.lanes();
  const int in_size = static_cast<int>(itemsize(spec.in));
  const int out_size = static_cast<int>(itemsize(spec.out));
  Scratch s(e);
  Vec a[4], b[4];
  for (int u = 0; u < count; ++u) {
    a[u] = s.vec();
    e.load(a[u], x86::ptr(in[0], u * lanes * in_size), spec.in, tail);
    if (arity == 2) {
      b[u] = s.vec();
      e.load(b[u], x86::ptr(in[1], u * lanes * in_size), spec.in, tail);
    }
  }
  for (int u = 0; u < count; ++u) {
    emit_math(e, spec.op, a[u], a[u], arity == 2 ? &b[u] : nullptr, spec.params);
  }
  for (int u = 0; u < count; ++u) {
    e.store(x86::ptr(out, u * lanes * out_size), a[u], spec.out, tail);
  }
}

}  // namespace

ElementwiseKernel::ElementwiseKernel(JitRuntime& rt, Isa isa, const ElementwiseSpec& spec,
                                     EmitterOptions options)
    : spec_(spec), isa_(isa) {
  KILN_CHECK(
      is_vec_dtype(spec.in) && is_vec_dtype(spec.out),
      "[codegen_cpu] elementwise kernel: expected float32, float16 or bfloat16 operands, got ",
      spec.in, " -> ", spec.out);
  KILN_CHECK(spec.unroll >= 1 && spec.unroll <= 4,
             "[codegen_cpu] elementwise kernel: expected unroll in 1..4, got ", spec.unroll);
  const int arity = math_arity(spec.op);
  std::string name = std::string("elementwise_") + math_name(spec.op) + "_" + dtype_name(spec.in) +
                     "_" + dtype_name(spec.out);
  Emitter e(isa, name, arity + 2, options);
  Gp in[2] = {e.arg(0), arity == 2 ? e.arg(1) : e.arg(0)};
  Gp out = e.arg(arity), n = e.arg(arity + 1);
  auto& as = e.as();
  const int in_size = static_cast<int>(itemsize(spec.in));
  const int out_size = static_cast<int>(itemsize(spec.out));
  auto advance = [&](int elems) {
    for (int i = 0; i < arity; ++i) as.add(in[i], elems * in_size);
    as.add(out, elems * out_size);
    as.sub(n, elems);
  };

  // Note [Vector loops]; the end of the body falls into the epilog.
  emit_vector_loop(
      e, n, spec.unroll, /*masked_tail=*/true,
      [&](int vectors, const TailMask* tail) { emit_step(e, spec, arity, in, out, vectors, tail); },
      advance);

  code_ = JitCode(rt, e);
  listing_ = e.listing();
  code_size_ = e.code_size();
  peak_vecs_ = e.peak_vecs();
}

void ElementwiseKernel::operator()(const void* in, void* out, int64_t n) const {
  KILN_CHECK(math_arity(spec_.op) == 1, "[codegen_cpu] ", math_name(spec_.op),
             " kernel: expected 2 inputs, got 1");
  code_.as<UnaryFn>()(in, out, n);
}

void ElementwiseKernel::operator()(const void* a, const void* b, void* out, int64_t n) const {
  KILN_CHECK(math_arity(spec_.op) == 2, "[codegen_cpu] ", math_name(spec_.op),
             " kernel: expected 1 input, got 2");
  code_.as<BinaryFn>()(a, b, out, n);
}

}  // namespace kiln::jit::cpu
