// The fused prefill attention kernel (Note [Fused attention] in attention.h):
// float16/bfloat16, head dims 64 and 128, tensor cores through mma.sync.

#include <cmath>
#include <cstdlib>
#include <string>

#include "jit/codegen_cuda/kernel_loader.h"
#include "jit/codegen_cuda/op_kernels/attention.h"
#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "kiln/error.h"
#include "runtime/core/env.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cuda/device_guard.h"

#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

namespace kiln::jit::cuda {
namespace {

enum class PrefillMask : int { None, Causal, CausalPos, Bool, Additive };

struct PrefillSpec {
  DType dtype = kFloat16;  // query, key, value and output
  int d = 64;              // head dim
  PrefillMask mask = PrefillMask::None;
  DType mask_dtype = kBool;  // Additive: the dtype or float32
  bool split = false;        // Note [Prefill keys split over warps]
};

// Query rows per block: 16 per warp, or 16 for the whole block when split.
int prefill_rows(const PrefillSpec& s) {
  return s.split ? 16 : 64;
}
// Warps per block (the split form's shared tiles of d = 128 hold two).
int prefill_warps(const PrefillSpec& s) {
  return s.split && s.d == 128 ? 2 : 4;
}
// Keys per shared-memory tile (one per warp when split).
int prefill_tile_keys(const PrefillSpec& s) {
  return s.split ? 32 : 64;
}

std::string prefill_name(const PrefillSpec& s) {
  std::string n = std::string("kiln_attn_fwd_") + dtype_tag(s.dtype) + "_d" + std::to_string(s.d);
  switch (s.mask) {
    case PrefillMask::None:
      break;
    case PrefillMask::Causal:
      n += "_causal";
      break;
    case PrefillMask::CausalPos:
      n += "_causalpos";
      break;
    case PrefillMask::Bool:
      n += "_mb";
      break;
    case PrefillMask::Additive:
      n += std::string("_ma_") + dtype_tag(s.mask_dtype);
      break;
  }
  return s.split ? n + "_sk" : n;
}

// Device helpers for tensor-core kernels: shared addresses, cp.async,
// ldmatrix, mma.sync and float pairs packed to 16-bit pairs.
std::string mma_helpers(DType t) {
  const std::string ab = t == kBFloat16 ? "bf16" : "f16";
  return R"(__device__ __forceinline__ unsigned kiln_smem(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
// 16 bytes global -> shared; zero-filled when !ok (src is then not read).
__device__ __forceinline__ void kiln_cp16(unsigned dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void kiln_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void kiln_cp_wait1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }
__device__ __forceinline__ void kiln_cp_wait0() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void kiln_ldsm4(unsigned a, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a) : "memory");
}
__device__ __forceinline__ void kiln_ldsm4t(unsigned a, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a) : "memory");
}
// c (16x8, float) += a (16x16) * b (16x8).
__device__ __forceinline__ void kiln_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.)" +
         ab + "." + ab + R"(.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// (lo, hi) rounded to nearest even, lo in the low half.
__device__ __forceinline__ unsigned kiln_pack2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.)" +
         ab + R"(x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// Note [Batch coordinates in 32 bits]: batch index z (< 2^31) as coordinates
// over nb dims, innermost last, once per block.
__device__ __forceinline__ void kiln_batch_coords(i64 z, int nb, const KilnDims& sizes, unsigned* idx) {
  unsigned r = (unsigned)z;
#pragma unroll
  for (int d = 7; d >= 0; --d) {
    idx[d] = 0u;
    if (d < nb) {
      const unsigned s = (unsigned)sizes.v[d];
      idx[d] = r % s;
      r /= s;
    }
  }
}
// The offset of those coordinates; the innermost (heads) coordinate divided by group.
__device__ __forceinline__ i64 kiln_batch_offset(const unsigned* idx, int nb, const KilnDims& strides, unsigned group) {
  i64 off = 0;
#pragma unroll
  for (int d = 0; d < 8; ++d) {
    if (d < nb) {
      unsigned i = idx[d];
      if (d == nb - 1 && group != 1u) i /= group;
      off += (i64)i * strides.v[d];
    }
  }
  return off;
}
)";
}

std::string prefill_source(const PrefillSpec& s) {
  const std::string D = std::to_string(s.d), KROW = std::to_string(s.d + 8);
  const int W = prefill_warps(s), TKN = prefill_tile_keys(s);
  // Block-wide values, or the warp's own in the split form.
  const std::string BR = std::to_string(prefill_rows(s)), TK = std::to_string(TKN),
                    NW = std::to_string(W), THREADS = std::to_string(32 * W),
                    SYNC = s.split ? "__syncwarp()" : "__syncthreads()",
                    LT = s.split ? "lane" : "tid", LN = s.split ? "32" : THREADS,
                    TILE = std::to_string(s.split ? W * TKN : TKN);
  const bool has_mask = s.mask == PrefillMask::Bool || s.mask == PrefillMask::Additive;
  const bool causal = s.mask == PrefillMask::Causal || s.mask == PrefillMask::CausalPos;
  const std::string MT = has_mask ? mem_type(s.mask_dtype) : "unsigned char";
  std::string src = op_prelude() + mma_helpers(s.dtype);
  src += "extern \"C\" __global__ void __launch_bounds__(" + THREADS + ") " + prefill_name(s) +
         "(unsigned short* __restrict__ out, const unsigned short* __restrict__ q,\n"
         "    const unsigned short* __restrict__ k, const unsigned short* __restrict__ v,\n"
         "    const " +
         MT +
         "* __restrict__ mask, const i64* __restrict__ pos, i64 pos_div, i64 pos_stride,\n"
         "    i64 L, i64 S, i64 Z, i64 ntq, i64 group, int nb, KilnDims bsizes, KilnDims qb,\n"
         "    KilnDims kb, KilnDims vb, KilnDims mb, KilnDims ob, i64 qsl, i64 ksl, i64 vsl, i64 "
         "msl,\n"
         "    i64 mss, i64 osl, float scale_log2, i64* err) {\n"
         "  kiln_grid_enter();\n";
  src += "  __shared__ alignas(16) unsigned short sk[" + TILE + " * " + KROW +
         "];\n"
         "  __shared__ alignas(16) unsigned short sv[" +
         TILE + " * " + KROW + "];\n";
  src +=
      "  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & "
      "3;\n"
      "  const float ninf = -kiln_inf(0.f);\n"
      // Heaviest query tiles (the causal diagonal's far end) first.
      "  const i64 z = (i64)blockIdx.x % Z, q0 = (ntq - 1 - (i64)blockIdx.x / Z) * " +
      BR +
      ";\n"
      "  unsigned bi[8];\n"
      "  kiln_batch_coords(z, nb, bsizes, bi);\n"
      "  const unsigned short* qz = q + kiln_batch_offset(bi, nb, qb, 1u);\n"
      "  const unsigned short* kz = k + kiln_batch_offset(bi, nb, kb, (unsigned)group);\n"
      "  const unsigned short* vz = v + kiln_batch_offset(bi, nb, vb, (unsigned)group);\n";
  if (has_mask) src += "  const " + MT + "* mz = mask + kiln_batch_offset(bi, nb, mb, 1u);\n";
  if (s.mask == PrefillMask::CausalPos) {
    src += "  const i64 off = pos[(z / pos_div) * pos_stride];\n";
    // Note [Cache positions in range]: rows off .. off + L - 1 in the cache.
    src +=
        "  if (err && tid == 0 && (i64)blockIdx.x < Z && (off < 0 || off > S - L)) "
        "kiln_flag_error(err, off);\n";
  } else if (causal) {
    src += "  const i64 off = 0;\n";
  }
  // Q as A fragments in registers: rows ra (g) and rb (g + 8) of this warp.
  src += s.split ? "  const i64 ra = q0 + g, rb = ra + 8;\n"
                 : "  const i64 ra = q0 + warp * 16 + g, rb = ra + 8;\n";
  src += "  unsigned qa[" + D + " / 16][4];\n";
  src +=
      "#pragma unroll\n"
      "  for (int kk = 0; kk < " +
      D +
      " / 16; ++kk) {\n"
      "    const int c = kk * 16 + 2 * t;\n"
      "    qa[kk][0] = ra < L ? *(const unsigned*)(qz + ra * qsl + c) : 0u;\n"
      "    qa[kk][1] = rb < L ? *(const unsigned*)(qz + rb * qsl + c) : 0u;\n"
      "    qa[kk][2] = ra < L ? *(const unsigned*)(qz + ra * qsl + c + 8) : 0u;\n"
      "    qa[kk][3] = rb < L ? *(const unsigned*)(qz + rb * qsl + c + 8) : 0u;\n"
      "  }\n";
  // The keys this block's rows can see.
  src += "  i64 kv_end = S;\n";
  if (causal) {
    src +=
        "  {\n"
        "    const i64 last = min(L, q0 + " +
        BR +
        ") - 1;\n"
        "    kv_end = off >= S ? S : off < -L ? 0 : max((i64)0, min(S, last + off + 1));\n"
        "  }\n";
  }
  src += "  const i64 ntk = (kv_end + " + TK + " - 1) / " + TK + ";\n";
  src += "  float o[" + D + " / 8][4];\n";
  src +=
      "#pragma unroll\n"
      "  for (int i = 0; i < " +
      D +
      " / 8; ++i) { o[i][0] = 0.f; o[i][1] = 0.f; o[i][2] = 0.f; o[i][3] = 0.f; }\n"
      "  float m_a = ninf, m_b = ninf, l_a = 0.f, l_b = 0.f;\n"
      "  const unsigned sk0 = kiln_smem(sk)" +
      (s.split ? " + warp * " + TK + " * " + KROW + " * 2" : std::string()) +
      ", sv0 = kiln_smem(sv)" +
      (s.split ? " + warp * " + TK + " * " + KROW + " * 2" : std::string()) + ";\n";
  // A tile of K or V (rows past S zero-filled), loaded by the block or, split, by the warp.
  src += "  auto load_tile = [&](unsigned base, const unsigned short* src, i64 stride, i64 k0) {\n";
  src +=
      "#pragma unroll\n"
      "    for (int i = 0; i < " +
      TK + " * (" + D + " / 8) / " + LN +
      "; ++i) {\n"
      "      const int c = " +
      LT + " + i * " + LN + ", row = c / (" + D + " / 8), col = (c % (" + D +
      " / 8)) * 8;\n"
      "      const bool ok = k0 + row < S;\n"
      "      kiln_cp16(base + (row * " +
      KROW +
      " + col) * 2, ok ? (const void*)(src + (k0 + row) * stride + col) : (const void*)src, ok);\n"
      "    }\n"
      "  };\n";
  const std::string J0 = s.split ? "warp" : "0", JS = s.split ? NW : "1";
  src +=
      "  if (" + J0 + " < ntk) load_tile(sk0, kz, ksl, (i64)" + J0 + " * " + TK +
      ");\n"
      "  kiln_cp_commit();\n"
      "  if (" +
      J0 + " < ntk) load_tile(sv0, vz, vsl, (i64)" + J0 + " * " + TK +
      ");\n"
      "  kiln_cp_commit();\n"
      "  for (i64 j = " +
      J0 + "; j < ntk; j += " + JS +
      ") {\n"
      "    const i64 k0 = j * " +
      TK +
      ";\n"
      "    kiln_cp_wait1();\n"  // this tile's K (its V may still be in flight)
      "    " +
      SYNC +
      ";\n"
      "    float s[" +
      std::to_string(TKN / 8) +
      "][4];\n"
      "#pragma unroll\n"
      "    for (int i = 0; i < " +
      std::to_string(TKN / 8) +
      "; ++i) { s[i][0] = 0.f; s[i][1] = 0.f; s[i][2] = 0.f; s[i][3] = "
      "0.f; }\n"
      "#pragma unroll\n"
      "    for (int kk = 0; kk < " +
      D +
      " / 16; ++kk) {\n"
      "#pragma unroll\n"
      "      for (int np = 0; np < " +
      std::to_string(TKN / 16) +
      "; ++np) {\n"
      "        unsigned b0, b1, b2, b3;\n"
      "        const int key = np * 16 + (lane >> 4) * 8 + (lane & 7), col = kk * 16 + ((lane >> "
      "3) "
      "& 1) * 8;\n"
      "        kiln_ldsm4(sk0 + (key * " +
      KROW +
      " + col) * 2, b0, b1, b2, b3);\n"
      "        kiln_mma(s[2 * np], qa[kk], b0, b1);\n"
      "        kiln_mma(s[2 * np + 1], qa[kk], b2, b3);\n"
      "      }\n"
      "    }\n"
      "    " +
      SYNC + ";\n" +  // every warp (or lane) is done with sk
      "    if (j + " + JS + " < ntk) load_tile(sk0, kz, ksl, k0 + " + JS + " * " + TK +
      ");\n"
      "    kiln_cp_commit();\n";
  // Scale, mask and the running max of rows ra and rb.
  src +=
      "    float mx_a = ninf, mx_b = ninf;\n"
      "#pragma unroll\n"
      "    for (int nt = 0; nt < " +
      std::to_string(TKN / 8) +
      "; ++nt) {\n"
      "#pragma unroll\n"
      "      for (int e = 0; e < 4; ++e) {\n"
      "        const i64 row = e < 2 ? ra : rb, key = k0 + nt * 8 + 2 * t + (e & 1);\n"
      "        float x = s[nt][e] * scale_log2;\n";
  if (s.mask == PrefillMask::Bool) {
    src += "        if (row < L && key < S && !mz[row * msl + key * mss]) x = ninf;\n";
  } else if (s.mask == PrefillMask::Additive) {
    src += "        if (row < L && key < S) x += " +
           load_expr(s.mask_dtype, "mz[row * msl + key * mss]") + " * 1.4426950408889634f;\n";
  }
  if (causal) src += "        if (key - row > off) x = ninf;\n";
  src +=
      "        if (key >= S) x = ninf;\n"
      "        s[nt][e] = x;\n"
      "        if (e < 2) mx_a = fmaxf(mx_a, x); else mx_b = fmaxf(mx_b, x);\n"
      "      }\n"
      "    }\n"
      "    mx_a = fmaxf(mx_a, kiln_shfl_xor(mx_a, 1));\n"
      "    mx_a = fmaxf(mx_a, kiln_shfl_xor(mx_a, 2));\n"
      "    mx_b = fmaxf(mx_b, kiln_shfl_xor(mx_b, 1));\n"
      "    mx_b = fmaxf(mx_b, kiln_shfl_xor(mx_b, 2));\n"
      // A row with nothing seen yet keeps max -inf; exponents then use 0 so
      // that exp2(-inf - 0) = 0 instead of NaN.
      "    const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);\n"
      "    const float mu_a = mn_a == ninf ? 0.f : mn_a, mu_b = mn_b == ninf ? 0.f : mn_b;\n"
      "    const float al_a = exp2f(m_a - mu_a), al_b = exp2f(m_b - mu_b);\n"
      "    m_a = mn_a;\n"
      "    m_b = mn_b;\n"
      "    float ls_a = 0.f, ls_b = 0.f;\n"
      "#pragma unroll\n"
      "    for (int nt = 0; nt < " +
      std::to_string(TKN / 8) +
      "; ++nt) {\n"
      "      s[nt][0] = exp2f(s[nt][0] - mu_a);\n"
      "      s[nt][1] = exp2f(s[nt][1] - mu_a);\n"
      "      s[nt][2] = exp2f(s[nt][2] - mu_b);\n"
      "      s[nt][3] = exp2f(s[nt][3] - mu_b);\n"
      "      ls_a += s[nt][0] + s[nt][1];\n"
      "      ls_b += s[nt][2] + s[nt][3];\n"
      "    }\n"
      "    l_a = l_a * al_a + ls_a;\n"
      "    l_b = l_b * al_b + ls_b;\n"
      "#pragma unroll\n"
      "    for (int i = 0; i < " +
      D +
      " / 8; ++i) { o[i][0] *= al_a; o[i][1] *= al_a; o[i][2] *= al_b; o[i][3] *= al_b; }\n"
      // P as A fragments: keys 16 ks + [0, 16) are n-tiles 2 ks and 2 ks + 1.
      "    unsigned pa[" +
      std::to_string(TKN / 16) +
      "][4];\n"
      "#pragma unroll\n"
      "    for (int ks = 0; ks < " +
      std::to_string(TKN / 16) +
      "; ++ks) {\n"
      "      pa[ks][0] = kiln_pack2(s[2 * ks][0], s[2 * ks][1]);\n"
      "      pa[ks][1] = kiln_pack2(s[2 * ks][2], s[2 * ks][3]);\n"
      "      pa[ks][2] = kiln_pack2(s[2 * ks + 1][0], s[2 * ks + 1][1]);\n"
      "      pa[ks][3] = kiln_pack2(s[2 * ks + 1][2], s[2 * ks + 1][3]);\n"
      "    }\n"
      "    kiln_cp_wait1();\n"  // this tile's V (the next K may still be in flight)
      "    " +
      SYNC +
      ";\n"
      "#pragma unroll\n"
      "    for (int ks = 0; ks < " +
      std::to_string(TKN / 16) +
      "; ++ks) {\n"
      "#pragma unroll\n"
      "      for (int dp = 0; dp < " +
      D +
      " / 16; ++dp) {\n"
      "        unsigned b0, b1, b2, b3;\n"
      "        const int key = ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), col = (dp * 2 + (lane "
      ">> 4)) * 8;\n"
      "        kiln_ldsm4t(sv0 + (key * " +
      KROW +
      " + col) * 2, b0, b1, b2, b3);\n"
      "        kiln_mma(o[2 * dp], pa[ks], b0, b1);\n"
      "        kiln_mma(o[2 * dp + 1], pa[ks], b2, b3);\n"
      "      }\n"
      "    }\n"
      "    " +
      SYNC + ";\n" +  // every warp (or lane) is done with sv
      "    if (j + " + JS + " < ntk) load_tile(sv0, vz, vsl, k0 + " + JS + " * " + TK +
      ");\n"
      "    kiln_cp_commit();\n"
      "  }\n";
  // The row sums are spread over the quad's four threads.
  src +=
      "  l_a += kiln_shfl_xor(l_a, 1);\n"
      "  l_a += kiln_shfl_xor(l_a, 2);\n"
      "  l_b += kiln_shfl_xor(l_b, 1);\n"
      "  l_b += kiln_shfl_xor(l_b, 2);\n"
      "  unsigned short* oz = out + kiln_batch_offset(bi, nb, ob, 1u);\n";
  if (s.split) {
    // Each warp's (max, sum, P @ V) of the same 16 rows over its tiles,
    // combined through shared memory (its tiles are free by now): rows padded
    // to D + 4 floats so that the quads' stores fall in different banks.
    const std::string CW = std::to_string(s.d + 4);
    src +=
        "  kiln_cp_wait0();\n"
        "  __syncthreads();\n"
        "  float* cw = (float*)sk;\n"
        "  float* cm = (float*)sv;\n"
        "#pragma unroll\n"
        "  for (int i = 0; i < " +
        D +
        " / 8; ++i) {\n"
        "    const int c = i * 8 + 2 * t;\n"
        "    cw[(warp * 16 + g) * " +
        CW +
        " + c] = o[i][0];\n"
        "    cw[(warp * 16 + g) * " +
        CW +
        " + c + 1] = o[i][1];\n"
        "    cw[(warp * 16 + g + 8) * " +
        CW +
        " + c] = o[i][2];\n"
        "    cw[(warp * 16 + g + 8) * " +
        CW +
        " + c + 1] = o[i][3];\n"
        "  }\n"
        "  if (t == 0) {\n"
        "    cm[warp * 16 + g] = m_a;\n"
        "    cm[warp * 16 + g + 8] = m_b;\n"
        "    cm[" +
        NW +
        " * 16 + warp * 16 + g] = l_a;\n"
        "    cm[" +
        NW +
        " * 16 + warp * 16 + g + 8] = l_b;\n"
        "  }\n"
        "  __syncthreads();\n"
        "  for (int e = tid; e < 16 * (" +
        D + " / 2); e += " + THREADS +
        ") {\n"
        "    const int r = e / (" +
        D + " / 2), c = (e % (" + D +
        " / 2)) * 2;\n"
        "    const i64 row = q0 + r;\n"
        "    if (row >= L) continue;\n"
        "    float mx = ninf;\n"
        "#pragma unroll\n"
        "    for (int w = 0; w < " +
        NW +
        "; ++w) mx = fmaxf(mx, cm[w * 16 + r]);\n"
        "    const float mu = mx == ninf ? 0.f : mx;\n"
        "    float l = 0.f, o0 = 0.f, o1 = 0.f;\n"
        "#pragma unroll\n"
        "    for (int w = 0; w < " +
        NW +
        "; ++w) {\n"
        "      const float a = exp2f(cm[w * 16 + r] - mu);\n"
        "      l += a * cm[" +
        NW +
        " * 16 + w * 16 + r];\n"
        "      o0 += a * cw[(w * 16 + r) * " +
        CW +
        " + c];\n"
        "      o1 += a * cw[(w * 16 + r) * " +
        CW +
        " + c + 1];\n"
        "    }\n"
        "    const float il = 1.f / l;\n"  // 0 * inf = NaN for an unseen row
        "    *(unsigned*)(oz + row * osl + c) = kiln_pack2(o0 * il, o1 * il);\n"
        "  }\n"
        "}\n";
    return src;
  }
  src +=
      "  const float ia = 1.f / l_a, ib = 1.f / l_b;\n"  // 0 * inf = NaN for an unseen row
      "#pragma unroll\n"
      "  for (int i = 0; i < " +
      D +
      " / 8; ++i) {\n"
      "    const int c = i * 8 + 2 * t;\n"
      "    if (ra < L) *(unsigned*)(oz + ra * osl + c) = kiln_pack2(o[i][0] * ia, o[i][1] * ia);\n"
      "    if (rb < L) *(unsigned*)(oz + rb * osl + c) = kiln_pack2(o[i][2] * ib, o[i][3] * ib);\n"
      "  }\n"
      "}\n";
  return src;
}

// Strides of `t`'s batch dims (all but the last `keep`) against `batch`,
// aligned from the right: 0 where `t` lacks the dim or broadcasts it. With
// `group` > 1 the innermost batch dim (heads) has batch / group entries.
KilnDims batch_strides(const Tensor& t, IntArrayRef batch, int64_t keep, int64_t group = 1) {
  KilnDims out;
  const int64_t nb = static_cast<int64_t>(batch.size());
  for (int64_t i = 0; i < nb; ++i) {
    const int64_t td = t.dim() - keep - (nb - i);
    const int64_t want =
        i == nb - 1 ? batch[static_cast<size_t>(i)] / group : batch[static_cast<size_t>(i)];
    out.v[i] = td < 0 || t.size(td) != want ? 0 : t.stride(td);
  }
  return out;
}

// The stride of `t`'s dim `d` from the end (1 = last) when it has `size`
// there; 0 when it broadcasts or lacks the dim.
int64_t inner_stride(const Tensor& t, int64_t from_end, int64_t size) {
  const int64_t d = t.dim() - from_end;
  return d < 0 || t.size(d) != size ? 0 : t.stride(d);
}

PrefillForm& form_setting() {
  static PrefillForm f = [] {
    const std::optional<std::string> v = env_string("KILN_PREFILL_FORM");
    if (!v || *v == "auto") return PrefillForm::Auto;
    if (*v == "rows") return PrefillForm::Rows;
    if (*v == "split") return PrefillForm::SplitKeys;
    warn_env_value("KILN_PREFILL_FORM", *v, "auto, rows or split");
    return PrefillForm::Auto;
  }();
  return f;
}

// Note [Prefill keys split over warps]: the split form where its blocks fit
// one to an SM and each warp walks at most two tiles.
bool prefill_splits_keys(const PrefillSpec& s, int64_t L, int64_t S, int64_t Z, int device) {
  switch (form_setting()) {
    case PrefillForm::Rows:
      return false;
    case PrefillForm::SplitKeys:
      return true;
    case PrefillForm::Auto:
      break;
  }
  PrefillSpec split = s;
  split.split = true;
  const int64_t sms = kiln::cuda::device_properties(device).multiProcessorCount;
  return (L + prefill_rows(split) - 1) / prefill_rows(split) * Z <= sms &&
         S <= 2 * prefill_warps(split) * prefill_tile_keys(split);
}

}  // namespace

void set_prefill_form(PrefillForm form) {
  form_setting() = form;
}

bool prefill_supported(DType dtype, int64_t e, int64_t ev) {
  return (dtype == kFloat16 || dtype == kBFloat16) && e == ev && (e == 64 || e == 128);
}

bool prefill_writes(const Tensor& out) {
  // Pairs of 16-bit values are stored as one 32-bit word.
  bool ok =
      out.dim() >= 2 && out.stride(-1) == 1 && reinterpret_cast<uintptr_t>(out.data_ptr()) % 4 == 0;
  for (int64_t d = 0; ok && d + 1 < out.dim(); ++d) ok = out.stride(d) % 2 == 0;
  return ok;
}

void run_prefill_attention(const Tensor& out, const Tensor& q_in, const Tensor& k_in,
                           const Tensor& v_in, const std::optional<Tensor>& mask_in, bool causal,
                           const Tensor& pos, double scale, int64_t group, int64_t* pos_err) {
  KILN_INTERNAL_ASSERT(
      prefill_supported(q_in.dtype(), q_in.size(-1), v_in.size(-1)) && prefill_writes(out),
      "prefill attention arguments");
  const char* op = "scaled_dot_product_attention";
  const int64_t nb = out.dim() - 2;
  KILN_CHECK(nb <= kMaxKernelDims, "[", op, "] expected at most ", kMaxKernelDims,
             " batch dims on cuda, got ", nb);
  const Tensor q = aligned_operand(q_in, 2), k = aligned_operand(k_in, 8),
               v = aligned_operand(v_in, 8);
  const int64_t L = q.size(-2), S = k.size(-2), D = q.size(-1);
  const IntArrayRef batch = out.sizes().slice(0, static_cast<size_t>(nb));
  int64_t Z = 1;
  KilnDims bsizes;
  for (int64_t i = 0; i < nb; ++i) {
    bsizes.v[i] = batch[i];
    Z *= batch[i];
  }
  PrefillSpec spec;
  spec.dtype = q.dtype();
  spec.d = static_cast<int>(D);
  Tensor mask;
  if (mask_in && mask_in->defined()) {
    mask = *mask_in;
    if (mask.dtype() == kBool) {
      spec.mask = PrefillMask::Bool;
    } else {
      spec.mask = PrefillMask::Additive;
      // The CPU kernel adds the mask in float32: a float64 mask or another
      // 16-bit dtype converts exactly as it would there.
      if (mask.dtype() != q.dtype() && mask.dtype() != kFloat32) mask = dense(mask, kFloat32);
    }
    spec.mask_dtype = mask.dtype();
  } else if (causal) {
    spec.mask = pos.defined() ? PrefillMask::CausalPos : PrefillMask::Causal;
  }
  spec.split = prefill_splits_keys(spec, L, S, Z, q.device().index());
  const int64_t rows = prefill_rows(spec);
  const int64_t ntq = (L + rows - 1) / rows;
  KILN_CHECK(ntq * Z < (int64_t{1} << 31), "[", op, "] expected fewer than 2^31 blocks, got ",
             ntq * Z);
  cudaKernel_t kern = load_kernel(
      prefill_name(spec), [&] { return prefill_source(spec); }, q.device().index());
  KernelArgs a;
  a.ptr(out).ptr(q).ptr(k).ptr(v).ptr(mask).ptr(pos);
  // pos: one element for all, or one per leading batch index (kv_cache_attention: [B, Hq]).
  a.i64(nb >= 2 ? batch[static_cast<size_t>(nb) - 1] : 1);
  a.i64(pos.defined() && pos.numel() > 1 ? pos.stride(0) : 0);
  a.i64(L).i64(S).i64(Z).i64(ntq).i64(group).i32(static_cast<int32_t>(nb)).dims(bsizes);
  a.dims(batch_strides(q, batch, 2)).dims(batch_strides(k, batch, 2, group));
  a.dims(batch_strides(v, batch, 2, group));
  KilnDims mb;
  int64_t msl = 0, mss = 0;
  if (mask.defined()) {
    mb = batch_strides(mask, batch, 2);
    msl = inner_stride(mask, 2, L);
    mss = inner_stride(mask, 1, S);
  }
  a.dims(mb).dims(batch_strides(out, batch, 2));
  a.i64(q.stride(-2)).i64(k.stride(-2)).i64(v.stride(-2)).i64(msl).i64(mss).i64(out.stride(-2));
  a.f32(static_cast<float>(scale * 1.4426950408889634));
  a.ptr(pos.defined() ? pos_err : nullptr);
  launch(kern, q.device(), dim3(static_cast<unsigned>(ntq * Z)),
         static_cast<unsigned>(32 * prefill_warps(spec)), 0, a);
  out.impl()->bump_version();
}

Tensor aligned_operand(const Tensor& t, int64_t align) {
  bool ok = t.dim() >= 1 && (t.size(-1) <= 1 || t.stride(-1) == 1) &&
            reinterpret_cast<uintptr_t>(t.data_ptr()) %
                    static_cast<uintptr_t>(align * static_cast<int64_t>(t.element_size())) ==
                0;
  for (int64_t d = 0; ok && d + 1 < t.dim(); ++d) ok = t.stride(d) % align == 0;
  if (ok) return t;
  Tensor c = empty_tensor(t.sizes(), t.dtype(), t.device());
  copy_into_cuda(c, t);
  return c;
}

std::vector<std::pair<std::string, std::string>> prefill_source_samples() {
  std::vector<std::pair<std::string, std::string>> out;
  for (DType t : {kFloat16, kBFloat16}) {
    for (int d : {64, 128}) {
      for (PrefillMask m :
           {PrefillMask::None, PrefillMask::Causal, PrefillMask::CausalPos, PrefillMask::Bool}) {
        for (bool split : {false, true}) {
          PrefillSpec s{t, d, m, kBool, split};
          out.emplace_back(prefill_name(s), prefill_source(s));
        }
      }
      for (DType mt : {t, kFloat32}) {
        for (bool split : {false, true}) {
          PrefillSpec s{t, d, PrefillMask::Additive, mt, split};
          out.emplace_back(prefill_name(s), prefill_source(s));
        }
      }
    }
  }
  return out;
}

}  // namespace kiln::jit::cuda
