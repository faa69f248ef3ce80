// arange, linspace and eye: factories whose CPU kernels write the values
// directly. The same functions are registered for Meta, where they stop after
// the size and dtype rules.

#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>

#include "kiln/dispatch.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/cpu/index_utils.h"

namespace kiln::cpu {
namespace {

using OptD = std::optional<DType>;
using OptDev = std::optional<Device>;

// Note [Range values as PyTorch computes them]
// arange and linspace reproduce the values of PyTorch 1.13's CPU kernels bit
// for bit (its AVX2 build, one thread). Those kernels fill a contiguous output
// in blocks of two 32-byte vectors while a whole block fits, then one element
// at a time. A single element is an expression in one index; a vector lane is
// its vector's first element plus lane * step, computed in other arithmetic
// (and, for linspace, from the half its first element lies in). The fill
// below follows the same block structure with the same expressions:
//   - fused multiply-adds where PyTorch's compiled scalar code has them;
//   - 16-bit floats rounded after every operation, as c10::Half arithmetic does;
//   - integer linspace truncating a double, lanes offset from the truncated base.
// Outputs past one parallel grain (32768 elements) are filled as one block run;
// PyTorch run on several threads restarts the block pattern per thread.

// T's lanes per 32-byte vector.
template <class T>
constexpr int64_t kLanes = 32 / static_cast<int64_t>(sizeof(T));

// out[i] = element(i) outside vector blocks; lane(base_index, lane) inside.
template <class T, class Element, class Lane>
void fill_blocks(T* out, int64_t n, Element element, Lane lane) {
  constexpr int64_t v = kLanes<T>;
  int64_t i = 0;
  for (; i + 2 * v <= n; i += 2 * v) {
    for (int64_t half = 0; half < 2; ++half) {
      const int64_t base = i + half * v;
      for (int64_t k = 0; k < v; ++k) out[base + k] = lane(base, k);
    }
  }
  for (; i < n; ++i) out[i] = element(i);
}

template <class T>
constexpr bool kReduced = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// One c10-style 16-bit operation: computed in float, rounded to T.
template <class T>
T r16(float v) {
  return T(v);
}

// --- arange --------------------------------------------------------------------------

// A number converted as PyTorch's Scalar::to<acc>() does (checked).
template <class A>
A to_acc(const Scalar& s, DType as, const char* op) {
  check_convertible(s, as, op);
  return s.to<A>();
}

template <class T>
void arange_fill(T* out, int64_t n, const Scalar& start, const Scalar& step, const char* op) {
  if constexpr (std::is_integral_v<T>) {
    const int64_t s = to_acc<int64_t>(start, kInt64, op), d = to_acc<int64_t>(step, kInt64, op);
    // Wrapping int64 arithmetic, then truncation to T, as PyTorch's integer kernels.
    for (int64_t i = 0; i < n; ++i) {
      out[i] = static_cast<T>(static_cast<int64_t>(
          static_cast<uint64_t>(s) + static_cast<uint64_t>(d) * static_cast<uint64_t>(i)));
    }
  } else if constexpr (kReduced<T>) {
    const float s = to_acc<float>(start, kFloat32, op), d = to_acc<float>(step, kFloat32, op);
    auto element = [=](int64_t i) { return T(std::fma(d, static_cast<float>(i), s)); };
    auto lane = [=](int64_t base, int64_t k) {
      return T(std::fma(static_cast<float>(k), d, static_cast<float>(element(base))));
    };
    fill_blocks<T>(out, n, element, lane);
  } else {
    const double s = start.to_double(), d = step.to_double();
    auto element = [=](int64_t i) {
      return static_cast<T>(std::fma(d, static_cast<double>(i), s));
    };
    auto lane = [=](int64_t base, int64_t k) {
      return static_cast<T>(
          std::fma(static_cast<double>(k), d, static_cast<double>(element(base))));
    };
    fill_blocks<T>(out, n, element, lane);
  }
}

// The accumulation dtype the checks run in (PyTorch's CPU acc_type).
DType acc_dtype(DType t) {
  if (is_integral(t, false)) return kInt64;
  return is_reduced_float(t) ? kFloat32 : kFloat64;
}

Tensor arange_start_step(const Scalar& start, const Scalar& end, const Scalar& step, OptD dtype,
                         OptDev device) {
  const char* op = "arange";
  const bool integral =
      !start.is_floating_point() && !end.is_floating_point() && !step.is_floating_point();
  const DType t = dtype ? *dtype : integral ? kInt64 : kFloat32;
  KILN_CHECK(t != kBool, "[arange] expected a numeric dtype, got bool");
  const DType acc = acc_dtype(t);
  for (const Scalar* s : {&start, &end, &step}) check_convertible(*s, acc, op);
  // The bounds as the kernel sees them (integers truncated for integer dtypes).
  const Scalar xstart = acc == kInt64 ? Scalar(start.to_int()) : start;
  const Scalar xend = acc == kInt64 ? Scalar(end.to_int()) : end;
  const Scalar xstep = acc == kInt64 ? Scalar(step.to_int()) : step;
  const double ds = acc == kFloat32 ? static_cast<float>(xstart.to_double()) : xstart.to_double();
  const double de = acc == kFloat32 ? static_cast<float>(xend.to_double()) : xend.to_double();
  const double dd = acc == kFloat32 ? static_cast<float>(xstep.to_double()) : xstep.to_double();
  KILN_CHECK(dd > 0 || dd < 0, "[arange] expected a nonzero step, got ", step);
  KILN_CHECK(std::isfinite(ds) && std::isfinite(de), "[arange] expected finite bounds, got ", start,
             " -> ", end);
  KILN_CHECK((dd > 0 && de >= ds) || (dd < 0 && de <= ds),
             "[arange] expected a step whose sign leads from start to end, got start ", start,
             ", end ", end, ", step ", step);
  double size_d;
  if (t == kInt64) {
    const int64_t diff = static_cast<int64_t>(static_cast<uint64_t>(xend.to_int()) -
                                              static_cast<uint64_t>(xstart.to_int()));
    size_d = std::ceil(static_cast<double>(diff) / static_cast<double>(xstep.to_int()));
  } else {
    size_d = std::ceil((end.to_double() - start.to_double()) / step.to_double());
  }
  KILN_CHECK(size_d >= 0 && size_d <= static_cast<double>(std::numeric_limits<int64_t>::max()),
             "[arange] expected a size that fits int64, got ", size_d, " elements");
  const int64_t n = static_cast<int64_t>(size_d);
  checked_bytes_numel({n}, t, op);
  const Device dev = device.value_or(Device::cpu());
  Tensor out = empty_tensor({n}, t, dev);
  if (dev.is_meta() || n == 0) return out;
  visit_dtype(t, kAllMask & ~dtype_bit(kBool), op, [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      arange_fill<T>(static_cast<T*>(out.data_ptr()), n, xstart, xstep, op);
    }
  });
  return out;
}

Tensor arange_end(const Scalar& end, OptD dtype, OptDev device) {
  return arange_start_step(Scalar(int64_t{0}), end, Scalar(int64_t{1}), dtype, device);
}

// --- linspace ------------------------------------------------------------------------

// Note [Integer linspace in double]
// PyTorch interpolates integer linspace in double and truncates. An int64
// value may come out at 2^63, outside int64, where PyTorch 1.13 stores
// INT64_MIN (x86's answer to an out-of-range conversion; C++ leaves it
// undefined): at a bound of 2^63 - 512 or more, which rounds to 2^63, and,
// rarely, at a vector lane near such a bound, whose rounding errors add up
// past it. kiln refuses both: such bounds when the call is made
// (linspace_int64_bounds, which names them), a lane's value when it is
// computed. Every other value is PyTorch's, rounding included: the bounds
// become doubles first, so 2^62 + 1 reads as 2^62.
constexpr double kTwo63 = 9223372036854775808.0;

template <class T>
void linspace_fill(T* out, int64_t steps, const Scalar& start_s, const Scalar& end_s) {
  const int64_t half = steps / 2;
  if constexpr (std::is_integral_v<T>) {
    const T start = start_s.to<T>(), end = end_s.to<T>();
    const double step =
        (static_cast<double>(end) - static_cast<double>(start)) / static_cast<double>(steps - 1);
    int64_t outside = -1;  // the first index whose value int64 cannot hold
    double outside_value = 0;
    auto truncate = [&](double v, int64_t index) {
      if (KILN_UNLIKELY(!(v >= -kTwo63 && v < kTwo63))) {
        if (outside < 0) {
          outside = index;
          outside_value = v;
        }
        return T(0);
      }
      return static_cast<T>(static_cast<int64_t>(v));
    };
    auto element = [&](int64_t i) {
      return truncate(
          i < half ? std::fma(step, static_cast<double>(i), static_cast<double>(start))
                   : std::fma(-step, static_cast<double>(steps - i - 1), static_cast<double>(end)),
          i);
    };
    auto lane = [&](int64_t base, int64_t k) {
      const double kstep = static_cast<double>(k) * step;
      return truncate(static_cast<double>(element(base)) + kstep, base + k);
    };
    fill_blocks<T>(out, steps, element, lane);
    KILN_CHECK(outside < 0, "[linspace] expected values that fit int64, got ",
               std::setprecision(17), outside_value, " at index ", outside,
               " (interpolated in double from start ", start_s, " to end ", end_s, " in ", steps,
               " steps, as PyTorch does; it stores INT64_MIN there)");
  } else if constexpr (kReduced<T>) {
    const T start = r16<T>(static_cast<float>(start_s.to_double()));
    const T end = r16<T>(static_cast<float>(end_s.to_double()));
    const T count = r16<T>(static_cast<float>(steps - 1));
    const T step = r16<T>(float(r16<T>(float(end) - float(start))) / float(count));
    auto element = [=](int64_t i) {
      if (i < half) return r16<T>(float(start) + float(r16<T>(float(step) * float(T(float(i))))));
      return r16<T>(float(end) -
                    float(r16<T>(float(step) * float(T(static_cast<float>(steps - i - 1))))));
    };
    auto lane = [=](int64_t base, int64_t k) {
      const T kstep = r16<T>(float(T(static_cast<float>(k))) * float(step));
      return r16<T>(float(element(base)) + float(kstep));
    };
    fill_blocks<T>(out, steps, element, lane);
  } else {
    const T start = static_cast<T>(start_s.to_double()), end = static_cast<T>(end_s.to_double());
    const T step = (end - start) / static_cast<T>(steps - 1);
    auto element = [=](int64_t i) {
      return i < half ? std::fma(step, static_cast<T>(i), start)
                      : std::fma(-step, static_cast<T>(steps - i - 1), end);
    };
    auto lane = [=](int64_t base, int64_t k) {
      const T kstep = static_cast<T>(k) * step;
      return static_cast<T>(element(base) + kstep);
    };
    fill_blocks<T>(out, steps, element, lane);
  }
}

// Refuses int64 bounds that become 2^63 as doubles (Note [Integer linspace
// in double]); one step stores `start` as it is, with no arithmetic.
void linspace_int64_bounds(const Scalar& start, const Scalar& end, int64_t steps) {
  if (steps < 2) return;
  for (const auto& [name, bound] : {std::pair{"start", &start}, std::pair{"end", &end}}) {
    KILN_CHECK(static_cast<double>(bound->to<int64_t>()) < kTwo63,
               "[linspace] expected start and end below 2^63 - 512 for int64 (the values are "
               "computed in double, where larger ones round to 2^63), got ",
               name, " ", *bound);
  }
}

Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, OptD dtype, OptDev device) {
  const char* op = "linspace";
  KILN_CHECK(steps >= 0, "[linspace] expected a non-negative number of steps, got ", steps);
  const DType t = dtype.value_or(kFloat32);
  KILN_CHECK(t != kBool, "[linspace] expected a numeric dtype, got bool");
  check_convertible(start, t, op);
  check_convertible(end, t, op);
  if (t == kInt64) linspace_int64_bounds(start, end, steps);
  checked_bytes_numel({steps}, t, op);
  const Device dev = device.value_or(Device::cpu());
  Tensor out = empty_tensor({steps}, t, dev);
  if (dev.is_meta() || steps == 0) return out;
  if (steps == 1) {
    store_scalar(out.data_ptr(), t, start);
    return out;
  }
  visit_dtype(t, kAllMask & ~dtype_bit(kBool), op, [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      linspace_fill<T>(static_cast<T*>(out.data_ptr()), steps, start, end);
    }
  });
  return out;
}

// --- eye -------------------------------------------------------------------------------

Tensor eye_m(int64_t n, int64_t m, OptD dtype, OptDev device) {
  KILN_CHECK(n >= 0, "[eye] expected n >= 0, got ", n);
  KILN_CHECK(m >= 0, "[eye] expected m >= 0, got ", m);
  const DType t = dtype.value_or(kFloat32);
  // PyTorch 1.13's eye has no bfloat16 kernel.
  KILN_CHECK(t != kBFloat16, "[eye] expected a dtype other than bfloat16, got bfloat16");
  checked_bytes_numel({n, m}, t, "eye");
  const Device dev = device.value_or(Device::cpu());
  Tensor out = empty_tensor({n, m}, t, dev);
  if (dev.is_meta() || out.numel() == 0) return out;
  char* p = static_cast<char*>(out.data_ptr());
  const size_t e = out.element_size();
  std::memset(p, 0, out.nbytes());
  uint64_t one = 0;
  store_scalar(&one, t, Scalar(int64_t{1}));
  for (int64_t i = 0; i < std::min(n, m); ++i) std::memcpy(p + (i * m + i) * e, &one, e);
  return out;
}

Tensor eye(int64_t n, OptD dtype, OptDev device) {
  return eye_m(n, n, dtype, device);
}

void register_kernels(Library& m) {
  m.impl("arange", &arange_end);
  m.impl("arange.start_step", &arange_start_step);
  m.impl("linspace", &linspace);
  m.impl("eye", &eye);
  m.impl("eye.m", &eye_m);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
