// Streams, the per-thread current stream, StreamGuard and events on a real
// device. Skips without a GPU.

#include <gtest/gtest.h>

#include <thread>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace kiln::cuda {
namespace {

TEST(CudaStream, DefaultCurrentAndGuard) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  Stream def = Stream::default_stream();
  EXPECT_EQ(Stream::current(), def);
  EXPECT_NE(def.handle(), nullptr) << "kiln's default stream is its own, not the legacy one";
  EXPECT_EQ(Stream::legacy().handle(), nullptr);
  Stream side = Stream::from_pool();
  EXPECT_NE(side, def);
  {
    StreamGuard g(side);
    EXPECT_EQ(Stream::current(), side);
    {
      StreamGuard inner(Stream::legacy());
      EXPECT_EQ(Stream::current(), Stream::legacy());
    }
    EXPECT_EQ(Stream::current(), side);
    // Another thread has its own current stream.
    Stream seen = def;
    std::thread([&] { seen = Stream::current(); }).join();
    EXPECT_EQ(seen, def);
  }
  EXPECT_EQ(Stream::current(), def);
  Stream adopted = Stream::from_external(side.handle(), Device::cuda());
  EXPECT_EQ(adopted, side);
  EXPECT_KILN_ERROR(Stream::current(Device::cuda(device_count())), "expected a cuda device index");
  EXPECT_KILN_ERROR(Stream::current(Device::cpu()), "expected a cuda device");
}

// The memory bandwidth kiln-layer-ops measures against: a GPU's is between
// 100 GB/s and 100 TB/s; a device that does not exist is an error.
TEST(CudaDevice, MemoryPeakBandwidth) {
  KILN_REQUIRE_CUDA();
  const double gbps = device_memory_peak_gbps(0);
  EXPECT_GT(gbps, 100.0);
  EXPECT_LT(gbps, 100000.0);
  EXPECT_KILN_ERROR(device_memory_peak_gbps(device_count()), "expected a cuda device index");
}

// Work on a side stream ordered after the default stream through an event.
TEST(CudaStream, EventsOrderStreams) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  const int64_t n = int64_t{64} << 20;  // 256 MiB of float32: a fill takes a while
  Tensor a = empty({n}, TensorOptions(kFloat32).device(Device::cuda()));
  Tensor b = empty({n}, TensorOptions(kFloat32).device(Device::cuda()));
  a.fill_(1.5);
  Event done;
  done.record();
  Stream side = Stream::from_pool();
  side.wait(done);
  {
    StreamGuard g(side);
    b.copy_(a);  // on the side stream, after the fill
    record_stream(a, side);
    record_stream(b, side);
  }
  Event copied;
  copied.record(side);
  copied.synchronize();
  EXPECT_TRUE(copied.query());
  EXPECT_TRUE(side.query());
  Tensor tail = b.narrow(0, n - 5, 5).cpu();
  EXPECT_TENSOR_CLOSE(tail, full({5}, 1.5, kFloat32));
  EXPECT_EQ(b.select(0, 0).item().to<float>(), 1.5f);
}

TEST(CudaStream, TimingEvents) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  Event start(true), stop(true), plain;
  EXPECT_TRUE(plain.query());  // never recorded
  EXPECT_FALSE(plain.recorded());
  start.record();
  Tensor a = zeros({int64_t{16} << 20}, TensorOptions(kFloat32).device(Device::cuda()));
  a.fill_(2.0);
  stop.record();
  stop.synchronize();
  const float ms = start.elapsed_ms(stop);
  EXPECT_GE(ms, 0.0f);
  EXPECT_LT(ms, 10000.0f);
  plain.record();
  EXPECT_KILN_ERROR(plain.elapsed_ms(stop), "enable_timing=true");
  Event moved = std::move(start);
  EXPECT_TRUE(moved.recorded());
  EXPECT_FALSE(start.recorded());  // NOLINT(bugprone-use-after-move)
  Stream::current().synchronize();
  synchronize();
}

}  // namespace
}  // namespace kiln::cuda
