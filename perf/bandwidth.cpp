// kiln-bandwidth: how close generated pointwise kernels come to the device's
// copy bandwidth (issue goal: >= 85% at 64Mi fp32 on a GPU).
//
//   kiln-bandwidth [--device cpu|cuda] [--size ELEMENTS] [--iters N]
//
// Rows, each one tensor of `size` float32 in and one out:
//   copy     y.copy_(x): the device's own copy (cudaMemcpyAsync on CUDA)
//   axpy8    x*1.0001 + 0.5, four times: one fused kernel, memory-bound
//   chain16  the chain16 workload: one fused kernel with 8 sigmoid/tanh
// Bandwidth counts bytes read + written once (2 * 4 * size) over the median
// wall time of one call including a device synchronize.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace {

using kiln::Tensor;

double median_us(const std::function<void()>& step, int iters) {
  for (int i = 0; i < 5; ++i) step();
  kiln::sync();
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    kiln::sync();
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

Tensor axpy8(const Tensor& x0) {
  Tensor x = x0;
  for (int i = 0; i < 4; ++i) x = x * 1.0001 + 0.5;
  return x;
}

Tensor chain16(const Tensor& x0) {
  Tensor x = x0;
  for (int i = 0; i < 4; ++i) {
    x = kiln::sigmoid(x * 1.0001 + 0.5);
    x = kiln::tanh(x - 0.25);
  }
  return x;
}

int run(const std::string& device, int64_t size, int iters) {
  const bool gpu = device == "cuda" || (device == "auto" && kiln::cuda::is_available());
  KILN_CHECK(!gpu || kiln::cuda::is_available(),
             "[kiln-bandwidth] expected a CUDA device for --device cuda, got none");
  const kiln::Device dev = gpu ? kiln::Device::cuda() : kiln::Device::cpu();
  Tensor x = kiln::randn({size}).to(dev);
  Tensor y = kiln::empty({size}, kiln::TensorOptions(kiln::kFloat32).device(dev));
  kiln::sync();
  const double bytes = 2.0 * 4.0 * static_cast<double>(size);
  Tensor keep;
  const double copy_us = median_us(
      [&] {
        kiln::EagerGuard eager;
        y.copy_(x);
      },
      iters);
  const double axpy_us = median_us([&] { keep = axpy8(x); }, iters);
  const double chain_us = median_us([&] { keep = chain16(x); }, iters);
  std::printf("kiln-bandwidth on %s, %lld float32, median of %d\n",
              gpu ? kiln::cuda::device_name().c_str() : "cpu", static_cast<long long>(size), iters);
  std::printf("%-8s %10s %10s %12s\n", "row", "us", "GB/s", "% of copy");
  for (auto [name, us] : {std::pair<const char*, double>{"copy", copy_us},
                          {"axpy8", axpy_us},
                          {"chain16", chain_us}}) {
    std::printf("%-8s %10.1f %10.1f %11.1f%%\n", name, us, bytes / us / 1e3, 100.0 * copy_us / us);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "auto";
  int64_t size = int64_t{64} << 20;
  int iters = 50;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else if (a == "--size" && i + 1 < argc) {
      size = std::stoll(argv[++i]);
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::stoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: kiln-bandwidth [--device cpu|cuda] [--size N] [--iters N]\n");
      return 2;
    }
  }
  try {
    return run(device, size, iters);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln-bandwidth: %s\n", e.what());
    return 1;
  }
}
