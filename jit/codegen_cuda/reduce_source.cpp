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
  h = mix(h, static_cast<uint64_t>(k.sqrt_result));
  for (Walk w : s.walks) h = mix(h, static_cast<uint64_t>(w));
  for (int v : {s.kept_dims, s.red_dims, s.threads, s.per_thread, static_cast<int>(s.index32),
                s.vec, static_cast<int>(s.split), static_cast<int>(s.epi_vec)}) {
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

namespace {

// Writes the translation unit of one reduction kernel, part by part: the
// argument struct, the row loop with each row's kept offsets, the prologue
// and epilogue as lambdas, then the row op's passes (Note [CUDA reduction
// schedules for groups]) and, for a split row, the last block's combine.
class ReduceWriter {
 public:
  explicit ReduceWriter(const ReduceSpec& spec)
      : spec_(spec),
        op_(spec.kernel->op),
        norm_(is_row_normalization(op_)),
        pro_(spec.kernel->prologue),
        epi_(spec.kernel->epilogue) {
    check_spec();
    operand_table();
  }

  std::string write() {
    os_ << pointwise_prelude() << kReducePrelude;
    args_struct();
    row_loop();
    kept_offsets();
    prologue();
    epilogue();
    row_op();
    finish_row();
    os_ << "  }\n}\n";
    return os_.str();
  }

 private:
  void check_spec() {
    KILN_CHECK(!pro_.outputs.empty() && !epi_.inputs.empty(),
               "[cuda codegen] expected a reduced value and a result, got ", pro_.outputs.size(),
               " prologue outputs and ", epi_.inputs.size(), " epilogue inputs");
    nops_ = reduce_operand_count(*spec_.kernel);
    KILN_CHECK(static_cast<int>(spec_.walks.size()) == nops_, "[cuda codegen] expected ", nops_,
               " walks, got ", spec_.walks.size());
    KILN_CHECK(spec_.kept_dims >= 1 && spec_.kept_dims <= kMaxReduceDims && spec_.red_dims >= 1 &&
                   spec_.red_dims <= kMaxReduceDims,
               "[cuda codegen] expected 1..", kMaxReduceDims, " kept and reduced dims, got ",
               spec_.kept_dims, " and ", spec_.red_dims);
    T_ = spec_.threads;
    KILN_CHECK(T_ == 1 || T_ == 32 || T_ == 128 || T_ == 256 || T_ == 1024,
               "[cuda codegen] expected 1, 32, 128, 256 or 1024 threads per row, got ", T_);
    P_ = spec_.per_thread;
    KILN_CHECK(P_ >= 0 && P_ <= 16 && (P_ & (P_ - 1)) == 0 && (P_ <= 8 || T_ > 1),
               "[cuda codegen] expected 0 or a power of two up to 16 values per lane (8 with one "
               "lane), got ",
               P_);
    B_ = reduce_block_size(spec_);
    R_ = B_ / T_;
    V_ = spec_.vec;
    const bool multi_pass = norm_ || op_ == RowOp::Var;
    KILN_CHECK(V_ == 1 || (V_ == reduce_vector_width(spec_) && V_ > 1 && T_ > 1 && P_ % V_ == 0),
               "[cuda codegen] expected vector width 1 or ", reduce_vector_width(spec_),
               " (with several lanes and a multiple of it per lane), got ", V_);
    KILN_CHECK(!spec_.epi_vec || (norm_ && V_ > 1 && P_ > 0),
               "[cuda codegen] expected vector epilogues only for a row normalization kept in "
               "registers with vector loads");
    KILN_CHECK(!spec_.split || (!multi_pass && T_ == B_),
               "[cuda codegen] expected a split row to be a one-pass statistic with a block per "
               "row");
    I_ = spec_.index32 ? "int" : "i64";
  }

  // Operands in ABI order; pro_out_ and the others map a body's operand to its slot.
  void operand_table() {
    pro_out_.assign(pro_.outputs.size(), -1);
    pro_in_.assign(pro_.inputs.size(), -1);
    epi_out_.assign(epi_.outputs.size(), -1);
    epi_in_.assign(epi_.inputs.size(), -1);
    auto add = [&](DType t, bool output) {
      const int o = static_cast<int>(ops_.size());
      ops_.push_back({t, output, spec_.walks[o]});
      return o;
    };
    for (size_t i = 1; i < pro_.outputs.size(); ++i) pro_out_[i] = add(pro_.outputs[i], true);
    for (size_t i = 0; i < pro_.inputs.size(); ++i) pro_in_[i] = add(pro_.inputs[i], false);
    for (size_t i = 0; i < epi_.outputs.size(); ++i) epi_out_[i] = add(epi_.outputs[i], true);
    for (size_t i = 1; i < epi_.inputs.size(); ++i) epi_in_[i] = add(epi_.inputs[i], false);
    const int first_epi = epi_out_.empty() ? nops_ : epi_out_[0];
    for (int i = 0; i < nops_; ++i) {
      KILN_CHECK(ops_[i].walk != Walk::Contig || spec_.red_dims == 1,
                 "[cuda codegen] a contiguous walk needs one reduced dim, got ", spec_.red_dims);
      KILN_CHECK(norm_ || i < first_epi || ops_[i].walk == Walk::Zero,
                 "[cuda codegen] expected a statistic's epilogue operand to walk Zero, operand ", i,
                 " does not");
    }
  }

  // The kernel's one argument (Note [CUDA reduction ABI]).
  void args_struct() {
    const std::string KD = std::to_string(spec_.kept_dims), RD = std::to_string(spec_.red_dims);
    os_ << "struct KilnArgs {\n  i64 rows;\n  i64 n;\n  double eps;\n  double divisor;\n";
    if (spec_.split) os_ << "  i64 chunk;\n  void* ws;\n";
    os_ << "  i64 ks[" << KD << "];\n  i64 rs[" << RD << "];\n";
    for (int o = 0; o < nops_; ++o) {
      os_ << "  void* p" << o << ";\n  i64 k" << o << "[" << KD << "];\n";
      if (ops_[o].walk == Walk::Strided) os_ << "  i64 r" << o << "[" << RD << "];\n";
    }
    // Note [Numbers as kernel arguments]: the prologue's, then the epilogue's.
    declare_params(os_, pro_, "pp");
    declare_params(os_, epi_, "ep");
    os_ << "};\n";
  }

  // The signature and the grid-stride loop over groups of R_ rows; each row's
  // lanes see `row`, `valid` and the end `len` of their part of the row.
  void row_loop() {
    const std::string& I = I_;
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << B_ << ") " << reduce_name(spec_)
        << "(const __grid_constant__ KilnArgs a) {\n";
    os_ << "  kiln_grid_enter();\n";  // Note [Early launch]
    os_ << "  __shared__ double kiln_sm[" << B_ / 32 << "];\n";
    os_ << "  const " << I << " rows = (" << I << ")a.rows, n = (" << I << ")a.n;\n";
    os_ << "  const int lane = threadIdx.x % " << T_ << ";\n";
    os_ << "  for (" << I << " base = (" << I << ")blockIdx.x * " << R_
        << "; base < rows; base += (" << I << ")gridDim.x * " << R_ << ") {\n";
    os_ << "    const " << I << " row = base + threadIdx.x / " << T_ << ";\n";
    os_ << "    const bool valid = row < rows;\n";
    if (spec_.split) {
      // This block's chunk of the row: [lo, len).
      os_ << "    const " << I << " lo = (" << I << ")blockIdx.y * (" << I << ")a.chunk;\n";
      os_ << "    const " << I << " len = valid ? min(n, lo + (" << I << ")a.chunk) : 0;\n";
    } else {
      os_ << "    const " << I << " len = valid ? n : 0;\n";
    }
  }

  // Each operand's offset at the row's kept position, once per row.
  void kept_offsets() {
    const std::string& I = I_;
    for (int o = 0; o < nops_; ++o) os_ << "    " << I << " k" << o << " = 0;\n";
    os_ << "    {\n      " << I << " rem = valid ? row : 0;\n";
    for (int d = spec_.kept_dims - 1; d >= 0; --d) {
      const std::string D = std::to_string(d);
      os_ << "      { const " << I << " i = rem % (" << I << ")a.ks[" << D << "]; rem /= (" << I
          << ")a.ks[" << D << "];";
      for (int o = 0; o < nops_; ++o) {
        os_ << " k" << o << " += i * (" << I << ")a.k" << o << "[" << D << "];";
      }
      os_ << " }\n";
    }
    os_ << "    }\n";
  }

  // An operand's offset at reduced position j (reduced indices r0.. in scope when strided).
  std::string offset(int o) const {
    std::string e = "k" + std::to_string(o);
    switch (ops_[o].walk) {
      case Walk::Contig:
        return e + " + j";
      case Walk::Zero:
        return e;
      case Walk::Strided:
        for (int d = 0; d < spec_.red_dims; ++d) {
          e += " + r" + std::to_string(d) + " * (" + I_ + ")a.r" + std::to_string(o) + "[" +
               std::to_string(d) + "]";
        }
        return e;
    }
    return e;
  }

  // The reduced indices r0.. of position j, where one of `slots` walks Strided.
  void reduced_index(const std::vector<int>& slots, const std::string& pad) {
    bool strided = false;
    for (int o : slots) strided = strided || (o >= 0 && ops_[o].walk == Walk::Strided);
    if (!strided) return;
    const std::string& I = I_;
    os_ << pad << I << " rem = j;\n";
    for (int d = spec_.red_dims - 1; d >= 0; --d) {
      const std::string D = std::to_string(d);
      os_ << pad << "const " << I << " r" << D << " = rem % (" << I << ")a.rs[" << D
          << "]; rem /= (" << I << ")a.rs[" << D << "];\n";
    }
  }

  std::string ptr(int o) const {
    return "((" + std::string(ops_[o].output ? "" : "const ") + mem_type(ops_[o].dtype) + "*)a.p" +
           std::to_string(o) + ")";
  }

  // The prologue at reduced position j: returns the value reduced; stores only when `st`.
  // With vectors, `prov` runs it at j0..j0+V-1 into xv[0..V-1], each Contig
  // input read with one aligned access (the plan checked alignment).
  void prologue() {
    std::vector<int> slots = pro_in_;
    slots.insert(slots.end(), pro_out_.begin(), pro_out_.end());
    std::string pad = "      ";
    if (V_ > 1) {
      os_ << "    auto prov = [&](" << I_ << " j0, bool st, float* xv) {\n";
      for (size_t i = 0; i < pro_.inputs.size(); ++i) {
        const int o = pro_in_[i];
        if (ops_[o].walk != Walk::Contig) continue;
        const std::string vt = vec_type(pro_.inputs[i]);
        os_ << "      const " << vt << " l" << o << " = *(const " << vt << "*)(" << ptr(o) << " + k"
            << o << " + j0);\n";
      }
      os_ << "#pragma unroll\n      for (int e = 0; e < " << V_ << "; ++e) {\n        const " << I_
          << " j = j0 + e;\n";
      pad = "        ";
    } else {
      os_ << "    auto pro = [&](" << I_ << " j, bool st) -> float {\n";
    }
    reduced_index(slots, pad);
    os_ << pad << "float x;\n";
    emit_pointwise_body(
        os_, pro_, pad, "a.pp",
        [&](size_t i) {
          const int o = pro_in_[i];
          if (V_ > 1 && ops_[o].walk == Walk::Contig) {
            return device_load(pro_.inputs[i], "l" + std::to_string(o) + ".v", "e");
          }
          return device_load(pro_.inputs[i], "a.p" + std::to_string(o), offset(o));
        },
        [&](size_t o, const std::string& v) -> std::string {
          if (o == 0) return "x = " + v;
          return "if (st) " + ptr(pro_out_[o]) + "[" + offset(pro_out_[o]) + "] = " + v;
        });
    if (V_ > 1) {
      os_ << "        xv[e] = x;\n      }\n    };\n";
    } else {
      os_ << "      return x;\n    };\n";
    }
  }

  // The `V_`-element vector of dtype `t` that one aligned access moves.
  std::string vec_type(DType t) const {
    return "KilnVec<" + std::string(mem_type(t)) + ", " + std::to_string(V_) + ">";
  }

  // The epilogue: at reduced position j for a normalization, once per row for a statistic.
  void epilogue() {
    if (spec_.epi_vec) {
      vector_epilogue();  // the scalar form would go unused
      return;
    }
    std::vector<int> slots = epi_in_;
    slots.insert(slots.end(), epi_out_.begin(), epi_out_.end());
    os_ << "    auto epi = [&](" << (norm_ ? I_ + " j, " : std::string()) << "float core) {\n";
    if (norm_) reduced_index(slots, "      ");
    emit_pointwise_body(
        os_, epi_, "      ", "a.ep",
        [&](size_t i) -> std::string {
          if (i == 0) return "core";
          return device_load(epi_.inputs[i], "a.p" + std::to_string(epi_in_[i]),
                             offset(epi_in_[i]));
        },
        [&](size_t o, const std::string& v) {
          return ptr(epi_out_[o]) + "[" + offset(epi_out_[o]) + "] = " + v;
        });
    os_ << "    };\n";
  }

  // Note [Vector epilogues of row normalizations]: `epiv` runs the epilogue
  // at j0..j0+V-1 on core[0..V-1], Contig inputs loaded and outputs stored as
  // one vector each.
  void vector_epilogue() {
    const int first_epi = epi_out_.empty() ? nops_ : epi_out_[0];
    for (int o = first_epi; o < nops_; ++o) {
      KILN_CHECK(ops_[o].walk == Walk::Contig || (!ops_[o].output && ops_[o].walk == Walk::Zero),
                 "[cuda codegen] expected vector epilogue operands to walk Contig (or Zero, "
                 "inputs), operand ",
                 o, " does not");
    }
    os_ << "    auto epiv = [&](" << I_ << " j0, const float* core) {\n";
    for (size_t i = 1; i < epi_.inputs.size(); ++i) {
      const int o = epi_in_[i];
      if (ops_[o].walk != Walk::Contig) continue;
      os_ << "      const " << vec_type(epi_.inputs[i]) << " l" << o << " = *(const "
          << vec_type(epi_.inputs[i]) << "*)(" << ptr(o) << " + k" << o << " + j0);\n";
    }
    for (size_t i = 0; i < epi_.outputs.size(); ++i) {
      os_ << "      " << vec_type(epi_.outputs[i]) << " s" << epi_out_[i] << ";\n";
    }
    os_ << "#pragma unroll\n      for (int e = 0; e < " << V_ << "; ++e) {\n";
    emit_pointwise_body(
        os_, epi_, "        ", "a.ep",
        [&](size_t i) -> std::string {
          if (i == 0) return "core[e]";
          const int o = epi_in_[i];
          if (ops_[o].walk == Walk::Contig) {
            return device_load(epi_.inputs[i], "l" + std::to_string(o) + ".v", "e");
          }
          return device_load(epi_.inputs[i], "a.p" + std::to_string(o), offset(o));
        },
        [&](size_t o, const std::string& v) {
          return "s" + std::to_string(epi_out_[o]) + ".v[e] = " + v;
        });
    os_ << "      }\n";
    for (size_t i = 0; i < epi_.outputs.size(); ++i) {
      const int o = epi_out_[i];
      os_ << "      *(" << vec_type(epi_.outputs[i]) << "*)(" << ptr(o) << " + k" << o
          << " + j0) = s" << o << ";\n";
    }
    os_ << "    };\n";
  }

  // The last pass of a row normalization: the epilogue at each position on
  // `expr` of its value `x`, a vector at a time with epi_vec.
  void normalize(const std::string& expr) {
    if (!spec_.epi_vec) {
      pass("epi(j, " + expr + ");");
      return;
    }
    ++pass_count_;
    const std::string& I = I_;
    os_ << "#pragma unroll\n    for (int c = 0; c < " << P_ / V_ << "; ++c) {\n      const " << I
        << " j0 = (lane + (" << I << ")c * " << T_ << ") * " << V_
        << ";\n      if (j0 < len) {\n        float cv[" << V_
        << "];\n#pragma unroll\n        for (int e = 0; e < " << V_
        << "; ++e) {\n          float& x = xs[c * " << V_ << " + e];\n          cv[e] = " << expr
        << ";\n        }\n        epiv(j0, cv);\n      }\n    }\n";
  }

  // One pass over the row: `stmt` sees the value as `x` (a reference into the
  // registers when the row is kept there) and its position `j`. The first
  // pass runs the prologue with its stores (and fills the registers).
  void pass(const std::string& stmt) {
    const bool first = pass_count_++ == 0;
    const std::string& I = I_;
    const std::string lo = spec_.split ? "lo + " : "";
    if (V_ > 1 && P_ > 0) {
      // Register slot q holds position (lane + (q / V) * T) * V + q % V.
      if (first) {
        os_ << "    float xs[" << P_ << "];\n#pragma unroll\n    for (int c = 0; c < " << P_ / V_
            << "; ++c) {\n      const " << I << " j0 = (lane + (" << I << ")c * " << T_ << ") * "
            << V_ << ";\n      if (j0 < len) {\n        prov(j0, true, xs + c * " << V_
            << ");\n      } else {\n#pragma unroll\n        for (int e = 0; e < " << V_
            << "; ++e) xs[c * " << V_ << " + e] = 0.0f;\n      }\n    }\n";
      }
      os_ << "#pragma unroll\n    for (int q = 0; q < " << P_ << "; ++q) {\n      const " << I
          << " j = (lane + (" << I << ")(q / " << V_ << ") * " << T_ << ") * " << V_ << " + q % "
          << V_ << ";\n      if (j < len) {\n        float& x = xs[q];\n"
          << "        " << stmt << "\n      }\n    }\n";
    } else if (V_ > 1) {
      os_ << "    for (" << I << " j0 = " << lo << "(" << I << ")lane * " << V_
          << "; j0 < len; j0 += " << T_ * V_ << ") {\n      float xv[" << V_
          << "];\n      prov(j0, " << (first ? "true" : "false")
          << ", xv);\n#pragma unroll\n      for (int e = 0; e < " << V_
          << "; ++e) {\n        const " << I << " j = j0 + e;\n        float x = xv[e];\n        "
          << stmt << "\n      }\n    }\n";
    } else if (P_ > 0) {
      if (first) {
        os_ << "    float xs[" << P_ << "];\n#pragma unroll\n    for (int q = 0; q < " << P_
            << "; ++q) {\n      const " << I << " j = lane + (" << I << ")q * " << T_
            << ";\n      xs[q] = j < len ? pro(j, true) : 0.0f;\n    }\n";
      }
      os_ << "#pragma unroll\n    for (int q = 0; q < " << P_ << "; ++q) {\n      const " << I
          << " j = lane + (" << I << ")q * " << T_
          << ";\n      if (j < len) {\n        float& x = xs[q];\n"
          << "        " << stmt << "\n      }\n    }\n";
    } else {
      os_ << "    for (" << I << " j = " << lo << "lane; j < len; j += " << T_
          << ") {\n      float x = pro(j, " << (first ? "true" : "false") << ");\n      " << stmt
          << "\n    }\n";
    }
  }

  // v = v op (every lane's v), the same bits in every lane.
  void reduce(const std::string& v, const char* fn) {
    os_ << "    " << v << " = kiln_row_reduce<" << T_ << ">(" << v << ", kiln_sm, " << fn
        << "());\n";
  }

  // Note [CUDA group sums]: Sum, Mean and the statistics of Var, LayerNorm
  // and RmsNorm accumulate in float64, per lane and across lanes, as the eager
  // kernels do (Note [CUDA float sums]). Deviations are taken as `x - mean`
  // and normalization as `(x - mean) * rstd`, never `x * rstd - mean * rstd`:
  // --fmad contracts the latter into an fma whose unrounded product leaves
  // ~1e-5 where the CPU gets exactly 0 (a row of one element, a constant row).
  void row_op() {
    const std::string inf = "__int_as_float(0x7f800000)";
    switch (op_) {
      case RowOp::Sum:
      case RowOp::Mean:
        os_ << "    double acc = 0.0;\n";
        pass("acc += (double)x;");
        reduce("acc", "KilnAddOp");
        if (op_ == RowOp::Mean && !spec_.split) os_ << "    acc = acc / (double)n;\n";
        break;
      case RowOp::Max:
      case RowOp::Min:
        os_ << "    float acc = " << (op_ == RowOp::Max ? "-" : "") << inf << ";\n";
        pass(op_ == RowOp::Max ? "acc = kiln_max(acc, x);" : "acc = kiln_min(acc, x);");
        reduce("acc", op_ == RowOp::Max ? "KilnMaxOp" : "KilnMinOp");
        break;
      case RowOp::Var:
        os_ << "    double s = 0.0;\n";
        pass("s += (double)x;");
        reduce("s", "KilnAddOp");
        os_ << "    const double mean = s / (double)n;\n    double acc = 0.0;\n";
        pass("const double d = (double)x - mean; acc += d * d;");
        reduce("acc", "KilnAddOp");
        os_ << "    acc = acc / a.divisor;\n";
        // std: the root of the float32 variance, as the CUDA eager kernel
        // (float32 Welford sums, as PyTorch's) overflows where it does.
        if (spec_.kernel->sqrt_result) os_ << "    acc = sqrt((double)(float)acc);\n";
        break;
      case RowOp::Softmax:
      case RowOp::LogSoftmax:
        os_ << "    float mx = -" << inf << ";\n";
        pass("mx = kiln_max(mx, x);");
        reduce("mx", "KilnMaxOp");
        os_ << "    float s = 0.0f;\n";
        if (op_ == RowOp::Softmax && P_ > 0) {
          pass("x = expf(x - mx); s += x;");
        } else {
          pass("s += expf(x - mx);");
        }
        reduce("s", "KilnAddOp");
        if (op_ == RowOp::Softmax) {
          os_ << "    const float inv = 1.0f / s;\n";
          normalize(P_ > 0 ? "x * inv" : "expf(x - mx) * inv");
        } else {
          os_ << "    const float ls = logf(s);\n";
          normalize("(x - mx) - ls");
        }
        break;
      case RowOp::LayerNorm:
        os_ << "    double s = 0.0;\n";
        pass("s += (double)x;");
        reduce("s", "KilnAddOp");
        os_ << "    const double mean = s / (double)n;\n    double m2 = 0.0;\n";
        pass("const double d = (double)x - mean; m2 += d * d;");
        reduce("m2", "KilnAddOp");
        os_ << "    const float rstd = (float)(1.0 / sqrt(m2 / (double)n + a.eps));\n"
            << "    const float meanf = (float)mean;\n";
        normalize("(x - meanf) * rstd");
        break;
      case RowOp::RmsNorm:
        os_ << "    double ss = 0.0;\n";
        pass("ss += (double)x * (double)x;");
        reduce("ss", "KilnAddOp");
        os_ << "    const float scale = (float)(1.0 / sqrt(ss / (double)n + a.eps));\n";
        normalize("x * scale");
        break;
    }
  }

  // A statistic's epilogue, once per row; for a split row, by the last block
  // done (Note [CUDA reduction schedules for groups]): partials are float64
  // (exact for Max/Min), read back in chunk order.
  void finish_row() {
    if (spec_.split) {
      const std::string at = op_ == RowOp::Max || op_ == RowOp::Min ? "float" : "double";
      const std::string comb = op_ == RowOp::Max   ? "t = kiln_max(t, (float)part[s]);"
                               : op_ == RowOp::Min ? "t = kiln_min(t, (float)part[s]);"
                                                   : "t += part[s];";
      os_ << "    if (valid && lane == 0) {\n"
          << "      volatile double* part = (double*)a.ws + (i64)row * gridDim.y;\n"
          << "      unsigned* count = (unsigned*)((double*)a.ws + (i64)rows * gridDim.y) + row;\n"
          << "      part[blockIdx.y] = (double)acc;\n      __threadfence();\n"
          << "      if (atomicAdd(count, 1u) == gridDim.y - 1) {\n        __threadfence();\n"
          << "        " << at << " t = (" << at << ")part[0];\n"
          << "        for (unsigned s = 1; s < gridDim.y; ++s) " << comb << "\n";
      if (op_ == RowOp::Mean) os_ << "        t = t / (double)n;\n";
      os_ << "        epi((float)t);\n      }\n    }\n";
    } else if (!norm_) {
      os_ << "    if (valid && lane == 0) epi((float)acc);\n";
    }
  }

  const ReduceSpec& spec_;
  const RowOp op_;
  const bool norm_;
  const PointwiseKernel &pro_, &epi_;
  int nops_ = 0;
  // Lanes per row, values per lane, threads per block, rows per block, vector width.
  int T_ = 1, P_ = 0, B_ = 256, R_ = 1, V_ = 1;
  std::string I_;  // the index type
  std::vector<Operand> ops_;
  std::vector<int> pro_out_, pro_in_, epi_out_, epi_in_;
  std::ostringstream os_;
  int pass_count_ = 0;
};

}  // namespace

std::string reduce_source(const ReduceSpec& spec) {
  return ReduceWriter(spec).write();
}

}  // namespace kiln::jit::cuda
