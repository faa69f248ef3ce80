#pragma once

// Note [Compiled call profile]
// KILN_COMPILE_PROFILE=1 times the host side of compiled calls by phase
// (steady_clock, on the calling thread) and prints the means at exit over the
// steady-state hits (an instance's first two runs, its warm-up and capture,
// are left out): where a hit's microseconds go besides the kernels. Off,
// each phase costs a branch. While a kiln::profiler::Profile records, each
// phase is also a profiler event ("jit::compile: guards", ...) on the calling
// thread.

#include <chrono>
#include <cstdint>

#include "runtime/profiler/recorder.h"

namespace kiln::jit {

enum class CallPhase {
  kEnter,    // argument checks, the compile boundary's flush check
  kGuards,   // finding the entry whose guards hold
  kAcquire,  // the specialization and an idle instance
  kBind,     // arguments bound, graph parameters and fresh results set
  kLaunch,   // the plan's steps, or the graph launch
  kResults,  // result tensors
  kRelease,  // what the run took given back, the stream event
  kTrace,    // a miss: tracing the function
  kCompile,  // a miss: planning the trace and building its first instance
  kCount,
};

bool call_profile_on();
void profile_call(CallPhase phase, int64_t ns);
// Ends the call's timing: its phases count when `count` (a steady-state hit:
// not a compile, warm-up or capture).
void profile_call_done(bool count);
// The phase's profiler event name: "jit::compile: guards".
const char* call_phase_event(CallPhase phase);

class CallTimer {
 public:
  explicit CallTimer(CallPhase p) : p_(p), on_(call_profile_on()) {
    if (on_) t0_ = std::chrono::steady_clock::now();
    if (profiler::detail::recording()) {
      event_ = profiler::detail::begin(profiler::EventKind::Compiled, call_phase_event(p));
    }
  }
  ~CallTimer() { stop(); }
  void stop() {
    if (event_.buffer) profiler::detail::end(event_);
    event_.buffer = nullptr;
    if (!on_) return;
    on_ = false;
    profile_call(p_, std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now() - t0_)
                         .count());
  }

 private:
  CallPhase p_;
  bool on_;
  std::chrono::steady_clock::time_point t0_{};
  profiler::detail::Handle event_;
};

}  // namespace kiln::jit
