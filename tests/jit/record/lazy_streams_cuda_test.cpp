// Lazy traces on CUDA streams (Note [Pending state across threads], rule 5):
// a trace runs on the stream its ops were recorded under, whichever thread
// flushes it; the thread that needed the value waits for that stream; a
// thread that switches streams runs what it recorded before on the old one,
// and the new one waits for it. Tensors are large so that a missing wait
// shows as a wrong value. Skips without a GPU.

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::cuda::Stream;
using kiln::cuda::StreamGuard;

constexpr int64_t kBig = int64_t{16} << 20;  // 64 MiB of float32 per tensor

// x * 1 + 1, `n` times, starting from `start`: exactly start + n (float32).
Tensor chain(float start, int n) {
  Tensor x =
      kiln::full({kBig}, start, kiln::TensorOptions(kiln::kFloat32).device(kiln::Device::cuda()));
  for (int i = 0; i < n; ++i) x = x * 1.0f + 1.0f;
  return x;
}

float last_element(const Tensor& t) {
  return t.narrow(0, kBig - 1, 1).to(kiln::Device::cpu()).item<float>();
}

TEST(LazyCudaStreams, TwoThreadsOnTwoStreamsReadEachOthersWork) {
  KILN_REQUIRE_CUDA();
  constexpr int kRounds = 20;
  std::mutex mu;
  Tensor from[2];
  std::atomic<int> arrived{0}, wrong{0};
  auto meet = [&](int k) {  // both threads reach their k-th meeting point
    arrived++;
    while (arrived.load() < 2 * k) std::this_thread::yield();
  };
  auto worker = [&](int me) {
    StreamGuard g(Stream::from_pool());
    for (int r = 0; r < kRounds; ++r) {
      Tensor mine = chain(static_cast<float>(me * 1000 + r), 24);  // pending, on my stream
      {
        std::lock_guard<std::mutex> lock(mu);
        from[me] = mine;
      }
      meet(2 * r + 1);
      Tensor theirs;
      {
        std::lock_guard<std::mutex> lock(mu);
        theirs = from[1 - me];
      }
      // Read on my stream what the other thread's stream computes (maybe still pending).
      const float want = static_cast<float>((1 - me) * 1000 + r + 24);
      if (last_element(theirs) != want) wrong++;
      // And record on it: its trace runs first, on its stream; mine waits.
      Tensor both = theirs * 2.0f + mine;
      const float want_both = 2.0f * want + static_cast<float>(me * 1000 + r + 24);
      if (last_element(both) != want_both) wrong++;
      meet(2 * r + 2);
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(LazyCudaStreams, ATraceRunsOnItsRecordingStream) {
  KILN_REQUIRE_CUDA();
  Stream side = Stream::from_pool();
  Tensor y;
  {
    StreamGuard g(side);
    y = chain(1.0f, 32);
  }
  // Materialized on another thread, whose current stream is the default one.
  float got = 0;
  std::thread([&] { got = last_element(y); }).join();
  EXPECT_EQ(got, 33.0f);
  // Queued on `side`: waiting for it covers the work.
  side.synchronize();
  EXPECT_EQ(last_element(y * 1.0f), 33.0f);
}

TEST(LazyCudaStreams, SwitchingStreamsRunsWhatWasRecordedBefore) {
  KILN_REQUIRE_CUDA();
  Stream s1 = Stream::from_pool(), s2 = Stream::from_pool();
  ASSERT_NE(s1, s2);
  Tensor y, z;
  {
    StreamGuard g(s1);
    y = chain(2.0f, 32);  // recorded under s1
  }
  {
    StreamGuard g(s2);
    z = y * 2.0f + 1.0f;  // recorded under s2: y's work runs on s1 first, s2 waits for it
    EXPECT_EQ(last_element(z), 2.0f * 34.0f + 1.0f);
  }
  EXPECT_EQ(last_element(y), 34.0f);
}

}  // namespace
