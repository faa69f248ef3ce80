// The decompositions CUDA nodes use in place of eager kernels (Note [CUDA-only
// decompositions], Note [Out forms]) generate sources NVRTC compiles for
// sm_90, with the structure the eager kernels' arithmetic needs. No GPU: the
// nodes are built by hand with device cuda; their tensors only carry dtypes.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "jit/codegen_cuda/nvrtc.h"
#include "jit/codegen_cuda/pointwise_source.h"
#include "jit/record/decompose.h"
#include "jit/record/lazy_kernel.h"
#include "jit/record/trace_buffer.h"
#include "kiln/kiln.h"
#include "runtime/cuda/cuda_runtime.h"

namespace {

using kiln::DType;
using kiln::IValue;
using kiln::Scalar;
using kiln::Tensor;
using kiln::jit::KernelBuilder;
using kiln::jit::Node;
using kiln::jit::PointwiseKernel;
namespace kc = kiln::jit::cuda;

Tensor of(DType t) {
  return kiln::empty({4, 3}, kiln::TensorOptions().dtype(t));
}

// A node of `op` over `args`, its result of dtype `out` (written: the index of
// the argument it writes, or -1).
Node cuda_node(const char* op, std::vector<IValue> args, DType out, int written = -1,
               kiln::Device device = kiln::Device::cuda()) {
  Node n;
  n.op = &kiln::find_op(op).entry();
  n.args = std::move(args);
  n.device = device;
  if (written >= 0) {
    n.written = {written};
    n.outputs = {n.args[written].to_tensor()};
  } else {
    n.outputs = {of(out)};
  }
  return n;
}

// The node's kernel, or an empty body when it does not decompose.
PointwiseKernel kernel_of(const Node& n) {
  PointwiseKernel none;
  auto d = kiln::jit::find_decomposition(n);
  if (!d) return none;
  KernelBuilder b;
  std::vector<int32_t> values;
  std::vector<DType> inputs;
  for (const IValue& a : n.args) {
    if (!a.is_tensor() || !a.to_tensor().defined()) continue;
    inputs.push_back(a.to_tensor().dtype());
    b.kernel().inputs.push_back(a.to_tensor().dtype());
    values.push_back(b.load(static_cast<int32_t>(inputs.size() - 1), a.to_tensor().dtype()));
  }
  int32_t r = d(b, n, values);
  if (r < 0) return none;
  r = b.round_to(r, n.outputs[0].dtype());
  PointwiseKernel k = b.kernel();
  k.inputs = inputs;
  k.outputs = {n.outputs[0].dtype()};
  k.stores = {r};
  k.compact();
  return k;
}

class CudaDecompose : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kiln::cuda::built()) GTEST_SKIP() << "kiln was built without the CUDA toolkit (no NVRTC)";
  }
  // Generates and compiles `n`'s kernel; returns its IR listing.
  std::string compiles(const Node& n) {
    PointwiseKernel k = kernel_of(n);
    EXPECT_FALSE(k.body.empty()) << n.op->name() << " did not decompose";
    if (k.body.empty()) return "";
    kc::PointwiseSpec spec{&k};
    spec.layouts.assign(k.inputs.size() + k.outputs.size(), kc::Layout::Strided);
    spec.ndim = 2;
    std::string src = kc::pointwise_source(spec);
    EXPECT_NO_THROW(kc::nvrtc_compile(src, kc::pointwise_name(spec), 90)) << n.op->name() << ":\n"
                                                                          << src;
    return k.str();
  }
};

TEST_F(CudaDecompose, DivRoundingModesInEveryDtype) {
  const DType dtypes[] = {kiln::kFloat32, kiln::kFloat64, kiln::kFloat16, kiln::kBFloat16,
                          kiln::kInt64,   kiln::kInt32,   kiln::kInt16,   kiln::kUInt8};
  int compiled = 0;
  for (DType t : dtypes) {
    for (const char* mode : {"trunc", "floor"}) {
      compiles(cuda_node("div.Tensor_mode", {of(t), of(t), std::string(mode)}, t));
      Tensor self = of(t);
      compiles(cuda_node("div_.Tensor_mode", {self, of(t), std::string(mode)}, t, 0));
      compiles(cuda_node("div.out_mode", {of(t), of(t), std::string(mode), of(kiln::kFloat64)},
                         kiln::kFloat64, 3));
      compiled += 3;
    }
  }
  EXPECT_EQ(compiled, 3 * 2 * 8);
  for (DType t : {kiln::kFloat16, kiln::kBFloat16}) {
    compiles(cuda_node("floor_divide", {of(t), of(t)}, t));
    compiles(cuda_node("addcmul",
                       {of(kiln::kInt16), of(kiln::kInt16), of(kiln::kInt16), Scalar(0.5)},
                       kiln::kInt16));
  }
  // Integer trunc division is C division (no float round trip).
  std::string ir = compiles(
      cuda_node("div.Tensor_mode", {of(kiln::kInt64), of(kiln::kInt64), "trunc"}, kiln::kInt64));
  EXPECT_NE(ir.find("div int64"), std::string::npos) << ir;
}

TEST_F(CudaDecompose, ClampMaskedFillNanToNumRoundSoftplusErfc) {
  for (DType t : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16, kiln::kFloat64, kiln::kInt32,
                  kiln::kUInt8}) {
    compiles(cuda_node("clamp.Tensor", {of(t), of(t), of(t)}, t));
    compiles(cuda_node("clamp.Tensor", {of(t), IValue(), of(t)}, t));
    compiles(cuda_node("clamp.Tensor", {of(t), of(t), IValue()}, t));
    compiles(cuda_node("masked_fill.Scalar", {of(t), of(kiln::kBool), Scalar(-1)}, t));
    compiles(cuda_node("masked_fill.Tensor", {of(t), of(kiln::kBool), of(t)}, t));
    compiles(cuda_node("nan_to_num", {of(t), IValue(), IValue(), IValue()}, t));
    compiles(cuda_node("nan_to_num", {of(t), 1.5, 1e300, -HUGE_VAL}, t));
    if (!kiln::is_floating(t)) continue;
    compiles(cuda_node("round.decimals", {of(t), int64_t{3}}, t));
    compiles(cuda_node("round.decimals", {of(t), int64_t{-2}}, t));
    compiles(cuda_node("softplus", {of(t), Scalar(2.0), Scalar(20.0)}, t));
    compiles(cuda_node("erfc", {of(t)}, t));
  }
  // masked_fill of -1 into uint8 stores 255: the value is an integer
  // argument (Note [Numbers as kernel arguments]).
  std::string ir = compiles(cuda_node(
      "masked_fill.Scalar", {of(kiln::kUInt8), of(kiln::kBool), Scalar(-1)}, kiln::kUInt8));
  EXPECT_NE(ir.find("param uint8 arg0 (-1)"), std::string::npos) << ir;
}

// The activations of torch.nn.functional (decompose_pointwise.cpp), every
// floating dtype, functional, in place and out=.
TEST_F(CudaDecompose, Activations) {
  for (DType t : {kiln::kFloat32, kiln::kFloat64, kiln::kFloat16, kiln::kBFloat16}) {
    compiles(cuda_node("leaky_relu", {of(t), Scalar(0.2)}, t));
    compiles(cuda_node("elu", {of(t), Scalar(1.5), Scalar(0.5), Scalar(2.0)}, t));
    for (const char* op : {"hardsigmoid", "hardswish", "mish", "log_sigmoid"}) {
      compiles(cuda_node(op, {of(t)}, t));
    }
    Tensor self = of(t);
    compiles(cuda_node("leaky_relu_", {self, Scalar(0.01)}, t, 0));
    compiles(cuda_node("mish.out", {of(t), of(t)}, t, 1));
    compiles(cuda_node("log_sigmoid.out", {of(t), of(t)}, t, 1));
  }
  // Integers stay with the eager kernels, which refuse them.
  EXPECT_TRUE(kernel_of(cuda_node("mish", {of(kiln::kInt32)}, kiln::kInt32)).body.empty());
}

TEST_F(CudaDecompose, PowIsExactWhereTheEagerKernelIs) {
  // x ** 3 is (x * x) * x and x ** -2 is 1 / (x * x): no pow call.
  for (double e : {3.0, -2.0}) {
    std::string ir =
        compiles(cuda_node("pow.Tensor_Scalar", {of(kiln::kFloat32), Scalar(e)}, kiln::kFloat32));
    EXPECT_EQ(ir.find("pow"), std::string::npos) << ir;
  }
  // Integer powers by repeated multiplication, tensor ** tensor and out=.
  for (DType t : {kiln::kInt64, kiln::kInt32, kiln::kInt8, kiln::kUInt8}) {
    compiles(cuda_node("pow.Tensor_Tensor", {of(t), of(t)}, t));
    compiles(cuda_node("pow.Tensor_Scalar", {of(t), Scalar(int64_t{5})}, t));
    compiles(cuda_node("pow.Tensor_Tensor_out", {of(t), of(t), of(t)}, t, 2));
  }
  // Constants out of float range are still valid literals (inf).
  for (DType t : {kiln::kInt8, kiln::kFloat32, kiln::kFloat64}) {
    compiles(cuda_node("pow.Tensor_Scalar", {of(t), Scalar(1e300)}, kiln::kFloat32));
    compiles(cuda_node("pow.Tensor_Scalar", {of(t), Scalar(1e-300)}, kiln::kFloat32));
  }
  compiles(cuda_node("pow.Tensor_Scalar", {of(kiln::kFloat64), Scalar(4.9e-324)}, kiln::kFloat64));
}

TEST_F(CudaDecompose, OutFormsComputeInTheFunctionalDtype) {
  const char* unary[] = {"exp.out",  "tanh.out", "sqrt.out", "sigmoid.out", "log1p.out",
                         "erfc.out", "abs.out",  "neg.out",  "sign.out",    "round.out"};
  for (const char* op : unary) {
    compiles(cuda_node(op, {of(kiln::kFloat32), of(kiln::kFloat64)}, kiln::kFloat64, 1));
  }
  compiles(cuda_node("add.out",
                     {of(kiln::kFloat32), of(kiln::kFloat32), Scalar(2.0), of(kiln::kFloat64)},
                     kiln::kFloat64, 3));
  // add.out of float32 inputs into float64 adds in float32, then widens.
  std::string ir = compiles(
      cuda_node("add.out", {of(kiln::kFloat32), of(kiln::kFloat32), Scalar(1), of(kiln::kFloat64)},
                kiln::kFloat64, 3));
  EXPECT_NE(ir.find("add float32"), std::string::npos) << ir;
  // Comparisons: bool, then the target's dtype.
  ir = compiles(cuda_node("lt.Tensor_out", {of(kiln::kFloat32), of(kiln::kInt64), of(kiln::kInt64)},
                          kiln::kInt64, 2));
  EXPECT_NE(ir.find("lt bool"), std::string::npos) << ir;
  Tensor self = of(kiln::kFloat16);
  compiles(cuda_node("eq_.Tensor", {self, of(kiln::kFloat32)}, kiln::kFloat16, 0));
  compiles(cuda_node("logical_and.out", {of(kiln::kFloat32), of(kiln::kInt32), of(kiln::kBool)},
                     kiln::kBool, 2));
  compiles(
      cuda_node("clamp.Tensor_out",
                {of(kiln::kFloat32), of(kiln::kFloat32), of(kiln::kFloat32), of(kiln::kFloat32)},
                kiln::kFloat32, 3));
  compiles(cuda_node("where.self_out",
                     {of(kiln::kBool), of(kiln::kFloat32), of(kiln::kFloat32), of(kiln::kFloat32)},
                     kiln::kFloat32, 3));
}

TEST_F(CudaDecompose, BoolArithmetic) {
  for (const char* op : {"add.Tensor", "mul.Tensor"}) {
    std::vector<IValue> args = {of(kiln::kBool), of(kiln::kBool)};
    if (std::string(op) == "add.Tensor") args.emplace_back(Scalar(true));
    compiles(cuda_node(op, args, kiln::kBool));
  }
  compiles(cuda_node("maximum", {of(kiln::kBool), of(kiln::kBool)}, kiln::kBool));
  compiles(cuda_node("minimum", {of(kiln::kBool), of(kiln::kBool)}, kiln::kBool));
  compiles(cuda_node("sign", {of(kiln::kBool)}, kiln::kBool));
}

TEST_F(CudaDecompose, IntegerAddWithAFloatAlphaRaises) {
  Node n = cuda_node("add.Tensor", {of(kiln::kInt32), of(kiln::kInt32), Scalar(0.5)}, kiln::kInt32);
  EXPECT_THROW(kernel_of(n), kiln::Error);
}

// CPU nodes keep their eager kernels for these ops (lazy CPU results unchanged).
TEST_F(CudaDecompose, CpuNodesDoNotTakeCudaOnlyDecompositions) {
  const kiln::Device cpu = kiln::Device::cpu();
  EXPECT_EQ(kiln::jit::find_decomposition(
                cuda_node("div.Tensor_mode", {of(kiln::kFloat32), of(kiln::kFloat32), "trunc"},
                          kiln::kFloat32, -1, cpu)),
            nullptr);
  EXPECT_EQ(kiln::jit::find_decomposition(cuda_node(
                "exp.out", {of(kiln::kFloat32), of(kiln::kFloat32)}, kiln::kFloat32, 1, cpu)),
            nullptr);
  EXPECT_EQ(kiln::jit::find_decomposition(
                cuda_node("erfc", {of(kiln::kFloat32)}, kiln::kFloat32, -1, cpu)),
            nullptr);
}

}  // namespace

namespace {

// Note [CUDA integer division by zero]: integer division kernels take the flag
// and set it on a zero divisor; float ones do not take it.
TEST_F(CudaDecompose, IntegerDivisionKernelsCarryTheZeroDivisorFlag) {
  for (const char* op : {"floor_divide", "remainder.Tensor", "fmod.Tensor"}) {
    for (DType t : {kiln::kInt64, kiln::kUInt8, kiln::kFloat32}) {
      PointwiseKernel k = kernel_of(cuda_node(op, {of(t), of(t)}, t));
      ASSERT_FALSE(k.body.empty()) << op;
      EXPECT_EQ(kiln::jit::divides_integers(k), !kiln::is_floating(t)) << op;
      kc::PointwiseSpec spec{&k, {kc::Layout::Dense, kc::Layout::Dense, kc::Layout::Strided}};
      spec.ndim = 2;
      const std::string src = kc::pointwise_source(spec);
      EXPECT_EQ(src.find("zero_divisor |= ") != std::string::npos, !kiln::is_floating(t)) << src;
      EXPECT_NO_THROW(kc::nvrtc_compile(src, kc::pointwise_name(spec), 90)) << src;
    }
  }
}

}  // namespace

namespace {

// The whole fusion path on CUDA nodes, without a GPU: lazy CUDA tensors are
// only recorded, and describe_pending() shows the groups flush() would run.
// Tensors that must never materialize here are dropped with the trace.
// Nothing is live, but integer divisions still run to check their divisors
// (Note [Failures in a trace]). Without a GPU they cannot: the flush may
// raise that, unless a tensor held elsewhere claims the error.
void flush_without_a_gpu() {
  try {
    kiln::jit::flush();
  } catch (const kiln::Error& e) {
    EXPECT_FALSE(kiln::cuda::is_available()) << e.what();
    EXPECT_NE(std::string(e.what()).find("no CUDA device is available"), std::string::npos)
        << e.what();
  }
}

TEST_F(CudaDecompose, CudaTracesFuseTheNewOpsWithoutAGpu) {
  if (!kiln::jit::is_lazy()) GTEST_SKIP() << "lazy mode is off (KILN_EAGER=1)";
  auto& trace = kiln::jit::TraceBuffer::current();
  std::string plan;
  {
    auto on_cuda = [](DType t) {
      return kiln::TensorOptions().dtype(t).device(kiln::Device::cuda());
    };
    Tensor x = kiln::ones({4, 6}, on_cuda(kiln::kFloat32));
    Tensor y = kiln::full({6}, 3, on_cuda(kiln::kFloat32));
    Tensor i = kiln::ones({4, 6}, on_cuda(kiln::kInt64));
    Tensor out = kiln::empty({4, 6}, on_cuda(kiln::kFloat64));
    Tensor a = kiln::div(x, y, "floor");
    Tensor c = kiln::clamp(a, std::optional<Tensor>(y), std::optional<Tensor>(x));
    Tensor m = kiln::masked_fill(c, kiln::lt(x, y), -1);
    kiln::exp_out(out, m);
    Tensor q = kiln::remainder(i, i);
    // An in-place comparison stores its bool into self's dtype. (An out=
    // target of another shape runs the trace first: tests/cuda covers it.)
    Tensor h = kiln::ones({4, 6}, on_cuda(kiln::kFloat16));
    kiln::lt_(h, x);
    plan = trace.describe_pending();
    EXPECT_EQ(plan.find("extern[lt_.Tensor]"), std::string::npos) << plan;
    // The factories are externs; every op after them joins one CUDA group.
    EXPECT_NE(plan.find("fused[div.Tensor_mode clamp.Tensor lt.Tensor masked_fill.Scalar exp.out "
                        "remainder.Tensor -> 5 out]"),
              std::string::npos)
        << plan;
  }
  flush_without_a_gpu();
}

}  // namespace

namespace {

// The reduction groups of `plan` (describe_pending()'s "reduce[...]" parts).
std::vector<std::string> reduction_groups(const std::string& plan) {
  std::vector<std::string> out;
  for (size_t at = plan.find("reduce["); at != std::string::npos;
       at = plan.find("reduce[", at + 1)) {
    out.push_back(plan.substr(at, plan.find(']', at) - at + 1));
  }
  return out;
}

// Note [Fusion groups]: an integer division joins no reduction group, as
// prologue or epilogue (only a pointwise kernel reports a zero divisor);
// integer additions and float divisions still do.
TEST_F(CudaDecompose, IntegerDivisionJoinsNoReduction) {
  if (!kiln::jit::is_lazy()) GTEST_SKIP() << "lazy mode is off (KILN_EAGER=1)";
  auto& trace = kiln::jit::TraceBuffer::current();
  {
    auto on_cuda = [](DType t) {
      return kiln::TensorOptions().dtype(t).device(kiln::Device::cuda());
    };
    const kiln::DType f32 = kiln::kFloat32, i64 = kiln::kInt64;
    Tensor i = kiln::ones({4, 6}, on_cuda(i64));
    Tensor d = kiln::full({6}, 2, on_cuda(i64));
    Tensor k = kiln::full({4}, 3, on_cuda(i64));
    Tensor x = kiln::ones({4, 6}, on_cuda(f32));
    Tensor added = kiln::sum(kiln::add(i, i).to(f32), {1});
    Tensor floats = kiln::amax(kiln::div(x, x), {1});
    const std::vector<std::string> control = reduction_groups(trace.describe_pending());
    ASSERT_EQ(control.size(), 2u) << trace.describe_pending();
    EXPECT_NE(control[0].find("add.Tensor"), std::string::npos) << control[0];
    EXPECT_NE(control[1].find("div.Tensor >"), std::string::npos) << control[1];
    Tensor before = kiln::sum(kiln::floor_divide(kiln::add(i, i), d).to(f32), {1});
    Tensor after = kiln::remainder(kiln::amax(x, {1}).to(i64), k);
    Tensor mod = kiln::fmod(kiln::sum(x, {1}).to(i64), k);
    const std::string plan = trace.describe_pending();
    const std::vector<std::string> groups = reduction_groups(plan);
    ASSERT_EQ(groups.size(), 5u) << plan;
    for (const std::string& g : groups) {
      for (const char* op : {"floor_divide", "remainder", "fmod"}) {
        EXPECT_EQ(g.find(op), std::string::npos) << g << " in " << plan;
      }
    }
    for (const char* op : {"floor_divide", "remainder.Tensor", "fmod.Tensor"}) {
      EXPECT_NE(plan.find(op), std::string::npos) << op << " missing from " << plan;
    }
  }
  flush_without_a_gpu();
}

}  // namespace
