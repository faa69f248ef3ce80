#include "tests/support/cuda_test_util.h"

namespace kiln::testing {

Tensor to_cuda(const Tensor& x) {
  if (!x.defined()) return x;
  if (x.numel() == 0) return x.to(Device::cuda());
  int64_t span = x.storage_offset() + 1;
  for (int64_t d = 0; d < x.dim(); ++d) span += (x.size(d) - 1) * x.stride(d);
  Tensor flat = x.as_strided({span}, {1}, 0).to(Device::cuda());
  return flat.as_strided(x.sizes(), x.strides(), x.storage_offset());
}

std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

::testing::AssertionResult cuda_error_matches_cpu(
    const std::function<Tensor(const OnDevice&)>& op) {
  const std::string cpu = error_message([&] { op([](const Tensor& t) { return t; }); });
  const std::string gpu = error_message([&] { op(&to_cuda); });
  if (cpu == "no error") return ::testing::AssertionFailure() << "the CPU run raised no error";
  if (gpu != cpu) {
    return ::testing::AssertionFailure() << "CUDA: " << gpu << "\n  CPU: " << cpu;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::testing
