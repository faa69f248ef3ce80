#pragma once

#include <string>
#include <vector>

namespace kiln::jit::cuda {

struct CompiledKernel {
  std::vector<char> image;  // a cubin (SASS) or, for an arch NVRTC lacks, PTX
  bool is_ptx = false;
  std::string log;  // NVRTC's log (warnings)
  double compile_ms = 0;
};

// Compiles one translation unit for compute capability `arch` (e.g. 90):
// SASS when NVRTC knows the arch, else PTX for the newest arch it knows.
// Throws kiln::Error with the log and the source's name on failure.
CompiledKernel nvrtc_compile(const std::string& source, const std::string& name, int arch);
// NVRTC's version as major * 1000 + minor * 10 (part of kernel cache keys).
int nvrtc_version();

}  // namespace kiln::jit::cuda
