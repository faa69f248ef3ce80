// jit::compile against eager execution: every workload compiled, called
// several times on new inputs, each result held to the eager reference;
// decode steps writing a KV cache; random DAGs; results of earlier calls
// never overwritten; concurrent callers. (Guards and recompiles:
// guards_test.cpp.)

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/random_program.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::jit::Mode;
using kiln::testing::random_tensor;

const Mode kModes[] = {Mode::ReduceOverhead, Mode::Default, Mode::MaxAutotune};

const char* mode_name(Mode m) {
  return m == Mode::ReduceOverhead ? "reduce-overhead"
         : m == Mode::Default      ? "default"
                                   : "max-autotune";
}

Tensor chain16(const Tensor& x0) {
  Tensor x = x0;
  for (int i = 0; i < 4; ++i) {
    x = x * 1.0001 + 0.5;
    x = kiln::sigmoid(x);
    x = x - 0.25;
    x = kiln::tanh(x);
  }
  return x;
}

struct Mlp {
  kiln::nn::Linear a, b;
  Tensor forward(const Tensor& x) const { return b.forward(kiln::relu(a.forward(x))); }
};

Mlp make_mlp(kiln::Device device, int64_t d, int64_t h) {
  kiln::EagerGuard eager;
  Mlp m;
  m.a.weight = random_tensor({h, d}, kiln::kFloat32, "contiguous", 11, -0.1, 0.1).to(device);
  m.a.bias = random_tensor({h}, kiln::kFloat32, "contiguous", 12, -0.1, 0.1).to(device);
  m.b.weight = random_tensor({d, h}, kiln::kFloat32, "transposed", 13, -0.1, 0.1).to(device);
  m.b.bias = random_tensor({d}, kiln::kFloat32, "contiguous", 14, -0.1, 0.1).to(device);
  return m;
}

kiln::nn::GPT2Config tiny_gpt2() {
  kiln::nn::GPT2Config c;
  c.n_layer = 2;
  c.d_model = 64;
  c.n_head = 4;
  c.vocab = 97;
  c.n_positions = 64;
  return c;
}

Tensor ids_for(int64_t batch, int64_t tokens, uint64_t seed, kiln::Device device) {
  kiln::EagerGuard eager;
  return random_tensor({batch, tokens}, kiln::kInt64, "contiguous", seed, 0, 97).to(device);
}

class CompiledMatchesEager : public ::testing::TestWithParam<std::tuple<Mode, bool>> {
 protected:
  Mode mode() const { return std::get<0>(GetParam()); }
  kiln::Device device() const {
    return std::get<1>(GetParam()) ? kiln::Device::cuda() : kiln::Device::cpu();
  }
  void SetUp() override {
    if (device().is_cuda()) {
      KILN_REQUIRE_CUDA();
    }
  }
};

TEST_P(CompiledMatchesEager, Chain16) {
  int traced = 0;  // calls of the function itself: the first call only
  auto f = kiln::jit::compile(
      [&](const Tensor& x) {
        ++traced;
        return chain16(x);
      },
      {.name = "chain16", .mode = mode()});
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Tensor x = random_tensor({33, 65}, kiln::kFloat32, "transposed", seed).to(device());
    Tensor expected;
    {
      kiln::EagerGuard eager;
      expected = chain16(x.cpu());
    }
    EXPECT_TENSOR_CLOSE_TOL(f(x).cpu(), expected, 1e-5, 1e-6);
  }
  const kiln::jit::CompileStats s = f.stats();
  EXPECT_EQ(traced, 1);
  EXPECT_EQ(s.entries, 1);
  EXPECT_EQ(s.hits, 3);
  EXPECT_EQ(s.uncompiled_calls, 0);
  EXPECT_EQ(s.kernels_per_call, 1);  // one fused kernel
}

TEST_P(CompiledMatchesEager, Mlp) {
  Mlp m = make_mlp(device(), 48, 96);
  Mlp ref = make_mlp(kiln::Device::cpu(), 48, 96);
  auto f = kiln::jit::compile([&](const Tensor& x) { return m.forward(x); },
                              {.name = "mlp", .mode = mode()});
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Tensor x = random_tensor({8, 48}, kiln::kFloat32, "strided", seed);
    Tensor expected;
    {
      kiln::EagerGuard eager;
      expected = ref.forward(x);
    }
    EXPECT_TENSOR_CLOSE_TOL(f(x.to(device())).cpu(), expected, 1e-4, 1e-5);
  }
  EXPECT_EQ(f.stats().entries, 1);
}

TEST_P(CompiledMatchesEager, Gpt2TwoLayers) {
  kiln::nn::GPT2 model = kiln::nn::GPT2::random(tiny_gpt2(), kiln::kFloat32, device(), 5);
  kiln::nn::GPT2 ref = kiln::nn::GPT2::random(tiny_gpt2(), kiln::kFloat32, kiln::Device::cpu(), 5);
  auto f = kiln::jit::compile([&](const Tensor& ids) { return model.lm_head(model.forward(ids)); },
                              {.name = "gpt2", .mode = mode()});
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Tensor ids = ids_for(2, 9, seed, device());
    Tensor expected;
    {
      kiln::EagerGuard eager;
      expected = ref.lm_head(ref.forward(ids.cpu()));
    }
    EXPECT_TENSOR_CLOSE_TOL(f(ids).cpu(), expected, 2e-4, 2e-4);
  }
  EXPECT_EQ(f.stats().entries, 1);
  EXPECT_GT(f.stats().kernels_per_call, 10);
}

// Decode steps at successive positions: the KV cache (captured) is written in
// place at a position held in a tensor, step after step, with one compile.
TEST_P(CompiledMatchesEager, DecodeSteps) {
  kiln::nn::GPT2 model = kiln::nn::GPT2::random(tiny_gpt2(), kiln::kFloat32, device(), 7);
  kiln::nn::GPT2 ref = kiln::nn::GPT2::random(tiny_gpt2(), kiln::kFloat32, kiln::Device::cpu(), 7);
  kiln::nn::GPT2::Cache cache = model.make_cache(2, 16);
  kiln::nn::GPT2::Cache ref_cache = ref.make_cache(2, 16);
  auto step = kiln::jit::compile(
      [&](const Tensor& ids, const Tensor& pos) { return model.decode_step(ids, pos, cache); },
      {.name = "decode", .mode = mode(), .input_names = {"ids", "pos"}});
  for (int64_t p = 0; p < 10; ++p) {
    Tensor ids = ids_for(2, 1, 100 + static_cast<uint64_t>(p), device());
    Tensor pos = kiln::full({1}, p, kiln::TensorOptions(kiln::kInt64)).to(device());
    Tensor expected;
    {
      kiln::EagerGuard eager;
      expected = ref.decode_step(ids.cpu(), pos.cpu(), ref_cache);
    }
    SCOPED_TRACE("position " + std::to_string(p));
    EXPECT_TENSOR_CLOSE_TOL(step(ids, pos).cpu(), expected, 2e-4, 2e-4);
  }
  EXPECT_EQ(step.stats().entries, 1);
  EXPECT_EQ(step.stats().hits, 9);
  // The cache holds what the eager steps wrote.
  EXPECT_TENSOR_CLOSE_TOL(cache.k[1].cpu(), ref_cache.k[1], 2e-4, 2e-4);
}

// Results of earlier calls keep their values: each call's are fresh tensors.
TEST_P(CompiledMatchesEager, EarlierResultsKeepTheirValues) {
  auto f = kiln::jit::compile([](const Tensor& x) { return kiln::tanh(x * 3.0) + x; },
                              {.name = "keep", .mode = mode()});
  std::vector<Tensor> inputs, outputs;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    inputs.push_back(random_tensor({5, 7}, kiln::kFloat32, "offset", seed).to(device()));
    outputs.push_back(f(inputs.back()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    kiln::EagerGuard eager;
    Tensor x = inputs[i].cpu();
    SCOPED_TRACE("call " + std::to_string(i));
    EXPECT_TENSOR_CLOSE(outputs[i].cpu(), kiln::tanh(x * 3.0) + x);
  }
}

// The plan stores what the function returns, not its intermediates: they
// stay inside the fused kernel (the copies an instance makes must not count
// as references held outside).
TEST(Compile, IntermediatesStayInTheFusedKernel) {
  auto f = kiln::jit::compile([](const Tensor& x) { return chain16(x); }, {.name = "stores"});
  kiln::set_logs("fusion");
  ::testing::internal::CaptureStderr();
  Tensor r = f(random_tensor({64}, kiln::kFloat32, "contiguous", 1));
  r = f(random_tensor({64}, kiln::kFloat32, "contiguous", 2));
  const std::string logs = ::testing::internal::GetCapturedStderr();
  kiln::set_logs("");
  EXPECT_NE(logs.find("tanh -> 1 out]"), std::string::npos) << logs;
  EXPECT_EQ(logs.find("tanh -> 20 out]"), std::string::npos) << logs;
}

INSTANTIATE_TEST_SUITE_P(
    Modes, CompiledMatchesEager, ::testing::Combine(::testing::ValuesIn(kModes), ::testing::Bool()),
    [](const auto& info) {
      return std::string(mode_name(std::get<0>(info.param))) == "default"
                 ? std::string("Default") + (std::get<1>(info.param) ? "Cuda" : "Cpu")
             : std::string(mode_name(std::get<0>(info.param))) == "reduce-overhead"
                 ? std::string("ReduceOverhead") + (std::get<1>(info.param) ? "Cuda" : "Cpu")
                 : std::string("MaxAutotune") + (std::get<1>(info.param) ? "Cuda" : "Cpu");
    });

// Note [Random ops run at the call]: a compiled function draws new numbers
// at every call, in eager's order, from the generator as the call finds it
// (they used to be constants of the trace: every call returned the first
// call's numbers). Every mode; on CUDA too, where the numbers come from the
// host and move to the device.
// A moved-from compiled function raises on every use, naming what happened;
// the object it was moved into keeps the cache.
TEST(Compile, MovedFromRaises) {
  auto f = kiln::jit::compile([](const Tensor& x) { return x * 2.0 + 1.0; });
  const Tensor x = kiln::arange(6, kiln::TensorOptions(kiln::kFloat32));
  Tensor first = f(x);
  auto g = std::move(f);
  for (int use = 0; use < 3; ++use) {
    try {
      if (use == 0) (void)f(x);
      if (use == 1) (void)f.stats();
      if (use == 2) f.mark_dynamic(0, 0);
      ADD_FAILURE() << "use " << use << " of a moved-from compiled function did not raise";
    } catch (const kiln::Error& e) {
      EXPECT_NE(std::string(e.what()).find("moved-from"), std::string::npos) << e.what();
    }
  }
  const std::string msg = kiln::testing::compare(g(x), first, {0, 0});
  EXPECT_TRUE(msg.empty()) << msg;
  EXPECT_EQ(g.stats().calls, 2);
}

TEST(Compile, RandomOpsDrawAtEveryCall) {
  for (bool cuda : {false, true}) {
    if (cuda && !kiln::cuda::is_available()) continue;
    const kiln::Device dev = cuda ? kiln::Device::cuda() : kiln::Device::cpu();
    for (Mode mode : kModes) {
      SCOPED_TRACE(std::string(mode_name(mode)) + (cuda ? " cuda" : " cpu"));
      auto body = [&](const Tensor& x) {
        Tensor u = kiln::rand({3, 5}).to(dev);
        Tensor n = kiln::randn({3, 5}, kiln::TensorOptions(kiln::kFloat64)).to(dev);
        Tensor k = kiln::randint(-4, 9, {5}, kiln::TensorOptions(kiln::kInt32)).to(dev);
        return x * u + n.to(kiln::kFloat32) - k;
      };
      auto f = kiln::jit::compile(body, {.name = "draws", .mode = mode});
      Tensor x = random_tensor({3, 5}, kiln::kFloat32, "contiguous", 3).to(dev);
      std::vector<Tensor> seen;
      for (uint64_t seed : {5, 6, 5}) {
        kiln::manual_seed(seed);
        Tensor got = f(x).cpu();
        Tensor again = f(x).cpu();  // the generator moved on
        kiln::manual_seed(seed);
        Tensor want, want_again;
        {
          kiln::EagerGuard eager;
          want = body(x).cpu();
          want_again = body(x).cpu();
        }
        EXPECT_TENSOR_CLOSE(got, want);
        EXPECT_TENSOR_CLOSE(again, want_again);
        EXPECT_GT(kiln::max(kiln::abs(got - again)).item<float>(), 0.0f);
        seen.push_back(got);
      }
      EXPECT_GT(kiln::max(kiln::abs(seen[0] - seen[1])).item<float>(), 0.0f);
      EXPECT_TENSOR_CLOSE(seen[0], seen[2]);
      // A trace raises for a dtype the op refuses, as eager does.
      auto bad = kiln::jit::compile(
          [](const Tensor& x) { return x + kiln::rand({2}, kiln::TensorOptions(kiln::kInt32)); },
          {.name = "bad draw", .mode = mode});
      EXPECT_KILN_ERROR(bad(kiln::zeros({2})), "[rand] expected a floating dtype, got int32");
    }
  }
}

// Results that are an argument, a captured tensor, or views of them; an
// argument written in place; a weight updated in place between calls.
TEST(Compile, AliasesAndInPlaceWrites) {
  Tensor w = random_tensor({4, 6}, kiln::kFloat32, "contiguous", 3);
  auto f = kiln::jit::compile(
      [&](const Tensor& x, const Tensor& acc) {
        kiln::add_(const_cast<Tensor&>(acc), x * w);  // an argument written in place
        return std::make_tuple(x, w.transpose(0, 1), acc * 2.0);
      },
      {.name = "aliases"});
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Tensor x = random_tensor({4, 6}, kiln::kFloat32, "transposed", seed);
    Tensor acc = random_tensor({4, 6}, kiln::kFloat32, "contiguous", seed + 10);
    Tensor acc0 = acc.clone();
    auto [rx, rw, racc2] = f(x, acc);
    kiln::EagerGuard eager;
    Tensor expected_acc = acc0 + x * w;
    EXPECT_TENSOR_CLOSE(acc, expected_acc);
    EXPECT_TENSOR_CLOSE(racc2, expected_acc * 2.0);
    EXPECT_EQ(rx.data_ptr(), x.data_ptr());  // the argument itself
    EXPECT_EQ(rw.data_ptr(), w.data_ptr());  // a view of the captured weight
    EXPECT_EQ(rw.sizes(), (std::vector<int64_t>{6, 4}));
    // The weight changes in place: the next call sees it.
    w.mul_(1.5);
  }
  EXPECT_EQ(f.stats().entries, 1);
}

// One call of a random program: compiled (`call`, on the program's device)
// and eager on the CPU (`reference`), every result compared with the
// program's tolerance (its least precise dtype, known after a run; on CUDA
// twice the relative one: CUDA's math library against kiln's CPU vector
// math). Each mismatch or error fails the test, naming `where` ("seed 5,
// dynamic, size 3") and the program. Returns the failures; sets `raised`
// where a call threw.
int check_call(kiln::Device device, const kiln::testing::Program& cpu,
               const std::function<std::vector<Tensor>()>& call,
               const std::function<std::vector<Tensor>()>& reference, const std::string& where,
               const std::string& text, bool* raised) {
  std::vector<Tensor> got, expected;
  try {
    got = call();
    for (Tensor& t : got) t = t.cpu();
    kiln::EagerGuard eager;
    expected = reference();
  } catch (const kiln::Error& e) {
    ADD_FAILURE() << where << " raised: " << e.what() << "\nprogram:\n" << text;
    *raised = true;
    return 1;
  }
  kiln::testing::Tolerance tol = kiln::testing::program_tolerance(cpu.loosest());
  if (device.is_cuda()) tol.rtol *= 2;
  int failures = 0;
  EXPECT_EQ(got.size(), expected.size()) << where;
  for (size_t i = 0; i < expected.size() && i < got.size(); ++i) {
    std::string msg = kiln::testing::compare(got[i], expected[i], tol);
    if (!msg.empty()) {
      ADD_FAILURE() << where << ", output " << i << ": " << msg << "\nprogram:\n" << text;
      ++failures;
    }
  }
  return failures;
}

// How many random DAGs from which seed: the test's own unless the
// environment says (KILN_RANDOM_DAGS, KILN_RANDOM_DAG_FIRST,
// KILN_RANDOM_DAG_SEED: seeds_from_env in random_program.h).
std::pair<uint64_t, int> dag_programs(uint64_t first, int count) {
  return kiln::testing::seeds_from_env("KILN_RANDOM_DAG", first, count);
}

// Random DAGs (pointwise chains, reductions, norms, in-place writes over
// broadcast, strided, mixed-dtype inputs; small sizes or a long innermost
// dim), each compiled and called on several sets of inputs, against eager
// CPU. On CUDA the first call runs directly, the second is captured and the
// rest replay the graph with new inputs (Note [Graph replay]).
void random_dags_match_eager(kiln::Device device, bool wide, uint64_t first, int count) {
  std::tie(first, count) = dag_programs(first, count);
  int failures = 0;
  const uint64_t calls = device.is_cuda() ? 4 : 2;
  for (uint64_t seed = first; seed < first + static_cast<uint64_t>(count) && failures < 5; ++seed) {
    kiln::testing::Program p(seed, device, wide), cpu(seed, kiln::Device::cpu(), wide);
    p.generate();
    cpu.generate();
    std::string text;
    auto f = kiln::jit::compile([&](const std::vector<Tensor>& in) { return p.run_on(in, &text); },
                                {.name = "dag"});
    for (uint64_t variant = 0; variant < calls; ++variant) {
      bool raised = false;
      failures += check_call(
          device, cpu, [&] { return f(p.make_inputs(variant)); },
          [&] { return cpu.run_on(cpu.make_inputs(variant), &text); },
          "seed " + std::to_string(seed) + " variant " + std::to_string(variant), text, &raised);
      if (raised) break;
    }
    EXPECT_EQ(f.stats().entries, 1) << "seed " << seed;
    EXPECT_EQ(f.stats().hits, static_cast<int64_t>(calls) - 1) << "seed " << seed;
  }
}

TEST(Compile, RandomDagsMatchEager) {
  random_dags_match_eager(kiln::Device::cpu(), false, 5001, 200);
}

TEST(Compile, WideRandomDagsMatchEager) {
  random_dags_match_eager(kiln::Device::cpu(), true, 6001, 100);
}

TEST(Compile, RandomDagsMatchEagerCuda) {
  KILN_REQUIRE_CUDA();
  random_dags_match_eager(kiln::Device::cuda(), false, 5001, 100);
}

TEST(Compile, WideRandomDagsMatchEagerCuda) {
  KILN_REQUIRE_CUDA();
  random_dags_match_eager(kiln::Device::cuda(), true, 6001, 100);
}

// New sizes take plans, not entries, whatever the inputs' layouts (a
// transposed input's strides move with its sizes). One recompile may lift
// what moved (automatic: the sizes; any: an offset that moved with them),
// and buckets pass a call already at a bucket's size as it is, where padded
// ones are contiguous copies. Returns 1 (and fails) past that.
template <class F>
int too_many_entries(const F& f, uint64_t seed, const std::string& how, const std::string& text) {
  const int64_t most = how == "buckets" ? 3 : 2;
  if (f.stats().entries <= most) return 0;
  ADD_FAILURE() << "seed " << seed << ", " << how << ": " << f.stats().entries
                << " entries for its calls at several sizes\n"
                << f.explain().str() << "program:\n"
                << text;
  return 1;
}

// Random programs called at changing leading sizes, that dim bucketed,
// dynamic from the start, or left to automatic_dynamic: every call returns
// what the program gives at its own sizes (Note [Buckets]: padded results
// are narrowed, and programs whose rows mix turn buckets off).
void random_dags_at_changing_sizes(kiln::Device device, bool wide, uint64_t first, int count) {
  std::tie(first, count) = dag_programs(first, count);
  int failures = 0, programs = 0;
  for (uint64_t seed = first; seed < first + static_cast<uint64_t>(count) && failures < 5; ++seed) {
    kiln::testing::Program p(seed, device, wide), cpu(seed, kiln::Device::cpu(), wide);
    p.generate();
    cpu.generate();
    const std::vector<int> leading = p.leading_inputs();
    if (leading.empty()) continue;
    ++programs;
    std::string text;
    for (const char* how : {"buckets", "dynamic", "automatic"}) {
      kiln::jit::Options options{.name = how};
      if (std::string(how) != "automatic") options.dynamic = {{0, 0}};
      if (std::string(how) == "buckets") options.buckets = {2, 4, 8};
      // The leading inputs come first (their dim 0 is dynamic), the others after.
      auto f = kiln::jit::compile(
          [&](const std::vector<Tensor>& lead, const std::vector<Tensor>& rest) {
            std::vector<Tensor> in(lead.size() + rest.size());
            size_t l = 0, r = 0;
            for (size_t i = 0; i < in.size(); ++i) {
              const bool is_lead = l < leading.size() && leading[l] == static_cast<int>(i);
              in[i] = is_lead ? lead[l++] : rest[r++];
            }
            return p.run_on(in, &text);
          },
          options);
      // On CUDA: 3 runs directly twice (the second captures), 5 and 2
      // directly, then 8 and 6 capture their first calls (Note [Capture
      // hints]) and 8 replays.
      for (int64_t n : {3, 5, 2, 3, 8, 6, 8}) {
        std::vector<Tensor> inputs = p.make_inputs(static_cast<uint64_t>(n), n), lead, rest;
        for (size_t i = 0; i < inputs.size(); ++i) {
          const bool is_lead =
              std::find(leading.begin(), leading.end(), static_cast<int>(i)) != leading.end();
          (is_lead ? lead : rest).push_back(inputs[i]);
        }
        bool raised = false;
        failures += check_call(
            device, cpu, [&] { return f(lead, rest); },
            [&] { return cpu.run_on(cpu.make_inputs(static_cast<uint64_t>(n), n), &text); },
            "seed " + std::to_string(seed) + ", " + how + ", size " + std::to_string(n), text,
            &raised);
        if (raised) break;
      }
      failures += too_many_entries(f, seed, how, text);
    }
  }
  EXPECT_GE(programs, count / 4);
}

TEST(Compile, RandomDagsAtChangingSizesMatchEager) {
  random_dags_at_changing_sizes(kiln::Device::cpu(), false, 7001, 80);
}

TEST(Compile, WideRandomDagsAtChangingSizesMatchEager) {
  random_dags_at_changing_sizes(kiln::Device::cpu(), true, 8001, 60);
}

TEST(Compile, RandomDagsAtChangingSizesMatchEagerCuda) {
  KILN_REQUIRE_CUDA();
  random_dags_at_changing_sizes(kiln::Device::cuda(), false, 7001, 80);
}

TEST(Compile, WideRandomDagsAtChangingSizesMatchEagerCuda) {
  KILN_REQUIRE_CUDA();
  random_dags_at_changing_sizes(kiln::Device::cuda(), true, 8001, 60);
}

// Wide programs called at changing innermost sizes (each side of the vector
// widths and of the row lengths norms keep in registers), those dims dynamic
// from the start or left to automatic_dynamic: each call against eager at
// its own sizes.
void random_dags_at_changing_inner_sizes(kiln::Device device, uint64_t first, int count) {
  std::tie(first, count) = dag_programs(first, count);
  int failures = 0;
  for (uint64_t seed = first; seed < first + static_cast<uint64_t>(count) && failures < 5; ++seed) {
    kiln::testing::Program p(seed, device, true), cpu(seed, kiln::Device::cpu(), true);
    p.generate();
    cpu.generate();
    std::string text;
    for (const char* how : {"dynamic", "automatic"}) {
      kiln::jit::Options options{.name = how};
      if (std::string(how) == "dynamic") options.dynamic = {{0, -1}};
      auto f = kiln::jit::compile(
          [&](const std::vector<Tensor>& in) { return p.run_on(in, &text); }, options);
      // On CUDA the second call captures; the new sizes after it capture
      // their first calls (Note [Capture hints]), and 256 replays at the end.
      for (int64_t inner : {0, 0, 257, 256, 8, 1025, 17, 256}) {
        bool raised = false;
        failures += check_call(
            device, cpu, [&] { return f(p.make_inputs(static_cast<uint64_t>(inner), 0, inner)); },
            [&] {
              return cpu.run_on(cpu.make_inputs(static_cast<uint64_t>(inner), 0, inner), &text);
            },
            "seed " + std::to_string(seed) + ", " + how + ", inner " + std::to_string(inner), text,
            &raised);
        if (raised) break;
      }
      // The window's strides follow its inner size by more than a product
      // of sizes: the guards keep them exact, an entry per size.
      if (!p.has_layout("offset")) failures += too_many_entries(f, seed, how, text);
    }
  }
}

TEST(Compile, WideRandomDagsAtChangingInnerSizesMatchEager) {
  random_dags_at_changing_inner_sizes(kiln::Device::cpu(), 9001, 60);
}

TEST(Compile, WideRandomDagsAtChangingInnerSizesMatchEagerCuda) {
  KILN_REQUIRE_CUDA();
  random_dags_at_changing_inner_sizes(kiln::Device::cuda(), 9001, 60);
}

// `t`'s values in another layout: 0 contiguous, 1 its dims' memory order
// reversed, 2 every other element of a row twice as long, 3 a window in a
// buffer larger in every dim, 4 a random memory order of its dims.
Tensor relayout(const Tensor& t, int how, std::mt19937& rng) {
  kiln::EagerGuard eager;
  const int64_t nd = t.dim();
  std::vector<int64_t> perm(static_cast<size_t>(nd));
  std::iota(perm.begin(), perm.end(), 0);
  if (nd == 0 || how == 0) return t.contiguous();
  if (how == 1 || how == 4) {
    if (how == 1) std::reverse(perm.begin(), perm.end());
    if (how == 4) std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = i;
    return t.permute(perm).contiguous().permute(inverse);
  }
  std::vector<int64_t> big(t.sizes().begin(), t.sizes().end());
  if (how == 2) big.back() *= 2;
  if (how == 3) {
    for (int64_t& s : big) s += 1 + static_cast<int64_t>(rng() % 3);
  }
  Tensor buffer = kiln::zeros(big, kiln::TensorOptions(t.dtype())), window = buffer;
  if (how == 2) window = buffer.slice(nd - 1, 0, std::nullopt, 2);
  if (how == 3) {
    for (int64_t d = 0; d < nd; ++d) window = window.narrow(d, 1, t.size(d));
  }
  window.copy_(t);
  return window;
}

// Random programs called with the same values in other layouts, and at
// other leading sizes: whatever the guards accept (strides by pattern, dims
// of one element unchecked) must be what the plan addresses; each call
// against eager on the same inputs.
void random_dags_in_other_layouts(kiln::Device device, uint64_t first, int count) {
  int failures = 0;
  for (uint64_t seed = first; seed < first + static_cast<uint64_t>(count) && failures < 5; ++seed) {
    kiln::testing::Program p(seed, device, seed % 2 == 0),
        cpu(seed, kiln::Device::cpu(), seed % 2 == 0);
    p.generate();
    cpu.generate();
    std::string text;
    for (const char* how : {"static", "dynamic", "automatic"}) {
      kiln::jit::Options options{.name = how};
      if (std::string(how) == "static") options.automatic_dynamic = false;
      if (std::string(how) == "dynamic") options.dynamic = {{0, 0}};
      auto f = kiln::jit::compile(
          [&](const std::vector<Tensor>& in) { return p.run_on(in, &text); }, options);
      std::mt19937 rng(static_cast<uint32_t>(seed));
      const int64_t leads[] = {0, 0, 3, 5, 3, 2, 7, 5};
      for (int call = 0; call < 8; ++call) {
        std::vector<Tensor> in = cpu.make_inputs(static_cast<uint64_t>(call % 3), leads[call]),
                            moved;
        for (Tensor& t : in) {
          t = relayout(t, static_cast<int>(rng() % 5), rng);
          moved.push_back(device.is_cpu() ? t : kiln::testing::same_layout_copy(t, device));
        }
        bool raised = false;
        failures += check_call(
            device, cpu, [&] { return f(moved); }, [&] { return cpu.run_on(in, &text); },
            "seed " + std::to_string(seed) + ", " + how + ", call " + std::to_string(call), text,
            &raised);
        if (raised) break;
      }
    }
  }
}

TEST(Compile, RandomDagsInOtherLayoutsMatchEager) {
  random_dags_in_other_layouts(kiln::Device::cpu(), 11001, 120);
}

TEST(Compile, RandomDagsInOtherLayoutsMatchEagerCuda) {
  KILN_REQUIRE_CUDA();
  random_dags_in_other_layouts(kiln::Device::cuda(), 11001, 120);
}

// One compiled function called from 8 threads at once: each call's result is
// its own input's, as in sequential calls.
void run_threads(kiln::Device device) {
  Mlp m = make_mlp(device, 32, 64);
  auto f = kiln::jit::compile([&](const Tensor& x) { return m.forward(kiln::gelu(x)); },
                              {.name = "threads"});
  constexpr int kThreads = 8, kCalls = 40;
  std::vector<Tensor> inputs, expected;
  for (int i = 0; i < kThreads * 2; ++i) {
    inputs.push_back(random_tensor({4, 32}, kiln::kFloat32, "contiguous", 900 + i).to(device));
    expected.push_back(f(inputs.back()).cpu());
  }
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // On CUDA each thread runs on a stream of its own.
      std::optional<kiln::cuda::StreamGuard> stream;
      if (device.is_cuda()) stream.emplace(kiln::cuda::Stream::from_pool(device));
      for (int c = 0; c < kCalls && errors[t].empty(); ++c) {
        const int k = (t * 7 + c) % (kThreads * 2);
        errors[t] = kiln::testing::compare(f(inputs[k]).cpu(), expected[k]);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
  EXPECT_EQ(f.stats().entries, 1);
  EXPECT_GE(f.stats().instances, 1);
  EXPECT_LE(f.stats().instances, kThreads + 1);
}

TEST(Compile, EightThreadsCpu) {
  run_threads(kiln::Device::cpu());
}

TEST(Compile, EightThreadsCuda) {
  KILN_REQUIRE_CUDA();
  run_threads(kiln::Device::cuda());
}

// Note [Result shapes]: every result type jit.h allows comes back as eager
// returns it, on the traced call and on replays: a vector anywhere in a
// tuple (one before a tensor used to take every result, and the tensor was
// read past the list), nested tuples, an empty vector, an undefined tensor,
// 0-dim and empty results, the same tensor twice.
TEST(Compile, ResultsOfEveryShape) {
  auto body = [](const Tensor& x, const std::vector<Tensor>& xs) {
    std::vector<Tensor> scaled;
    for (const Tensor& t : xs) scaled.push_back(t * x.sum());
    Tensor y = x * 2.0;
    return std::make_tuple(scaled, std::make_pair(y, kiln::mean(x)), y, Tensor(), x.sum(),
                           x.narrow(0, 0, 0));
  };
  auto f = kiln::jit::compile(body, {.name = "shapes"});
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE("call " + std::to_string(seed));
    const Tensor x = random_tensor({3, 2}, kiln::kFloat32, "strided", seed);
    const std::vector<Tensor> xs = {random_tensor({2}, kiln::kFloat32, "contiguous", seed + 10),
                                    random_tensor({4, 1}, kiln::kFloat32, "offset", seed + 20)};
    auto [scaled, pair, y, undefined, sum, empty] = f(x, xs);
    kiln::EagerGuard eager;
    auto [want_scaled, want_pair, want_y, want_undefined, want_sum, want_empty] = body(x, xs);
    ASSERT_EQ(scaled.size(), 2u);
    EXPECT_TENSOR_CLOSE(scaled[0], want_scaled[0]);
    EXPECT_TENSOR_CLOSE(scaled[1], want_scaled[1]);
    EXPECT_TENSOR_CLOSE(pair.first, want_pair.first);
    EXPECT_TENSOR_CLOSE(pair.second, want_pair.second);
    EXPECT_TENSOR_CLOSE(y, want_y);
    EXPECT_EQ(y.data_ptr(), pair.first.data_ptr());  // one tensor, returned twice
    EXPECT_FALSE(undefined.defined());
    EXPECT_EQ(sum.dim(), 0);
    EXPECT_TENSOR_CLOSE(sum, want_sum);
    EXPECT_EQ(empty.sizes(), (std::vector<int64_t>{0, 2}));
  }
  EXPECT_EQ(f.stats().entries, 1);
  EXPECT_EQ(f.stats().hits, 2);
  auto g = kiln::jit::compile(
      [](const Tensor& x) { return std::make_pair(std::vector<Tensor>{}, x + 1.0); },
      {.name = "none"});
  for (int call = 0; call < 2; ++call) {
    auto [none, z] = g(kiln::ones({2}));
    EXPECT_TRUE(none.empty());
    EXPECT_TENSOR_CLOSE(z, kiln::full({2}, 2.0));
  }
}

// Eight threads, each with a copy, calling at sizes that change every call:
// the entry's plans are built while other threads run the ones built
// before; every result equals its eager one. Results then outlive the
// compiled function, on another thread.
TEST(Compile, EightThreadsAtChangingSizesCpu) {
  const Tensor w = random_tensor({7}, kiln::kFloat32, "contiguous", 3);
  auto body = [&](const Tensor& x) { return kiln::softmax(x * w, -1) + x.sum({0}); };
  std::optional<kiln::jit::Compiled<decltype(body)>> f;
  f.emplace(kiln::jit::compile(body, {.name = "sizes"}));
  constexpr int kThreads = 8;
  std::vector<std::string> errors(kThreads);
  std::vector<Tensor> inputs(kThreads), kept(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t, g = *f]() mutable {
      for (int c = 0; c < 20 && errors[t].empty(); ++c) {
        const int64_t rows = 1 + (t + c) % 6;
        inputs[t] = random_tensor({rows, 7}, kiln::kFloat32, "strided", 100 * t + c);
        kept[t] = g(inputs[t]);
        kiln::EagerGuard eager;
        errors[t] = kiln::testing::compare(kept[t], body(inputs[t]));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
  EXPECT_LE(f->stats().entries, 3);  // the first size, 1, and 2 and up
  EXPECT_EQ(f->stats().uncompiled_calls, 0);
  f.reset();
  std::thread reader([&] {
    for (int t = 0; t < kThreads; ++t) {
      kiln::EagerGuard eager;
      errors[t] = kiln::testing::compare(kept[t], body(inputs[t]));
    }
  });
  reader.join();
  for (int t = 0; t < kThreads; ++t)
    EXPECT_TRUE(errors[t].empty()) << "thread " << t << ": " << errors[t];
}

// Note [Scalar forms]: the Scalar overloads of remainder, fmod, floor_divide
// and the bitwise ops are recorded, not run at once: a compiled function that
// takes one compiles (each was a graph break) and equals eager.
TEST(Compile, ScalarOverloadsAreTracedNotBroken) {
  const Tensor x = random_tensor({5, 7}, kiln::kFloat32, "strided", 3, -9.0, 9.0);
  const Tensor i = random_tensor({5, 7}, kiln::kInt64, "contiguous", 4, -50, 50);
  auto floats = [](const Tensor& t) {
    Tensor a = kiln::remainder(t, 3.0) + kiln::fmod(t, -2.5);
    Tensor b = t.clone();
    kiln::call_op("remainder_.Scalar", {b, kiln::Scalar(1.5)});
    return a * kiln::floor_divide(t, 2.0) + b;
  };
  auto ints = [](const Tensor& t) {
    Tensor b = t.clone();
    kiln::call_op("bitwise_xor_.Scalar", {b, kiln::Scalar(5)});
    return kiln::bitwise_and(t, 12) + kiln::bitwise_or(t, 3) + b + kiln::fmod(t, 7);
  };
  auto f = kiln::jit::compile(floats, {.name = "floats"});
  auto g = kiln::jit::compile(ints, {.name = "ints"});
  for (int k = 0; k < 3; ++k) {
    Tensor rf = f(x), rg = g(i);
    kiln::EagerGuard eager;
    EXPECT_TENSOR_CLOSE(rf, floats(x));
    EXPECT_TENSOR_CLOSE(rg, ints(i));
  }
  EXPECT_EQ(f.stats().graph_breaks, 0);
  EXPECT_EQ(g.stats().graph_breaks, 0);
  EXPECT_EQ(f.stats().uncompiled_calls, 0);
  EXPECT_EQ(g.stats().hits, 2);
  kiln::EagerGuard eager;
  EXPECT_KILN_ERROR(kiln::remainder(kiln::ones({2}, kiln::kBool), true),
                    "[remainder.Scalar] expected a dtype among");
}

}  // namespace
