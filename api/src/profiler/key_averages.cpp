// key_averages(): events summed per name, and the table PyTorch users know.

#include <algorithm>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "api/src/profiler/profile_impl.h"

namespace kiln::profiler {

std::string shapes_str(const std::vector<std::vector<int64_t>>& shapes) {
  std::string s = "[";
  for (size_t i = 0; i < shapes.size(); ++i) {
    s += i ? ", [" : "[";
    for (size_t k = 0; k < shapes[i].size(); ++k) {
      s += (k ? ", " : "") + std::to_string(shapes[i][k]);
    }
    s += "]";
  }
  return s + "]";
}

std::vector<int64_t> gpu_parents(const detail::Collected& data) {
  const std::vector<Event>& ev = data.events;
  std::vector<int64_t> parent(ev.size(), -1);
  std::map<std::pair<int, uint64_t>, std::vector<int64_t>> by_stream;
  for (size_t i = 0; i < ev.size(); ++i) {
    if (ev[i].on_gpu()) by_stream[{ev[i].device, ev[i].stream}].push_back(static_cast<int64_t>(i));
  }
  auto is_span = [&](int64_t i) { return ev[i].kind != EventKind::GpuKernel; };
  for (auto& [stream, list] : by_stream) {
    // Containers before what they contain: by start, then longest, spans first.
    std::sort(list.begin(), list.end(), [&](int64_t a, int64_t b) {
      if (ev[a].start_ns != ev[b].start_ns) return ev[a].start_ns < ev[b].start_ns;
      if (ev[a].end_ns != ev[b].end_ns) return ev[a].end_ns > ev[b].end_ns;
      return is_span(a) && !is_span(b);
    });
    std::vector<int64_t> open;
    for (int64_t i : list) {
      while (!open.empty() && ev[i].end_ns > ev[open.back()].end_ns) open.pop_back();
      if (!open.empty()) parent[i] = open.back();
      if (is_span(i)) open.push_back(i);
    }
  }
  return parent;
}

KeyAverages compute_key_averages(const detail::Collected& data, bool group_by_shape) {
  const std::vector<Event>& ev = data.events;
  const size_t n = ev.size();
  // Self times: each event's own time less its children's.
  std::vector<int64_t> self(n);
  for (size_t i = 0; i < n; ++i) self[i] = ev[i].duration_ns();
  for (size_t i = 0; i < n; ++i) {
    if (!ev[i].on_gpu() && ev[i].parent >= 0) self[ev[i].parent] -= ev[i].duration_ns();
  }
  const std::vector<int64_t> gparent = gpu_parents(data);
  for (size_t i = 0; i < n; ++i) {
    if (gparent[i] >= 0) self[gparent[i]] -= ev[i].duration_ns();
  }
  // Device totals: each GPU event's self time goes to the CPU event that
  // launched it and to every event around that one.
  std::unordered_map<uint64_t, int64_t> launcher;
  for (const Launch& l : data.launches) launcher[l.correlation] = l.enclosing;
  std::vector<int64_t> device_total(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (!ev[i].on_gpu() || ev[i].correlation == 0) continue;
    auto it = launcher.find(ev[i].correlation);
    for (int64_t c = it == launcher.end() ? -1 : it->second; c >= 0; c = ev[c].parent) {
      device_total[c] += self[i];
    }
  }

  KeyAverages out;
  std::map<std::pair<std::string, std::string>, size_t> row_of;
  std::vector<int64_t> gpu_calls;
  for (size_t i = 0; i < n; ++i) {
    const Event& e = ev[i];
    const std::string shapes =
        group_by_shape && e.kind == EventKind::Op ? shapes_str(e.shapes) : "";
    auto [it, fresh] = row_of.try_emplace({e.name, shapes}, out.rows.size());
    if (fresh) {
      KeyAverage r;
      r.name = e.name;
      r.kind = e.kind;
      r.shapes = shapes;
      out.rows.push_back(r);
      gpu_calls.push_back(0);
    }
    KeyAverage& r = out.rows[it->second];
    if (e.on_gpu()) {
      gpu_calls[it->second] += 1;
      r.self_device_ns += self[i];
      r.device_total_ns += e.duration_ns();
    } else {
      if (r.calls == 0 && r.kind != e.kind) r.kind = e.kind;  // a CPU event names the row
      r.calls += 1;
      r.self_cpu_ns += self[i];
      r.cpu_total_ns += e.duration_ns();
      r.device_total_ns += device_total[i];
    }
  }
  for (size_t k = 0; k < out.rows.size(); ++k) {
    if (out.rows[k].calls == 0) out.rows[k].calls = gpu_calls[k];
  }
  return out;
}

const KeyAverage* KeyAverages::find(std::string_view name) const& {
  for (const KeyAverage& r : rows) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

namespace {

// As PyTorch prints times: microseconds below a millisecond, then ms, then s.
std::string format_time(int64_t ns) {
  char buf[32];
  const double us = static_cast<double>(ns) / 1e3;
  if (us >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.3fs", us / 1e6);
  } else if (us >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.3fms", us / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.3fus", us);
  }
  return buf;
}

std::string format_percent(int64_t part, int64_t whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%",
                whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  return buf;
}

int64_t sort_key(const KeyAverage& r, SortBy by) {
  switch (by) {
    case SortBy::SelfCpu:
      return r.self_cpu_ns;
    case SortBy::CpuTotal:
      return r.cpu_total_ns;
    case SortBy::SelfDevice:
      return r.self_device_ns;
    case SortBy::DeviceTotal:
      return r.device_total_ns;
    case SortBy::Calls:
      return r.calls;
  }
  return 0;
}

}  // namespace

std::string KeyAverages::table(SortBy by, int row_limit) const {
  KILN_CHECK(by == SortBy::SelfCpu || by == SortBy::CpuTotal || by == SortBy::SelfDevice ||
                 by == SortBy::DeviceTotal || by == SortBy::Calls,
             "[KeyAverages::table] expected sort key SelfCpu, CpuTotal, SelfDevice, DeviceTotal "
             "or Calls, got an invalid sort key (",
             static_cast<int>(by), ")");
  std::vector<const KeyAverage*> sorted;
  int64_t self_cpu_total = 0, self_device_total = 0;
  bool shapes = false;
  for (const KeyAverage& r : rows) {
    sorted.push_back(&r);
    self_cpu_total += r.self_cpu_ns;
    self_device_total += r.self_device_ns;
    shapes = shapes || !r.shapes.empty();
  }
  std::stable_sort(sorted.begin(), sorted.end(), [&](const KeyAverage* a, const KeyAverage* b) {
    return sort_key(*a, by) > sort_key(*b, by);
  });
  if (row_limit > 0 && sorted.size() > static_cast<size_t>(row_limit)) sorted.resize(row_limit);
  const bool device = self_device_total > 0;

  // PyTorch's layout: the name right-aligned in a column as wide as the
  // longest (at most 55 characters), then fixed-width columns.
  constexpr size_t kMaxName = 55;
  size_t name_width = 4;
  for (const KeyAverage* r : sorted) name_width = std::max(name_width, r->name.size());
  name_width = std::min(name_width, kMaxName);
  std::vector<std::string> headers = {"Self CPU %", "Self CPU", "CPU total %", "CPU total",
                                      "CPU time avg"};
  if (device) {
    for (const char* h : {"Self Device", "Self Device %", "Device total", "Device time avg"}) {
      headers.push_back(h);
    }
  }
  headers.push_back("# of Calls");
  if (shapes) headers.push_back("Input Shapes");
  constexpr size_t kCol = 15;

  std::string rule = std::string(name_width, '-');
  for (size_t k = 0; k < headers.size(); ++k) rule += "  " + std::string(kCol, '-');
  rule += "\n";
  auto cell = [&](std::string& line, const std::string& v) {
    std::string c = v.size() > kCol ? v.substr(0, kCol) : v;
    line += "  " + std::string(kCol - c.size(), ' ') + c;
  };
  std::string out = rule;
  std::string head = std::string(name_width - 4, ' ') + "Name";
  for (const std::string& h : headers) cell(head, h);
  out += head + "\n" + rule;
  for (const KeyAverage* r : sorted) {
    std::string name = r->name;
    if (name.size() > kMaxName) name = name.substr(0, kMaxName - 3) + "...";
    std::string line = std::string(name_width - name.size(), ' ') + name;
    const int64_t calls = std::max<int64_t>(r->calls, 1);
    cell(line, format_percent(r->self_cpu_ns, self_cpu_total));
    cell(line, format_time(r->self_cpu_ns));
    cell(line, format_percent(r->cpu_total_ns, self_cpu_total));
    cell(line, format_time(r->cpu_total_ns));
    cell(line, format_time(r->cpu_total_ns / calls));
    if (device) {
      cell(line, format_time(r->self_device_ns));
      cell(line, format_percent(r->self_device_ns, self_device_total));
      cell(line, format_time(r->device_total_ns));
      cell(line, format_time(r->device_total_ns / calls));
    }
    cell(line, std::to_string(r->calls));
    if (shapes) line += "  " + r->shapes;
    out += line + "\n";
  }
  out += rule;
  out += "Self CPU time total: " + format_time(self_cpu_total) + "\n";
  if (device) out += "Self Device time total: " + format_time(self_device_total) + "\n";
  return out;
}

}  // namespace kiln::profiler
