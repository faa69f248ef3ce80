#include "jit/plan/flush_profile.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "kiln/dispatch.h"
#include "runtime/core/env.h"

namespace kiln::jit {
namespace {

constexpr int kPhases = static_cast<int>(Phase::kCount);
constexpr const char* kPhaseNames[kPhases] = {
    "matmul_epilogue", "dead_code",   "cse",        "fuse",          "markers",
    "memory_plan",     "step extern", "step fused", "step reduction"};

struct Totals {
  std::atomic<int64_t> ns[kPhases] = {};
  std::atomic<int64_t> count[kPhases] = {};
  std::atomic<int64_t> flushes{0}, nodes{0};
  std::mutex mu;
  std::map<std::string, std::pair<int64_t, int64_t>> by_op;  // ns, calls
  void report() {
    std::lock_guard<std::mutex> lock(mu);
    if (flushes == 0) return;
    const double f = static_cast<double>(flushes.load());
    std::fprintf(stderr, "[flush profile] %lld flushes, %.1f nodes/flush\n",
                 static_cast<long long>(flushes.load()), static_cast<double>(nodes.load()) / f);
    for (int p = 0; p < kPhases; ++p) {
      std::fprintf(stderr, "[flush profile] %-15s %10.1f us/flush %8.1f calls/flush\n",
                   kPhaseNames[p], static_cast<double>(ns[p].load()) / f / 1e3,
                   static_cast<double>(count[p].load()) / f);
    }
    for (const auto& [op, t] : by_op) {
      std::fprintf(stderr, "[flush profile]   extern %-24s %10.1f us/flush %8.1f calls/flush\n",
                   op.c_str(), static_cast<double>(t.first) / f / 1e3,
                   static_cast<double>(t.second) / f);
    }
  }
};

const bool g_on = env_flag("KILN_FLUSH_PROFILE", false);

// Note [Profile totals at exit]
// The totals are never destroyed: lazy work can still flush after main
// returns (an atexit handler, a global's destructor), later than a static
// Totals would live. The report is an atexit handler registered when the
// totals are first used, so it prints after everything registered later has
// run; what is counted after it is not reported.
Totals& totals() {
  static Totals* t = [] {
    auto* fresh = new Totals;
    std::atexit([] { totals().report(); });
    return fresh;
  }();
  return *t;
}

}  // namespace

bool flush_profile_on() {
  return g_on;
}

void profile_flush(size_t nodes) {
  if (!g_on) return;
  totals().flushes.fetch_add(1, std::memory_order_relaxed);
  totals().nodes.fetch_add(static_cast<int64_t>(nodes), std::memory_order_relaxed);
}

void profile_phase(Phase p, int64_t ns) {
  const int i = static_cast<int>(p);
  totals().ns[i].fetch_add(ns, std::memory_order_relaxed);
  totals().count[i].fetch_add(1, std::memory_order_relaxed);
}

void profile_extern(const OperatorEntry& op, int64_t ns) {
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mu);
  auto& e = t.by_op[op.name()];
  e.first += ns;
  e.second += 1;
}

}  // namespace kiln::jit
