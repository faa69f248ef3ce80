#include "allocator/memory_summary.h"

#include <cinttypes>
#include <cstdio>
#include <sstream>

namespace kiln::alloc {

// Note [Memory summary]
// One row per statistic and pool kind, columns as PyTorch's memory_summary()
// has them (current, peak, total allocated, total freed), so users who know
// that table read this one at a glance. Byte rows print human units; block
// and segment rows print counts. "Non-releasable" rows are PyTorch's names
// for the inactive split blocks (Note [Inactive split blocks]). Below, per
// pool (the shared small and large pools and every CUDA graph's private
// pool): current and peak allocated, reserved, active and inactive-split
// bytes, its segments, allocations, retries and OOMs.

std::string format_bytes(int64_t bytes) {
  const char* sign = bytes < 0 ? "-" : "";
  uint64_t b = bytes < 0 ? static_cast<uint64_t>(-(bytes + 1)) + 1 : static_cast<uint64_t>(bytes);
  char buf[48];
  if (b < 1024) {
    std::snprintf(buf, sizeof buf, "%s%" PRIu64 " B", sign, b);
    return buf;
  }
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(b) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  std::snprintf(buf, sizeof buf, "%s%.2f %s", sign, v, units[u]);
  return buf;
}

namespace {

constexpr int kWidth = 75;  // inside the outer bars

std::string rule(char c) {
  return "|" + std::string(kWidth, c) + "|\n";
}

std::string line(const std::string& text) {
  std::string t = text.substr(0, kWidth - 1);
  return "| " + t + std::string(kWidth - 1 - t.size(), ' ') + "|\n";
}

std::string cell(const std::string& v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, " %10s |", v.c_str());
  return buf;
}

void rows(std::ostringstream& os, const char* title, const Stat (&stat)[kNumPoolKinds],
          bool bytes) {
  auto fmt = [&](int64_t v) { return bytes ? format_bytes(v) : std::to_string(v); };
  const char* names[kNumPoolKinds] = {title, "      from small pool", "      from large pool"};
  for (int k = 0; k < kNumPoolKinds; ++k) {
    std::string name = names[k];
    name.resize(22, ' ');
    const Stat& s = stat[k];
    os << "| " << name << "|" << cell(fmt(s.current)) << cell(fmt(s.peak)) << cell(fmt(s.allocated))
       << cell(fmt(s.freed)) << "\n";
  }
  os << rule('-');
}

}  // namespace

std::string format_memory_summary(const CachingStats& s, const std::string& device, size_t total,
                                  size_t free_bytes, size_t cap) {
  std::ostringstream os;
  os << rule('=');
  os << line("kiln memory summary, " + device);
  os << rule('-');
  os << line("device: " + format_bytes(static_cast<int64_t>(total)) + " total, " +
             format_bytes(static_cast<int64_t>(free_bytes)) + " free; reserved-memory cap: " +
             (cap ? format_bytes(static_cast<int64_t>(cap)) : std::string("none")));
  os << line("alloc retries: " + std::to_string(s.num_alloc_retries) +
             "   OOMs: " + std::to_string(s.num_ooms) +
             "   device allocs: " + std::to_string(s.num_device_allocs) +
             "   device frees: " + std::to_string(s.num_device_frees));
  os << rule('=');
  std::string metric = "Metric";
  metric.resize(22, ' ');
  os << "| " << metric << "|" << cell("Cur Usage") << cell("Peak Usage") << cell("Tot Alloc")
     << cell("Tot Freed") << "\n";
  os << rule('-');
  rows(os, "Allocated memory", s.allocated_bytes, true);
  rows(os, "Active memory", s.active_bytes, true);
  rows(os, "Reserved memory", s.reserved_bytes, true);
  rows(os, "Allocations", s.allocations, false);
  rows(os, "Active blocks", s.active_blocks, false);
  rows(os, "Segments", s.segments, false);
  rows(os, "Non-releasable memory", s.inactive_split_bytes, true);
  rows(os, "Non-releasable allocs", s.inactive_split, false);
  os << line("Per pool (current / peak)");
  os << rule('-');
  for (const PoolStats& p : s.pools) {
    os << line(p.name() + ": " + std::to_string(p.segments.current) + " segments, " +
               std::to_string(p.allocations.current) + " allocations, alloc retries " +
               std::to_string(p.alloc_retries) + ", OOMs " + std::to_string(p.ooms));
    auto pair = [](const Stat& st) {
      return format_bytes(st.current) + " / " + format_bytes(st.peak);
    };
    os << line("  allocated " + pair(p.allocated_bytes) + ", reserved " + pair(p.reserved_bytes));
    os << line("  active " + pair(p.active_bytes) + ", inactive split " +
               pair(p.inactive_split_bytes));
  }
  os << rule('=');
  return os.str();
}

}  // namespace kiln::alloc
