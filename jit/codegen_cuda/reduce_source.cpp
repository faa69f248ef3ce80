#include "jit/codegen_cuda/reduce_source.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "jit/codegen_cuda/device_prelude.h"
#include "jit/codegen_cuda/pointwise_source.h"
#include "kiln/error.h"

// GCC 12 reports false stringop-overflow warnings for std::string
// concatenation inlined at -O3; this file only builds strings.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

// Row reductions across the `T` lanes of a row (Note [CUDA reduction schedules
// for groups]). Every lane gets the same bits: xor butterflies add commutative
// pairs, and the shared-memory stage reads the warps' values in one order.
const char kReducePrelude[] =
    R"(struct KilnAddOp { template <class V> __device__ __forceinline__ V operator()(V a, V b) const { return a + b; } };
struct KilnMaxOp { __device__ __forceinline__ float operator()(float a, float b) const { return kiln_max(a, b); } };
struct KilnMinOp { __device__ __forceinline__ float operator()(float a, float b) const { return kiln_min(a, b); } };
template <int T, class V, class Op> __device__ __forceinline__ V kiln_row_reduce(V v, void* smv, Op op) {
  if (T == 1) return v;
#pragma unroll
  for (int m = (T < 32 ? T : 32) / 2; m > 0; m >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, m));
  if (T <= 32) return v;
  V* g = (V*)smv + (threadIdx.x / T) * (T / 32);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) g[(threadIdx.x % T) >> 5] = v;
  __syncthreads();
  v = g[0];
#pragma unroll
  for (int w = 1; w < T / 32; ++w) v = op(v, g[w]);
  return v;
}
)";

uint64_t mix(uint64_t h, uint64_t v) {
  return (h ^ v) * 1099511628211ull;
}

uint64_t spec_hash(const ReduceSpec& s) {
  const ReductionKernel& k = *s.kernel;
  uint64_t h = 1469598103934665603ull;
  for (char c : k.prologue.key()) h = mix(h, static_cast<unsigned char>(c));
  h = mix(h, 0xabcdef);
  for (char c : k.epilogue.key()) h = mix(h, static_cast<unsigned char>(c));
  h = mix(h, static_cast<uint64_t>(k.op));
  for (Walk w : s.walks) h = mix(h, static_cast<uint64_t>(w));
  for (int v : {s.kept_dims, s.red_dims, s.threads, s.per_thread, static_cast<int>(s.index32),
                s.vec, static_cast<int>(s.split)}) {
    h = mix(h, static_cast<uint64_t>(v));
  }
  return h;
}

struct Operand {
  DType dtype;
  bool output;
  Walk walk;
};

}  // namespace

int reduce_operand_count(const ReductionKernel& k) {
  return static_cast<int>(k.prologue.outputs.size() - 1 + k.prologue.inputs.size() +
                          k.epilogue.outputs.size() + k.epilogue.inputs.size() - 1);
}

int reduce_block_size(const ReduceSpec& spec) {
  return spec.threads > 256 ? spec.threads : 256;
}

int reduce_vector_width(const ReduceSpec& spec) {
  const PointwiseKernel& pro = spec.kernel->prologue;
  const size_t first_in = pro.outputs.size() - 1;
  size_t widest = 0;
  for (size_t i = 0; i < pro.inputs.size(); ++i) {
    if (first_in + i < spec.walks.size() && spec.walks[first_in + i] == Walk::Contig) {
      widest = std::max(widest, itemsize(pro.inputs[i]));
    }
  }
  return widest == 0 ? 1 : static_cast<int>(std::min<size_t>(8, 16 / widest));
}

std::string reduce_name(const ReduceSpec& spec) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "kiln_red_%016llx",
                static_cast<unsigned long long>(spec_hash(spec)));
  return buf;
}

std::string reduce_source(const ReduceSpec& spec) {
  const ReductionKernel& k = *spec.kernel;
  const RowOp op = k.op;
  const bool norm = is_row_normalization(op);
  const PointwiseKernel &pro = k.prologue, &epi = k.epilogue;
  KILN_CHECK(!pro.outputs.empty() && !epi.inputs.empty(),
             "[cuda codegen] expected a reduced value and a result, got ", pro.outputs.size(),
             " prologue outputs and ", epi.inputs.size(), " epilogue inputs");
  const int nops = reduce_operand_count(k);
  KILN_CHECK(static_cast<int>(spec.walks.size()) == nops, "[cuda codegen] expected ", nops,
             " walks, got ", spec.walks.size());
  KILN_CHECK(spec.kept_dims >= 1 && spec.kept_dims <= kMaxReduceDims && spec.red_dims >= 1 &&
                 spec.red_dims <= kMaxReduceDims,
             "[cuda codegen] expected 1..", kMaxReduceDims, " kept and reduced dims, got ",
             spec.kept_dims, " and ", spec.red_dims);
  const int T = spec.threads;
  KILN_CHECK(T == 1 || T == 32 || T == 128 || T == 256 || T == 1024,
             "[cuda codegen] expected 1, 32, 128, 256 or 1024 threads per row, got ", T);
  const int P = spec.per_thread;
  KILN_CHECK(P >= 0 && P <= 16 && (P & (P - 1)) == 0 && (P <= 8 || T > 1),
             "[cuda codegen] expected 0 or a power of two up to 16 values per lane (8 with one "
             "lane), got ",
             P);
  const int B = reduce_block_size(spec), R = B / T;
  const int V = spec.vec;
  const bool multi_pass = norm || op == RowOp::Var;
  KILN_CHECK(V == 1 || (V == reduce_vector_width(spec) && V > 1 && T > 1 && P % V == 0),
             "[cuda codegen] expected vector width 1 or ", reduce_vector_width(spec),
             " (with several lanes and a multiple of it per lane), got ", V);
  KILN_CHECK(!spec.split || (!multi_pass && T == B),
             "[cuda codegen] expected a split row to be a one-pass statistic with a block per row");

  // Operand table in ABI order; `pro_slot`/`epi_slot` map a body's operand to it.
  std::vector<Operand> ops;
  std::vector<int> pro_out(pro.outputs.size(), -1), pro_in(pro.inputs.size(), -1),
      epi_out(epi.outputs.size(), -1), epi_in(epi.inputs.size(), -1);
  auto add = [&](DType t, bool output) {
    const int o = static_cast<int>(ops.size());
    ops.push_back({t, output, spec.walks[o]});
    return o;
  };
  for (size_t i = 1; i < pro.outputs.size(); ++i) pro_out[i] = add(pro.outputs[i], true);
  for (size_t i = 0; i < pro.inputs.size(); ++i) pro_in[i] = add(pro.inputs[i], false);
  for (size_t i = 0; i < epi.outputs.size(); ++i) epi_out[i] = add(epi.outputs[i], true);
  for (size_t i = 1; i < epi.inputs.size(); ++i) epi_in[i] = add(epi.inputs[i], false);
  const int first_epi = epi_out.empty() ? nops : epi_out[0];
  for (int i = 0; i < nops; ++i) {
    KILN_CHECK(ops[i].walk != Walk::Contig || spec.red_dims == 1,
               "[cuda codegen] a contiguous walk needs one reduced dim, got ", spec.red_dims);
    KILN_CHECK(norm || i < first_epi || ops[i].walk == Walk::Zero,
               "[cuda codegen] expected a statistic's epilogue operand to walk Zero, operand ", i,
               " does not");
  }

  const std::string I = spec.index32 ? "int" : "i64";
  const std::string KD = std::to_string(spec.kept_dims), RD = std::to_string(spec.red_dims);
  std::ostringstream os;
  os << pointwise_prelude() << kReducePrelude;
  os << "struct KilnArgs {\n  i64 rows;\n  i64 n;\n  double eps;\n  double divisor;\n";
  if (spec.split) os << "  i64 chunk;\n  void* ws;\n";
  os << "  i64 ks[" << KD << "];\n  i64 rs[" << RD << "];\n";
  for (int o = 0; o < nops; ++o) {
    os << "  void* p" << o << ";\n  i64 k" << o << "[" << KD << "];\n";
    if (ops[o].walk == Walk::Strided) os << "  i64 r" << o << "[" << RD << "];\n";
  }
  os << "};\n";
  os << "extern \"C\" __global__ void __launch_bounds__(" << B << ") " << reduce_name(spec)
     << "(const __grid_constant__ KilnArgs a) {\n";
  os << "  __shared__ double kiln_sm[" << B / 32 << "];\n";
  os << "  const " << I << " rows = (" << I << ")a.rows, n = (" << I << ")a.n;\n";
  os << "  const int lane = threadIdx.x % " << T << ";\n";
  os << "  for (" << I << " base = (" << I << ")blockIdx.x * " << R << "; base < rows; base += ("
     << I << ")gridDim.x * " << R << ") {\n";
  os << "    const " << I << " row = base + threadIdx.x / " << T << ";\n";
  os << "    const bool valid = row < rows;\n";
  if (spec.split) {
    // This block's chunk of the row: [lo, len).
    os << "    const " << I << " lo = (" << I << ")blockIdx.y * (" << I << ")a.chunk;\n";
    os << "    const " << I << " len = valid ? min(n, lo + (" << I << ")a.chunk) : 0;\n";
  } else {
    os << "    const " << I << " len = valid ? n : 0;\n";
  }
  // Kept offsets, once per row.
  for (int o = 0; o < nops; ++o) os << "    " << I << " k" << o << " = 0;\n";
  os << "    {\n      " << I << " rem = valid ? row : 0;\n";
  for (int d = spec.kept_dims - 1; d >= 0; --d) {
    const std::string D = std::to_string(d);
    os << "      { const " << I << " i = rem % (" << I << ")a.ks[" << D << "]; rem /= (" << I
       << ")a.ks[" << D << "];";
    for (int o = 0; o < nops; ++o) {
      os << " k" << o << " += i * (" << I << ")a.k" << o << "[" << D << "];";
    }
    os << " }\n";
  }
  os << "    }\n";
  // An operand's offset at reduced position j (reduced indices r0.. in scope when strided).
  auto offset = [&](int o) {
    std::string e = "k" + std::to_string(o);
    switch (ops[o].walk) {
      case Walk::Contig:
        return e + " + j";
      case Walk::Zero:
        return e;
      case Walk::Strided:
        for (int d = 0; d < spec.red_dims; ++d) {
          e += " + r" + std::to_string(d) + " * (" + I + ")a.r" + std::to_string(o) + "[" +
               std::to_string(d) + "]";
        }
        return e;
    }
    return e;
  };
  auto red_index = [&](const std::vector<int>& slots, const std::string& pad) {
    bool strided = false;
    for (int o : slots) strided = strided || (o >= 0 && ops[o].walk == Walk::Strided);
    if (!strided) return;
    os << pad << I << " rem = j;\n";
    for (int d = spec.red_dims - 1; d >= 0; --d) {
      const std::string D = std::to_string(d);
      os << pad << "const " << I << " r" << D << " = rem % (" << I << ")a.rs[" << D << "]; rem /= ("
         << I << ")a.rs[" << D << "];\n";
    }
  };
  auto ptr = [&](int o) {
    return "((" + std::string(ops[o].output ? "" : "const ") + mem_type(ops[o].dtype) + "*)a.p" +
           std::to_string(o) + ")";
  };
  // The prologue at reduced position j: returns the value reduced; stores only when `st`.
  // With vectors, `prov` runs it at j0..j0+V-1 into xv[0..V-1], each Contig
  // input read with one aligned access (the plan checked alignment).
  {
    std::vector<int> slots = pro_in;
    slots.insert(slots.end(), pro_out.begin(), pro_out.end());
    std::string pad = "      ";
    if (V > 1) {
      os << "    auto prov = [&](" << I << " j0, bool st, float* xv) {\n";
      for (size_t i = 0; i < pro.inputs.size(); ++i) {
        const int o = pro_in[i];
        if (ops[o].walk != Walk::Contig) continue;
        const std::string vt =
            "KilnVec<" + std::string(mem_type(pro.inputs[i])) + ", " + std::to_string(V) + ">";
        os << "      const " << vt << " l" << o << " = *(const " << vt << "*)(" << ptr(o) << " + k"
           << o << " + j0);\n";
      }
      os << "#pragma unroll\n      for (int e = 0; e < " << V << "; ++e) {\n        const " << I
         << " j = j0 + e;\n";
      pad = "        ";
    } else {
      os << "    auto pro = [&](" << I << " j, bool st) -> float {\n";
    }
    red_index(slots, pad);
    os << pad << "float x;\n";
    emit_pointwise_body(
        os, pro, pad,
        [&](size_t i) {
          const int o = pro_in[i];
          if (V > 1 && ops[o].walk == Walk::Contig) {
            return device_load(pro.inputs[i], "l" + std::to_string(o) + ".v", "e");
          }
          return device_load(pro.inputs[i], "a.p" + std::to_string(o), offset(o));
        },
        [&](size_t o, const std::string& v) -> std::string {
          if (o == 0) return "x = " + v;
          return "if (st) " + ptr(pro_out[o]) + "[" + offset(pro_out[o]) + "] = " + v;
        });
    if (V > 1) {
      os << "        xv[e] = x;\n      }\n    };\n";
    } else {
      os << "      return x;\n    };\n";
    }
  }
  // The epilogue: at reduced position j for a normalization, once per row for a statistic.
  {
    std::vector<int> slots = epi_in;
    slots.insert(slots.end(), epi_out.begin(), epi_out.end());
    os << "    auto epi = [&](" << (norm ? I + " j, " : std::string()) << "float core) {\n";
    if (norm) red_index(slots, "      ");
    emit_pointwise_body(
        os, epi, "      ",
        [&](size_t i) -> std::string {
          if (i == 0) return "core";
          return device_load(epi.inputs[i], "a.p" + std::to_string(epi_in[i]), offset(epi_in[i]));
        },
        [&](size_t o, const std::string& v) {
          return ptr(epi_out[o]) + "[" + offset(epi_out[o]) + "] = " + v;
        });
    os << "    };\n";
  }
  // Passes over the row: `stmt` sees the value as `x` (a reference into the
  // registers when the row is kept there) and its position `j`.
  int pass_count = 0;
  const std::string lo = spec.split ? "lo + " : "";
  auto pass = [&](const std::string& stmt) {
    const bool first = pass_count++ == 0;
    if (V > 1 && P > 0) {
      // Register slot q holds position (lane + (q / V) * T) * V + q % V.
      if (first) {
        os << "    float xs[" << P << "];\n#pragma unroll\n    for (int c = 0; c < " << P / V
           << "; ++c) {\n      const " << I << " j0 = (lane + (" << I << ")c * " << T << ") * " << V
           << ";\n      if (j0 < len) {\n        prov(j0, true, xs + c * " << V
           << ");\n      } else {\n#pragma unroll\n        for (int e = 0; e < " << V
           << "; ++e) xs[c * " << V << " + e] = 0.0f;\n      }\n    }\n";
      }
      os << "#pragma unroll\n    for (int q = 0; q < " << P << "; ++q) {\n      const " << I
         << " j = (lane + (" << I << ")(q / " << V << ") * " << T << ") * " << V << " + q % " << V
         << ";\n      if (j < len) {\n        float& x = xs[q];\n"
         << "        " << stmt << "\n      }\n    }\n";
    } else if (V > 1) {
      os << "    for (" << I << " j0 = " << lo << "(" << I << ")lane * " << V
         << "; j0 < len; j0 += " << T * V << ") {\n      float xv[" << V << "];\n      prov(j0, "
         << (first ? "true" : "false") << ", xv);\n#pragma unroll\n      for (int e = 0; e < " << V
         << "; ++e) {\n        const " << I << " j = j0 + e;\n        float x = xv[e];\n        "
         << stmt << "\n      }\n    }\n";
    } else if (P > 0) {
      if (first) {
        os << "    float xs[" << P << "];\n#pragma unroll\n    for (int q = 0; q < " << P
           << "; ++q) {\n      const " << I << " j = lane + (" << I << ")q * " << T
           << ";\n      xs[q] = j < len ? pro(j, true) : 0.0f;\n    }\n";
      }
      os << "#pragma unroll\n    for (int q = 0; q < " << P << "; ++q) {\n      const " << I
         << " j = lane + (" << I << ")q * " << T
         << ";\n      if (j < len) {\n        float& x = xs[q];\n"
         << "        " << stmt << "\n      }\n    }\n";
    } else {
      os << "    for (" << I << " j = " << lo << "lane; j < len; j += " << T
         << ") {\n      float x = pro(j, " << (first ? "true" : "false") << ");\n      " << stmt
         << "\n    }\n";
    }
  };
  auto reduce = [&](const std::string& v, const char* fn) {
    os << "    " << v << " = kiln_row_reduce<" << T << ">(" << v << ", kiln_sm, " << fn << "());\n";
  };
  const std::string inf = "__int_as_float(0x7f800000)";
  // Note [CUDA group sums]: Sum, Mean and the statistics of Var, LayerNorm
  // and RmsNorm accumulate in float64, per lane and across lanes, as the eager
  // kernels do (Note [CUDA float sums]). Deviations are taken as `x - mean`
  // and normalization as `(x - mean) * rstd`, never `x * rstd - mean * rstd`:
  // --fmad contracts the latter into an fma whose unrounded product leaves
  // ~1e-5 where the CPU gets exactly 0 (a row of one element, a constant row).
  switch (op) {
    case RowOp::Sum:
    case RowOp::Mean:
      os << "    double acc = 0.0;\n";
      pass("acc += (double)x;");
      reduce("acc", "KilnAddOp");
      if (op == RowOp::Mean && !spec.split) os << "    acc = acc / (double)n;\n";
      break;
    case RowOp::Max:
    case RowOp::Min:
      os << "    float acc = " << (op == RowOp::Max ? "-" : "") << inf << ";\n";
      pass(op == RowOp::Max ? "acc = kiln_max(acc, x);" : "acc = kiln_min(acc, x);");
      reduce("acc", op == RowOp::Max ? "KilnMaxOp" : "KilnMinOp");
      break;
    case RowOp::Var:
      os << "    double s = 0.0;\n";
      pass("s += (double)x;");
      reduce("s", "KilnAddOp");
      os << "    const double mean = s / (double)n;\n    double acc = 0.0;\n";
      pass("const double d = (double)x - mean; acc += d * d;");
      reduce("acc", "KilnAddOp");
      os << "    acc = acc / a.divisor;\n";
      break;
    case RowOp::Softmax:
    case RowOp::LogSoftmax:
      os << "    float mx = -" << inf << ";\n";
      pass("mx = kiln_max(mx, x);");
      reduce("mx", "KilnMaxOp");
      os << "    float s = 0.0f;\n";
      if (op == RowOp::Softmax && P > 0) {
        pass("x = expf(x - mx); s += x;");
      } else {
        pass("s += expf(x - mx);");
      }
      reduce("s", "KilnAddOp");
      if (op == RowOp::Softmax) {
        os << "    const float inv = 1.0f / s;\n";
        pass(P > 0 ? "epi(j, x * inv);" : "epi(j, expf(x - mx) * inv);");
      } else {
        os << "    const float ls = logf(s);\n";
        pass("epi(j, (x - mx) - ls);");
      }
      break;
    case RowOp::LayerNorm:
      os << "    double s = 0.0;\n";
      pass("s += (double)x;");
      reduce("s", "KilnAddOp");
      os << "    const double mean = s / (double)n;\n    double m2 = 0.0;\n";
      pass("const double d = (double)x - mean; m2 += d * d;");
      reduce("m2", "KilnAddOp");
      os << "    const float rstd = (float)(1.0 / sqrt(m2 / (double)n + a.eps));\n"
         << "    const float meanf = (float)mean;\n";
      pass("epi(j, (x - meanf) * rstd);");
      break;
    case RowOp::RmsNorm:
      os << "    double ss = 0.0;\n";
      pass("ss += (double)x * (double)x;");
      reduce("ss", "KilnAddOp");
      os << "    const float scale = (float)(1.0 / sqrt(ss / (double)n + a.eps));\n";
      pass("epi(j, x * scale);");
      break;
  }
  if (spec.split) {
    // Last block done (Note [CUDA reduction schedules for groups]): partials
    // are float64 (exact for Max/Min), read back in chunk order.
    const std::string at = op == RowOp::Max || op == RowOp::Min ? "float" : "double";
    const std::string comb = op == RowOp::Max   ? "t = kiln_max(t, (float)part[s]);"
                             : op == RowOp::Min ? "t = kiln_min(t, (float)part[s]);"
                                                : "t += part[s];";
    os << "    if (valid && lane == 0) {\n"
       << "      volatile double* part = (double*)a.ws + (i64)row * gridDim.y;\n"
       << "      unsigned* count = (unsigned*)((double*)a.ws + (i64)rows * gridDim.y) + row;\n"
       << "      part[blockIdx.y] = (double)acc;\n      __threadfence();\n"
       << "      if (atomicAdd(count, 1u) == gridDim.y - 1) {\n        __threadfence();\n"
       << "        " << at << " t = (" << at << ")part[0];\n"
       << "        for (unsigned s = 1; s < gridDim.y; ++s) " << comb << "\n";
    if (op == RowOp::Mean) os << "        t = t / (double)n;\n";
    os << "        epi((float)t);\n      }\n    }\n";
  } else if (!norm) {
    os << "    if (valid && lane == 0) epi((float)acc);\n";
  }
  os << "  }\n}\n";
  return os.str();
}

}  // namespace kiln::jit::cuda
