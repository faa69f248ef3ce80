#include "jit/compile/call_profile.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/core/env.h"

namespace kiln::jit {
namespace {

constexpr int kPhases = static_cast<int>(CallPhase::kCount);
constexpr const char* kNames[kPhases] = {"enter",   "guards",  "acquire", "bind",   "launch",
                                         "results", "release", "trace",   "compile"};
constexpr const char* kEvents[kPhases] = {
    "jit::compile: enter",   "jit::compile: guards", "jit::compile: acquire",
    "jit::compile: bind",    "jit::compile: launch", "jit::compile: results",
    "jit::compile: release", "jit::compile: trace",  "jit::compile: compile"};

struct Totals {
  std::atomic<int64_t> ns[kPhases] = {};
  std::atomic<int64_t> calls{0};
  void report() const {
    if (calls == 0) return;
    const double n = static_cast<double>(calls.load());
    double all = 0;
    for (int p = 0; p < kPhases; ++p) all += static_cast<double>(ns[p].load());
    std::fprintf(stderr,
                 "[compile profile] %lld compiled calls (after each instance's first two), %.2f "
                 "us/call on the host\n",
                 static_cast<long long>(calls.load()), all / n / 1e3);
    for (int p = 0; p < kPhases; ++p) {
      std::fprintf(stderr, "[compile profile] %-8s %8.2f us/call\n", kNames[p],
                   static_cast<double>(ns[p].load()) / n / 1e3);
    }
  }
};

const bool g_on = env_flag("KILN_COMPILE_PROFILE", false);

// Never destroyed, reported from atexit (Note [Profile totals at exit] in
// jit/plan/flush_profile.cpp).
Totals& totals() {
  static Totals* t = [] {
    auto* fresh = new Totals;
    std::atexit([] { totals().report(); });
    return fresh;
  }();
  return *t;
}

}  // namespace

const char* call_phase_event(CallPhase phase) {
  return kEvents[static_cast<int>(phase)];
}

bool call_profile_on() {
  return g_on;
}

// The phases of the call under way on this thread, added to the totals when
// it counts.
thread_local int64_t t_pending[kPhases] = {};

void profile_call(CallPhase phase, int64_t ns) {
  t_pending[static_cast<int>(phase)] += ns;
}

void profile_call_done(bool count) {
  if (!g_on) return;
  for (int p = 0; p < kPhases; ++p) {
    if (count) totals().ns[p].fetch_add(t_pending[p], std::memory_order_relaxed);
    t_pending[p] = 0;
  }
  if (count) totals().calls.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace kiln::jit
