// rand, randn, randint: Philox streams (Note [Philox streams]) and manual_seed;
// dropout and multinomial, drawn from rand.

#include <atomic>
#include <cmath>
#include <limits>
#include <utility>

#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/core/philox.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cpu/parallel.h"

namespace kiln {

namespace {
std::atomic<uint64_t> g_seed{67280421310721ull};
std::atomic<uint64_t> g_offset{0};
}  // namespace

void manual_seed(uint64_t seed) {
  g_seed.store(seed);
  g_offset.store(0);
}

RandomState next_random_state() {
  return RandomState{g_seed.load(), g_offset.fetch_add(1)};
}

namespace {

using OptD = std::optional<DType>;
using OptDev = std::optional<Device>;

constexpr double kTwoPi = 6.283185307179586476925286766559;

template <class T>
double uniform_at(const RandomState& s, int64_t i) {
  if constexpr (std::is_same_v<T, double>) {
    Philox4 r = philox4x32(s.seed, static_cast<uint64_t>(i) / 2, s.offset);
    int lane = 2 * static_cast<int>(i % 2);
    uint64_t bits = (static_cast<uint64_t>(r.v[lane]) << 21) ^ (r.v[lane + 1] >> 11);
    return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 0x1p-53;
  } else {
    Philox4 r = philox4x32(s.seed, static_cast<uint64_t>(i) / 4, s.offset);
    uint32_t w = r.v[i % 4];
    if constexpr (std::is_same_v<T, Half>) return static_cast<double>(w >> 21) * 0x1p-11;
    if constexpr (std::is_same_v<T, BFloat16>) return static_cast<double>(w >> 24) * 0x1p-8;
    return static_cast<double>(w >> 8) * 0x1p-24;
  }
}

double normal_at(const RandomState& s, int64_t i) {
  Philox4 r = philox4x32(s.seed, static_cast<uint64_t>(i) / 2, s.offset);
  int lane = 2 * static_cast<int>(i % 2);
  double u1 = (static_cast<double>(r.v[lane] >> 8) + 1.0) * 0x1p-24;  // (0, 1]
  double u2 = static_cast<double>(r.v[lane + 1] >> 8) * 0x1p-24;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

uint64_t bits64_at(const RandomState& s, int64_t i) {
  Philox4 r = philox4x32(s.seed, static_cast<uint64_t>(i) / 2, s.offset);
  int lane = 2 * static_cast<int>(i % 2);
  return (static_cast<uint64_t>(r.v[lane]) << 32) | r.v[lane + 1];
}

// The dtypes and ranges each op takes; its CPU and Meta kernels both check
// them, so that a recorded call (a compiled function's trace: Note [Random
// ops run at the call]) raises where eager mode does.
DType floating_dtype(OptD dtype, const char* op) {
  const DType t = dtype.value_or(kFloat32);
  KILN_CHECK(is_floating(t), "[", op, "] expected a floating dtype, got ", t);
  return t;
}
// The values every element of `t` can hold exactly as an integer range
// ends, as PyTorch's random_ checks 'from' and 'to - 1': int64's and the
// wide floats' cover every int64.
std::pair<int64_t, int64_t> randint_bounds(DType t) {
  switch (t) {
    case kBool:
      return {0, 1};
    case kUInt8:
      return {0, 255};
    case kInt8:
      return {-128, 127};
    case kInt16:
      return {-32768, 32767};
    case kInt32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case kFloat16:
      return {-65504, 65504};
    default:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

DType randint_dtype(int64_t low, int64_t high, OptD dtype) {
  KILN_CHECK(high > low, "[randint] expected low < high, got low=", low, " high=", high);
  const DType t = dtype.value_or(kInt64);
  // Values are in [low, high): both ends must fit the dtype, or values wrap.
  // bool takes [0, 2) or within it, as PyTorch 1.13's random_ does.
  const auto [lo, hi] = randint_bounds(t);
  KILN_CHECK(low >= lo, "[randint] expected low >= ", lo, " for ", t, ", got ", low);
  KILN_CHECK(high - 1 <= hi, "[randint] expected high <= ", hi + 1, " for ", t, ", got ", high);
  return t;
}

Tensor random_output(IntArrayRef size, DType dtype, OptDev device, const char* op) {
  Device d = device.value_or(Device::cpu());
  KILN_CHECK(d.is_cpu(), "[", op, "] expected a cpu device for this kernel, got ", d);
  return empty_tensor(size, dtype, d, op);
}

Tensor rand_cpu(IntArrayRef size, OptD dtype, OptDev device) {
  const DType t = floating_dtype(dtype, "rand");
  Tensor out = random_output(size, t, device, "rand");
  RandomState s = next_random_state();
  visit_dtype(t, kFloatingMask, "rand", [&]<class T>() {
    T* p = out.data_ptr<T>();
    cpu::parallel_range(out.numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = static_cast<T>(uniform_at<T>(s, i));
    });
  });
  return out;
}

Tensor randn_cpu(IntArrayRef size, OptD dtype, OptDev device) {
  const DType t = floating_dtype(dtype, "randn");
  Tensor out = random_output(size, t, device, "randn");
  RandomState s = next_random_state();
  visit_dtype(t, kFloatingMask, "randn", [&]<class T>() {
    T* p = out.data_ptr<T>();
    cpu::parallel_range(out.numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = static_cast<T>(static_cast<float>(normal_at(s, i)));
    });
  });
  return out;
}

Tensor randint_low_cpu(int64_t low, int64_t high, IntArrayRef size, OptD dtype, OptDev device) {
  const DType t = randint_dtype(low, high, dtype);
  Tensor out = random_output(size, t, device, "randint");
  RandomState s = next_random_state();
  uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  visit_dtype(t, kAllMask, "randint", [&]<class T>() {
    T* p = out.data_ptr<T>();
    cpu::parallel_range(out.numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        // In unsigned arithmetic: low + offset may pass through the int64 ends.
        int64_t v = static_cast<int64_t>(static_cast<uint64_t>(low) + bits64_at(s, i) % range);
        if constexpr (std::is_same_v<T, bool>) {
          p[i] = v != 0;
        } else {
          p[i] = static_cast<T>(static_cast<opmath_t<T>>(v));
        }
      }
    });
  });
  return out;
}

Tensor randint_cpu(int64_t high, IntArrayRef size, OptD dtype, OptDev device) {
  return randint_low_cpu(0, high, size, dtype, device);
}

Tensor rand_meta(IntArrayRef size, OptD dtype, OptDev) {
  return empty_tensor(size, floating_dtype(dtype, "rand"), Device::meta(), "rand");
}
Tensor randn_meta(IntArrayRef size, OptD dtype, OptDev) {
  return empty_tensor(size, floating_dtype(dtype, "randn"), Device::meta(), "randn");
}
Tensor randint_low_meta(int64_t low, int64_t high, IntArrayRef size, OptD dtype, OptDev) {
  return empty_tensor(size, randint_dtype(low, high, dtype), Device::meta(), "randint");
}
Tensor randint_meta(int64_t high, IntArrayRef size, OptD dtype, OptDev device) {
  return randint_low_meta(0, high, size, dtype, device);
}

// Note [Dropout]
// dropout is a Composite of ops kiln has, as PyTorch's CPU path is: p is
// checked first (also when train is false); then input itself where nothing
// is dropped (train false, p 0, no elements), input * 0 for p 1 (NaN and inf
// stay NaN, as PyTorch's), else input * (keep / (1 - p)) with keep drawn as
// rand() < 1 - p. rand draws at the call (Note [Random ops run at the call]),
// so a compiled function draws a fresh mask on every call; the product is
// recorded and fuses. The uniform numbers are float32 (float64 for a float64
// input), whatever input's dtype, so p keeps its resolution for 16-bit
// inputs. rand has a CPU kernel only: a CUDA input's mask is drawn on the
// host and copied over (under graph replay, a host copy: README, Compiled
// functions). The mask is kiln's Philox stream, not PyTorch's generator:
// the same seed draws other masks than PyTorch's.
Tensor dropout_kernel(const Tensor& input, double p, bool train) {
  check_defined(input, "dropout", "input");
  KILN_CHECK(p >= 0 && p <= 1, "[dropout] expected p in [0, 1], got ", p);
  if (!train || p == 0 || input.numel() == 0) return input;
  if (p == 1) return kiln::mul(input, kiln::zeros({}, TensorOptions(input.dtype())));
  KILN_CHECK(is_floating(input.dtype()), "[dropout] expected a floating input when train is true ",
             "and p is in (0, 1), got ", input.dtype());
  const DType udt = input.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Device d = input.device();
  Tensor u = kiln::rand(input.sizes(), TensorOptions(udt).device(d.is_cuda() ? Device::cpu() : d));
  if (d.is_cuda()) u = u.to(d);
  Tensor keep = kiln::lt(u, Scalar(1.0 - p)).to(input.dtype());
  return kiln::mul(input, kiln::div(keep, Scalar(1.0 - p)));
}

// Note [multinomial]
// A composite of ops every device and mode has, drawing from rand at the
// call (Note [Random ops run at the call]): a compiled function draws fresh
// samples on every call. Without replacement, each row keeps the
// num_samples largest of p / e, e ~ Exp(1) drawn per category: the order in
// which a weighted draw without replacement would pick them (the exponential
// race). With replacement, each sample is the first category whose running
// sum of weights reaches (1 - u) * total, u ~ U[0, 1): a search of the
// cumulative sums (a count of those below it on CUDA, where searchsorted has
// no kernel). Weights are checked as PyTorch checks them, by reading on the
// host: a flush in lazy mode, a graph break in a compiled function (README).
// The samples are kiln's Philox stream, not PyTorch's generator: the same
// seed draws other samples; their distribution is the same.
Tensor multinomial_kernel(const Tensor& self, int64_t num_samples, bool replacement) {
  const char* op = "multinomial";
  check_defined(self, op, "self");
  KILN_CHECK(self.dim() == 1 || self.dim() == 2, "[multinomial] expected 1-D or 2-D ",
             "probabilities, got ", self.dim(), " dims (sizes ", self.sizes(), ")");
  KILN_CHECK(is_floating(self.dtype()), "[multinomial] expected floating probabilities, got ",
             self.dtype());
  KILN_CHECK(num_samples > 0, "[multinomial] expected num_samples > 0, got ", num_samples);
  const int64_t k = self.size(-1);
  KILN_CHECK(replacement || num_samples <= k, "[multinomial] expected num_samples <= ", k,
             " (the categories) without replacement, got ", num_samples);
  KILN_CHECK(k <= (int64_t{1} << 24), "[multinomial] expected at most 2^24 categories, got ", k);
  const Device d = self.device();
  const int64_t rows = self.dim() == 2 ? self.size(0) : 1;
  DimVector out_shape(self.sizes());
  out_shape.back() = num_samples;
  if (rows == 0) return kiln::empty(out_shape, TensorOptions(kInt64).device(d));
  const DType wdt = self.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor p = self.to(wdt).reshape({rows, k});
  const bool bad = kiln::any(kiln::logical_not(kiln::logical_and(kiln::ge(p, Scalar(0.0)),
                                                                 kiln::lt(p, Scalar(INFINITY)))))
                       .item<bool>();
  KILN_CHECK(!bad, "[multinomial] expected probabilities that are finite and >= 0, got a ",
             "negative, inf or NaN one");
  const bool zero_row = kiln::any(kiln::eq(kiln::sum(p, {1}), Scalar(0.0))).item<bool>();
  KILN_CHECK(!zero_row, "[multinomial] expected each row of probabilities to sum to more than 0, ",
             "got a row of zeros");
  if (!replacement) {
    // Categories of probability 0 are never drawn: a row needs num_samples others.
    const int64_t fewest =
        kiln::min(kiln::sum(kiln::gt(p, Scalar(0.0)), {1}, false, kInt64)).item<int64_t>();
    KILN_CHECK(fewest >= num_samples, "[multinomial] expected at least num_samples (", num_samples,
               ") categories of probability > 0 in each row without replacement, got a row with ",
               fewest);
  }
  // Uniform numbers on the host for a CUDA input, as dropout's (rand has a
  // CPU kernel only).
  auto uniform = [&](IntArrayRef size) {
    Tensor u = kiln::rand(size, TensorOptions(wdt));
    return d.is_cuda() ? u.to(d) : u;
  };
  Tensor idx;
  if (!replacement) {
    // e = -log(1 - u) > 0 except for u = 0, where p / 0 is inf: first pick.
    Tensor e = kiln::neg(kiln::log1p(kiln::neg(uniform({rows, k}))));
    Tensor keys = kiln::where(kiln::gt(p, Scalar(0.0)), kiln::div(p, e), Scalar(0.0));
    idx = std::get<1>(kiln::topk(keys, num_samples, -1));
  } else {
    // t = (1 - u) * total is in (0, total], and the first running sum >= t
    // is a category of weight > 0 (even where the product rounds).
    Tensor cdf = kiln::cumsum(p, 1);
    Tensor target = kiln::mul(kiln::add(kiln::neg(uniform({rows, num_samples})), Scalar(1.0)),
                              cdf.narrow(1, k - 1, 1));
    if (d.is_cuda()) {
      idx = kiln::sum(kiln::lt(cdf.unsqueeze(1), target.unsqueeze(2)), {2}, false, kInt64);
    } else {
      idx = kiln::searchsorted(cdf, target);
    }
  }
  return idx.reshape(out_shape);
}
}  // namespace

KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("dropout", &dropout_kernel);
  m.impl("multinomial", &multinomial_kernel);
}

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("rand", &rand_cpu);
  m.impl("randn", &randn_cpu);
  m.impl("randint", &randint_cpu);
  m.impl("randint.low", &randint_low_cpu);
}

KILN_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("rand", &rand_meta);
  m.impl("randn", &randn_meta);
  m.impl("randint", &randint_meta);
  m.impl("randint.low", &randint_low_meta);
}

}  // namespace kiln
