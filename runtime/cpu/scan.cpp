// cumsum and cumprod on the CPU and Meta. As PyTorch 1.13: bool and integer
// inputs scan to int64 unless `dtype` says otherwise, `dtype` (or the out
// tensor's dtype) casts the input first, float16 and bool results have no cpu
// kernel; sums accumulate as Note [Reduction accumulators] says, each prefix
// rounded to the result dtype.

#include "kiln/dispatch.h"
#include "runtime/core/dtype_dispatch.h"
#include "runtime/cpu/copy.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/reduce.h"
#include "runtime/cpu/reduce_lines.h"
#include "runtime/cpu/reduce_math.h"
#include "runtime/cpu/tensor_iter.h"

namespace kiln::cpu {
namespace {

constexpr uint32_t kScanMask =
    kAllMask & ~(1u << static_cast<int>(kBool)) & ~(1u << static_cast<int>(kFloat16));

template <class T, bool kProd>
void scan_kernel(const Tensor& in, const Tensor& out, int64_t dim) {
  using Acc = sum_acc_t<T>;
  auto op = [](Acc a, T x) { return kProd ? a * to_acc<Acc>(x) : a + to_acc<Acc>(x); };
  const Acc init = Acc(kProd ? 1 : 0);
  DimLines lines(out.sizes(), dim, {out, in});
  const char* src = static_cast<const char*>(in.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  const int64_t len = lines.length(), ls_out = lines.line_stride(0), ls_in = lines.line_stride(1);
  const int64_t grain = std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(len, 1));
  constexpr int64_t kT = sizeof(T);
  if (lines.inner_size() > 1 && lines.inner_stride(0) == kT && lines.inner_stride(1) == kT &&
      len > 1) {
    // Neighbouring lines are adjacent in memory: scan a block of them together,
    // so each step reads and writes a dense row.
    constexpr int64_t kBlock = 256;
    const int64_t inner = lines.inner_size();
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
    const int64_t units = lines.num_lines() / inner * blocks;
    parallel_range(
        units,
        [&](int64_t b, int64_t e) {
          for (int64_t u = b; u < e; ++u) {
            const int64_t j0 = (u % blocks) * kBlock, nb = std::min(kBlock, inner - j0);
            lines.for_lines(u / blocks * inner + j0, u / blocks * inner + j0 + 1,
                            [&](const int64_t* off) {
                              Acc acc[kBlock];
                              for (int64_t j = 0; j < nb; ++j) acc[j] = init;
                              for (int64_t i = 0; i < len; ++i) {
                                const T* x = reinterpret_cast<const T*>(src + off[1] + i * ls_in);
                                T* y = reinterpret_cast<T*>(dst + off[0] + i * ls_out);
                                for (int64_t j = 0; j < nb; ++j) {
                                  acc[j] = op(acc[j], x[j]);
                                  y[j] = from_acc<T>(acc[j]);
                                }
                              }
                            });
          }
        },
        std::max<int64_t>(1, grain / kBlock));
    return;
  }
  parallel_range(
      lines.num_lines(),
      [&](int64_t b, int64_t e) {
        lines.for_lines(b, e, [&](const int64_t* off) {
          Acc acc = init;
          const char* x = src + off[1];
          char* y = dst + off[0];
          for (int64_t i = 0; i < len; ++i) {
            acc = op(acc, *reinterpret_cast<const T*>(x + i * ls_in));
            *reinterpret_cast<T*>(y + i * ls_out) = from_acc<T>(acc);
          }
        });
      },
      grain);
}

template <bool kProd>
Tensor scan(const char* op, const Tensor& self, int64_t dim, std::optional<DType> dtype,
            const Tensor* out) {
  check_cpu_or_meta(self, op, "self");
  const int64_t d = wrap_dim(dim, self.dim(), op);
  if (out != nullptr && dtype) {
    KILN_CHECK(out->dtype() == *dtype, "[", op, "] expected the out tensor to have dtype ", *dtype,
               ", got ", out->dtype());
  }
  DType c = dtype ? *dtype
            : out ? out->dtype()
                  : (is_floating(self.dtype()) ? self.dtype() : kInt64);
  // PyTorch 1.13 copies 0-dim inputs and skips empty ones; only a real scan
  // finds no float16 or bool kernel.
  const bool trivial = self.dim() == 0 || self.numel() == 0;
  // Only float16 is a CPU-only gap (Note [Meta twins]); bool scans exist nowhere.
  KILN_CHECK(trivial || (c != kBool && (c != kFloat16 || !cpu_kernel_for(self))), "[", op,
             "] not implemented for ", c, " on cpu (as PyTorch 1.13)");
  Tensor result = reduction_result(self, self.sizes(), c, out, op);
  if (self.is_meta() || self.numel() == 0) return result;
  if (self.dim() == 0) {
    copy_into(result, self);
    return result;
  }
  Tensor in = cast(self, c);
  visit_dtype(c, kScanMask, op, [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool> && !std::is_same_v<T, Half>) {
      scan_kernel<T, kProd>(in, result, d);
    }
  });
  return result;
}

using OptD = std::optional<DType>;

Tensor cumsum(const Tensor& s, int64_t dim, OptD dtype) {
  return scan<false>("cumsum", s, dim, dtype, nullptr);
}
Tensor cumprod(const Tensor& s, int64_t dim, OptD dtype) {
  return scan<true>("cumprod", s, dim, dtype, nullptr);
}
Tensor cumsum_out(const Tensor& s, int64_t dim, OptD dtype, const Tensor& out) {
  return scan<false>("cumsum.out", s, dim, dtype, &out);
}
Tensor cumprod_out(const Tensor& s, int64_t dim, OptD dtype, const Tensor& out) {
  return scan<true>("cumprod.out", s, dim, dtype, &out);
}

void register_kernels(Library& m) {
  m.impl("cumsum", &cumsum);
  m.impl("cumprod", &cumprod);
  m.impl("cumsum.out", &cumsum_out);
  m.impl("cumprod.out", &cumprod_out);
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  register_kernels(m);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  register_kernels(m);
}

}  // namespace kiln::cpu
