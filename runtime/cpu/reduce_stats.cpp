// var, std, logsumexp and norm on the CPU and Meta, through the reduction
// engine (Note [Reduction engine]). Each accumulates in double and computes
// its own math (no dependence on the pointwise kernels).

#include <cmath>
#include <limits>

#include "kiln/dispatch.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/cpu/reduce.h"
#include "runtime/cpu/reduce_math.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr uint32_t kFullFloatMask = (1u << static_cast<int>(kBFloat16)) |
                                    (1u << static_cast<int>(kFloat32)) |
                                    (1u << static_cast<int>(kFloat64));

template <class T>
inline double to_double(T x) {
  if constexpr (kIsReducedFloat<T>) {
    return static_cast<float>(x);
  } else {
    return static_cast<double>(x);
  }
}

// --- var / std: Welford, with Chan's formula to merge partial results -------------

struct Moments {
  double mean = 0;
  double m2 = 0;
  int64_t n = 0;
};

inline Moments merge(const Moments& a, const Moments& b) {
  if (a.n == 0) return b;
  if (b.n == 0) return a;
  int64_t n = a.n + b.n;
  double d = b.mean - a.mean;
  double fb = static_cast<double>(b.n) / static_cast<double>(n);
  return {a.mean + d * fb, a.m2 + b.m2 + d * d * static_cast<double>(a.n) * fb, n};
}

template <class T, bool kStd>
struct VarOps {
  using in_t = T;
  using acc_t = Moments;
  double correction = 1;

  Moments identity() const { return {}; }
  Moments step(Moments a, T x, int64_t) const {
    double v = to_double(x);
    ++a.n;
    double d = v - a.mean;
    a.mean += d / static_cast<double>(a.n);
    a.m2 += d * (v - a.mean);
    return a;
  }
  Moments combine(Moments a, Moments b) const { return merge(a, b); }
  // Dense runs: two passes per cache-sized block (exact block mean), then merge.
  Moments contig(Moments a, const T* p, int64_t n, int64_t) const {
    constexpr int64_t kBlockLen = 1024;
    for (int64_t b = 0; b < n; b += kBlockLen) {
      int64_t len = std::min(kBlockLen, n - b);
      double mean = reduce_contig_sum<double>(p + b, len, [](T x) { return to_double(x); }) /
                    static_cast<double>(len);
      double m2 = reduce_contig_sum<double>(p + b, len, [mean](T x) {
        double d = to_double(x) - mean;
        return d * d;
      });
      a = merge(a, Moments{mean, m2, len});
    }
    return a;
  }
  void write(char* const* out, Moments a) const {
    double var = a.m2 / std::max(0.0, static_cast<double>(a.n) - correction);
    *reinterpret_cast<T*>(out[0]) = from_acc<T>(kStd ? std::sqrt(var) : var);
  }
};

template <bool kStd>
Tensor var_impl(const char* op, const Tensor& self, std::optional<IntArrayRef> dim,
                std::optional<int64_t> correction, bool keepdim) {
  check_cpu_or_meta(self, op, "self");
  KILN_CHECK(is_floating(self.dtype()), "[", op, "] expected a floating input, got ", self.dtype());
  uint64_t mask = reduction_dims(dim ? *dim : IntArrayRef(), self.dim(), op);
  Tensor result =
      reduction_result(self, reduced_sizes(self.sizes(), mask, keepdim), self.dtype(), nullptr, op);
  if (self.is_meta()) return result;
  ReducePlan plan(self, mask, {result}, false);
  visit_dtype(self.dtype(), kFloatingMask, op, [&]<class T>() {
    if constexpr (kIsFloat<T>) {
      VarOps<T, kStd> ops;
      ops.correction = static_cast<double>(correction.value_or(1));
      reduce(plan, ops);
    }
  });
  return result;
}

// --- logsumexp: a running (max, sum of exp(x - max)) over the finite values ----------

struct LogSumExp {
  double m = -kInf;  // the largest finite value
  double s = 0;      // sum of exp(x - m) over the finite values
  bool nan = false;
  bool pos_inf = false;
};

inline LogSumExp merge(const LogSumExp& a, const LogSumExp& b) {
  LogSumExp r;
  r.nan = a.nan || b.nan;
  r.pos_inf = a.pos_inf || b.pos_inf;
  if (b.m == -kInf) {
    r.m = a.m;
    r.s = a.s;
  } else if (a.m == -kInf) {
    r.m = b.m;
    r.s = b.s;
  } else {
    r.m = std::max(a.m, b.m);
    r.s = a.s * std::exp(a.m - r.m) + b.s * std::exp(b.m - r.m);
  }
  return r;
}

// As PyTorch's max-shifted formula: NaN anywhere gives NaN, +inf gives +inf,
// no finite value (all -inf, or empty) gives -inf.
template <class T>
struct LogSumExpOps {
  using in_t = T;
  using acc_t = LogSumExp;

  LogSumExp identity() const { return {}; }
  static void flag(LogSumExp& a, double v) {
    if (std::isnan(v)) a.nan = true;
    if (v == kInf) a.pos_inf = true;
  }
  LogSumExp step(LogSumExp a, T x, int64_t) const {
    double v = to_double(x);
    if (!std::isfinite(v)) {
      flag(a, v);
    } else if (v > a.m) {
      a.s = a.s * std::exp(a.m - v) + 1.0;
      a.m = v;
    } else {
      a.s += std::exp(v - a.m);
    }
    return a;
  }
  LogSumExp combine(LogSumExp a, LogSumExp b) const { return merge(a, b); }
  // Dense runs, per block: the NaN-propagating max in one vectorized pass, then
  // the sum of exp(x - max) in another (float math for float and bfloat16).
  LogSumExp contig(LogSumExp a, const T* p, int64_t n, int64_t) const {
    constexpr int64_t kBlockLen = 1024;
    for (int64_t b = 0; b < n; b += kBlockLen) {
      const int64_t len = std::min(n - b, kBlockLen);
      const double m = static_cast<double>(run_extreme<true>(p + b, len));
      LogSumExp blk;
      if (std::isnan(m)) {
        blk.nan = true;
      } else if (m == kInf) {
        blk.pos_inf = true;
      } else if (m != -kInf) {
        blk.m = m;
        if constexpr (std::is_same_v<T, double>) {
          blk.s = reduce_contig_sum<double>(p + b, len, [m](double x) { return std::exp(x - m); });
        } else {
          const float mf = static_cast<float>(m);
          blk.s = reduce_contig_sum<double>(p + b, len, [mf](T x) {
            return static_cast<double>(exp_nonpositive(static_cast<float>(x) - mf));
          });
        }
      }
      a = merge(a, blk);
    }
    return a;
  }
  void write(char* const* out, LogSumExp a) const {
    double r = a.nan ? kNaN : a.pos_inf ? kInf : a.m == -kInf ? -kInf : std::log(a.s) + a.m;
    *reinterpret_cast<T*>(out[0]) = from_acc<T>(r);
  }
};

Tensor logsumexp(const Tensor& self, IntArrayRef dim, bool keepdim) {
  const char* op = "logsumexp";
  check_cpu_or_meta(self, op, "self");
  uint64_t mask = reduction_dims(dim, self.dim(), op);
  // PyTorch 1.13 adds the row maxima kept at rank ndim to a result that
  // dropped every dim, which cannot broadcast: an empty dim list raises
  // unless keepdim is set, or the input is 0-dim or empty (no maxima then).
  KILN_CHECK(!dim.empty() || keepdim || self.dim() == 0 || self.numel() == 0, "[", op,
             "] an empty dim list needs keepdim=True (as PyTorch 1.13), got sizes ", self.sizes());
  DType dtype = is_floating(self.dtype()) ? self.dtype() : kFloat32;
  KILN_CHECK(dtype != kFloat16 || !cpu_kernel_for(self), "[", op,
             "] not implemented for float16 on cpu (as PyTorch 1.13)");
  Tensor result =
      reduction_result(self, reduced_sizes(self.sizes(), mask, keepdim), dtype, nullptr, op);
  if (self.is_meta()) return result;
  Tensor in = cast(self, dtype);
  ReducePlan plan(in, mask, {result}, false);
  visit_dtype(dtype, kFullFloatMask, op, [&]<class T>() {
    if constexpr (kIsFloat<T> && !std::is_same_v<T, Half>) reduce(plan, LogSumExpOps<T>{});
  });
  return result;
}

// --- norm ------------------------------------------------------------------------------

enum class NormKind { Zero, One, Two, Inf, NegInf, General };

template <class T, NormKind kKind>
struct NormOps {
  using in_t = T;
  using acc_t = double;
  double p = 2;

  static constexpr bool kExtreme = kKind == NormKind::Inf || kKind == NormKind::NegInf;
  double identity() const {
    return kKind == NormKind::Inf ? -kInf : kKind == NormKind::NegInf ? kInf : 0.0;
  }
  double term(T x) const {
    double a = std::fabs(to_double(x));
    if constexpr (kKind == NormKind::Zero) {
      return a != 0 ? 1.0 : 0.0;  // NaN counts as non-zero
    } else if constexpr (kKind == NormKind::Two) {
      return a * a;
    } else if constexpr (kKind == NormKind::General) {
      return std::pow(a, p);
    } else {
      return a;
    }
  }
  double combine(double a, double b) const {
    if constexpr (kExtreme) {
      if (std::isnan(a) || std::isnan(b)) return kNaN;
      return kKind == NormKind::Inf ? std::max(a, b) : std::min(a, b);
    } else {
      return a + b;
    }
  }
  double step(double a, T x, int64_t) const { return combine(a, term(x)); }
  double contig(double a, const T* p_, int64_t n, int64_t) const {
    if constexpr (kExtreme) {
      for (int64_t i = 0; i < n; ++i) a = combine(a, term(p_[i]));
      return a;
    } else {
      return a + reduce_contig_sum<double>(p_, n, [this](T x) { return term(x); });
    }
  }
  void write(char* const* out, double a) const {
    double r = kKind == NormKind::Two       ? std::sqrt(a)
               : kKind == NormKind::General ? std::pow(a, 1.0 / p)
                                            : a;
    *reinterpret_cast<T*>(out[0]) = from_acc<T>(r);
  }
};

Tensor norm_impl(const char* op, const Tensor& self, const Scalar& p, IntArrayRef dim,
                 bool keepdim) {
  check_cpu_or_meta(self, op, "self");
  KILN_CHECK(is_floating(self.dtype()), "[", op, "] expected a floating input, got ", self.dtype());
  uint64_t mask = reduction_dims(dim, self.dim(), op);
  Tensor result =
      reduction_result(self, reduced_sizes(self.sizes(), mask, keepdim), self.dtype(), nullptr, op);
  if (self.is_meta()) return result;
  const double pv = p.to_double();
  if (self.numel() == 0) {
    // PyTorch 1.13 returns zeros for an empty input, whatever p.
    Tensor r = result;
    r.zero_();
    return result;
  }
  ReducePlan plan(self, mask, {result}, false);
  visit_dtype(self.dtype(), kFloatingMask, op, [&]<class T>() {
    if constexpr (kIsFloat<T>) {
      auto go = [&]<NormKind K>() {
        NormOps<T, K> ops;
        ops.p = pv;
        reduce(plan, ops);
      };
      if (pv == 0) {
        go.template operator()<NormKind::Zero>();
      } else if (pv == 1) {
        go.template operator()<NormKind::One>();
      } else if (pv == 2) {
        go.template operator()<NormKind::Two>();
      } else if (pv == kInf) {
        go.template operator()<NormKind::Inf>();
      } else if (pv == -kInf) {
        go.template operator()<NormKind::NegInf>();
      } else {
        go.template operator()<NormKind::General>();
      }
    }
  });
  return result;
}

Tensor norm_scalar(const Tensor& self, const Scalar& p) {
  return norm_impl("norm", self, p, IntArrayRef(), false);
}
Tensor norm_dim(const Tensor& self, const std::optional<Scalar>& p, IntArrayRef dim, bool keepdim) {
  return norm_impl("norm", self, p.value_or(Scalar(2)), dim, keepdim);
}

Tensor var(const Tensor& s, std::optional<IntArrayRef> dim, std::optional<int64_t> correction,
           bool keepdim) {
  return var_impl<false>("var", s, dim, correction, keepdim);
}
Tensor std_(const Tensor& s, std::optional<IntArrayRef> dim, std::optional<int64_t> correction,
            bool keepdim) {
  return var_impl<true>("std", s, dim, correction, keepdim);
}

// var / std with unbiased= (PyTorch's older spelling): Composites that forward
// to the correction form, correction 1 when unbiased, else 0.
using VarOp =
    TypedOp<Tensor(const Tensor&, std::optional<IntArrayRef>, std::optional<int64_t>, bool)>;
Tensor var_unbiased(const Tensor& s, bool unbiased) {
  static const VarOp op("var.correction");
  return op(s, std::nullopt, unbiased ? 1 : 0, false);
}
Tensor var_dim(const Tensor& s, std::optional<IntArrayRef> dim, bool unbiased, bool keepdim) {
  static const VarOp op("var.correction");
  return op(s, dim, unbiased ? 1 : 0, keepdim);
}
Tensor std_unbiased(const Tensor& s, bool unbiased) {
  static const VarOp op("std.correction");
  return op(s, std::nullopt, unbiased ? 1 : 0, false);
}
Tensor std_dim(const Tensor& s, std::optional<IntArrayRef> dim, bool unbiased, bool keepdim) {
  static const VarOp op("std.correction");
  return op(s, dim, unbiased ? 1 : 0, keepdim);
}

void register_kernels(Library& m) {
  m.impl("var.correction", &var);
  m.impl("std.correction", &std_);
  m.impl("logsumexp", &logsumexp);
  m.impl("norm.Scalar", &norm_scalar);
  m.impl("norm.ScalarOpt_dim", &norm_dim);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Composite, m) {
  m.impl("var", &var_unbiased);
  m.impl("var.dim", &var_dim);
  m.impl("std", &std_unbiased);
  m.impl("std.dim", &std_dim);
}

}  // namespace kiln::cpu
