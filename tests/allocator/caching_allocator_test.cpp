// The caching allocator's policy on the fake device: every pointer and every
// statistic checked against an independent model (allocator_model.h), plus the
// cases a model run does not reach (private pools, OOM, the memory cap).

#include "allocator/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "allocator/fake_device_memory.h"
#include "allocator/memory_summary.h"
#include "tests/allocator/allocator_model.h"
#include "tests/support/testing.h"

namespace kiln::alloc {
namespace {

constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;
constexpr StreamId kS1{0x1000, 0}, kS2{0x2000, 0}, kS3{0x3000, 0};

struct Fixture {
  explicit Fixture(size_t capacity = size_t{8} << 30) {
    auto mem = std::make_unique<FakeDeviceMemory>(capacity);
    fake = mem.get();
    alloc = std::make_unique<DeviceCachingAllocator>(std::move(mem));
  }
  FakeDeviceMemory* fake;
  std::unique_ptr<DeviceCachingAllocator> alloc;
};

TEST(CachingAllocator, RoundingAndSegmentSizes) {
  EXPECT_EQ(round_request(1), 512u);
  EXPECT_EQ(round_request(512), 512u);
  EXPECT_EQ(round_request(513), 1024u);
  EXPECT_EQ(segment_size(512), 2 * kMiB);
  EXPECT_EQ(segment_size(kMiB), 2 * kMiB);
  EXPECT_EQ(segment_size(kMiB + 512), 20 * kMiB);
  EXPECT_EQ(segment_size(10 * kMiB - 512), 20 * kMiB);
  EXPECT_EQ(segment_size(10 * kMiB), 10 * kMiB);
  EXPECT_EQ(segment_size(10 * kMiB + 512), 12 * kMiB);
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(20 * static_cast<int64_t>(kMiB)), "20.00 MiB");
}

TEST(CachingAllocator, PoolsAndSplitting) {
  Fixture f;
  auto& a = *f.alloc;
  void* p = a.allocate(1, kS1);  // small: a 2 MiB segment, split
  EXPECT_EQ(a.block_size(p), 512u);
  void* q = a.allocate(kMiB, kS1);  // small, from the rest of the same segment
  EXPECT_EQ(static_cast<char*>(q), static_cast<char*>(p) + 512);
  void* r = a.allocate(19 * kMiB, kS1);  // ≥ 10 MiB: a 20 MiB segment; the 1 MiB rest stays on
  EXPECT_EQ(a.block_size(r), 20 * kMiB);
  void* t = a.allocate(11 * kMiB, kS1);  // 12 MiB segment, 1 MiB rest not split
  EXPECT_EQ(a.block_size(t), 12 * kMiB);
  void* s = a.allocate(5 * kMiB, kS1);  // < 10 MiB: a 20 MiB segment, the 15 MiB rest split off
  EXPECT_EQ(a.block_size(s), 5 * kMiB);
  void* u = a.allocate(9 * kMiB, kS1);  // best fit: the 15 MiB rest, split again
  EXPECT_EQ(static_cast<char*>(u), static_cast<char*>(s) + 5 * kMiB);
  EXPECT_EQ(a.block_size(u), 9 * kMiB);
  CachingStats st = a.stats();
  EXPECT_EQ(st.segments[0].current, 4);
  EXPECT_EQ(st.segments[1].current, 1);
  EXPECT_EQ(st.reserved_bytes[1].current, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(st.reserved_bytes[2].current, static_cast<int64_t>(52 * kMiB));
  EXPECT_EQ(st.allocated_bytes[1].current, static_cast<int64_t>(512 + kMiB));
  EXPECT_EQ(st.allocated_bytes[2].current, static_cast<int64_t>(46 * kMiB));
  EXPECT_EQ(st.allocated_bytes[0].current, static_cast<int64_t>(47 * kMiB + 512));
  auto log = f.fake->log();
  ASSERT_EQ(log.allocs.size(), 4u);
  EXPECT_EQ(log.allocs[2].second, 12 * kMiB);
  for (void* x : {p, q, r, s, t, u}) a.free(x);
  EXPECT_EQ(a.stats().allocated_bytes[0].current, 0);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
  EXPECT_EQ(f.fake->used(), 0u);
}

TEST(CachingAllocator, ReuseAndCoalescing) {
  Fixture f;
  auto& a = *f.alloc;
  void* x = a.allocate(4 * kKiB, kS1);
  void* y = a.allocate(4 * kKiB, kS1);
  void* z = a.allocate(4 * kKiB, kS1);
  a.free(y);
  EXPECT_EQ(a.allocate(3 * kKiB, kS1), y);  // best fit reuses the hole, splits it
  a.free(y);
  a.free(x);
  a.free(z);  // x, y, z and the rest merge into the whole segment again
  auto snap = a.snapshot();
  ASSERT_EQ(snap.size(), 1u);
  ASSERT_EQ(snap[0].blocks.size(), 1u);
  EXPECT_EQ(snap[0].blocks[0].size, 2 * kMiB);
  // Another stream never gets a block cached for kS1.
  void* w = a.allocate(4 * kKiB, kS2);
  EXPECT_NE(w, x);
  EXPECT_EQ(a.stats().segments[0].current, 2);
  a.free(w);
}

TEST(CachingAllocator, CrossStreamReuseWaitsForEvents) {
  Fixture f;
  auto& a = *f.alloc;
  void* p = a.allocate(64 * kKiB, kS1);
  EXPECT_TRUE(a.record_stream(p, kS2));
  EXPECT_TRUE(a.record_stream(p, kS1));  // its own stream needs no event
  EXPECT_FALSE(a.record_stream(reinterpret_cast<void*>(0x10), kS2));
  a.free(p);
  EXPECT_EQ(f.fake->log().events_recorded, 1);
  CachingStats st = a.stats();
  EXPECT_EQ(st.allocated_bytes[0].current, 0);
  EXPECT_EQ(st.active_bytes[0].current, static_cast<int64_t>(64 * kKiB));
  void* q = a.allocate(64 * kKiB, kS1);  // kS2 may still read p: not reused
  EXPECT_NE(q, p);
  a.free(q);
  f.fake->complete_stream(kS2);
  void* r = a.allocate(64 * kKiB, kS1);  // the event completed: p comes back
  EXPECT_EQ(r, p);
  EXPECT_EQ(f.fake->log().events_live, 0);
  EXPECT_EQ(f.fake->log().events_synchronized, 0);
  // empty_cache waits for pending events instead.
  a.record_stream(r, kS3);
  a.free(r);
  a.empty_cache();
  EXPECT_EQ(f.fake->log().events_synchronized, 1);
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
}

TEST(CachingAllocator, EmptyCacheReturnsExactlyWholeFreeSegments) {
  Fixture f;
  auto& a = *f.alloc;
  std::vector<void*> keep, drop;
  for (int i = 0; i < 6; ++i) {
    keep.push_back(a.allocate(3 * kMiB, kS1));   // 20 MiB segments, split
    drop.push_back(a.allocate(12 * kMiB, kS2));  // whole 12 MiB segments
    drop.push_back(a.allocate(100 * kKiB, kS3));
  }
  for (void* p : drop) a.free(p);
  std::set<uintptr_t> expected;
  for (const auto& s : a.snapshot()) {
    if (s.blocks.size() == 1 && !s.blocks[0].allocated) expected.insert(s.address);
  }
  EXPECT_FALSE(expected.empty());
  const size_t frees_before = f.fake->log().frees.size();
  a.empty_cache();
  auto log = f.fake->log();
  std::set<uintptr_t> freed(log.frees.begin() + static_cast<long>(frees_before), log.frees.end());
  EXPECT_EQ(freed, expected);
  for (const auto& s : a.snapshot()) EXPECT_EQ(expected.count(s.address), 0u);
  for (void* p : keep) a.free(p);
}

TEST(CachingAllocator, PrivatePools) {
  Fixture f;
  auto& a = *f.alloc;
  a.begin_allocate_to_pool(7, kS1);
  void* g = a.allocate(256 * kKiB, kS1);
  void* other = a.allocate(256 * kKiB, kS2);  // kS2 is not routed to the pool
  a.end_allocate_to_pool(7);
  a.free(g);
  a.free(other);
  void* outside = a.allocate(256 * kKiB, kS1);  // the shared pool never sees the pool's block
  EXPECT_NE(outside, g);
  a.empty_cache();  // the live pool keeps its segment
  bool found = false;
  for (const auto& s : a.snapshot()) found |= s.pool == 7;
  EXPECT_TRUE(found);
  a.begin_allocate_to_pool(7, kS1);  // a second user
  void* again = a.allocate(256 * kKiB, kS1);
  EXPECT_EQ(again, g);
  void* big = a.allocate(30 * kMiB, kS1);
  a.end_allocate_to_pool(7);
  a.free(again);
  const int64_t reserved = a.stats().reserved_bytes[0].current;
  a.release_pool(7);  // one user left: nothing goes back
  EXPECT_EQ(a.stats().reserved_bytes[0].current, reserved);
  a.release_pool(7);  // no users: the whole free segment goes at once...
  EXPECT_EQ(a.stats().reserved_bytes[0].current, reserved - static_cast<int64_t>(2 * kMiB));
  a.free(big);  // ...and the big one when its block comes home
  EXPECT_EQ(a.stats().reserved_bytes[0].current, reserved - static_cast<int64_t>(32 * kMiB));
  for (const auto& s : a.snapshot()) EXPECT_NE(s.pool, 7u);
  EXPECT_KILN_ERROR(a.release_pool(7), "expected a pool in use");
  EXPECT_KILN_ERROR(a.end_allocate_to_pool(7), "to be active");
  a.free(outside);
}

// Note [Private pools]: while a pool takes allocations, what is freed is
// held back, so no two allocations of one capture share an address; at the
// end it returns to the pool for the next capture.
TEST(CachingAllocator, PrivatePoolHoldsFreedBlocksUntilTheCaptureEnds) {
  Fixture f;
  auto& a = *f.alloc;
  a.begin_allocate_to_pool(3, kS1);
  void* scratch = a.allocate(64 * kKiB, kS1);
  a.free(scratch);
  void* result = a.allocate(64 * kKiB, kS1);
  EXPECT_NE(result, scratch);
  void* big = a.allocate(12 * kMiB, kS1);
  a.free(big);
  void* big2 = a.allocate(12 * kMiB, kS1);
  EXPECT_NE(big2, big);
  a.end_allocate_to_pool(3);
  a.begin_allocate_to_pool(3, kS1);  // the next capture reuses what the last one freed
  EXPECT_EQ(a.allocate(64 * kKiB, kS1), scratch);
  a.end_allocate_to_pool(3);
  a.free(scratch);
  a.free(result);
  a.free(big2);
  a.release_pool(3);
  a.release_pool(3);
  for (const auto& s : a.snapshot()) EXPECT_NE(s.pool, 3u);
  EXPECT_EQ(a.stats().allocated_bytes[0].current, 0);
}

TEST(CachingAllocator, OomFreesCacheRetriesThenThrowsAndRecovers) {
  Fixture f(64 * kMiB);
  auto& a = *f.alloc;
  void* p = a.allocate(40 * kMiB, kS1);
  a.free(p);                             // cached
  void* q = a.allocate(50 * kMiB, kS1);  // fails, frees the cache, succeeds
  CachingStats st = a.stats();
  EXPECT_EQ(st.num_alloc_retries, 1);
  EXPECT_EQ(st.num_ooms, 0);
  EXPECT_EQ(st.reserved_bytes[0].current, static_cast<int64_t>(50 * kMiB));
  try {
    a.allocate(30 * kMiB, kS1);
    ADD_FAILURE() << "expected an out-of-memory error";
  } catch (const Error& e) {
    std::string m = e.what();
    for (const char* part :
         {"out of memory on fake:0", "tried to allocate 30.00 MiB", "64.00 MiB total",
          "14.00 MiB free", "50.00 MiB allocated", "0 B reserved but unused"}) {
      EXPECT_NE(m.find(part), std::string::npos) << part << " not in: " << m;
    }
  }
  st = a.stats();
  EXPECT_EQ(st.num_ooms, 1);
  EXPECT_EQ(st.num_alloc_retries, 2);
  EXPECT_EQ(st.allocated_bytes[0].current, static_cast<int64_t>(50 * kMiB));
  a.free(q);
  void* r = a.allocate(30 * kMiB, kS1);  // the process goes on
  EXPECT_NE(r, nullptr);
  a.free(r);
}

TEST(CachingAllocator, MemoryFractionCapsReserved) {
  Fixture f(size_t{1} << 30);
  auto& a = *f.alloc;
  EXPECT_KILN_ERROR(a.set_memory_fraction(1.5), "expected a fraction in [0, 1]");
  a.set_memory_fraction(0.1);  // 102.4 MiB
  void* p = a.allocate(60 * kMiB, kS1);
  EXPECT_KILN_ERROR(a.allocate(60 * kMiB, kS1), "set_memory_fraction(0.1)");
  EXPECT_EQ(a.stats().num_ooms, 1);
  EXPECT_EQ(f.fake->used(), 60 * kMiB);  // the device was not asked
  void* small = a.allocate(kKiB, kS1);   // under the cap still works
  a.set_memory_fraction(1.0);
  void* q = a.allocate(60 * kMiB, kS1);
  for (void* x : {p, small, q}) a.free(x);
}

TEST(CachingAllocator, SummaryAndPeaks) {
  Fixture f;
  auto& a = *f.alloc;
  void* p = a.allocate(3 * kMiB, kS1);
  void* q = a.allocate(kKiB, kS1);
  a.free(p);
  std::string s = a.memory_summary();
  for (const char* part :
       {"kiln memory summary, fake:0", "Allocated memory", "from small pool", "from large pool",
        "Reserved memory", "Segments", "20.00 MiB", "OOMs: 0"}) {
    EXPECT_NE(s.find(part), std::string::npos) << part << " not in:\n" << s;
  }
  EXPECT_EQ(a.stats().allocated_bytes[0].peak, static_cast<int64_t>(3 * kMiB + kKiB));
  a.reset_peak_stats();
  EXPECT_EQ(a.stats().allocated_bytes[0].peak, static_cast<int64_t>(kKiB));
  a.free(q);
}

// Random alloc / free / record_stream / event completion / empty_cache on three
// streams; after every step pointers and all statistics match the model.
TEST(CachingAllocator, RandomSequencesMatchModel) {
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Fixture f;
    auto& a = *f.alloc;
    testing::AllocatorModel model;
    std::mt19937_64 rng(seed);
    const StreamId streams[] = {kS1, kS2, kS3};
    struct Live {
      void* ptr;
      size_t nbytes;
      int tag;
    };
    std::vector<Live> live;
    int64_t peaks[6][3] = {};
    int reused = 0, new_segments = 0, empties = 0;
    auto check_stats = [&](int step) {
      auto n = model.now();
      CachingStats st = a.stats();
      const int64_t* cur[6] = {n.allocated,   n.reserved, n.active,
                               n.allocations, n.segments, n.active_blocks};
      const Stat* got[6] = {st.allocated_bytes, st.reserved_bytes, st.active_bytes,
                            st.allocations,     st.segments,       st.active_blocks};
      for (int m = 0; m < 6; ++m) {
        for (int k = 0; k < 3; ++k) {
          peaks[m][k] = std::max(peaks[m][k], cur[m][k]);
          ASSERT_EQ(got[m][k].current, cur[m][k])
              << "stat " << m << " kind " << k << " step " << step;
          ASSERT_EQ(got[m][k].peak, peaks[m][k])
              << "peak " << m << " kind " << k << " step " << step;
        }
      }
      ASSERT_EQ(st.allocated_bytes[0].allocated, model.allocated_total());
      ASSERT_EQ(st.allocated_bytes[0].freed, model.freed_total());
      ASSERT_EQ(st.reserved_bytes[0].allocated, model.reserved_total());
      ASSERT_EQ(st.reserved_bytes[0].freed, model.reserved_freed());
      ASSERT_EQ(static_cast<int64_t>(f.fake->used()), n.reserved[0]);
    };
    for (int step = 0; step < 1500; ++step) {
      const int op = static_cast<int>(rng() % 100);
      if (op < 45 || live.empty()) {
        size_t n;
        int kind = static_cast<int>(rng() % 10);
        if (kind < 6)
          n = 8 + rng() % (64 * kKiB);
        else if (kind < 8)
          n = 1 + rng() % kMiB;
        else if (kind < 9)
          n = kMiB + 1 + rng() % (12 * kMiB);
        else
          n = 10 * kMiB + rng() % (20 * kMiB);
        StreamId s = streams[rng() % 3];
        auto pred = model.predict(n, s);
        const size_t allocs_before = f.fake->log().allocs.size();
        void* p = a.allocate(n, s);
        auto log = f.fake->log();
        if (pred.found) {
          ASSERT_EQ(log.allocs.size(), allocs_before) << "step " << step;
          ASSERT_EQ(reinterpret_cast<uintptr_t>(p), pred.ptr) << "step " << step;
          ++reused;
        } else {
          ASSERT_EQ(log.allocs.size(), allocs_before + 1) << "step " << step;
          ASSERT_EQ(log.allocs.back().second, pred.new_segment_size) << "step " << step;
          ASSERT_EQ(reinterpret_cast<uintptr_t>(p), log.allocs.back().first);
          ++new_segments;
          model.add_segment(log.allocs.back().first, pred.new_segment_size, s,
                            testing::AllocatorModel::round(n) <= kMiB);
        }
        model.take(reinterpret_cast<uintptr_t>(p), n);
        ASSERT_EQ(a.block_size(p) >= n, true);
        // Tag both ends: a later overlap would overwrite a tag.
        std::memcpy(p, &step, sizeof step);
        static_cast<char*>(p)[n - 1] = static_cast<char>(step);
        live.push_back({p, n, step});
      } else if (op < 85) {
        size_t i = rng() % live.size();
        Live l = live[i];
        live.erase(live.begin() + static_cast<long>(i));
        int tag = -1;
        std::memcpy(&tag, l.ptr, sizeof tag);
        ASSERT_EQ(tag, l.tag) << "another block overlapped this one";
        ASSERT_EQ(static_cast<char*>(l.ptr)[l.nbytes - 1], static_cast<char>(l.tag));
        a.free(l.ptr);
        model.free(reinterpret_cast<uintptr_t>(l.ptr));
      } else if (op < 93) {
        Live& l = live[rng() % live.size()];
        StreamId s = streams[rng() % 3];
        a.record_stream(l.ptr, s);
        model.record_stream(reinterpret_cast<uintptr_t>(l.ptr), s);
      } else if (op < 99) {
        StreamId s = streams[rng() % 3];
        f.fake->complete_stream(s);
        model.complete_stream(s);
      } else {
        const size_t frees_before = f.fake->log().frees.size();
        std::set<uintptr_t> expected = model.empty_cache();
        a.empty_cache();
        auto log = f.fake->log();
        std::set<uintptr_t> freed(log.frees.begin() + static_cast<long>(frees_before),
                                  log.frees.end());
        ASSERT_EQ(freed, expected) << "step " << step;
        empties += !expected.empty();
      }
      check_stats(step);
      if (::testing::Test::HasFatalFailure()) return;
    }
    EXPECT_GT(reused, 300);
    EXPECT_GT(new_segments, 10);
    EXPECT_GT(empties, 3);
    EXPECT_GT(f.fake->log().events_recorded, 20);
    // Live blocks never overlap.
    std::sort(live.begin(), live.end(), [](const Live& x, const Live& y) { return x.ptr < y.ptr; });
    for (size_t i = 1; i < live.size(); ++i) {
      ASSERT_LE(static_cast<char*>(live[i - 1].ptr) + live[i - 1].nbytes,
                static_cast<char*>(live[i].ptr));
    }
    for (auto& l : live) a.free(l.ptr);
    a.empty_cache();
    EXPECT_EQ(f.fake->used(), 0u);
    EXPECT_EQ(f.fake->log().events_live, 0);
  }
}

TEST(CachingAllocator, ThreadsOnTheirOwnStreams) {
  Fixture f;
  auto& a = *f.alloc;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a, t] {
      std::mt19937_64 rng(100 + t);
      StreamId s{static_cast<uintptr_t>(0x100 * (t + 1)), 0};
      std::vector<std::pair<void*, size_t>> mine;
      for (int i = 0; i < 2000; ++i) {
        if (mine.empty() || rng() % 2) {
          size_t n = 1 + rng() % (rng() % 8 == 0 ? 4 * kMiB : 32 * kKiB);
          char* p = static_cast<char*>(a.allocate(n, s));
          std::memset(p, t + 1, std::min<size_t>(n, 64));
          mine.emplace_back(p, n);
        } else {
          size_t k = rng() % mine.size();
          auto [p, n] = mine[k];
          for (size_t j = 0; j < std::min<size_t>(n, 64); ++j) {
            if (static_cast<char*>(p)[j] != t + 1) std::abort();  // another thread wrote here
          }
          a.free(p);
          mine.erase(mine.begin() + static_cast<long>(k));
        }
      }
      for (auto& [p, n] : mine) a.free(p);
    });
  }
  for (auto& th : threads) th.join();
  CachingStats st = a.stats();
  EXPECT_EQ(st.allocated_bytes[0].current, 0);
  EXPECT_EQ(st.allocations[0].current, 0);
  EXPECT_GT(st.allocations[0].peak, 4);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[0].current, 0);
  EXPECT_EQ(f.fake->used(), 0u);
}

}  // namespace
}  // namespace kiln::alloc
