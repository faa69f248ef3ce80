// Whether a Hopper wgmma product, launched early, beats cuBLASLt on GPT-2's
// prefill products at 128 rows in a chain (issue 14's 1x128 and 8x128 goals;
// perf/RESULTS.md, thirty-first session). The twenty-fifth session's
// mma.sync forms (cluster_gemm.cu) lost to cuBLASLt on their own; its note
// named wgmma as the next probe. Not part of the build: compiled by hand with
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o wgmma_gemm
//     perf/probes/wgmma_gemm.cu -lcublasLt
// and run as `wgmma_gemm ROWS`; LAYERS=1 times a GPT-2 layer's four products
// (layer_chain), the forms named by QKV, PROJ, FC and DOWN.
// out[m, n] = act(x[m, k] . w[n, k] + bias[n]) (+ residual[m, n]), float16,
// float32 sums.
//
// The form: a block of WG warpgroups owns a (64 WG) x BN tile of out; k goes
// by stages of 64 (128-byte rows, stored with the 128-byte swizzle that
// wgmma's shared-memory descriptors read), ST stages in flight through
// cp.async. The weight's first stages are copied before the kernel waits for
// the one before it (weights are not written by it) and the rest of its rows
// prefetched into L2; x's stages are copied after the wait. Each stage is
// four m64nBNk16 wgmmas per warpgroup, both operands from shared memory.
// Where KS > 1, a cluster of KS blocks along z splits k, and each block
// finishes every KS-th pair of the tile from its peers' float32 partials
// (distributed shared memory).
#include <cooperative_groups.h>
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "linear_probe.cuh"
#include "lt_probe.h"
#include "probe.h"

namespace cg = cooperative_groups;

constexpr int kChain = 12;

struct Args {
  const __half *x, *w, *bias, *residual;
  __half* out;
  int m, n, k, act;
  // Parts left out, to time the rest: 1 after the wait, 2 after x's
  // copies, 3 before the epilogue, 4 no cluster reduction (wrong sums).
  int skip = 0;
  int late_bias = 0;  // the bias loaded after the sums, not before the wait
};

// A K-major operand's shared-memory descriptor: rows of 128 bytes, 8-row
// groups 1024 bytes apart, the 128-byte swizzle.
__device__ __forceinline__ uint64_t sw128_desc(unsigned addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}
__device__ __forceinline__ void wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wg_wait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
__device__ __forceinline__ void proxy_fence() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
__device__ __forceinline__ void wgmma_n32(float* d, uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "l"(da), "l"(db), "r"(acc));
}

__device__ __forceinline__ void wgmma_n64(float* d, uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%"
      "25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(acc));
}

__device__ __forceinline__ void wgmma_n128(float* d, uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%"
      "25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%"
      "48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, "
      "0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(da), "l"(db), "r"(acc));
}

template <int BN>
__device__ __forceinline__ void wgmma_bn(float* d, uint64_t da, uint64_t db) {
  if constexpr (BN == 32) wgmma_n32(d, da, db, 1);
  if constexpr (BN == 64) wgmma_n64(d, da, db, 1);
  if constexpr (BN == 128) wgmma_n128(d, da, db, 1);
}

// A block: WG warpgroups along m (64 rows each) times KW along k (stage kt
// to the warpgroups with kt % KW == their k index), so 128 WG KW threads.
template <int WG, int BN, int ST, int KS, int KW>
struct Cfg {
  static constexpr int kBM = 64 * WG, kThreads = 128 * WG * KW;
  static constexpr int kA = kBM * 128, kB = BN * 128, kStage = kA + kB;
  static constexpr int kTile = kBM * BN * 4 * KW;  // float32 partials
  static constexpr int kSmem = (ST * kStage > kTile ? ST * kStage : kTile) + 1024;
};

// cp.async.wait_group n for a run-time n in [0, N].
template <int N>
__device__ __forceinline__ void cp_wait_upto(int n) {
  if constexpr (N >= 0) {
    if (n >= N)
      cp_wait<N>();
    else
      cp_wait_upto<N - 1>(n);
  }
}

// Every stage resident (k / KS / 64 <= ST): the weight's slice whole before
// the wait, with this thread's bias values; x's stages after it, one group
// each; the wgmmas run ahead asynchronously and are waited for once.
template <int WG, int BN, int ST, int KS, int KW>
__global__ void __launch_bounds__(128 * WG * KW) wg_gemm(Args p) {
  using C = Cfg<WG, BN, ST, KS, KW>;
  constexpr int BM = C::kBM, T = C::kThreads, NP = BN / 4;  // pairs per thread
  extern __shared__ unsigned char raw[];
  const unsigned raw_addr = smem_addr(raw);
  const unsigned base = (raw_addr + 1023u) & ~1023u;
  float* tile = reinterpret_cast<float*>(raw + (base - raw_addr));
  const int t = threadIdx.x;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
  const int kslice = p.k / KS, rank = KS > 1 ? static_cast<int>(blockIdx.z) : 0;
  const int kbeg = rank * kslice, KT = kslice / 64;
  const int wgm = (t >> 7) % WG, wgk = (t >> 7) / WG;
  const int warp = (t >> 5) & 3, lane = t & 31;
  // acc[4j + e]: row 16 (warp % 4) + lane / 4 (+ 8 for e >= 2) of the
  // warpgroup's 64, column 8 j + 2 (lane % 4) + (e & 1).
  const int rl = wgm * 64 + warp * 16 + (lane >> 2), cl = 2 * (lane & 3);
  auto load_b = [&](int s) {
    const unsigned dst = base + s * C::kStage + C::kA;
    for (int i = t; i < BN * 8; i += T) {
      const int r = i >> 3, c = i & 7;
      cp16(dst + r * 128 + ((c ^ (r & 7)) << 4),
           p.w + (size_t)(n0 + r) * p.k + kbeg + s * 64 + c * 8, true);
    }
  };
  auto load_a = [&](int s) {
    const unsigned dst = base + s * C::kStage;
    for (int i = t; i < BM * 8; i += T) {
      const int r = i >> 3, c = i & 7;
      const bool ok = m0 + r < p.m;
      cp16(dst + r * 128 + ((c ^ (r & 7)) << 4),
           p.x + (size_t)(ok ? m0 + r : 0) * p.k + kbeg + s * 64 + c * 8, ok);
    }
  };
  for (int s = 0; s < KT; ++s) load_b(s);
  commit();
  __half2 bias[BN / 8];
  if (!p.late_bias) {
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
      bias[j] = *reinterpret_cast<const __half2*>(p.bias + n0 + 8 * j + cl);
  }
  wait_prior();
  let_next();
  if (p.skip == 1) {
    cp_wait<0>();
    return;
  }
  for (int s = 0; s < KT; ++s) {
    load_a(s);
    commit();
  }
  if (p.skip == 2) {
    cp_wait<0>();
    return;
  }
  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
  for (int kt = 0; kt < KT; ++kt) {
    cp_wait_upto<ST>(KT - 1 - kt);
    proxy_fence();
    __syncthreads();
    if (kt % KW != wgk) continue;
    const unsigned a = base + kt * C::kStage + wgm * 64 * 128, b = base + kt * C::kStage + C::kA;
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_bn<BN>(acc, sw128_desc(a + kk * 32), sw128_desc(b + kk * 32));
    wg_commit();
  }
  wg_wait0();
  if (p.skip == 3) return;
  if (p.late_bias) {
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
      bias[j] = *reinterpret_cast<const __half2*>(p.bias + n0 + 8 * j + cl);
  }
  // Pair q = 2 j + h (rows rl + 8 h, columns 8 j + cl and + 1) is finished by
  // k warpgroup q % KW of cluster rank (q / KW) % KS.
  const bool split = KW > 1 || (KS > 1 && p.skip != 4);
  if (split) {
    __syncthreads();  // every stage read: the tile may reuse them
    float* mine = tile + wgk * BM * BN;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        mine[(rl + 8 * (e >> 1)) * BN + 8 * j + cl + (e & 1)] = acc[4 * j + e];
  }
  cg::cluster_group cluster = cg::this_cluster();
  if (KS > 1 && p.skip != 4)
    cluster.sync();
  else if (KW > 1)
    __syncthreads();
#pragma unroll
  for (int q = 0; q < NP; ++q) {
    const int j = q >> 1, h = q & 1, off = (rl + 8 * h) * BN + 8 * j + cl;
    if (split && (q % KW != wgk || (KS > 1 && p.skip != 4 && (q / KW) % KS != rank))) continue;
    float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
    if (KW > 1) {
      const float* other = tile + (1 - wgk) * BM * BN;
      v0 += other[off];
      v1 += other[off + 1];
    }
    if (KS > 1 && p.skip != 4) {
      for (int r = 0; r < KS; ++r) {
        if (r == rank) continue;
        const float* peer = cluster.map_shared_rank(tile, r);
#pragma unroll
        for (int g = 0; g < KW; ++g) {
          v0 += peer[g * BM * BN + off];
          v1 += peer[g * BM * BN + off + 1];
        }
      }
    }
    const int row = m0 + rl + 8 * h, col = n0 + 8 * j + cl;
    if (row >= p.m) continue;
    v0 += __low2float(bias[j]);
    v1 += __high2float(bias[j]);
    if (p.act) {
      v0 = gelu(v0);
      v1 = gelu(v1);
    }
    if (p.residual) {
      const __half2 r2 = *reinterpret_cast<const __half2*>(p.residual + (size_t)row * p.n + col);
      v0 += __low2float(r2);
      v1 += __high2float(r2);
    }
    *reinterpret_cast<__half2*>(p.out + (size_t)row * p.n + col) = __floats2half2_rn(v0, v1);
  }
  if (KS > 1 && p.skip != 4) cluster.sync();  // peers read this block's tile
}

struct Form {
  std::string name;
  int bm, bn, st, ks, kw;
  std::function<void(const Args&, cudaStream_t)> launch;
};

template <int WG, int BN, int ST, int KS, int KW>
Form form() {
  using C = Cfg<WG, BN, ST, KS, KW>;
  auto kernel = wg_gemm<WG, BN, ST, KS, KW>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem));
  char name[64];
  std::snprintf(name, sizeof name, "%dx%d/k%d/ks%d/kw%d", C::kBM, BN, ST * 64, KS, KW);
  Form f{name, C::kBM, BN, ST, KS, KW, nullptr};
  f.launch = [kernel](const Args& a, cudaStream_t s) {
    launch_early(kernel, dim3(a.n / BN, (a.m + C::kBM - 1) / C::kBM, KS), C::kThreads, C::kSmem, KS,
                 a, s);
  };
  return f;
}

std::vector<Form>& forms() {
  static std::vector<Form> f = {
      form<1, 32, 6, 2, 1>(),  form<1, 64, 6, 2, 1>(),  form<1, 64, 12, 1, 1>(),
      form<1, 64, 12, 1, 2>(), form<1, 32, 12, 1, 2>(), form<1, 64, 6, 2, 2>(),
      form<1, 32, 6, 2, 2>(),  form<1, 32, 3, 4, 1>(),  form<1, 64, 3, 4, 1>(),
      form<1, 64, 12, 4, 2>(), form<1, 32, 12, 4, 2>(), form<1, 64, 6, 8, 2>(),
      form<1, 64, 6, 8, 1>(),  form<1, 128, 6, 2, 2>(), form<2, 64, 6, 2, 2>(),
  };
  return f;
}

const Form* form_named(const char* name) {
  for (const Form& f : forms())
    if (f.name == name) return &f;
  std::fprintf(stderr, "no form %s\n", name);
  std::exit(1);
}

bool fits(const Form& f, int n, int k) {
  return n % f.bn == 0 && k % (64 * f.ks) == 0 && k / f.ks / 64 <= f.st;
}

struct Shape {
  const char* name;
  int k, n, act;
  bool residual;
};

float chain_us(cudaStream_t st, int layers, const std::function<void(int)>& body) {
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < layers; ++i) body(i);
  CHECK(cudaStreamEndCapture(st, &g));
  return replay_us(g, st, 50) / layers;
}

// GPT-2's four products per layer, 12 layers in one graph: the generated
// forms named by QKV, PROJ, FC and DOWN against cuBLASLt's.
void layer_chain(int m, cudaStream_t st) {
  constexpr int kLayers = 12, D = 768, F = 3072;
  struct Layer {
    __half *wqkv, *bqkv, *wo, *bo, *wfc, *bfc, *wdn, *bdn;
    Lt *qkv, *o, *fc, *dn;
  };
  std::vector<Layer> L(kLayers);
  for (int l = 0; l < kLayers; ++l) {
    const unsigned s = 100 + 16 * l;
    Layer& y = L[l];
    y.wqkv = random_halves((size_t)3 * D * D, 1.f / std::sqrt((float)D), 0.f, s);
    y.bqkv = random_halves(3 * D, 0.5f, 0.f, s + 1);
    y.wo = random_halves((size_t)D * D, 1.f / std::sqrt((float)D), 0.f, s + 2);
    y.bo = random_halves(D, 0.5f, 0.f, s + 3);
    y.wfc = random_halves((size_t)F * D, 1.f / std::sqrt((float)D), 0.f, s + 4);
    y.bfc = random_halves(F, 0.5f, 0.f, s + 5);
    y.wdn = random_halves((size_t)D * F, 1.f / std::sqrt((float)F), 0.f, s + 6);
    y.bdn = random_halves(D, 0.5f, 0.f, s + 7);
    y.qkv = new Lt(m, 3 * D, D, y.bqkv, false, false);
    y.o = new Lt(m, D, D, y.bo, false, true);
    y.fc = new Lt(m, F, D, y.bfc, true, false);
    y.dn = new Lt(m, D, F, y.bdn, false, true);
  }
  __half* x0 = random_halves((size_t)m * D, 1.f, 0.f, 7);
  __half* attn = random_halves((size_t)m * D, 1.f, 0.f, 8);
  __half *x[2], *qkv, *h, *f;
  for (auto** b : {&x[0], &x[1], &h}) CHECK(cudaMalloc(b, (size_t)m * D * 2));
  CHECK(cudaMalloc(&qkv, (size_t)m * 3 * D * 2));
  CHECK(cudaMalloc(&f, (size_t)m * F * 2));
  auto env = [](const char* v, const char* d) { return std::getenv(v) ? std::getenv(v) : d; };
  const Form *fq = form_named(env("QKV", "64x64/k768/ks1/kw2")),
             *fo = form_named(env("PROJ", "64x32/k384/ks2/kw2")),
             *ffc = form_named(env("FC", "64x64/k768/ks1/kw2")),
             *fdn = form_named(env("DOWN", "64x64/k768/ks4/kw2"));
  auto args = [&](const __half* in, const __half* w, const __half* b, const __half* res,
                  __half* out, int n, int k,
                  int act) { return Args{in, w, b, res, out, m, n, k, act}; };
  auto generated = [&](int l) {
    const Layer& y = L[l];
    __half *in = x[l % 2], *out = x[(l + 1) % 2];
    fq->launch(args(in, y.wqkv, y.bqkv, nullptr, qkv, 3 * D, D, 0), st);
    fo->launch(args(attn, y.wo, y.bo, in, h, D, D, 0), st);
    ffc->launch(args(h, y.wfc, y.bfc, nullptr, f, F, D, 1), st);
    fdn->launch(args(f, y.wdn, y.bdn, h, out, D, F, 0), st);
  };
  auto library = [&](int l) {
    const Layer& y = L[l];
    __half *in = x[l % 2], *out = x[(l + 1) % 2];
    y.qkv->run(y.wqkv, in, nullptr, qkv, st);
    y.o->run(y.wo, attn, in, h, st);
    y.fc->run(y.wfc, h, nullptr, f, st);
    y.dn->run(y.wdn, f, h, out, st);
  };
  __half* out_gen;
  CHECK(cudaMalloc(&out_gen, (size_t)m * D * 2));
  CHECK(cudaMemcpy(x[0], x0, (size_t)m * D * 2, cudaMemcpyDeviceToDevice));
  for (int l = 0; l < kLayers; ++l) generated(l);
  CHECK(cudaMemcpyAsync(out_gen, x[kLayers % 2], (size_t)m * D * 2, cudaMemcpyDeviceToDevice, st));
  CHECK(cudaMemcpyAsync(x[0], x0, (size_t)m * D * 2, cudaMemcpyDeviceToDevice, st));
  for (int l = 0; l < kLayers; ++l) library(l);
  CHECK(cudaStreamSynchronize(st));
  CHECK(cudaGetLastError());
  const auto [diff, big] = max_diff(out_gen, x[kLayers % 2], (size_t)m * D);
  for (int round = 0; round < 2; ++round) {
    const float t_gen = chain_us(st, kLayers, generated);
    const float t_lt = chain_us(st, kLayers, library);
    std::printf(
        "layer of four products, %d rows, us per layer: wgmma %.2f (%s %s %s %s), cuBLASLt %.2f\n",
        m, t_gen, fq->name.c_str(), fo->name.c_str(), ffc->name.c_str(), fdn->name.c_str(), t_lt);
  }
  std::printf("  last layer's output: max |diff| %.4f (of %.2f)\n", diff, big);
}

int main(int argc, char** argv) {
  const int m = argc > 1 ? std::atoi(argv[1]) : 128;
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  if (std::getenv("LAYERS")) {
    layer_chain(m, st);
    return 0;
  }
  const Shape shapes[] = {{"qkv", 768, 2304, 0, false},
                          {"proj", 768, 768, 0, true},
                          {"fc", 768, 3072, 1, false},
                          {"down", 3072, 768, 0, true}};
  std::printf(
      "rows %d; us per product in a chain of %d (one graph; generated forms launched early)\n", m,
      kChain);
  for (const Shape& sh : shapes) {
    const int k = sh.k, n = sh.n;
    __half* x = random_halves((size_t)m * k, 1.f, 0.f, 1);
    __half* res = random_halves((size_t)m * n, 1.f, 0.f, 2);
    std::vector<__half*> w(kChain), bias(kChain), out_lt(kChain), out_gen(kChain);
    std::vector<Lt*> lt(kChain);
    for (int i = 0; i < kChain; ++i) {
      w[i] = random_halves((size_t)n * k, 1.f / std::sqrt((float)k), 0.f, 10 + i);
      bias[i] = random_halves(n, 0.5f, 0.f, 40 + i);
      CHECK(cudaMalloc(&out_lt[i], (size_t)m * n * 2));
      CHECK(cudaMalloc(&out_gen[i], (size_t)m * n * 2));
      lt[i] = new Lt(m, n, k, bias[i], sh.act, sh.residual);
    }
    auto args = [&](int i) {
      return Args{x, w[i], bias[i], sh.residual ? res : nullptr, out_gen[i], m, n, k, sh.act};
    };
    const float t_lt =
        chain_us(st, kChain, [&](int i) { lt[i]->run(w[i], x, res, out_lt[i], st); });
    std::printf("%-5s %4dx%-5d cuBLASLt %.2f\n", sh.name, k, n, t_lt);
    const char* only = std::getenv("ONLY");
    for (const Form& f : forms()) {
      if (!fits(f, n, k)) continue;
      if (only && !std::strstr(only, f.name.c_str())) continue;
      lt[0]->run(w[0], x, res, out_lt[0], st);
      CHECK(cudaMemsetAsync(out_gen[0], 0xff, (size_t)m * n * 2, st));
      f.launch(args(0), st);
      CHECK(cudaStreamSynchronize(st));
      CHECK(cudaGetLastError());
      const auto [diff, big] = max_diff(out_gen[0], out_lt[0], (size_t)m * n);
      const float us = chain_us(st, kChain, [&](int i) { f.launch(args(i), st); });
      const int blocks = (n / f.bn) * ((m + f.bm - 1) / f.bm) * f.ks;
      std::printf("   %-16s %4d blocks  %6.2f us  max|diff| %.4f (of %.2f)\n", f.name.c_str(),
                  blocks, us, diff, big);
      if (std::getenv("SKIPS")) {
        for (int skip : {1, 2, 3, 4, 5}) {
          const float t_skip = chain_us(st, kChain, [&](int i) {
            Args a = args(i);
            a.skip = skip == 5 ? 0 : skip;
            a.late_bias = skip == 5;
            f.launch(a, st);
          });
          std::printf("      %s: %6.2f us\n",
                      skip == 5 ? "bias late" : ("skip " + std::to_string(skip)).c_str(), t_skip);
        }
      }
    }
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < kChain; ++i) {
      CHECK(cudaFree(w[i]));
      CHECK(cudaFree(bias[i]));
      CHECK(cudaFree(out_lt[i]));
      CHECK(cudaFree(out_gen[i]));
    }
    CHECK(cudaFree(x));
    CHECK(cudaFree(res));
  }
  return 0;
}
