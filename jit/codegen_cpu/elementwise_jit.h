#pragma once

// The simplest fused kernel: one vecmath op over n contiguous elements,
//   void f(const T* in, U* out, int64_t n)               (unary ops)
//   void f(const T* a, const T* b, U* out, int64_t n)    (pow)
// with an unrolled vector main loop and a masked tail. Tests sweep vecmath
// through it; the fuser uses it for lone pointwise ops.

#include <cstdint>
#include <string>

#include "jit/codegen_cpu/emitter.h"
#include "jit/codegen_cpu/jit_runtime.h"
#include "jit/codegen_cpu/vecmath.h"

namespace kiln::jit::cpu {

struct ElementwiseSpec {
  MathOp op = MathOp::kIdentity;
  MathParams params;
  DType in = DType::Float32;   // Float32, Float16 or BFloat16, for every input
  DType out = DType::Float32;  // likewise
  int unroll = 2;              // vectors per main-loop iteration, 1..4
};

class ElementwiseKernel {
 public:
  // Generates and loads the kernel; throws kiln::Error on an unsupported spec.
  ElementwiseKernel(JitRuntime& rt, Isa isa, const ElementwiseSpec& spec,
                    EmitterOptions options = {});

  // Applies the op to n elements (unary ops). n may be 0.
  void operator()(const void* in, void* out, int64_t n) const;
  // Binary ops.
  void operator()(const void* a, const void* b, void* out, int64_t n) const;

  const ElementwiseSpec& spec() const { return spec_; }
  Isa isa() const { return isa_; }
  // Assembly listing when EmitterOptions::keep_listing or output_code logging.
  const std::string& listing() const { return listing_; }
  size_t code_size() const { return code_size_; }
  // Most vector registers live at once in the generated body.
  int peak_vecs() const { return peak_vecs_; }

 private:
  using UnaryFn = void (*)(const void*, void*, int64_t);
  using BinaryFn = void (*)(const void*, const void*, void*, int64_t);

  ElementwiseSpec spec_;
  Isa isa_;
  JitCode code_;
  std::string listing_;
  size_t code_size_ = 0;
  int peak_vecs_ = 0;
};

}  // namespace kiln::jit::cpu
