// Note [cuBLASLt warm-up] (blas_lt.h): cuBLASLt's first-use initialization
// on a background thread, started by the first host-to-device copy.

#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "kiln/logging.h"
#include "runtime/core/env.h"
#include "runtime/cuda/blas_lt.h"
#include "runtime/cuda/blas_lt_impl.h"
#include "runtime/cuda/device_guard.h"

namespace kiln::cuda {
namespace {

struct Warmup {
  std::once_flag started;
  std::mutex mu;
  std::condition_variable cv;
  bool running = false;
  // The process whose thread runs the warm-up: a child forked meanwhile has
  // no such thread (and may hold `mu` locked by it), so it does not wait.
  std::atomic<pid_t> process{0};
};

Warmup& warmup_for(int device) {
  static auto* all = new std::array<Warmup, kMaxDevices>();  // leaked: a thread may outlive main
  KILN_INTERNAL_ASSERT(device >= 0 && device < kMaxDevices, "cuBLASLt: device index ", device,
                       " out of range");
  return (*all)[static_cast<size_t>(device)];
}

void wait_for_every_warmup() {
  for (int d = 0; d < kMaxDevices; ++d) wait_for_warmup(d);
}

// One heuristic query for a small half-precision problem: what initializes cuBLASLt.
void warm_up(int device) {
  DeviceGuard guard(device);
  MatmulDesc desc(CUBLAS_COMPUTE_32F, CUDA_R_32F, device);
  const LtMatrix m{false, 64, 64, 64};
  MatrixLayout a(CUDA_R_16F, m, 1, 0, device), b(CUDA_R_16F, m, 1, 0, device),
      d(CUDA_R_16F, m, 1, 0, device);
  Preference pref(device);
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
           static_cast<uint64_t>(workspace_bytes(device)));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  (void)cublasLtMatmulAlgoGetHeuristic(handle_for(device), desc.desc, a.layout, b.layout, d.layout,
                                       d.layout, pref.pref, 1, &result, &count);
}

// Note [Exit during the warm-up]
// cuBLASLt's first query registers about forty exit handlers of its own
// while it runs (perf/probes/lt_exit.cpp, on an H200: two as the handle is
// made, the rest over the query's 160 ms). Exit handlers run newest first,
// so a process that exits during the query tears those down under the
// warm-up thread, whatever wait it registered before: in the probe, exits
// 10 to 100 ms after the thread started crashed in 39 of 40 tries with the
// wait registered (as an exit handler) before the thread started, and in 10
// of 20 with no wait at all. kiln-bench's mlp on generated products, which
// never waits for cuBLASLt, crashed at exit in 3 runs of 3. What runs
// before every exit handler is the exiting thread's thread_local
// destructors (glibc's exit calls them first): the wait is one of those, in
// the main thread, which returning from main or calling exit makes the
// exiting thread. So the warm-up runs on its own thread only when the main
// thread starts it; another thread (a loader thread, say) makes the query
// itself, at the cost the first matmul would otherwise pay, since the main
// thread could exit under it. Measured with the wait a thread_local of the
// main thread: no crash in 35 exits from 0 to 140 ms (the probe), nor in 16
// runs of kiln-bench's mlp and chain16. An exit from a third thread during the
// main thread's warm-up is left to the handler below, which helps only
// where cuBLASLt has registered nothing yet. A child forked during the
// warm-up has no warm-up thread, and its waits return at once (else its
// exit would wait on a flag that thread never clears).
struct WaitBeforeExit {
  ~WaitBeforeExit() { wait_for_every_warmup(); }
};

// A warm-up that fails costs only its overlap: the first matmul initializes.
void warm_up_or_log(int device) {
  try {
    warm_up(device);
  } catch (const std::exception& e) {
    KILN_LOG(Perf, "cuBLASLt warm-up on cuda:", device, " failed: ", e.what());
  }
}

bool on_main_thread() {
  return static_cast<pid_t>(syscall(SYS_gettid)) == getpid();
}

}  // namespace

void wait_for_warmup(int device) {
  Warmup& w = warmup_for(device);
  if (w.process.load(std::memory_order_acquire) != getpid()) return;
  std::unique_lock<std::mutex> lock(w.mu);
  w.cv.wait(lock, [&] { return !w.running; });
}

void start_blas_warmup(int device) {
  Warmup& w = warmup_for(device);
  std::call_once(w.started, [&] {
    if (!env_flag("KILN_BLAS_WARMUP", true)) return;
    if (!on_main_thread()) {  // Note [Exit during the warm-up]
      warm_up_or_log(device);
      return;
    }
    thread_local WaitBeforeExit wait_before_exit;
    (void)wait_before_exit;
    static const bool registered = (std::atexit(wait_for_every_warmup), true);
    (void)registered;
    w.process.store(getpid(), std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(w.mu);
      w.running = true;
    }
    std::thread([device, &w] {
      warm_up_or_log(device);
      std::lock_guard<std::mutex> lock(w.mu);
      w.running = false;
      w.cv.notify_all();
    }).detach();
  });
}

}  // namespace kiln::cuda
