// The dispatcher: schemas, boxed calls by name, custom ops registered with
// KILN_LIBRARY and called like built-ins (boxed, typed, traced lazily).

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/support/testing.h"

namespace {

using kiln::Tensor;

// A custom op: y = x * alpha + 1, with CPU and Meta kernels.
Tensor scale_plus_one_cpu(const Tensor& x, double alpha) {
  kiln::EagerGuard eager;
  return x * alpha + 1.0;
}
Tensor scale_plus_one_meta(const Tensor& x, double) {
  // (meta kernels compute geometry only)
  return kiln::empty(x.sizes(), kiln::TensorOptions(x.dtype()).device(kiln::Device::meta()));
}

}  // namespace

Tensor identity_cpu(const Tensor& x) {
  return x;
}

KILN_LIBRARY(testns, m) {
  m.def("scale_plus_one(Tensor x, float alpha=2.0) -> Tensor");
  m.def("cpu_only(Tensor x) -> Tensor");
}
KILN_LIBRARY_IMPL(testns, CPU, m) {
  m.impl("scale_plus_one", &scale_plus_one_cpu);
  m.impl("cpu_only", &identity_cpu);
}
KILN_LIBRARY_IMPL(testns, Meta, m) {
  m.impl("scale_plus_one", &scale_plus_one_meta);
}

namespace {

Tensor arange_f(int64_t n) {
  kiln::EagerGuard eager;
  return kiln::arange(n).to(kiln::kFloat32);
}

TEST(Schema, ParsesAndPrintsBack) {
  const char* text =
      "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> "
      "Tensor";
  kiln::FunctionSchema s = kiln::parse_schema(text);
  EXPECT_EQ(s.full_name(), "sum.dim_IntList");
  ASSERT_EQ(s.arguments.size(), 4u);
  EXPECT_EQ(s.arguments[1].type, kiln::ArgType::IntList);
  EXPECT_TRUE(s.arguments[1].optional);
  EXPECT_EQ(s.arguments[1].fixed_size, 1);
  EXPECT_TRUE(s.arguments[3].kwarg_only);
  EXPECT_EQ(s.str(), text);
  kiln::FunctionSchema w =
      kiln::parse_schema("add_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)");
  EXPECT_TRUE(w.is_mutable());
  EXPECT_KILN_ERROR(kiln::parse_schema("bad(Tensor x -> Tensor"), "[schema] expected");
  EXPECT_KILN_ERROR(kiln::parse_schema("f(Blob x) -> Tensor"), "expected a type");
}

TEST(Dispatcher, EveryBuiltInIsListedWithItsSchema) {
  auto ops = kiln::all_ops();
  EXPECT_GT(ops.size(), 300u);
  EXPECT_EQ(kiln::find_op("add.Tensor").schema().str(),
            "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  EXPECT_KILN_ERROR(kiln::find_op("no_such_op"), "[find_op] expected a registered op name");
}

TEST(Dispatcher, BoxedCallsByNameWithKeywordsAndDefaults) {
  kiln::EagerGuard eager;
  Tensor a = arange_f(4), b = arange_f(4);
  kiln::Stack out = kiln::call_op("add.Tensor", {a, b}, {{"alpha", 3}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TENSOR_CLOSE(out[0].to_tensor(), a + b * 3.0);
  // A string names a dtype, as in PyTorch's Python API.
  out = kiln::call_op("sum", {a}, {{"dtype", "float64"}});
  EXPECT_EQ(out[0].to_tensor().dtype(), kiln::kFloat64);
}

TEST(DispatcherErrors, WrongBoxedArgumentsNameTheOpAndArgument) {
  Tensor a = arange_f(4);
  EXPECT_KILN_ERROR(kiln::call_op("add.Tensor", {a, int64_t{2}}),
                    "[add.Tensor] argument 'other' (position 1) expected Tensor, got int");
  EXPECT_KILN_ERROR(kiln::call_op("add.Tensor", {a}), "[add.Tensor] missing argument 'other'");
  EXPECT_KILN_ERROR(kiln::call_op("add.Tensor", {a, a}, {{"beta", 1}}), "unknown keyword 'beta'");
  EXPECT_KILN_ERROR(kiln::call_op("add.Tensor", {a, a, 1}), "expected at most 2 positional");
  EXPECT_KILN_ERROR(kiln::call_op("add.Tensor", {a, a}, {{"alpha", "two"}}),
                    "argument 'alpha' (position 2) expected Scalar, got str");
}

TEST(DispatcherErrors, TypedCallsWithTheWrongSignatureAreRefused) {
  EXPECT_KILN_ERROR(kiln::TypedOp<Tensor(const Tensor&)>("add.Tensor"),
                    "expected a kernel of 3 arguments");
  EXPECT_KILN_ERROR(
      (kiln::TypedOp<Tensor(const Tensor&, int64_t, const kiln::Scalar&)>("add.Tensor")),
      "argument 1 'other' expected C++ type for Tensor");
}

TEST(DispatcherErrors, MissingKernelsAreNamed) {
  // testns::cpu_only has a CPU kernel and nothing else.
  Tensor m = kiln::empty({2}, kiln::TensorOptions().device(kiln::Device::meta()));
  EXPECT_KILN_ERROR(kiln::call_op("testns::cpu_only", {m}),
                    "[testns::cpu_only] no kernel for Meta (kernels:");
}

TEST(CustomOps, CallableLikeBuiltIns) {
  Tensor x = arange_f(5);
  // Boxed, by name, with the schema's default.
  {
    kiln::EagerGuard eager;
    kiln::Stack out = kiln::call_op("testns::scale_plus_one", {x});
    EXPECT_TENSOR_CLOSE(out[0].to_tensor(), x * 2.0 + 1.0);
  }
  // Typed.
  static const kiln::TypedOp<Tensor(const Tensor&, double)> op("testns::scale_plus_one");
  {
    kiln::EagerGuard eager;
    EXPECT_TENSOR_CLOSE(op(x, 3.0), x * 3.0 + 1.0);
  }
  // Traced lazily through its Meta kernel, then run with the rest of the trace.
  Tensor y = op(x, 0.5) * 2.0;
  EXPECT_TRUE(y.is_pending());
  EXPECT_EQ(y.sizes(), kiln::IntArrayRef({5}));
  kiln::Tensor expected;
  {
    kiln::EagerGuard eager;
    expected = (x * 0.5 + 1.0) * 2.0;
  }
  EXPECT_TENSOR_CLOSE(y, expected);
  // It is listed with the built-ins.
  EXPECT_EQ(kiln::find_op("testns::scale_plus_one").schema().str(),
            "testns::scale_plus_one(Tensor x, float alpha=2.) -> Tensor");
}

TEST(CustomOps, RegistrationErrors) {
  kiln::Library lib(kiln::Library::Kind::Impl, "testns", kiln::DispatchKey::CPU);
  auto wrong = +[](const Tensor& x) { return x; };
  EXPECT_KILN_ERROR(lib.impl("scale_plus_one", wrong), "different C++ signature");
  kiln::Library defs(kiln::Library::Kind::Def, "testns", std::nullopt);
  EXPECT_KILN_ERROR(defs.def("scale_plus_one(Tensor x) -> Tensor"), "defined twice");
}

TEST(Dispatcher, ThreadLocalGuardsChooseTheKey) {
  Tensor x = arange_f(3);
  EXPECT_TRUE(kiln::jit::is_lazy());
  {
    kiln::EagerGuard eager;
    EXPECT_FALSE(kiln::jit::is_lazy());
    EXPECT_FALSE((x + x).is_pending());
  }
  EXPECT_TRUE((x + x).is_pending());
  kiln::sync();
}

}  // namespace
