// Generated CUDA kernels compile to SASS for sm_90 and sm_80 with NVRTC. This
// needs the toolkit, not a GPU, so CI checks code generation on every run.

#include <gtest/gtest.h>

#include "jit/codegen_cuda/nvrtc.h"
#include "jit/codegen_cuda/pointwise_source.h"
#include "jit/record/decompose.h"
#include "kiln/kiln.h"
#include "runtime/cuda/cuda_runtime.h"

namespace {

using kiln::jit::KernelBuilder;
using kiln::jit::PointwiseKernel;
using kiln::jit::Prim;
namespace kc = kiln::jit::cuda;

class CudaCodegen : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kiln::cuda::built()) GTEST_SKIP() << "kiln was built without the CUDA toolkit (no NVRTC)";
  }
};

// A kernel applying every primitive to loads of `in` (memory dtype) in compute dtype `t`.
PointwiseKernel all_prims(kiln::DType in, kiln::DType out, kiln::DType t) {
  KernelBuilder b;
  int32_t x = b.cast(b.load(0, in), t);
  int32_t y = b.cast(b.load(1, kiln::kFloat32), t);
  // A number argument beside a constant (Note [Numbers as kernel arguments]).
  int32_t acc = b.op(Prim::Add, t, b.constant(0.25, t), b.param(-1.5, t));
  for (int p = static_cast<int>(Prim::Neg); p <= static_cast<int>(Prim::Erfc); ++p) {
    Prim prim = static_cast<Prim>(p);
    int32_t v;
    switch (kiln::jit::prim_arity(prim)) {
      case 1:
        if (prim == Prim::BitNot) {
          v = b.cast(b.op(prim, kiln::kBool, b.cast(x, kiln::kBool)), t);
        } else if (prim == Prim::IsNan || prim == Prim::IsInf || prim == Prim::IsFinite) {
          v = b.cast(b.op(prim, kiln::kBool, x), t);
        } else if (prim == Prim::LogicalNot) {
          v = b.cast(b.op(prim, kiln::kBool, b.cast(x, kiln::kBool)), t);
        } else if (prim == Prim::Cast) {
          v = b.cast(b.op(Prim::Cast, kiln::kBool, x), t);
        } else {
          v = b.op(prim, t, x);
        }
        break;
      case 2:
        if (prim == Prim::BitAnd || prim == Prim::BitOr || prim == Prim::BitXor) {
          v = b.cast(b.op(prim, kiln::kBool, b.cast(x, kiln::kBool), b.cast(y, kiln::kBool)), t);
        } else if (prim >= Prim::Eq) {
          v = b.cast(b.op(prim, kiln::kBool, b.cast(x, t), b.cast(y, t)), t);
        } else {
          v = b.op(prim, t, x, y);
        }
        break;
      default:
        v = b.op(Prim::Where, t, b.op(Prim::Lt, kiln::kBool, x, y), x, y);
    }
    acc = b.op(Prim::Add, t, acc, v);
  }
  PointwiseKernel k = b.kernel();
  k.inputs = {in, kiln::kFloat32};
  k.outputs = {out, kiln::kBool};
  k.stores = {acc, b.op(Prim::Gt, kiln::kBool, acc, y)};
  k.body = b.kernel().body;
  return k;
}

TEST_F(CudaCodegen, EveryPrimitiveAndDtypeCompilesForHopperAndAmpere) {
  using L = kc::Layout;
  const kiln::DType mems[] = {kiln::kFloat32, kiln::kFloat16, kiln::kBFloat16, kiln::kFloat64,
                              kiln::kBool};
  int compiled = 0;
  for (kiln::DType in : mems) {
    for (kiln::DType t : {kiln::kFloat32, kiln::kFloat64}) {
      PointwiseKernel k = all_prims(in, in == kiln::kBool ? kiln::kFloat32 : in, t);
      // Dense vectors; strided elements; strided vectors (Note [CUDA
      // pointwise kernel shape]), the last for sm_90 only. A narrow or bool
      // memory dtype computed in fp64 adds only its conversions to what the
      // fp32 kernels check: dense vectors for sm_90 cover them (each fp64
      // kernel of every primitive keeps NVRTC busy for seconds).
      const bool conversions_only =
          t == kiln::kFloat64 && in != kiln::kFloat32 && in != kiln::kFloat64;
      for (int variant = 0; variant < (conversions_only ? 1 : 3); ++variant) {
        kc::PointwiseSpec spec{&k};
        spec.layouts = variant == 0 ? std::vector<L>{L::Dense, L::Dense, L::Dense, L::Scalar}
                                    : std::vector<L>{L::Strided, L::Dense, L::Strided, L::Strided};
        spec.ndim = variant == 0 ? 1 : 4 - variant;
        spec.index32 = variant != 1;
        spec.vec = variant == 1 ? 1 : kc::vector_width(k);
        std::string src = kc::pointwise_source(spec);
        if (variant == 2) {
          EXPECT_NE(src.find("inner_v"), std::string::npos);
        }
        for (int arch : {90, 80}) {
          if ((variant == 2 || conversions_only) && arch == 80) continue;
          kc::CompiledKernel ck;
          ASSERT_NO_THROW(ck = kc::nvrtc_compile(src, kc::pointwise_name(spec), arch))
              << "source:\n"
              << src;
          EXPECT_FALSE(ck.is_ptx);
          EXPECT_GT(ck.image.size(), 1000u);
          ++compiled;
        }
      }
    }
  }
  EXPECT_EQ(compiled, 2 * 2 * (2 * 2 + 1) + 3 * (2 * 2 + 1) + 3);
}

// Every primitive an integer compute dtype admits (no transcendentals).
bool integer_prim(Prim p) {
  switch (p) {
    case Prim::Neg:
    case Prim::Abs:
    case Prim::Relu:
    case Prim::Floor:
    case Prim::Ceil:
    case Prim::Trunc:
    case Prim::Round:
    case Prim::Sign:
    case Prim::BitNot:
    case Prim::Add:
    case Prim::Sub:
    case Prim::Mul:
    case Prim::Div:
    case Prim::Pow:
    case Prim::Max:
    case Prim::Min:
    case Prim::FloorDiv:
    case Prim::Remainder:
    case Prim::Fmod:
    case Prim::BitAnd:
    case Prim::BitOr:
    case Prim::BitXor:
      return true;
    default:
      return false;
  }
}

TEST_F(CudaCodegen, EveryIntegerPrimitiveCompilesInEveryIntegerDtype) {
  using L = kc::Layout;
  int compiled = 0;
  for (kiln::DType t : {kiln::kUInt8, kiln::kInt8, kiln::kInt16, kiln::kInt32, kiln::kInt64}) {
    KernelBuilder b;
    int32_t x = b.load(0, t), y = b.load(1, t);
    int32_t acc = b.op(Prim::Add, t, b.constant(3, t), b.param(5, t));
    int prims = 0;
    for (int p = static_cast<int>(Prim::Neg); p <= static_cast<int>(Prim::Erfc); ++p) {
      Prim prim = static_cast<Prim>(p);
      int32_t v;
      if (integer_prim(prim)) {
        v = kiln::jit::prim_arity(prim) == 1 ? b.op(prim, t, x) : b.op(prim, t, x, y);
      } else if (prim == Prim::IsNan || prim == Prim::IsInf || prim == Prim::IsFinite ||
                 prim == Prim::LogicalNot) {
        v = b.cast(b.op(prim, kiln::kBool, prim == Prim::LogicalNot ? b.cast(x, kiln::kBool) : x),
                   t);
      } else if (prim >= Prim::Eq && prim <= Prim::Ge) {
        v = b.cast(b.op(prim, kiln::kBool, x, y), t);
      } else if (prim == Prim::Where) {
        v = b.op(prim, t, b.op(Prim::Lt, kiln::kBool, x, y), x, y);
      } else {
        continue;
      }
      ++prims;
      acc = b.op(Prim::BitXor, t, acc, v);
    }
    EXPECT_EQ(prims, 33);
    PointwiseKernel k = b.kernel();
    k.inputs = {t, t};
    k.outputs = {t, kiln::kBool};
    k.stores = {acc, b.cast(acc, kiln::kBool)};
    k.body = b.kernel().body;
    for (int width : {1, kc::vector_width(k)}) {
      kc::PointwiseSpec spec{&k, {L::Dense, L::Dense, L::Dense, L::Strided}};
      spec.ndim = 2;
      if (width > 1) spec.layouts = {L::Dense, L::Dense, L::Dense, L::Scalar};
      spec.vec = width;
      std::string src = kc::pointwise_source(spec);
      ASSERT_NO_THROW(kc::nvrtc_compile(src, kc::pointwise_name(spec), 90)) << src;
      ++compiled;
    }
  }
  EXPECT_EQ(compiled, 10);
}

TEST_F(CudaCodegen, BoolBitOpsCompile) {
  KernelBuilder b;
  int32_t x = b.load(0, kiln::kBool), y = b.load(1, kiln::kBool);
  int32_t v = b.op(Prim::BitAnd, kiln::kBool, x, y);
  v = b.op(Prim::BitOr, kiln::kBool, v, b.op(Prim::BitNot, kiln::kBool, y));
  v = b.op(Prim::BitXor, kiln::kBool, v, x);
  PointwiseKernel k = b.kernel();
  k.inputs = {kiln::kBool, kiln::kBool};
  k.outputs = {kiln::kBool};
  k.stores = {v};
  k.body = b.kernel().body;
  kc::PointwiseSpec spec{&k, {kc::Layout::Dense, kc::Layout::Dense, kc::Layout::Dense}};
  std::string src = kc::pointwise_source(spec);
  EXPECT_NO_THROW(kc::nvrtc_compile(src, kc::pointwise_name(spec), 90)) << src;
}

TEST_F(CudaCodegen, IntegerKernelsCompile) {
  using L = kc::Layout;
  int compiled = 0;
  for (kiln::DType t : {kiln::kUInt8, kiln::kInt8, kiln::kInt16, kiln::kInt32, kiln::kInt64}) {
    KernelBuilder b;
    int32_t x = b.load(0, t), y = b.load(1, t);
    int32_t v = b.op(Prim::Add, t, b.op(Prim::Mul, t, x, y), b.constant(-3, t));
    v = b.op(Prim::Max, t, b.op(Prim::Abs, t, v), b.op(Prim::Neg, t, y));
    v = b.op(Prim::Where, t, b.op(Prim::Lt, kiln::kBool, x, y), v, b.op(Prim::Relu, t, x));
    PointwiseKernel k = b.kernel();
    k.inputs = {t, t};
    k.outputs = {t, kiln::kFloat32};
    k.stores = {v, b.cast(v, kiln::kFloat32)};
    k.body = b.kernel().body;
    for (int width : {1, kc::vector_width(k)}) {
      kc::PointwiseSpec spec{&k, {L::Dense, L::Dense, L::Dense, L::Scalar}};
      spec.vec = width;
      std::string src = kc::pointwise_source(spec);
      ASSERT_NO_THROW(kc::nvrtc_compile(src, kc::pointwise_name(spec), 90)) << src;
      ++compiled;
    }
  }
  EXPECT_EQ(compiled, 10);
}

TEST_F(CudaCodegen, VectorWidthIsSixteenBytesOfTheWidestDtype) {
  PointwiseKernel f32 = all_prims(kiln::kFloat32, kiln::kFloat32, kiln::kFloat32);
  EXPECT_EQ(kc::vector_width(f32), 4);
  PointwiseKernel f64 = all_prims(kiln::kFloat64, kiln::kFloat64, kiln::kFloat64);
  EXPECT_EQ(kc::vector_width(f64), 2);
  PointwiseKernel f16 = all_prims(kiln::kFloat16, kiln::kFloat16, kiln::kFloat32);
  f16.inputs = {kiln::kFloat16, kiln::kFloat16};
  f16.outputs = {kiln::kFloat16, kiln::kBool};
  EXPECT_EQ(kc::vector_width(f16), 8);
  kc::PointwiseSpec spec{
      &f32, {kc::Layout::Strided, kc::Layout::Dense, kc::Layout::Dense, kc::Layout::Dense}};
  spec.vec = 2;
  EXPECT_THROW(kc::pointwise_source(spec), kiln::Error) << "a vector of another width";
}

TEST_F(CudaCodegen, NamesDependOnStructureAndLayout) {
  PointwiseKernel k = all_prims(kiln::kFloat32, kiln::kFloat32, kiln::kFloat32);
  kc::PointwiseSpec a{&k,
                      {kc::Layout::Dense, kc::Layout::Dense, kc::Layout::Dense, kc::Layout::Dense}};
  kc::PointwiseSpec b = a;
  b.layouts[2] = kc::Layout::Scalar;
  EXPECT_NE(kc::pointwise_name(a), kc::pointwise_name(b));
  kc::PointwiseSpec c = a;
  c.vec = 4;
  EXPECT_NE(kc::pointwise_name(a), kc::pointwise_name(c));
  EXPECT_EQ(kc::pointwise_name(a), kc::pointwise_name(a));
}

// x * a + 0.5 four times in a 16-bit float, rounded after each op as the
// eager ops round: the vector loop takes the elements in pairs, the adds of
// 16-bit values as pair instructions (Note [16-bit pairs]).
PointwiseKernel axpy8_short(kiln::DType t, bool second_input) {
  KernelBuilder b;
  int32_t x = b.load(0, t);
  for (int i = 0; i < 4; ++i) {
    x = b.round_to(b.op(Prim::Mul, kiln::kFloat32, x, b.param(1.0001, kiln::kFloat32)), t);
    x = b.round_to(b.op(Prim::Add, kiln::kFloat32, x, b.constant(0.5, kiln::kFloat32)), t);
  }
  if (second_input) {
    // A float32 operand: vectors of 4, the pairs' loads of both dtypes.
    x = b.round_to(b.op(Prim::Sub, kiln::kFloat32, x, b.load(1, kiln::kFloat32)), t);
  }
  PointwiseKernel k = b.kernel();
  k.inputs = second_input ? std::vector<kiln::DType>{t, kiln::kFloat32} : std::vector{t};
  k.outputs = {t, kiln::kFloat32};
  k.stores = {x, x};
  return k;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_F(CudaCodegen, SixteenBitPairsCompile) {
  using L = kc::Layout;
  for (kiln::DType t : {kiln::kFloat16, kiln::kBFloat16}) {
    for (bool second : {false, true}) {
      PointwiseKernel k = axpy8_short(t, second);
      kc::PointwiseSpec spec{&k, second ? std::vector<L>{L::Dense, L::Dense, L::Dense, L::Strided}
                                        : std::vector<L>{L::Dense, L::Dense, L::Dense}};
      spec.ndim = second ? 2 : 1;
      spec.vec = kc::vector_width(k);
      const std::string src = kc::pointwise_source(spec);
      const std::string what = std::string(kiln::dtype_name(t)) + (second ? ", two inputs" : "");
      EXPECT_NE(src.find("e += 2"), std::string::npos) << what << "\n" << src;
      // The four adds of 16-bit values as pair instructions; the products
      // with a float32 number rounded as pairs.
      const std::string pair = t == kiln::kFloat16 ? "h2" : "bf2";
      EXPECT_EQ(count_of(src, "kiln_add_" + pair + "(h"), 4u) << what << "\n" << src;
      EXPECT_EQ(count_of(src, "kiln_pack_" + pair + "(v"), second ? 5u : 4u) << what << "\n" << src;
      for (int arch : {90, 80, 75}) {
        kc::CompiledKernel ck;
        ASSERT_NO_THROW(ck = kc::nvrtc_compile(src, kc::pointwise_name(spec), arch)) << src;
        EXPECT_FALSE(ck.is_ptx) << what << " sm_" << arch;
      }
    }
  }
}

TEST_F(CudaCodegen, AnArchNvrtcLacksGetsPtx) {
  PointwiseKernel k = all_prims(kiln::kFloat32, kiln::kFloat32, kiln::kFloat32);
  kc::PointwiseSpec spec{
      &k, {kc::Layout::Dense, kc::Layout::Dense, kc::Layout::Dense, kc::Layout::Dense}};
  kc::CompiledKernel ck =
      kc::nvrtc_compile(kc::pointwise_source(spec), kc::pointwise_name(spec), 999);
  EXPECT_TRUE(ck.is_ptx);
}

}  // namespace
