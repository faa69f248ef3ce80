#include "perf/timeline.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "kiln/cuda.h"

#if defined(KILN_WITH_CUDA) && __has_include(<cupti.h>)
#define KILN_TIMELINE_CUPTI 1
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <unistd.h>
#endif

// GCC 12 reports false array-bounds and stringop warnings for std::string
// and std::vector code inlined at -O3 where the recording path is compiled
// out (the records are then always empty).
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::perf {
namespace {

struct KernelRecord {
  uint64_t start = 0, end = 0;
  std::string name;
};

struct Span {
  uint64_t begin = 0, end = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string format(const char* fmt, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, a, b, c, d);
  return buf;
}

#ifdef KILN_TIMELINE_CUPTI

// CUPTI's entry points, loaded at run time.
struct Cupti {
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*timestamp)(uint64_t*) = nullptr;
};

Cupti g_cupti;
std::mutex g_mu;
std::vector<KernelRecord> g_kernels;
bool g_recording = false;  // one Timeline at a time

// Beside the executable first (the GPU bundle carries it), then the loader's
// search path and the toolkit's usual folders.
void* open_cupti() {
  std::vector<std::string> paths;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    paths.push_back(dir + "/libcupti.so");
  }
  for (const char* p : {"libcupti.so", "/usr/local/cuda/lib64/libcupti.so",
                        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"}) {
    paths.push_back(p);
  }
  for (const std::string& p : paths) {
    if (void* lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
  }
  return nullptr;
}

template <typename F>
bool find(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  return f != nullptr;
}

std::string load_cupti() {
  static const std::string why = [] {
    void* lib = open_cupti();
    if (!lib) return std::string("CUPTI (libcupti.so) not found");
    Cupti c;
    if (!find(lib, "cuptiActivityRegisterCallbacks", c.register_callbacks) ||
        !find(lib, "cuptiActivityEnable", c.enable) ||
        !find(lib, "cuptiActivityDisable", c.disable) ||
        !find(lib, "cuptiActivityFlushAll", c.flush_all) ||
        !find(lib, "cuptiActivityGetNextRecord", c.next_record) ||
        !find(lib, "cuptiGetTimestamp", c.timestamp)) {
      return std::string("CUPTI lacks an activity entry point");
    }
    g_cupti = c;
    return std::string();
  }();
  return why;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = size_t{8} << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = *buffer ? kBytes : 0;
  *max_records = 0;
}

std::string kernel_name(const char* raw) {
  if (!raw) return "?";
  std::string name = raw;
  int status = 0;
  if (char* d = abi::__cxa_demangle(raw, nullptr, nullptr, &status); d && status == 0) {
    name = d;
    std::free(d);
    name = name.substr(0, name.find('('));
  }
  return name;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<KernelRecord> got;
  CUpti_Activity* r = nullptr;
  while (g_cupti.next_record(buffer, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
    got.push_back({k->start, k->end, kernel_name(k->name)});
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  g_kernels.insert(g_kernels.end(), got.begin(), got.end());
}

uint64_t now_ns() {
  uint64_t t = 0;
  g_cupti.timestamp(&t);
  return t;
}

#endif

std::string shorten(const std::string& name, size_t width) {
  return name.size() <= width ? name : name.substr(0, width - 3) + "...";
}

}  // namespace

struct Timeline::Impl {
  std::string why;
  std::vector<Span> calls;
  uint64_t open = 0;
};

Timeline::Timeline() : impl_(std::make_unique<Impl>()) {
#ifdef KILN_TIMELINE_CUPTI
  if (!kiln::cuda::is_available()) {
    impl_->why = "no CUDA device";
    return;
  }
  impl_->why = load_cupti();
  if (!impl_->why.empty()) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_recording) {
    impl_->why = "another Timeline is recording";
    return;
  }
  if (g_cupti.register_callbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      g_cupti.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    impl_->why = "CUPTI refused kernel activity records";
    return;
  }
  g_recording = true;
  g_kernels.clear();
#else
  impl_->why = "kiln-bench was built without CUDA or without CUPTI's headers";
#endif
}

Timeline::~Timeline() {
#ifdef KILN_TIMELINE_CUPTI
  if (!available()) return;
  g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  g_cupti.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  std::lock_guard<std::mutex> lock(g_mu);
  g_recording = false;
  g_kernels.clear();
#endif
}

const std::string& Timeline::unavailable() const {
  return impl_->why;
}

void Timeline::begin_call() {
#ifdef KILN_TIMELINE_CUPTI
  if (available()) impl_->open = now_ns();
#endif
}

void Timeline::end_call() {
#ifdef KILN_TIMELINE_CUPTI
  if (available()) impl_->calls.push_back({impl_->open, now_ns()});
#endif
}

std::string Timeline::report(int positions) {
  if (!available()) return "timeline: " + impl_->why + "\n";
  std::vector<KernelRecord> all;
#ifdef KILN_TIMELINE_CUPTI
  g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    all = g_kernels;
  }
#endif
  std::sort(all.begin(), all.end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.start < b.start; });
  // Per call: its kernels in order of start.
  std::vector<std::vector<const KernelRecord*>> per_call;
  for (const Span& s : impl_->calls) {
    std::vector<const KernelRecord*> ks;
    auto it = std::lower_bound(all.begin(), all.end(), s.begin,
                               [](const KernelRecord& k, uint64_t t) { return k.start < t; });
    for (; it != all.end() && it->start <= s.end; ++it) ks.push_back(&*it);
    per_call.push_back(std::move(ks));
  }
  std::vector<double> wall, head, busy, idle, tail, summed, count;
  struct ByName {
    std::vector<double> dur, gap, advance;
  };
  std::map<std::string, ByName> by_name;
  std::vector<ByName> by_position;
  std::vector<std::string> position_name;
  size_t same_count = per_call.empty() ? 0 : per_call[0].size();
  for (size_t c = 0; c < per_call.size(); ++c) {
    const auto& ks = per_call[c];
    const Span& s = impl_->calls[c];
    wall.push_back((s.end - s.begin) * 1e-3);
    count.push_back(static_cast<double>(ks.size()));
    if (ks.size() != same_count) same_count = 0;
    if (ks.empty()) continue;
    head.push_back((static_cast<double>(ks[0]->start) - s.begin) * 1e-3);
    uint64_t reach = ks[0]->start, busy_ns = 0, sum_ns = 0;
    for (size_t p = 0; p < ks.size(); ++p) {
      const KernelRecord& k = *ks[p];
      const double gap =
          p == 0 ? head.back() : (static_cast<double>(k.start) - static_cast<double>(reach)) * 1e-3;
      const double advance = k.end > reach ? (k.end - (p == 0 ? k.start : reach)) * 1e-3 : 0.0;
      if (k.end > reach) busy_ns += k.end - std::max(k.start, reach);
      reach = std::max(reach, k.end);
      sum_ns += k.end - k.start;
      ByName& n = by_name[k.name];
      n.dur.push_back((k.end - k.start) * 1e-3);
      n.gap.push_back(gap);
      n.advance.push_back(advance);
      if (p >= by_position.size()) {
        by_position.resize(p + 1);
        position_name.resize(p + 1, k.name);
      }
      by_position[p].dur.push_back((k.end - k.start) * 1e-3);
      by_position[p].gap.push_back(gap);
      by_position[p].advance.push_back(advance);
    }
    busy.push_back(busy_ns * 1e-3);
    idle.push_back((reach - ks[0]->start - busy_ns) * 1e-3);
    summed.push_back(sum_ns * 1e-3);
    tail.push_back((static_cast<double>(s.end) - static_cast<double>(reach)) * 1e-3);
  }
  const double calls = static_cast<double>(per_call.size());
  std::string out =
      format("timeline: %.0f calls, %.0f kernels per call (median)\n", calls, median(count));
  out += format("  wall %.1f us = head %.1f + busy %.1f + idle %.1f", median(wall), median(head),
                median(busy), median(idle));
  out += format(" + tail %.1f (medians; kernel durations summed %.1f)\n", median(tail),
                median(summed));
  out +=
      "  head: call entered to the first kernel's start; busy: some kernel running; idle: "
      "none between the first and the last; tail: the last kernel's end to the synchronize "
      "returning; gap: a kernel's start after the latest end before it (negative: it "
      "started early); advance: its end after that latest end (what it adds to the call)\n";
  // Names by time per call.
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [name, n] : by_name) {
    double total = 0;
    for (double d : n.dur) total += d;
    order.push_back({total / std::max(calls, 1.0), name});
  }
  std::sort(order.rbegin(), order.rend());
  out += "  per call   count  median us  median gap  advance  kernel\n";
  for (const auto& [total, name] : order) {
    const ByName& n = by_name[name];
    out += format("  %8.1f %7.1f %10.2f %11.2f", total,
                  static_cast<double>(n.dur.size()) / std::max(calls, 1.0), median(n.dur),
                  median(n.gap));
    out += format(" %8.2f  ", median(n.advance));
    out += shorten(name, 90) + "\n";
  }
  if (positions > 0) {
    if (same_count == 0) {
      out += "  (calls ran different kernel counts: no table by position)\n";
    } else {
      out += "  position  median us  median gap  advance  kernel\n";
      for (size_t p = 0; p < by_position.size() && p < static_cast<size_t>(positions); ++p) {
        out += format("  %8.0f %10.2f %11.2f %8.2f  ", static_cast<double>(p),
                      median(by_position[p].dur), median(by_position[p].gap),
                      median(by_position[p].advance));
        out += shorten(position_name[p], 90) + "\n";
      }
    }
  }
  return out;
}

double Timeline::launch_floor_us(int iters) {
#ifdef KILN_TIMELINE_CUPTI
  if (!kiln::cuda::is_available()) return 0;
  void* p = nullptr;
  if (cudaMalloc(&p, 4) != cudaSuccess) return 0;
  std::vector<double> t;
  for (int i = 0; i < iters + 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    cudaMemsetAsync(p, 0, 4, nullptr);
    cudaDeviceSynchronize();
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 5) t.push_back(us);
  }
  cudaFree(p);
  return median(t);
#else
  (void)iters;
  return 0;
#endif
}

}  // namespace kiln::perf
