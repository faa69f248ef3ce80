#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "allocator/allocator.h"

namespace {

using kiln::alloc::cpu_allocator;
using kiln::alloc::DataPtr;

void release(DataPtr& p) {
  if (p.deleter) p.deleter(p.ctx, p.ptr);
  p = DataPtr{};
}

TEST(CpuAllocator, AlignedAndStatsBalance) {
  auto& a = cpu_allocator();
  auto before = a.stats();
  std::vector<DataPtr> blocks;
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    size_t n = 1 + rng() % (3u << 20);
    blocks.push_back(a.allocate(n));
    ASSERT_NE(blocks.back().ptr, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks.back().ptr) % 64, 0u) << "size " << n;
    // Writing the whole request must be safe (ASan checks the bound).
    std::memset(blocks.back().ptr, 0xab, n);
  }
  auto mid = a.stats();
  EXPECT_GT(mid.allocated_bytes.current, before.allocated_bytes.current);
  EXPECT_EQ(mid.active_blocks.current - before.active_blocks.current, 500);
  EXPECT_GE(mid.allocated_bytes.peak, mid.allocated_bytes.current);
  EXPECT_GE(mid.reserved_bytes.current, mid.allocated_bytes.current);
  for (auto& b : blocks) release(b);
  auto after = a.stats();
  EXPECT_EQ(after.allocated_bytes.current, before.allocated_bytes.current);
  EXPECT_EQ(after.active_blocks.current, before.active_blocks.current);
  EXPECT_EQ(after.allocated_bytes.allocated - before.allocated_bytes.allocated,
            after.allocated_bytes.freed - before.allocated_bytes.freed);
}

TEST(CpuAllocator, ReusesFreedBlocksOfTheSameClass) {
  auto& a = cpu_allocator();
  DataPtr p = a.allocate(1000);
  void* first = p.ptr;
  release(p);
  DataPtr q = a.allocate(1000);
  EXPECT_EQ(q.ptr, first);  // the thread cache hands the block straight back
  release(q);
}

TEST(CpuAllocator, CrossThreadFreesAndThreadExitKeepStatsExact) {
  auto& a = cpu_allocator();
  auto before = a.stats();
  std::vector<DataPtr> blocks(2000);
  std::thread producer([&] {
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = a.allocate(64 + (i % 97) * 32);
  });
  producer.join();  // its cache is flushed as it exits
  std::vector<std::thread> consumers;
  for (int t = 0; t < 4; ++t) {
    consumers.emplace_back([&, t] {
      for (size_t i = t; i < blocks.size(); i += 4) release(blocks[i]);
    });
  }
  for (auto& t : consumers) t.join();
  auto after = a.stats();
  EXPECT_EQ(after.allocated_bytes.current, before.allocated_bytes.current);
  EXPECT_EQ(after.active_blocks.current, before.active_blocks.current);
}

TEST(CpuAllocator, EmptyCacheReturnsSharedBlocks) {
  auto& a = cpu_allocator();
  std::vector<DataPtr> big;
  for (int i = 0; i < 4; ++i) big.push_back(a.allocate(8u << 20));  // above the thread cache
  for (auto& b : big) release(b);
  auto cached = a.stats();
  a.empty_cache();
  auto emptied = a.stats();
  EXPECT_LE(emptied.reserved_bytes.current + (32 << 20), cached.reserved_bytes.current);
  EXPECT_GE(emptied.reserved_bytes.current, emptied.allocated_bytes.current);
}

TEST(CpuAllocator, ZeroBytesGivesNullWithNoOpDeleter) {
  DataPtr p = cpu_allocator().allocate(0);
  EXPECT_EQ(p.ptr, nullptr);
  release(p);
}

}  // namespace
