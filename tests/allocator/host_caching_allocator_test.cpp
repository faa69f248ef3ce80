// The pinned-host staging allocator's policy on the fake device.

#include "allocator/host_caching_allocator.h"

#include <gtest/gtest.h>

#include "allocator/fake_device_memory.h"
#include "tests/support/testing.h"

namespace kiln::alloc {
namespace {

constexpr StreamId kS1{0x1000, 0}, kS2{0x2000, 1};

struct HostFixture {
  explicit HostFixture(size_t capacity = size_t{1} << 30) {
    auto mem = std::make_unique<FakeDeviceMemory>(capacity, "pinned host");
    fake = mem.get();
    alloc = std::make_unique<HostCachingAllocator>(std::move(mem));
  }
  FakeDeviceMemory* fake;
  std::unique_ptr<HostCachingAllocator> alloc;
};

TEST(HostCachingAllocator, SizeClasses) {
  EXPECT_EQ(host_size_class(1), 512u);
  EXPECT_EQ(host_size_class(512), 512u);
  EXPECT_EQ(host_size_class(513), 640u);
  EXPECT_EQ(host_size_class(1000), 1024u);
  EXPECT_EQ(host_size_class(1025), 1280u);
  EXPECT_EQ(host_size_class(size_t{3} << 20), size_t{3} << 20);
  for (size_t n : {size_t{1}, size_t{777}, size_t{123456}, size_t{99999999}}) {
    size_t c = host_size_class(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c, n + n / 4 + 512);
  }
}

TEST(HostCachingAllocator, ReuseWaitsForCopies) {
  HostFixture f;
  auto& a = *f.alloc;
  DataPtr p = a.allocate(1000);
  ASSERT_NE(p.ptr, nullptr);
  EXPECT_TRUE(a.owns(p.ptr));
  EXPECT_FALSE(a.owns(static_cast<char*>(p.ptr) + 8));
  void* first = p.ptr;
  p.deleter(p.ctx, p.ptr);      // no copies recorded: reusable at once
  DataPtr q = a.allocate(900);  // same class
  EXPECT_EQ(q.ptr, first);
  EXPECT_TRUE(a.record_stream(q.ptr, kS1));
  EXPECT_TRUE(a.record_stream(q.ptr, kS2));
  q.deleter(q.ctx, q.ptr);
  EXPECT_FALSE(a.record_stream(q.ptr, kS1));  // no longer live
  DataPtr r = a.allocate(1000);
  EXPECT_NE(r.ptr, first);  // copies on kS1, kS2 may still read it
  f.fake->complete_stream(kS1);
  DataPtr s = a.allocate(1000);
  EXPECT_NE(s.ptr, first);  // kS2 still may
  f.fake->complete_stream(kS2);
  DataPtr t = a.allocate(1000);
  EXPECT_EQ(t.ptr, first);
  MemoryStats st = a.stats();
  EXPECT_EQ(st.allocated_bytes.current, 3 * 1024);
  EXPECT_EQ(st.reserved_bytes.current, 3 * 1024);
  for (DataPtr* d : {&r, &s, &t}) d->deleter(d->ctx, d->ptr);
  EXPECT_EQ(a.stats().allocated_bytes.current, 0);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(f.fake->used(), 0u);
  EXPECT_EQ(f.fake->log().events_live, 0);
}

TEST(HostCachingAllocator, OomRetriesThenThrowsAndRecovers) {
  HostFixture f(size_t{10} << 20);
  auto& a = *f.alloc;
  DataPtr big = a.allocate(size_t{6} << 20);
  a.record_stream(big.ptr, kS1);
  big.deleter(big.ctx, big.ptr);                // pending on kS1
  DataPtr other = a.allocate(size_t{5} << 20);  // waits for kS1, frees the cache, retries
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  EXPECT_EQ(f.fake->log().events_synchronized, 1);
  EXPECT_KILN_ERROR(a.allocate(size_t{7} << 20), "pinned host allocator] out of memory");
  EXPECT_EQ(a.stats().num_ooms, 1);
  other.deleter(other.ctx, other.ptr);
  DataPtr again = a.allocate(size_t{7} << 20);
  EXPECT_NE(again.ptr, nullptr);
  again.deleter(again.ctx, again.ptr);
}

}  // namespace
}  // namespace kiln::alloc
