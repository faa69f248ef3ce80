// lt_matmul: from tensors to cuBLASLt calls (Note [cuBLASLt layouts],
// Note [Matmul epilogues]); the layouts, algorithm choices and warm-up it
// relies on are in blas_lt_layout.cpp, blas_lt_algo.cpp and blas_lt_warmup.cpp.

#include "runtime/cuda/blas_lt.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <optional>

#include "kiln/ops.h"
#include "runtime/core/matrix_view.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/core/thread_cache.h"
#include "runtime/cpu/blas.h"
#include "runtime/cuda/blas_lt_algo.h"
#include "runtime/cuda/blas_lt_impl.h"
#include "runtime/cuda/blas_lt_skinny.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/launch_record.h"

namespace kiln::cuda {

namespace {

std::atomic<bool> g_allow_tf32{false};

// One handle per (thread, device): cuBLASLt handles are cheap, and a handle
// of its own spares each thread a lock. Destroyed when the thread ends.
struct ThreadHandles {
  std::array<cublasLtHandle_t, kMaxDevices> handles{};
  ~ThreadHandles() {
    for (cublasLtHandle_t h : handles) {
      if (h) (void)cublasLtDestroy(h);
    }
  }
};

}  // namespace

cublasLtHandle_t handle_for(int device) {
  KILN_INTERNAL_ASSERT(device >= 0 && device < kMaxDevices, "cuBLASLt: device index ", device,
                       " out of range");
  // A matmul in the flush an exiting thread runs may come after its handles
  // are destroyed (Note [Thread caches at thread exit]): it takes a handle
  // that is never destroyed, one per such thread and device.
  thread_local std::array<cublasLtHandle_t, kMaxDevices> exit_handles{};
  ThreadHandles* t = ThreadCache<ThreadHandles>::get();
  cublasLtHandle_t& h = (t ? t->handles : exit_handles)[static_cast<size_t>(device)];
  if (!h) KILN_CUBLAS_CHECK_DEVICE(cublasLtCreate(&h), device);
  return h;
}

// Hopper's fastest kernels want more scratch than older parts (PyTorch uses
// the same split); the block comes from the caching allocator per call.
size_t workspace_bytes(int device) {
  return device_properties(device).major >= 9 ? size_t{32} << 20 : size_t{4} << 20;
}

namespace {

int64_t alignment_of(const void* p, int64_t stride_bytes = 0) {
  const auto bits = reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(stride_bytes) | 256u;
  return static_cast<int64_t>(bits & (~bits + 1));
}

struct Types {
  cudaDataType_t data;
  cudaDataType_t scale;
  cublasComputeType_t compute;
};

Types types_for(DType dtype) {
  const bool tf32 = g_allow_tf32.load(std::memory_order_relaxed);
  switch (dtype) {
    case kFloat32:
      return {CUDA_R_32F, CUDA_R_32F, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    case kFloat16:
      return {CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case kBFloat16:
      return {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case kFloat64:
      return {CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F};
    default:
      KILN_INTERNAL_ASSERT(false, "lt_matmul called with dtype ", dtype);
  }
}

cublasLtEpilogue_t epilogue_for(Activation act, bool bias) {
  switch (act) {
    case Activation::None:
      return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case Activation::Relu:
      return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case Activation::GeluTanh:
      return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// Note [Sums rounded once]
// kiln's eager CPU kernels sum a 16-bit product in float32 and round once,
// after the bias (and beta * C) joined the sum; its CUDA products do the
// same, so that a result does not depend on the device beyond the order of
// the float32 sums:
//   - a bias the epilogue cannot take is C, read with beta 1, not a second
//     kernel after the product: added afterwards, the product's rounding
//     error at its own magnitude would stay in a sum the bias made small
//     (a bias that cancels the product leaves only that error);
//   - an algorithm that splits k sums its partials, and applies the
//     epilogue and C, in a second step that may round first: the
//     heuristic's split answers are replaced where their partials are
//     16-bit, or where k is short and a bias, an activation or C follows
//     (Note [Split k rounds once], runtime/cuda/blas_lt_algo.cpp).
// The generated skinny kernels (Note [Skinny matmuls]) sum in float32 and
// apply bias, activation and residual before their one rounding.

// Note [C apart from D]
// cuBLASLt accepts C and D at the same address (an in-place beta * C), and on
// an H200 with cuBLASLt 13 its heuristic's first answer for small 16-bit
// batched products (algorithm 66) then returns, for a third to two thirds
// of the outputs, the product rounded to 16 bits before C was added, and
// the once-rounded sum for the rest (perf/probes/lt_rounding.cu; the same
// algorithm with C apart from D rounds every output once). So C is always
// memory of its own: a copy of out laid out as D when beta is nonzero, the
// expanded bias, or the residual (which never shares D's memory).

// Note [cuBLASLt under graph capture]
// A call is safe to capture: alpha and beta are host values (read when the
// call is made, so baked into the captured kernels), the heuristic is a host
// query whose answer is cached before capture usually begins, and the
// workspace is one block of the graph's private pool that all of the
// capture's calls share (Note [Library scratch under capture]).

// Runs `p`; false (nothing queued) when cuBLASLt has no algorithm for it.
// `c` is C, laid out as D and apart from it (Note [C apart from D]); null
// when beta is zero.
bool run_problem(const Problem& p, DType dtype, char* a, char* b, char* d, const char* c,
                 double alpha, double beta, Activation act, const void* bias, int device) {
  // The heuristic reads the current device's properties; the kernels launch on it.
  DeviceGuard guard(device);
  const Types t = types_for(dtype);
  const auto isz = static_cast<int64_t>(itemsize(dtype));
  const cublasLtEpilogue_t epilogue = epilogue_for(act, bias != nullptr);
  const size_t ws_bytes = workspace_bytes(device);

  // Alignment over every pointer the outer loop visits.
  int64_t outer_a = 0, outer_b = 0, outer_d = 0;
  for (const auto& o : p.offsets) {
    outer_a |= o[0] * isz;
    outer_b |= o[1] * isz;
    outer_d |= o[2] * isz;
  }
  const int64_t align_a = alignment_of(a, outer_a | p.stride_a * isz);
  const int64_t align_b = alignment_of(b, outer_b | p.stride_b * isz);
  // C is read with D's layout: the key and the heuristic take the weaker alignment.
  const int64_t align_d = std::min(alignment_of(d, outer_d | p.stride_d * isz),
                                   c ? alignment_of(c, outer_d | p.stride_d * isz) : 256);
  const int64_t align_bias = bias ? alignment_of(bias) : 0;

  MatmulDesc desc(t.compute, t.scale, device);
  const cublasOperation_t op_a = p.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = p.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  if (bias) desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  MatrixLayout la(t.data, p.a, p.batch, p.stride_a, device);
  MatrixLayout lb(t.data, p.b, p.batch, p.stride_b, device);
  MatrixLayout ld(t.data, p.d, p.batch, p.stride_d, device);
  cublasLtHandle_t handle = handle_for(device);

  const AlgoKey key{device,
                    static_cast<int64_t>(dtype),
                    t.compute,
                    p.m,
                    p.n,
                    p.k,
                    p.a.trans,
                    p.b.trans,
                    p.a.ld,
                    p.b.ld,
                    p.d.ld,
                    p.batch,
                    p.stride_a,
                    p.stride_b,
                    p.stride_d,
                    epilogue,
                    align_a,
                    align_b,
                    align_d,
                    align_bias,
                    static_cast<int64_t>(ws_bytes),
                    p.a.rows,
                    p.b.rows,
                    c != nullptr};
  const AlgoEntry entry = find_algorithm(
      key, device,
      {handle, desc.desc, la.layout, lb.layout, ld.layout, ws_bytes, align_a, align_b, align_d,
       dtype == kFloat16 || dtype == kBFloat16, epilogue != CUBLASLT_EPILOGUE_DEFAULT || c, p.k});
  if (!entry.found) return false;

  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const void* alpha_p = t.scale == CUDA_R_64F ? static_cast<const void*>(&alpha) : &alpha_f;
  const void* beta_p = t.scale == CUDA_R_64F ? static_cast<const void*>(&beta) : &beta_f;
  const Device dev = Device::cuda(device);
  // From the caching allocator on the current stream: freed after the calls
  // are queued, reused only by work ordered after them.
  // While a graph is captured, its one shared block (Note [Library scratch
  // under capture]).
  const Stream stream = Stream::current(dev);
  Tensor workspace;
  void* ws = nullptr;
  if (entry.workspace > 0) {
    if (LaunchRecorder* r = launch_recorder())
      ws = r->library_scratch(raw(stream), entry.workspace);
    if (!ws) {
      workspace = empty_tensor({static_cast<int64_t>(entry.workspace)}, kUInt8, dev);
      ws = workspace.data_ptr();
    }
  }
  for (const auto& o : p.offsets) {
    char* pa = a + o[0] * isz;
    char* pb = b + o[1] * isz;
    char* pd = d + o[2] * isz;
    const char* pc = c ? c + o[2] * isz : pd;
    KILN_CUBLAS_CHECK_DEVICE(
        cublasLtMatmul(handle, desc.desc, alpha_p, pa, la.layout, pb, lb.layout, beta_p, pc,
                       ld.layout, pd, ld.layout, &entry.algo, ws, entry.workspace, raw(stream)),
        device);
  }
  return true;
}

char* bytes(const Tensor& t) {
  return static_cast<char*>(t.data_ptr());
}

Tensor dense_copy(const Tensor& t) {
  Tensor c = empty_tensor(t.sizes(), t.dtype(), t.device());
  c.copy_(t);
  return c;
}

void apply_activation(Tensor& out, Activation act) {
  if (act == Activation::Relu) kiln::relu_(out);
  if (act == Activation::GeluTanh) kiln::gelu_(out, "tanh");
}

}  // namespace

Activation parse_activation(std::string_view act, const char* op) {
  if (act == "none") return Activation::None;
  if (act == "relu") return Activation::Relu;
  if (act == "gelu_tanh") return Activation::GeluTanh;
  KILN_FAIL("[", op, "] expected act to be one of 'none', 'relu', 'gelu_tanh', got '", act, "'");
}

namespace {

// Whether `r` can be C for D = `dst`: the same geometry, no shared memory.
bool residual_as_c(const Tensor& r, const Tensor& dst) {
  return r.sizes() == dst.sizes() && r.strides() == dst.strides() && r.dtype() == dst.dtype() &&
         !shares_storage(r, dst);
}

// `may_retry`: when cuBLASLt has no algorithm for these operands (a stride-0
// batch, an odd alignment), try once more with dense copies of them.
// `skinny`: products of few rows may take the generated kernel (Note
// [Skinny matmuls]); false when timing cuBLASLt against it.
void lt_matmul_impl(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& beta,
                    const Scalar& alpha, Activation act, const Tensor* bias, const Tensor* residual,
                    bool may_retry, bool skinny) {
  const int64_t nd = out.dim();
  KILN_INTERNAL_ASSERT(nd >= 2 && a.dim() == nd && b.dim() == nd, "lt_matmul ranks differ");
  if (out.numel() == 0) return;
  const DType dtype = out.dtype();
  const int device = out.device().index();
  const bool beta_is_zero = cpu::scalar_is_zero(beta, dtype);
  KILN_INTERNAL_ASSERT(!residual || (beta_is_zero && residual->sizes() == out.sizes() &&
                                     residual->dtype() == dtype && !shares_storage(*residual, out)),
                       "lt_matmul: a residual needs a zero beta, out's sizes and dtype, and "
                       "memory of its own");
  const double beta_d = beta_is_zero ? 0.0 : beta.to<double>();
  const double alpha_d = alpha.to<double>();
  Tensor target = out;
  if (a.size(nd - 1) == 0) {  // an empty sum: beta * out (+ bias, act, residual)
    if (beta_is_zero) {
      target.zero_();
    } else if (beta_d != 1.0) {
      target.mul_(beta);
    }
    if (bias) target.add_(*bias);
    apply_activation(target, act);
    if (residual) target.add_(*residual);
    return;
  }
  const int64_t limit = std::numeric_limits<int32_t>::max();
  KILN_CHECK(out.size(nd - 2) <= limit && out.size(nd - 1) <= limit && a.size(nd - 1) <= limit,
             "[matmul] expected matrix sizes below 2^31 on CUDA, got a product of ", a.sizes(),
             " and ", b.sizes());
  // A batch over one shared b (x[B, T, k] @ w^T, a language model's head) is
  // one product of B * T rows where a's and out's batch dims fold into rows:
  // one call without a batch loop or stride-0 batch, and a skinny one when
  // the rows are few.
  if (nd > 2 && batch_is_broadcast(b)) {
    const std::optional<int64_t> ra = folded_row_stride(a), ro = folded_row_stride(out);
    const std::optional<int64_t> rr =
        residual ? folded_row_stride(*residual) : std::optional<int64_t>(0);
    const int64_t rows = out.numel() / out.size(nd - 1);
    if (ra && ro && rr && rows <= limit) {
      const int64_t k = a.size(nd - 1), n = out.size(nd - 1);
      const Tensor out2 =
          make_view(out, {rows, n}, {*ro, out.stride(nd - 1)}, out.storage_offset());
      const Tensor a2 = make_view(a, {rows, k}, {*ra, a.stride(nd - 1)}, a.storage_offset());
      const Tensor b2 =
          make_view(b, {k, n}, {b.stride(nd - 2), b.stride(nd - 1)}, b.storage_offset());
      Tensor r2;
      if (residual) {
        r2 = make_view(*residual, {rows, n}, {*rr, residual->stride(nd - 1)},
                       residual->storage_offset());
      }
      lt_matmul_impl(out2, a2, b2, beta, alpha, act, bias, residual ? &r2 : nullptr, may_retry,
                     skinny);
      return;
    }
  }
  const bool overlaps = shares_storage(out, a) || shares_storage(out, b);
  if (skinny && nd == 2 && beta_is_zero && alpha_d == 1.0 && !overlaps &&
      run_skinny(out, a, b, act, bias, residual, [&] {
        lt_matmul_impl(out, a, b, beta, alpha, act, bias, residual, may_retry, false);
      })) {
    return;
  }
  // Layouts cuBLASLt cannot read become dense copies; an output it cannot
  // write, or one that overlaps an operand, becomes a dense scratch tensor.
  auto try_plan = [](const Tensor& o, const Tensor& x, const Tensor& y) {
    std::optional<Problem> p = plan_problem(o, x, y, /*swap=*/true);
    return p ? p : plan_problem(o, x, y, /*swap=*/false);
  };
  Tensor da = a, db = b, dst = out;
  std::optional<Problem> p;
  if (!overlaps) p = try_plan(out, a, b);
  if (!p && overlaps) {
    dst = empty_tensor(out.sizes(), dtype, out.device());
    p = try_plan(dst, a, b);
  }
  if (!p) {
    da = dense_copy(a);
    db = dense_copy(b);
    p = try_plan(dst, da, db);
  }
  if (!p && dst.is_same(out)) {
    dst = empty_tensor(out.sizes(), dtype, out.device());
    p = try_plan(dst, da, db);
  }
  KILN_INTERNAL_ASSERT(p, "lt_matmul: no cuBLASLt layout for dense operands of ", a.sizes(),
                       " and ", b.sizes());
  // The bias epilogue adds a vector along D's rows: the output's columns in
  // the swapped form. Any other bias is added by its own kernel.
  const bool bias_epilogue = bias && p->swapped && p->batch == 1 && p->offsets.size() == 1 &&
                             bias->dim() == 1 && bias->size(0) == out.size(nd - 1) &&
                             (bias->stride(0) == 1 || bias->size(0) == 1);
  char* slot_a = bytes(p->swapped ? db : da);
  char* slot_b = bytes(p->swapped ? da : db);
  // RELU/GELU epilogues only alongside the bias (Note [Matmul epilogues]).
  bool fused = bias_epilogue;
  // C is never D itself (Note [C apart from D]): beta * out reads a copy of
  // out laid out as D, and the residual is C when it follows the product
  // directly.
  const bool residual_c = residual && act == Activation::None && residual_as_c(*residual, dst);
  Tensor c_values;
  auto c_from = [&](const Tensor& values) {
    c_values = empty_strided_tensor(dst.sizes(), dst.strides(), dtype, dst.device());
    c_values.copy_(values);
  };
  if (!beta_is_zero) c_from(out);
  double beta_run = residual_c ? 1.0 : beta_d;
  // A bias the epilogue cannot take (a batched product, or one cuBLASLt has
  // no epilogue kernel for) goes in as C (Note [Sums rounded once]).
  const bool bias_may_be_c = bias && beta_is_zero && !residual_c && bias->dim() == 1;
  bool bias_c = false;
  auto bias_as_c = [&] {
    c_from(bias->expand(dst.sizes()));
    beta_run = 1.0;
    bias_c = true;
  };
  if (bias_may_be_c && !bias_epilogue) bias_as_c();
  auto c_bytes = [&]() -> const char* {
    return residual_c ? bytes(*residual) : c_values.defined() ? bytes(c_values) : nullptr;
  };
  const char* c = c_bytes();
  bool ran =
      run_problem(*p, dtype, slot_a, slot_b, bytes(dst), c, alpha_d, beta_run,
                  fused ? act : Activation::None, fused ? bias->data_ptr() : nullptr, device);
  if (!ran && fused) {  // nothing was queued
    fused = false;
    if (bias_may_be_c) {
      bias_as_c();
      c = c_bytes();
    }
    ran = run_problem(*p, dtype, slot_a, slot_b, bytes(dst), c, alpha_d, beta_run, Activation::None,
                      nullptr, device);
  }
  if (!ran && may_retry) {
    lt_matmul_impl(out, dense_copy(a), dense_copy(b), beta, alpha, act, bias, residual, false,
                   false);
    return;
  }
  KILN_CHECK(ran, "[matmul] cuBLASLt found no algorithm for a ", dtype, " product of ", a.sizes(),
             " and ", b.sizes(), " on ", out.device());
  if (!fused) {
    if (bias && !bias_c) dst.add_(*bias);
    apply_activation(dst, act);
  }
  if (residual && !residual_c) dst.add_(*residual);
  if (!dst.is_same(out)) target.copy_(dst);
}

}  // namespace

void lt_matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& beta,
               const Scalar& alpha, Activation act, const Tensor* bias, const Tensor* residual) {
  lt_matmul_impl(out, a, b, beta, alpha, act, bias, residual, /*may_retry=*/true,
                 /*skinny=*/true);
}

void set_allow_tf32(bool allow) {
  g_allow_tf32.store(allow, std::memory_order_relaxed);
}
bool allow_tf32() {
  return g_allow_tf32.load(std::memory_order_relaxed);
}

}  // namespace kiln::cuda
