// Note [Skinny matmuls]
// A product of few rows (m <= 16: a decode step's projections, m = batch)
// does 2 m FLOPs per weight element and reads each element once: its time is
// the weight stream's. cuBLASLt's kernels for such shapes often leave much of
// the bandwidth unused (tiles sized for tensor cores, m padded to 64 or 128)
// or split k into a second reduction kernel. The generated kernel (Note
// [Skinny matmul kernel], jit/codegen_cuda/op_kernels/gemv.cpp, reached
// through the slot of runtime/core/hooks.h) streams the weight with 16-byte
// loads and applies bias, activation and residual in its epilogue. It takes
// float16, bfloat16 and float32 products whose b is a weight read by rows
// (b = w^T, as linear and x @ w.t() give), with 16-byte aligned rows, alpha
// 1 and no beta.
//
// Note [Skinny matmul choice]
// Which of the two runs is decided per problem: device, dtype, m, n, k,
// epilogue and row strides.
//   1. A choice made before: in this process, or in the disk cache
//      (Note [Persistent cache hook]) under a key naming the generator's
//      version, cuBLASLt's version and the device.
//   2. Inside a MatmulTuning scope (Mode::MaxAutotune), a problem not timed
//      yet is timed: each way runs once to warm up (compile, algorithm
//      choice), then kRuns times back to back, in two rounds of alternating
//      order; the lower of each way's two means wins and is kept in memory
//      and on disk. A host callback holds the stream while the runs are queued, so
//      the events time the device's work (with its launch gaps, as a CUDA
//      graph replays it), not the host's launch rate. Before each run a write
//      of twice the L2 (a memset of scratch) evicts the operands: a step reads
//      each weight once, from device memory, and a weight called again and
//      again stays in L2 when it fits (a 32 MB one on a 50 MB L2), which
//      favours whichever way profits more from it. A third interval times
//      the writes alone, taken off both ways. (No scratch to be had: no
//      writes.)
//   3. Otherwise the default, kept in memory only: the generated kernel for
//      m <= kDefaultRows, where it reads the weight at close to the full
//      bandwidth with plain float32 FMAs; cuBLASLt above, where the
//      generated kernel's conversions and FMAs (m per weight element)
//      approach the SM's arithmetic limit; the generated kernel above too
//      where its tensor-core form beats cuBLASLt (`preferred`, Note
//      [Tensor-core skinny default] in jit/codegen_cuda/op_kernels/gemv.h),
//      and the other way below where the kernel says so (Note [Skinny
//      products better apart] there).
// A product with a norm prologue (Note [Norm prologues]) is chosen the same
// way, against the norm as its own kernel then the product (itself chosen
// as above); its default is the generated kernel up to kNormRows. The key names the prologue.
// SkinnyPath (KILN_SKINNY_MATMUL) forces one way for benchmarks and tests.

#include "runtime/cuda/blas_lt_skinny.h"

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kiln/logging.h"
#include "runtime/core/env.h"
#include "runtime/core/hooks.h"
#include "runtime/core/matrix_view.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cuda/blas_lt_impl.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/cuda/device_guard.h"

namespace kiln::cuda {
namespace {

constexpr int64_t kDefaultRows = 4;
// Products with a norm prologue take the generated kernel by default up to
// this many rows (the matmul epilogue pass folds norms up to 16 rows; above
// this, the norm's own kernel then the product). Measured on an H100 in
// compile mode: gpt2-decode at batch 8 took 1069 us with the fused kernel as
// the default up to 16 rows, against 779 us before norm prologues existed.
// With one-pass statistics (H200, perf/RESULTS.md, thirteenth session) the
// fused kernel at 8 rows still loses: 670 against 591 us (GPT-2), 2846
// against 1800 (Llama 1B); its FMA body is what costs at 8 rows. Above
// kNormRows the kernel's tensor-core form is the default where it is
// `preferred` (Note [Tensor-core skinny default]).
constexpr int64_t kNormRows = 4;
constexpr int kRuns = 20;
// Bumped when the generated kernel, or the way it is timed, changes enough to
// void stored timings (5: operands evicted from L2 between timed runs; 6: the
// streamed one-row form, Note [Streamed one-row products] in gemv.h).
constexpr int kGeneratorVersion = 6;

using ChoiceKey = std::array<int64_t, 13>;

struct ChoiceKeyHash {
  size_t operator()(const ChoiceKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct Choice {
  bool generated = false;
  bool timed = false;  // from a timing (now or stored), not the default
};

struct Choices {
  std::mutex mu;
  std::unordered_map<ChoiceKey, Choice, ChoiceKeyHash> entries;
  std::atomic<int64_t> generated{0}, cublas{0}, timed{0};
};

Choices& choices() {
  static auto* c = new Choices();  // leaked: used until exit
  return *c;
}

thread_local int t_tuning = 0;

// -1: not read from the environment yet.
std::atomic<int> g_path{-1};

SkinnyPath path_from_env() {
  const std::optional<std::string> s = env_string("KILN_SKINNY_MATMUL");
  if (!s || *s == "auto") return SkinnyPath::Auto;
  if (*s == "generated") return SkinnyPath::Generated;
  if (*s == "cublas") return SkinnyPath::Cublas;
  if (*s == "generated-norm") return SkinnyPath::GeneratedNorm;
  warn_env_value("KILN_SKINNY_MATMUL", *s, "auto, generated, generated-norm or cublas");
  return SkinnyPath::Auto;
}

int act_code(Activation act) {
  switch (act) {
    case Activation::None:
      return 0;
    case Activation::Relu:
      return 1;
    case Activation::GeluTanh:
      return 2;
  }
  return 0;
}

std::string disk_key(const ChoiceKey& key) {
  const cudaDeviceProp& prop = device_properties(static_cast<int>(key[0]));
  std::ostringstream k;
  k << "skinny-matmul-" << kGeneratorVersion << "|" << cublasLtGetVersion() << "|" << prop.name
    << "|sm" << prop.major << prop.minor;
  for (size_t i = 1; i < key.size(); ++i) k << "|" << key[i];
  return k.str();
}

void hold_stream(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

struct Timing {
  double generated_us = std::numeric_limits<double>::infinity();
  double cublas_us = std::numeric_limits<double>::infinity();
};

// Note [Skinny matmul choice], step 2.
Timing time_both(Device device, const std::function<void()>& generated,
                 const std::function<void()>& cublas) {
  const int index = device.index();
  DeviceGuard guard(index);
  cudaStream_t stream = raw(Stream::current(device));
  generated();
  cublas();
  size_t flush_bytes = 2 * static_cast<size_t>(device_properties(index).l2CacheSize);
  Tensor scratch;
  try {
    scratch = empty_tensor({static_cast<int64_t>(flush_bytes)}, kUInt8, device);
  } catch (const Error&) {
    flush_bytes = 0;  // no memory to spare: timed without the writes
  }
  void* flush_at = flush_bytes ? scratch.data_ptr() : nullptr;
  auto evict = [&] {
    if (flush_bytes)
      KILN_CUDA_CHECK_DEVICE(cudaMemsetAsync(flush_at, 0, flush_bytes, stream), index);
  };
  std::array<cudaEvent_t, 4> ev{};
  for (cudaEvent_t& e : ev) KILN_CUDA_CHECK_DEVICE(cudaEventCreate(&e), index);
  Timing t;
  try {
    for (int round = 0; round < 2; ++round) {
      const std::function<void()>& first = round == 0 ? generated : cublas;
      const std::function<void()>& second = round == 0 ? cublas : generated;
      KILN_CUDA_CHECK_DEVICE(cudaLaunchHostFunc(stream, &hold_stream, nullptr), index);
      KILN_CUDA_CHECK_DEVICE(cudaEventRecord(ev[0], stream), index);
      for (int r = 0; r < kRuns; ++r) evict(), first();
      KILN_CUDA_CHECK_DEVICE(cudaEventRecord(ev[1], stream), index);
      for (int r = 0; r < kRuns; ++r) evict(), second();
      KILN_CUDA_CHECK_DEVICE(cudaEventRecord(ev[2], stream), index);
      for (int r = 0; r < kRuns; ++r) evict();
      KILN_CUDA_CHECK_DEVICE(cudaEventRecord(ev[3], stream), index);
      KILN_CUDA_CHECK_DEVICE(cudaEventSynchronize(ev[3]), index);
      float ms01 = 0, ms12 = 0, ms23 = 0;
      KILN_CUDA_CHECK_DEVICE(cudaEventElapsedTime(&ms01, ev[0], ev[1]), index);
      KILN_CUDA_CHECK_DEVICE(cudaEventElapsedTime(&ms12, ev[1], ev[2]), index);
      KILN_CUDA_CHECK_DEVICE(cudaEventElapsedTime(&ms23, ev[2], ev[3]), index);
      const double us_evict = 1000.0 * ms23 / kRuns;
      const double us_first = 1000.0 * ms01 / kRuns - us_evict;
      const double us_second = 1000.0 * ms12 / kRuns - us_evict;
      double& g = t.generated_us;
      double& c = t.cublas_us;
      g = std::min(g, round == 0 ? us_first : us_second);
      c = std::min(c, round == 0 ? us_second : us_first);
    }
  } catch (...) {
    for (cudaEvent_t e : ev) (void)cudaEventDestroy(e);
    throw;
  }
  for (cudaEvent_t e : ev) (void)cudaEventDestroy(e);
  return t;
}

}  // namespace

MatmulTuning::MatmulTuning() {
  ++t_tuning;
}
MatmulTuning::~MatmulTuning() {
  --t_tuning;
}

void set_skinny_path(SkinnyPath path) {
  g_path.store(static_cast<int>(path));
}

SkinnyPath skinny_path() {
  int p = g_path.load(std::memory_order_relaxed);
  if (p < 0) {
    int expected = -1;
    g_path.compare_exchange_strong(expected, static_cast<int>(path_from_env()));
    p = g_path.load();
  }
  return static_cast<SkinnyPath>(p);
}

SkinnyStats skinny_stats() {
  Choices& c = choices();
  return {c.generated.load(), c.cublas.load(), c.timed.load()};
}

namespace {

// Note [Skinny matmul choice] for problem `p`: true when the generated
// kernel ran, false when `run_cublas`'s way should (nothing queued), unless
// both were timed (then `out` holds the product). `default_generated`: the
// choice of step 3.
bool choose_and_run(const SkinnyMatmulKernel& kernel, const SkinnyMatmul& p,
                    const std::function<void()>& run_cublas, bool default_generated) {
  const Tensor &out = *p.out, &a = *p.a, &b = *p.b;
  Choices& all = choices();
  const ChoiceKey key{out.device().index(),
                      static_cast<int64_t>(out.dtype()),
                      out.size(0),
                      out.size(1),
                      a.size(1),
                      p.act,
                      p.bias != nullptr,
                      p.residual != nullptr,
                      a.stride(0),
                      b.stride(1),
                      out.stride(0),
                      p.residual ? p.residual->stride(0) : 0,
                      p.norm};
  Choice choice;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(all.mu);
    auto it = all.entries.find(key);
    if (it != all.entries.end()) {
      choice = it->second;
      known = true;
    }
  }
  if (!known) {
    // A timing kept on disk; else the default (Note [Skinny matmul choice]).
    std::optional<std::vector<char>> stored = persistent_load(disk_key(key));
    if (stored && stored->size() == 1 && ((*stored)[0] == 0 || (*stored)[0] == 1)) {
      choice = {(*stored)[0] == 1, true};
    } else {
      choice = {default_generated, false};
    }
  }
  if (!choice.timed && t_tuning > 0 && !capturing(out.device())) {
    const Timing t = time_both(
        out.device(), [&] { kernel.run(p); }, run_cublas);
    choice = {t.generated_us <= t.cublas_us, true};
    persistent_store(disk_key(key), std::vector<char>{static_cast<char>(choice.generated ? 1 : 0)});
    all.timed.fetch_add(1, std::memory_order_relaxed);
    KILN_LOG(Perf, "skinny matmul ", out.dtype(), " m=", out.size(0), " n=", out.size(1),
             " k=", a.size(1), p.norm ? " (norm prologue)" : "", ": generated ", t.generated_us,
             " us, ", p.norm ? "norm + product " : "cuBLASLt ", t.cublas_us, " us -> ",
             choice.generated ? "generated"
             : p.norm         ? "norm + product"
                              : "cuBLASLt");
    std::lock_guard<std::mutex> lock(all.mu);
    all.entries[key] = choice;
    // Both ran: `out` holds the product either way.
    (choice.generated ? all.generated : all.cublas).fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  if (!known) {
    std::lock_guard<std::mutex> lock(all.mu);
    all.entries.emplace(key, choice);
  }
  if (!choice.generated) {
    all.cublas.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  kernel.run(p);
  all.generated.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// Step 3 of Note [Skinny matmul choice]: up to `rows` rows the generated
// kernel unless the kernel advises against it, above only where it advises it.
bool default_generated(const SkinnyMatmulKernel& kernel, const SkinnyMatmul& p, int64_t rows) {
  const int advice = kernel.preferred ? kernel.preferred(p) : 0;
  return advice > 0 || (advice == 0 && p.out->size(0) <= rows);
}

}  // namespace

bool skinny_matmul_with_norm(const Tensor& out, const Tensor& a, const Tensor& b, Activation act,
                             const Tensor* bias, const Tensor* residual, int norm,
                             const Tensor* norm_weight, const Tensor* norm_bias, double norm_eps,
                             const std::function<void()>& run_unfused) {
  const SkinnyMatmulKernel kernel = skinny_matmul_kernel();
  const SkinnyPath forced = skinny_path();
  if (!kernel.takes || !kernel.run || forced == SkinnyPath::Cublas) return false;
  if (out.dim() != 2 || shares_storage(out, a) || shares_storage(out, b)) return false;
  if (residual && shares_storage(*residual, out)) return false;
  if (bias && bias->dim() != 1) return false;
  SkinnyMatmul p{&out, &a, &b, bias, residual, act_code(act)};
  p.norm = norm;
  p.norm_weight = norm_weight;
  p.norm_bias = norm_bias;
  p.norm_eps = norm_eps;
  if (!kernel.takes(p)) return false;
  if (forced == SkinnyPath::Generated || forced == SkinnyPath::GeneratedNorm) {
    kernel.run(p);
    choices().generated.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // The other way is two kernels: the prologue's by default (Note [Norm prologues]).
  return choose_and_run(kernel, p, run_unfused, default_generated(kernel, p, kNormRows));
}

int64_t skinny_norm_rows() {
  return kNormRows;
}

bool run_skinny(const Tensor& out, const Tensor& a, const Tensor& b, Activation act,
                const Tensor* bias, const Tensor* residual,
                const std::function<void()>& run_cublas) {
  const SkinnyMatmulKernel kernel = skinny_matmul_kernel();
  const SkinnyPath forced = skinny_path();
  if (!kernel.takes || !kernel.run || forced == SkinnyPath::Cublas) return false;
  if (residual && shares_storage(*residual, out)) return false;
  if (bias && bias->dim() != 1) return false;
  const SkinnyMatmul p{&out, &a, &b, bias, residual, act_code(act)};
  if (!kernel.takes(p)) return false;
  if (forced == SkinnyPath::Generated) {
    kernel.run(p);
    choices().generated.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return choose_and_run(kernel, p, run_cublas, default_generated(kernel, p, kDefaultRows));
}

}  // namespace kiln::cuda
