// Tensors shared across threads in lazy mode (Note [Pending state across
// threads]): reads, recorded ops and in-place writes on a tensor another
// thread's trace will compute, while that thread keeps recording and
// flushing. Each scenario runs a few thousand times; KILN_THREAD_TEST_SCALE
// multiplies the counts for longer stress runs (the default keeps each test
// well under 10 s in the ASan build).

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

int scaled(int n) {
  const char* s = std::getenv("KILN_THREAD_TEST_SCALE");
  const int k = s && *s ? std::atoi(s) : 1;
  return n * (k > 0 ? k : 1);
}

// A hand-off between threads: what one pushes, another pops, in order.
template <class T>
class Channel {
 public:
  void push(T v) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back(std::move(v));
    }
    cv_.notify_one();
  }
  T pop() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !items_.empty(); });
    T v = std::move(items_.front());
    items_.pop_front();
    return v;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_;
};

// The latest value one thread publishes for others to pick up.
struct Published {
  std::mutex mu;
  Tensor tensor;
  int step = -1;
  void set(Tensor t, int s) {
    std::lock_guard<std::mutex> lock(mu);
    tensor = std::move(t);
    step = s;
  }
  std::pair<Tensor, int> get() {
    std::lock_guard<std::mutex> lock(mu);
    return {tensor, step};
  }
};

// Reading another thread's pending tensor while that thread records and
// flushes: the value, never a null pointer or an older value.
TEST(SharedTensors, ReadsWhileTheOwnerFlushes) {
  const int steps = scaled(12000);
  Published pub;
  std::atomic<bool> done{false};
  std::atomic<int> checked{0}, null_data{0}, wrong{0};
  std::thread reader([&] {
    while (!done.load()) {
      auto [t, step] = pub.get();
      if (!t.defined()) continue;
      const float want = 2.0f * static_cast<float>(1 + step) - 1.0f;  // y = (1 + step) * 2 - 1
      const float* p = t.data_ptr<float>();
      if (p == nullptr) {
        null_data++;
        continue;
      }
      if (p[3] != want || t[5].item<float>() != want) wrong++;
      checked++;
    }
  });
  Tensor x = kiln::ones({8});
  for (int i = 1; i <= steps; ++i) {
    x = x + 1.0f;
    if (i % 8 == 0) pub.set(x * 2.0f - 1.0f, i);
    if (i % 1000 == 0) {
      EXPECT_FLOAT_EQ(x[0].item<float>(), 1.0f + i);  // the owner reads too
    }
  }
  // Let the reader see the last one.
  while (checked.load() == 0) std::this_thread::yield();
  done = true;
  reader.join();
  EXPECT_EQ(null_data.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_FLOAT_EQ(x[0].item<float>(), 1.0f + steps);
}

// Recording ops on another thread's pending tensor while its owner keeps recording.
TEST(SharedTensors, RecordsOpsOnAPendingTensorOfAnotherThread) {
  const int steps = scaled(12000);
  Published pub;
  std::atomic<bool> done{false};
  std::atomic<int> checked{0}, wrong{0};
  std::thread other([&] {
    Tensor acc = kiln::zeros({8});
    float acc_want = 0;
    while (!done.load()) {
      auto [y, step] = pub.get();
      if (!y.defined()) continue;
      Tensor z = y * 0.5f + 0.5f;                  // 1 + step
      acc = acc + (z - static_cast<float>(step));  // this thread's trace reads the other's tensors
      acc_want += 1.0f;
      if (checked.load() % 4 == 0 && z[2].item<float>() != static_cast<float>(1 + step)) wrong++;
      checked++;
    }
    if (acc[7].item<float>() != acc_want) wrong++;
  });
  Tensor x = kiln::ones({8});
  for (int i = 1; i <= steps; ++i) {
    x = x + 1.0f;
    if (i % 8 == 0) pub.set(x * 2.0f - 1.0f, i);
  }
  while (checked.load() == 0) std::this_thread::yield();
  done = true;
  other.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_FLOAT_EQ(x[0].item<float>(), 1.0f + steps);
}

// In-place writes from another thread on a tensor pending elsewhere are
// never lost, while both threads keep recording and flushing other work.
TEST(SharedTensors, InPlaceWritesFromAnotherThreadAreKept) {
  const int rounds = scaled(2000);
  Channel<std::optional<Tensor>> to_helper, to_owner;
  std::thread helper([&] {
    Tensor noise = kiln::zeros({16});
    for (int i = 0;; ++i) {
      std::optional<Tensor> t = to_helper.pop();
      if (!t) break;
      t->add_(1.0f);  // recorded on this thread's trace, the tensor pending on the owner's
      noise = noise + 1.0f;
      if (i % 3 == 0) (void)noise[0].item<float>();  // and flushed here, sometimes
      to_owner.push(*t);
    }
  });
  Tensor noise = kiln::zeros({16});
  int wrong = 0;
  for (int i = 0; i < rounds; ++i) {
    Tensor x = kiln::zeros({8}) + static_cast<float>(i);  // pending on this thread
    to_helper.push(x);
    for (int k = 0; k < 8; ++k) noise = noise * 1.0f + 1.0f;  // record while the helper writes
    if (i % 2 == 0) (void)noise[1].item<float>();             // and flush
    Tensor back = *to_owner.pop();
    back.mul_(2.0f);
    if (x[3].item<float>() != 2.0f * static_cast<float>(i + 1)) wrong++;
  }
  to_helper.push(std::nullopt);
  helper.join();
  EXPECT_EQ(wrong, 0) << "of " << rounds << " rounds";
  EXPECT_FLOAT_EQ(noise[0].item<float>(), 8.0f * rounds);
}

// Rule 6: a thread records reads of a computed tensor (nothing pending on
// it), hands the tensor to a helper, which records in-place writes to it
// (add_, a whole-storage copy_, index_copy_) and runs them: the reads,
// still pending on the first thread, see the values from before the writes.
TEST(SharedTensors, WritesFromAnotherThreadWaitForEarlierReads) {
  const int rounds = scaled(1500);
  Channel<std::optional<Tensor>> to_helper;
  Channel<int> done;
  std::thread helper([&] {
    Tensor idx = kiln::tensor<int64_t>({1, 5});
    Tensor src = kiln::full({2}, -7.0f);
    for (int i = 0;; ++i) {
      std::optional<Tensor> t = to_helper.pop();
      if (!t) break;
      if (i % 3 == 0) t->add_(100.0f);
      if (i % 3 == 1) t->copy_(kiln::full({8}, -1.0f));
      if (i % 3 == 2) kiln::index_copy_(*t, 0, idx, src);
      kiln::sync();  // the helper's write runs now, before the owner's reads
      done.push(i);
    }
  });
  int wrong = 0;
  for (int i = 0; i < rounds; ++i) {
    Tensor x = kiln::full({8}, static_cast<float>(i));
    kiln::sync();         // x is computed: nothing pending on it
    Tensor y = x * 2.0f;  // recorded reads of x
    Tensor z = kiln::sum(x, {0});
    to_helper.push(x);
    (void)done.pop();
    if (y[5].item<float>() != 2.0f * static_cast<float>(i) ||
        z.item<float>() != 8.0f * static_cast<float>(i)) {
      wrong++;
    }
  }
  to_helper.push(std::nullopt);
  helper.join();
  EXPECT_EQ(wrong, 0) << "of " << rounds << " rounds";
}

// Two threads pass one tensor back and forth, each recording writes to it
// and ops on it without reading, so each trace holds the other's work: no
// deadlock, no lost or reordered write.
TEST(SharedTensors, PassingATensorBackAndForth) {
  const int rounds = scaled(2000);
  Channel<Tensor> to_a, to_b;
  auto player = [&](Channel<Tensor>& in, Channel<Tensor>& out, bool functional) {
    Tensor mine = kiln::zeros({4});
    for (int i = 0; i < rounds; ++i) {
      Tensor t = in.pop();
      mine = mine + t * 0.0f + 1.0f;  // reads the shared tensor into this trace
      if (functional) {
        t = t + 1.0f;
      } else {
        t.add_(1.0f);
      }
      out.push(t);
    }
    EXPECT_FLOAT_EQ(mine[0].item<float>(), static_cast<float>(rounds));
  };
  std::thread a([&] { player(to_a, to_b, false); });
  std::thread b([&] { player(to_b, to_a, true); });
  to_a.push(kiln::zeros({4}) + 0.0f);
  a.join();
  Tensor last = to_a.pop();  // b's last push
  b.join();
  EXPECT_FLOAT_EQ(last[2].item<float>(), 2.0f * rounds);
}

// Several threads read one pending tensor at once: one runs the trace, the
// others wait for it, and all see the value.
TEST(SharedTensors, ManyThreadsReadOnePendingTensor) {
  constexpr int kReaders = 4;
  const int rounds = scaled(400);
  int wrong = 0;
  for (int r = 0; r < rounds; ++r) {
    Tensor y = kiln::full({32}, static_cast<float>(r));
    for (int k = 0; k < 16; ++k) y = y * 1.0f + 1.0f;
    std::atomic<int> ready{0};
    std::vector<float> got(kReaders, -1);
    std::vector<std::thread> readers;
    for (int k = 0; k < kReaders; ++k) {
      readers.emplace_back([&, k] {
        ready++;
        while (ready.load() < kReaders) std::this_thread::yield();
        got[k] = y[k].item<float>();
      });
    }
    for (auto& t : readers) t.join();
    for (float g : got) wrong += g != static_cast<float>(r + 16);
  }
  EXPECT_EQ(wrong, 0);
}

// A failed op's error reaches a reader on another thread; work recorded
// beside it is read there as usual.
TEST(SharedTensors, AFailureIsSeenFromAnotherThread) {
  const int rounds = scaled(500);
  Tensor x = kiln::ones({5, 3});
  Tensor bad_index, good_index;
  {
    kiln::EagerGuard eager;
    bad_index = kiln::tensor<int64_t>({1, 7});
    good_index = kiln::tensor<int64_t>({4, 0});
  }
  Channel<std::pair<Tensor, Tensor>> to_reader;
  std::atomic<int> wrong{0};
  std::thread reader([&] {
    for (int i = 0; i < rounds; ++i) {
      auto [good, bad] = to_reader.pop();
      try {
        (void)bad.data_ptr();
        wrong++;
      } catch (const kiln::Error& e) {
        if (std::string(e.what()).find("index 7 is out of bounds") == std::string::npos) wrong++;
      }
      if (good[1][2].item<float>() != static_cast<float>(i + 1)) wrong++;
    }
  });
  int raised_here = 0;
  for (int i = 0; i < rounds; ++i) {
    Tensor bad = kiln::index_select(x, 0, bad_index);
    Tensor good = kiln::index_select(x, 0, good_index) * static_cast<float>(i + 1);
    Tensor bad_twice;
    try {
      bad_twice = bad * 2.0f;
    } catch (const kiln::Error& e) {
      // The reader ran this trace between the two ops: the failure is known,
      // so recording an op on its result raises at the call.
      if (std::string(e.what()).find("index 7 is out of bounds") == std::string::npos) wrong++;
      bad_twice = bad;
      raised_here++;
    }
    to_reader.push({good, bad_twice});
    x = x * 1.0f;  // the owner records on
  }
  reader.join();
  EXPECT_EQ(wrong.load(), 0) << raised_here << " of " << rounds << " raised at the call";
}

// A thread that exits with work pending: its trace runs as it exits, while
// another thread may be reading that work.
TEST(SharedTensors, AThreadExitsWithPendingWork) {
  const int rounds = scaled(300);
  int wrong = 0;
  for (int r = 0; r < rounds; ++r) {
    Channel<Tensor> out;
    std::thread worker([&] {
      Tensor y = kiln::full({8}, static_cast<float>(r));
      for (int k = 0; k < 8; ++k) y = y + 1.0f;
      out.push(y);
    });
    Tensor y = out.pop();
    wrong += y[6].item<float>() != static_cast<float>(r + 8);
    worker.join();
  }
  EXPECT_EQ(wrong, 0);
}

// A worker that has flushed (so the thread's pass and decomposition caches
// exist, built after its trace) and exits with work pending: its trace runs
// at exit, after those caches are destroyed (Note [Thread caches at thread
// exit]). First the flush that a read of another thread's pending tensor
// makes, then a flush of the worker's own.
TEST(SharedTensors, AThreadExitsWithPendingWorkAfterAFlush) {
  for (int r = 0; r < scaled(20); ++r) {
    Tensor x = kiln::full({8, 8}, 1.0f) + 0.0f;  // pending on this thread
    Tensor out;
    std::thread([&] { out = x * 2.0f + 1.0f; }).join();
    EXPECT_EQ(out.sum().item<float>(), 192.0f);

    Tensor w;
    {
      kiln::EagerGuard eager;
      w = kiln::ones({8, 8});
    }
    float first = 0;
    std::thread([&] {
      first = (w * 3.0f).sum().item<float>();
      out = w * 2.0f + 1.0f;
    }).join();
    EXPECT_EQ(first, 192.0f);
    EXPECT_EQ(out.sum().item<float>(), 192.0f);
  }
}

// A chain of threads, each extending what the one before left pending and
// exiting with its own step pending.
TEST(SharedTensors, AChainOfThreadsExtendsPendingWork) {
  Tensor t = kiln::zeros({4, 4}) + 1.0f;
  float expected = 1.0f;
  for (int i = 0; i < scaled(16); ++i) {
    std::thread([&, i] {
      EXPECT_EQ((t * 0.0f).sum().item<float>(), 0.0f);  // a flush on this thread
      t = t * 2.0f - static_cast<float>(i);
    }).join();
    expected = expected * 2.0f - static_cast<float>(i);
  }
  EXPECT_TENSOR_CLOSE(t, kiln::full({4, 4}, expected));
}

// Memory the caller owns (from_blob) sees every write, whether or not a
// tensor of it is still held when the trace runs: a result copied into the
// caller's buffer, a write through a dropped tensor whose deleter then reads
// the memory, and the same on a thread that exits with it pending.
TEST(SharedTensors, WritesIntoCallerMemoryAreKeptWhenNobodyHoldsTheTensor) {
  float out[4] = {0, 0, 0, 0};
  Tensor y = kiln::arange(0, 4).to(kiln::kFloat32) * 10.0f;
  kiln::from_blob(out, {4}, kiln::kFloat32).copy_(y);
  kiln::sync();
  EXPECT_EQ(out[3], 30.0f);
  float host[4] = {1, 2, 3, 4};
  float seen = 0;
  {
    Tensor b = kiln::from_blob(host, {4}, kiln::kFloat32,
                               [&](void* p) { seen = static_cast<float*>(p)[3]; });
    b.mul_(5.0f);
  }
  kiln::sync();
  EXPECT_EQ(host[0], 5.0f);
  EXPECT_EQ(seen, 20.0f);  // the deleter ran after the write
  float far[2] = {0, 0};
  std::thread([&] { kiln::from_blob(far, {2}, kiln::kFloat32).fill_(7.0f); }).join();
  EXPECT_EQ(far[1], 7.0f);
}

// kiln::sync() runs what every thread recorded: a host write after it cannot
// reach a read another live thread recorded before.
TEST(SharedTensors, SyncRunsOtherThreadsRecordedWork) {
  Tensor x = kiln::ones({4});
  kiln::sync();
  Tensor y;
  float out[4] = {0, 0, 0, 0};
  Tensor o = kiln::from_blob(out, {4}, kiln::kFloat32);
  Channel<int> recorded, finish;
  std::thread worker([&] {
    y = x * 2.0f;
    o.copy_(kiln::full({4}, 7.0f));
    recorded.push(1);
    (void)finish.pop();  // alive, its trace unrun, until the checks are done
  });
  (void)recorded.pop();
  kiln::sync();
  x.data_ptr<float>()[0] = 100.0f;
  EXPECT_EQ(out[2], 7.0f);
  EXPECT_EQ(y[0].item<float>(), 2.0f);
  finish.push(1);
  worker.join();
}

// Rule 6 for compiled calls: a compiled function that writes an argument or
// a captured tensor runs after another live thread's recorded reads of it.
TEST(SharedTensors, CompiledWritesWaitForOtherThreadsReads) {
  Tensor cache = kiln::zeros({8});
  auto bump = kiln::jit::compile(
      [](const Tensor& x) {
        Tensor w = x;
        w.add_(1.0f);
        return w * 2.0f;
      },
      {.name = "bump"});
  auto into_cache = kiln::jit::compile(
      [&](const Tensor& x) {
        cache.add_(x);
        return x * 1.0f;
      },
      {.name = "into_cache"});
  {
    Tensor warm = kiln::zeros({8});
    (void)bump(warm);
    (void)bump(warm);
    (void)into_cache(warm);
    (void)into_cache(warm);
  }
  int wrong = 0;
  for (int round = 0; round < scaled(20); ++round) {
    Tensor x = kiln::ones({8});
    {
      kiln::EagerGuard eager;
      cache.fill_(1.0f);
    }
    kiln::sync();
    Tensor y, z;
    Channel<int> recorded, finish;
    std::thread reader([&] {
      y = x * 3.0f;  // reads of x and of the cache, recorded, not run
      z = cache * 3.0f;
      recorded.push(1);
      (void)finish.pop();
    });
    (void)recorded.pop();
    Tensor b = bump(x);
    Tensor c = into_cache(kiln::ones({8}));
    finish.push(1);
    reader.join();
    if (y.sum().item<float>() != 24.0f || z.sum().item<float>() != 24.0f) ++wrong;
    EXPECT_EQ(b.sum().item<float>(), 32.0f);
    EXPECT_EQ(cache.sum().item<float>(), 16.0f);
    (void)c;
  }
  EXPECT_EQ(wrong, 0) << "of " << scaled(20) << " rounds";
}

}  // namespace
