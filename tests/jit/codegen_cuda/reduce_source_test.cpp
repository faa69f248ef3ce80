// Generated reduction-group kernels (Note [CUDA reduction ABI]) compile to
// SASS for sm_90 with NVRTC. The groups are those fusion makes for the golden
// patterns of tests/jit/passes/fusion_reduce_test.cpp, built here with the same
// kernel builder; every schedule and walk class is compiled. Needs the
// toolkit, not a GPU.

#include "jit/codegen_cuda/reduce_source.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "jit/codegen_cuda/nvrtc.h"
#include "jit/codegen_cuda/reduce_plan.h"
#include "jit/record/decompose.h"
#include "kiln/kiln.h"
#include "runtime/cuda/cuda_runtime.h"
#include "tests/support/testing.h"

namespace {

using kiln::DType;
using kiln::jit::KernelBuilder;
using kiln::jit::Prim;
using kiln::jit::ReductionKernel;
using kiln::jit::RowOp;
namespace kc = kiln::jit::cuda;

class CudaReduceSource : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kiln::cuda::built()) GTEST_SKIP() << "kiln was built without the CUDA toolkit (no NVRTC)";
  }
};

struct Pattern {
  std::string name;
  ReductionKernel kernel;
};

// A builder over inputs of memory dtypes `inputs` (round_to reads them).
KernelBuilder builder(std::vector<DType> inputs) {
  KernelBuilder b;
  b.kernel().inputs = std::move(inputs);
  return b;
}

kiln::jit::PointwiseKernel finish(KernelBuilder& b, std::vector<DType> outputs,
                                  std::vector<int32_t> stores) {
  kiln::jit::PointwiseKernel k = b.kernel();
  k.outputs = std::move(outputs);
  k.stores = std::move(stores);
  return k;
}

// The groups fusion builds for the golden patterns, in dtype `t`.
std::vector<Pattern> patterns(DType t) {
  const DType f = kiln::kFloat32;
  std::vector<Pattern> out;
  auto add = [&](std::string name, RowOp op, const std::function<void(ReductionKernel&)>& build) {
    ReductionKernel k;
    k.op = op;
    k.eps = 1e-5;
    k.correction = 1;
    build(k);
    out.push_back({std::move(name), std::move(k)});
  };
  // Plain input, epilogue: the result rounded to `t`.
  auto plain_prologue = [&](ReductionKernel& k) {
    KernelBuilder b = builder({t});
    int32_t x = b.load(0, t);
    k.prologue = finish(b, {f}, {x});
  };
  auto round_epilogue = [&](ReductionKernel& k) {
    KernelBuilder b = builder({f});
    int32_t c = b.load(0, f);
    k.epilogue = finish(b, {t}, {b.round_to(c, t)});
  };
  add("softmax", RowOp::Softmax, [&](ReductionKernel& k) {
    plain_prologue(k);
    round_epilogue(k);
  });
  add("scaled_masked_softmax", RowOp::Softmax, [&](ReductionKernel& k) {
    KernelBuilder b = builder({t, t});
    int32_t s = b.op(Prim::Mul, f, b.load(0, t), b.constant(0.125, f));
    s = b.op(Prim::Add, f, b.round_to(s, t), b.load(1, t));
    k.prologue = finish(b, {f}, {b.round_to(s, t)});
    round_epilogue(k);
  });
  add("log_softmax", RowOp::LogSoftmax, [&](ReductionKernel& k) {
    plain_prologue(k);
    round_epilogue(k);
  });
  auto affine_epilogue = [&](ReductionKernel& k, bool bias) {
    KernelBuilder b = builder(bias ? std::vector<DType>{f, t, t} : std::vector<DType>{f, t});
    int32_t y = b.round_to(b.load(0, f), t);
    y = b.round_to(b.op(Prim::Mul, f, y, b.load(1, t)), t);
    if (bias) y = b.round_to(b.op(Prim::Add, f, y, b.load(2, t)), t);
    k.epilogue = finish(b, {t}, {y});
  };
  add("layer_norm", RowOp::LayerNorm, [&](ReductionKernel& k) {
    plain_prologue(k);
    affine_epilogue(k, true);
  });
  add("residual_layer_norm", RowOp::LayerNorm, [&](ReductionKernel& k) {
    KernelBuilder b = builder({t, t});
    int32_t h = b.round_to(b.op(Prim::Add, f, b.load(0, t), b.load(1, t)), t);
    k.prologue = finish(b, {f, t}, {h, h});  // the residual stream is stored
    affine_epilogue(k, true);
  });
  add("rms_norm", RowOp::RmsNorm, [&](ReductionKernel& k) {
    plain_prologue(k);
    affine_epilogue(k, false);
  });
  add("sum_of_squares_over_n", RowOp::Sum, [&](ReductionKernel& k) {
    KernelBuilder b = builder({t});
    int32_t x = b.load(0, t);
    k.prologue = finish(b, {f}, {b.round_to(b.op(Prim::Mul, f, x, x), t)});
    KernelBuilder e = builder({f});
    int32_t y = e.op(Prim::Div, f, e.round_to(e.load(0, f), t), e.constant(16, f));
    k.epilogue = finish(e, {t}, {e.round_to(y, t)});
  });
  add("var", RowOp::Var, [&](ReductionKernel& k) {
    plain_prologue(k);
    round_epilogue(k);
  });
  add("std_plus_eps", RowOp::Var, [&](ReductionKernel& k) {
    plain_prologue(k);
    KernelBuilder e = builder({f});
    int32_t s = e.round_to(e.op(Prim::Sqrt, f, e.load(0, f)), t);
    int32_t y = e.op(Prim::Add, f, s, e.constant(1e-5, f));
    k.epilogue = finish(e, {t}, {e.round_to(y, t)});
  });
  add("mean", RowOp::Mean, [&](ReductionKernel& k) {
    plain_prologue(k);
    round_epilogue(k);
  });
  add("amax_minus_bias", RowOp::Max, [&](ReductionKernel& k) {
    plain_prologue(k);
    KernelBuilder e = builder({f, t});
    int32_t y = e.op(Prim::Sub, f, e.round_to(e.load(0, f), t), e.load(1, t));
    k.epilogue = finish(e, {t}, {e.round_to(y, t)});
  });
  add("amin", RowOp::Min, [&](ReductionKernel& k) {
    plain_prologue(k);
    round_epilogue(k);
  });
  return out;
}

struct Schedule {
  int threads, per_thread;
  bool strided;  // strided walks over two reduced dims, else contiguous
  int kept_dims;
  bool index32;
};

// The spec of `k` under schedule `s` (statistic epilogue operands walk Zero).
kc::ReduceSpec spec_for(const ReductionKernel& k, const Schedule& s) {
  kc::ReduceSpec spec;
  spec.kernel = &k;
  spec.threads = s.threads;
  const bool multi = kiln::jit::is_row_normalization(k.op) || k.op == RowOp::Var;
  spec.per_thread = multi ? s.per_thread : 0;
  spec.red_dims = s.strided ? 2 : 1;
  spec.kept_dims = s.kept_dims;
  spec.index32 = s.index32;
  const int nops = kc::reduce_operand_count(k);
  const int first_epi = static_cast<int>(k.prologue.outputs.size() - 1 + k.prologue.inputs.size());
  for (int o = 0; o < nops; ++o) {
    const bool stat_epi = !kiln::jit::is_row_normalization(k.op) && o >= first_epi;
    // Weights and biases of a normalization broadcast over the kept dims, not the row.
    spec.walks.push_back(stat_epi    ? kc::Walk::Zero
                         : s.strided ? kc::Walk::Strided
                                     : kc::Walk::Contig);
  }
  return spec;
}

TEST_F(CudaReduceSource, GoldenPatternsCompileForHopperInEveryScheduleAndForAmpere) {
  const Schedule all[] = {
      {32, 8, false, 1, true},    // warp per row, row in registers
      {256, 16, false, 2, true},  // block per row, 4096 on chip
      {128, 4, true, 3, false},   // strided operands, 64-bit offsets
      {1024, 0, false, 1, true},  // long rows looping over memory
      {1, 0, true, 2, true},      // a thread per kept position (outer)
  };
  int compiled = 0;
  for (DType t : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16}) {
    for (const Pattern& p : patterns(t)) {
      for (size_t si = 0; si < std::size(all); ++si) {
        // Every schedule in float32; two in the 16-bit dtypes (compile time).
        if (t != kiln::kFloat32 && si != 0 && si != 3) continue;
        const kc::ReduceSpec spec = spec_for(p.kernel, all[si]);
        const std::string src = kc::reduce_source(spec);
        const std::string name = kc::reduce_name(spec);
        SCOPED_TRACE(p.name + " " + kiln::dtype_name(t) + " schedule " + std::to_string(si));
        kc::CompiledKernel ck;
        ASSERT_NO_THROW(ck = kc::nvrtc_compile(src, name, 90)) << "source:\n" << src;
        EXPECT_FALSE(ck.is_ptx);
        EXPECT_GT(ck.image.size(), 1000u);
        EXPECT_NE(src.find(name), std::string::npos);
        ++compiled;
        if (t == kiln::kFloat32 && si == 0) {  // CI also targets Ampere
          ASSERT_NO_THROW(ck = kc::nvrtc_compile(src, name, 80)) << "source:\n" << src;
          EXPECT_FALSE(ck.is_ptx);
          ++compiled;
        }
      }
    }
  }
  EXPECT_EQ(compiled, 12 * 5 + 2 * 12 * 2 + 12);
}

TEST_F(CudaReduceSource, NamesCoverEveryChoice) {
  std::vector<Pattern> ps = patterns(kiln::kFloat32);
  const ReductionKernel& k = ps[0].kernel;  // softmax
  const kc::ReduceSpec base = spec_for(k, {32, 8, false, 1, true});
  std::vector<kc::ReduceSpec> variants(6, base);
  variants[1].threads = 128;
  variants[2].per_thread = 4;
  variants[3].index32 = false;
  variants[4].kept_dims = 2;
  variants[5].walks[0] = kc::Walk::Strided;
  for (size_t i = 0; i < variants.size(); ++i) {
    for (size_t j = i + 1; j < variants.size(); ++j) {
      EXPECT_NE(kc::reduce_name(variants[i]), kc::reduce_name(variants[j])) << i << " vs " << j;
    }
  }
  // The op and the bodies are part of it; eps is an argument, not part of it.
  ReductionKernel log = k;
  log.op = RowOp::LogSoftmax;
  kc::ReduceSpec other = base;
  other.kernel = &log;
  EXPECT_NE(kc::reduce_name(other), kc::reduce_name(base));
  ReductionKernel eps = k;
  eps.eps = 0.5;
  other.kernel = &eps;
  EXPECT_EQ(kc::reduce_name(other), kc::reduce_name(base));
  EXPECT_EQ(kc::reduce_source(other), kc::reduce_source(base));
}

TEST_F(CudaReduceSource, MalformedSpecsAreRejected) {
  std::vector<Pattern> ps = patterns(kiln::kFloat32);
  kc::ReduceSpec s = spec_for(ps[0].kernel, {32, 8, false, 1, true});
  s.threads = 64;
  EXPECT_THROW(kc::reduce_source(s), kiln::Error);
  s = spec_for(ps[0].kernel, {32, 8, false, 1, true});
  s.per_thread = 3;
  EXPECT_THROW(kc::reduce_source(s), kiln::Error);
  s = spec_for(ps[0].kernel, {32, 8, false, 1, true});
  s.walks.pop_back();
  EXPECT_THROW(kc::reduce_source(s), kiln::Error);
  s = spec_for(ps[0].kernel, {32, 8, true, 1, true});
  s.walks[0] = kc::Walk::Contig;  // two reduced dims cannot be walked by j alone
  EXPECT_THROW(kc::reduce_source(s), kiln::Error);
}

// --- Host-side plans (no GPU needed) ---------------------------------------

using kiln::Tensor;
using kiln::jit::ReductionGroup;

Tensor rnd(std::vector<int64_t> sizes, const char* layout = "contiguous") {
  kiln::EagerGuard g;
  return kiln::testing::random_tensor(sizes, kiln::kFloat32, layout, 7);
}

// A group reducing `x` (float32, shape `in`) over `reduced`, whose epilogue
// adds `extra` inputs to the result and stores a fresh tensor of shape `out`.
ReductionGroup group(RowOp op, const Tensor& x, std::vector<bool> reduced, std::vector<int64_t> out,
                     std::vector<Tensor> extra = {}, Tensor stored = {}) {
  const DType f = kiln::kFloat32;
  kiln::EagerGuard eg;
  ReductionGroup g;
  g.op = op;
  g.in_shape = kiln::DimVector(x.sizes());
  g.reduced = std::move(reduced);
  KernelBuilder pb = builder({f});
  int32_t v = pb.load(0, f);
  g.prologue.kernel = stored.defined() ? finish(pb, {f, f}, {v, v}) : finish(pb, {f}, {v});
  g.prologue.shape = g.in_shape;
  g.prologue.inputs = {x};
  g.prologue.outputs = {Tensor()};
  if (stored.defined()) g.prologue.outputs.push_back(stored);
  std::vector<DType> in(1 + extra.size(), f);
  KernelBuilder eb = builder(in);
  int32_t r = eb.load(0, f);
  for (size_t i = 0; i < extra.size(); ++i) {
    r = eb.op(Prim::Add, f, r, eb.load(static_cast<int32_t>(i + 1), f));
  }
  g.epilogue.kernel = finish(eb, {f}, {r});
  g.epilogue.shape = kiln::DimVector(kiln::IntArrayRef(out));
  g.epilogue.inputs = {Tensor()};
  for (const Tensor& t : extra) g.epilogue.inputs.push_back(t);
  g.epilogue.outputs = {kiln::empty(out)};
  return g;
}

TEST_F(CudaReduceSource, PlansMergeDimsAndPickSchedules) {
  using W = kc::Walk;
  std::string why;
  {  // sum over the dense last dim: a warp per row, kept dims merged
    kc::ReducePlan p;
    ASSERT_TRUE(kc::plan_reduction(group(RowOp::Sum, rnd({4, 6, 10}), {false, false, true}, {4, 6}),
                                   132, &p, &why))
        << why;
    EXPECT_EQ(p.rows, 24);
    EXPECT_EQ(p.n, 10);
    EXPECT_EQ(p.spec.kept_dims, 1);
    EXPECT_EQ(p.spec.red_dims, 1);
    EXPECT_EQ(p.spec.threads, 32);
    EXPECT_EQ(p.spec.per_thread, 0);
    EXPECT_EQ(p.spec.walks, (std::vector<W>{W::Contig, W::Zero}));
    std::vector<int64_t> args = kc::reduce_args(p);
    ASSERT_EQ(args.size(), 10u);
    EXPECT_EQ(args[0], 24);
    EXPECT_EQ(args[1], 10);
    EXPECT_EQ(args[4], 24);  // kept size
    EXPECT_EQ(args[5], 10);  // reduced size
    EXPECT_EQ(args[7], 10);  // x's kept stride
    EXPECT_EQ(args[9], 1);   // the result's kept stride
    EXPECT_NO_THROW(kc::reduce_source(p.spec));
  }
  {  // keepdim result: the same plan
    kc::ReducePlan p;
    ASSERT_TRUE(kc::plan_reduction(
        group(RowOp::Mean, rnd({4, 6, 10}), {false, false, true}, {4, 6, 1}), 132, &p, &why))
        << why;
    EXPECT_EQ(p.rows, 24);
    EXPECT_EQ(p.spec.walks, (std::vector<W>{W::Contig, W::Zero}));
  }
  {  // the reduced dim is the outer one in memory: a thread per kept position
    Tensor x = rnd({4, 6, 10}, "transposed");  // strides (1, 4, 24)
    kc::ReducePlan p;
    ASSERT_TRUE(
        kc::plan_reduction(group(RowOp::Max, x, {false, false, true}, {4, 6}), 132, &p, &why))
        << why;
    EXPECT_EQ(p.spec.threads, 1);
    EXPECT_EQ(p.spec.kept_dims, 2);  // x merges its kept dims, the result does not
    EXPECT_EQ(p.spec.walks, (std::vector<W>{W::Strided, W::Zero}));
    EXPECT_EQ(p.kst[0].back(), 1);
  }
  {  // two reduced dims that do not merge
    kc::ReducePlan p;
    ASSERT_TRUE(kc::plan_reduction(group(RowOp::Var, rnd({6, 9, 33}), {true, false, true}, {9}),
                                   132, &p, &why))
        << why;
    EXPECT_EQ(p.spec.red_dims, 2);
    EXPECT_EQ(p.n, 6 * 33);
    EXPECT_EQ(p.spec.walks[0], W::Strided);
    EXPECT_EQ(p.spec.threads, 32);
    EXPECT_EQ(p.spec.per_thread, 8);
    EXPECT_NO_THROW(kc::reduce_source(p.spec));
  }
  {  // layer_norm's row of 768 with a broadcast weight: on chip
    Tensor w = rnd({768});
    kc::ReducePlan p;
    ASSERT_TRUE(kc::plan_reduction(
        group(RowOp::LayerNorm, rnd({3, 5, 768}), {false, false, true}, {3, 5, 768}, {w}), 132, &p,
        &why))
        << why;
    EXPECT_EQ(p.rows, 15);
    EXPECT_EQ(p.spec.threads, 128);
    EXPECT_EQ(p.spec.per_thread, 8);
    EXPECT_EQ(p.spec.walks, (std::vector<W>{W::Contig, W::Contig, W::Contig}));
    EXPECT_EQ(p.kst[2][0], 0);  // the weight broadcasts over rows
    EXPECT_TRUE(p.spec.epi_vec) << "Note [Vector epilogues of row normalizations]";
    // A weight whose vectors are not aligned keeps the epilogue scalar.
    Tensor wide = rnd({769});
    kc::ReducePlan q;
    ASSERT_TRUE(kc::plan_reduction(group(RowOp::LayerNorm, rnd({3, 5, 768}), {false, false, true},
                                         {3, 5, 768}, {wide.slice(0, 1, 769)}),
                                   132, &q, &why))
        << why;
    EXPECT_EQ(q.spec.vec, 4);
    EXPECT_FALSE(q.spec.epi_vec);
  }
  {  // a long row over few rows: 1024 lanes, read from memory each pass
    kc::ReducePlan p;
    ASSERT_TRUE(kc::plan_reduction(group(RowOp::Softmax, rnd({3, 5000}), {false, true}, {3, 5000}),
                                   132, &p, &why))
        << why;
    EXPECT_EQ(p.spec.threads, 1024);
    EXPECT_EQ(p.spec.per_thread, 0);
  }
}

TEST_F(CudaReduceSource, PlansRefuseWhatTheKernelCannotTake) {
  std::string why;
  {  // an epilogue whose shape is not the reduced one
    kc::ReducePlan p;
    EXPECT_FALSE(kc::plan_reduction(group(RowOp::Sum, rnd({4, 6, 10}), {false, false, true}, {5}),
                                    132, &p, &why));
    EXPECT_NE(why.find("shape"), std::string::npos) << why;
  }
  {  // a long row whose prologue overwrites its own input: later passes would reread it
    Tensor x = rnd({2, 5000});
    kc::ReducePlan p;
    EXPECT_FALSE(
        kc::plan_reduction(group(RowOp::Var, x, {false, true}, {2}, {}, x), 132, &p, &why));
    EXPECT_NE(why.find("writes what it reads"), std::string::npos) << why;
    // On chip the row is read once: fine.
    Tensor y = rnd({2, 500});
    kc::ReducePlan q;
    EXPECT_TRUE(kc::plan_reduction(group(RowOp::Var, y, {false, true}, {2}, {}, y), 132, &q, &why))
        << why;
  }
}

}  // namespace

namespace {

// Rows of at most 8 elements stay in one lane's registers for the multi-pass
// ops (passes that re-ran the prologue could round it differently), and the
// statistics accumulate in float64 with `(x - mean) * rstd` normalization
// (Note [CUDA group sums]). The generated sources compile.
TEST_F(CudaReduceSource, ShortRowsStayOnChipAndStatisticsUseFloat64) {
  std::string why;
  for (int64_t n : {1, 3, 8}) {
    for (RowOp op : {RowOp::Var, RowOp::LayerNorm, RowOp::RmsNorm, RowOp::Softmax, RowOp::Sum}) {
      SCOPED_TRACE(std::string(kiln::jit::row_op_name(op)) + " n=" + std::to_string(n));
      const bool norm = kiln::jit::is_row_normalization(op);
      kc::ReducePlan p;
      ASSERT_TRUE(
          kc::plan_reduction(group(op, rnd({3, n}, "offset"), {false, true},
                                   norm ? std::vector<int64_t>{3, n} : std::vector<int64_t>{3, 1}),
                             132, &p, &why))
          << why;
      EXPECT_EQ(p.spec.threads, 1);
      const int expect_p = op == RowOp::Sum ? 0 : n == 3 ? 4 : static_cast<int>(n);
      EXPECT_EQ(p.spec.per_thread, expect_p);
      const std::string src = kc::reduce_source(p.spec);
      if (op != RowOp::Softmax) {
        EXPECT_NE(src.find("double"), std::string::npos);
      }
      if (op == RowOp::LayerNorm) {
        EXPECT_NE(src.find("(x - meanf) * rstd"), std::string::npos) << src;
        EXPECT_EQ(src.find("shift"), std::string::npos) << src;
      }
      if (n == 3) {
        kc::CompiledKernel ck;
        ASSERT_NO_THROW(ck = kc::nvrtc_compile(src, kc::reduce_name(p.spec), 90)) << "source:\n"
                                                                                  << src;
        EXPECT_GT(ck.image.size(), 1000u);
      }
    }
  }
  // Sixteen values in one lane is refused (only rows up to 8 take that path).
  std::vector<Pattern> ps = patterns(kiln::kFloat32);
  kc::ReduceSpec s = spec_for(ps[0].kernel, {1, 16, false, 1, true});
  EXPECT_THROW(kc::reduce_source(s), kiln::Error);
  s.per_thread = 8;
  EXPECT_NO_THROW(kc::reduce_source(s));
}

}  // namespace

namespace {

// Vector loads and split rows (Note [CUDA reduction schedules for groups]):
// every golden pattern compiles with 16-byte loads, in registers and from
// memory, and the one-pass statistics compile split; the plan picks vectors
// only for aligned rows whose length is a multiple of the width, and splits
// only few long rows of a one-pass statistic.
TEST_F(CudaReduceSource, VectorAndSplitVariantsCompile) {
  int compiled = 0;
  for (DType t : {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16}) {
    for (const Pattern& p : patterns(t)) {
      const bool multi = kiln::jit::is_row_normalization(p.kernel.op) || p.kernel.op == RowOp::Var;
      std::vector<kc::ReduceSpec> specs;
      // Every schedule in float32; in registers and split in the 16-bit dtypes.
      for (const Schedule& s : {Schedule{32, 8, false, 1, true}, Schedule{256, 16, false, 2, true},
                                Schedule{1024, 0, false, 1, false}}) {
        const bool wide = t == kiln::kFloat32;
        kc::ReduceSpec spec = spec_for(p.kernel, s);
        spec.vec = kc::reduce_vector_width(spec);
        ASSERT_EQ(spec.vec, t == kiln::kFloat32 ? 4 : 8) << p.name;
        if (wide || s.threads == 32) specs.push_back(spec);
        // Note [Vector epilogues of row normalizations].
        if (kiln::jit::is_row_normalization(p.kernel.op) && spec.per_thread > 0 &&
            (wide || s.threads == 32)) {
          spec.epi_vec = true;
          specs.push_back(spec);
          spec.epi_vec = false;
        }
        if (!multi && s.threads == 1024) {
          spec.split = true;
          specs.push_back(spec);
          spec.vec = 1;
          if (wide) specs.push_back(spec);
        }
      }
      for (const kc::ReduceSpec& spec : specs) {
        SCOPED_TRACE(p.name + " " + kiln::dtype_name(t) + " threads " +
                     std::to_string(spec.threads) + " vec " + std::to_string(spec.vec) +
                     (spec.split ? " split" : "") + (spec.epi_vec ? " epi_vec" : ""));
        const std::string src = kc::reduce_source(spec);
        EXPECT_EQ(src.find("KilnVec<") != std::string::npos, spec.vec > 1);
        EXPECT_EQ(src.find("epiv(j0, cv)") != std::string::npos, spec.epi_vec);
        EXPECT_EQ(src.find("atomicAdd") != std::string::npos, spec.split);
        kc::CompiledKernel ck;
        ASSERT_NO_THROW(ck = kc::nvrtc_compile(src, kc::reduce_name(spec), 90)) << "source:\n"
                                                                                << src;
        EXPECT_FALSE(ck.is_ptx);
        EXPECT_GT(ck.image.size(), 1000u);
        ++compiled;
      }
    }
  }
  // 4 of the 12 patterns are one-pass statistics; 6 are row normalizations, each with
  // vector epilogues at two float32 schedules and one in each 16-bit dtype.
  EXPECT_EQ(compiled, (12 * 3 + 4 * 2) + 2 * (12 + 4) + 6 * 4);
}

TEST_F(CudaReduceSource, VectorAndSplitAreKeyedAndChecked) {
  std::vector<Pattern> ps = patterns(kiln::kFloat32);
  const ReductionKernel& softmax = ps[0].kernel;
  kc::ReduceSpec s = spec_for(softmax, {32, 8, false, 1, true});
  const std::string scalar = kc::reduce_name(s);
  s.vec = 4;
  EXPECT_NE(kc::reduce_name(s), scalar);
  EXPECT_NO_THROW(kc::reduce_source(s));
  s.vec = 8;  // not the width of a float32 input
  EXPECT_THROW(kc::reduce_source(s), kiln::Error);
  s.vec = 4;
  s.per_thread = 2;  // fewer values per lane than one vector
  EXPECT_THROW(kc::reduce_source(s), kiln::Error);
  s = spec_for(softmax, {1, 4, false, 1, true});
  s.vec = 4;  // one lane per row never vectorizes
  EXPECT_THROW(kc::reduce_source(s), kiln::Error);
  s = spec_for(softmax, {1024, 0, false, 1, true});
  s.split = true;  // a normalization needs its whole row in one block
  EXPECT_THROW(kc::reduce_source(s), kiln::Error);
  const ReductionKernel& sum = ps[6].kernel;
  ASSERT_EQ(sum.op, RowOp::Sum);
  kc::ReduceSpec a = spec_for(sum, {1024, 0, false, 1, true});
  kc::ReduceSpec b = a;
  b.split = true;
  EXPECT_NE(kc::reduce_name(a), kc::reduce_name(b));
  b.threads = 32;  // split blocks hold one row
  EXPECT_THROW(kc::reduce_source(b), kiln::Error);
  // Note [Vector epilogues of row normalizations]: keyed; only a normalization
  // kept in registers with vector loads, its epilogue operands Contig.
  s = spec_for(softmax, {32, 8, false, 1, true});
  s.vec = 4;
  const std::string vec_name = kc::reduce_name(s);
  s.epi_vec = true;
  EXPECT_NE(kc::reduce_name(s), vec_name);
  EXPECT_NO_THROW(kc::reduce_source(s));
  s.vec = 1;
  EXPECT_THROW(kc::reduce_source(s), kiln::Error);
  kc::ReduceSpec strided = spec_for(softmax, {128, 4, true, 3, false});
  strided.epi_vec = true;
  EXPECT_THROW(kc::reduce_source(strided), kiln::Error);
  a.epi_vec = true;  // a statistic has no per-position epilogue
  EXPECT_THROW(kc::reduce_source(a), kiln::Error);
}

TEST_F(CudaReduceSource, PlansPickVectorsOnlyForAlignedRows) {
  std::string why;
  for (const char* layout : {"contiguous", "offset", "transposed"}) {
    for (int64_t n : {300, 301, 768, 5000}) {
      SCOPED_TRACE(std::string(layout) + " n=" + std::to_string(n));
      kc::ReducePlan p;
      ASSERT_TRUE(kc::plan_reduction(
          group(RowOp::LayerNorm, rnd({6, n}, layout), {false, true}, {6, n}), 132, &p, &why))
          << why;
      const bool expect = std::string(layout) == "contiguous" && n % 4 == 0;
      EXPECT_EQ(p.spec.vec, expect ? 4 : 1);
      if (p.spec.per_thread > 0) {
        EXPECT_EQ(p.spec.per_thread % p.spec.vec, 0);
        EXPECT_GE(p.spec.per_thread * p.spec.threads, n);
        EXPECT_LE(p.spec.per_thread, 16);
      }
      EXPECT_NO_THROW(kc::reduce_source(p.spec));
    }
  }
  {  // rows too short for lanes, and a row stride that breaks alignment
    kc::ReducePlan p;
    ASSERT_TRUE(
        kc::plan_reduction(group(RowOp::Sum, rnd({5, 6}), {false, true}, {5}), 132, &p, &why));
    EXPECT_EQ(p.spec.threads, 1);  // n <= 8: a lane per row
    EXPECT_EQ(p.spec.vec, 1);
    Tensor y;
    {
      kiln::EagerGuard g;
      y = rnd({5, 42}).narrow(1, 0, 36);  // row stride 42: not a multiple of 4
    }
    kc::ReducePlan q;
    ASSERT_TRUE(kc::plan_reduction(group(RowOp::Sum, y, {false, true}, {5}), 132, &q, &why));
    EXPECT_EQ(q.spec.threads, 32);
    EXPECT_EQ(q.spec.vec, 1);
  }
}

TEST_F(CudaReduceSource, PlansSplitFewLongRowsOfOnePassStatistics) {
  std::string why;
  {  // one output of 4M elements: chunks over about two blocks per multiprocessor
    kc::ReducePlan p;
    ASSERT_TRUE(kc::plan_reduction(group(RowOp::Sum, rnd({1 << 22}), {true}, {}), 132, &p, &why))
        << why;
    EXPECT_TRUE(p.spec.split);
    EXPECT_EQ(p.spec.threads, 1024);
    EXPECT_EQ(p.spec.vec, 4);
    EXPECT_EQ(p.chunk % (8 * 1024), 0);
    EXPECT_GE(p.splits * p.chunk, p.n);
    EXPECT_LT((p.splits - 1) * p.chunk, p.n);
    EXPECT_LE(p.splits, 264);
    EXPECT_GE(p.splits, 200);
    int dummy = 0;
    std::vector<int64_t> args = kc::reduce_args(p, &dummy);
    EXPECT_EQ(args.size(), p.words);
    EXPECT_EQ(args[4], p.chunk);
    EXPECT_EQ(kc::reduce_workspace_bytes(p), static_cast<size_t>(p.splits * 8 + 4));
    EXPECT_NO_THROW(kc::reduce_source(p.spec));
  }
  {  // two rows, the reduced dim outer in memory: lanes and chunks, not a thread per row
    kc::ReducePlan p;
    ASSERT_TRUE(
        kc::plan_reduction(group(RowOp::Max, rnd({100000, 2}), {true, false}, {2}), 132, &p, &why))
        << why;
    EXPECT_EQ(p.spec.threads, 1024);
    EXPECT_TRUE(p.spec.split);
    EXPECT_EQ(p.spec.vec, 1);  // strided walk
  }
  {  // Var and the normalizations keep the row in one block; many rows never split
    kc::ReducePlan p;
    ASSERT_TRUE(
        kc::plan_reduction(group(RowOp::Var, rnd({2, 100000}), {false, true}, {2}), 132, &p, &why))
        << why;
    EXPECT_FALSE(p.spec.split);
    kc::ReducePlan q;
    ASSERT_TRUE(kc::plan_reduction(group(RowOp::Sum, rnd({300, 5000}), {false, true}, {300}), 132,
                                   &q, &why))
        << why;
    EXPECT_FALSE(q.spec.split);
    EXPECT_EQ(q.spec.threads, 256);
    kc::ReducePlan r;  // short rows: nothing to split
    ASSERT_TRUE(
        kc::plan_reduction(group(RowOp::Mean, rnd({2, 4000}), {false, true}, {2}), 132, &r, &why))
        << why;
    EXPECT_FALSE(r.spec.split);
  }
}

}  // namespace
