#pragma once

// Where a call's device time goes: every kernel the GPU runs while a Timeline
// records (graph nodes included), with its start and end on the device clock,
// grouped by the call that launched it (Note [Kernel timeline]).

#include <memory>
#include <string>

namespace kiln::perf {

// Note [Kernel timeline]
// ncu times each kernel alone (serialized, no neighbour to overlap with), so
// its sum is not a call's time: a replayed graph overlaps a kernel's launch
// with the one before (Note [Early launch]) and waits between others. A
// Timeline asks CUPTI's activity API for every kernel's device start and end
// (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, which does not serialize), and the
// caller brackets each call with begin_call() / end_call() (CUPTI's clock, the
// same as the records'). report() then splits each call's wall time into the
// head (call entered to the first kernel's start: host work and the launch),
// the kernels' busy time (the union of their intervals), the idle gaps between
// them, and the tail (the last kernel's end to end_call(): the synchronize
// returning); and per kernel (by name, and by position in the call) its median
// duration and the median gap from the previous kernel's end to its start
// (negative: it started early). CUPTI is loaded at run time (dlopen), so
// kiln-bench needs no CUPTI to start; without it, or without a GPU,
// available() says why.
class Timeline {
 public:
  Timeline();  // starts recording where available()
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // "" when recording, else why not.
  const std::string& unavailable() const;
  bool available() const { return unavailable().empty(); }
  void begin_call();
  void end_call();  // after the call's synchronize
  // Flushes the records and describes the calls bracketed so far; `positions`
  // kernels by position are listed (0: none).
  std::string report(int positions);

  // A lone 4-byte memset and a synchronize on the current device, timed as
  // the floor a one-kernel call can reach (median µs of `iters`).
  static double launch_floor_us(int iters);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::perf
