#pragma once

// Note [CPU fused kernels]
// A fused pointwise group (Note [Kernel IR]) becomes one function
//   void f(const CpuRun* run)
// that applies the group's body to `run->n` elements: each operand (outputs
// first, then inputs) is Dense (consecutive elements from its pointer),
// Broadcast (one element, read in every lane; inputs only) or Strided
// (elements `run->strides[k]` bytes apart, read or written by index
// arithmetic: Note [Strided operands]). The launcher (launch_cpu.h) orders and merges dims so
// the innermost one is of that form, and calls the function once per run,
// runs spread over TBB workers. Values live in float32
// lanes (bool as 0/1); memory is float32, float16 or bfloat16. Registers are
// allocated by last use over the straight-line body; a body that does not fit
// the register file is refused (the group's nodes then run one by one).

#include <cstdint>
#include <string>
#include <vector>

#include "jit/codegen_cpu/emitter.h"
#include "jit/codegen_cpu/jit_runtime.h"
#include "jit/ir/kernel_ir.h"

namespace kiln::jit::cpu {

constexpr int kMaxRunOperands = 64;
constexpr int kMaxRunParams = kMaxParams;

struct CpuRun {
  int64_t n;
  char* ptrs[kMaxRunOperands];
  // Byte step between consecutive elements of a Strided operand (read only
  // for those); a runtime value, so one kernel serves every stride.
  int64_t strides[kMaxRunOperands];
  // The kernel's Params (Note [Numbers as kernel arguments]), as float32
  // (bool as 0 or 1), each in all 8 lanes of a 32-byte row: AVX2 code reads
  // the row as a vector operand, AVX-512 code broadcasts lane 0, as each reads
  // a Const from its constant pool.
  float params[kMaxRunParams][8];
};

enum class RunLayout : uint8_t { Dense, Broadcast, Strided };

// Note [Strided operands]
// An input whose innermost dim steps by s != 1 elements (a transpose, a slice
// with a step, a permuted tensor) is read lane by lane at ptr + (i + lane) * s:
// float32 with a gather (vgatherdps, int32 byte offsets lane * s, masked for
// the tail, so no lane past the run is touched); float16/bfloat16 with one
// 16-bit insert per lane (a dword gather at the last 2-byte element would read
// past the tensor). Offsets are int32: the launcher keeps a group unfused when
// s * (lanes - 1) bytes do not fit (kMaxStridedBytes). An output strided
// inside (the launcher orders dims by the first output's strides, so that one
// is dense unless its own smallest stride is not 1: `x[:, ::2].mul_(s)`) is
// written the same way: float32 with a scatter on AVX-512 (vscatterdps, masked
// in the tail), 16-bit types and AVX2 one store per lane. Within a vector,
// lanes are loaded before any is stored, so an output may share its view with
// an input; an output overlapping another operand through a different view
// would depend on the order of lanes and vectors, and the launcher refuses it
// (Note [Output overlap] in launch_cpu.cpp).
constexpr int64_t kMaxStridedBytes = int64_t{1} << 26;  // |s| in bytes, 16 lanes fit int32

class CpuPointwiseKernel {
 public:
  // Generates and loads the kernel; throws kiln::Error when the body uses a
  // dtype or primitive this generator lacks, or does not fit the registers.
  CpuPointwiseKernel(JitRuntime& rt, Isa isa, const PointwiseKernel& kernel,
                     const std::vector<RunLayout>& layouts);
  void run(const CpuRun& r) const { code_.as<void (*)(const CpuRun*)>()(&r); }
  const std::string& listing() const { return listing_; }
  // Machine code bytes of the body per element: the launcher's estimate of
  // the work an element costs (Note [Task grain] in launch_cpu.cpp).
  double code_bytes_per_element() const { return code_bytes_per_element_; }

 private:
  JitCode code_;
  std::string listing_;
  double code_bytes_per_element_ = 0;
};

// True when the generator handles every dtype and primitive of `kernel`.
bool cpu_supports(const PointwiseKernel& kernel, std::string* why);

// Writes `kernel`'s Param values into `run` (Note [Numbers as kernel arguments]).
void set_params(const PointwiseKernel& kernel, CpuRun& run);

}  // namespace kiln::jit::cpu
