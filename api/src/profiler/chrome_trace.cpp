// export_chrome_trace(): Chrome's trace event format, which Perfetto
// (ui.perfetto.dev) and chrome://tracing open.
//
// Note [Profiler trace layout]
// - The host is one process (pid 1) with a track (tid) per recording thread,
//   named after its kernel thread id; each GPU is a process (pid 100 + its
//   index) with a track per CUDA stream.
// - Every event is a complete event ("ph": "X") on one of those tracks, its
//   category the event's kind (op, range, compiled, cpu_kernel, kernel,
//   gpu_op, cuda_graph). Times are microseconds from the profile's start.
// - A launch is a flow arrow: "s" on the launching thread at the launch
//   (bound to the slice around it) and "f" on the stream at the GPU event's
//   start (bound to that event, "bp": "e"), sharing the correlation id, as
//   PyTorch's traces draw them.

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "api/src/profiler/profile_impl.h"

namespace kiln::profiler {
namespace {

constexpr int kHostPid = 1;
constexpr int kGpuPidBase = 100;

double us(int64_t ns) {
  return static_cast<double>(ns) / 1e3;
}

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

nlohmann::json meta(const char* what, int pid, int tid, nlohmann::json args) {
  return {{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

}  // namespace

std::string format_chrome_trace(const detail::Collected& data) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back(meta("process_name", kHostPid, 0, {{"name", "kiln host"}}));
  events.push_back(meta("process_sort_index", kHostPid, 0, {{"sort_index", 0}}));
  for (size_t t = 0; t < data.thread_os_ids.size(); ++t) {
    const int tid = static_cast<int>(t);
    events.push_back(meta("thread_name", kHostPid, tid,
                          {{"name", "thread " + std::to_string(data.thread_os_ids[t])}}));
    events.push_back(meta("thread_sort_index", kHostPid, tid, {{"sort_index", tid}}));
  }
  // One track per (device, stream), numbered in order of appearance.
  std::map<std::pair<int, uint64_t>, int> stream_tid;
  std::map<int, bool> devices;
  for (const Event& e : data.events) {
    if (!e.on_gpu()) continue;
    auto [it, fresh] =
        stream_tid.try_emplace({e.device, e.stream}, static_cast<int>(stream_tid.size()) + 1);
    const int pid = kGpuPidBase + e.device;
    if (!devices[e.device]) {
      devices[e.device] = true;
      events.push_back(meta("process_name", pid, 0, {{"name", "GPU " + std::to_string(e.device)}}));
      events.push_back(meta("process_sort_index", pid, 0, {{"sort_index", 1 + e.device}}));
    }
    if (fresh) {
      events.push_back(meta("thread_name", pid, it->second, {{"name", "stream " + hex(e.stream)}}));
    }
  }

  std::unordered_map<uint64_t, const Event*> gpu_by_correlation;
  for (const Event& e : data.events) {
    nlohmann::json x = {{"ph", "X"},
                        {"cat", event_kind_name(e.kind)},
                        {"name", e.name},
                        {"ts", us(e.start_ns)},
                        {"dur", us(e.duration_ns())}};
    if (e.on_gpu()) {
      x["pid"] = kGpuPidBase + e.device;
      x["tid"] = stream_tid.at({e.device, e.stream});
      x["args"] = {{"device", e.device}, {"stream", hex(e.stream)}};
      if (e.correlation) {
        x["args"]["correlation"] = e.correlation;
        gpu_by_correlation[e.correlation] = &e;
      }
    } else {
      x["pid"] = kHostPid;
      x["tid"] = e.thread;
      if (!e.shapes.empty()) x["args"] = {{"Input Dims", e.shapes}};
    }
    events.push_back(std::move(x));
  }
  for (const Launch& l : data.launches) {
    auto it = gpu_by_correlation.find(l.correlation);
    if (it == gpu_by_correlation.end()) continue;  // its GPU side was not timed (a capture)
    const Event& g = *it->second;
    events.push_back({{"ph", "s"},
                      {"cat", "ac2g"},
                      {"name", "launch"},
                      {"id", l.correlation},
                      {"pid", kHostPid},
                      {"tid", l.thread},
                      {"ts", us(l.time_ns)}});
    events.push_back({{"ph", "f"},
                      {"cat", "ac2g"},
                      {"name", "launch"},
                      {"id", l.correlation},
                      {"bp", "e"},
                      {"pid", kGpuPidBase + g.device},
                      {"tid", stream_tid.at({g.device, g.stream})},
                      {"ts", us(g.start_ns)}});
  }
  nlohmann::json trace = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return trace.dump();
}

}  // namespace kiln::profiler
