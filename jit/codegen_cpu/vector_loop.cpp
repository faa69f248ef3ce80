#include "jit/codegen_cpu/vector_loop.h"

namespace kiln::jit::cpu {

void emit_vector_loop(Emitter& e, const Gp& n, int unroll, bool masked_tail,
                      const std::function<void(int vectors, const TailMask* tail)>& body,
                      const std::function<void(int elems)>& advance) {
  auto& as = e.as();
  const int lanes = e.lanes();
  Label single = e.new_label(), tail = e.new_label(), done = e.new_label();
  if (unroll > 1) {
    Label main = e.new_label();
    as.cmp(n, unroll * lanes);
    as.jl(single);
    e.bind(main);
    body(unroll, nullptr);
    advance(unroll * lanes);
    as.cmp(n, unroll * lanes);
    as.jge(main);
  }
  e.bind(single);
  {
    Label loop = e.new_label();
    as.cmp(n, lanes);
    as.jl(tail);
    e.bind(loop);
    body(1, nullptr);
    advance(lanes);
    as.cmp(n, lanes);
    as.jge(loop);
  }
  e.bind(tail);
  if (masked_tail) {
    as.test(n, n);
    as.jle(done);
    TailMask t = e.make_tail_mask(n);
    body(1, &t);
    e.release_tail(t);
  }
  e.bind(done);
}

}  // namespace kiln::jit::cpu
