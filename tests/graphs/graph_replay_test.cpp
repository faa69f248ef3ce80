// CUDA graph replay of compiled functions (Note [Graph replay]): replays equal
// eager results; decode steps at 64 successive positions replay one graph;
// results of earlier calls keep their values; a capture that fails falls
// back; buckets capture a graph each; 8 threads x 1000 calls; memory
// pressure during capture. GPU only.

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "graphs/graph.h"
#include "jit/codegen_cuda/launch_cuda.h"
#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::random_tensor;

kiln::nn::GPT2Config tiny() {
  kiln::nn::GPT2Config c;
  c.n_layer = 2;
  c.d_model = 64;
  c.n_head = 4;
  c.vocab = 97;
  c.n_positions = 128;
  return c;
}

std::string captured_logs(const std::function<void()>& f, const char* channels = "graphs") {
  kiln::set_logs(channels);
  ::testing::internal::CaptureStderr();
  f();
  std::string s = ::testing::internal::GetCapturedStderr();
  kiln::set_logs("");
  return s;
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(GraphReplay, DecodeStepsAtSixtyFourPositions) {
  KILN_REQUIRE_CUDA();
  const kiln::Device cuda = kiln::Device::cuda();
  kiln::nn::GPT2 model = kiln::nn::GPT2::random(tiny(), kiln::kFloat32, cuda, 3);
  kiln::nn::GPT2 ref = kiln::nn::GPT2::random(tiny(), kiln::kFloat32, kiln::Device::cpu(), 3);
  kiln::nn::GPT2::Cache cache = model.make_cache(2, 64), ref_cache = ref.make_cache(2, 64);
  auto step = kiln::jit::compile(
      [&](const Tensor& ids, const Tensor& pos) { return model.decode_step(ids, pos, cache); },
      {.name = "decode"});
  const std::string logs = captured_logs([&] {
    for (int64_t p = 0; p < 64; ++p) {
      Tensor ids = random_tensor({2, 1}, kiln::kInt64, "contiguous", 40 + p, 0, 97);
      Tensor pos = kiln::full({1}, p, kiln::TensorOptions(kiln::kInt64));
      Tensor got = step(ids.to(cuda), pos.to(cuda)).cpu();
      kiln::EagerGuard eager;
      Tensor expected = ref.decode_step(ids, pos, ref_cache);
      SCOPED_TRACE("position " + std::to_string(p));
      EXPECT_TENSOR_CLOSE_TOL(got, expected, 1e-3, 1e-3);
    }
  });
  EXPECT_EQ(step.stats().entries, 1);
  EXPECT_GT(step.stats().graph_nodes, 10) << logs;
  EXPECT_NE(logs.find("decode: entry 1: captured a graph of"), std::string::npos) << logs;
  EXPECT_EQ(logs.find("capture failed"), std::string::npos) << logs;
}

// library_probe_bytes() set while alive (Note [Which library calls are probed]).
struct ProbeBytes {
  explicit ProbeBytes(size_t bytes) : before(kiln::graphs::set_library_probe_bytes(bytes)) {}
  ~ProbeBytes() { kiln::graphs::set_library_probe_bytes(before); }
  ProbeBytes(const ProbeBytes&) = delete;
  ProbeBytes& operator=(const ProbeBytes&) = delete;
  size_t before;
};

kiln::nn::Linear small_linear() {
  return {random_tensor({32, 16}, kiln::kFloat32, "contiguous", 1).cuda(),
          random_tensor({32}, kiln::kFloat32, "contiguous", 2).cuda()};
}

// Two results: one a generated kernel writes, one cuBLASLt writes (patched
// or copied out, Note [Opaque steps]).
auto two_results(const kiln::nn::Linear& lin, const char* name) {
  return kiln::jit::compile(
      [&lin](const Tensor& x) {
        Tensor h = lin.forward(x);
        return std::make_tuple(kiln::tanh(h) * 2.0, h);
      },
      {.name = name});
}

// Results of ten replays, kept and checked afterwards against their own inputs.
TEST(GraphReplay, EarlierResultsAreNeverOverwritten) {
  KILN_REQUIRE_CUDA();
  const kiln::nn::Linear lin = small_linear();
  auto f = two_results(lin, "keep");
  std::vector<Tensor> xs, a, b;
  for (uint64_t i = 0; i < 10; ++i) {
    xs.push_back(random_tensor({4, 16}, kiln::kFloat32, "contiguous", 10 + i));
    auto [ra, rb] = f(xs.back().cuda());
    a.push_back(ra);
    b.push_back(rb);
  }
  EXPECT_GT(f.stats().graph_nodes, 0);
  Tensor w = lin.weight.cpu(), bias = lin.bias->cpu();
  kiln::EagerGuard eager;
  for (size_t i = 0; i < xs.size(); ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    Tensor h = kiln::linear(xs[i], w, bias);
    EXPECT_TENSOR_CLOSE_TOL(b[i].cpu(), h, 1e-5, 1e-5);
    EXPECT_TENSOR_CLOSE_TOL(a[i].cpu(), kiln::tanh(h) * 2.0, 1e-5, 1e-5);
  }
}

// Note [Plans of one kernel]: a plan of one fused kernel launches it
// directly by default, and replays a graph of one node with
// Options::graph_single_kernel; either way every kept result keeps its
// values, each call at new argument addresses.
TEST(GraphReplay, PlansOfOneKernel) {
  KILN_REQUIRE_CUDA();
  auto body = [](const Tensor& x) { return kiln::tanh(x * 2.0 + 1.0) - x; };
  for (bool one_node : {false, true}) {
    SCOPED_TRACE(one_node ? "graph_single_kernel" : "default");
    auto f = kiln::jit::compile(body, {.name = "one kernel", .graph_single_kernel = one_node});
    std::vector<Tensor> xs, got;
    for (uint64_t i = 0; i < 8; ++i) {
      xs.push_back(random_tensor({6, 40}, kiln::kFloat32, "contiguous", 70 + i).cuda());
      got.push_back(f(xs.back()));
    }
    EXPECT_EQ(f.stats().kernels_per_call, 1);
    if (one_node) {
      EXPECT_EQ(f.stats().graph_nodes, 1);
    } else {
      EXPECT_EQ(f.stats().graph_nodes, 0);
    }
    kiln::EagerGuard eager;
    for (size_t i = 0; i < xs.size(); ++i) {
      SCOPED_TRACE("call " + std::to_string(i));
      EXPECT_TENSOR_CLOSE_TOL(got[i].cpu(), body(xs[i].cpu()), 1e-5, 1e-5);
    }
  }
}

// Note [Results handed back]: a replay writes a result into the memory of the
// last one where the caller let go of it, and into fresh memory where the
// caller still holds it, or a view of it; every kept result keeps its values.
// Both with the library call's result copied out and with it patched.
void results_handed_back(size_t probe_bytes) {
  std::optional<ProbeBytes> probes(probe_bytes);
  const kiln::nn::Linear lin = small_linear();
  auto f = two_results(lin, "handed");
  std::vector<Tensor> xs;
  auto call = [&](uint64_t seed) {
    xs.push_back(random_tensor({4, 16}, kiln::kFloat32, "contiguous", seed));
    return f(xs.back().cuda());
  };
  auto address = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); };
  for (uint64_t i = 0; i < 3; ++i) call(10 + i);  // warm-up, capture, a first replay
  ASSERT_GT(f.stats().graph_nodes, 0);
  uintptr_t a0 = 0, b0 = 0;
  {
    auto [a, b] = call(20);
    a0 = address(a);
    b0 = address(b);
  }
  // Let go of: the same memory again.
  auto [a1, b1] = call(21);
  EXPECT_EQ(address(a1), a0);
  EXPECT_EQ(address(b1), b0);
  // Held: fresh memory; a view held keeps its storage too.
  Tensor a1_view = a1.narrow(0, 1, 2);
  Tensor b1_kept = b1;
  a1 = Tensor();
  b1 = Tensor();
  auto [a2, b2] = call(22);
  EXPECT_NE(address(a2), a0);
  EXPECT_NE(address(b2), b0);
  auto [a3, b3] = call(23);
  EXPECT_NE(address(a3), address(a2));
  EXPECT_NE(address(b3), address(b2));
  probes.reset();
  Tensor w = lin.weight.cpu(), bias = lin.bias->cpu();
  kiln::EagerGuard eager;
  auto expect = [&](size_t call_index, const Tensor& got_a, const Tensor& got_b) {
    SCOPED_TRACE("call " + std::to_string(call_index));
    Tensor h = kiln::linear(xs[call_index], w, bias);
    if (got_a.defined()) EXPECT_TENSOR_CLOSE_TOL(got_a.cpu(), kiln::tanh(h) * 2.0, 1e-5, 1e-5);
    if (got_b.defined()) EXPECT_TENSOR_CLOSE_TOL(got_b.cpu(), h, 1e-5, 1e-5);
  };
  {
    SCOPED_TRACE("the view kept from call 4");
    Tensor h = kiln::linear(xs[4], w, bias);
    EXPECT_TENSOR_CLOSE_TOL(a1_view.cpu(), (kiln::tanh(h) * 2.0).narrow(0, 1, 2), 1e-5, 1e-5);
  }
  expect(4, Tensor(), b1_kept);
  expect(5, a2, b2);
  expect(6, a3, b3);
}

TEST(GraphReplay, ResultsLetGoAreWrittenAgain) {
  KILN_REQUIRE_CUDA();
  results_handed_back(SIZE_MAX);  // cuBLASLt's result copied out of the graph
}

TEST(GraphReplay, ResultsLetGoAreWrittenAgainWherePatched) {
  KILN_REQUIRE_CUDA();
  results_handed_back(0);  // cuBLASLt's result pointer patched
}

// A random float tensor on the host, and its copy on the GPU.
struct HostAndDevice {
  Tensor host, device;
};
HostAndDevice random_pair(std::vector<int64_t> sizes, uint64_t seed) {
  Tensor t = random_tensor(sizes, kiln::kFloat32, "contiguous", seed);
  return {t, t.to(kiln::Device::cuda())};
}

// Note [Opaque steps]: memory that only kiln's kernels touch is bound (the
// embedding's ids); memory a library kernel touches (the product's operand
// and result) is patched where a probe finds its pointers (Note [Library node
// addresses]), and copied where probes are off.

// `probe_bytes`: library_probe_bytes() for the capture.
void embedding_and_product(size_t probe_bytes) {
  const bool probes = probe_bytes <= 40 * 1024;
  const kiln::Device cuda = kiln::Device::cuda();
  const auto [table, table_d] = random_pair({50, 64}, 1);
  const auto [w, w_d] = random_pair({64, 96}, 2);
  std::optional<ProbeBytes> setting(probe_bytes);
  auto f = kiln::jit::compile(
      [&](const Tensor& ids, const Tensor& x) {
        return std::make_tuple(kiln::embedding(table_d, ids) * 2.0, kiln::matmul(x, w_d));
      },
      {.name = "opaque"});
  std::vector<Tensor> ids, xs, a, b;
  const std::string logs = captured_logs([&] {
    for (uint64_t i = 0; i < 6; ++i) {
      ids.push_back(random_tensor({4, 8}, kiln::kInt64, "contiguous", 20 + i, 0, 50));
      xs.push_back(random_tensor({64, 64}, kiln::kFloat32, "transposed", 30 + i));
      auto [ra, rb] = f(ids.back().to(cuda), xs.back().to(cuda));
      a.push_back(ra);
      b.push_back(rb);
    }
  });
  setting.reset();
  if (probes) {
    EXPECT_EQ(count_of(logs, "capturing again"), 0) << logs;
    EXPECT_EQ(count_of(logs, "1 library calls among them, 0 arguments and results copied"), 1)
        << logs;
  } else {
    EXPECT_EQ(count_of(logs, "capturing again"), 1) << logs;
    EXPECT_EQ(count_of(logs, "0 library calls among them, 2 arguments and results copied"), 1)
        << logs;
  }
  EXPECT_EQ(logs.find("capture failed"), std::string::npos) << logs;
  EXPECT_GT(f.stats().graph_nodes, 0);
  kiln::EagerGuard eager;
  for (size_t i = 0; i < ids.size(); ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    EXPECT_TENSOR_CLOSE(a[i].cpu(), kiln::embedding(table, ids[i]) * 2.0);
    EXPECT_TENSOR_CLOSE_TOL(b[i].cpu(), kiln::matmul(xs[i], w), 1e-3, 1e-3);
  }
}

TEST(GraphReplay, LibraryPointersPatchedWhereAProbeFindsThem) {
  KILN_REQUIRE_CUDA();
  embedding_and_product(0);
}

TEST(GraphReplay, LibraryMemoryCopiedWithoutProbes) {
  KILN_REQUIRE_CUDA();
  embedding_and_product(SIZE_MAX);
}

// A library call that touches less per-call memory than the threshold keeps
// it on copies (40 KB here, under 1 MiB).
TEST(GraphReplay, SmallLibraryCallsStayOnCopies) {
  KILN_REQUIRE_CUDA();
  embedding_and_product(size_t{1} << 20);
}

// By default every library call is probed (Note [Which library calls are probed]).
TEST(GraphReplay, LibraryCallsProbedByDefault) {
  KILN_REQUIRE_CUDA();
  EXPECT_EQ(kiln::graphs::library_probe_bytes(), kiln::graphs::kDefaultProbeBytes);
  embedding_and_product(kiln::graphs::kDefaultProbeBytes);
}

// A library kernel captured for an argument's alignment is not handed a
// pointer moved by other than a multiple of 256 bytes: such a call runs the
// plan directly (Note [Library node addresses]); the others replay.
TEST(GraphReplay, LibraryPointersKeepTheirAlignment) {
  KILN_REQUIRE_CUDA();
  ProbeBytes probe_all(0);
  const auto [w, w_d] = random_pair({64, 32}, 5);
  const auto [flat, flat_d] = random_pair({64 * 64 + 256}, 6);
  // Two steps (a plan of one kernel is not captured): the product, then tanh.
  auto f = kiln::jit::compile([&](const Tensor& x) { return kiln::tanh(kiln::matmul(x, w_d)); },
                              {.name = "aligned"});
  // Offsets in floats: 64 and 320 bytes apart from where the second entry captures.
  const std::vector<int64_t> offsets = {0, 0, 16, 16, 80, 32, 16, 32};
  const std::string logs = captured_logs([&] {
    for (int64_t off : offsets) {
      Tensor got = f(flat_d.narrow(0, off, 64 * 64).view({64, 64})).cpu();
      kiln::EagerGuard eager;
      SCOPED_TRACE("offset " + std::to_string(off));
      EXPECT_TENSOR_CLOSE_TOL(
          got, kiln::tanh(kiln::matmul(flat.narrow(0, off, 64 * 64).view({64, 64}), w)), 1e-3,
          1e-3);
    }
  });
  EXPECT_EQ(count_of(logs, "run the plan directly"), 1) << logs;
  EXPECT_EQ(logs.find("capture failed"), std::string::npos) << logs;
}

// An argument an extern step (kiln's index_copy kernel) writes in place.
TEST(GraphReplay, ArgumentWrittenInPlaceByAnExternStep) {
  KILN_REQUIRE_CUDA();
  auto f = kiln::jit::compile(
      [](const Tensor& cache, const Tensor& pos, const Tensor& v) {
        kiln::index_copy_(const_cast<Tensor&>(cache), 0, pos, v * 2.0);
        return cache.sum({1});
      },
      {.name = "writeback"});
  Tensor cache = kiln::zeros({8, 4}).cuda();
  Tensor ref = kiln::zeros({8, 4});
  for (int64_t p = 0; p < 8; ++p) {
    Tensor pos = kiln::full({1}, p, kiln::TensorOptions(kiln::kInt64));
    Tensor v = random_tensor({1, 4}, kiln::kFloat32, "contiguous", 70 + p);
    Tensor got = f(cache, pos.cuda(), v.cuda()).cpu();
    kiln::EagerGuard eager;
    kiln::index_copy_(ref, 0, pos, v * 2.0);
    EXPECT_TENSOR_CLOSE(got, ref.sum({1}));
  }
  EXPECT_TENSOR_CLOSE(cache.cpu(), ref);
  EXPECT_GT(f.stats().graph_nodes, 0);
}

// An argument a library kernel writes in place, at a new address on every
// call: its pointer is patched (Note [Library node addresses]).
TEST(GraphReplay, ArgumentWrittenInPlaceByALibraryKernel) {
  KILN_REQUIRE_CUDA();
  ProbeBytes probe_all(0);
  const kiln::Device cuda = kiln::Device::cuda();
  const auto [w, w_d] = random_pair({64, 32}, 3);
  auto f = kiln::jit::compile(
      [&](const Tensor& out, const Tensor& x) {
        kiln::matmul_out(const_cast<Tensor&>(out), x, w_d);
        return out.sum({1});
      },
      {.name = "library writeback"});
  const std::string logs = captured_logs([&] {
    for (uint64_t i = 0; i < 5; ++i) {
      Tensor x = random_tensor({64, 64}, kiln::kFloat32, "contiguous", 80 + i);
      Tensor out = kiln::zeros({64, 32}).to(cuda);
      Tensor got = f(out, x.to(cuda)).cpu();
      kiln::EagerGuard eager;
      Tensor expected = kiln::matmul(x, w);
      SCOPED_TRACE("call " + std::to_string(i));
      EXPECT_TENSOR_CLOSE_TOL(out.cpu(), expected, 1e-3, 1e-3);
      EXPECT_TENSOR_CLOSE_TOL(got, expected.sum({1}), 1e-3, 1e-3);
    }
  });
  EXPECT_EQ(count_of(logs, "capturing again"), 0) << logs;
  EXPECT_EQ(count_of(logs, "0 arguments and results copied"), 1) << logs;
  EXPECT_EQ(logs.find("capture failed"), std::string::npos) << logs;
  EXPECT_GT(f.stats().graph_nodes, 0);
}

// An op that reads a value on the host cannot be captured: logged, and the
// plan runs its kernels directly, with exact results. Note [Capture
// retries]: the capture is tried twice more, 16 and 256 calls later, then
// no more.
TEST(GraphReplay, CaptureFailureFallsBack) {
  KILN_REQUIRE_CUDA();
  auto f = kiln::jit::compile(
      [](const Tensor& x, const Tensor& value) {
        // An int64 value into an int32 tensor may not fit: the kernel reads it back.
        Tensor y = kiln::masked_fill(x, kiln::gt(x, 3), value);
        return y * 2;
      },
      {.name = "sync"});
  std::string logs = captured_logs([&] {
    for (int64_t i = 0; i < 300; ++i) {
      Tensor x = random_tensor({5, 6}, kiln::kInt32, "contiguous", 5 + i, 0, 8);
      Tensor v = kiln::full({}, 100 + i, kiln::TensorOptions(kiln::kInt64));
      Tensor got = f(x.cuda(), v.cuda()).cpu();
      kiln::EagerGuard eager;
      EXPECT_TENSOR_CLOSE(got, kiln::masked_fill(x, kiln::gt(x, 3), v) * 2);
    }
  });
  EXPECT_EQ(count_of(logs, "sync: entry 1: capture failed, the plan runs its kernels directly"), 3)
      << logs;
  EXPECT_EQ(count_of(logs, "directly and captures again in 16 calls"), 1) << logs;
  EXPECT_EQ(count_of(logs, "directly and captures again in 256 calls"), 1) << logs;
  EXPECT_EQ(count_of(logs, "directly from now on"), 1) << logs;
  EXPECT_EQ(f.stats().graph_nodes, 0);
}

// Note [Host values under capture]: inside a compiled function, a 0-dim CPU
// tensor taken as a scalar by a CUDA op (Note [One device per CUDA op]), as
// an argument whose value changes every call and as a captured tensor changed
// in place between calls, and a small CPU argument moved with .to(cuda), are
// read at every replay of one graph, as eager reads them. One past
// kHostValueBytes ends the capture, which falls back (Note [Capture
// retries]), still right.
TEST(GraphReplay, HostValuesReadAtEveryReplay) {
  KILN_REQUIRE_CUDA();
  const kiln::Device cuda = kiln::Device::cuda();
  Tensor c = kiln::full({}, 0.5, kiln::TensorOptions(kiln::kFloat32));
  auto body = [&](const Tensor& x, const Tensor& s, const Tensor& rows) {
    Tensor picked = kiln::index_select(x, 0, rows.to(x.device()));
    return kiln::relu(picked * s + c) - s;
  };
  auto f = kiln::jit::compile(body, {.name = "host values"});
  std::string logs = captured_logs([&] {
    for (int i = 0; i < 8; ++i) {
      Tensor x = random_tensor({6, 33}, kiln::kFloat32, "contiguous", 40 + i);
      Tensor s = kiln::full({}, 1.5 + i, kiln::TensorOptions(kiln::kFloat32));
      Tensor rows = kiln::arange(3, kiln::TensorOptions(kiln::kInt64)) * 2 + (i % 2);
      Tensor got = f(x.to(cuda), s, rows).cpu();
      kiln::EagerGuard eager;
      SCOPED_TRACE("call " + std::to_string(i));
      EXPECT_TENSOR_CLOSE(got, body(x, s, rows));
      c.fill_(-0.25 * i);
    }
  });
  EXPECT_EQ(count_of(logs, "host values: entry 1: captured a graph"), 1) << logs;
  EXPECT_EQ(count_of(logs, "capture failed"), 0) << logs;
  EXPECT_GT(f.stats().graph_nodes, 0);

  // 9 int64 rows (72 bytes, the large put) are captured too, and so are
  // 520 and 1100 (two and three put nodes of at most kHostValueBytes);
  // 8200 (65600 bytes) are past kHostValueLimit.
  auto g = kiln::jit::compile(
      [&](const Tensor& x, const Tensor& rows) {
        return kiln::index_select(x, 0, rows.to(x.device())) * 2;
      },
      {.name = "host rows"});
  for (int64_t n : {9, 520, 1100, 8200}) {
    SCOPED_TRACE(std::to_string(n) + " rows");
    logs = captured_logs([&] {
      for (int i = 0; i < 4; ++i) {
        Tensor x = random_tensor({12, 5}, kiln::kFloat32, "contiguous", 60 + i);
        Tensor rows =
            kiln::remainder(kiln::arange(n, kiln::TensorOptions(kiln::kInt64)) * 7 + i, 12);
        Tensor got = g(x.to(cuda), rows).cpu();
        kiln::EagerGuard eager;
        EXPECT_TENSOR_CLOSE(got, kiln::index_select(x, 0, rows) * 2);
      }
    });
    if (n * 8 <= 16 * 4080) {  // kHostValueLimit (runtime/cuda/launch_record.h)
      EXPECT_NE(logs.find("host rows: entry"), std::string::npos) << logs;
      EXPECT_NE(logs.find(": captured a graph of"), std::string::npos) << logs;
      EXPECT_EQ(count_of(logs, "capture failed"), 0) << logs;
    } else {
      EXPECT_NE(logs.find("capture failed"), std::string::npos) << logs;
      EXPECT_NE(logs.find("expected no host to device copy"), std::string::npos) << logs;
    }
  }

  // A copy from a host buffer that is not the function's: CUDA arange keeps
  // its values on the device (Note [CUDA range factories]) and fills them,
  // on a miss, from a temporary host tensor (here 14 floats, 56 bytes). That
  // copy must happen when it is made, not at a replay, even on the
  // throwaway pass of the first call (Note [Kernels compiled side by side]).
  // A range no other test uses.
  const auto range = [](kiln::Device d) {
    return kiln::arange(0.25, 7.25, 0.5, kiln::TensorOptions(kiln::kFloat32).device(d));
  };
  auto h = kiln::jit::compile([&](const Tensor& x) { return x + range(x.device()); },
                              {.name = "host range"});
  Tensor want = range(kiln::Device::cpu()) + 1.0;
  ASSERT_EQ(want.numel(), 14);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TENSOR_CLOSE(h(kiln::ones({14}).to(cuda)).cpu(), want);
  }
  EXPECT_TENSOR_CLOSE(range(cuda).cpu() + 1.0, want);
}

// Note [Errors of replayed kernels]: an index out of range met by a replay
// raises where the call's results are read (a copy to the host, a
// synchronize), or at the function's next call when nobody read them; the
// calls after it are right. A decode step whose position passes the cache's
// end raises the same way.
TEST(GraphReplay, ReplayedKernelErrorsRaise) {
  KILN_REQUIRE_CUDA();
  const kiln::Device cuda = kiln::Device::cuda();
  Tensor table = random_tensor({10, 6}, kiln::kFloat32, "contiguous", 70).to(cuda);
  auto lookup = [&](const Tensor& ids) { return kiln::index_select(table, 0, ids) * 2.0; };
  auto f = kiln::jit::compile(lookup, {.name = "lookup"});
  const kiln::TensorOptions i64 = kiln::TensorOptions(kiln::kInt64).device(cuda);
  auto ids = [&](std::vector<int64_t> v) { return kiln::tensor(v, {3}, i64); };
  auto want = [&](const Tensor& i) {
    kiln::EagerGuard eager;
    return lookup(i).cpu();
  };
  for (int c = 0; c < 3; ++c) EXPECT_TENSOR_CLOSE(f(ids({1, 2, 3})).cpu(), want(ids({1, 2, 3})));
  ASSERT_GT(f.stats().graph_nodes, 0);
  const char* replayed = "replay of a compiled function's CUDA graph";
  // Read: raises there.
  Tensor bad = f(ids({4, 12, 5}));
  EXPECT_KILN_ERROR(bad.cpu(),
                    "[index_select] index 12 is out of bounds for dimension 0 with size 10");
  EXPECT_TENSOR_CLOSE(f(ids({0, 9, 2})).cpu(), want(ids({0, 9, 2})));
  // Not read: the next call after that replay finished raises (a stream
  // synchronize checks nothing), and the one after is right.
  (void)f(ids({-3, 1, 1}));
  kiln::cuda::Stream::current(cuda).synchronize();
  EXPECT_KILN_ERROR(f(ids({1, 1, 1})), "index -3 is out of bounds");
  EXPECT_TENSOR_CLOSE(f(ids({7, 8, 9})).cpu(), want(ids({7, 8, 9})));
  // A synchronize raises too.
  (void)f(ids({0, 0, 10}));
  EXPECT_KILN_ERROR(kiln::sync(), replayed);
  EXPECT_TENSOR_CLOSE(f(ids({3, 3, 3})).cpu(), want(ids({3, 3, 3})));

  // Decode steps past an 8-slot cache.
  kiln::nn::GPT2 model = kiln::nn::GPT2::random(tiny(), kiln::kFloat16, cuda, 5);
  kiln::nn::GPT2::Cache cache = model.make_cache(1, 8);
  auto step = kiln::jit::compile(
      [&](const Tensor& id, const Tensor& pos) { return model.decode_step(id, pos, cache); },
      {.name = "short cache"});
  for (int64_t p = 0; p < 8; ++p) {
    Tensor out = step(kiln::full({1, 1}, 5 + p, i64), kiln::full({}, p, i64));
    EXPECT_TRUE(kiln::all(kiln::isfinite(out)).item<bool>()) << "position " << p;
  }
  Tensor past = step(kiln::full({1, 1}, 3, i64), kiln::full({}, 8, i64));
  EXPECT_KILN_ERROR(past.cpu(), "index 8 is out of bounds for dimension 2 with size 8");
}

// Note [Device error flags]: every kernel that finds errors in device data
// reports them from a replay too (an integer zero divisor, a scatter
// reduction's index, an embedding renorm's row), and the kernels that read
// their flag back no longer keep their function from being captured.
TEST(GraphReplay, ReplayedErrorsOfEveryFlaggingKernel) {
  KILN_REQUIRE_CUDA();
  const kiln::Device cuda = kiln::Device::cuda();
  const kiln::TensorOptions i64 = kiln::TensorOptions(kiln::kInt64).device(cuda);
  auto ints = [&](std::vector<int64_t> v, std::vector<int64_t> sizes) {
    return kiln::tensor(v, sizes, i64);
  };
  struct Case {
    std::string name;
    std::function<Tensor(const Tensor&)> fn;
    Tensor good, bad;
    std::string error;
  };
  Tensor a = random_tensor({4, 6}, kiln::kInt64, "transposed", 81).to(cuda);
  Tensor base = random_tensor({5, 6}, kiln::kFloat32, "contiguous", 82).to(cuda);
  Tensor src = random_tensor({3, 6}, kiln::kFloat32, "strided", 83).to(cuda);
  Tensor weight = random_tensor({7, 6}, kiln::kFloat32, "contiguous", 84).to(cuda);
  std::vector<Case> cases;
  cases.push_back({"zero divisor",
                   [&](const Tensor& d) {
                     return kiln::sum(kiln::floor_divide(a * 3, d).to(kiln::kFloat32), {1});
                   },
                   kiln::full({6}, 2, i64), ints({2, 1, 0, 3, 5, 1}, {6}), "ZeroDivisionError"});
  cases.push_back({"scatter_reduce",
                   [&](const Tensor& idx) {
                     return kiln::scatter_reduce(base * 2.0, 0, idx, src, "amax") + 1.0;
                   },
                   ints({0, 4, 2}, {3, 1}).expand({3, 6}), ints({0, 5, 2}, {3, 1}).expand({3, 6}),
                   "[scatter_reduce] index 5 is out of bounds for dimension 0 with size 5"});
  // Called itself: embedding with max_norm checks the indices before it renorms.
  cases.push_back({"embedding_renorm_",
                   [&](const Tensor& ids) {
                     Tensor w = weight.clone();
                     kiln::embedding_renorm_(w, ids, 1.0, 2.0);
                     return w * 2.0;
                   },
                   ints({1, 6, 3}, {3}), ints({1, 9, 3}, {3}),
                   "[embedding_renorm_] index 9 is out of range for a weight of 7 rows"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto f = kiln::jit::compile(c.fn, {.name = c.name});
    auto want = [&](const Tensor& x) {
      kiln::EagerGuard eager;
      return c.fn(x).cpu();
    };
    {
      kiln::EagerGuard eager;
      EXPECT_KILN_ERROR(c.fn(c.bad).cpu(), c.error);  // eager raises at the op
    }
    for (int k = 0; k < 3; ++k) EXPECT_TENSOR_CLOSE(f(c.good).cpu(), want(c.good));
    EXPECT_GT(f.stats().graph_nodes, 0);
    EXPECT_EQ(f.stats().uncompiled_calls, 0);
    Tensor wrong = f(c.bad);
    EXPECT_KILN_ERROR(wrong.cpu(), c.error);
    EXPECT_TENSOR_CLOSE(f(c.good).cpu(), want(c.good));
  }
}

// Note [Errors of replayed kernels]: a capture with more kernels that check
// device data than it has error slots is not kept (its replays would leave
// some errors unreported); the function runs directly, where each is checked.
TEST(GraphReplay, MoreCheckingKernelsThanErrorSlotsRunDirectly) {
  KILN_REQUIRE_CUDA();
  const kiln::Device cuda = kiln::Device::cuda();
  Tensor table = random_tensor({10, 4}, kiln::kFloat32, "contiguous", 90).to(cuda);
  constexpr int kLookups = 600;  // more than a capture's 512 slots
  auto lookups = [&](const Tensor& ids) {
    Tensor acc = kiln::index_select(table, 0, ids);
    for (int i = 1; i < kLookups; ++i) acc = kiln::index_select(acc * 0.5 + table, 0, ids);
    return acc;
  };
  auto f = kiln::jit::compile(lookups, {.name = "many lookups"});
  const kiln::TensorOptions i64 = kiln::TensorOptions(kiln::kInt64).device(cuda);
  auto ids = [&](std::vector<int64_t> v) { return kiln::tensor(v, {10}, i64); };
  const Tensor good = ids({1, 2, 3, 4, 5, 6, 7, 8, 9, 0});
  Tensor want;
  {
    kiln::EagerGuard eager;
    want = lookups(good).cpu();
  }
  const std::string logs = captured_logs([&] {
    for (int c = 0; c < 3; ++c) EXPECT_TENSOR_CLOSE_TOL(f(good).cpu(), want, 1e-5, 1e-5);
  });
  EXPECT_EQ(f.stats().graph_nodes, 0) << logs;
  EXPECT_NE(logs.find("more kernels check device data than a capture has error slots (512)"),
            std::string::npos)
      << logs;
  EXPECT_KILN_ERROR(f(ids({1, 2, 3, 4, 5, 6, 7, 8, 9, 10})).cpu(),
                    "index 10 is out of bounds for dimension 0 with size 10");
}

// Note [Kernels compiled side by side]: the first call finds its kernels
// under a capture it throws away (a placeholder stands in for each), builds
// them together, then runs; that call, the captured one and a replay all
// equal eager. The constants make the pointwise kernel one no other test of
// the process builds, so at least it is found that way.
TEST(GraphReplay, FirstCallBuildsItsKernelsSideBySide) {
  KILN_REQUIRE_CUDA();
  kiln::nn::Linear lin{random_tensor({48, 40}, kiln::kFloat32, "contiguous", 11).cuda(),
                       random_tensor({48}, kiln::kFloat32, "contiguous", 12).cuda()};
  auto body = [&](const Tensor& x) {
    Tensor h = kiln::softmax(x * 1.2345 - 0.375, -1);
    return kiln::gelu(lin.forward(kiln::layer_norm(h + x, {40})));
  };
  auto f = kiln::jit::compile(body, {.name = "ahead"});
  std::string logs = captured_logs(
      [&] {
        for (int c = 0; c < 3; ++c) {
          Tensor x = random_tensor({3, 40}, kiln::kFloat32, "contiguous", 400 + c);
          Tensor got = f(x.cuda()).cpu();
          kiln::EagerGuard eager;
          SCOPED_TRACE("call " + std::to_string(c));
          EXPECT_TENSOR_CLOSE_TOL(got, body(x.cuda()).cpu(), 1e-4, 1e-4);
        }
      },
      "perf,graphs");
  const size_t at = logs.find("kernels built side by side");
  ASSERT_NE(at, std::string::npos) << logs;
  EXPECT_EQ(logs.find("stopped early"), std::string::npos) << logs;
  EXPECT_EQ(count_of(logs, "kernels built side by side"), 1) << logs;
  EXPECT_NE(logs.find("ahead: entry 1: captured a graph"), std::string::npos) << logs;
}

// Note [Dynamic storage offsets] under replay: slices of two buffers at new
// offsets every call replay a cached graph; the kernels' pointers into `y`
// and the copy of `x` into the graph's buffer (a product reads it) move with
// each slice, and a result that is a view of `y` is the call's own.
TEST(GraphReplay, SlicesAtNewOffsetsReplayInPlace) {
  KILN_REQUIRE_CUDA();
  const kiln::Device cuda = kiln::Device::cuda();
  Tensor w = random_tensor({6, 6}, kiln::kFloat32, "contiguous", 70);
  Tensor xs = random_tensor({48, 6}, kiln::kFloat32, "contiguous", 71);
  Tensor ys = random_tensor({48, 6}, kiln::kFloat32, "contiguous", 72);
  Tensor wc = w.to(cuda), xc = xs.to(cuda), yc = ys.to(cuda);
  auto f = kiln::jit::compile(
      [&](const Tensor& x, const Tensor& y) {
        return std::make_pair(kiln::tanh(kiln::matmul(x, wc)) + y.narrow(0, 1, 4) * 2.0,
                              y.narrow(0, 2, 3));
      },
      {.name = "slices"});
  for (int round = 0; round < 2; ++round) {
    for (int64_t t : {0, 4, 8, 12, 16, 20, 24, 28, 32, 36}) {
      SCOPED_TRACE("round " + std::to_string(round) + ", row " + std::to_string(t));
      Tensor y = yc.narrow(0, t, 6);
      auto [got, view] = f(xc.narrow(0, t, 4), y);
      EXPECT_EQ(view.data_ptr(), y.narrow(0, 2, 3).data_ptr());
      kiln::EagerGuard eager;
      EXPECT_TENSOR_CLOSE_TOL(
          got.cpu(), kiln::tanh(kiln::matmul(xs.narrow(0, t, 4), w)) + ys.narrow(0, t + 1, 4) * 2.0,
          1e-4, 1e-4);
    }
  }
  EXPECT_EQ(f.stats().entries, 2);  // the first offset, then both offsets dynamic at once
  EXPECT_GT(f.stats().graph_nodes, 0);
}

// Two arguments on one storage sliding together (Note [Dynamic storage
// offsets]) replay one graph: the in-place write through `a` lands at each
// call's offset, `b` reads it there, and the product reads the call's rows.
TEST(GraphReplay, SharedStorageWindowsReplayInPlace) {
  KILN_REQUIRE_CUDA();
  const kiln::Device cuda = kiln::Device::cuda();
  Tensor w = random_tensor({6, 6}, kiln::kFloat32, "contiguous", 73);
  Tensor buf = random_tensor({48, 6}, kiln::kFloat32, "contiguous", 74);
  Tensor wc = w.to(cuda), bufc = buf.to(cuda);
  auto f = kiln::jit::compile(
      [&](const Tensor& a, const Tensor& b) {
        Tensor t = a;
        t.mul_(0.5);
        return kiln::tanh(kiln::matmul(b, wc)) + a.narrow(0, 0, 4);
      },
      {.name = "windows"});
  Tensor expected = buf.clone();
  for (int64_t t : {0, 4, 8, 12, 16, 20, 24, 28, 32, 36}) {
    SCOPED_TRACE("row " + std::to_string(t));
    Tensor got = f(bufc.narrow(0, t, 6), bufc.narrow(0, t + 2, 4));
    kiln::EagerGuard eager;
    Tensor a = expected.narrow(0, t, 6);
    a.mul_(0.5);
    EXPECT_TENSOR_CLOSE_TOL(
        got.cpu(),
        kiln::tanh(kiln::matmul(expected.narrow(0, t + 2, 4), w)) + expected.narrow(0, t, 4), 1e-4,
        1e-4);
    EXPECT_TENSOR_CLOSE(bufc.cpu(), expected);
  }
  EXPECT_EQ(f.stats().entries, 2);  // the first offset, then the pair's offset dynamic
  EXPECT_GT(f.stats().graph_nodes, 0);
}

// Buckets: one graph per bucket, each captured once and named in the log.
TEST(GraphReplay, BucketsCaptureOneGraphEach) {
  KILN_REQUIRE_CUDA();
  const kiln::Device cuda = kiln::Device::cuda();
  Tensor w = random_tensor({6, 6}, kiln::kFloat32, "transposed", 9);
  Tensor wc = w.to(cuda);
  auto f = kiln::jit::compile(
      [&](const Tensor& x) { return kiln::tanh(kiln::matmul(x, wc)) + x.sum({1}, true); },
      {.name = "b", .dynamic = {{0, 0}}, .buckets = {1, 2, 4, 8}});
  const std::string logs = captured_logs([&] {
    for (int64_t n : {3, 4, 5, 7, 8, 3, 6}) {
      Tensor x = random_tensor({n, 6}, kiln::kFloat32, "contiguous", static_cast<uint64_t>(n));
      Tensor got = f(x.to(cuda)).cpu();
      SCOPED_TRACE("size " + std::to_string(n));
      ASSERT_EQ(got.size(0), n);
      kiln::EagerGuard eager;
      EXPECT_TENSOR_CLOSE_TOL(got, kiln::tanh(kiln::matmul(x, w)) + x.sum({1}, true), 1e-4, 1e-4);
    }
  });
  EXPECT_EQ(count_of(logs, "b: entry 1, bucket 4: captured a graph"), 1) << logs;
  EXPECT_EQ(count_of(logs, "b: entry 1, bucket 8: captured a graph"), 1) << logs;
  EXPECT_EQ(f.stats().specializations, 1) << logs;
}

// Note [Capture hints]: once an entry has captured, a plan for a new size
// captures its first call and replays it, copying at once the result that
// the entry's first capture found cuBLASLt writing (that capture had to try
// twice). At 4 rows the product is kiln's own kernel, new to the process
// (its shapes are this test's): placeholders stand in for it during that
// capture, it is built, and the capture is made again; the hinted copy is
// needless there, so one more capture goes without it. Every call equals
// eager, the first at each size included.
TEST(GraphReplay, NewSizesReplayFromTheirFirstCall) {
  KILN_REQUIRE_CUDA();
  // The library call's memory copied, not patched: the hints below are
  // about copies (Note [Which library calls are probed]).
  const ProbeBytes copies(SIZE_MAX);
  kiln::nn::Linear lin{random_tensor({72, 40}, kiln::kFloat32, "contiguous", 21).cuda(),
                       random_tensor({72}, kiln::kFloat32, "contiguous", 22).cuda()};
  auto body = [&](const Tensor& x) {
    return std::make_pair(lin.forward(kiln::layer_norm(x, {40})), kiln::tanh(x) * 2.0);
  };
  auto f = kiln::jit::compile(body, {.name = "sizes", .dynamic = {{0, 0}}});
  auto kernels = [] {
    const kiln::jit::cuda::CudaKernelStats k = kiln::jit::cuda::cuda_kernel_stats();
    return k.compiled + k.disk_hits;
  };
  std::set<int64_t> seen;
  int64_t replayed_first = 0, built_at_4 = 0;
  const std::string logs = captured_logs(
      [&] {
        int call = 0;
        for (int64_t rows : {24, 24, 40, 33, 24, 4, 40, 4}) {
          const bool new_size = seen.insert(rows).second && call > 0;
          Tensor x = random_tensor({rows, 40}, kiln::kFloat32, "contiguous", 500 + call++);
          const int64_t before = kernels();
          const auto [got, got2] = f(x.cuda());
          if (new_size && rows == 4) built_at_4 = kernels() - before;
          kiln::EagerGuard eager;
          const auto [want, want2] = body(x.cuda());
          SCOPED_TRACE("rows " + std::to_string(rows) + ", call " + std::to_string(call));
          EXPECT_TENSOR_CLOSE_TOL(got.cpu(), want.cpu(), 1e-4, 1e-4);
          EXPECT_TENSOR_CLOSE_TOL(got2.cpu(), want2.cpu(), 1e-5, 1e-5);
          if (new_size) replayed_first += f.stats().graph_nodes > 0;
        }
      },
      "graphs,recompiles,perf");
  EXPECT_EQ(f.stats().entries, 1) << logs;
  EXPECT_EQ(f.stats().specializations, 3) << logs;
  EXPECT_EQ(replayed_first, 3) << logs;  // 40, 33 and 4
  auto at = [](int rows, const std::string& what) {
    return "sizes: entry 1, sizes " + std::to_string(rows) + ": " + what;
  };
  for (int rows : {24, 40, 33, 4}) {
    EXPECT_EQ(count_of(logs, at(rows, "captured a graph")), 1) << rows << "\n" << logs;
    EXPECT_EQ(count_of(logs, at(rows, "library kernels touch memory the capture bound")),
              rows == 24 ? 1 : 0)
        << rows << "\n"
        << logs;
    EXPECT_EQ(count_of(logs, at(rows, "1 argument or result the entry's other captures copied")),
              rows == 4 ? 1 : 0)
        << rows << "\n"
        << logs;
  }
  ASSERT_GT(built_at_4, 0) << logs;
  const std::string n = std::to_string(built_at_4);
  EXPECT_EQ(count_of(logs, at(4, n + " of " + n + " kernels built side by side")), 1) << logs;
  EXPECT_EQ(logs.find("capture failed"), std::string::npos) << logs;
}

// A LayerNorm before a product of a few rows folds into the product's
// prologue (Note [Norm prologues]); above kNormRows rows the product runs it
// as its own kernel, then cuBLASLt. Every replay reads that call's input, in
// either way and in both modes.
TEST(GraphReplay, NormBeforeAProductReadsEachCallsInput) {
  KILN_REQUIRE_CUDA();
  kiln::nn::Linear lin{random_tensor({64, 32}, kiln::kFloat32, "contiguous", 1).cuda(),
                       random_tensor({64}, kiln::kFloat32, "contiguous", 2).cuda()};
  for (kiln::jit::Mode mode : {kiln::jit::Mode::ReduceOverhead, kiln::jit::Mode::Default}) {
    for (int64_t rows : {2, 8, 16, 40}) {
      auto f = kiln::jit::compile(
          [&](const Tensor& x) { return kiln::gelu(lin.forward(kiln::layer_norm(x, {32}))); },
          {.name = "norm", .mode = mode});
      std::string logs = captured_logs([&] {
        for (int c = 0; c < 5; ++c) {
          Tensor x = random_tensor({rows, 32}, kiln::kFloat32, "contiguous", 300 + c);
          Tensor got = f(x.cuda()).cpu();
          kiln::EagerGuard eager;
          Tensor want = kiln::gelu(lin.forward(kiln::layer_norm(x.cuda(), {32}))).cpu();
          SCOPED_TRACE("rows " + std::to_string(rows) + ", call " + std::to_string(c) +
                       (mode == kiln::jit::Mode::Default ? ", default mode" : ""));
          EXPECT_TENSOR_CLOSE_TOL(got, want, 1e-4, 1e-4);
        }
      });
      if (::testing::Test::HasFailure()) {
        std::ostringstream ex;
        ex << f.explain();
        ADD_FAILURE() << logs << ex.str();
        return;
      }
    }
  }
}

// The decode attention's combine counters are the graph's own, cleared once
// and left zero by the kernel (Note [Counters that reset themselves]): every
// replay elects its last blocks again. A cache of 1024 splits the sequence.
// On sm_90 the graph's generated kernels also launch early (Note [Early
// launch]), which explain() reports.
TEST(GraphReplay, DecodeAttentionCountersResetOnEveryReplay) {
  KILN_REQUIRE_CUDA();
  const kiln::Device cuda = kiln::Device::cuda();
  Tensor q = random_tensor({1, 12, 1, 64}, kiln::kFloat16, "contiguous", 71).cuda();
  Tensor kc = random_tensor({1, 12, 1024, 64}, kiln::kFloat16, "contiguous", 72).cuda();
  Tensor vc = random_tensor({1, 12, 1024, 64}, kiln::kFloat16, "contiguous", 73).cuda();
  auto body = [&](const Tensor& x, const Tensor& pos) {
    return kiln::add(kiln::kv_cache_attention(kiln::mul(x, 2.0), kc, vc, pos), 1.0);
  };
  auto f = kiln::jit::compile(body, {.name = "attend"});
  const std::vector<int64_t> positions = {0, 1, 63, 64, 65, 500, 1023, 17, 1023, 0};
  for (int round = 0; round < 3; ++round) {
    for (int64_t p : positions) {
      Tensor pos = kiln::full({1}, p, kiln::TensorOptions(kiln::kInt64)).to(cuda);
      Tensor x = random_tensor({1, 12, 1, 64}, kiln::kFloat16, "contiguous", 100 + p).cuda();
      Tensor got = f(x, pos).cpu();
      kiln::EagerGuard eager;
      Tensor want = body(x, pos).cpu();
      SCOPED_TRACE("round " + std::to_string(round) + ", position " + std::to_string(p));
      EXPECT_TENSOR_CLOSE_TOL(got, want, 2e-3, 2e-3);
    }
  }
  EXPECT_EQ(f.stats().entries, 1);
  EXPECT_GT(f.stats().graph_nodes, 0);
  const kiln::jit::Explanation ex = f.explain();
  ASSERT_FALSE(ex.entries.empty());
  ASSERT_FALSE(ex.entries[0].plans.empty());
  const kiln::jit::ExplainPlan& plan = ex.entries[0].plans[0];
  // mul, attention, add: at least two edges between generated kernels (a copy
  // node of the position, itself a kernel, may add one).
  int major = 0, minor = 0;
  kiln::cuda::device_capability(0, &major, &minor);
  const char* pdl = std::getenv("KILN_PDL");
  if (major >= 9 && !(pdl && std::string(pdl) == "0")) {
    EXPECT_GE(plan.early_launches, 2) << ex;
  } else {
    EXPECT_EQ(plan.early_launches, 0) << ex;
  }
}

TEST(GraphReplay, EightThreadsThousandCallsEach) {
  KILN_REQUIRE_CUDA();
  kiln::nn::Linear lin{random_tensor({64, 32}, kiln::kFloat32, "contiguous", 1).cuda(),
                       random_tensor({64}, kiln::kFloat32, "contiguous", 2).cuda()};
  auto f = kiln::jit::compile(
      [&](const Tensor& x) { return kiln::gelu(lin.forward(kiln::layer_norm(x, {32}))); },
      {.name = "threads"});
  // The references come from eager kernels, not from f: a replay that kept
  // an earlier call's input would otherwise agree with itself.
  std::vector<Tensor> inputs, expected;
  for (int i = 0; i < 16; ++i) {
    inputs.push_back(random_tensor({8, 32}, kiln::kFloat32, "contiguous", 100 + i).cuda());
    {
      kiln::EagerGuard eager;
      expected.push_back(kiln::gelu(lin.forward(kiln::layer_norm(inputs.back(), {32}))).cpu());
    }
    SCOPED_TRACE("call " + std::to_string(i));
    EXPECT_TENSOR_CLOSE_TOL(f(inputs.back()).cpu(), expected.back(), 1e-5, 1e-5);
  }
  std::vector<std::string> errors(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      kiln::cuda::StreamGuard stream(kiln::cuda::Stream::from_pool());
      for (int c = 0; c < 1000 && errors[t].empty(); ++c) {
        const int k = (t * 5 + c) % 16;
        Tensor r = f(inputs[k]);
        if (c % 97 == 0 || c == 999) {
          errors[t] = kiln::testing::compare(r.cpu(), expected[k], {1e-5, 1e-5});
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
  EXPECT_EQ(f.stats().entries, 1);
  EXPECT_LE(f.stats().instances, 9);
  EXPECT_GE(f.stats().hits, 8000) << "every threaded call ran the cached plan";
  EXPECT_GT(f.stats().graph_nodes, 0) << "the last call replayed no graph";
}

// Memory pressure while capturing: a clear kiln::Error or a direct run, and
// the process keeps working once memory is back; so do graphs (Note
// [Capture retries]: a capture that failed is tried again 16 calls later).
TEST(GraphReplay, OutOfMemoryDuringCapture) {
  KILN_REQUIRE_CUDA();
  // Two kernels (a plan of one is not captured).
  auto f = kiln::jit::compile(
      [](const Tensor& x) { return kiln::sigmoid(x) * x + kiln::exp(x).sum(1, true); },
      {.name = "oom"});
  Tensor x = random_tensor({1024, 1024}, kiln::kFloat32, "contiguous", 1).cuda();
  Tensor expected = f(x).cpu();  // warm-up: the next call captures
  kiln::cuda::empty_cache();
  kiln::cuda::set_memory_fraction(1e-4);
  try {
    Tensor r = f(x);
    EXPECT_TENSOR_CLOSE_TOL(r.cpu(), expected, 1e-5, 1e-5);
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
  kiln::cuda::set_memory_fraction(1.0);
  for (int i = 0; i < 20; ++i) EXPECT_TENSOR_CLOSE_TOL(f(x).cpu(), expected, 1e-5, 1e-5);
  EXPECT_GT(f.stats().graph_nodes, 0);
}

// The same for a new size whose first call is captured (Note [Capture
// hints]): an error or a direct run, no plan kept half-built, and that size
// works once memory is back.
TEST(GraphReplay, OutOfMemoryDuringANewSizesCapture) {
  KILN_REQUIRE_CUDA();
  auto body = [](const Tensor& x) { return kiln::sigmoid(x) * x + kiln::exp(x).sum(1, true); };
  auto f = kiln::jit::compile(body, {.name = "oom", .dynamic = {{0, 0}}});
  Tensor small = random_tensor({64, 1024}, kiln::kFloat32, "contiguous", 1).cuda();
  for (int i = 0; i < 3; ++i) (void)f(small);  // the entry captures
  Tensor big = random_tensor({1024, 1024}, kiln::kFloat32, "contiguous", 2).cuda();
  Tensor expected;
  {
    kiln::EagerGuard eager;
    expected = body(big).cpu();
  }
  kiln::cuda::empty_cache();
  kiln::cuda::set_memory_fraction(1e-4);
  try {
    Tensor r = f(big);
    EXPECT_TENSOR_CLOSE_TOL(r.cpu(), expected, 1e-5, 1e-5);
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
  kiln::cuda::set_memory_fraction(1.0);
  for (int i = 0; i < 3; ++i) EXPECT_TENSOR_CLOSE_TOL(f(big).cpu(), expected, 1e-5, 1e-5);
  EXPECT_GT(f.stats().graph_nodes, 0);
}

}  // namespace
