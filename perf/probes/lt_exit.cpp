// Probe: what cuBLASLt registers to run at exit, and when; and whether a
// process that exits while another thread makes cuBLASLt's first query
// crashes (Note [cuBLASLt warm-up] in runtime/cuda/blas_lt.h).
//
//   g++ -O1 -std=c++17 -rdynamic -I$CUDA/include perf/probes/lt_exit.cpp -o /tmp/lt_exit \
//       -L$CUDA/lib64 -lcublasLt -lcudart -ldl -lpthread
//   /tmp/lt_exit time            # each first call's cost, and the exit handlers it registers
//   /tmp/lt_exit race MODE US    # exit US microseconds after the query thread starts
//
// MODE: "thread" (the handle and the query on the thread, the wait registered
// with atexit before it starts), "handle" (the handle made on the main thread
// first, then the wait registered, then the query on the thread), "tls" (the
// wait is the destructor of a thread_local of the main thread: glibc's exit
// runs the exiting thread's thread_local destructors before any handler),
// "none" (no wait).
// Defining __cxa_atexit here (exported by -rdynamic) binds the libraries'
// calls to it: each registration is logged with the library it came from.

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point g_start = Clock::now();
std::atomic<bool> g_log{false};

double ms_since_start() {
  return std::chrono::duration<double, std::milli>(Clock::now() - g_start).count();
}

std::mutex g_mu;
std::condition_variable g_cv;
bool g_running = false;

void wait_for_query() {
  std::unique_lock<std::mutex> lock(g_mu);
  g_cv.wait(lock, [] { return !g_running; });
}

cublasLtHandle_t g_main_handle = nullptr;

struct WaitInTls {
  ~WaitInTls() { wait_for_query(); }
};

void query(cublasLtHandle_t h) {
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayout_t a;
  cublasLtMatrixLayoutCreate(&a, CUDA_R_16F, 64, 64, 64);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  uint64_t ws = 32 << 20;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof ws);
  cublasLtMatmulHeuristicResult_t r{};
  int count = 0;
  cublasLtMatmulAlgoGetHeuristic(h, desc, a, a, a, a, pref, 1, &r, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatmulDescDestroy(desc);
}

double timed(const char* what, const std::function<void()>& f) {
  const double t0 = ms_since_start();
  f();
  const double t = ms_since_start() - t0;
  std::printf("%-34s %8.2f ms\n", what, t);
  return t;
}

}  // namespace

extern "C" int __cxa_atexit(void (*fn)(void*), void* arg, void* dso) {
  using Real = int (*)(void (*)(void*), void*, void*);
  static Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "__cxa_atexit"));
  if (g_log.load()) {
    Dl_info info{};
    dladdr(__builtin_return_address(0), &info);
    const char* lib = info.dli_fname ? std::strrchr(info.dli_fname, '/') : nullptr;
    std::printf("  at %8.2f ms: exit handler registered by %s\n", ms_since_start(),
                lib ? lib + 1 : "?");
  }
  return real(fn, arg, dso);
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "time";
  g_log = mode == "time";
  if (mode == "time") {
    timed("cudaFree(0)", [] { cudaFree(nullptr); });
    cublasLtHandle_t h = nullptr;
    timed("cublasLtCreate (first)", [&] { cublasLtCreate(&h); });
    cublasLtHandle_t h2 = nullptr;
    timed("cublasLtCreate (second)", [&] { cublasLtCreate(&h2); });
    timed("first heuristic query", [&] { query(h); });
    timed("second heuristic query", [&] { query(h); });
    timed("query on another handle", [&] { query(h2); });
    std::thread([&] {
      cublasLtHandle_t h3 = nullptr;
      timed("cublasLtCreate on a new thread", [&] { cublasLtCreate(&h3); });
      timed("query there", [&] { query(h3); });
      cublasLtDestroy(h3);
    }).join();
    cublasLtDestroy(h2);
    cublasLtDestroy(h);
    return 0;
  }
  const std::string how = argc > 2 ? argv[2] : "thread";
  const long us = argc > 3 ? std::atol(argv[3]) : 0;
  cudaFree(nullptr);
  if (how == "handle") cublasLtCreate(&g_main_handle);
  if (how == "tls") {
    thread_local WaitInTls wait;
    (void)wait;
  } else if (how != "none") {
    std::atexit(wait_for_query);
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_running = true;
  }
  std::thread([] {
    cublasLtHandle_t h = g_main_handle;
    if (!h) cublasLtCreate(&h);
    query(h);
    std::lock_guard<std::mutex> lock(g_mu);
    g_running = false;
    g_cv.notify_all();
  }).detach();
  std::this_thread::sleep_for(std::chrono::microseconds(us));
  return 0;
}
