// The split-sequence decode attention kernel (Note [Fused attention] in
// attention.h): float16, bfloat16 and float32, head dims 64 and 128, up to
// kDecodeMaxRows query rows per key/value head, the cache position read on
// the device.
//
// Note [Decode splits follow the position]
// The grid is sized for a full cache (about four blocks per multiprocessor,
// at most kMaxSplits splits of whole tiles), and a captured graph keeps it
// while the position moves. The keys the rows see, [0, p + L), are what the
// blocks share: each takes an even slice of them, read from the position on
// the device. Slicing the capacity instead left the blocks past p idle and
// put every key on the first few (at p = 512 of 1024 with six splits, three
// tiles one after another on each of two blocks, where the even slice is
// two). A tile's rows past the block's last key are neither loaded nor
// scored nor summed: a short slice (the first steps of a decode, a prompt
// of one token) costs its keys, not a whole tile.
//
// Note [Decode combine]
// The last block of a (batch, kv head) merges the splits' partials. It used
// to walk the splits one after another, each step a load from L2 whose
// value decided the next (skip an empty split, then load its max and its
// partial): for 16 splits about 48 dependent L2 round trips, which made the
// kernel 12.9 us on an H200 at cache 1024 (ncu), several times its reads.
// Now a warp per row loads every split's (max, sum) at once (lanes over the
// splits, at most 4 each), reduces them with shuffles and leaves each split's
// weight w / den in shared memory; each output element then sums
// weight x partial over the splits, sixteen splits' loads issued together
// (they were guarded by the weight, four at a time). The partials are read
// with __ldcg (L2, not the SM's L1). The counter is a release-acquire
// increment by each block's first thread after the block's barrier: it
// orders the block's partials (every thread's, through the barrier) before
// it and the last block's reads after it. Every thread used to fence its
// own writes, and the last block fenced once more before reading.

// Note [Decode cache prefetched early]
// A block's first keys and values came from DRAM after the kernel's wait,
// on its critical path. The kernel before it (the QKV product) writes only
// this step's key and value, so the block's slice of the cache can start its
// trip into L2 before the wait (Note [Early launch]): each thread issues
// prefetch.global.L2 for lines of the slice. The slice follows the position
// (Note [Decode splits follow the position]), which is read before the wait
// with a relaxed load: the kernel before may be the one that writes it, so
// the value may be stale, but it only decides which lines are prefetched (a
// prefetch moves no value into a register), and the kernel reads the
// position again after the wait for everything else.

// Note [Decode loads side by side]
// After the wait, a block's critical path was a row of trips to L2, each
// waiting for the one before: the position, then the query rows (stored to
// shared memory, then a barrier), then the first tile's keys and values,
// and in the last block of a group the splits' (max, sum), then their
// partials. Two of them need not wait: the query rows go into registers
// with the position's load, the first tile's copies go out as soon as the
// position is known (the query reaches shared memory after them, before
// the barrier that precedes the scores), and the last block issues its
// first element's first sixteen partials before the (max, sum) loads, so
// they travel together. That is one L2 trip fewer in every block and one
// more in the last.

#include <algorithm>
#include <cstdlib>
#include <string>

#include "jit/codegen_cuda/kernel_loader.h"
#include "jit/codegen_cuda/op_kernels/attention.h"
#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "kiln/error.h"
#include "runtime/core/env.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/launch_record.h"

#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

struct DecodeSpec {
  DType dtype = kFloat16;
  int d = 64;               // head dim
  int rmax = 1;             // query rows per block, rounded up to a power of two
  int stages = 1;           // tiles in shared memory at once (Note [Decode tiles in flight])
  bool prefetch = true;     // Note [Decode cache prefetched early] (KILN_DECODE_PREFETCH=0: off)
  bool early_loads = true;  // Note [Decode loads side by side] (KILN_DECODE_EARLY_LOADS=0: off)
  bool warp_keys = false;   // Note [Decode keys by warp] (KILN_DECODE_WARP_KEYS=0: off)
};

constexpr int kThreads = 128;
constexpr int kTileBytes = 8192;  // one K (or V) tile in shared memory
constexpr int kMaxSplits = 128;
constexpr int kStaticShared = 48 * 1024;  // a kernel's static shared memory at most

// Geometry of one variant: TK keys per tile, TPK threads per key for the
// scores (each reads every TPK-th 16-byte chunk of the key's row, so a row's
// threads read adjacent chunks), K rows padded by TPK * 16 bytes so the
// quarter-warps' 16-byte reads fall in distinct banks.
struct DecodeGeometry {
  int es, tk, tpk, cpr, epc, krow_bytes, rpt, nacc;
  int tile_bytes;   // one K tile and one V tile (padded rows)
  int other_bytes;  // the rest of the block's shared memory
};
DecodeGeometry geometry(const DecodeSpec& s) {
  DecodeGeometry g{};
  g.es = static_cast<int>(itemsize(s.dtype));
  g.tk = kTileBytes / (s.d * g.es);
  g.tpk = kThreads / g.tk;
  g.cpr = s.d * g.es / 16;
  g.epc = 16 / g.es;
  g.krow_bytes = s.d * g.es + g.tpk * 16;
  g.rpt = kThreads / s.d;                              // row groups in P @ V
  g.nacc = std::max(1, (s.rmax + g.rpt - 1) / g.rpt);  // rows per thread in P @ V
  g.tile_bytes = g.tk * g.krow_bytes + g.tk * s.d * g.es;
  // sq, sp, s_w, s_m / s_l / s_a and s_last.
  g.other_bytes = s.rmax * 4 * (s.d + g.tk + kMaxSplits) + s.rmax * 12 + 4;
  if (s.warp_keys) g.other_bytes += 4 * (4 * s.d + 8);  // the warps' partial rows
  return g;
}

std::string decode_name(const DecodeSpec& s) {
  return std::string("kiln_attn_dec_") + dtype_tag(s.dtype) + "_d" + std::to_string(s.d) + "_r" +
         std::to_string(s.rmax) + (s.stages > 1 ? "_p" + std::to_string(s.stages) : "") +
         (s.prefetch ? "" : "_np") + (s.early_loads ? "" : "_nl") + (s.warp_keys ? "_wk" : "");
}

// Note [Decode tiles in flight]
// A block whose slice spans several tiles used to load one, wait for it,
// score it and sum it, then load the next: every tile a full DRAM trip on
// the block's critical path (GPT-2 at batch 8, position 512: 86 keys per
// block, two tiles, the attention 13 us of a 31 us layer). With two stages
// the next tile's cp.async loads are issued before the current tile is
// scored, so they travel while it is used. Taken where the slice can span
// more than one tile and two tiles fit in static shared memory (every
// variant up to 8 rows).
bool two_stages_fit(const DecodeSpec& s) {
  const DecodeGeometry g = geometry(s);
  return 2 * g.tile_bytes + g.other_bytes <= kStaticShared;
}

// Unpacks 16 bytes `raw` (a uint4 of 32-bit words w0..w3) into floats f[].
std::string unpack(DType t) {
  if (t == kFloat32) {
    return "    f[0] = __uint_as_float(w[0]); f[1] = __uint_as_float(w[1]);\n"
           "    f[2] = __uint_as_float(w[2]); f[3] = __uint_as_float(w[3]);\n";
  }
  if (t == kBFloat16) {
    return "#pragma unroll\n"
           "    for (int i = 0; i < 4; ++i) { f[2 * i] = __uint_as_float(w[i] << 16); f[2 * i + 1] "
           "= __uint_as_float(w[i] & 0xffff0000u); }\n";
  }
  return "#pragma unroll\n"
         "    for (int i = 0; i < 4; ++i) { f[2 * i] = kiln_h2f((unsigned short)(w[i] & 0xffffu)); "
         "f[2 * i + 1] = kiln_h2f((unsigned short)(w[i] >> 16)); }\n";
}

std::string block_step(const DecodeSpec& s, const DecodeGeometry& g);
std::string warp_keys_step(const DecodeSpec& s, const DecodeGeometry& g);
std::string warp_keys_merge(const DecodeSpec& s);
std::string epilogue(const DecodeSpec& s, const DecodeGeometry& g);

std::string decode_source(const DecodeSpec& s) {
  const DecodeGeometry g = geometry(s);
  const std::string T = mem_type(s.dtype), D = std::to_string(s.d), TK = std::to_string(g.tk),
                    TPK = std::to_string(g.tpk), RMAX = std::to_string(s.rmax),
                    KROWB = std::to_string(g.krow_bytes), RPT = std::to_string(g.rpt),
                    NACC = std::to_string(g.nacc), EPC = std::to_string(g.epc),
                    CPR = std::to_string(g.cpr), ES = std::to_string(g.es),
                    QPT = std::to_string((s.rmax * s.d + kThreads - 1) / kThreads);
  std::string src = op_prelude();
  src += R"(__device__ __forceinline__ unsigned kiln_smem(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
__device__ __forceinline__ void kiln_cp16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory");
}
)";
  src +=
      "// Keys [k_begin, k_end) of one (batch, kv head): blockIdx.x splits the sequence,\n"
      "// blockIdx.y = b * Hkv + kv head; rows r = g * L + l (query head kv * G + g).\n";
  src += "extern \"C\" __global__ void __launch_bounds__(128) " + decode_name(s) + "(" + T +
         "* __restrict__ out, const " + T + "* __restrict__ q,\n    const " + T +
         "* __restrict__ k, const " + T +
         "* __restrict__ v, const i64* __restrict__ pos, i64 pos_stride, i64 p_const,\n"
         "    float* __restrict__ ws, unsigned* __restrict__ count, i64 Hkv, i64 G, i64 L, i64 S, "
         "i64 chunk, i64 qsb, i64 qsh,\n"
         "    i64 qsl, i64 qsd, i64 ksb, i64 ksh, i64 kss, i64 vsb, i64 vsh, i64 vss,\n"
         "    float scale_log2, const " +
         T + "* __restrict__ knew, const " + T +
         "* __restrict__ vnew, i64 knsb, i64 knsh, i64 vnsb, i64 vnsh,\n"
         "    " +
         T + "* kw, " + T + "* vw, i64* err) {\n";
  if (s.prefetch) {
    // Note [Decode cache prefetched early]: the block's keys and values
    // into L2 while the kernel before this one runs. The position is read
    // before the wait, so it may be stale: it only steers the prefetches.
    const int line_parts = std::max(1, s.d * static_cast<int>(itemsize(s.dtype)) / 128);
    src +=
        "  {\n"
        "    const i64 b0 = blockIdx.y / Hkv, h0 = blockIdx.y % Hkv;\n"
        "    i64 p0 = p_const;\n"
        "    if (pos) asm volatile(\"ld.relaxed.gpu.global.s64 %0, [%1];\" : \"=l\"(p0) : "
        "\"l\"(pos + b0 * pos_stride));\n"
        "    const i64 seen0 = p0 < S ? min(S, max((i64)0, p0 + L)) : S;\n"
        "    const i64 per0 = min(chunk, (seen0 + gridDim.x - 1) / gridDim.x);\n"
        "    const i64 kb0 = (i64)blockIdx.x * per0, ke0 = min(seen0, kb0 + per0);\n"
        "    const char* kp = (const char*)(k + b0 * ksb + h0 * ksh);\n"
        "    const char* vp = (const char*)(v + b0 * vsb + h0 * vsh);\n"
        "    for (i64 c = kb0 * " +
        std::to_string(line_parts) + " + threadIdx.x; c < ke0 * " + std::to_string(line_parts) +
        "; c += 128) {\n"
        "      const i64 row = c / " +
        std::to_string(line_parts) + ", part = c % " + std::to_string(line_parts) +
        ";\n"
        "      asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"(kp + (row * kss * " +
        std::to_string(itemsize(s.dtype)) +
        " + part * 128)));\n"
        "      asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"(vp + (row * vss * " +
        std::to_string(itemsize(s.dtype)) +
        " + part * 128)));\n"
        "    }\n"
        "  }\n";
  }
  src += "  kiln_grid_enter();\n";
  const std::string ST = std::to_string(s.stages);
  src += "  __shared__ alignas(16) unsigned char sk[" + ST + " * " + TK + " * " + KROWB +
         "];\n"
         "  __shared__ alignas(16) " +
         T + " sv[" + ST + " * " + TK + " * " + D +
         "];\n"
         "  __shared__ alignas(16) float sq[" +
         RMAX + " * " + D +
         "];\n"
         "  __shared__ float sp[" +
         RMAX + " * " + TK +
         "];\n"
         "  __shared__ float s_m[" +
         RMAX + "], s_l[" + RMAX + "], s_a[" + RMAX +
         "];\n"
         "  __shared__ unsigned s_last;\n"
         "  __shared__ float s_w[" +
         RMAX + " * " + std::to_string(kMaxSplits) + "];\n";
  src +=
      "  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n"
      "  const float ninf = -kiln_inf(0.f);\n"
      "  const i64 bh = blockIdx.y, b = bh / Hkv, hkv = bh % Hkv, R = G * L;\n";
  // The block's query rows: element i = r * D + d of row r.
  const std::string q_elem = "q[b * qsb + (hkv * G + r / L) * qsh + (r % L) * qsl + d * qsd]";
  if (s.early_loads) {
    // Note [Decode loads side by side]: into registers, stored after the
    // first tile's copies have gone out.
    src += "  " + T + " qv[" + QPT + "];\n";
    src += "#pragma unroll\n  for (int u = 0; u < " + QPT + "; ++u) {\n";
    src += "    const int i = tid + u * 128, r = i / " + D + ", d = i % " + D +
           ";\n"
           "    qv[u] = i < " +
           RMAX + " * " + D + " && r < R ? " + q_elem + " : (" + T +
           ")0;\n"
           "  }\n";
  }
  src +=
      "  const i64 p = pos ? pos[b * pos_stride] : p_const;\n"
      // Row l sees keys j <= p + l: the rows need keys below p + L (no
      // overflow: p < S). Note [Decode splits follow the position]: those
      // keys are shared out evenly over the grid, sized for a full cache.
      "  const i64 seen = p < S ? min(S, max((i64)0, p + L)) : S;\n"
      "  const i64 per = min(chunk, (seen + gridDim.x - 1) / gridDim.x);\n"
      "  const i64 k_begin = (i64)blockIdx.x * per;\n"
      "  const i64 k_end = min(seen, k_begin + per);\n";
  src +=
      "  const char* kb = (const char*)(k + b * ksb + hkv * ksh);\n"
      "  const char* vb = (const char*)(v + b * vsb + hkv * vsh);\n"
      // Note [Cache writes in the decode kernel]: slot p's key and value come
      // from knew / vnew, and block 0 of each (batch, kv head) stores them.
      "  const char* knb = knew ? (const char*)(knew + b * knsb + hkv * knsh) : kb;\n"
      "  const char* vnb = vnew ? (const char*)(vnew + b * vnsb + hkv * vnsh) : vb;\n"
      "  const unsigned sk0 = kiln_smem(sk), sv0 = kiln_smem(sv);\n";
  // K and V rows tt .. tt + nl - 1 into stage `buf`, the tile's keys below
  // k_end: the rows past them are neither loaded nor read (a short range
  // costs its keys, not a whole tile).
  auto issue = [&](const std::string& t, const std::string& buf) {
    return "    {\n      const i64 tt = " + t + ";\n      const int nl = (int)min((i64)" + TK +
           ", k_end - tt);\n      const unsigned skb = sk0 + (" + buf + ") * " + TK + " * " +
           KROWB + ", svb = sv0 + (" + buf + ") * " + TK + " * " + D + " * " + ES +
           ";\n      for (int c = tid; c < nl * " + CPR + "; c += 128) {\n" +
           "        const int row = c / " + CPR + ", cc = c % " + CPR +
           ";\n"
           "        const bool fresh = knew && tt + row == p;\n"
           "        const char* kr = fresh ? knb : kb + (tt + row) * kss * " +
           ES + ";\n        const char* vr = fresh ? vnb : vb + (tt + row) * vss * " + ES +
           ";\n        kiln_cp16(skb + row * " + KROWB +
           " + cc * 16, kr + cc * 16);\n        kiln_cp16(svb + row * " + D + " * " + ES +
           " + cc * 16, vr + cc * 16);\n      }\n"
           "      asm volatile(\"cp.async.commit_group;\" ::: \"memory\");\n    }\n";
  };
  // The first tile's copies: before the query rows reach shared memory
  // (Note [Decode loads side by side]), or after the barrier below.
  if (s.early_loads) src += "  if (k_begin < k_end) {\n" + issue("k_begin", "0") + "  }\n";
  if (s.early_loads) {
    src += "#pragma unroll\n  for (int u = 0; u < " + QPT + "; ++u) {\n";
    src += "    const int i = tid + u * 128;\n";
    src += "    if (i < " + RMAX + " * " + D + ") sq[i] = " + load_expr(s.dtype, "qv[u]") + ";\n";
  } else {
    src += "  for (int i = tid; i < " + RMAX + " * " + D + "; i += 128) {\n";
    src += "    const int r = i / " + D + ", d = i % " + D + ";\n";
    src += "    float x = 0.f;\n    if (r < R) x = " + load_expr(s.dtype, q_elem) +
           ";\n"
           "    sq[i] = x;\n";
  }
  src += "  }\n";
  src += "  if (tid < " + RMAX + ") { s_m[tid] = ninf; s_l[tid] = 0.f; }\n";
  src += "  float acc[" + NACC + "];\n";
  src += "#pragma unroll\n  for (int i = 0; i < " + NACC + "; ++i) acc[i] = 0.f;\n";
  src += "  const int pd = tid % " + D + ", prg = tid / " + D + ";\n";
  src +=
      "  if (knew && blockIdx.x == 0) {\n"
      "    if (p >= 0 && p < S) {\n"
      "      for (int i = tid; i < " +
      D +
      "; i += 128) {\n"
      "        kw[b * ksb + hkv * ksh + p * kss + i] = knew[b * knsb + hkv * knsh + i];\n"
      "        vw[b * vsb + hkv * vsh + p * vss + i] = vnew[b * vnsb + hkv * vnsh + i];\n"
      "      }\n"
      "    } else if (tid == 0 && err) {\n"
      "      kiln_flag_error(err, p);\n"
      "    }\n"
      // Note [Cache positions in range]: rows p .. p + L - 1 in the cache.
      "  } else if (!knew && err && blockIdx.x == 0 && tid == 0 && (p < 0 || p > S - L)) {\n"
      "    kiln_flag_error(err, p);\n"
      "  }\n"
      "  __syncthreads();\n";
  const std::string DPL = std::to_string(s.d / 32), KPW = std::to_string(g.tk / 4);
  if (s.warp_keys) {
    // Note [Decode keys by warp]: the warp's running max and sum (uniform
    // over its lanes), and its lane's DPL dims of P @ V.
    src += "  float wm_ = ninf, wl_ = 0.f, wacc[" + DPL + "];\n";
    src += "#pragma unroll\n  for (int i = 0; i < " + DPL + "; ++i) wacc[i] = 0.f;\n";
  }
  if (s.stages == 1) {
    src += "  for (i64 t0 = k_begin; t0 < k_end; t0 += " + TK + ") {\n";
    src += "    const int nk = (int)min((i64)" + TK + ", k_end - t0), buf = 0;\n";
    if (s.early_loads) {
      src += "    if (t0 != k_begin)\n" + issue("t0", "0");
    } else {
      src += issue("t0", "0");
    }
    src += "    asm volatile(\"cp.async.wait_group 0;\" ::: \"memory\");\n";
  } else {
    // Note [Decode tiles in flight]: the next tile's loads go out before
    // this one is used; the barrier at the end of a step frees its stage.
    if (!s.early_loads) src += "  if (k_begin < k_end) {\n" + issue("k_begin", "0") + "  }\n";
    src += "  int step = 0;\n";
    src += "  for (i64 t0 = k_begin; t0 < k_end; t0 += " + TK + ", ++step) {\n";
    src += "    const int nk = (int)min((i64)" + TK + ", k_end - t0), buf = step & 1;\n";
    src += "    if (t0 + " + TK + " < k_end) {\n" + issue("t0 + " + TK, "buf ^ 1") +
           "      asm volatile(\"cp.async.wait_group 1;\" ::: \"memory\");\n"
           "    } else {\n"
           "      asm volatile(\"cp.async.wait_group 0;\" ::: \"memory\");\n"
           "    }\n";
  }
  src += "    __syncthreads();\n";
  if (s.warp_keys) {
    src += warp_keys_step(s, g);
  } else {
    src += block_step(s, g);
  }
  src += "  }\n";
  if (s.warp_keys) src += warp_keys_merge(s);
  src += epilogue(s, g);
  return src;
}

// A tile's scores before the softmax: TPK threads per key, each a share of
// the dot products of all rows (dot[r], reduced over the key's threads; j:
// the key). Keys past nk are masked by the caller; their products are skipped.
std::string key_dots(const DecodeSpec& s, const DecodeGeometry& g) {
  const std::string D = std::to_string(s.d), TK = std::to_string(g.tk), TPK = std::to_string(g.tpk),
                    RMAX = std::to_string(s.rmax), KROWB = std::to_string(g.krow_bytes),
                    EPC = std::to_string(g.epc), CPR = std::to_string(g.cpr);
  return "      const int key = tid / " + TPK + ", part = tid % " + TPK +
         ";\n"
         "      float dot[" +
         RMAX +
         "];\n"
         "#pragma unroll\n"
         "      for (int r = 0; r < " +
         RMAX +
         "; ++r) dot[r] = 0.f;\n"
         "#pragma unroll\n"
         "      for (int c = 0; c < " +
         CPR + " / " + TPK +
         "; ++c) {\n"
         "        if (key >= nk) break;\n"
         "        const int ch = c * " +
         TPK +
         " + part;\n"
         "        const unsigned* w = (const unsigned*)(sk + buf * " +
         TK + " * " + KROWB + " + key * " + KROWB +
         " + ch * 16);\n"
         "        float f[" +
         EPC + "];\n" + unpack(s.dtype) + "        const int d0 = ch * " + EPC +
         ";\n"
         "#pragma unroll\n"
         "        for (int r = 0; r < " +
         RMAX +
         "; ++r) {\n"
         "#pragma unroll\n"
         "          for (int e = 0; e < " +
         EPC + "; ++e) dot[r] += sq[r * " + D +
         " + d0 + e] * f[e];\n"
         "        }\n"
         "      }\n"
         "#pragma unroll\n"
         "      for (int o = " +
         TPK +
         " / 2; o > 0; o >>= 1) {\n"
         "#pragma unroll\n"
         "        for (int r = 0; r < " +
         RMAX +
         "; ++r) dot[r] += kiln_shfl_xor(dot[r], o);\n"
         "      }\n"
         "      const i64 j = t0 + key;\n";
}

// The scores, softmax and P @ V of one tile by the whole block, its threads
// meeting at a barrier between the phases.
std::string block_step(const DecodeSpec& s, const DecodeGeometry& g) {
  const std::string D = std::to_string(s.d), TK = std::to_string(g.tk), TPK = std::to_string(g.tpk),
                    RMAX = std::to_string(s.rmax), RPT = std::to_string(g.rpt),
                    NACC = std::to_string(g.nacc);
  std::string src;
  // Scores: TPK threads per key, each a share of the dot products of all rows.
  src += "    {\n" + key_dots(s, g) +
         "#pragma unroll\n"
         "      for (int r = 0; r < " +
         RMAX +
         "; ++r) {\n"
         "        if (r % " +
         TPK +
         " != part) continue;\n"
         "        float x = dot[r] * scale_log2;\n"
         "        if (r >= R || j >= k_end || j - r % L > p) x = ninf;\n"
         "        sp[r * " +
         TK +
         " + key] = x;\n"
         "      }\n"
         "    }\n"
         "    __syncthreads();\n";
  // Online softmax, a warp per row.
  src += "    for (int r = warp; r < " + RMAX +
         "; r += 4) {\n"
         "      float mx = ninf;\n"
         "      for (int j = lane; j < " +
         TK + "; j += 32) mx = fmaxf(mx, sp[r * " + TK +
         " + j]);\n"
         "      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, kiln_shfl_xor(mx, o));\n"
         "      const float m_old = s_m[r], m_new = fmaxf(m_old, mx);\n"
         "      const float mu = m_new == ninf ? 0.f : m_new;\n"
         "      float sum = 0.f;\n"
         "      for (int j = lane; j < " +
         TK + "; j += 32) {\n        const float e = exp2f(sp[r * " + TK +
         " + j] - mu);\n"
         "        sp[r * " +
         TK +
         " + j] = e;\n"
         "        sum += e;\n"
         "      }\n"
         "      for (int o = 16; o > 0; o >>= 1) sum += kiln_shfl_xor(sum, o);\n"
         "      __syncwarp();\n"
         "      if (lane == 0) {\n"
         "        const float a = exp2f(m_old - mu);\n"
         "        s_a[r] = a;\n"
         "        s_l[r] = s_l[r] * a + sum;\n"
         "        s_m[r] = m_new;\n"
         "      }\n"
         "    }\n"
         "    __syncthreads();\n";
  // P @ V: thread (prg, pd) owns dim pd of rows prg, prg + RPT, ...
  src += "#pragma unroll\n    for (int i = 0; i < " + NACC +
         "; ++i) {\n      const int r = prg + i * " + RPT + ";\n      if (r < " + RMAX +
         ") acc[i] *= s_a[r];\n"
         "    }\n"
         "#pragma unroll 4\n"
         "    for (int j = 0; j < nk; ++j) {\n"
         "      const float x = " +
         load_expr(s.dtype, "sv[buf * " + TK + " * " + D + " + j * " + D + " + pd]") +
         ";\n"
         "#pragma unroll\n"
         "      for (int i = 0; i < " +
         NACC + "; ++i) {\n        const int r = prg + i * " + RPT + ";\n        if (r < " + RMAX +
         ") acc[i] += sp[r * " + TK +
         " + j] * x;\n"
         "      }\n"
         "    }\n"
         "    __syncthreads();\n";
  return src;
}

// Note [Decode keys by warp]
// With one query row per block (a decode step of a model whose query heads
// each have their own key/value head), a tile was scored by the block, then
// a barrier, the softmax by one warp, a barrier, P @ V by the 64 (or 128)
// threads that own the row's dims, each walking every key of the tile, and
// a barrier: most threads waited at most barriers. Now each warp takes its
// quarter of the tile's keys (the lanes that scored them) through the whole
// step: the scores, its own online softmax over them (shuffles), and P @ V
// over them with the lane's D / 32 dims, each key's weight handed over by a
// shuffle. The warps' maxima, sums and partial rows meet once, after the
// last tile, in shared memory, weighted as the splits of Note [Decode
// combine] are. A tile has one barrier after its copies land and one before
// its stage is reused.
std::string warp_keys_step(const DecodeSpec& s, const DecodeGeometry& g) {
  const std::string D = std::to_string(s.d), TK = std::to_string(g.tk), TPK = std::to_string(g.tpk),
                    DPL = std::to_string(s.d / 32), KPW = std::to_string(g.tk / 4);
  std::string src = "    {\n" + key_dots(s, g) +
                    "      const float x = j >= k_end || j > p ? ninf : dot[0] * scale_log2;\n"
                    // The warp's keys: lanes that differ in the bits from TPK up.
                    "      float mx = x;\n"
                    "#pragma unroll\n"
                    "      for (int o = 16; o >= " +
                    TPK +
                    "; o >>= 1) mx = fmaxf(mx, kiln_shfl_xor(mx, o));\n"
                    "      const float m_new = fmaxf(wm_, mx);\n"
                    "      const float mu = m_new == ninf ? 0.f : m_new;\n"
                    "      const float e = exp2f(x - mu);\n"
                    "      float sum = e;\n"
                    "#pragma unroll\n"
                    "      for (int o = 16; o >= " +
                    TPK +
                    "; o >>= 1) sum += kiln_shfl_xor(sum, o);\n"
                    "      const float a = exp2f(wm_ - mu);\n"
                    "      wl_ = wl_ * a + sum;\n"
                    "      wm_ = m_new;\n"
                    "#pragma unroll\n"
                    "      for (int i = 0; i < " +
                    DPL +
                    "; ++i) wacc[i] *= a;\n"
                    "      const int k0 = warp * " +
                    KPW +
                    ";\n"
                    "#pragma unroll\n"
                    "      for (int kk = 0; kk < " +
                    KPW +
                    "; ++kk) {\n"
                    "        const float pk = __shfl_sync(0xffffffffu, e, kk * " +
                    TPK +
                    ");\n"
                    "        if (k0 + kk < nk) {\n"
                    "#pragma unroll\n"
                    "          for (int i = 0; i < " +
                    DPL + "; ++i) wacc[i] += pk * " +
                    load_expr(s.dtype, "sv[buf * " + TK + " * " + D + " + (k0 + kk) * " + D +
                                           " + lane * " + DPL + " + i]") +
                    ";\n"
                    "        }\n"
                    "      }\n"
                    "    }\n"
                    "    __syncthreads();\n";
  return src;
}

// The warps' partial rows into the block's row (thread d < D: acc[0], its
// dim's numerator; s_m and s_l: the row's max and sum), as the block form
// leaves them.
std::string warp_keys_merge(const DecodeSpec& s) {
  const std::string D = std::to_string(s.d), DPL = std::to_string(s.d / 32);
  return "  {\n"
         "    __shared__ float s_wacc[4][" +
         D +
         "], s_wml[4][2];\n"
         "#pragma unroll\n"
         "    for (int i = 0; i < " +
         DPL + "; ++i) s_wacc[warp][lane * " + DPL +
         " + i] = wacc[i];\n"
         "    if (lane == 0) { s_wml[warp][0] = wm_; s_wml[warp][1] = wl_; }\n"
         "    __syncthreads();\n"
         "    if (tid < " +
         D +
         ") {\n"
         "      float M = ninf;\n"
         "#pragma unroll\n"
         "      for (int w = 0; w < 4; ++w) M = fmaxf(M, s_wml[w][0]);\n"
         "      const float mu = M == ninf ? 0.f : M;\n"
         "      float num = 0.f, den = 0.f;\n"
         "#pragma unroll\n"
         "      for (int w = 0; w < 4; ++w) {\n"
         "        const float a = exp2f(s_wml[w][0] - mu);\n"
         "        num += a * s_wacc[w][tid];\n"
         "        den += a * s_wml[w][1];\n"
         "      }\n"
         "      acc[0] = num;\n"
         "      if (tid == 0) { s_m[0] = M; s_l[0] = den; }\n"
         "    }\n"
         "    __syncthreads();\n"
         "  }\n";
}

// The row's result (one split), or the block's partials and, in the last
// block of its (batch, kv head), their merge (Note [Decode combine]).
std::string epilogue(const DecodeSpec& s, const DecodeGeometry& g) {
  const std::string T = mem_type(s.dtype), D = std::to_string(s.d), RPT = std::to_string(g.rpt),
                    NACC = std::to_string(g.nacc);
  std::string src;
  // One split: the result directly (0 / 0 = NaN for a row that saw nothing).
  src += "  const i64 ns = gridDim.x;\n";
  src += "  if (ns == 1) {\n#pragma unroll\n    for (int i = 0; i < " + NACC +
         "; ++i) {\n"
         "      const int r = prg + i * " +
         RPT + ";\n      if (r < R) out[(bh * R + r) * " + D +
         " + pd] = " + store_expr(s.dtype, "acc[i] / s_l[r]") +
         ";\n"
         "    }\n"
         "    return;\n"
         "  }\n";
  // Partials: O [rows][ns][D], then max [rows][ns], sum [rows][ns]; rows =
  // gridDim.y * R. `count`: a counter per (batch, kv head), zero on entry and
  // left zero (Note [Counters that reset themselves]).
  src +=
      "  const i64 rows = (i64)gridDim.y * R;\n"
      "  float* wo = ws;\n"
      "  float* wm = ws + rows * ns * " +
      D +
      ";\n"
      "  float* wl = wm + rows * ns;\n"
      "  if (k_begin < k_end) {\n"
      "#pragma unroll\n"
      "    for (int i = 0; i < " +
      NACC + "; ++i) {\n      const int r = prg + i * " + RPT +
      ";\n"
      "      if (r < R) wo[((bh * R + r) * ns + blockIdx.x) * " +
      D +
      " + pd] = acc[i];\n"
      "    }\n"
      "  }\n"
      "  for (int r = tid; r < R; r += 128) {\n"
      "    wm[(bh * R + r) * ns + blockIdx.x] = s_m[r];\n"
      "    wl[(bh * R + r) * ns + blockIdx.x] = s_l[r];\n"
      "  }\n"
      // Note [Decode combine]: one release-acquire increment orders the
      // block's partials (its threads' writes, through the barrier) before
      // the counter, and the last block's reads after it.
      "  __syncthreads();\n"
      "  if (tid == 0) {\n"
      "    unsigned before;\n"
      "    asm volatile(\"atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\" : \"=r\"(before) : "
      "\"l\"(count + bh) : \"memory\");\n"
      "    s_last = before == (unsigned)(ns - 1);\n"
      "    if (s_last) count[bh] = 0u;\n"
      "  }\n"
      "  __syncthreads();\n"
      "  if (!s_last) return;\n";
  // Note [Decode loads side by side]: the thread's first element's first
  // sixteen partials travel with the (max, sum) loads below.
  if (s.early_loads) {
    src += "  float x0[16];\n  if (tid < R * " + D +
           ") {\n    const float* po0 = wo + (bh * R + tid / " + D + ") * ns * " + D + " + tid % " +
           D +
           ";\n"
           "#pragma unroll\n"
           "    for (int u = 0; u < 16; ++u) x0[u] = u < ns ? __ldcg(po0 + u * " +
           D + ") : 0.f;\n  }\n";
  }
  src +=
      // The last block of the group combines (Note [Decode combine]): a warp
      // per row reads every split's (max, sum) at once and leaves each split's
      // weight in shared memory; then each output element sums its splits'
      // partials, loads that do not wait on one another. A split whose sum is 0
      // saw no key and weighs nothing; a row that saw none gets 0 / 0 = NaN.
      "  for (int r = warp; r < R; r += 4) {\n"
      "    const i64 row = bh * R + r;\n"
      "    float m[4], l[4], mx = ninf;\n"
      "#pragma unroll\n"
      "    for (int q = 0; q < 4; ++q) {\n"
      "      const i64 c = lane + 32 * q;\n"
      "      l[q] = c < ns ? __ldcg(wl + row * ns + c) : 0.f;\n"
      "      m[q] = c < ns ? __ldcg(wm + row * ns + c) : ninf;\n"
      "      if (l[q] != 0.f) mx = fmaxf(mx, m[q]);\n"
      "    }\n"
      "    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, kiln_shfl_xor(mx, o));\n"
      "    const float mu = mx == ninf ? 0.f : mx;\n"
      "    float den = 0.f;\n"
      "#pragma unroll\n"
      "    for (int q = 0; q < 4; ++q) {\n"
      "      m[q] = l[q] != 0.f ? exp2f(m[q] - mu) : 0.f;\n"
      "      den += m[q] * l[q];\n"
      "    }\n"
      "    for (int o = 16; o > 0; o >>= 1) den += kiln_shfl_xor(den, o);\n"
      "#pragma unroll\n"
      "    for (int q = 0; q < 4; ++q) {\n"
      "      const int c = lane + 32 * q;\n"
      "      if (c < ns) s_w[r * " +
      std::to_string(kMaxSplits) +
      " + c] = m[q] / den;\n"
      "    }\n"
      "  }\n"
      "  __syncthreads();\n"
      "  for (int i = tid; i < R * " +
      D +
      "; i += 128) {\n"
      "    const int r = i / " +
      D + ", d = i % " + D +
      ";\n"
      "    const i64 row = bh * R + r;\n"
      "    const float* po = wo + row * ns * " +
      D +
      " + d;\n"
      "    const float* pw = s_w + r * " +
      std::to_string(kMaxSplits) +
      ";\n"
      // Sixteen splits' partials in flight at once; a split that saw no key
      // (weight 0) never wrote its partial, so its value is dropped, not
      // multiplied.
      "    float num = 0.f;\n"
      "    for (i64 c0 = 0; c0 < ns; c0 += 16) {\n"
      "      float x[16];\n" +
      std::string(s.early_loads ? "      if (c0 == 0 && i == tid) {\n"
                                  "#pragma unroll\n"
                                  "        for (int u = 0; u < 16; ++u) x[u] = x0[u];\n"
                                  "      } else\n"
                                : "") +
      "#pragma unroll\n"
      "      for (int u = 0; u < 16; ++u) x[u] = c0 + u < ns ? __ldcg(po + (c0 + u) * " +
      D +
      ") : 0.f;\n"
      "#pragma unroll\n"
      "      for (int u = 0; u < 16; ++u) {\n"
      "        const float w = c0 + u < ns ? pw[c0 + u] : 0.f;\n"
      "        num += w != 0.f ? w * x[u] : 0.f;\n"
      "      }\n"
      "    }\n"
      "    out[row * " +
      D + " + d] = " + store_expr(s.dtype, "num") +
      ";\n"
      "  }\n"
      "}\n";
  return src;
}

int rows_variant(int64_t rows) {
  int r = 1;
  while (r < rows) r *= 2;
  return r;
}

}  // namespace

bool decode_supported(DType dtype, int64_t e, int64_t ev, int64_t rows) {
  return (dtype == kFloat16 || dtype == kBFloat16 || dtype == kFloat32) && e == ev &&
         (e == 64 || e == 128) && rows >= 1 && rows <= kDecodeMaxRows;
}

void run_decode_attention(const Tensor& out, const Tensor& q, const Tensor& k_in,
                          const Tensor& v_in, const Tensor& pos, double scale, int64_t p_const,
                          const DecodeWrite* write, int64_t* pos_err) {
  const int64_t B = q.size(0), Hq = q.size(1), L = q.size(2), D = q.size(3);
  const int64_t Hkv = k_in.size(1), S = k_in.size(2), G = Hq / Hkv;
  KILN_INTERNAL_ASSERT(
      decode_supported(q.dtype(), D, v_in.size(3), G * L) && out.is_contiguous() && S > 0,
      "decode attention arguments");
  const int64_t es = static_cast<int64_t>(q.element_size());
  const Tensor k = aligned_operand(k_in, 16 / es), v = aligned_operand(v_in, 16 / es);
  DecodeSpec spec;
  spec.dtype = q.dtype();
  spec.d = static_cast<int>(D);
  spec.rmax = rows_variant(G * L);
  static const bool warp_keys = env_flag("KILN_DECODE_WARP_KEYS", true);
  spec.warp_keys = warp_keys && spec.rmax == 1;
  const DecodeGeometry geo = geometry(spec);
  // Split the cache so that the grid has about four blocks per multiprocessor.
  const int device = q.device().index();
  const int64_t sms = kiln::cuda::device_properties(device).multiProcessorCount;
  const int64_t groups = B * Hkv;
  KILN_CHECK(groups < 65536, "[kv_cache_attention] expected batch * kv heads below 65536, got ",
             groups);
  const int64_t tiles = (S + geo.tk - 1) / geo.tk;
  // KILN_DECODE_BLOCKS_PER_SM=N sets the four, to measure.
  static const int64_t per_sm =
      std::min<int64_t>(env_int("KILN_DECODE_BLOCKS_PER_SM", 1, INT32_MAX).value_or(4), 32);
  const int64_t want = std::clamp<int64_t>((per_sm * sms + groups - 1) / groups, 1,
                                           std::min<int64_t>(tiles, kMaxSplits));
  const int64_t tiles_per = (tiles + want - 1) / want;
  const int64_t splits = (tiles + tiles_per - 1) / tiles_per;
  const int64_t chunk = tiles_per * geo.tk;
  if (tiles_per > 1 && two_stages_fit(spec)) spec.stages = 2;
  static const bool prefetch = env_flag("KILN_DECODE_PREFETCH", true);
  spec.prefetch = prefetch;
  static const bool early_loads = env_flag("KILN_DECODE_EARLY_LOADS", true);
  spec.early_loads = early_loads;
  Tensor ws;
  void* count = nullptr;
  if (splits > 1) {
    const int64_t rows = B * Hq * L;
    const int64_t floats = rows * splits * (D + 2);
    ws = empty_tensor({floats + groups}, kFloat32, q.device());
    kiln::cuda::DeviceGuard guard(device);
    cudaStream_t stream = kiln::cuda::raw(kiln::cuda::Stream::current(q.device()));
    const size_t count_bytes = static_cast<size_t>(groups) * 4;
    // Inside a captured graph the counters are the graph's, cleared once; the
    // kernel leaves them zero (Note [Counters that reset themselves]).
    if (kiln::cuda::LaunchRecorder* r = kiln::cuda::launch_recorder()) {
      count = r->zeroed_scratch(stream, count_bytes);
    }
    if (!count) {
      count = ws.data_ptr<float>() + floats;
      KILN_CUDA_CHECK_DEVICE(cudaMemsetAsync(count, 0, count_bytes, stream), device);
    }
  }
  cudaKernel_t kern = load_kernel(
      decode_name(spec), [&] { return decode_source(spec); }, device);
  KernelArgs a;
  a.ptr(out).ptr(q).ptr(k).ptr(v).ptr(pos);
  a.i64(pos.defined() && pos.numel() > 1 ? pos.stride(0) : 0).i64(p_const).ptr(ws).ptr(count);
  a.i64(Hkv).i64(G).i64(L).i64(S).i64(chunk);
  a.i64(q.stride(0)).i64(q.stride(1)).i64(q.stride(2)).i64(q.stride(3));
  a.i64(k.stride(0)).i64(k.stride(1)).i64(k.stride(2));
  a.i64(v.stride(0)).i64(v.stride(1)).i64(v.stride(2));
  a.f32(static_cast<float>(scale * 1.4426950408889634));
  if (write) {
    KILN_INTERNAL_ASSERT(k.is_same(k_in) && v.is_same(v_in), "decode cache writes into a copy");
    a.ptr(write->k).ptr(write->v);
    a.i64(write->k.stride(0))
        .i64(write->k.stride(1))
        .i64(write->v.stride(0))
        .i64(write->v.stride(1));
    a.ptr(k).ptr(v);
    a.ptr(write->err);
  } else {
    const void* none = nullptr;
    a.ptr(none).ptr(none).i64(0).i64(0).i64(0).i64(0).ptr(none).ptr(none).ptr(pos_err);
  }
  launch(kern, q.device(), dim3(static_cast<unsigned>(splits), static_cast<unsigned>(groups)),
         kThreads, 0, a);
  out.impl()->bump_version();
  if (write) {
    k_in.impl()->bump_version();
    v_in.impl()->bump_version();
  }
}

std::vector<std::pair<std::string, std::string>> decode_source_samples() {
  std::vector<std::pair<std::string, std::string>> out;
  for (DType t : {kFloat16, kBFloat16, kFloat32}) {
    for (int d : {64, 128}) {
      for (int r = 1; r <= kDecodeMaxRows; r *= 2) {
        DecodeSpec s{t, d, r};
        out.emplace_back(decode_name(s), decode_source(s));
        if (two_stages_fit(s)) {
          s.stages = 2;
          out.emplace_back(decode_name(s), decode_source(s));
        }
        if (r == 1) {  // Note [Decode keys by warp], then without it,
          // KILN_DECODE_PREFETCH=0, then KILN_DECODE_EARLY_LOADS=0 too
          DecodeSpec w = s;
          w.warp_keys = true;
          out.emplace_back(decode_name(w), decode_source(w));
          w.stages = 1;
          out.emplace_back(decode_name(w), decode_source(w));
          s.prefetch = false;
          out.emplace_back(decode_name(s), decode_source(s));
          s.early_loads = false;
          out.emplace_back(decode_name(s), decode_source(s));
        }
      }
    }
  }
  return out;
}

}  // namespace kiln::jit::cuda
