// sum, mean and prod on the CPU and Meta, through the reduction engine
// (Note [Reduction engine]). Result dtypes follow PyTorch 1.13: bool and
// integer inputs sum and multiply to int64 unless `dtype` says otherwise;
// `dtype` casts the input before reducing; mean accepts floating dtypes only;
// out= computes in the out tensor's dtype.

#include "kiln/dispatch.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/cpu/copy.h"
#include "runtime/cpu/reduce.h"
#include "runtime/cpu/reduce_math.h"
#include "runtime/cpu/reduce_sum16.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

enum class Kind { Sum, Mean, Prod };

// Accumulates in Acc (Note [Reduction accumulators]); writes Out, scaled by
// `scale` for mean (1/0 gives mean's NaN over an empty reduction).
template <Kind kKind, class In, class Out>
struct SumOps {
  using in_t = In;
  using acc_t = sum_acc_t<In>;
  acc_t count = 1;
  // Dense 16-bit sums (set for Half and BFloat16; prod has no 16-bit kernel).
  DenseSum16<In> dense16 = nullptr;

  acc_t identity() const { return acc_t(kKind == Kind::Prod ? 1 : 0); }
  acc_t step(acc_t a, In x, int64_t) const {
    if constexpr (kKind == Kind::Prod) {
      return a * to_acc<acc_t>(x);
    } else {
      return a + to_acc<acc_t>(x);
    }
  }
  acc_t combine(acc_t a, acc_t b) const { return kKind == Kind::Prod ? a * b : a + b; }
  acc_t contig(acc_t a, const In* p, int64_t n, int64_t) const {
    if constexpr (kKind == Kind::Prod) {
      acc_t s[8] = {1, 1, 1, 1, 1, 1, 1, 1};
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; ++j) s[j] *= to_acc<acc_t>(p[i + j]);
      }
      for (; i < n; ++i) s[0] *= to_acc<acc_t>(p[i]);
      return a * (((s[0] * s[1]) * (s[2] * s[3])) * ((s[4] * s[5]) * (s[6] * s[7])));
    } else if constexpr (kIsReducedFloat<In>) {
      return a + dense16(p, n);
    } else {
      return a + reduce_contig_sum<acc_t>(p, n, [](In x) { return to_acc<acc_t>(x); });
    }
  }
  void write(char* const* out, acc_t a) const {
    if constexpr (kKind == Kind::Mean) a = a / count;
    *reinterpret_cast<Out*>(out[0]) = from_acc<Out>(a);
  }
};

constexpr uint32_t kIntOrBoolMask = kIntegralMask | (1u << static_cast<int>(kBool));

// The dtype the reduction computes in (and returns).
DType result_dtype(Kind kind, const char* op, const Tensor& self, std::optional<DType> dtype,
                   const Tensor* out) {
  if (out != nullptr && dtype) {
    KILN_CHECK(out->dtype() == *dtype, "[", op, "] expected the out tensor to have dtype ", *dtype,
               ", got ", out->dtype());
  }
  if (kind == Kind::Mean) {
    DType in = dtype.value_or(self.dtype());
    KILN_CHECK(is_floating(in), "[", op,
               "] could not infer the output dtype: expected a floating input or dtype, got ", in);
    DType c = out != nullptr ? out->dtype() : in;
    KILN_CHECK(is_floating(c), "[", op, "] result type ", in,
               " can't be cast to the desired output type ", c);
    return c;
  }
  DType c = dtype ? *dtype
            : out ? out->dtype()
                  : (is_floating(self.dtype()) ? self.dtype() : kInt64);
  // PyTorch 1.13 finds no 16-bit float prod kernel only when there is data to reduce.
  KILN_CHECK(
      kind != Kind::Prod || !is_reduced_float(c) || self.numel() == 0 || !cpu_kernel_for(self), "[",
      op, "] not implemented for ", c, " on cpu (as PyTorch 1.13)");
  return c;
}

template <Kind kKind>
void run(const Tensor& self, uint64_t mask, const Tensor& result, int64_t count) {
  const DType c = result.dtype();
  if (kKind == Kind::Prod && is_reduced_float(c)) {
    // Only an empty input gets here (see result_dtype): every product is empty.
    Tensor r = result;
    r.fill_(1);
    return;
  }
  if (is_floating(c)) {
    Tensor in = cast(self, c);
    ReducePlan plan(in, mask, {result}, false);
    visit_dtype(c, kFloatingMask, "sum", [&]<class T>() {
      // prod has no 16-bit float kernel (checked in result_dtype).
      if constexpr (kIsFloat<T> && (kKind != Kind::Prod || !kIsReducedFloat<T>)) {
        SumOps<kKind, T, T> ops;
        ops.count = static_cast<sum_acc_t<T>>(count);
        if constexpr (kIsReducedFloat<T>) ops.dense16 = dense_sum16<T>();
        reduce(plan, ops);
      }
    });
    return;
  }
  // Integers wrap, so summing the input's own values and wrapping once at the
  // end equals PyTorch's cast-then-sum, except into bool, and from floats.
  Tensor in = c == kBool || is_floating(self.dtype()) ? cast(self, c) : self;
  Tensor target = c == kInt64 ? result : empty_tensor(result.sizes(), kInt64, Device::cpu());
  ReducePlan plan(in, mask, {target}, false);
  visit_dtype(in.dtype(), kIntOrBoolMask, "sum", [&]<class T>() {
    if constexpr (!kIsFloat<T>) reduce(plan, SumOps<kKind, T, int64_t>{});
  });
  if (!target.is_same(result)) copy_into(result, target);
}

Tensor reduce_sum(Kind kind, const char* op, const Tensor& self, std::optional<IntArrayRef> dim,
                  bool keepdim, std::optional<DType> dtype, const Tensor* out) {
  check_cpu_or_meta(self, op, "self");
  IntArrayRef dims = dim ? *dim : IntArrayRef();
  uint64_t mask = reduction_dims(dims, self.dim(), op);
  DType c = result_dtype(kind, op, self, dtype, out);
  Tensor result = reduction_result(self, reduced_sizes(self.sizes(), mask, keepdim), c, out, op);
  if (self.is_meta()) return result;
  int64_t count = reduced_count(self.sizes(), mask);
  switch (kind) {
    case Kind::Sum:
      run<Kind::Sum>(self, mask, result, count);
      break;
    case Kind::Mean:
      run<Kind::Mean>(self, mask, result, count);
      break;
    case Kind::Prod:
      run<Kind::Prod>(self, mask, result, count);
      break;
  }
  return result;
}

using OptD = std::optional<DType>;
using OptIL = std::optional<IntArrayRef>;

Tensor sum(const Tensor& s, OptD dtype) {
  return reduce_sum(Kind::Sum, "sum", s, std::nullopt, false, dtype, nullptr);
}
Tensor sum_dim(const Tensor& s, OptIL dim, bool keepdim, OptD dtype) {
  return reduce_sum(Kind::Sum, "sum", s, dim, keepdim, dtype, nullptr);
}
Tensor sum_out(const Tensor& s, OptIL dim, bool keepdim, OptD dtype, const Tensor& out) {
  return reduce_sum(Kind::Sum, "sum.out", s, dim, keepdim, dtype, &out);
}
Tensor mean(const Tensor& s, OptD dtype) {
  return reduce_sum(Kind::Mean, "mean", s, std::nullopt, false, dtype, nullptr);
}
Tensor mean_dim(const Tensor& s, OptIL dim, bool keepdim, OptD dtype) {
  return reduce_sum(Kind::Mean, "mean", s, dim, keepdim, dtype, nullptr);
}
Tensor mean_out(const Tensor& s, OptIL dim, bool keepdim, OptD dtype, const Tensor& out) {
  return reduce_sum(Kind::Mean, "mean.out", s, dim, keepdim, dtype, &out);
}
Tensor prod(const Tensor& s, OptD dtype) {
  return reduce_sum(Kind::Prod, "prod", s, std::nullopt, false, dtype, nullptr);
}
Tensor prod_dim(const Tensor& s, int64_t dim, bool keepdim, OptD dtype) {
  return reduce_sum(Kind::Prod, "prod", s, IntArrayRef(dim), keepdim, dtype, nullptr);
}

void register_kernels(Library& m) {
  m.impl("sum", &sum);
  m.impl("sum.dim_IntList", &sum_dim);
  m.impl("sum.IntList_out", &sum_out);
  m.impl("mean", &mean);
  m.impl("mean.dim", &mean_dim);
  m.impl("mean.out", &mean_out);
  m.impl("prod", &prod);
  m.impl("prod.dim_int", &prod_dim);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
