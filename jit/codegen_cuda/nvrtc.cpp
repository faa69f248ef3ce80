#include "jit/codegen_cuda/nvrtc.h"

#include <nvrtc.h>

#include <algorithm>
#include <chrono>

#include "kiln/error.h"

namespace kiln::jit::cuda {
namespace {

void check(nvrtcResult r, const char* call, const char* file, int line) {
  if (r == NVRTC_SUCCESS) return;
  KILN_FAIL("[nvrtc] ", call, " failed at ", file, ":", line, ": ", nvrtcGetErrorString(r));
}
#define KILN_NVRTC_CHECK(call) check((call), #call, __FILE__, __LINE__)

// Releases the program on every path.
struct Program {
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p) nvrtcDestroyProgram(&p);
  }
};

}  // namespace

int nvrtc_version() {
  int major = 0, minor = 0;
  KILN_NVRTC_CHECK(nvrtcVersion(&major, &minor));
  return major * 1000 + minor * 10;
}

CompiledKernel nvrtc_compile(const std::string& source, const std::string& name, int arch) {
  auto t0 = std::chrono::steady_clock::now();
  int n = 0;
  KILN_NVRTC_CHECK(nvrtcGetNumSupportedArchs(&n));
  std::vector<int> archs(n);
  KILN_NVRTC_CHECK(nvrtcGetSupportedArchs(archs.data()));
  bool known = std::find(archs.begin(), archs.end(), arch) != archs.end();
  int target = known ? arch : *std::max_element(archs.begin(), archs.end());
  std::string arch_opt =
      std::string("--gpu-architecture=") + (known ? "sm_" : "compute_") + std::to_string(target);
  const char* opts[] = {arch_opt.c_str(), "-default-device", "--std=c++17", "--fmad=true"};
  Program prog;
  KILN_NVRTC_CHECK(
      nvrtcCreateProgram(&prog.p, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr));
  nvrtcResult r = nvrtcCompileProgram(prog.p, 4, opts);
  CompiledKernel out;
  size_t log_size = 0;
  KILN_NVRTC_CHECK(nvrtcGetProgramLogSize(prog.p, &log_size));
  out.log.resize(log_size);
  KILN_NVRTC_CHECK(nvrtcGetProgramLog(prog.p, out.log.data()));
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
  KILN_CHECK(r == NVRTC_SUCCESS, "[nvrtc] compiling ", name, " for ", arch_opt,
             " failed (this is a kiln code generation bug): ", out.log);
  size_t size = 0;
  if (known) {
    KILN_NVRTC_CHECK(nvrtcGetCUBINSize(prog.p, &size));
    out.image.resize(size);
    KILN_NVRTC_CHECK(nvrtcGetCUBIN(prog.p, out.image.data()));
  } else {
    KILN_NVRTC_CHECK(nvrtcGetPTXSize(prog.p, &size));
    out.image.resize(size);
    KILN_NVRTC_CHECK(nvrtcGetPTX(prog.p, out.image.data()));
    out.is_ptx = true;
  }
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace kiln::jit::cuda
