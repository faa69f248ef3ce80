// Must-fail cases of enum values and of devices given to ops.
//
// An enum is an integer: static_cast<kiln::DType>(99) compiles, and used to
// reach a table indexed by dtype (a crash or garbage). Every public function
// that takes an enum from the user refuses a value outside it with a
// kiln::Error naming the function, the argument, what it takes and what came
// (Note [Enum arguments]).
//
// Meta tensors met tensors with data in one op, and each kernel decided:
// pointwise ops raised, others answered on meta or read the meta tensor's
// missing data. Now one rule holds for every op, as PyTorch's: an op's tensors
// share a device, except that a 0-dim CPU tensor it only reads is a scalar on
// any device (Note [One device per op]).

#include <gtest/gtest.h>

#include <functional>
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

// --- Meta and data tensors in one op ------------------------------------------

const TensorOptions kMeta = TensorOptions(kiln::kFloat32).device(Device::meta());

// A tensor on `d`: with data (ones) on the CPU, sizes only on meta.
Tensor on(Device d, kiln::IntArrayRef sizes, DType t = kiln::kFloat32) {
  return d.is_meta() ? kiln::empty(sizes, TensorOptions(t).device(d))
                     : kiln::ones(sizes, TensorOptions(t).device(d));
}
// Index tensors (zeros: in range for every case below).
Tensor index(Device d, kiln::IntArrayRef sizes) {
  return d.is_meta() ? kiln::empty(sizes, TensorOptions(kiln::kInt64).device(d))
                     : kiln::zeros(sizes, TensorOptions(kiln::kInt64).device(d));
}

struct MixedCase {
  const char* op;  // the op the error names, as "[op" begins it
  // The op with its first tensor on `a` and the others on `b`.
  std::function<Tensor(Device a, Device b)> call;
};

std::vector<MixedCase> mixed_cases() {
  using kiln::kBool;
  using kiln::kInt32;
  using D = Device;
  using OptT = std::optional<Tensor>;
  return {
      {"add", [](D a, D b) { return kiln::add(on(a, {3}), on(b, {3})); }},
      {"sub", [](D a, D b) { return kiln::sub(on(a, {3}), on(b, {3})); }},
      {"mul",
       [](D a, D b) {
         return kiln::mul(on(a, {2, 3}), on(b, {3}));
       }},
      {"div", [](D a, D b) { return kiln::div(on(a, {3}), on(b, {3})); }},
      {"div", [](D a, D b) { return kiln::div(on(a, {3}), on(b, {3}), "floor"); }},
      {"remainder", [](D a, D b) { return kiln::remainder(on(a, {3}), on(b, {3})); }},
      {"fmod", [](D a, D b) { return kiln::fmod(on(a, {3}), on(b, {3})); }},
      {"floor_divide", [](D a, D b) { return kiln::floor_divide(on(a, {3}), on(b, {3})); }},
      {"pow", [](D a, D b) { return kiln::pow(on(a, {3}), on(b, {3})); }},
      {"bitwise_and",
       [](D a, D b) { return kiln::bitwise_and(on(a, {3}, kInt32), on(b, {3}, kInt32)); }},
      {"bitwise_xor",
       [](D a, D b) { return kiln::bitwise_xor(on(a, {3}, kInt32), on(b, {3}, kInt32)); }},
      {"eq", [](D a, D b) { return kiln::eq(on(a, {3}), on(b, {3})); }},
      {"lt", [](D a, D b) { return kiln::lt(on(a, {3}), on(b, {3})); }},
      {"ge", [](D a, D b) { return kiln::ge(on(a, {3}), on(b, {3})); }},
      {"atan2", [](D a, D b) { return kiln::atan2(on(a, {3}), on(b, {3})); }},
      {"maximum", [](D a, D b) { return kiln::maximum(on(a, {3}), on(b, {3})); }},
      {"minimum", [](D a, D b) { return kiln::minimum(on(a, {3}), on(b, {3})); }},
      {"logical_and", [](D a, D b) { return kiln::logical_and(on(a, {3}), on(b, {3})); }},
      {"logical_or", [](D a, D b) { return kiln::logical_or(on(a, {3}), on(b, {3})); }},
      {"add_",
       [](D a, D b) {
         Tensor s = on(a, {3});
         return s.add_(on(b, {3}));
       }},
      {"mul_",
       [](D a, D b) {
         Tensor s = on(a, {3});
         return kiln::mul_(s, on(b, {3}));
       }},
      {"add.out",
       [](D a, D b) {
         Tensor out = on(a, {3});
         return kiln::add_out(out, on(b, {3}), on(b, {3}));
       }},
      {"where", [](D a, D b) { return kiln::where(on(a, {3}, kBool), on(b, {3}), on(b, {3})); }},
      {"lerp", [](D a, D b) { return kiln::lerp(on(a, {3}), on(b, {3}), 0.5); }},
      {"lerp", [](D a, D b) { return kiln::lerp(on(a, {3}), on(b, {3}), on(b, {3})); }},
      {"addcmul", [](D a, D b) { return kiln::addcmul(on(a, {3}), on(b, {3}), on(b, {3})); }},
      {"addcdiv", [](D a, D b) { return kiln::addcdiv(on(a, {3}), on(b, {3}), on(b, {3})); }},
      {"clamp",
       [](D a, D b) { return kiln::clamp(on(a, {3}), OptT(on(b, {3})), OptT(on(b, {3}))); }},
      {"index_select",
       [](D a, D b) {
         return kiln::index_select(on(a, {4, 3}), 0, index(b, {2}));
       }},
      {"gather",
       [](D a, D b) {
         return kiln::gather(on(a, {4, 3}), 1, index(b, {4, 2}));
       }},
      {"scatter",
       [](D a, D b) {
         return kiln::scatter(on(a, {4, 3}), 1, index(b, {4, 2}), on(b, {4, 2}));
       }},
      {"scatter_add",
       [](D a, D b) {
         return kiln::scatter_add(on(a, {4, 3}), 1, index(b, {4, 2}), on(b, {4, 2}));
       }},
      {"index_add",
       [](D a, D b) {
         return kiln::index_add(on(a, {4, 3}), 0, index(b, {2}), on(b, {2, 3}));
       }},
      {"index_copy",
       [](D a, D b) {
         return kiln::index_copy(on(a, {4, 3}), 0, index(b, {2}), on(b, {2, 3}));
       }},
      {"masked_fill",
       [](D a, D b) {
         return kiln::masked_fill(on(a, {4, 3}), on(b, {4, 3}, kBool), 1.0);
       }},
      {"index_put",
       [](D a, D b) {
         std::vector<Tensor> indices = {index(b, {2})};
         return kiln::index_put(on(a, {4, 3}), indices, on(b, {2, 3}));
       }},
      {"embedding",
       [](D a, D b) {
         return kiln::embedding(on(a, {10, 3}), index(b, {4}));
       }},
      {"searchsorted", [](D a, D b) { return kiln::searchsorted(on(a, {5}), on(b, {3})); }},
      {"matmul",
       [](D a, D b) {
         return kiln::matmul(on(a, {2, 3}), on(b, {3, 4}));
       }},
      {"mm",
       [](D a, D b) {
         return kiln::mm(on(a, {2, 3}), on(b, {3, 4}));
       }},
      {"bmm",
       [](D a, D b) {
         return kiln::bmm(on(a, {2, 2, 3}), on(b, {2, 3, 4}));
       }},
      {"mv",
       [](D a, D b) {
         return kiln::mv(on(a, {2, 3}), on(b, {3}));
       }},
      {"addmm",
       [](D a, D b) {
         return kiln::addmm(on(a, {2, 4}), on(b, {2, 3}), on(b, {3, 4}));
       }},
      {"baddbmm",
       [](D a, D b) {
         return kiln::baddbmm(on(a, {2, 2, 4}), on(b, {2, 2, 3}), on(b, {2, 3, 4}));
       }},
      {"addmm_act",
       [](D a, D b) {
         return kiln::addmm_act(on(a, {4}), on(b, {2, 3}), on(b, {3, 4}), "relu");
       }},
      {"outer", [](D a, D b) { return kiln::outer(on(a, {2}), on(b, {3})); }},
      {"linear",
       [](D a, D b) {
         return kiln::linear(on(a, {2, 3}), on(b, {4, 3}));
       }},
      {"einsum",
       [](D a, D b) {
         std::vector<Tensor> ops = {on(a, {2, 3}), on(b, {3, 4})};
         return kiln::einsum("ij,jk->ik", ops);
       }},
      {"scaled_dot_product_attention",
       [](D a, D b) {
         return kiln::scaled_dot_product_attention(on(a, {1, 1, 2, 4}), on(b, {1, 1, 2, 4}),
                                                   on(b, {1, 1, 2, 4}));
       }},
      {"cat",
       [](D a, D b) {
         std::vector<Tensor> parts = {on(a, {2}), on(b, {3})};
         return kiln::cat(parts);
       }},
      {"stack",
       [](D a, D b) {
         std::vector<Tensor> parts = {on(a, {2}), on(b, {2})};
         return kiln::stack(parts);
       }},
      {"layer_norm",
       [](D a, D b) {
         return kiln::layer_norm(on(a, {2, 3}), {3}, OptT(on(b, {3})));
       }},
  };
}

// Every multi-input op: a meta tensor beside a CPU tensor of one or more dims
// raises, in either order, eager and lazy, naming the op and both devices.
TEST(MetaDeviceErrors, MetaAndCpuOperandsSweep) {
  const Device meta = Device::meta(), cpu = Device::cpu();
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    for (const MixedCase& c : mixed_cases()) {
      SCOPED_TRACE(c.op);
      // The call itself is well formed: all on meta, it answers on meta.
      Tensor all_meta;
      ASSERT_NO_THROW(all_meta = c.call(meta, meta));
      EXPECT_TRUE(all_meta.is_meta());
      for (bool meta_first : {true, false}) {
        SCOPED_TRACE(meta_first ? "meta first" : "cpu first");
        try {
          Tensor r = meta_first ? c.call(meta, cpu) : c.call(cpu, meta);
          (void)r.sizes();
          ADD_FAILURE() << "expected kiln::Error, got a tensor on " << r.device();
        } catch (const kiln::Error& e) {
          const std::string msg = e.what();
          EXPECT_EQ(msg.rfind(std::string("[") + c.op, 0), 0u) << msg;
          EXPECT_NE(msg.find("expected all tensors on one device, got meta and cpu"),
                    std::string::npos)
              << msg;
        }
      }
    }
  }
}

// A 0-dim CPU tensor that the op only reads is a scalar beside meta tensors:
// the result is a meta tensor. Written or of more dims, it raises, and a CPU
// tensor written in place keeps its values.
TEST(MetaDeviceErrors, ZeroDimCpuTensorsAreScalars) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    const Tensor m = kiln::empty({3}, kMeta);
    const Tensor s = kiln::full({}, 2.0);
    const Tensor mask = kiln::empty({3}, TensorOptions(kiln::kBool).device(Device::meta()));
    for (const Tensor& r :
         {kiln::add(m, s), kiln::add(s, m), kiln::mul(kiln::empty({}, kMeta), s),
          kiln::where(mask, s, m), kiln::where(mask, m, s), kiln::lerp(m, m, s),
          kiln::addcmul(m, s, m),
          kiln::clamp(m, std::optional<Tensor>(s), std::optional<Tensor>(s)),
          kiln::masked_fill(m, mask, s), kiln::pow(m, s), kiln::add(m, 2.0),
          kiln::index_select(kiln::empty({4, 3}, kMeta), 0, kiln::zeros({}, kiln::kInt64))}) {
      EXPECT_TRUE(r.is_meta());
    }
    EXPECT_EQ(kiln::add(kiln::empty({2, 3}, kMeta), s).sizes(), (std::vector<int64_t>{2, 3}));
    Tensor self = kiln::empty({3}, kMeta);
    EXPECT_TRUE(self.add_(s).is_meta());

    EXPECT_KILN_ERROR(kiln::add(kiln::empty({}, kMeta), kiln::ones({3})),
                      "[add.Tensor] expected all tensors on one device, got meta and cpu (an "
                      "input 'other' of [3])");
    Tensor out = kiln::full({}, 5.0);
    EXPECT_KILN_ERROR(kiln::add_out(out, m, m),
                      "[add.out] expected all tensors on one device, got meta and cpu (a written "
                      "argument 'out' of [])");
    Tensor target = kiln::full({3}, 5.0);
    EXPECT_KILN_ERROR(target.add_(kiln::empty({}, kMeta)),
                      "[add_.Tensor] expected all tensors on one device, got meta and cpu (a "
                      "written argument 'self' of [3])");
    EXPECT_KILN_ERROR(kiln::call_op("mul.Tensor", {m, kiln::ones({3})}),
                      "[mul.Tensor] expected all tensors on one device, got meta and cpu");
    kiln::sync();
    EXPECT_TENSOR_CLOSE_TOL(out, kiln::full({}, 5.0), 0, 0);
    EXPECT_TENSOR_CLOSE_TOL(target, kiln::full({3}, 5.0), 0, 0);
  }
}

// Ops that move data between devices keep their own rules: a meta
// destination takes a source with data (shapes only, as PyTorch's), a
// factory or to() makes its result where its device argument says.
TEST(MetaDeviceErrors, CopiesBetweenDevices) {
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    Tensor dst = kiln::empty({3}, kMeta);
    EXPECT_TRUE(dst.copy_(kiln::ones({3})).is_meta());
    EXPECT_TRUE(kiln::ones({3}).to(Device::meta()).is_meta());
    Tensor host = kiln::full({3}, 4.0);
    EXPECT_KILN_ERROR(host.copy_(kiln::empty({3}, kMeta)),
                      "[copy_] expected a source with data for a destination on cpu, got one on "
                      "meta (an input 'src' of [3])");
    EXPECT_KILN_ERROR(kiln::empty({2}, kMeta).to(Device::cpu()),
                      "[_to_copy] expected a source with data for a destination on cpu");
    kiln::sync();
    EXPECT_TENSOR_CLOSE_TOL(host, kiln::full({3}, 4.0), 0, 0);
  }
}

}  // namespace
