// Copies and fills on a CUDA device, checked against the same work on the CPU.
// Skips without a GPU.

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace kiln {
namespace {

using kiln::testing::random_tensor;

constexpr DType kAllDTypes[] = {kBool,  kUInt8,   kInt8,     kInt16,   kInt32,
                                kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
const char* const kLayouts[] = {"contiguous", "transposed", "strided", "offset", "expanded"};

std::vector<std::vector<int64_t>> shapes() {
  return {{}, {0, 3}, {7}, {4, 5}, {3, 4, 5}, {2, 3, 4, 5}, {33, 65}};
}

#define EXPECT_SAME(actual, expected) EXPECT_TENSOR_CLOSE_TOL(actual, expected, 0, 0)

TEST(CudaCopy, RoundTripEveryDtypeAndLayout) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  int cases = 0;
  uint64_t seed = 1;
  for (DType t : kAllDTypes) {
    for (const char* layout : kLayouts) {
      for (const auto& shape : shapes()) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + layout);
        Tensor x = random_tensor(shape, t, layout, seed++);
        Tensor d = x.to(Device::cuda());
        ASSERT_TRUE(d.is_cuda());
        EXPECT_EQ(d.dtype(), t);
        if (std::string(layout) == "transposed" && x.dim() >= 2 && x.numel() > 1) {
          EXPECT_EQ(d.strides(), x.strides()) << "a dense layout survives the copy";
        }
        Tensor back = d.cpu();
        ASSERT_TRUE(back.is_cpu());
        EXPECT_SAME(back, x);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 10 * 5 * 7);
}

// Views taken on the device come back as the same views of the host tensor.
TEST(CudaCopy, DeviceViewsToHost) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  for (DType t : {kFloat32, kFloat16, kInt64, kBool, kUInt8}) {
    Tensor x = random_tensor({6, 7, 8}, t, "contiguous", 11);
    Tensor d = x.to(Device::cuda());
    EXPECT_SAME(d.slice(2, 1, 7, 2).cpu(), x.slice(2, 1, 7, 2));
    EXPECT_SAME(d.transpose(0, 2).cpu(), x.transpose(0, 2));
    EXPECT_SAME(d.select(1, 3).cpu(), x.select(1, 3));
    EXPECT_SAME(d.narrow(0, 2, 3).cpu(), x.narrow(0, 2, 3));
    EXPECT_SAME(d.permute({1, 2, 0}).narrow(2, 1, 4).cpu(), x.permute({1, 2, 0}).narrow(2, 1, 4));
    EXPECT_SAME(d.select(2, 0).unsqueeze(2).expand({6, 7, 5}).cpu(),
                x.select(2, 0).unsqueeze(2).expand({6, 7, 5}));
    // A column of a wide matrix: gaps far larger than the data.
    Tensor w = random_tensor({300, 4000}, t, "contiguous", 12);
    EXPECT_SAME(w.to(Device::cuda()).select(1, 17).cpu(), w.select(1, 17));
    EXPECT_EQ(d.select(0, 1).select(0, 2).select(0, 3).item().to<double>(),
              x.select(0, 1).select(0, 2).select(0, 3).item().to<double>());
  }
}

// Host values written into device views, with dtype conversion and broadcasting.
TEST(CudaCopy, HostIntoDeviceViews) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  for (DType t : {kFloat32, kBFloat16, kInt32, kInt8}) {
    Tensor ref = random_tensor({5, 6, 7}, t, "contiguous", 21);
    Tensor dev = ref.to(Device::cuda());
    Tensor part = random_tensor({5, 2, 7}, kFloat64, "transposed", 22);
    Tensor dv = dev.narrow(1, 3, 2);
    dv.copy_(part);
    ref.narrow(1, 3, 2).copy_(part);
    EXPECT_SAME(dev.cpu(), ref);
    Tensor row = random_tensor({7}, t, "strided", 23);
    dev.select(1, 0).copy_(row);  // broadcast over dim 0, into a view with gaps
    ref.select(1, 0).copy_(row);
    EXPECT_SAME(dev.cpu(), ref);
    Tensor col = random_tensor({5, 6}, t, "contiguous", 24);
    dev.select(2, 4).copy_(col);  // one element per row: 2D copies of width one element
    ref.select(2, 4).copy_(col);
    EXPECT_SAME(dev.cpu(), ref);
  }
}

TEST(CudaCopy, ConvertingCopiesGoThroughTheHost) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  Tensor x = random_tensor({8, 9}, kFloat32, "transposed", 31);
  Tensor h = x.to(Device::cuda(), kFloat16);
  EXPECT_EQ(h.dtype(), kFloat16);
  EXPECT_SAME(h.cpu(), x.to(kFloat16));
  Tensor back = h.to(Device::cpu(), kFloat64);
  EXPECT_SAME(back, x.to(kFloat16).to(kFloat64));
  Tensor i = random_tensor({10}, kInt64, "strided", 32).to(Device::cuda());
  Tensor f = empty({10}, kFloat32);
  f.copy_(i);
  EXPECT_SAME(f, i.cpu().to(kFloat32));
}

TEST(CudaCopy, DeviceToDevice) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  for (DType t : {kFloat32, kFloat16, kInt64, kBool}) {
    Tensor x = random_tensor({64, 48}, t, "contiguous", 41);
    Tensor d = x.to(Device::cuda());
    EXPECT_SAME(d.clone().cpu(), x);
    EXPECT_SAME(d.t().contiguous().cpu(), x.t().contiguous());  // 2D element copies
    EXPECT_SAME(d.slice(1, 0, 48, 3).contiguous().cpu(), x.slice(1, 0, 48, 3).contiguous());
    // A KV-cache write: new rows into a slice of a preallocated buffer.
    Tensor cache = zeros({2, 4, 16, 8}, TensorOptions(t).device(Device::cuda()));
    Tensor ref = zeros({2, 4, 16, 8}, t);
    Tensor rows = random_tensor({2, 4, 3, 8}, t, "contiguous", 42);
    cache.narrow(2, 5, 3).copy_(rows.to(Device::cuda()));
    ref.narrow(2, 5, 3).copy_(rows);
    EXPECT_SAME(cache.cpu(), ref);
    // Broadcast on the device.
    Tensor b = empty({5, 48}, TensorOptions(t).device(Device::cuda()));
    b.copy_(d.select(0, 7));
    EXPECT_SAME(b.cpu(), x.select(0, 7).expand({5, 48}));
    // A source that partly overlaps the target (a shift within one buffer)
    // is refused as PyTorch refuses it, on the device as on the CPU, and
    // the target is left as it was; a clone of it copies.
    Tensor y = x.clone();
    Tensor dy = y.to(Device::cuda());
    EXPECT_KILN_ERROR(dy.narrow(0, 1, 63).copy_(dy.narrow(0, 0, 63)), "partly overlaps input 0");
    EXPECT_SAME(dy.cpu(), y);
    dy.narrow(0, 1, 63).copy_(dy.narrow(0, 0, 63).clone());
    y.narrow(0, 1, 63).copy_(y.narrow(0, 0, 63).clone());
    EXPECT_SAME(dy.cpu(), y);
  }
}

// Dtype changes and layouts beyond the 2-D copy plan run the generated copy
// kernel (Note [Device copies through generated kernels]).
TEST(CudaCopy, DeviceToDeviceConversionsAndLayouts) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  const DType all[] = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64,
                       kInt32,   kInt16,   kInt8,     kUInt8,   kBool};
  for (DType from : all) {
    Tensor x = random_tensor({12, 10}, from, "strided", 51);
    Tensor dx = x.to(Device::cuda());
    for (DType to : all) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      Tensor expected = empty({10, 12}, to);
      expected.copy_(x.t());
      Tensor got = empty({10, 12}, TensorOptions(to).device(Device::cuda()));
      got.copy_(dx.t());
      EXPECT_SAME(got.cpu(), expected);
      EXPECT_SAME(dx.to(to).cpu(), x.to(to));
    }
  }
  Tensor cube = random_tensor({64, 64, 64}, kFloat32, "contiguous", 52);
  Tensor dcube = cube.to(Device::cuda());
  EXPECT_SAME(dcube.permute({2, 1, 0}).contiguous().cpu(), cube.permute({2, 1, 0}).contiguous());
  // Across devices with a conversion, where there are two.
  if (kiln::cuda::device_count() > 1) {
    Tensor x = random_tensor({12, 10}, kFloat32, "strided", 53);
    Tensor other = empty({12, 10}, TensorOptions(kFloat16).device(Device::cuda(1)));
    other.copy_(x.to(Device::cuda()));
    EXPECT_SAME(other.cpu(), x.to(kFloat16));
  }
}

TEST(CudaFill, EveryDtypeAndLayout) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  for (DType t : kAllDTypes) {
    for (double v : {0.0, 1.0, -2.5, 3.0, -0.0}) {
      if (!is_floating(t) && v != static_cast<int64_t>(v)) continue;
      if (t == kUInt8 && v < 0) continue;
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(v));
      Scalar s = t == kBool       ? Scalar(v != 0)
                 : is_floating(t) ? Scalar(v)
                                  : Scalar(static_cast<int64_t>(v));
      Tensor ref = random_tensor({6, 70000}, t, "contiguous", 61);
      Tensor dev = ref.to(Device::cuda());
      dev.fill_(s);  // dense: memset or pattern doubling
      ref.fill_(s);
      EXPECT_SAME(dev.cpu(), ref);
      Tensor ref2 = random_tensor({6, 9}, t, "contiguous", 62);
      Tensor dev2 = ref2.to(Device::cuda());
      dev2.slice(1, 1, 9, 2).fill_(s);  // with gaps: through a dense temporary
      ref2.slice(1, 1, 9, 2).fill_(s);
      EXPECT_SAME(dev2.cpu(), ref2);
    }
  }
  Tensor f = full({3, 5}, 7.25, TensorOptions(kFloat32).device(Device::cuda()));
  EXPECT_SAME(f.cpu(), full({3, 5}, 7.25, kFloat32));
  EXPECT_SAME(ones({4}, TensorOptions(kInt64).device(Device::cuda())).cpu(), ones({4}, kInt64));
  EXPECT_SAME(zeros({0, 4}, TensorOptions(kFloat16).device(Device::cuda())).cpu(),
              zeros({0, 4}, kFloat16));
}

TEST(CudaCopy, PinnedAsyncRoundTrip) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA();
  Tensor x = random_tensor({1024, 257}, kFloat32, "contiguous", 71);
  EXPECT_FALSE(cuda::is_pinned(x));
  Tensor p = cuda::pin_memory(x);
  EXPECT_TRUE(cuda::is_pinned(p));
  EXPECT_SAME(p, x);
  Tensor d = empty({1024, 257}, TensorOptions(kFloat32).device(Device::cuda()));
  copy_(d, p, /*non_blocking=*/true);
  Tensor out = cuda::pin_memory(zeros({1024, 257}));
  copy_(out, d, /*non_blocking=*/true);
  cuda::Stream::current().synchronize();
  EXPECT_SAME(out, x);
  // Many small async copies through staging buffers reused behind events.
  Tensor acc = zeros({257}, TensorOptions(kFloat32).device(Device::cuda()));
  for (int i = 0; i < 200; ++i) {
    Tensor row = x.select(0, i);
    acc.copy_(row);  // pageable source: staged, returns before the DMA
    EXPECT_EQ(acc.select(0, 100).item().to<float>(), row.select(0, 100).item().to<float>());
  }
  EXPECT_THROW(cuda::pin_memory(d), Error);
}

TEST(CudaCopy, AcrossDevices) {
  kiln::EagerGuard eager;  // runtime behaviour, run at once
  KILN_REQUIRE_CUDA_DEVICES(2);
  for (const char* layout : kLayouts) {
    Tensor x = random_tensor({37, 45}, kFloat32, layout, 81);
    Tensor a = x.to(Device::cuda(0));
    Tensor b = a.to(Device::cuda(1));
    EXPECT_EQ(b.device(), Device::cuda(1));
    EXPECT_SAME(b.cpu(), x);
    Tensor c = empty({45, 37}, TensorOptions(kFloat32).device(Device::cuda(0)));
    c.copy_(b.t());
    EXPECT_SAME(c.cpu(), x.t());
  }
}

}  // namespace
}  // namespace kiln
