#pragma once

// Note [Flush profile]
// KILN_FLUSH_PROFILE=1 times each phase of a flush and each step kind on the
// calling thread (steady_clock, ns) and prints the totals per flush at exit:
// where a lazy call's host time goes, next to the steps it runs. Extern steps
// are broken down by op. Unset, "" and "0" are off; off costs one branch per
// phase.

#include <chrono>
#include <cstdint>

namespace kiln {
class OperatorEntry;
}

namespace kiln::jit {

enum class Phase {
  kEpilogue,
  kDead,
  kCse,
  kFuse,
  kMarkers,
  kPlan,
  kExtern,
  kFused,
  kReduce,
  kCount,
};

bool flush_profile_on();
// Counts one flush of `nodes` nodes.
void profile_flush(size_t nodes);
void profile_phase(Phase p, int64_t ns);
void profile_extern(const OperatorEntry& op, int64_t ns);

// Times its scope as phase `p` when profiling is on.
class PhaseTimer {
 public:
  explicit PhaseTimer(Phase p) : p_(p), on_(flush_profile_on()) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~PhaseTimer() {
    if (on_) profile_phase(p_, elapsed_ns());
  }
  int64_t elapsed_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                t0_)
        .count();
  }
  bool on() const { return on_; }

 private:
  Phase p_;
  bool on_;
  std::chrono::steady_clock::time_point t0_{};
};

// The value of `f()`, its time counted as phase `p`.
template <class F>
auto timed(Phase p, F&& f) {
  PhaseTimer t(p);
  return f();
}

}  // namespace kiln::jit
