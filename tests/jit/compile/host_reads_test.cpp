// Host reads while jit::compile traces (Note [Host reads while tracing] in
// jit/compile/tracing.h): a value read on the host, of any tensor and by
// any path, is a graph break; the entry then runs uncompiled and every call
// sees the values of its own time. Reads of a captured tensor used to go
// unnoticed: the value read at the first call was baked into the plan.

#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <sstream>
#include <string>
#include <thread>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::random_tensor;

// How a function reads a one-element tensor on the host.
using HostRead = std::function<double(const Tensor&)>;

struct Reader {
  const char* name;
  HostRead read;
};

const Reader kReaders[] = {
    {"item", [](const Tensor& t) { return t.item<double>(); }},
    {"data_ptr", [](const Tensor& t) { return static_cast<double>(*t.data_ptr<float>()); }},
    {"cpu", [](const Tensor& t) { return t.cpu().tolist<double>()[0]; }},
    {"print",
     [](const Tensor& t) {
       std::ostringstream os;
       os << t;  // "tensor([2.])": the value between the brackets
       const std::string s = os.str();
       const size_t open = s.find_last_of('[');
       return std::stod(s.substr(open + 1));
     }},
};

// `f(x)` of a function that reads `read_from()` on the host: right after
// `state` changes, at every call.
void expect_reads_fresh(const char* what, Tensor& state, const std::function<Tensor()>& read_from,
                        const HostRead& read) {
  SCOPED_TRACE(what);
  auto f = kiln::jit::compile([&](const Tensor& x) { return x * read(read_from()); },
                              {.name = "host_read"});
  const Tensor x = random_tensor({4}, kiln::kFloat32, "contiguous", 7, -1, 1);
  kiln::testing::Logs log("recompiles");
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    state.fill_(2.0 + call);
    Tensor want;
    {
      kiln::EagerGuard eager;
      want = x * read(read_from());
    }
    EXPECT_TENSOR_CLOSE(f(x), want);
  }
  const std::string text = log.take();
  EXPECT_NE(text.find("graph break: "), std::string::npos) << text;
  EXPECT_EQ(f.stats().graph_breaks, 1) << text;
  EXPECT_EQ(f.stats().uncompiled_calls, 3) << text;
}

TEST(CompileHostReads, CapturedTensorReadIsAGraphBreak) {
  for (const Reader& r : kReaders) {
    Tensor c = kiln::full({1}, 2.0);
    expect_reads_fresh(
        r.name, c, [&] { return c; }, r.read);
  }
}

TEST(CompileHostReads, ViewOfACapturedTensorReadIsAGraphBreak) {
  for (const Reader& r : kReaders) {
    Tensor c = kiln::full({3, 2}, 2.0);
    expect_reads_fresh(
        r.name, c, [&] { return c.narrow(0, 1, 1).select(1, 1).view({1}); }, r.read);
  }
}

// A value computed inside the function from a captured tensor: pending on the
// trace, read as an early run of it (it broke before, and still does).
TEST(CompileHostReads, ComputedTensorReadIsAGraphBreak) {
  for (const Reader& r : kReaders) {
    Tensor c = kiln::full({2}, 2.0);
    expect_reads_fresh(
        r.name, c, [&] { return (c * 0.5).sum({0}, true); }, r.read);
  }
}

// A value another thread recorded and has not run: computing it for the read
// runs that thread's trace, not the function's, which used to hide the read
// (and bake the value into the plan).
TEST(CompileHostReads, TensorPendingOnAnotherThreadReadIsAGraphBreak) {
  const Tensor c = kiln::full({1}, 2.0);
  Tensor y;
  std::promise<void> recorded, traced;
  std::thread other([&] {
    y = c * 2.0;
    recorded.set_value();
    traced.get_future().wait();  // the trace stays pending until the first call is done
  });
  recorded.get_future().wait();
  EXPECT_TRUE(y.is_pending());
  auto f = kiln::jit::compile([&](const Tensor& x) { return x * y.item<float>(); },
                              {.name = "other_thread"});
  const Tensor x = kiln::ones({3});
  Tensor first = f(x);
  traced.set_value();
  other.join();
  EXPECT_TENSOR_CLOSE(first, kiln::full({3}, 4.0));
  y.fill_(5.0);
  EXPECT_TENSOR_CLOSE(f(x), kiln::full({3}, 5.0));
  EXPECT_EQ(f.stats().graph_breaks, 1);
}

// The log says what was read, and where.
TEST(CompileHostReads, CapturedReadIsLogged) {
  Tensor c = kiln::full({1}, 2.0);
  auto f = kiln::jit::compile(
      [&](const Tensor& x) {
        Tensor y = x + 1.0;
        return y * c.item<float>();
      },
      {.name = "g"});
  kiln::testing::Logs log("recompiles");
  (void)f(kiln::ones({2}));
  const std::string text = log.take();
  EXPECT_NE(text.find("g: entry 1/8: graph break: the value of a tensor the function did not get "
                      "as an argument (sizes [1], float32"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("after 1 recorded ops"), std::string::npos) << text;
  kiln::jit::Explanation e = f.explain();
  ASSERT_EQ(e.graph_breaks.size(), 1u);
  EXPECT_EQ(e.graph_breaks[0].after_ops, 1);
}

// Not host reads: wrapped numbers (`x * 2.0`), tensors made from host values
// inside the function, captured tensors only handed to ops, and the index
// check of a composite on a captured index. These stay compiled.
TEST(CompileHostReads, OpsOnCapturedTensorsStayCompiled) {
  Tensor w = kiln::full({4}, 2.0);
  const Tensor index = kiln::tensor<int64_t>({3, 0});
  auto f = kiln::jit::compile(
      [&](const Tensor& x) {
        Tensor y = x * 2.0 + w + kiln::tensor<float>({1.f, 2.f, 3.f, 4.f});
        return kiln::index_add(y, 0, index, kiln::ones({2}));
      },
      {.name = "ops"});
  const Tensor x = random_tensor({4}, kiln::kFloat32, "contiguous", 8, -1, 1);
  for (int call = 0; call < 3; ++call) {
    w.fill_(call);
    Tensor got = f(x);
    kiln::EagerGuard eager;
    Tensor want = x * 2.0 + w + kiln::tensor<float>({1.f, 2.f, 3.f, 4.f});
    EXPECT_TENSOR_CLOSE(got, kiln::index_add(want, 0, index, kiln::ones({2})));
  }
  EXPECT_EQ(f.stats().graph_breaks, 0);
  EXPECT_EQ(f.stats().hits, 2);
}

// Note [Host reads while tracing]: a value made from constants alone and
// read on the host breaks too, and the uncompiled calls stay exact.
TEST(CompileHostReads, ConstantReadOnTheHostIsAGraphBreak) {
  auto f =
      kiln::jit::compile([](const Tensor& x) { return x * kiln::arange(4.0).sum().item<double>(); },
                         {.name = "constant"});
  const Tensor x = kiln::ones({2});
  for (int call = 0; call < 2; ++call) EXPECT_TENSOR_CLOSE(f(x), kiln::full({2}, 6.0));
  EXPECT_EQ(f.stats().graph_breaks, 1);
}

}  // namespace
