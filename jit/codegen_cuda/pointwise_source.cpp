#include "jit/codegen_cuda/pointwise_source.h"

#include <cstdio>
#include <sstream>

#include "kiln/error.h"

// GCC 12 reports false stringop-overflow warnings for std::string
// concatenation inlined at -O3 (a known GCC 12 issue); this file only builds
// strings.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

const char* ctype(DType t) {
  switch (t) {
    case kFloat64:
      return "double";
    case kBool:
      return "bool";
    default:
      return "float";
  }
}

// Storage type of each memory dtype.
const char* mtype(DType t) {
  switch (t) {
    case kFloat32:
      return "float";
    case kFloat64:
      return "double";
    case kFloat16:
    case kBFloat16:
      return "unsigned short";
    case kBool:
      return "unsigned char";
    default:
      KILN_FAIL("[cuda codegen] expected a fusible memory dtype, got ", t);
  }
}

std::string literal(double v, DType t) {
  char buf[64];
  if (t == kBool) return v != 0 ? "true" : "false";
  if (v != v)
    return t == kFloat64 ? "__longlong_as_double(0x7ff8000000000000ll)"
                         : "__int_as_float(0x7fc00000)";
  if (v == __builtin_inf())
    return t == kFloat64 ? "__longlong_as_double(0x7ff0000000000000ll)"
                         : "__int_as_float(0x7f800000)";
  if (v == -__builtin_inf())
    return t == kFloat64 ? "__longlong_as_double(0xfff0000000000000ll)"
                         : "__int_as_float(0xff800000)";
  std::snprintf(buf, sizeof buf, t == kFloat64 ? "%.17g" : "%.9gf", v);
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos)
    s.insert(s.size() - (t == kFloat64 ? 0 : 1), ".0");
  return s;
}

// Functions with a float and a double spelling.
std::string fn(const char* name, DType t) {
  return t == kFloat64 ? std::string(name) : std::string(name) + "f";
}

const char kPrelude[] = R"(typedef long long i64;
__device__ __forceinline__ float kiln_h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short kiln_f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float kiln_bf2f(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ __forceinline__ unsigned short kiln_f2bf(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
template <class T> __device__ __forceinline__ T kiln_max(T a, T b) { return a != a ? a : (b != b ? b : (a > b ? a : b)); }
template <class T> __device__ __forceinline__ T kiln_min(T a, T b) { return a != a ? a : (b != b ? b : (a < b ? a : b)); }
)";

std::string load_expr(DType mem, const std::string& ptr, const std::string& off) {
  std::string e = "((const " + std::string(mtype(mem)) + "*)" + ptr + ")[" + off + "]";
  switch (mem) {
    case kFloat16:
      return "kiln_h2f(" + e + ")";
    case kBFloat16:
      return "kiln_bf2f(" + e + ")";
    case kBool:
      return "(" + e + " != 0)";
    default:
      return e;
  }
}

std::string store_value(DType mem, DType value_type, const std::string& v) {
  switch (mem) {
    case kFloat16:
      return "kiln_f2h((float)(" + v + "))";
    case kBFloat16:
      return "kiln_f2bf((float)(" + v + "))";
    case kBool:
      return "(unsigned char)((" + v + ") != 0)";
    case kFloat32:
      return "(float)(" + v + ")";
    default:
      return "(double)(" + v + ")";
  }
}

std::string instr_expr(const PointwiseKernel& k, const Instr& in) {
  auto v = [](int32_t i) { return "v" + std::to_string(i); };
  DType t = in.dtype;
  std::string a = in.a >= 0 ? v(in.a) : "", b = in.b >= 0 ? v(in.b) : "",
              c = in.c >= 0 ? v(in.c) : "";
  std::string one = t == kFloat64 ? "1.0" : "1.0f", half = t == kFloat64 ? "0.5" : "0.5f";
  switch (in.op) {
    case Prim::Load:
    case Prim::Const:
      break;
    case Prim::Neg:
      return "-" + a;
    case Prim::Abs:
      return fn("fabs", t) + "(" + a + ")";
    case Prim::Exp:
      return fn("exp", t) + "(" + a + ")";
    case Prim::Log:
      return fn("log", t) + "(" + a + ")";
    case Prim::Sqrt:
      return fn("sqrt", t) + "(" + a + ")";
    case Prim::Rsqrt:
      return fn("rsqrt", t) + "(" + a + ")";
    case Prim::Reciprocal:
      return one + " / " + a;
    case Prim::Sin:
      return fn("sin", t) + "(" + a + ")";
    case Prim::Cos:
      return fn("cos", t) + "(" + a + ")";
    case Prim::Tanh:
      return fn("tanh", t) + "(" + a + ")";
    case Prim::Sigmoid:
      return one + " / (" + one + " + " + fn("exp", t) + "(-" + a + "))";
    case Prim::Relu:
      return "(" + a + " != " + a + " ? " + a + " : (" + a + " > 0 ? " + a + " : 0))";
    case Prim::Erf:
      return fn("erf", t) + "(" + a + ")";
    case Prim::Floor:
      return fn("floor", t) + "(" + a + ")";
    case Prim::Ceil:
      return fn("ceil", t) + "(" + a + ")";
    case Prim::Trunc:
      return fn("trunc", t) + "(" + a + ")";
    case Prim::Round:
      return fn("rint", t) + "(" + a + ")";
    case Prim::GeluErf:
      return half + " * " + a + " * (" + one + " + " + fn("erf", t) + "(" + a + " * " +
             literal(0.70710678118654752440, t) + "))";
    case Prim::GeluTanh:
      return half + " * " + a + " * (" + one + " + " + fn("tanh", t) + "(" +
             literal(0.79788456080286535588, t) + " * (" + a + " + " + literal(0.044715, t) +
             " * " + a + " * " + a + " * " + a + ")))";
    case Prim::Silu:
      return a + " / (" + one + " + " + fn("exp", t) + "(-" + a + "))";
    case Prim::Expm1:
      return fn("expm1", t) + "(" + a + ")";
    case Prim::Log1p:
      return fn("log1p", t) + "(" + a + ")";
    case Prim::LogicalNot:
    case Prim::RoundF16:
      return "kiln_h2f(kiln_f2h(" + a + "))";
    case Prim::RoundBF16:
      return "kiln_bf2f(kiln_f2bf(" + a + "))";
      return "!" + a;
    case Prim::Cast:
      if (t == kBool) return "(" + a + " != 0)";
      return "(" + std::string(ctype(t)) + ")" + a;
    case Prim::Add:
      return a + " + " + b;
    case Prim::Sub:
      return a + " - " + b;
    case Prim::Mul:
      return a + " * " + b;
    case Prim::Div:
      return a + " / " + b;
    case Prim::Max:
      return "kiln_max(" + a + ", " + b + ")";
    case Prim::Min:
      return "kiln_min(" + a + ", " + b + ")";
    case Prim::Pow:
      return fn("pow", t) + "(" + a + ", " + b + ")";
    case Prim::Eq:
      return a + " == " + b;
    case Prim::Ne:
      return a + " != " + b;
    case Prim::Lt:
      return a + " < " + b;
    case Prim::Le:
      return a + " <= " + b;
    case Prim::Gt:
      return a + " > " + b;
    case Prim::Ge:
      return a + " >= " + b;
    case Prim::LogicalAnd:
      return a + " && " + b;
    case Prim::LogicalOr:
      return a + " || " + b;
    case Prim::Where:
      return a + " ? " + b + " : " + c;
  }
  KILN_FAIL("[cuda codegen] no CUDA expression for ", prim_name(in.op));
}

uint64_t spec_hash(const PointwiseSpec& s) {
  uint64_t h = s.kernel->hash();
  for (Layout l : s.layouts) h = (h ^ static_cast<uint64_t>(l)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(s.ndim)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(s.index32)) * 1099511628211ull;
  return h;
}

}  // namespace

std::string pointwise_name(const PointwiseSpec& spec) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "kiln_pw_%016llx",
                static_cast<unsigned long long>(spec_hash(spec)));
  return buf;
}

std::string pointwise_source(const PointwiseSpec& spec) {
  const PointwiseKernel& k = *spec.kernel;
  const size_t nout = k.outputs.size(), nops = nout + k.inputs.size();
  KILN_CHECK(spec.layouts.size() == nops, "[cuda codegen] expected ", nops, " layouts, got ",
             spec.layouts.size());
  KILN_CHECK(spec.ndim >= 1 && spec.ndim <= kMaxDims, "[cuda codegen] expected 1..", kMaxDims,
             " iteration dims, got ", spec.ndim);
  const std::string idx = spec.index32 ? "int" : "i64";
  std::ostringstream os;
  os << kPrelude;
  os << "struct KilnArgs {\n  i64 numel;\n  i64 sizes[" << kMaxDims << "];\n";
  for (size_t o = 0; o < nops; ++o) {
    os << "  void* p" << o << ";\n";
    if (spec.layouts[o] == Layout::Strided) os << "  i64 s" << o << "[" << kMaxDims << "];\n";
  }
  os << "};\n";
  os << "extern \"C\" __global__ void __launch_bounds__(256) " << pointwise_name(spec)
     << "(const __grid_constant__ KilnArgs a) {\n";
  os << "  const " << idx << " n = (" << idx << ")a.numel;\n";
  os << "  for (" << idx << " i = (" << idx << ")blockIdx.x * 256 + threadIdx.x; i < n; i += ("
     << idx << ")gridDim.x * 256) {\n";
  bool strided = false;
  for (Layout l : spec.layouts) strided = strided || l == Layout::Strided;
  if (strided) {
    // N-d index, innermost dim last.
    os << "    " << idx << " rem = i;\n";
    for (int d = spec.ndim - 1; d >= 0; --d) {
      os << "    const " << idx << " i" << d << " = rem % (" << idx << ")a.sizes[" << d
         << "]; rem /= (" << idx << ")a.sizes[" << d << "];\n";
    }
  }
  auto offset = [&](size_t o) -> std::string {
    switch (spec.layouts[o]) {
      case Layout::Dense:
        return "i";
      case Layout::Scalar:
        return "0";
      case Layout::Strided: {
        std::string e;
        for (int d = 0; d < spec.ndim; ++d) {
          if (d) e += " + ";
          e += "i" + std::to_string(d) + " * (" + idx + ")a.s" + std::to_string(o) + "[" +
               std::to_string(d) + "]";
        }
        return e;
      }
    }
    return "0";
  };
  for (size_t n = 0; n < k.body.size(); ++n) {
    const Instr& in = k.body[n];
    os << "    const " << ctype(in.dtype) << " v" << n << " = ";
    if (in.op == Prim::Load) {
      size_t o = nout + static_cast<size_t>(in.operand);
      os << "(" << ctype(in.dtype) << ")"
         << load_expr(k.inputs[in.operand], "a.p" + std::to_string(o), offset(o));
    } else if (in.op == Prim::Const) {
      os << literal(in.imm, in.dtype);
    } else {
      os << instr_expr(k, in);
    }
    os << ";\n";
  }
  for (size_t o = 0; o < nout; ++o) {
    os << "    ((" << mtype(k.outputs[o]) << "*)a.p" << o << ")[" << offset(o) << "] = "
       << store_value(k.outputs[o], k.body[k.stores[o]].dtype, "v" + std::to_string(k.stores[o]))
       << ";\n";
  }
  os << "  }\n}\n";
  return os.str();
}

}  // namespace kiln::jit::cuda
