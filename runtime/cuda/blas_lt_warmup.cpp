// Note [cuBLASLt warm-up] (blas_lt.h): cuBLASLt's first-use initialization
// on a background thread, started by the first host-to-device copy.

#include <array>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "kiln/logging.h"
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
  // Exit handlers run newest first: this one, registered after what the
  // first calls above made cuBLASLt set up, waits before that is torn down.
  // Registered before the handle and the query, so that an exit during
  // either is covered (H200, 2026-11-28, chain16 4096, a process that exits
  // during the warm-up: with the wait registered only before the warm-up
  // began, 3 crashes in 3 runs; registered here, 0 in 4; registered after
  // the handle's creation, 4 in 5).
  std::atexit(wait_for_every_warmup);
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  (void)cublasLtMatmulAlgoGetHeuristic(handle_for(device), desc.desc, a.layout, b.layout, d.layout,
                                       d.layout, pref.pref, 1, &result, &count);
}

// A process that exits while a warm-up runs waits for it first: the CUDA
// runtime's own exit handlers, registered before this object was made, run
// after its destructor; so does what cuBLASLt sets up in the warm-up's first
// calls (warm_up registers the wait once more after them).
struct WaitAtExit {
  ~WaitAtExit() { wait_for_every_warmup(); }
};

}  // namespace

void wait_for_warmup(int device) {
  Warmup& w = warmup_for(device);
  std::unique_lock<std::mutex> lock(w.mu);
  w.cv.wait(lock, [&] { return !w.running; });
}

void start_blas_warmup(int device) {
  Warmup& w = warmup_for(device);
  static WaitAtExit wait_at_exit;
  std::call_once(w.started, [&] {
    const char* env = std::getenv("KILN_BLAS_WARMUP");
    if (env && std::string(env) == "0") return;
    {
      std::lock_guard<std::mutex> lock(w.mu);
      w.running = true;
    }
    std::thread([device, &w] {
      try {
        warm_up(device);
      } catch (const std::exception& e) {
        KILN_LOG(Perf, "cuBLASLt warm-up on cuda:", device, " failed: ", e.what());
      }
      std::lock_guard<std::mutex> lock(w.mu);
      w.running = false;
      w.cv.notify_all();
    }).detach();
  });
}

}  // namespace kiln::cuda
