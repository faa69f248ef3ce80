// The skinny-matmul kernel's host side (Note [Skinny matmul kernel]): its
// configuration for GPT-2's decode products, and NVRTC compiling every
// epilogue and row count to SASS for sm_90 and sm_80. No GPU needed; the GPU
// suite is tests/runtime/cuda/skinny_matmul_cuda_test.cpp.

#include "jit/codegen_cuda/op_kernels/gemv.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "jit/codegen_cuda/nvrtc.h"
#include "runtime/cuda/cuda_runtime.h"

namespace {

namespace kc = kiln::jit::cuda;

class Gemv : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kiln::cuda::built()) GTEST_SKIP() << "kiln was built without the CUDA toolkit (no NVRTC)";
  }
};

// Note [Skinny matmul kernel]: at least two 16-byte vectors of k per thread,
// rn grows with m, unroll * rn = 4.
TEST_F(Gemv, ConfigurationForGpt2DecodeProducts) {
  struct Case {
    kiln::DType t;
    int64_t m, k;
    int tpr, rn, unroll;
  };
  const Case cases[] = {
      {kiln::kFloat16, 1, 768, 32, 1, 4},    // qkv, proj, fc: 96 vectors of k
      {kiln::kFloat16, 1, 3072, 128, 1, 4},  // down: 384 vectors
      {kiln::kBFloat16, 2, 768, 32, 1, 4},     {kiln::kFloat16, 4, 768, 32, 2, 2},
      {kiln::kFloat16, 8, 3072, 128, 2, 2},    {kiln::kFloat16, 16, 768, 32, 4, 1},
      {kiln::kFloat32, 1, 768, 64, 1, 4},  // 192 vectors of 4 floats
      {kiln::kFloat16, 1, 64, 8, 1, 4},    // 8 vectors: the smallest group
      {kiln::kFloat16, 1, 1 << 16, 256, 1, 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(kiln::dtype_name(c.t)) + " m=" + std::to_string(c.m) +
                 " k=" + std::to_string(c.k));
    const kc::GemvSpec s = kc::gemv_spec(c.t, c.m, c.k, 0, true, false);
    EXPECT_EQ(s.tpr, c.tpr);
    EXPECT_EQ(s.rn, c.rn);
    EXPECT_EQ(s.unroll, c.unroll);
    EXPECT_EQ(kc::gemv_outputs_per_block(s), 256 / c.tpr * c.rn);
  }
  // 768 outputs of k = 3072 (GPT-2's down projection): 768 / 2 = 384 blocks.
  EXPECT_EQ(kc::gemv_outputs_per_block(kc::gemv_spec(kiln::kFloat16, 1, 3072, 0, true, true)), 2);
  EXPECT_EQ(kc::gemv_vector(kiln::kFloat16), 8);
  EXPECT_EQ(kc::gemv_vector(kiln::kFloat32), 4);
}

// The name spells every choice the source depends on.
TEST_F(Gemv, NamesDifferWhereSourcesDo) {
  const kc::GemvSpec a = kc::gemv_spec(kiln::kFloat16, 1, 768, 2, true, true);
  kc::GemvSpec b = a;
  b.residual = false;
  kc::GemvSpec c = a;
  c.act = 1;
  kc::GemvSpec d = a;
  d.dtype = kiln::kBFloat16;
  kc::GemvSpec e = kc::gemv_spec(kiln::kFloat16, 1, 768, 2, true, true, 1, true, true);
  kc::GemvSpec f = kc::gemv_spec(kiln::kFloat16, 1, 768, 2, true, true, 2, true, true);
  kc::GemvSpec g = a;
  g.early = true;
  EXPECT_EQ(kc::gemv_name(g), "kiln_gemv_f16_m1_t32_r1_u4_a2_b_res_e");
  EXPECT_EQ(kc::gemv_name(a), "kiln_gemv_f16_m1_t32_r1_u4_a2_b_res");
  EXPECT_EQ(kc::gemv_name(e), "kiln_gemv_f16_m1_t32_r1_u4_a2_b_res_n1wb");
  EXPECT_EQ(kc::gemv_name(f), "kiln_gemv_f16_m1_t32_r1_u4_a2_b_res_n2w") << "rms_norm has no bias";
  for (const kc::GemvSpec* o : {&b, &c, &d, &e, &f, &g}) {
    EXPECT_NE(kc::gemv_name(*o), kc::gemv_name(a));
    EXPECT_NE(kc::gemv_source(*o), kc::gemv_source(a));
  }
}

// Note [Wide groups for long products]: one or two rows take two outputs
// per group (a name of their own, twice the outputs per block); from 3 rows
// a group has two already.
TEST_F(Gemv, WideGroupsForLongProducts) {
  for (int64_t m : {1, 2, 3, 8}) {
    kc::GemvSpec s = kc::gemv_spec(kiln::kFloat16, m, 2048, 0, false, false, 2, true, false);
    const std::string name = kc::gemv_name(s);
    const int64_t outputs = kc::gemv_outputs_per_block(s);
    const int unroll = s.unroll;
    kc::gemv_widen(s);
    EXPECT_EQ(s.unroll, unroll);
    if (m <= 2) {
      EXPECT_EQ(s.rn, 2);
      EXPECT_NE(kc::gemv_name(s), name);
      EXPECT_EQ(kc::gemv_outputs_per_block(s), 2 * outputs);
    } else {
      EXPECT_EQ(kc::gemv_name(s), name);
    }
  }
}

// Note [Deeper groups where the grid stays full]: on 132 SMs, Llama 1B's
// q/o projection, its gate/up and its head halve their groups (at least 396
// steps of outputs either way); GPT-2's layer products and Llama's k/v do
// not, nor does the smallest group or the tensor-core form.
TEST_F(Gemv, DeeperGroupsWhereTheGridStaysFull) {
  struct Case {
    int64_t m, k, n;
    int tpr;  // after gemv_deepen
  };
  const Case cases[] = {
      {1, 2048, 2048, 64}, {1, 2048, 8192, 64}, {1, 2048, 128256, 64}, {1, 2048, 512, 128},
      {1, 768, 768, 32},   {1, 768, 2304, 32},  {1, 768, 3072, 32},    {1, 3072, 768, 128},
      {1, 768, 50257, 16}, {2, 2048, 8192, 64}, {4, 2048, 8192, 64},   {1, 64, 1 << 20, 8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) +
                 " n=" + std::to_string(c.n));
    kc::GemvSpec s = kc::gemv_spec(kiln::kFloat16, c.m, c.k, 0, false, false);
    if (c.n >= kc::kGemvWideN) kc::gemv_widen(s);
    const kc::GemvSpec before = s;
    kc::gemv_deepen(s, c.n, 132);
    EXPECT_EQ(s.tpr, c.tpr);
    EXPECT_EQ(s.rn, before.rn);
    EXPECT_EQ(s.unroll, before.unroll);
    if (s.tpr != before.tpr) {
      EXPECT_NE(kc::gemv_name(s), kc::gemv_name(before));
      EXPECT_GE((c.n + kc::gemv_outputs_per_block(s) - 1) / kc::gemv_outputs_per_block(s),
                kc::kGemvDeepStepsPerSm * 132);
    }
  }
  kc::GemvSpec tc = kc::gemv_spec(kiln::kFloat16, 8, 2048, 0, false, false);
  kc::gemv_take_mma(tc);
  const std::string name = kc::gemv_name(tc);
  kc::gemv_deepen(tc, 1 << 20, 132);
  EXPECT_EQ(kc::gemv_name(tc), name);
}

// Note [Normalized x kept in registers]: one or two rows with a norm
// prologue, where a lane's vectors cover k in one pass after the group size
// is settled (a deepened group of Llama's head still covers 2048; 16 lanes
// a group, deepened or widened, do not cover GPT-2's 768) and the blocks walk at least
// two steps each (not GPT-2's layer products or Llama's q projection on 132
// SMs); never without a prologue, from three rows, or in the tensor-core form.
TEST_F(Gemv, NormalizedXKeptInRegisters) {
  struct Case {
    int64_t m, k, n;
    int norm;
    bool keep;
  };
  const Case cases[] = {
      {1, 512, 32768, 1, true},  {2, 512, 32768, 2, true},   {1, 2048, 8192, 2, true},
      {1, 768, 8192, 1, false},  {1, 2048, 128256, 2, true}, {1, 768, 2304, 1, false},
      {2, 768, 3072, 1, false},  {1, 2048, 2048, 2, false},  {1, 768, 50257, 1, false},
      {1, 64, 64, 1, false},     {3, 768, 8192, 1, false},   {1, 768, 768, 0, false},
      {2, 3072, 8192, 0, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) +
                 " n=" + std::to_string(c.n));
    kc::GemvSpec s = kc::gemv_spec(kiln::kFloat16, c.m, c.k, 0, true, false, c.norm, true, true);
    if (c.n >= kc::kGemvWideN) kc::gemv_widen(s);
    kc::gemv_deepen(s, c.n, 132);
    kc::gemv_keep_x(s, c.k, c.n, 132);
    EXPECT_EQ(s.keep_x, c.keep);
    if (s.keep_x) {
      const int64_t kv = c.k / kc::gemv_vector(kiln::kFloat16);
      EXPECT_LE(kv, static_cast<int64_t>(s.tpr) * s.unroll) << "one pass covers k";
      EXPECT_NE(kc::gemv_name(s).find("_xr"), std::string::npos);
    }
  }
  kc::GemvSpec tc = kc::gemv_spec(kiln::kFloat16, 8, 768, 0, true, false, 1, true, true);
  kc::gemv_take_mma(tc);
  kc::gemv_keep_x(tc, 768, 1 << 20, 132);
  EXPECT_FALSE(tc.keep_x);
}

// Note [Norm folded into the sums]: at one row, with a prologue, in the FMA
// form without kept x, where the grid's blocks are resident at once on 132
// SMs (GPT-2's QKV and FC: 288 and 384 steps), without rounds no lane can
// use, with a name and a launch bound of its own and no statistics block.
// Not GPT-2's head (its blocks walk steps), two rows, the kept-x or
// tensor-core forms, or without a norm.
TEST_F(Gemv, NormFoldedWhereTheGridIsResident) {
  struct Case {
    int64_t m, k, n;
    int norm;
    bool fold;
    int unroll;  // after gemv_fold_norm
  };
  const Case cases[] = {
      {1, 768, 2304, 1, true, 3},   {1, 768, 3072, 1, true, 3},  {1, 2048, 512, 2, true, 2},
      {1, 768, 50257, 1, false, 4}, {2, 768, 2304, 1, false, 4}, {1, 2048, 8192, 2, false, 4},
      {1, 768, 2304, 0, false, 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) +
                 " n=" + std::to_string(c.n) + " norm=" + std::to_string(c.norm));
    kc::GemvSpec s = kc::gemv_spec(kiln::kFloat16, c.m, c.k, 2, true, false, c.norm, true, true);
    if (c.n >= kc::kGemvWideN) kc::gemv_widen(s);
    kc::gemv_deepen(s, c.n, 132);
    kc::gemv_keep_x(s, c.k, c.n, 132);
    const std::string plain = kc::gemv_name(s);
    kc::gemv_fold_norm(s, c.k, c.n, 132);
    EXPECT_EQ(s.fold_norm, c.fold);
    EXPECT_EQ(s.unroll, c.unroll);
    kc::gemv_norm_smem(s, c.k);
    if (!s.fold_norm) {
      EXPECT_EQ(kc::gemv_name(s).find("_fn"), std::string::npos);
      continue;
    }
    const int64_t kv = c.k / kc::gemv_vector(kiln::kFloat16);
    EXPECT_LT(static_cast<int64_t>(s.unroll - 1) * s.tpr, kv) << "a round no lane uses";
    EXPECT_LE((c.n + kc::gemv_outputs_per_block(s) - 1) / kc::gemv_outputs_per_block(s),
              kc::kGemvFoldStepsPerSm * 132);
    EXPECT_FALSE(s.norm_smem) << "no statistics block to load the norm's vectors beside";
    EXPECT_NE(kc::gemv_name(s), plain);
    EXPECT_NE(kc::gemv_name(s).find("_fn"), std::string::npos);
    const std::string src = kc::gemv_source(s);
    EXPECT_NE(src.find("#define KFOLD 1"), std::string::npos);
    EXPECT_NE(src.find("__launch_bounds__(256, 3)"), std::string::npos);
  }
  kc::GemvSpec tc = kc::gemv_spec(kiln::kFloat16, 1, 768, 0, true, false, 1, true, true);
  kc::gemv_take_mma(tc);
  kc::gemv_fold_norm(tc, 768, 2304, 132);
  EXPECT_FALSE(tc.fold_norm) << "the tensor-core form takes its statistics first";
}

// Note [Weights a step ahead]: one row in the FMA form, where the blocks
// walk at least two steps each on 132 SMs (Llama 1B's down, two rounds a
// step; its gate/up with the kept x, one round; GPT-2's LM head), with a
// name and a launch bound of its own. Not GPT-2's QKV (folded, resident),
// a short n, two rows, or the tensor-core form.
TEST_F(Gemv, WeightsAStepAheadWhereBlocksWalkSteps) {
  struct Case {
    int64_t m, k, n;
    int norm;
    bool pipe;
  };
  const Case cases[] = {
      {1, 8192, 2048, 0, true}, {1, 2048, 16384, 2, true}, {1, 768, 50257, 1, true},
      {1, 768, 2304, 1, false}, {1, 2048, 2048, 0, false}, {2, 8192, 2048, 0, false},
      {1, 768, 3072, 0, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) +
                 " n=" + std::to_string(c.n));
    kc::GemvSpec s = kc::gemv_spec(kiln::kFloat16, c.m, c.k, 0, false, true, c.norm, true, false);
    if (c.n >= kc::kGemvWideN) kc::gemv_widen(s);
    kc::gemv_deepen(s, c.n, 132);
    kc::gemv_keep_x(s, c.k, c.n, 132);
    kc::gemv_fold_norm(s, c.k, c.n, 132);
    const std::string before = kc::gemv_name(s);
    kc::gemv_pipe(s, c.n, 132);
    EXPECT_EQ(s.pipe, c.pipe);
    if (!s.pipe) {
      EXPECT_EQ(kc::gemv_name(s), before);
      continue;
    }
    EXPECT_NE(kc::gemv_name(s).find("_pp"), std::string::npos);
    const std::string src = kc::gemv_source(s);
    EXPECT_NE(src.find("#define KPIPE 1"), std::string::npos);
    EXPECT_NE(src.find("__launch_bounds__(256, 2)"), std::string::npos);
  }
  kc::GemvSpec tc = kc::gemv_spec(kiln::kFloat16, 1, 768, 0, true, false);
  kc::gemv_take_mma(tc);
  kc::gemv_pipe(tc, 1 << 20, 132);
  EXPECT_FALSE(tc.pipe) << "the tensor-core form walks its tiles without it";
}

// Note [Tensor-core skinny kernel]: from 5 rows, 16-bit dtypes, sm_80 on;
// Note [Skinny products better apart], on an H200's 132 SMs: Llama 1B's
// q/k/v with its RMSNorm and its LM head take the other way at one row; its
// gate/up and down, GPT-2's products, and the tensor-core rows do not.
TEST_F(Gemv, SomeProductsRunBetterApart) {
  if (const char* v = std::getenv("KILN_GEMV_APART"); v && *v && std::string(v) != "both") {
    GTEST_SKIP() << "KILN_GEMV_APART=" << v << " changes the advice";
  }
  const kiln::DType bf = kiln::kBFloat16, f16 = kiln::kFloat16;
  // Streamed, the q/k/v product keeps its prologue (Note [Streamed one-row
  // products]); without the form, the norm runs apart.
  EXPECT_EQ(kc::gemv_advice(bf, 1, 2048, 3072, true, 90, 132), 0);
  EXPECT_EQ(kc::gemv_advice(bf, 1, 2048, 128256, true, 90, 132), 0);
  EXPECT_EQ(kc::gemv_advice(bf, 1, 2048, 128256, false, 90, 132), 0);
  const bool was = kc::gemv_set_streaming(false);
  EXPECT_EQ(kc::gemv_advice(bf, 1, 2048, 3072, true, 90, 132), -1);
  EXPECT_EQ(kc::gemv_advice(bf, 1, 2048, 128256, true, 90, 132), -1);
  EXPECT_EQ(kc::gemv_advice(bf, 1, 2048, 128256, false, 90, 132), -1);
  kc::gemv_set_streaming(was);
  EXPECT_EQ(kc::gemv_advice(bf, 1, 2048, 3072, false, 90, 132), 0);
  EXPECT_EQ(kc::gemv_advice(bf, 1, 2048, 16384, true, 90, 132), 0);
  EXPECT_EQ(kc::gemv_advice(bf, 1, 8192, 2048, false, 90, 132), 0);
  EXPECT_EQ(kc::gemv_advice(f16, 1, 768, 2304, true, 90, 132), 0);
  EXPECT_EQ(kc::gemv_advice(f16, 1, 768, 50257, true, 90, 132), 0);
  EXPECT_EQ(kc::gemv_advice(f16, 8, 768, 50257, true, 90, 132), 1);
  EXPECT_EQ(kc::gemv_advice(bf, 8, 2048, 8192, false, 90, 132), 0);
}

// Note [Streamed one-row products]: one row, a weight of at least 8 MB, a
// lane's share of a row at most 8 vectors loaded in one round, one output
// per group; not at two rows, not below the size, not past 256 * 8 vectors.
TEST_F(Gemv, StreamedOneRowProducts) {
  struct Case {
    kiln::DType t;
    int64_t k, n;
    int norm;
    bool streamed;
    int tpr, unroll;
  };
  const Case cases[] = {
      {kiln::kBFloat16, 2048, 16384, 2, true, 32, 8},  // Llama 1B gate/up: 256 vectors of k
      {kiln::kBFloat16, 8192, 2048, 0, true, 128, 8},  // its down: four warps per output
      {kiln::kBFloat16, 2048, 3072, 2, true, 32, 8},   // q/k/v, 12.6 MB
      {kiln::kFloat16, 768, 50257, 1, true, 32, 3},    // GPT-2's head: 96 vectors
      {kiln::kFloat32, 2048, 1024, 0, true, 64, 8},    // 512 vectors of 4 floats
      {kiln::kFloat16, 3072, 768, 0, false, 0, 0},     // 4.7 MB
      {kiln::kFloat16, 32768, 256, 0, false, 0, 0},    // 4096 vectors a row
  };
  for (const Case& c : cases) {
    kc::GemvSpec s = kc::gemv_spec(c.t, 1, c.k, 0, true, false, c.norm, c.norm != 0);
    SCOPED_TRACE(kc::gemv_name(s) + " n=" + std::to_string(c.n));
    ASSERT_EQ(kc::gemv_stream(s, c.k, c.n), c.streamed);
    EXPECT_EQ(s.stream, c.streamed);
    if (!c.streamed) continue;
    EXPECT_EQ(s.tpr, c.tpr);
    EXPECT_EQ(s.unroll, c.unroll);
    EXPECT_EQ(s.rn, 1);
    EXPECT_FALSE(s.keep_x || s.pipe || s.fold_norm || s.norm_smem);
    EXPECT_NE(kc::gemv_name(s).find("_st"), std::string::npos);
    // x normalized into shared memory where there is a norm.
    EXPECT_EQ(kc::gemv_shared_bytes(s, c.k), c.norm ? static_cast<size_t>(c.k) * 2 : 0u);
  }
  kc::GemvSpec two = kc::gemv_spec(kiln::kFloat16, 2, 2048, 0, false, false);
  EXPECT_FALSE(kc::gemv_stream(two, 2048, 16384)) << "two rows";
}

// tiles of 16 outputs; a name of its own.
TEST_F(Gemv, TensorCoreFormFromFiveRows) {
  EXPECT_FALSE(kc::gemv_uses_mma(kiln::kFloat16, 4, 90));
  EXPECT_TRUE(kc::gemv_uses_mma(kiln::kFloat16, 5, 90));
  EXPECT_TRUE(kc::gemv_uses_mma(kiln::kBFloat16, 16, 80));
  EXPECT_FALSE(kc::gemv_uses_mma(kiln::kFloat16, 17, 90));
  EXPECT_FALSE(kc::gemv_uses_mma(kiln::kFloat32, 8, 90));
  EXPECT_FALSE(kc::gemv_uses_mma(kiln::kFloat16, 8, 75)) << "m16n8k16 needs sm_80";
  EXPECT_TRUE(kc::gemv_uses_mma(kiln::kFloat16, 1, 90, 1)) << "KILN_GEMV_MMA_ROWS=1";
  // Note [Tensor-core skinny default]: GPT-2's products and the smaller of
  // Llama's; not a 32 MB weight, nor k > 1024 at 16 rows, nor below 5 rows.
  EXPECT_TRUE(kc::gemv_preferred(kiln::kFloat16, 8, 768, 50257, 90));
  EXPECT_TRUE(kc::gemv_preferred(kiln::kBFloat16, 8, 3072, 768, 90));
  EXPECT_TRUE(kc::gemv_preferred(kiln::kBFloat16, 5, 2048, 2048, 90));
  EXPECT_FALSE(kc::gemv_preferred(kiln::kBFloat16, 8, 2048, 8192, 90));
  EXPECT_FALSE(kc::gemv_preferred(kiln::kBFloat16, 16, 2048, 2048, 90));
  EXPECT_TRUE(kc::gemv_preferred(kiln::kFloat16, 16, 768, 3072, 90));
  EXPECT_FALSE(kc::gemv_preferred(kiln::kFloat16, 4, 768, 768, 90));
  EXPECT_FALSE(kc::gemv_preferred(kiln::kFloat32, 8, 768, 768, 90));
  EXPECT_FALSE(kc::gemv_preferred(kiln::kFloat16, 8, 768, 768, 75));
  kc::GemvSpec s = kc::gemv_spec(kiln::kFloat16, 8, 768, 2, true, false, 1, true, true);
  const std::string fma = kc::gemv_name(s);
  kc::gemv_take_mma(s);
  EXPECT_EQ(kc::gemv_name(s), "kiln_gemv_f16_m8_tc_u4_a2_b_n1wb_f")
      << "Note [Loads in flight before the first mma]: the fence is the default";
  EXPECT_NE(kc::gemv_source(s).find("#define KFENCE 1"), std::string::npos);
  EXPECT_NE(kc::gemv_name(s), fma);
  EXPECT_EQ(kc::gemv_outputs_per_block(s), 16);
  for (int64_t m : {5, 9, 16}) {
    for (kiln::DType t : {kiln::kFloat16, kiln::kBFloat16}) {
      kc::GemvSpec tc = kc::gemv_spec(t, m, 2048, 0, false, true, 2, true, false);
      kc::gemv_take_mma(tc);
      SCOPED_TRACE(kc::gemv_name(tc));
      const std::string src = kc::gemv_source(tc);
      EXPECT_NE(src.find(t == kiln::kBFloat16 ? "m16n8k16.row.col.f32.bf16.bf16.f32"
                                              : "m16n8k16.row.col.f32.f16.f16.f32"),
                std::string::npos);
      EXPECT_NE(src.find(m > 8 ? "#define KB 2" : "#define KB 1"), std::string::npos);
      kc::CompiledKernel ck = kc::nvrtc_compile(src, kc::gemv_name(tc), 80);
      EXPECT_FALSE(ck.is_ptx);
    }
  }
}

// The op-kernel source test compiles gemv_source_samples() (every dtype, row
// counts 1 to 16, each epilogue, the norm prologues) for sm_90; here the
// fullest epilogue and a norm prologue at each source shape (x in registers,
// per-step x loads, groups across warps) for sm_80 too.
TEST_F(Gemv, FullEpilogueCompilesForAmpere) {
  int compiled = 0;
  for (kiln::DType t : {kiln::kFloat16, kiln::kBFloat16, kiln::kFloat32}) {
    for (int64_t m : {1, 5, 16}) {
      const kc::GemvSpec s =
          kc::gemv_spec(t, m, m == 5 ? 4096 : 768, 2, true, true, m == 16 ? 2 : 1, true, true);
      SCOPED_TRACE(kc::gemv_name(s));
      kc::CompiledKernel ck = kc::nvrtc_compile(kc::gemv_source(s), kc::gemv_name(s), 80);
      EXPECT_FALSE(ck.is_ptx);
      EXPECT_GT(ck.image.size(), 1000u);
      ++compiled;
    }
  }
  EXPECT_EQ(compiled, 9);
}

}  // namespace
