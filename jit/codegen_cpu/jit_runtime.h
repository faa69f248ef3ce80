#pragma once

// Executable memory for generated CPU kernels: a lock around asmjit's
// JitRuntime, and an owning handle per loaded function.

#include <asmjit/x86.h>

#include <mutex>
#include <utility>

namespace kiln::jit::cpu {

class Emitter;

class JitRuntime {
 public:
  JitRuntime() = default;
  JitRuntime(const JitRuntime&) = delete;
  JitRuntime& operator=(const JitRuntime&) = delete;

  // Finishes `e` (Emitter::finish) and copies its code into executable memory.
  // Returns the entry point; throws kiln::Error when asmjit cannot place it.
  // Thread-safe.
  void* add(Emitter& e);
  // Frees a function returned by add(). Thread-safe.
  void release(void* fn);

 private:
  std::mutex mu_;
  asmjit::JitRuntime rt_;
};

// One loaded function, freed with its handle.
class JitCode {
 public:
  JitCode() = default;
  JitCode(JitRuntime& rt, Emitter& e);
  ~JitCode() { reset(); }
  JitCode(JitCode&& o) noexcept
      : rt_(std::exchange(o.rt_, nullptr)), fn_(std::exchange(o.fn_, nullptr)) {}
  JitCode& operator=(JitCode&& o) noexcept {
    if (this != &o) {
      reset();
      rt_ = std::exchange(o.rt_, nullptr);
      fn_ = std::exchange(o.fn_, nullptr);
    }
    return *this;
  }

  template <class Fn>
  Fn as() const {
    return reinterpret_cast<Fn>(fn_);
  }
  void* entry() const { return fn_; }
  explicit operator bool() const { return fn_ != nullptr; }
  void reset();

 private:
  JitRuntime* rt_ = nullptr;
  void* fn_ = nullptr;
};

}  // namespace kiln::jit::cpu
