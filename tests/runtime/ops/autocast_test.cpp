// Autocast: output dtypes and values under an AutocastGuard against eager
// calls with the casts written out, for each policy (see Note [Autocast]).

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "kiln/kiln.h"
#include "runtime/ops/autocast_policy.h"
#include "tests/support/testing.h"

namespace {

using kiln::AutocastGuard;
using kiln::DType;
using kiln::kBFloat16;
using kiln::kFloat16;
using kiln::kFloat32;
using kiln::kFloat64;
using kiln::Tensor;
using kiln::testing::random_tensor;

Tensor rnd(std::initializer_list<int64_t> sizes, DType dt, uint64_t seed,
           const char* layout = "contiguous") {
  return random_tensor(sizes, dt, layout, seed);
}

bool has_kernel(const char* op, kiln::DispatchKey key) {
  return (kiln::find_op(op).entry().kernel_mask() & kiln::key_bit(key)) != 0;
}

// Runs `fn` under autocast to `target` and expects the result of `fn` on
// inputs cast by hand (`expected_fn`), dtype included.
void expect_autocast(DType target, const std::function<Tensor()>& under_autocast,
                     const std::function<Tensor()>& explicit_casts, const char* what) {
  Tensor actual;
  {
    AutocastGuard guard(target);
    actual = under_autocast();
  }
  Tensor expected = explicit_casts();
  EXPECT_EQ(actual.dtype(), expected.dtype()) << what;
  EXPECT_TENSOR_CLOSE(actual, expected);
}

TEST(Autocast, GuardsNestAndRestore) {
  EXPECT_FALSE(kiln::autocast_dtype().has_value());
  const uint64_t bit = kiln::key_bit(kiln::DispatchKey::Autocast);
  {
    AutocastGuard outer(kBFloat16);
    EXPECT_EQ(kiln::autocast_dtype(), kBFloat16);
    EXPECT_TRUE(kiln::detail::local_keys().included & bit);
    {
      AutocastGuard inner(kFloat16);
      EXPECT_EQ(kiln::autocast_dtype(), kFloat16);
      {
        AutocastGuard off(kFloat16, /*enabled=*/false);
        EXPECT_FALSE(kiln::autocast_dtype().has_value());
        EXPECT_FALSE(kiln::detail::local_keys().included & bit);
        Tensor a = rnd({2, 3}, kFloat32, 1);
        EXPECT_EQ(kiln::mm(a, a.t()).dtype(), kFloat32);
      }
      EXPECT_EQ(kiln::autocast_dtype(), kFloat16);
    }
    EXPECT_EQ(kiln::autocast_dtype(), kBFloat16);
  }
  EXPECT_FALSE(kiln::autocast_dtype().has_value());
  EXPECT_FALSE(kiln::detail::local_keys().included & bit);
}

TEST(Autocast, LowerPrecisionOps) {
  for (DType t : {kBFloat16, kFloat16}) {
    Tensor a = rnd({3, 4}, kFloat32, 2, "transposed"), b = rnd({4, 5}, kFloat32, 3);
    Tensor v = rnd({4}, kFloat32, 4), bias = rnd({5}, kFloat32, 5);
    Tensor b3 = rnd({2, 3, 4}, kFloat32, 6), c3 = rnd({2, 4, 5}, kFloat32, 7);
    Tensor q = rnd({2, 3, 8}, kFloat32, 8), k = rnd({2, 4, 8}, kFloat32, 9);
    Tensor val = rnd({2, 4, 6}, kFloat32, 10), mask = rnd({3, 4}, kFloat32, 11);
    auto c = [t](const Tensor& x) { return x.to(t); };
    expect_autocast(
        t, [&] { return kiln::matmul(b3, b); }, [&] { return kiln::matmul(c(b3), c(b)); },
        "matmul");
    expect_autocast(
        t, [&] { return kiln::mm(a, b); }, [&] { return kiln::mm(c(a), c(b)); }, "mm");
    expect_autocast(
        t, [&] { return kiln::bmm(b3, c3); }, [&] { return kiln::bmm(c(b3), c(c3)); }, "bmm");
    expect_autocast(
        t, [&] { return kiln::mv(a, v); }, [&] { return kiln::mv(c(a), c(v)); }, "mv");
    expect_autocast(
        t, [&] { return kiln::outer(v, bias); }, [&] { return kiln::outer(c(v), c(bias)); },
        "outer");
    expect_autocast(
        t, [&] { return kiln::addmm(bias, a, b, 0.5, 2); },
        [&] { return kiln::addmm(c(bias), c(a), c(b), 0.5, 2); }, "addmm");
    expect_autocast(
        t, [&] { return kiln::baddbmm(bias, b3, c3); },
        [&] { return kiln::baddbmm(c(bias), c(b3), c(c3)); }, "baddbmm");
    expect_autocast(
        t, [&] { return kiln::linear(a, b.t(), bias); },
        [&] { return kiln::linear(c(a), c(b.t()), c(bias)); }, "linear");
    expect_autocast(
        t, [&] { return kiln::scaled_dot_product_attention(q, k, val, mask); },
        [&] { return kiln::scaled_dot_product_attention(c(q), c(k), c(val), c(mask)); },
        "scaled_dot_product_attention");
    // A bool mask is not floating: it stays bool.
    Tensor keep = kiln::gt(rnd({3, 4}, kFloat32, 12), 0.0);
    expect_autocast(
        t, [&] { return kiln::scaled_dot_product_attention(q, k, val, keep); },
        [&] { return kiln::scaled_dot_product_attention(c(q), c(k), c(val), keep); },
        "scaled_dot_product_attention bool mask");
  }
}

TEST(Autocast, LowerPrecisionCastsOtherHalfTypeButNotDoubleOrIntegers) {
  Tensor bf = rnd({3, 4}, kBFloat16, 13), f = rnd({4, 2}, kFloat32, 14);
  expect_autocast(
      kFloat16, [&] { return kiln::mm(bf, f); },
      [&] { return kiln::mm(bf.to(kFloat16), f.to(kFloat16)); }, "bf16 x f32");
  Tensor d = rnd({3, 4}, kFloat64, 15);
  expect_autocast(
      kBFloat16, [&] { return kiln::mm(d, d.t()); }, [&] { return kiln::mm(d, d.t()); },
      "float64 kept");
  Tensor i = kiln::tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  expect_autocast(
      kBFloat16, [&] { return kiln::matmul(i, i.t()); }, [&] { return kiln::matmul(i, i.t()); },
      "int64 kept");
  // float64 with float32: float32 is cast, float64 is not, and mm refuses the mix.
  AutocastGuard guard(kBFloat16);
  EXPECT_KILN_ERROR(kiln::mm(d, f), "same dtype");
}

TEST(Autocast, Float32Ops) {
  for (DType low : {kBFloat16, kFloat16}) {
    Tensor x = rnd({3, 6}, low, 16, "transposed"), w = rnd({6}, low, 17), b = rnd({6}, low, 18);
    auto up = [](const Tensor& t) { return t.to(kFloat32); };
    expect_autocast(
        kBFloat16, [&] { return kiln::softmax(x, 1); }, [&] { return kiln::softmax(up(x), 1); },
        "softmax");
    expect_autocast(
        kBFloat16, [&] { return kiln::log_softmax(x, 0); },
        [&] { return kiln::log_softmax(up(x), 0); }, "log_softmax");
    expect_autocast(
        kFloat16, [&] { return kiln::layer_norm(x, {6}, w, b); },
        [&] { return kiln::layer_norm(up(x), {6}, up(w), up(b)); }, "layer_norm");
    expect_autocast(
        kBFloat16, [&] { return kiln::rms_norm(x, {6}, w); },
        [&] { return kiln::rms_norm(up(x), {6}, up(w)); }, "rms_norm");
    // dtype= given: the call runs as written.
    expect_autocast(
        kBFloat16, [&] { return kiln::softmax(x, 1, kFloat64); },
        [&] { return kiln::softmax(x, 1, kFloat64); }, "softmax dtype=float64");
    expect_autocast(
        kBFloat16, [&] { return kiln::softmax(x, 1, low); },
        [&] { return kiln::softmax(x, 1, low); }, "softmax dtype=low");
  }
  // float32 inputs are already what the policy wants.
  Tensor f = rnd({2, 5}, kFloat32, 19);
  expect_autocast(
      kBFloat16, [&] { return kiln::softmax(f, 1); }, [&] { return kiln::softmax(f, 1); },
      "softmax float32");
}

TEST(Autocast, OpsWithoutPolicyFallThrough) {
  EXPECT_FALSE(has_kernel("add.Tensor", kiln::DispatchKey::Autocast));
  Tensor a = rnd({2, 3}, kBFloat16, 20), b = rnd({2, 3}, kFloat32, 21);
  expect_autocast(
      kBFloat16, [&] { return a + b; }, [&] { return a + b; }, "add promotes");
  expect_autocast(
      kBFloat16, [&] { return a * a; }, [&] { return a * a; }, "mul stays bf16");
}

// The policies autocast reports are exactly the ops with an Autocast
// kernel; one op of each family (Note [Autocast]) has the policy it names.
TEST(Autocast, BuiltInPoliciesAreRegistered) {
  int with_policy = 0;
  for (const kiln::OpHandle& op : kiln::all_ops()) {
    const std::string name = op.schema().full_name();
    const bool kernel = has_kernel(name.c_str(), kiln::DispatchKey::Autocast);
    EXPECT_EQ(kiln::autocast_policy(name).has_value(), kernel) << name;
    with_policy += kernel ? 1 : 0;
  }
  EXPECT_GT(with_policy, 0);
  using P = kiln::AutocastPolicy;
  const std::pair<const char*, P> families[] = {{"matmul", P::LowerPrecision},
                                                {"linear", P::LowerPrecision},
                                                {"scaled_dot_product_attention", P::LowerPrecision},
                                                {"softmax.int", P::Float32},
                                                {"layer_norm", P::Float32},
                                                {"sum.dim_IntList", P::Float32},
                                                {"exp", P::Float32},
                                                {"cat", P::Promote},
                                                {"where.self", P::Promote}};
  for (const auto& [op, policy] : families) {
    EXPECT_TRUE(has_kernel(op, kiln::DispatchKey::Autocast)) << op;
    EXPECT_EQ(kiln::autocast_policy(op), policy) << op;
  }
  for (const char* op : {"mm.out", "addmm_", "addmm.out", "matmul.out", "add.Tensor", "relu"}) {
    EXPECT_FALSE(has_kernel(op, kiln::DispatchKey::Autocast)) << op;
    EXPECT_FALSE(kiln::autocast_policy(op).has_value()) << op;
  }
}

// Reductions and the promote ops live in other parts of kiln; each check runs
// once the op has a CPU kernel.
TEST(Autocast, BuiltInFloat32AndPromoteOpsWhereImplemented) {
  Tensor x = rnd({3, 4}, kBFloat16, 22), f = rnd({3, 4}, kFloat32, 23);
  auto up = [](const Tensor& t) { return t.to(kFloat32); };
  int ran = 0;
  auto check = [&](const char* op, const std::function<Tensor()>& autocast,
                   const std::function<Tensor()>& manual) {
    if (!has_kernel(op, kiln::DispatchKey::CPU)) return;
    ++ran;
    expect_autocast(kBFloat16, autocast, manual, op);
  };
  check(
      "sum", [&] { return kiln::sum(x); }, [&] { return kiln::sum(up(x)); });
  check(
      "mean.dim", [&] { return kiln::mean(x, {1}); }, [&] { return kiln::mean(up(x), {1}); });
  check(
      "cumsum", [&] { return kiln::cumsum(x, 0); }, [&] { return kiln::cumsum(up(x), 0); });
  check(
      "exp", [&] { return kiln::exp(x); }, [&] { return kiln::exp(up(x)); });
  check(
      "cat",
      [&] {
        return kiln::cat({x, f});
      },
      [&] {
        return kiln::cat({up(x), f});
      });
  check(
      "stack",
      [&] {
        return kiln::stack({x, f});
      },
      [&] {
        return kiln::stack({up(x), f});
      });
  check(
      "addcmul", [&] { return kiln::addcmul(x, f, x); },
      [&] { return kiln::addcmul(up(x), f, up(x)); });
  Tensor idx = kiln::tensor(std::vector<int64_t>{2, 0}, {2});
  check(
      "index_copy", [&] { return kiln::index_copy(x, 0, idx, f.narrow(0, 0, 2)); },
      [&] { return kiln::index_copy(up(x), 0, idx, f.narrow(0, 0, 2)); });
  if (ran == 0) GTEST_SKIP() << "no reduction or promote op has a CPU kernel in this build yet";
}

// The policies on custom ops: each probe returns its inputs, so the test sees
// exactly what the Autocast kernel passed on.
std::vector<Tensor> probe_kernel(kiln::TensorList xs, std::optional<DType>) {
  return xs.vec();
}

KILN_LIBRARY(autocast_probe, m) {
  m.def("lower(Tensor[] xs, ScalarType? dtype=None) -> Tensor[]");
  m.def("fp32(Tensor[] xs, ScalarType? dtype=None) -> Tensor[]");
  m.def("promote(Tensor[] xs, ScalarType? dtype=None) -> Tensor[]");
}
KILN_LIBRARY_IMPL(autocast_probe, CPU, m) {
  m.impl("lower", &probe_kernel);
  m.impl("fp32", &probe_kernel);
  m.impl("promote", &probe_kernel);
}

std::vector<DType> probe(const char* op, std::vector<Tensor> xs,
                         std::optional<DType> dtype = std::nullopt) {
  static const bool registered = [] {
    kiln::set_autocast_policy("autocast_probe::lower", kiln::AutocastPolicy::LowerPrecision);
    kiln::set_autocast_policy("autocast_probe::fp32", kiln::AutocastPolicy::Float32);
    kiln::set_autocast_policy("autocast_probe::promote", kiln::AutocastPolicy::Promote);
    return true;
  }();
  (void)registered;
  kiln::Stack args{kiln::IValue(std::move(xs)), kiln::IValue(dtype)};
  kiln::Stack out = kiln::call_op(op, std::move(args));
  std::vector<DType> dtypes;
  for (const Tensor& t : out.at(0).to_tensor_list()) dtypes.push_back(t.dtype());
  return dtypes;
}

TEST(Autocast, CustomOpPolicies) {
  Tensor h = rnd({2}, kFloat16, 24), bf = rnd({2}, kBFloat16, 25), f = rnd({2}, kFloat32, 26);
  Tensor d = rnd({2}, kFloat64, 27);
  Tensor i = kiln::tensor(std::vector<int32_t>{1, 2}, {2});
  using V = std::vector<DType>;
  // Outside a guard nothing changes.
  EXPECT_EQ(probe("autocast_probe::lower", {h, f}), (V{kFloat16, kFloat32}));
  AutocastGuard guard(kBFloat16);
  EXPECT_EQ(probe("autocast_probe::lower", {h, bf, f, d, i}),
            (V{kBFloat16, kBFloat16, kBFloat16, kFloat64, kiln::kInt32}));
  EXPECT_EQ(probe("autocast_probe::fp32", {h, bf, f, d, i}),
            (V{kFloat32, kFloat32, kFloat32, kFloat64, kiln::kInt32}));
  EXPECT_EQ(probe("autocast_probe::fp32", {h, bf}, kFloat16), (V{kFloat16, kBFloat16}));
  EXPECT_EQ(probe("autocast_probe::promote", {h, bf, i}), (V{kFloat32, kFloat32, kiln::kInt32}));
  EXPECT_EQ(probe("autocast_probe::promote", {h, h}), (V{kFloat16, kFloat16}));
  EXPECT_EQ(probe("autocast_probe::promote", {bf, d, i}), (V{kFloat64, kFloat64, kiln::kInt32}));
  // A wrapped number neither widens the others nor changes.
  Tensor wrapped = kiln::scalar_tensor(1.5, kFloat64);
  wrapped.impl()->set_wrapped_number(true);
  EXPECT_EQ(probe("autocast_probe::promote", {bf, wrapped}), (V{kBFloat16, kFloat64}));
}

TEST(Autocast, MetaTensors) {
  auto meta = [](std::initializer_list<int64_t> s, DType t) {
    return kiln::empty(s, kiln::TensorOptions(t).device(kiln::Device::meta()));
  };
  AutocastGuard guard(kFloat16);
  Tensor r = kiln::linear(meta({2, 3, 4}, kFloat32), meta({5, 4}, kFloat32), meta({5}, kFloat32));
  EXPECT_TRUE(r.is_meta());
  EXPECT_EQ(r.dtype(), kFloat16);
  EXPECT_EQ(r.sizes().vec(), (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(kiln::softmax(meta({2, 3}, kBFloat16), 1).dtype(), kFloat32);
}

TEST(Autocast, IsPerThread) {
  Tensor a = rnd({2, 3}, kFloat32, 28);
  AutocastGuard guard(kBFloat16);
  EXPECT_EQ(kiln::mm(a, a.t()).dtype(), kBFloat16);
  DType other = kBFloat16;
  bool other_enabled = true;
  std::thread t([&] {
    other_enabled = kiln::autocast_dtype().has_value();
    other = kiln::mm(a, a.t()).dtype();
  });
  t.join();
  EXPECT_FALSE(other_enabled);
  EXPECT_EQ(other, kFloat32);
}

}  // namespace
