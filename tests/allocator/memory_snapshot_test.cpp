// memory_snapshot() and the per-pool statistics: after every step of a seeded
// random workload on the fake device (shared pools, a graph's private pool,
// frees awaiting other streams, empty_cache), the snapshot accounts for every
// reserved byte, its blocks tile their segments, and what it shows allocated,
// active and inactive-split is what the statistics say, in total and per
// pool. Then the JSON, the summary table, and (on a GPU) a compiled call.

#include "allocator/memory_snapshot.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "allocator/caching_allocator.h"
#include "allocator/fake_device_memory.h"
#include "allocator/memory_summary.h"
#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace kiln::alloc {
namespace {

constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;
constexpr StreamId kS1{0x1000, 0}, kS2{0x2000, 0};
constexpr PoolId kGraphPool = 7;

struct Totals {
  int64_t reserved = 0, allocated = 0, active = 0, inactive_split = 0, inactive_split_blocks = 0;
};

// What the snapshot shows, per pool key ("small", "large", or the private pool's id).
std::map<std::string, Totals> totals_of(const cuda::MemorySnapshot& snap) {
  std::map<std::string, Totals> t;
  for (const cuda::MemorySegment& s : snap.segments) {
    const std::string key = s.pool ? std::to_string(s.pool) : (s.is_small ? "small" : "large");
    Totals& k = t[key];
    Totals& all = t["all"];
    int64_t covered = 0;
    uint64_t next = s.address;
    for (const cuda::MemoryBlock& b : s.blocks) {
      EXPECT_EQ(b.address, next) << "blocks must tile their segment";
      next += static_cast<uint64_t>(b.size);
      covered += b.size;
      const bool split = s.blocks.size() > 1;
      for (Totals* x : {&k, &all}) {
        if (b.state == cuda::MemoryBlock::State::ActiveAllocated) x->allocated += b.size;
        if (b.state != cuda::MemoryBlock::State::Inactive) x->active += b.size;
        if (b.state == cuda::MemoryBlock::State::Inactive && split) {
          x->inactive_split += b.size;
          x->inactive_split_blocks += 1;
        }
      }
    }
    EXPECT_EQ(covered, s.total_size);
    EXPECT_LE(s.allocated_size, s.active_size);
    k.reserved += s.total_size;
    t["all"].reserved += s.total_size;
  }
  return t;
}

void expect_accounted(const DeviceCachingAllocator& a, const char* when) {
  SCOPED_TRACE(when);
  cuda::MemorySnapshot snap;
  append_snapshot(snap, a.snapshot(), 0);
  const CachingStats st = a.stats();
  auto t = totals_of(snap);
  EXPECT_EQ(t["all"].reserved, st.reserved_bytes[0].current) << "unaccounted reserved bytes";
  EXPECT_EQ(t["all"].allocated, st.allocated_bytes[0].current);
  EXPECT_EQ(t["all"].active, st.active_bytes[0].current);
  EXPECT_EQ(t["all"].inactive_split, st.inactive_split_bytes[0].current);
  EXPECT_EQ(t["all"].inactive_split_blocks, st.inactive_split[0].current);
  ASSERT_GE(st.pools.size(), 2u);
  for (const PoolStats& p : st.pools) {
    const std::string key = p.pool ? std::to_string(p.pool) : (p.is_small ? "small" : "large");
    SCOPED_TRACE(p.name());
    EXPECT_EQ(t[key].reserved, p.reserved_bytes.current);
    EXPECT_EQ(t[key].allocated, p.allocated_bytes.current);
    EXPECT_EQ(t[key].active, p.active_bytes.current);
    EXPECT_EQ(t[key].inactive_split, p.inactive_split_bytes.current);
    EXPECT_LE(p.allocated_bytes.current, p.allocated_bytes.peak);
    EXPECT_LE(p.reserved_bytes.current, p.reserved_bytes.peak);
  }
}

TEST(MemorySnapshot, AccountsForEveryReservedByteThroughARandomWorkload) {
  auto mem = std::make_unique<FakeDeviceMemory>(size_t{1} << 30);
  FakeDeviceMemory* fake = mem.get();
  DeviceCachingAllocator a(std::move(mem));
  std::mt19937_64 rng(16);
  std::vector<std::pair<void*, StreamId>> live;
  bool routed = false, pool_in_use = false;
  const size_t sizes[] = {1, 700, 64 * kKiB, 1 * kMiB, 1 * kMiB + 512, 3 * kMiB, 12 * kMiB};
  for (int step = 0; step < 400; ++step) {
    const int what = static_cast<int>(rng() % 10);
    if (what < 5 || live.empty()) {
      const StreamId s = rng() % 4 == 0 ? kS2 : kS1;
      live.emplace_back(a.allocate(sizes[rng() % 7] + (rng() % 3) * 512, s), s);
    } else if (what < 8) {
      const size_t k = rng() % live.size();
      if (rng() % 4 == 0) a.record_stream(live[k].first, live[k].second == kS1 ? kS2 : kS1);
      a.free(live[k].first);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (what == 8) {
      // A graph capture's pool: route kS1 to it, later stop and release it.
      if (!routed && !pool_in_use) {
        a.begin_allocate_to_pool(kGraphPool, kS1);
        routed = pool_in_use = true;
      } else if (routed) {
        a.end_allocate_to_pool(kGraphPool);
        routed = false;
      } else {
        a.release_pool(kGraphPool);
        pool_in_use = false;
      }
    } else {
      if (rng() % 2) fake->complete_all();
      if (rng() % 4 == 0) a.empty_cache();
    }
    expect_accounted(a, ("step " + std::to_string(step)).c_str());
    if (HasFailure()) return;
  }
  for (auto& [p, s] : live) a.free(p);
  fake->complete_all();
  if (routed) a.end_allocate_to_pool(kGraphPool);
  if (pool_in_use) a.release_pool(kGraphPool);
  expect_accounted(a, "all freed");
  a.empty_cache();
  expect_accounted(a, "emptied");
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
  EXPECT_EQ(a.stats().inactive_split_bytes[0].current, 0);
}

TEST(MemorySnapshot, JsonInPyTorchsLayoutAndPerPoolSummary) {
  auto mem = std::make_unique<FakeDeviceMemory>(64 * kMiB);
  DeviceCachingAllocator a(std::move(mem));
  void* p = a.allocate(1000, kS1);        // small: a 2 MiB segment, split
  void* q = a.allocate(300 * kKiB, kS1);  // the same segment
  a.free(p);                              // an inactive split block
  a.begin_allocate_to_pool(kGraphPool, kS1);
  void* g = a.allocate(5 * kMiB, kS1);  // the graph pool's large segment
  a.end_allocate_to_pool(kGraphPool);
  void* big = a.allocate(40 * kMiB, kS2);
  EXPECT_KILN_ERROR(a.allocate(40 * kMiB, kS2), "out of memory");  // a retry, then an OOM

  const CachingStats st = a.stats();
  // p's block (q keeps it from merging), the small segment's rest, and the
  // rest of the graph pool's 20 MiB segment.
  EXPECT_EQ(st.inactive_split_bytes[0].current,
            static_cast<int64_t>(2 * kMiB - 300 * kKiB + 15 * kMiB));
  EXPECT_EQ(st.inactive_split[0].current, 3);
  EXPECT_EQ(st.inactive_split_bytes[1].current, static_cast<int64_t>(2 * kMiB - 300 * kKiB));
  ASSERT_EQ(st.pools.size(), 3u);
  EXPECT_EQ(st.pools[0].name(), "small pool");
  EXPECT_EQ(st.pools[1].name(), "large pool");
  EXPECT_EQ(st.pools[2].name(), "graph pool 7");
  EXPECT_EQ(st.pools[1].alloc_retries, 1);
  EXPECT_EQ(st.pools[1].ooms, 1);
  EXPECT_EQ(st.pools[2].reserved_bytes.current, static_cast<int64_t>(20 * kMiB));
  EXPECT_EQ(st.pools[2].allocated_bytes.current, static_cast<int64_t>(5 * kMiB));

  cuda::MemorySnapshot snap;
  append_snapshot(snap, a.snapshot(), 0);
  const nlohmann::json j = nlohmann::json::parse(snap.to_json());
  ASSERT_TRUE(j.contains("segments") && j.contains("device_traces"));
  EXPECT_EQ(j["device_traces"].size(), 1u);
  int64_t reserved = 0;
  bool graph_segment = false, pending = false;
  for (const auto& s : j["segments"]) {
    for (const char* key :
         {"device", "address", "total_size", "allocated_size", "active_size", "requested_size",
          "stream", "segment_type", "segment_pool_id", "blocks"}) {
      EXPECT_TRUE(s.contains(key)) << key;
    }
    reserved += s["total_size"].get<int64_t>();
    graph_segment = graph_segment || s["segment_pool_id"][1] == kGraphPool;
    int64_t sum = 0;
    for (const auto& b : s["blocks"]) {
      const std::string state = b["state"];
      EXPECT_TRUE(state == "active_allocated" || state == "inactive" ||
                  state == "active_pending_free")
          << state;
      pending = pending || state == "active_pending_free";
      sum += b["size"].get<int64_t>();
    }
    EXPECT_EQ(sum, s["total_size"].get<int64_t>());
    EXPECT_TRUE(s["segment_type"] == "small" || s["segment_type"] == "large");
  }
  EXPECT_EQ(reserved, st.reserved_bytes[0].current);
  EXPECT_TRUE(graph_segment);
  EXPECT_FALSE(pending);

  const std::string table = format_memory_summary(st, "fake:0", 64 * kMiB, 0, 0);
  for (const char* part : {"Non-releasable memory", "Non-releasable allocs", "Per pool",
                           "graph pool 7: 1 segments, 1 allocations, alloc retries 0, OOMs 0",
                           "large pool: 1 segments, 1 allocations, alloc retries 1, OOMs 1"}) {
    EXPECT_NE(table.find(part), std::string::npos) << part << "\n" << table;
  }
  a.reset_peak_stats();
  for (const PoolStats& ps : a.stats().pools) {
    EXPECT_EQ(ps.allocated_bytes.peak, ps.allocated_bytes.current) << ps.name();
  }
  a.free(q);
  a.free(g);
  a.free(big);
  a.release_pool(kGraphPool);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
}

// On a GPU: after a compiled call (warm-up, capture into a graph pool,
// replays), the snapshot accounts for every reserved byte.
TEST(MemorySnapshot, AfterACompiledCallOnCuda) {
  KILN_REQUIRE_CUDA();
  auto f = kiln::jit::compile(
      [](const Tensor& x, const Tensor& w) { return kiln::gelu(kiln::matmul(x, w) + 1.0); },
      {.name = "snap"});
  Tensor x = kiln::randn({64, 256}).to(kiln::Device::cuda());
  Tensor w = kiln::randn({256, 512}).to(kiln::Device::cuda());
  Tensor y;
  for (int i = 0; i < 3; ++i) y = f(x, w);
  kiln::cuda::synchronize();
  ASSERT_GT(f.stats().graph_nodes, 0) << "expected the call to replay a CUDA graph";
  const cuda::MemorySnapshot snap = cuda::memory_snapshot();
  const cuda::MemoryStats st = cuda::memory_stats();
  int64_t reserved = 0, allocated = 0;
  bool graph_pool = false;
  std::map<uint64_t, int64_t> per_pool;
  for (const cuda::MemorySegment& s : snap.segments) {
    if (s.device != 0) continue;
    reserved += s.total_size;
    allocated += s.allocated_size;
    graph_pool = graph_pool || s.pool != 0;
    if (s.pool) per_pool[s.pool] += s.total_size;
  }
  EXPECT_EQ(reserved, st.reserved_bytes[0].current);
  EXPECT_EQ(allocated, st.allocated_bytes[0].current);
  EXPECT_TRUE(graph_pool) << "the graph's private pool is missing from the snapshot";
  for (const cuda::PoolMemoryStats& p : st.pools) {
    if (p.pool) {
      EXPECT_EQ(per_pool[p.pool], p.reserved_bytes.current) << p.name;
    }
  }
  EXPECT_NE(cuda::memory_summary().find("graph pool"), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(snap.to_json());
  EXPECT_EQ(j["segments"].size(), snap.segments.size());
}

}  // namespace
}  // namespace kiln::alloc
