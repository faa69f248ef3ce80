// arange, linspace and eye with a CUDA device.
//
// Note [CUDA range factories]
// Their values are those of PyTorch 1.13's CPU kernels bit for bit (Note in
// runtime/cpu/range.cpp: lanes, halves, truncation), which a generated kernel
// would have to restate; the CPU kernel computes them instead and one copy
// moves them over. The same kernel gives shapes, dtypes and errors.
// The device values are kept per (op, arguments, device), so a repeat (a
// mask built with arange in every decode step) is a device to device copy:
// fast, and capturable into a CUDA graph, which a host copy is not (Note
// [Host copies under capture]). Kept: up to 256 results, 64 MiB in all.

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"

// GCC 12 warns falsely on std::string concatenation at -O3.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

using OptD = std::optional<DType>;
using OptDev = std::optional<Device>;

struct RangeCache {
  std::mutex mu;
  std::unordered_map<std::string, Tensor> values;
  size_t bytes = 0;
};

RangeCache& range_cache() {
  static auto* c = new RangeCache();  // leaked: captured graphs may read it until exit
  return *c;
}

constexpr size_t kMaxValues = 256;
constexpr size_t kMaxBytes = size_t{64} << 20;

// The range `make` computes on the CPU, on `device`: a fresh copy of the kept
// device values when they are kept.
template <class Make>
Tensor on(const std::string& key, OptDev device, Make make) {
  const Device d = device.value_or(Device::cuda());
  const std::string full = key + "@" + d.str();
  RangeCache& c = range_cache();
  Tensor kept;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.values.find(full);
    if (it != c.values.end()) kept = it->second;
  }
  if (!kept.defined()) {
    Tensor host = make();
    kept = host.to(d);
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.values.size() >= kMaxValues || c.bytes + kept.nbytes() > kMaxBytes) return kept;
    c.bytes += kept.nbytes();
    c.values.emplace(full, kept);
  }
  Tensor out = empty_tensor(kept.sizes(), kept.dtype(), d);
  out.copy_(kept);
  return out;
}

// The arguments exactly: kind and bits of each number, and the dtype.
std::string scalars(std::initializer_list<Scalar> v, OptD dtype) {
  std::string s;
  for (const Scalar& x : v) {
    int64_t bits = x.to_int();
    if (x.is_floating_point()) {
      const double d = x.to_double();
      std::memcpy(&bits, &d, sizeof bits);
    }
    s += (x.is_floating_point() ? "f" : x.is_bool() ? "b" : "i") + std::to_string(bits) + ",";
  }
  return s + (dtype ? dtype_name(*dtype) : "default");
}

Tensor arange_start_step(const Scalar& start, const Scalar& end, const Scalar& step, OptD dtype,
                         OptDev device) {
  static const TypedOp<Tensor(const Scalar&, const Scalar&, const Scalar&, OptD, OptDev)> op(
      "arange.start_step");
  return on("arange.start_step " + scalars({start, end, step}, dtype), device,
            [&] { return op(start, end, step, dtype, Device::cpu()); });
}

Tensor arange_end(const Scalar& end, OptD dtype, OptDev device) {
  static const TypedOp<Tensor(const Scalar&, OptD, OptDev)> op("arange");
  return on("arange " + scalars({end}, dtype), device,
            [&] { return op(end, dtype, Device::cpu()); });
}

Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, OptD dtype, OptDev device) {
  static const TypedOp<Tensor(const Scalar&, const Scalar&, int64_t, OptD, OptDev)> op("linspace");
  return on("linspace " + scalars({start, end, Scalar(steps)}, dtype), device,
            [&] { return op(start, end, steps, dtype, Device::cpu()); });
}

Tensor eye(int64_t n, OptD dtype, OptDev device) {
  static const TypedOp<Tensor(int64_t, OptD, OptDev)> op("eye");
  return on("eye " + scalars({Scalar(n)}, dtype), device,
            [&] { return op(n, dtype, Device::cpu()); });
}

Tensor eye_m(int64_t n, int64_t m, OptD dtype, OptDev device) {
  static const TypedOp<Tensor(int64_t, int64_t, OptD, OptDev)> op("eye.m");
  return on("eye.m " + scalars({Scalar(n), Scalar(m)}, dtype), device,
            [&] { return op(n, m, dtype, Device::cpu()); });
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
