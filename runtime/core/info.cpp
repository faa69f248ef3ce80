#include "kiln/info.h"

#include <sstream>

#include "kiln/cuda.h"
#include "kiln/ops.h"
#include "runtime/core/cpu_isa.h"
#include "runtime/core/hooks.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/profiler/recorder.h"

namespace kiln {

void sync() {
  profiler::detail::Scope event(profiler::EventKind::Range, "kiln::sync");
  if (SyncHook hook = sync_hook()) hook();
  if (cuda::is_available()) {
    for (int i = 0; i < cuda::device_count(); ++i) cuda::synchronize(Device::cuda(i));
  }
}

// Note [CPU ISA choice]: what the code generator and the GEMM kernels use.
const char* cpu_isa() {
  return cpu_isa_name(current_cpu_isa());
}

std::string build_info() {
  std::ostringstream os;
  os << "kiln " << KILN_VERSION << "\n";
  os << "compiler: " << __VERSION__ << "\n";
  os << "cpu isa: " << cpu_isa() << "\n";
  os << "cuda backend: " << (cuda::built() ? "built" : "not built (no CUDA toolkit at build time)")
     << "\n";
  os << "cuda available: " << (cuda::is_available() ? "yes" : "no") << "\n";
  for (int i = 0; i < cuda::device_count(); ++i) {
    os << "cuda:" << i << ": " << cuda::device_name(i) << "\n";
  }
  return os.str();
}

}  // namespace kiln
