// arange, linspace and eye with a CUDA device.
//
// Note [CUDA range factories]
// Their values are those of PyTorch 1.13's CPU kernels bit for bit (Note in
// runtime/cpu/range.cpp: lanes, halves, truncation), which a generated kernel
// would have to restate; the CPU kernel computes them instead and one copy
// moves them over. The same kernel gives shapes, dtypes and errors.

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"

namespace kiln::jit::cuda {
namespace {

using OptD = std::optional<DType>;
using OptDev = std::optional<Device>;

Tensor on(const Tensor& host, OptDev device) {
  return host.to(device.value_or(Device::cuda()));
}

Tensor arange_start_step(const Scalar& start, const Scalar& end, const Scalar& step, OptD dtype,
                         OptDev device) {
  static const TypedOp<Tensor(const Scalar&, const Scalar&, const Scalar&, OptD, OptDev)> op(
      "arange.start_step");
  return on(op(start, end, step, dtype, Device::cpu()), device);
}

Tensor arange_end(const Scalar& end, OptD dtype, OptDev device) {
  static const TypedOp<Tensor(const Scalar&, OptD, OptDev)> op("arange");
  return on(op(end, dtype, Device::cpu()), device);
}

Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, OptD dtype, OptDev device) {
  static const TypedOp<Tensor(const Scalar&, const Scalar&, int64_t, OptD, OptDev)> op("linspace");
  return on(op(start, end, steps, dtype, Device::cpu()), device);
}

Tensor eye(int64_t n, OptD dtype, OptDev device) {
  static const TypedOp<Tensor(int64_t, OptD, OptDev)> op("eye");
  return on(op(n, dtype, Device::cpu()), device);
}

Tensor eye_m(int64_t n, int64_t m, OptD dtype, OptDev device) {
  static const TypedOp<Tensor(int64_t, int64_t, OptD, OptDev)> op("eye.m");
  return on(op(n, m, dtype, Device::cpu()), device);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("arange", &arange_end);
  m.impl("arange.start_step", &arange_start_step);
  m.impl("linspace", &linspace);
  m.impl("eye", &eye);
  m.impl("eye.m", &eye_m);
}

}  // namespace kiln::jit::cuda
