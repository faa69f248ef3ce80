// Pointwise ops that run on CUDA through their decompositions (Note [CUDA-only
// decompositions], Note [Out forms]) against the eager CPU kernels, eager
// and lazy; error parity for integer division by zero (Note [CUDA integer
// division by zero]) and integer add with a float alpha; the accuracy fixes
// of the op kernels (log_softmax, float sums, scatter of a negative value).

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;
using kiln::testing::Tolerance;

Tolerance tol(kiln::DType t) {
  if (t == kiln::kFloat16) return {2e-3, 2e-3};
  if (t == kiln::kBFloat16) return {1.6e-2, 1.6e-2};
  if (t == kiln::kFloat64) return {1e-12, 1e-12};
  if (kiln::is_floating(t)) return {4e-6, 1e-6};
  return {0, 0};
}

Tensor rand(kiln::IntArrayRef sizes, kiln::DType dt, const char* layout, uint64_t seed,
            double low = -5, double high = 5) {
  kiln::EagerGuard eager;
  return kiln::testing::random_tensor(sizes, dt, layout, seed, low, high);
}

// `f` on CPU tensors eagerly is the reference; on their CUDA copies it runs
// eagerly and lazily (recorded, then materialized), and must agree or, where
// the CPU raises, raise too.
void check(const std::string& what, const std::function<Tensor(bool)>& f, Tolerance t) {
  Tensor expected;
  bool raised = false;
  {
    kiln::EagerGuard eager;
    try {
      expected = f(false);
    } catch (const kiln::Error&) {
      raised = true;
    }
  }
  for (bool lazy : {false, true}) {
    const std::string how = what + (lazy ? " (lazy)" : " (eager)");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    if (raised) {
      EXPECT_THROW(
          {
            Tensor got = f(true);
            got.cpu();
          },
          kiln::Error)
          << how;
      continue;
    }
    Tensor got = f(true);
    ASSERT_TRUE(got.is_cuda()) << how;
    std::string msg = kiln::testing::compare(got.cpu(), expected, t);
    EXPECT_TRUE(msg.empty()) << how << ": " << msg;
  }
}

const char* const kLayouts[] = {"contiguous", "transposed", "strided"};
const kiln::DType kAll[] = {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16, kiln::kFloat64,
                            kiln::kInt64,   kiln::kInt32,   kiln::kInt16,    kiln::kUInt8};

TEST(CudaPointwise, DivRoundingModesFloorDivideRemainder) {
  KILN_REQUIRE_CUDA();
  int seed = 0;
  for (kiln::DType dt : kAll) {
    for (const char* layout : kLayouts) {
      Tensor a = rand({5, 7}, dt, layout, ++seed);
      // Divisors away from zero (zero divisors are the error cases below).
      Tensor b = rand({7}, dt, "contiguous", ++seed, 1, 4);
      for (const char* mode : {"trunc", "floor"}) {
        check(
            std::string("div ") + mode + " " + kiln::dtype_name(dt) + " " + layout,
            [&](bool gpu) {
              return kiln::div(gpu ? a.cuda() : a, gpu ? b.cuda() : b, std::string_view(mode));
            },
            tol(dt));
      }
      check(
          std::string("floor_divide ") + kiln::dtype_name(dt),
          [&](bool gpu) { return kiln::floor_divide(gpu ? a.cuda() : a, gpu ? b.cuda() : b); },
          tol(dt));
      check(
          std::string("remainder ") + kiln::dtype_name(dt),
          [&](bool gpu) { return kiln::remainder(gpu ? a.cuda() : a, gpu ? b.cuda() : b); },
          tol(dt));
    }
  }
}

TEST(CudaPointwise, IntegerDivisionByZeroRaises) {
  KILN_REQUIRE_CUDA();
  for (kiln::DType dt : {kiln::kInt64, kiln::kInt32, kiln::kInt16, kiln::kUInt8}) {
    Tensor a = rand({4, 6}, dt, "contiguous", 3, 1, 9);
    Tensor zero = kiln::zeros({6}, kiln::TensorOptions().dtype(dt));
    for (const auto& op : std::vector<std::function<Tensor(const Tensor&, const Tensor&)>>{
             [](const Tensor&x, const Tensor&y) { return kiln::div(x, y, "trunc"); },
             [](const Tensor&x, const Tensor&y) { return kiln::div(x, y, "floor"); },
             [](const Tensor&x, const Tensor&y) { return kiln::floor_divide(x, y); },
             [](const Tensor&x, const Tensor&y) { return kiln::remainder(x, y); },
             [](const Tensor&x, const Tensor&y) { return kiln::fmod(x, y); }}) {
      check(
          std::string("division by zero ") + kiln::dtype_name(dt),
          [&](bool gpu) { return op(gpu ? a.cuda() : a, gpu ? zero.cuda() : zero); }, tol(dt));
      // Fused with a neighbour in lazy mode: the group raises, not returns garbage.
      check(
          std::string("fused division by zero ") + kiln::dtype_name(dt),
          [&](bool gpu) {
            Tensor x = gpu ? a.cuda() : a;
            return kiln::add(op(kiln::add(x, x), gpu ? zero.cuda() : zero), x);
          },
          tol(dt));
      // Before and after a reduction (Note [Fusion groups]: the division
      // stays in a pointwise kernel, which reports it).
      check(
          std::string("division by zero before a sum ") + kiln::dtype_name(dt),
          [&](bool gpu) {
            Tensor x = gpu ? a.cuda() : a;
            return kiln::sum(op(kiln::add(x, x), gpu ? zero.cuda() : zero).to(kiln::kFloat32), {1});
          },
          tol(kiln::kFloat32));
      check(
          std::string("division by zero after a max ") + kiln::dtype_name(dt),
          [&](bool gpu) {
            Tensor x = gpu ? a.cuda() : a;
            return op(kiln::amax(x.to(kiln::kFloat32), {0}).to(dt), gpu ? zero.cuda() : zero);
          },
          tol(dt));
    }
  }
}

TEST(CudaPointwise, IntegerAddWithAFloatAlphaRaises) {
  KILN_REQUIRE_CUDA();
  Tensor a = rand({3, 4}, kiln::kInt32, "contiguous", 5);
  check(
      "add int alpha 0.5",
      [&](bool gpu) { return kiln::add(gpu ? a.cuda() : a, gpu ? a.cuda() : a, 0.5); },
      tol(kiln::kInt32));
}

TEST(CudaPointwise, ClampMaskedFillNanToNumRoundSoftplusErfc) {
  KILN_REQUIRE_CUDA();
  int seed = 100;
  for (kiln::DType dt : kAll) {
    for (const char* layout : kLayouts) {
      const std::string name = std::string(kiln::dtype_name(dt)) + " " + layout;
      Tensor x = rand({6, 5}, dt, layout, ++seed);
      Tensor lo = rand({5}, dt, "contiguous", ++seed, -3, 0);
      Tensor hi = rand({6, 1}, dt, "contiguous", ++seed, 0, 3);
      Tensor mask = rand({6, 5}, kiln::kBool, "transposed", ++seed);
      auto on = [](const Tensor& t, bool gpu) { return gpu ? t.cuda() : t; };
      check(
          "clamp.Tensor " + name,
          [&](bool g) {
            return kiln::clamp(on(x, g), std::optional<Tensor>(on(lo, g)),
                               std::optional<Tensor>(on(hi, g)));
          },
          tol(dt));
      check(
          "clamp.Tensor min " + name,
          [&](bool g) {
            return kiln::clamp(on(x, g), std::optional<Tensor>(on(lo, g)), std::nullopt);
          },
          tol(dt));
      check(
          "masked_fill -1 " + name,
          [&](bool g) { return kiln::masked_fill(on(x, g), on(mask, g), -1); }, tol(dt));
      check(
          "nan_to_num " + name, [&](bool g) { return kiln::nan_to_num(on(x, g)); }, tol(dt));
      if (!kiln::is_floating(dt)) continue;
      Tensor special = x.clone();
      {
        kiln::EagerGuard eager;
        special.select(0, 0).fill_(INFINITY);
        special.select(0, 1).fill_(-INFINITY);
        special.select(0, 2).fill_(NAN);
      }
      check(
          "nan_to_num special " + name,
          [&](bool g) { return kiln::nan_to_num(on(special, g), 1.5, 1e300, std::nullopt); },
          tol(dt));
      check(
          "round decimals 2 " + name, [&](bool g) { return kiln::round(on(x, g), 2); }, tol(dt));
      check(
          "round decimals -1 " + name, [&](bool g) { return kiln::round(on(x, g), -1); }, tol(dt));
      check(
          "softplus " + name, [&](bool g) { return kiln::softplus(on(x, g), 2, 3); }, tol(dt));
      check(
          "erfc " + name, [&](bool g) { return kiln::erfc(on(x, g)); },
          dt == kiln::kFloat32 ? Tolerance{2e-6, 1e-6} : tol(dt));
    }
  }
}

TEST(CudaPointwise, PowExactCasesAndIntegers) {
  KILN_REQUIRE_CUDA();
  int seed = 200;
  for (kiln::DType dt : {kiln::kFloat32, kiln::kFloat64, kiln::kBFloat16}) {
    Tensor x = rand({203}, dt, "contiguous", ++seed);
    for (double e : {3.0, -2.0, 2.0, -1.0}) {
      check("pow exact " + std::to_string(e) + " " + kiln::dtype_name(dt),
            [&](bool g) { return kiln::pow(g ? x.cuda() : x, e); }, {0, 0});
    }
  }
  for (kiln::DType dt : {kiln::kInt64, kiln::kInt32, kiln::kInt8, kiln::kUInt8}) {
    Tensor x = rand({4, 5}, dt, "transposed", ++seed, -4, 4);
    Tensor e = rand({5}, dt, "contiguous", ++seed, 0, 6);
    check(std::string("pow int tensor ") + kiln::dtype_name(dt),
          [&](bool g) { return kiln::pow(g ? x.cuda() : x, g ? e.cuda() : e); }, {0, 0});
    check(std::string("pow int scalar ") + kiln::dtype_name(dt),
          [&](bool g) { return kiln::pow(g ? x.cuda() : x, 5); }, {0, 0});
    check(
        std::string("pow 1e300 ") + kiln::dtype_name(dt),
        [&](bool g) { return kiln::pow(g ? x.cuda() : x, 1e300); }, tol(kiln::kFloat32));
    check(std::string("scalar ** tensor ") + kiln::dtype_name(dt),
          [&](bool g) { return kiln::pow(kiln::Scalar(2), g ? e.cuda() : e); }, {0, 0});
  }
}

TEST(CudaPointwise, OutFormsAndBoolArithmetic) {
  KILN_REQUIRE_CUDA();
  Tensor a = rand({4, 6}, kiln::kFloat32, "transposed", 301);
  Tensor b = rand({6}, kiln::kFloat32, "contiguous", 302);
  for (kiln::DType out_dt : {kiln::kFloat32, kiln::kFloat64, kiln::kInt64, kiln::kBool}) {
    const std::string n = kiln::dtype_name(out_dt);
    check(
        "exp.out " + n,
        [&](bool g) {
          Tensor out = kiln::empty({4, 6}, kiln::TensorOptions().dtype(out_dt).device(
                                               g ? kiln::Device::cuda() : kiln::Device::cpu()));
          return kiln::exp_out(out, g ? a.cuda() : a);
        },
        // PyTorch computes exp in the input's float32 and then converts (as
        // CUDA does here); the eager CPU kernel, the reference, computes in
        // the float64 target: they agree to float32's precision.
        tol(out_dt == kiln::kFloat64 ? kiln::kFloat32 : out_dt));
    check(
        "lt.out " + n,
        [&](bool g) {
          Tensor out = kiln::empty({4, 6}, kiln::TensorOptions().dtype(out_dt).device(
                                               g ? kiln::Device::cuda() : kiln::Device::cpu()));
          return kiln::lt_out(out, g ? a.cuda() : a, g ? b.cuda() : b);
        },
        tol(out_dt));
    check(
        "add.out " + n,
        [&](bool g) {
          Tensor out = kiln::empty({4, 6}, kiln::TensorOptions().dtype(out_dt).device(
                                               g ? kiln::Device::cuda() : kiln::Device::cpu()));
          return kiln::add_out(out, g ? a.cuda() : a, g ? b.cuda() : b, 2);
        },
        tol(out_dt));
  }
  // A target of another shape is resized first (empty or not), as on the CPU.
  for (int64_t n : {0, 2, 100}) {
    check(
        "add.out resize from " + std::to_string(n),
        [&](bool g) {
          Tensor out = kiln::empty(
              {n}, kiln::TensorOptions().device(g ? kiln::Device::cuda() : kiln::Device::cpu()));
          return kiln::add_out(out, g ? a.cuda() : a, g ? b.cuda() : b);
        },
        tol(kiln::kFloat32));
  }
  Tensor p = rand({3, 4}, kiln::kBool, "contiguous", 303);
  Tensor q = rand({4}, kiln::kBool, "contiguous", 304);
  check("bool add", [&](bool g) { return kiln::add(g ? p.cuda() : p, g ? q.cuda() : q); }, {0, 0});
  check("bool mul", [&](bool g) { return kiln::mul(g ? p.cuda() : p, g ? q.cuda() : q); }, {0, 0});
  check("bool maximum", [&](bool g) { return kiln::maximum(g ? p.cuda() : p, g ? q.cuda() : q); },
        {0, 0});
}

TEST(CudaPointwise, OpKernelAccuracy) {
  KILN_REQUIRE_CUDA();
  // log_softmax of a row of large equal values is exactly -log(n).
  Tensor big = kiln::full({5, 6}, 1e4, kiln::TensorOptions().dtype(kiln::kFloat32));
  check("log_softmax large row", [&](bool g) { return kiln::log_softmax(g ? big.cuda() : big, 1); },
        {1.3e-6, 1e-5});
  // A 90,000-long float32 row sums within the oracle's tolerance.
  Tensor rows = rand({2, 90000}, kiln::kFloat32, "contiguous", 400);
  check("sum long rows", [&](bool g) { return kiln::sum(g ? rows.cuda() : rows, {1}); },
        {1.3e-6, 1e-5});
  Tensor outer = rand({900, 257}, kiln::kFloat32, "contiguous", 401);
  check("sum outer", [&](bool g) { return kiln::sum(g ? outer.cuda() : outer, {0}); },
        {1.3e-6, 1e-5});
  // scatter of -1 into uint8 stores 255.
  Tensor self = kiln::zeros({3, 4}, kiln::TensorOptions().dtype(kiln::kUInt8));
  Tensor index = kiln::zeros({1, 4}, kiln::TensorOptions().dtype(kiln::kInt64));
  check("scatter.value uint8 -1",
        [&](bool g) {
          return kiln::scatter(g ? self.cuda() : self, 0, g ? index.cuda() : index, -1);
        },
        {0, 0});
}

}  // namespace
