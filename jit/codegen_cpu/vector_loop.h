#pragma once

// Note [Vector loops]
// The loops of the kernels that stream over n contiguous elements
// (elementwise_jit, row_pass), emitted once here:
//   while (n >= unroll * lanes) { body(unroll); advance(unroll * lanes); }
//   while (n >= lanes)          { body(1);      advance(lanes); }
//   if (n > 0)                  body(1, the mask of the n lanes left);
// The first loop is left out when unroll is 1, the masked tail when
// `masked_tail` is false (the caller finishes the row itself). `advance`
// moves the pointers and subtracts from n; the code after the loops follows
// at the end.

#include <functional>

#include "jit/codegen_cpu/emitter.h"

namespace kiln::jit::cpu {

// body(vectors, tail): `vectors` consecutive vectors, or with `tail` one
// partial vector.
void emit_vector_loop(Emitter& e, const Gp& n, int unroll, bool masked_tail,
                      const std::function<void(int vectors, const TailMask* tail)>& body,
                      const std::function<void(int elems)>& advance);

}  // namespace kiln::jit::cpu
