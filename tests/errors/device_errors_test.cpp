// Must-fail cases of device indices: an index outside what a Device can hold
// (0..127, stored in 8 bits) raises kiln::Error wherever it is given, instead
// of wrapping to another device (cuda:300 used to become cuda:44). And meta
// tensors meeting tensors with data in one op.

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace {

using kiln::Device;
using kiln::DeviceType;

TEST(DeviceErrors, IndexOutOfRange) {
  EXPECT_KILN_ERROR(Device::cuda(300), "[device] expected a device index 0..127, got 300");
  EXPECT_KILN_ERROR(Device::cuda(128), "[device] expected a device index 0..127, got 128");
  EXPECT_KILN_ERROR(Device::cuda(256), "got 256");  // would wrap to cuda:0
  EXPECT_KILN_ERROR(Device::cuda(-1), "got -1");
  EXPECT_KILN_ERROR(Device(DeviceType::CPU, 1000), "got 1000");
  EXPECT_KILN_ERROR(Device("cuda:300"), "[device] expected a device index 0..127 after ':'");
  EXPECT_KILN_ERROR(Device("cuda:-1"), "[device] expected a device index 0..127 after ':'");
  EXPECT_KILN_ERROR(kiln::ones({2}).to(Device::cuda(300)), "got 300");
  EXPECT_KILN_ERROR(kiln::call_op("empty", {std::vector<int64_t>{2}}, {{"device", "cuda:300"}}),
                    "after ':', got 'cuda:300'");
}

TEST(DeviceErrors, IndicesInRangeRoundTrip) {
  for (int i : {0, 1, 7, 44, 127}) {
    EXPECT_EQ(Device::cuda(i).index(), i);
    EXPECT_EQ(Device("cuda:" + std::to_string(i)), Device::cuda(i));
    EXPECT_EQ(Device::cuda(i).str(), "cuda:" + std::to_string(i));
  }
  static_assert(Device::cuda(3).index() == 3, "a valid Device stays a constant expression");
}

// A meta operand made a CPU op a meta one: a CPU out= tensor kept its old
// bytes (found by CallOpFuzz, seed 16: ne.Tensor_out of a 0-dim meta self
// and a CPU other into a CPU out), and a functional op answered on meta. As
// PyTorch, meta and data tensors do not meet in one op, except a 0-dim
// tensor, which reads as a scalar.
TEST(DeviceErrors, MetaAndDataTensorsInOneOp) {
  const kiln::TensorOptions meta = kiln::TensorOptions(kiln::kFloat32).device(Device::meta());
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    kiln::Tensor out = kiln::empty({0, 1, 0}, kiln::TensorOptions(kiln::kBool));
    EXPECT_KILN_ERROR(
        kiln::call_op("ne.Tensor_out",
                      {kiln::empty({}, kiln::TensorOptions(kiln::kInt16).device(Device::meta())),
                       kiln::ones({3, 1, 4})},
                      {{"out", out}}),
        "[ne.Tensor_out] expected all tensors on one device, got meta and cpu");
    EXPECT_KILN_ERROR(kiln::add(kiln::empty({3}, meta), kiln::ones({3})),
                      "[add.Tensor] expected all tensors on one device, got meta and cpu");
    EXPECT_KILN_ERROR(kiln::ne(kiln::empty({}, meta), kiln::ones({3})),
                      "expected all tensors on one device");
    // A 0-dim tensor with data is a scalar to a meta op.
    EXPECT_TRUE(kiln::mul(kiln::empty({3}, meta), kiln::ones({})).device().is_meta());
    EXPECT_TRUE(kiln::add(kiln::empty({3}, meta), kiln::empty({3}, meta)).device().is_meta());
  }
}

// A meta tensor read by an op on the CPU names the op, not data_ptr; item()
// of one names item, not the copy it made. to(meta) is a meta tensor of the
// same geometry (as PyTorch's x.to("meta")): it used to fail in copy_.
TEST(DeviceErrors, MetaTensorsReadByAnOp) {
  const kiln::TensorOptions meta = kiln::TensorOptions(kiln::kFloat32).device(Device::meta());
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    const kiln::Tensor x = kiln::ones({3, 2});
    const kiln::Tensor m = x.t().to(Device::meta());
    EXPECT_TRUE(m.is_meta());
    EXPECT_EQ(m.sizes(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(m.strides(), (std::vector<int64_t>{1, 2}));  // the layout preserved
    EXPECT_TRUE(x.to(Device::meta(), kiln::kFloat64).is_meta());
    EXPECT_KILN_ERROR(kiln::empty({}, meta).item(),
                      "[item] expected a tensor with data, got a meta tensor");
  }
  kiln::EagerGuard eager;
  EXPECT_KILN_ERROR(kiln::layer_norm(kiln::ones({3, 2}), {2}, kiln::empty({2}, meta)),
                    "[layer_norm] expected all tensors on one device, got meta and cpu");
  EXPECT_KILN_ERROR(kiln::empty({2}, meta).data_ptr(),
                    "[data_ptr] expected a tensor with data, got a meta tensor");
}

// The same on CUDA, where pointwise ops are generated kernels, not the CPU's
// iteration: a meta or a CPU operand of more than one element next to a CUDA
// tensor raises kiln::Error naming both devices, eager and lazy, and the
// device keeps working. A 0-dim CPU tensor is a scalar to a CUDA op, as in
// PyTorch.
TEST(DeviceErrors, MixedDevicesInOneCudaOp) {
  KILN_REQUIRE_CUDA();
  const kiln::TensorOptions meta = kiln::TensorOptions(kiln::kFloat32).device(Device::meta());
  const kiln::TensorOptions gpu = kiln::TensorOptions(kiln::kFloat32).device(Device::cuda());
  for (bool lazy : {false, true}) {
    SCOPED_TRACE(lazy ? "lazy" : "eager");
    std::optional<kiln::EagerGuard> eager;
    if (!lazy) eager.emplace();
    const kiln::Tensor g = kiln::ones({3}, gpu);
    EXPECT_KILN_ERROR(kiln::add(kiln::empty({3}, meta), g).cpu(),
                      "[add.Tensor] expected all tensors on one device, got meta and cuda:0");
    EXPECT_KILN_ERROR(kiln::mul(g, kiln::empty({3}, meta)).cpu(),
                      "expected all tensors on one device");
    EXPECT_KILN_ERROR(kiln::add(kiln::ones({3}), g).cpu(),
                      "[add.Tensor] expected all tensors on one device, got cpu and cuda:0");
    EXPECT_KILN_ERROR(kiln::sub(g, kiln::ones({3})).cpu(), "expected all tensors on one device");
    kiln::Tensor out = kiln::empty({3}, kiln::TensorOptions(kiln::kBool).device(Device::cuda()));
    EXPECT_KILN_ERROR(kiln::call_op("ne.Tensor_out", {kiln::empty({3}, meta), g}, {{"out", out}}),
                      "expected all tensors on one device");
    EXPECT_KILN_ERROR(kiln::call_op("add_.Tensor", {g.clone(), kiln::ones({3})}),
                      "expected all tensors on one device");
    kiln::Tensor cpu_out = kiln::empty({});
    EXPECT_KILN_ERROR(
        kiln::call_op("add.out", {kiln::ones({}, gpu), kiln::ones({}, gpu)}, {{"out", cpu_out}}),
        "(a written argument of [])");
    const kiln::Tensor sum = kiln::add(g, kiln::full({}, 2.0));
    EXPECT_TRUE(sum.is_cuda());
    EXPECT_TENSOR_CLOSE_TOL(sum.cpu(), kiln::full({3}, 3.0), 0, 0);
    // A 0-dim CPU tensor's value is read when the op runs.
    kiln::Tensor s = kiln::full({}, 5.0);
    const kiln::Tensor scaled = kiln::mul(g, s);
    EXPECT_TENSOR_CLOSE_TOL(scaled.cpu(), kiln::full({3}, 5.0), 0, 0);
    EXPECT_TENSOR_CLOSE_TOL(kiln::where(kiln::gt(g, 0.5), s, g).cpu(), kiln::full({3}, 5.0), 0, 0);
    EXPECT_TENSOR_CLOSE_TOL(kiln::add(g, g).cpu(), kiln::full({3}, 2.0), 0, 0);
  }
}

}  // namespace
