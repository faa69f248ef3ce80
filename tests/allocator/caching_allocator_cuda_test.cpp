// The caching allocator on a real device: statistics, empty_cache, the
// memory-fraction cap, out-of-memory errors and recovery, streams. Skips without a GPU.

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace kiln::cuda {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

Tensor device_bytes(int64_t n) {
  return empty({n}, TensorOptions(kUInt8).device(Device::cuda()));
}

TEST(CudaAllocator, StatsAndEmptyCache) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  empty_cache();
  MemoryStats before = memory_stats();
  {
    Tensor small = device_bytes(1000);       // 1024 B block in a 2 MiB segment
    Tensor large = device_bytes(30 * kMiB);  // its own 30 MiB segment
    MemoryStats s = memory_stats();
    EXPECT_EQ(s.allocated_bytes[0].current - before.allocated_bytes[0].current, 1024 + 30 * kMiB);
    EXPECT_EQ(s.allocated_bytes[1].current - before.allocated_bytes[1].current, 1024);
    EXPECT_GE(s.reserved_bytes[0].current - before.reserved_bytes[0].current, 30 * kMiB);
    EXPECT_EQ(s.allocations[0].current - before.allocations[0].current, 2);
    EXPECT_GE(s.allocated_bytes[0].peak, s.allocated_bytes[0].current);
  }
  MemoryStats cached = memory_stats();
  EXPECT_EQ(cached.allocated_bytes[0].current, before.allocated_bytes[0].current);
  EXPECT_GE(cached.reserved_bytes[0].current, before.reserved_bytes[0].current + 30 * kMiB);
  // The block comes back from the cache: no new segment.
  { Tensor again = device_bytes(30 * kMiB); }
  EXPECT_EQ(memory_stats().segments[0].allocated, cached.segments[0].allocated);
  empty_cache();
  MemoryStats after = memory_stats();
  EXPECT_LE(after.reserved_bytes[0].current, before.reserved_bytes[0].current);
  EXPECT_LT(after.reserved_bytes[0].current, cached.reserved_bytes[0].current);
  std::string summary = memory_summary();
  EXPECT_NE(summary.find("kiln memory summary, cuda:0"), std::string::npos) << summary;
  EXPECT_NE(summary.find("Reserved memory"), std::string::npos) << summary;
  reset_peak_memory_stats();
  EXPECT_EQ(memory_stats().allocated_bytes[0].peak, memory_stats().allocated_bytes[0].current);
}

TEST(CudaAllocator, FractionCapRaisesOomAndRecovers) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  empty_cache();
  const int64_t total = device_total_memory(0);
  const int64_t reserved = memory_stats().reserved_bytes[0].current;
  // A cap 256 MiB above what kiln holds now.
  const double fraction = static_cast<double>(reserved + 256 * kMiB) / static_cast<double>(total);
  set_memory_fraction(fraction);
  const int64_t ooms = memory_stats().num_ooms;
  {
    Tensor a = device_bytes(200 * kMiB);
    EXPECT_KILN_ERROR(device_bytes(200 * kMiB), "out of memory on cuda:0");
    try {
      device_bytes(100 * kMiB);
      ADD_FAILURE() << "expected out of memory";
    } catch (const Error& e) {
      std::string m = e.what();
      for (const char* part : {"tried to allocate 100.00 MiB", "total", "free", "allocated",
                               "reserved but unused", "set_memory_fraction("}) {
        EXPECT_NE(m.find(part), std::string::npos) << part << " not in: " << m;
      }
    }
    EXPECT_EQ(memory_stats().num_ooms, ooms + 2);
    Tensor b = device_bytes(20 * kMiB);  // still fits under the cap
    b.fill_(3);
    EXPECT_EQ(b.select(0, 0).item().to<int64_t>(), 3);
  }
  Tensor c = device_bytes(200 * kMiB);  // a's memory is back
  set_memory_fraction(1.0);
  Tensor d = device_bytes(300 * kMiB);
  d.fill_(1);
  EXPECT_EQ(d.select(0, 300 * kMiB - 1).item().to<int64_t>(), 1);
}

TEST(CudaAllocator, RealOutOfMemoryRecovers) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  const int64_t total = device_total_memory(0);
  EXPECT_KILN_ERROR(device_bytes(2 * total), "out of memory on cuda:0");
  Tensor ok = device_bytes(kMiB);
  ok.fill_(7);
  EXPECT_EQ(ok.select(0, 5).item().to<int64_t>(), 7);
}

TEST(CudaAllocator, CrossStreamUseDelaysReuse) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  empty_cache();  // no cached block of another test competes for best fit
  Stream side = Stream::from_pool();
  void* first = nullptr;
  {
    Tensor t = device_bytes(4 * kMiB);
    first = t.data_ptr();
    {
      StreamGuard g(side);
      t.fill_(1);  // used on the side stream
    }
    record_stream(t, side);
  }
  MemoryStats s = memory_stats();
  // Freed, but until the side stream's event is seen the block stays active.
  EXPECT_GE(s.active_bytes[0].current - s.allocated_bytes[0].current, 4 * kMiB);
  side.synchronize();
  Tensor u = device_bytes(4 * kMiB);  // allocation processes the event: the block is reusable
  EXPECT_EQ(u.data_ptr(), first);
  MemoryStats s2 = memory_stats();
  EXPECT_EQ(s2.active_bytes[0].current, s2.allocated_bytes[0].current);
  // Memory allocated under a guard belongs to that stream's cache.
  Tensor v;
  {
    StreamGuard g(side);
    v = device_bytes(4 * kMiB);
  }
  EXPECT_NE(v.data_ptr(), u.data_ptr());
}

}  // namespace
}  // namespace kiln::cuda
