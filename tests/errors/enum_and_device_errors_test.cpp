// Must-fail cases of enum values given to ops.
//
// An enum is an integer: static_cast<kiln::DType>(99) compiles, and used to
// reach a table indexed by dtype (a crash or garbage). Every public function
// that takes an enum from the user refuses a value outside it with a
// kiln::Error naming the function, the argument, what it takes and what came
// (Note [Enum arguments]).

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/profiler.h"
#include "tests/support/testing.h"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::Tensor;
using kiln::TensorOptions;

const DType kBad = static_cast<DType>(99);
constexpr const char* kValid =
    "one of bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, got an "
    "invalid dtype (99)";

std::string expected(const std::string& op, const std::string& arg) {
  return "[" + op + "] expected " + arg + " " + kValid;
}

// --- Enums ---------------------------------------------------------------------

TEST(EnumErrors, DTypeOfConversions) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    const Tensor x = kiln::ones({2, 3});
    EXPECT_KILN_ERROR(x.to(kBad), expected("to", "dtype"));
    EXPECT_KILN_ERROR(x.to(Device::cpu(), kBad), expected("to", "dtype"));
    EXPECT_KILN_ERROR(x.to(Device::meta(), kBad), expected("to", "dtype"));
    EXPECT_KILN_ERROR(kiln::empty_like(x, kBad), expected("empty", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::zeros_like(x, kBad), expected("zeros", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::ones_like(x, kBad), expected("ones", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::full_like(x, 2, kBad), "'dtype' one of bool");
    EXPECT_KILN_ERROR(kiln::promote_types(kBad, kiln::kFloat32), expected("promote_types", "a"));
    EXPECT_KILN_ERROR(kiln::promote_types(kiln::kInt8, kBad), expected("promote_types", "b"));
  }
}

TEST(EnumErrors, DTypeOfFactories) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    const TensorOptions bad(kBad);
    const TensorOptions bad_meta = TensorOptions(kBad).device(Device::meta());
    EXPECT_KILN_ERROR(kiln::empty({2}, bad), expected("empty", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::empty({2}, bad_meta), expected("empty", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::empty_strided({2}, {1}, bad), expected("empty_strided", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::zeros({2}, bad), expected("zeros", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::ones({2}, bad), expected("ones", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::full({2}, 1.5, bad), expected("full", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::scalar_tensor(3, bad), expected("scalar_tensor", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::arange(5, bad), expected("arange", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::arange(0, 5, 1, bad), expected("arange.start_step", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::linspace(0, 1, 5, bad), expected("linspace", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::eye(3, bad), expected("eye", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::eye(3, 4, bad), expected("eye.m", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::rand({2}, bad), expected("rand", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::randn({2}, bad), expected("randn", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::randint(0, 5, {2}, bad), expected("randint.low", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::randint(5, {2}, bad), expected("randint", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::tensor({1.f, 2.f}, bad), expected("from_data", "options.dtype"));
    float data[4] = {1, 2, 3, 4};
    EXPECT_KILN_ERROR(kiln::from_blob(data, {4}, kBad), expected("from_blob", "dtype"));
    EXPECT_KILN_ERROR(kiln::from_blob(data, {2, 2}, {2, 1}, kBad), expected("from_blob", "dtype"));
    EXPECT_KILN_ERROR(kiln::from_data(data, {4}, kBad), expected("from_data", "dtype"));
    // Boxed calls: by name, with the dtype as a value.
    EXPECT_KILN_ERROR(kiln::call_op("empty", {std::vector<int64_t>{2}}, {{"dtype", kBad}}),
                      expected("empty", "'dtype'"));
  }
}

// Ops whose dtype= says what to accumulate in; out= and in-place forms are
// refused before anything is written.
TEST(EnumErrors, DTypeOfReductionsAndSoftmax) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    const Tensor x = kiln::arange(6, kiln::kFloat32).reshape({2, 3});
    EXPECT_KILN_ERROR(kiln::sum(x, kBad), expected("sum", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::sum(x, {1}, false, kBad), expected("sum.dim_IntList", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::mean(x, kBad), expected("mean", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::mean(x, {1}, true, kBad), expected("mean.dim", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::prod(x, kBad), expected("prod", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::prod(x, 0, false, kBad), expected("prod.dim_int", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::cumsum(x, 1, kBad), expected("cumsum", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::cumprod(x, 1, kBad), expected("cumprod", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::softmax(x, 1, kBad), expected("softmax.int", "'dtype'"));
    EXPECT_KILN_ERROR(kiln::log_softmax(x, 1, kBad), expected("log_softmax.int", "'dtype'"));
    Tensor out = kiln::full({2, 3}, 7.0);
    EXPECT_KILN_ERROR(kiln::call_op("cumsum.out", {x, int64_t{1}}, {{"dtype", kBad}, {"out", out}}),
                      expected("cumsum.out", "'dtype'"));
    Tensor sums = kiln::full({2}, 7.0);
    EXPECT_KILN_ERROR(kiln::call_op("sum.IntList_out", {x, std::vector<int64_t>{1}},
                                    {{"dtype", kBad}, {"out", sums}}),
                      expected("sum.IntList_out", "'dtype'"));
    EXPECT_TENSOR_CLOSE_TOL(out, kiln::full({2, 3}, 7.0), 0, 0);
    EXPECT_TENSOR_CLOSE_TOL(sums, kiln::full({2}, 7.0), 0, 0);
    // The valid dtypes still work.
    EXPECT_EQ(kiln::sum(x, kiln::kFloat64).dtype(), kiln::kFloat64);
  }
}

struct TwoTensors {
  Tensor a = kiln::ones({2});
  Tensor b = kiln::ones({3}, kiln::kInt64);
  void visit(const kiln::nn::TensorVisitor& f, const std::string& prefix) {
    f(kiln::nn::child_name(prefix, "a"), a, kiln::nn::TensorKind::Parameter);
    f(kiln::nn::child_name(prefix, "b"), b, kiln::nn::TensorKind::Buffer);
  }
};

TEST(EnumErrors, DTypeOfAutocastAndModules) {
  EXPECT_KILN_ERROR(kiln::AutocastGuard guard(kBad), expected("AutocastGuard", "dtype"));
  EXPECT_FALSE(kiln::autocast_dtype().has_value());  // a refused guard enabled nothing
  TwoTensors m;
  const Tensor a = m.a, b = m.b;
  EXPECT_KILN_ERROR(kiln::nn::to(m, Device::meta(), kBad), expected("to", "dtype"));
  EXPECT_TRUE(m.a.is_same(a));  // no tensor of the module moved
  EXPECT_TRUE(m.b.is_same(b));
  kiln::nn::GPT2Config c;
  c.vocab = 16;
  c.n_positions = 8;
  c.d_model = 8;
  c.n_layer = 1;
  c.n_head = 2;
  EXPECT_KILN_ERROR(kiln::nn::GPT2::random(c, kBad, Device::cpu()), expected("GPT2", "dtype"));
}

TEST(EnumErrors, DeviceType) {
  const auto bad = static_cast<kiln::DeviceType>(7);
  EXPECT_KILN_ERROR(Device(bad, 0),
                    "[device] expected a device type cpu, cuda or meta, got an invalid device "
                    "type (7)");
  EXPECT_KILN_ERROR(Device(static_cast<kiln::DeviceType>(-1), 0), "invalid device type (-1)");
  EXPECT_KILN_ERROR(kiln::ones({2}).to(Device(bad, 0)), "invalid device type (7)");
  static_assert(Device(kiln::DeviceType::Meta, 0).is_meta(), "a valid Device stays constexpr");
}

TEST(EnumErrors, OtherEnums) {
  auto body = [](const Tensor& x) { return x * 2.0; };
  kiln::jit::Options mode;
  mode.name = "m";
  mode.mode = static_cast<kiln::jit::Mode>(9);
  EXPECT_KILN_ERROR(kiln::jit::compile(body, mode),
                    "[jit::compile] m: expected Options::mode ReduceOverhead, Default or "
                    "MaxAutotune, got an invalid mode (9)");
  kiln::jit::Options limit;
  limit.name = "l";
  limit.on_limit = static_cast<kiln::jit::OnLimit>(5);
  EXPECT_KILN_ERROR(kiln::jit::compile(body, limit),
                    "[jit::compile] l: expected Options::on_limit RunUncompiled or Throw, got an "
                    "invalid value (5)");

  kiln::profiler::KeyAverages rows;
  rows.rows.push_back({});
  rows.rows.push_back({});
  EXPECT_KILN_ERROR(rows.table(static_cast<kiln::profiler::SortBy>(12)),
                    "[KeyAverages::table] expected sort key SelfCpu, CpuTotal, SelfDevice, "
                    "DeviceTotal or Calls, got an invalid sort key (12)");

  EXPECT_KILN_ERROR(
      kiln::set_autocast_policy("add.Tensor", static_cast<kiln::AutocastPolicy>(3)),
      "[set_autocast_policy] expected policy LowerPrecision, Float32 or Promote, got an invalid "
      "policy (3)");

  const auto bad_key = static_cast<kiln::DispatchKey>(40);
  EXPECT_KILN_ERROR(kiln::IncludeKeyGuard guard(bad_key),
                    "[IncludeKeyGuard] expected a dispatch key Meta, CPU, CUDA, Lazy or Autocast, "
                    "got ? (40)");
  EXPECT_KILN_ERROR(kiln::ExcludeKeyGuard guard(bad_key, true), "[ExcludeKeyGuard] expected");
  EXPECT_KILN_ERROR(kiln::ExcludeKeyGuard guard(kiln::DispatchKey::Composite),
                    "got Composite (17)");
  EXPECT_KILN_ERROR(kiln::Library(kiln::Library::Kind::Impl, "enumtest", bad_key),
                    "[Library] expected a dispatch key");
  EXPECT_KILN_ERROR(kiln::Library(static_cast<kiln::Library::Kind>(4), "enumtest", std::nullopt),
                    "[Library] expected kind Def or Impl, got an invalid kind (4)");
  EXPECT_FALSE(kiln::log_enabled(static_cast<kiln::LogChannel>(200)));
  // Calls after the refusals dispatch as before: no guard was left behind.
  EXPECT_TENSOR_CLOSE_TOL(kiln::add(kiln::ones({2}), kiln::ones({2})), kiln::full({2}, 2.0), 0, 0);
}

}  // namespace
