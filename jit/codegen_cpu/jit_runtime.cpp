#include "jit/codegen_cpu/jit_runtime.h"

#include "jit/codegen_cpu/emitter.h"
#include "kiln/error.h"

namespace kiln::jit::cpu {

void* JitRuntime::add(Emitter& e) {
  e.finish();
  void* fn = nullptr;
  asmjit::Error err;
  {
    std::lock_guard<std::mutex> lock(mu_);
    err = rt_.add(&fn, &e.code());
  }
  KILN_CHECK(err == asmjit::kErrorOk, "[codegen_cpu] could not load kernel '", e.name(),
             "' into executable memory: ", asmjit::DebugUtils::errorAsString(err));
  return fn;
}

void JitRuntime::release(void* fn) {
  if (fn == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  rt_.release(fn);
}

JitCode::JitCode(JitRuntime& rt, Emitter& e) : rt_(&rt), fn_(rt.add(e)) {}

void JitCode::reset() {
  if (rt_ != nullptr) rt_->release(fn_);
  rt_ = nullptr;
  fn_ = nullptr;
}

}  // namespace kiln::jit::cpu
