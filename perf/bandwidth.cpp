// kiln-bandwidth: how close generated pointwise kernels come to the device's
// copy bandwidth (issue goal: >= 85% at 64Mi fp32 on a GPU).
//
//   kiln-bandwidth [--device cpu|cuda] [--size ELEMENTS] [--iters N]
//
// Rows, each one tensor of `size` elements in and one out:
//   copy         y.copy_(x), float32: the device's own copy (cudaMemcpyAsync on CUDA)
//   copy f16     the same on float16, half the bytes: the reference for the
//                16-bit rows, whose fixed cost per call weighs twice as much
//   axpy8        x*1.0001 + 0.5, four times, float32: one fused kernel, memory-bound
//   chain16      the chain16 workload, float32: one fused kernel with 8 sigmoid/tanh
//   axpy8 f16    axpy8 on float16 (16-byte vectors of 8 elements)
//   axpy8 bf16   the same on bfloat16
//   merge f16    [1, 12, S, 64] -> [1, S, 12 * 64] (GPT-2's merge of heads), float16:
//                a copy dense only along the innermost dim (Note [CUDA pointwise
//                kernel shape])
//   bias f16     x[S, 768] + b[768], float16: a row broadcast
// Each fused row runs twice: lazily (the trace recorded and fused at every
// call, whose host time the wall time includes) and, as "(compiled)", through
// jit::compile (a guard check and one launch per call), which is how a server
// calls its kernels. Bandwidth counts bytes read + written once over the
// median wall time of one call including a device synchronize; "% of copy"
// compares GB/s with copy's.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "perf/workloads.h"

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

struct Row {
  const char* name;
  double us;
  double bytes;
  bool compiled = false;
};

int run(const std::string& device, int64_t size, int iters) {
  const bool gpu = device == "cuda" || (device == "auto" && kiln::cuda::is_available());
  KILN_CHECK(!gpu || kiln::cuda::is_available(),
             "[kiln-bandwidth] expected a CUDA device for --device cuda, got none");
  const kiln::Device dev = gpu ? kiln::Device::cuda() : kiln::Device::cpu();
  Tensor x = kiln::randn({size}).to(dev);
  Tensor y = kiln::empty({size}, kiln::TensorOptions(kiln::kFloat32).device(dev));
  // float16 operands: the merge and the broadcast use size rounded down to whole rows.
  const int64_t rows = std::max<int64_t>(1, size / 768);
  Tensor h = kiln::randn({size}).to(dev, kiln::kFloat16);
  Tensor hbf = kiln::randn({size}).to(dev, kiln::kBFloat16);
  Tensor hy = kiln::empty({size}, kiln::TensorOptions(kiln::kFloat16).device(dev));
  Tensor heads = kiln::randn({1, 12, rows, 64}).to(dev, kiln::kFloat16);
  Tensor hx = kiln::randn({rows, 768}).to(dev, kiln::kFloat16);
  Tensor hb = kiln::randn({768}).to(dev, kiln::kFloat16);
  kiln::sync();
  const double n = static_cast<double>(size), nr = static_cast<double>(rows * 768);
  Tensor keep;
  // The fused rows, each once lazily and once compiled.
  struct Case {
    const char* name;
    std::function<Tensor()> fn;
    double bytes;
  };
  const std::vector<Case> fused = {
      {"axpy8", [&] { return axpy8(x); }, 8 * n},
      {"chain16", [&] { return kiln::perf::chain16(x); }, 8 * n},
      {"axpy8 f16", [&] { return axpy8(h); }, 4 * n},
      {"axpy8 bf16", [&] { return axpy8(hbf); }, 4 * n},
      {"merge f16",
       [&] {
         return heads.transpose(1, 2).reshape({1, rows, 768});
       },
       4 * nr},
      {"bias f16", [&] { return hx + hb; }, 4 * nr + 2 * 768},
  };
  std::vector<Row> out = {
      {"copy",
       median_us(
           [&] {
             kiln::EagerGuard eager;
             y.copy_(x);
           },
           iters),
       8 * n},
      {"copy f16",
       median_us(
           [&] {
             kiln::EagerGuard eager;
             hy.copy_(h);
           },
           iters),
       4 * n},
  };
  for (const Case& c : fused)
    out.push_back({c.name, median_us([&] { keep = c.fn(); }, iters), c.bytes});
  for (const Case& c : fused) {
    auto f =
        kiln::jit::compile([&c] { return c.fn(); }, {.name = std::string("bandwidth ") + c.name});
    out.push_back({c.name, median_us([&] { keep = f(); }, iters), c.bytes, true});
  }
  std::printf("kiln-bandwidth on %s, %lld elements, median of %d\n",
              gpu ? kiln::cuda::device_name().c_str() : "cpu", static_cast<long long>(size), iters);
  std::printf("%-20s %10s %10s %12s %14s\n", "row", "us", "GB/s", "% of copy", "% of copy f16");
  const double copy_gbps = out[0].bytes / out[0].us / 1e3;
  const double copy16_gbps = out[1].bytes / out[1].us / 1e3;
  for (const Row& r : out) {
    const double gbps = r.bytes / r.us / 1e3;
    const std::string name = std::string(r.name) + (r.compiled ? " (compiled)" : "");
    std::printf("%-20s %10.1f %10.1f %11.1f%% %13.1f%%\n", name.c_str(), r.us, gbps,
                100.0 * gbps / copy_gbps, 100.0 * gbps / copy16_gbps);
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
    bool ok = true;
    try {
      if (a == "--device" && i + 1 < argc) {
        device = argv[++i];
      } else if (a == "--size" && i + 1 < argc) {
        size = std::stoll(argv[++i]);
        ok = size > 0;
      } else if (a == "--iters" && i + 1 < argc) {
        iters = std::stoi(argv[++i]);
        ok = iters > 0;
      } else {
        ok = false;
      }
    } catch (const std::exception&) {  // not a number
      ok = false;
    }
    if (!ok) {
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
