// Products with epilogues on CUDA against the eager CPU kernels: the
// generated skinny kernel (Note [Skinny matmuls]) forced for every row count
// it takes, with every epilogue and the layouts it reads or refuses;
// cuBLASLt's residual as C (Note [Matmul epilogues]) and its fallbacks; the
// choice between the two (Note [Skinny matmul choice]). Skips without a GPU.

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "jit/codegen_cuda/op_kernels/gemv.h"
#include "kiln/kiln.h"
#include "runtime/cuda/blas_lt.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace kiln {
namespace {

using testing::random_tensor;
using testing::to_cuda;
using OptT = std::optional<Tensor>;

// A sum of k products in another order than the CPU's, rounded once where
// eager rounds after the product and again after the residual: a few ulps.
testing::Tolerance tol(DType t, const std::string& act) {
  testing::Tolerance r = t == kFloat16    ? testing::Tolerance{4e-3, 2e-2}
                         : t == kBFloat16 ? testing::Tolerance{2e-2, 1e-1}
                                          : testing::Tolerance{1e-4, 1e-4};
  // The epilogue's GELU uses approximate exp2 and reciprocal.
  if (act == "gelu_tanh") r = {std::max(r.rtol, 2e-3), std::max(r.atol, 2e-3)};
  return r;
}

// linear_act by name: the trailing norm arguments keep their defaults.
Tensor linear_act(const Tensor& x, const Tensor& w, const OptT& bias, const std::string& act,
                  const OptT& residual) {
  return call_op("linear_act", {x, w, bias ? IValue(*bias) : IValue(), act,
                                residual ? IValue(*residual) : IValue()})[0]
      .to_tensor();
}

OptT on_cuda(const OptT& t) {
  return t ? OptT(to_cuda(*t)) : std::nullopt;
}

#define EXPECT_MATCHES_CPU(got, expected, dtype, act)                                 \
  do {                                                                                \
    std::string kiln_msg_ = testing::compare((got).cpu(), expected, tol(dtype, act)); \
    EXPECT_TRUE(kiln_msg_.empty()) << kiln_msg_;                                      \
  } while (0)

// Whether one-row products of large weights take the streamed form (Note
// [Streamed one-row products]) inside a scope: the tests of the other forms
// turn it off, since their shapes would take it.
class Streaming {
 public:
  explicit Streaming(bool on) : was_(jit::cuda::gemv_set_streaming(on)) {}
  ~Streaming() { jit::cuda::gemv_set_streaming(was_); }
  Streaming(const Streaming&) = delete;
  Streaming& operator=(const Streaming&) = delete;

 private:
  bool was_;
};

class SkinnyMatmulCuda : public ::testing::Test {
 protected:
  void SetUp() override { cuda::set_skinny_path(cuda::SkinnyPath::Auto); }
  void TearDown() override { cuda::set_skinny_path(cuda::SkinnyPath::Auto); }
};

// A product with a norm prologue may round the normalized x to the dtype, as
// eager does between its two kernels, or keep it in float32 (Note [Norm
// folded into the sums]). Either is right: `got` must be within tolerance of
// the span between the two references, elementwise.
std::string compare_between(const Tensor& got, const Tensor& rounded, const Tensor& unrounded,
                            DType t) {
  const Tensor a = rounded.to(kFloat32), b = unrounded.to(kFloat32);
  const Tensor g = got.cpu().to(kFloat32);
  const Tensor nearest =
      clamp(g, std::optional<Tensor>(minimum(a, b)), std::optional<Tensor>(maximum(a, b)));
  return testing::compare(g, nearest, tol(t, "gelu_tanh"));
}

// Every row count 1..16 the kernel takes, each epilogue, with and without
// bias and residual; k of one vector up to GPT-2's 3072 and n not a
// multiple of a block's outputs.
TEST_F(SkinnyMatmulCuda, GeneratedKernelMatchesTheCpu) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  cuda::set_skinny_path(cuda::SkinnyPath::Generated);
  const std::vector<std::pair<int64_t, int64_t>> kn = {{768, 2304}, {3072, 768}, {8, 5}, {136, 37}};
  uint64_t seed = 1;
  int cases = 0;
  for (DType t : {kFloat16, kBFloat16, kFloat32}) {
    for (int64_t m : {1, 2, 3, 4, 5, 8, 13, 16}) {
      for (const auto& [k, n] : kn) {
        if (t == kFloat32 && k == 8) continue;  // k = 8 floats is two vectors: covered by 136
        for (const char* act : {"none", "relu", "gelu_tanh"}) {
          for (int form = 0; form < 4; ++form) {
            const bool with_bias = form & 1, with_res = form & 2;
            SCOPED_TRACE(std::string(dtype_name(t)) + " m=" + std::to_string(m) +
                         " k=" + std::to_string(k) + " n=" + std::to_string(n) + " " + act +
                         (with_bias ? " bias" : "") + (with_res ? " residual" : ""));
            Tensor x = random_tensor({m, k}, t, "contiguous", seed++, -1, 1);
            Tensor w = random_tensor({n, k}, t, "contiguous", seed++, -1, 1);
            OptT bias =
                with_bias ? OptT(random_tensor({n}, t, "contiguous", seed++)) : std::nullopt;
            OptT res =
                with_res ? OptT(random_tensor({m, n}, t, "contiguous", seed++)) : std::nullopt;
            const cuda::SkinnyStats s0 = cuda::skinny_stats();
            Tensor got = linear_act(to_cuda(x), to_cuda(w), on_cuda(bias), act, on_cuda(res));
            EXPECT_EQ(cuda::skinny_stats().generated, s0.generated + 1) << "the kernel did not run";
            EXPECT_MATCHES_CPU(got, linear_act(x, w, bias, act, res), t, act);
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 8 * 12 * (4 + 4 + 3));
}

// Strided rows of x, out and the residual; products through mm and addmm;
// layouts the kernel refuses (k not a whole number of vectors, a weight
// stored by columns, a misaligned x) fall back to cuBLASLt with the same result.
TEST_F(SkinnyMatmulCuda, LayoutsItTakesAndLayoutsItRefuses) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  cuda::set_skinny_path(cuda::SkinnyPath::Generated);
  auto runs_generated = [](const std::function<void()>& f) {
    const int64_t before = cuda::skinny_stats().generated;
    f();
    return cuda::skinny_stats().generated > before;
  };
  const DType t = kFloat16;
  // x rows 16 elements apart (a slice of a wider tensor), the residual a slice too.
  Tensor xw = random_tensor({3, 80}, t, "contiguous", 1, -1, 1);
  Tensor x = xw.slice(1, 0, 64);
  Tensor w = random_tensor({24, 64}, t, "contiguous", 2, -1, 1);
  Tensor rw = random_tensor({3, 32}, t, "contiguous", 3);
  Tensor r = rw.slice(1, 8, 32);
  Tensor b = random_tensor({24}, t, "contiguous", 4);
  Tensor got;
  EXPECT_TRUE(runs_generated([&] {
    got = linear_act(to_cuda(xw).slice(1, 0, 64), to_cuda(w), to_cuda(b), "relu",
                     to_cuda(rw).slice(1, 8, 32));
  }));
  EXPECT_MATCHES_CPU(got, linear_act(x, w, b, "relu", r), t, "relu");
  EXPECT_TRUE(runs_generated([&] { got = mm(to_cuda(x), to_cuda(w).t()); }));
  EXPECT_MATCHES_CPU(got, mm(x, w.t()), t, "none");
  EXPECT_TRUE(runs_generated([&] { got = addmm(to_cuda(b), to_cuda(x), to_cuda(w).t()); }));
  EXPECT_MATCHES_CPU(got, addmm(b, x, w.t()), t, "none");
  // Refused: k = 12 is not a whole number of 8-element vectors.
  Tensor x12 = random_tensor({2, 12}, t, "contiguous", 5),
         w12 = random_tensor({6, 12}, t, "contiguous", 6);
  EXPECT_FALSE(runs_generated([&] { got = linear(to_cuda(x12), to_cuda(w12)); }));
  EXPECT_MATCHES_CPU(got, linear(x12, w12), t, "none");
  // Refused: the weight stored by columns (b's k dim is not dense).
  Tensor wc = random_tensor({64, 24}, t, "contiguous", 7);
  EXPECT_FALSE(runs_generated([&] { got = linear(to_cuda(x), to_cuda(wc).t()); }));
  EXPECT_MATCHES_CPU(got, linear(x, wc.t()), t, "none");
  // Refused: x's rows start 2 bytes off a 16-byte boundary.
  Tensor xo = random_tensor({2, 72}, t, "contiguous", 8);
  EXPECT_FALSE(runs_generated([&] { got = linear(to_cuda(xo).slice(1, 1, 65), to_cuda(w)); }));
  EXPECT_MATCHES_CPU(got, linear(xo.slice(1, 1, 65), w), t, "none");
  // Refused: 17 rows.
  Tensor x17 = random_tensor({17, 64}, t, "contiguous", 9);
  EXPECT_FALSE(runs_generated([&] { got = linear(to_cuda(x17), to_cuda(w)); }));
  EXPECT_MATCHES_CPU(got, linear(x17, w), t, "none");
}

// cuBLASLt's side of linear_act: the residual as C when it has the output's
// geometry, else added after; an activation with a residual; a full bias.
TEST_F(SkinnyMatmulCuda, CublasEpiloguesWithAResidual) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  cuda::set_skinny_path(cuda::SkinnyPath::Cublas);
  uint64_t seed = 300;
  for (DType t : {kFloat16, kBFloat16, kFloat32}) {
    for (const char* act : {"none", "gelu_tanh"}) {
      for (const char* res_layout : {"contiguous", "transposed", "expanded"}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + act + " residual " + res_layout);
        Tensor x = random_tensor({2, 40, 64}, t, "contiguous", seed++, -1, 1);
        Tensor w = random_tensor({48, 64}, t, "contiguous", seed++, -1, 1);
        Tensor b = random_tensor({48}, t, "contiguous", seed++);
        Tensor r = random_tensor({2, 40, 48}, t, res_layout, seed++);
        EXPECT_MATCHES_CPU(linear_act(to_cuda(x), to_cuda(w), to_cuda(b), act, to_cuda(r)),
                           linear_act(x, w, b, act, r), t, act);
        Tensor full_bias = random_tensor({40, 48}, t, "contiguous", seed++);
        EXPECT_MATCHES_CPU(linear_act(to_cuda(x), to_cuda(w), to_cuda(full_bias), act, to_cuda(r)),
                           linear_act(x, w, full_bias, act, r), t, act);
      }
    }
  }
}

// Note [Norm prologues]: LayerNorm and RMSNorm of x's rows inside the
// skinny kernel, against the CPU's norm then product, for every row count.
// By default the prologue is the generated kernel's up to skinny_norm_rows()
// rows (unless gemv_advice says otherwise) and where its tensor-core form is
// preferred, and elsewhere the norm's own kernel then the product (Note
// [Skinny matmul choice]); `forced` runs the generated kernel at every row
// count.
void check_norm_prologue(DType t, int64_t m, int64_t k, const char* norm, bool affine, bool forced,
                         uint64_t& seed, int64_t n = 40) {
  SCOPED_TRACE(std::string(dtype_name(t)) + " m=" + std::to_string(m) + " k=" + std::to_string(k) +
               " n=" + std::to_string(n) + " " + norm + (affine ? " affine" : "") +
               (forced ? " (generated forced)" : ""));
  cuda::set_skinny_path(forced ? cuda::SkinnyPath::Generated : cuda::SkinnyPath::Auto);
  // Rows of mean far from 0: the statistics must take it out.
  Tensor x = random_tensor({m, k}, t, "contiguous", seed++, 2, 5);
  Tensor w = random_tensor({n, k}, t, "contiguous", seed++, -1, 1);
  Tensor b = random_tensor({n}, t, "contiguous", seed++);
  Tensor r = random_tensor({m, n}, t, "contiguous", seed++);
  OptT nw = affine ? OptT(random_tensor({k}, t, "contiguous", seed++)) : std::nullopt;
  OptT nb = affine && std::string(norm) == "layer_norm"
                ? OptT(random_tensor({k}, t, "contiguous", seed++))
                : std::nullopt;
  auto call = [&](const Tensor& xx, const Tensor& ww, const Tensor& bb, const Tensor& rr,
                  const OptT& nww, const OptT& nbb) {
    return call_op("linear_act",
                   {xx, ww, bb, std::string("gelu_tanh"), rr, std::string(norm),
                    nww ? IValue(*nww) : IValue(), nbb ? IValue(*nbb) : IValue(), 1e-5})[0]
        .to_tensor();
  };
  const int64_t before = cuda::skinny_stats().generated;
  Tensor got = call(to_cuda(x), to_cuda(w), to_cuda(b), to_cuda(r), on_cuda(nw), on_cuda(nb));
  int major = 0, minor = 0;
  cuda::device_capability(0, &major, &minor);
  // Note [Skinny products better apart]: the fused kernel's default, or,
  // with the norm apart, the product's own (both take the generated kernel
  // up to the same rows by default).
  auto by_default = [&](bool with_norm) {
    const int advice = jit::cuda::gemv_advice(t, m, k, n, with_norm, major * 10 + minor,
                                              cuda::device_multiprocessors(0));
    return advice > 0 || (advice == 0 && m <= cuda::skinny_norm_rows());
  };
  const bool generated = forced || by_default(true) || by_default(false);
  EXPECT_EQ(cuda::skinny_stats().generated, before + (generated ? 1 : 0));
  auto f32 = [](const OptT& v) { return v ? OptT(v->to(kFloat32)) : std::nullopt; };
  const Tensor unrounded =
      call(x.to(kFloat32), w.to(kFloat32), b.to(kFloat32), r.to(kFloat32), f32(nw), f32(nb)).to(t);
  const std::string msg = compare_between(got, call(x, w, b, r, nw, nb), unrounded, t);
  EXPECT_TRUE(msg.empty()) << msg;
  cuda::set_skinny_path(cuda::SkinnyPath::Auto);
}

TEST_F(SkinnyMatmulCuda, NormPrologueMatchesTheCpu) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  uint64_t seed = 500;
  int cases = 0;
  // Every way by default (each generated variant is one NVRTC compile, so
  // the forced rows above the default take one width and the 16-bit types).
  for (DType t : {kFloat16, kBFloat16, kFloat32}) {
    for (int64_t m : {1, 2, 3, 5, 8, 16}) {
      for (int64_t k : {64, 768, 3072}) {
        for (const char* norm : {"layer_norm", "rms_norm"}) {
          for (bool affine : {true, false}) {
            check_norm_prologue(t, m, k, norm, affine, false, seed);
            ++cases;
          }
        }
      }
    }
  }
  for (DType t : {kFloat16, kBFloat16}) {
    for (int64_t m : {5, 8, 16}) {
      for (const char* norm : {"layer_norm", "rms_norm"}) {
        check_norm_prologue(t, m, 768, norm, true, true, seed);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 3 * 6 * 3 * 2 * 2 + 2 * 3 * 2);
}

// Note [Normalized x kept in registers]: one or two rows with a norm
// prologue where every block walks at least two steps (n = 32768 on the
// GPUs kiln targets): x normalized once per block, the statistics from a
// group's registers (k = 512: 16 or 32 lanes a group) or from the block's
// shared memory (k = 2048: 64 or 128).
TEST_F(SkinnyMatmulCuda, NormalizedXKeptWhereBlocksWalkSteps) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  Streaming off(false);
  uint64_t seed = 950;
  for (DType t : {kFloat16, kBFloat16, kFloat32}) {
    for (int64_t m : {1, 2}) {
      for (int64_t k : {512, 2048}) {
        for (const char* norm : {"layer_norm", "rms_norm"}) {
          check_norm_prologue(t, m, k, norm, true, true, seed, 32768);
        }
      }
    }
  }
}

// An LM head's n: more steps of outputs than blocks fit on the GPU, so each
// block walks several (Note [Skinny matmul kernel]), with and without the
// norm prologue whose statistics a block takes once.
TEST_F(SkinnyMatmulCuda, LargeNWalksSeveralStepsPerBlock) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  Streaming off(false);
  uint64_t seed = 900;
  for (int64_t m : {1, 4}) {
    check_norm_prologue(kFloat16, m, 768, "layer_norm", true, true, seed, 50257);
    cuda::set_skinny_path(cuda::SkinnyPath::Generated);
    SCOPED_TRACE("no prologue, m=" + std::to_string(m));
    Tensor x = random_tensor({m, 768}, kFloat16, "contiguous", seed++, -1, 1);
    Tensor w = random_tensor({50257, 768}, kFloat16, "contiguous", seed++, -1, 1);
    const int64_t before = cuda::skinny_stats().generated;
    Tensor got = linear_act(to_cuda(x), to_cuda(w), std::nullopt, "none", std::nullopt);
    EXPECT_EQ(cuda::skinny_stats().generated, before + 1) << "the kernel did not run";
    EXPECT_MATCHES_CPU(got, linear_act(x, w, std::nullopt, "none", std::nullopt), kFloat16, "none");
  }
}

// Note [Deeper groups where the grid stays full]: Llama 1B's shapes at one
// and two rows (k = 2048: 128 threads per group, halved to 64 at n = 8192 on
// any GPU and at n = 2048 on one of up to 170 SMs, an H100 or H200), with
// and without the RMSNorm prologue, against the CPU.
TEST_F(SkinnyMatmulCuda, DeeperGroupsMatchTheCpu) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  Streaming off(false);
  uint64_t seed = 950;
  for (int64_t m : {1, 2}) {
    for (int64_t n : {2048, 8192}) {
      check_norm_prologue(kFloat16, m, 2048, "rms_norm", true, true, seed, n);
      cuda::set_skinny_path(cuda::SkinnyPath::Generated);
      SCOPED_TRACE("no prologue, m=" + std::to_string(m) + " n=" + std::to_string(n));
      Tensor x = random_tensor({m, 2048}, kBFloat16, "contiguous", seed++, -1, 1);
      Tensor w = random_tensor({n, 2048}, kBFloat16, "contiguous", seed++, -1, 1);
      Tensor b = random_tensor({n}, kBFloat16, "contiguous", seed++);
      const int64_t before = cuda::skinny_stats().generated;
      Tensor got = linear_act(to_cuda(x), to_cuda(w), to_cuda(b), "relu", std::nullopt);
      EXPECT_EQ(cuda::skinny_stats().generated, before + 1) << "the kernel did not run";
      EXPECT_MATCHES_CPU(got, linear_act(x, w, b, "relu", std::nullopt), kBFloat16, "relu");
      cuda::set_skinny_path(cuda::SkinnyPath::Auto);
    }
  }
}

// One row through the generated kernel, forced, with bias, `act` and a
// residual, against the CPU.
void check_one_row_product(DType t, int64_t k, int64_t n, const char* act, uint64_t& seed) {
  cuda::set_skinny_path(cuda::SkinnyPath::Generated);
  SCOPED_TRACE(std::string(dtype_name(t)) + " no prologue, k=" + std::to_string(k) +
               " n=" + std::to_string(n) + " " + act);
  Tensor x = random_tensor({1, k}, t, "contiguous", seed++, -1, 1);
  Tensor w = random_tensor({n, k}, t, "contiguous", seed++, -1, 1);
  Tensor b = random_tensor({n}, t, "contiguous", seed++);
  Tensor r = random_tensor({1, n}, t, "contiguous", seed++);
  const int64_t before = cuda::skinny_stats().generated;
  Tensor got = linear_act(to_cuda(x), to_cuda(w), to_cuda(b), act, to_cuda(r));
  EXPECT_EQ(cuda::skinny_stats().generated, before + 1) << "the kernel did not run";
  EXPECT_MATCHES_CPU(got, linear_act(x, w, b, act, r), t, act);
  cuda::set_skinny_path(cuda::SkinnyPath::Auto);
}

// Note [Weights a step ahead]: one row where the blocks walk several steps,
// each round's weights loaded a round ahead: two rounds a step (k = 8192),
// one (k = 2048, n past the wide groups' threshold, with the kept x of an
// RMSNorm prologue), n not a multiple of a block's outputs, with bias and
// residual, against the CPU.
TEST_F(SkinnyMatmulCuda, WeightsAStepAheadMatchTheCpu) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  Streaming off(false);
  uint64_t seed = 1200;
  for (DType t : {kFloat16, kBFloat16, kFloat32}) {
    for (auto [k, n] : {std::pair<int64_t, int64_t>{8192, 2051}, {2048, 16389}}) {
      check_norm_prologue(t, 1, k, "rms_norm", true, true, seed, n);
      check_one_row_product(t, k, n, "none", seed);
    }
  }
}

// Note [Streamed one-row products]: one row of a weight of at least 8 MB,
// every dtype: Llama 1B's down (four warps per output) with bias and
// residual, its gate/up with the RMSNorm, GPT-2's head with the LayerNorm
// (three vectors per lane), and a k that leaves lanes of the last round
// idle (257 vectors); n not a multiple of a block's eight outputs.
TEST_F(SkinnyMatmulCuda, StreamedOneRowProductsMatchTheCpu) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  Streaming on(true);
  uint64_t seed = 1400;
  for (DType t : {kFloat16, kBFloat16, kFloat32}) {
    const int64_t grow = t == kFloat32 ? 1 : 2;  // past 8 MB in float32 too
    check_norm_prologue(t, 1, 2048, "rms_norm", true, true, seed, 16389 / grow);
    check_norm_prologue(t, 1, 768, "layer_norm", true, true, seed, 50257);
    check_norm_prologue(t, 1, t == kFloat32 ? 2052 : 2056, "layer_norm", false, true, seed, 4099);
    check_one_row_product(t, 8192, 2051, "gelu_tanh", seed);
    check_one_row_product(t, 2056, 4099, "gelu_tanh", seed);
  }
}

// A norm prologue's product is chosen too: inside MatmulTuning it is timed
// once against the norm then the product, and either way gives the CPU's
// result; later runs take the kept choice.
TEST_F(SkinnyMatmulCuda, NormPrologueIsTimedAgainstNormThenProduct) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  for (int64_t m : {1, 8, 16}) {
    SCOPED_TRACE("m=" + std::to_string(m));
    Tensor x = random_tensor({m, 768}, kFloat16, "contiguous", 20 + m, 2, 5);
    Tensor w = random_tensor({1000, 768}, kFloat16, "contiguous", 40 + m, -1, 1);
    Tensor nw = random_tensor({768}, kFloat16, "contiguous", 60 + m);
    Tensor nb = random_tensor({768}, kFloat16, "contiguous", 80 + m);
    auto call = [](const Tensor& xx, const Tensor& ww, const Tensor& nww, const Tensor& nbb) {
      return call_op("linear_act", {xx, ww, IValue(), std::string("gelu_tanh"), IValue(),
                                    std::string("layer_norm"), nww, nbb, 1e-5})[0]
          .to_tensor();
    };
    const Tensor expected = call(x, w, nw, nb);
    const Tensor dx = to_cuda(x), dw = to_cuda(w), dnw = to_cuda(nw), dnb = to_cuda(nb);
    const int64_t timed = cuda::skinny_stats().timed;
    {
      cuda::MatmulTuning tune;
      EXPECT_MATCHES_CPU(call(dx, dw, dnw, dnb), expected, kFloat16, "gelu_tanh");
      const int64_t after = cuda::skinny_stats().timed;
      // The prologue's problem, and perhaps the unfused product's inside the other way.
      EXPECT_LE(after, timed + 2);
      EXPECT_MATCHES_CPU(call(dx, dw, dnw, dnb), expected, kFloat16, "gelu_tanh");
      EXPECT_EQ(cuda::skinny_stats().timed, after);
    }
    EXPECT_MATCHES_CPU(call(dx, dw, dnw, dnb), expected, kFloat16, "gelu_tanh");
  }
}

// Note [Skinny matmul choice]: inside MatmulTuning a problem is timed once,
// both ways, and the result is right; later runs take the kept choice.
TEST_F(SkinnyMatmulCuda, TuningTimesEachProblemOnce) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  Tensor x = random_tensor({1, 768}, kFloat16, "contiguous", 1, -1, 1);
  Tensor w = random_tensor({1000, 768}, kFloat16, "contiguous", 2, -1, 1);
  Tensor b = random_tensor({1000}, kFloat16, "contiguous", 3);
  Tensor r = random_tensor({1, 1000}, kFloat16, "contiguous", 4);
  const Tensor expected = linear_act(x, w, b, "none", r);
  const Tensor dx = to_cuda(x), dw = to_cuda(w), db = to_cuda(b), dr = to_cuda(r);
  const int64_t timed = cuda::skinny_stats().timed;
  {
    cuda::MatmulTuning tune;
    EXPECT_MATCHES_CPU(linear_act(dx, dw, db, "none", dr), expected, kFloat16, "none");
    // Timed in this process (or found on disk from an earlier one): not again.
    const int64_t after = cuda::skinny_stats().timed;
    EXPECT_LE(after, timed + 1);
    EXPECT_MATCHES_CPU(linear_act(dx, dw, db, "none", dr), expected, kFloat16, "none");
    EXPECT_EQ(cuda::skinny_stats().timed, after);
  }
  EXPECT_MATCHES_CPU(linear_act(dx, dw, db, "none", dr), expected, kFloat16, "none");
}

// Mode::MaxAutotune: the first run of a compiled entry times its skinny
// products (once, or found on disk); Mode::Default times nothing.
TEST_F(SkinnyMatmulCuda, MaxAutotuneTimesOnTheFirstRun) {
  KILN_REQUIRE_CUDA();
  Tensor x, w, b, xd, wd, bd;
  {
    EagerGuard eager;
    x = random_tensor({2, 512}, kFloat16, "contiguous", 11, -1, 1);
    w = random_tensor({1240, 512}, kFloat16, "contiguous", 12, -1, 1);
    b = random_tensor({1240}, kFloat16, "contiguous", 13);
    xd = to_cuda(x), wd = to_cuda(w), bd = to_cuda(b);
  }
  Tensor expected;
  {
    EagerGuard eager;
    expected = relu(linear(x, w, b));
  }
  for (jit::Mode mode : {jit::Mode::Default, jit::Mode::MaxAutotune}) {
    SCOPED_TRACE(mode == jit::Mode::Default ? "default" : "max-autotune");
    // A problem of its own per mode (n differs), so neither sees the other's choice.
    const int64_t n = mode == jit::Mode::Default ? 1240 : 1232;
    auto f = jit::compile(
        [&](const Tensor& in) { return relu(linear(in, wd.narrow(0, 0, n), bd.narrow(0, 0, n))); },
        {.name = "skinny", .mode = mode});
    const int64_t timed = cuda::skinny_stats().timed;
    Tensor got = f(xd);
    const int64_t after = cuda::skinny_stats().timed;
    if (mode == jit::Mode::Default) {
      EXPECT_EQ(after, timed);
    } else {
      EXPECT_LE(after, timed + 1);
    }
    EXPECT_MATCHES_CPU(got, expected.narrow(1, 0, n), kFloat16, "relu");
    EXPECT_MATCHES_CPU(f(xd), expected.narrow(1, 0, n), kFloat16, "relu");  // a replay
    EXPECT_EQ(cuda::skinny_stats().timed, after);
  }
}

// Without a kept choice, one row goes to the generated kernel (the default
// of Note [Skinny matmul choice]); an odd shape no timing here stores.
TEST_F(SkinnyMatmulCuda, DefaultTakesTheGeneratedKernelForOneRow) {
  EagerGuard eager;
  KILN_REQUIRE_CUDA();
  Tensor x = random_tensor({1, 88}, kFloat16, "contiguous", 1, -1, 1);
  Tensor w = random_tensor({72, 88}, kFloat16, "contiguous", 2, -1, 1);
  const int64_t before = cuda::skinny_stats().generated;
  Tensor got = linear(to_cuda(x), to_cuda(w));
  EXPECT_EQ(cuda::skinny_stats().generated, before + 1);
  EXPECT_MATCHES_CPU(got, linear(x, w), kFloat16, "none");
}

}  // namespace
}  // namespace kiln
