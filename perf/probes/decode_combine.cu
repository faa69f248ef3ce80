// Where a split-sequence decode attention should merge its splits: in its
// own last block per head (after an atomic, as kiln's kernel does), in the
// prologue of the projection that reads its output (perf/RESULTS.md,
// eighteenth session, "Next GPU session"), or across a thread-block cluster
// per head, each block merging a share of the head's elements from its
// peers' shared memory (nineteenth session). Not part of the build: a probe,
// compiled by hand with
//   nvcc -O3 -arch=sm_90 -o decode_combine perf/probes/decode_combine.cu
// One layer: attention of one query row over GPT-2's 12 heads of 64 at
// position 512 of a 1024-slot float16 cache, 8 or 16 splits per head, then the
// 768x768 float16 projection; the projection's output is the next layer's
// query. 12 layers per graph, each with its own cache and weight; every
// kernel launched early (programmatic dependent launch), the cache slice and
// the weight rows prefetched into L2 before the wait. Prints the time per
// layer of each form and the largest difference from the first form's
// output (perf/RESULTS.md, nineteenth session, has a run).
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe.h"

namespace cg = cooperative_groups;

constexpr int kHeads = 12, kDim = 64, kSlots = 1024, kPos = 512, kSplits = 16, kLayers = 12;
constexpr int kModel = kHeads * kDim;  // 768
constexpr int kSeen = kPos + 1;
constexpr int kWarps = 8;

struct Partials {
  float* o;         // [heads][splits][dim]
  float* m;         // [heads][splits]
  float* l;         // [heads][splits]
  unsigned* count;  // [heads], zero between launches
};

enum Combine { kNone, kLastBlock, kCluster };

// Block (split, head) of S splits, 128 threads: scores of its keys (a warp
// per key), the softmax of the slice, P @ V; then the partials only (kNone:
// the projection merges them), or the partials, an atomic and, in the last
// block of the head, the merge into x (kLastBlock), or the partials in
// shared memory, a cluster barrier, and each block of the head's cluster
// merging 64 / S of its elements from every peer's shared memory (kCluster;
// the grid's x is one cluster).
template <int S, Combine kMode>
__global__ void __launch_bounds__(128)
    attention(const float* q, const __half* k, const __half* v, Partials p, float* x) {
  constexpr int kPer = (kSeen + S - 1) / S;
  const int split = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int k0 = split * kPer, k1 = min(kSeen, k0 + kPer);
  const __half* kh = k + (size_t)h * kSlots * kDim;
  const __half* vh = v + (size_t)h * kSlots * kDim;
  for (int j = k0 + tid; j < k1; j += 128) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(kh + (size_t)j * kDim));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(vh + (size_t)j * kDim));
  }
  wait_prior();
  let_next();
  __shared__ float sq[kDim], sp[kPer], so[kDim];
  __shared__ float s_m, s_l;
  if (tid < kDim) sq[tid] = q[h * kDim + tid] * 0.125f;
  __syncthreads();
  for (int j = k0 + warp; j < k1; j += 4) {
    const __half2 kv = reinterpret_cast<const __half2*>(kh + (size_t)j * kDim)[lane];
    float s = __low2float(kv) * sq[2 * lane] + __high2float(kv) * sq[2 * lane + 1];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) sp[j - k0] = s;
  }
  __syncthreads();
  if (warp == 0) {
    float mx = -INFINITY;
    for (int j = lane; j < k1 - k0; j += 32) mx = fmaxf(mx, sp[j]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.f;
    for (int j = lane; j < k1 - k0; j += 32) {
      const float e = __expf(sp[j] - mx);
      sp[j] = e;
      sum += e;
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) s_m = mx, s_l = sum;
  }
  __syncthreads();
  float acc = 0.f;
  if (tid < kDim) {
    for (int j = k0; j < k1; ++j) acc += sp[j - k0] * __half2float(vh[(size_t)j * kDim + tid]);
  }
  if (kMode == kCluster) {
    if (tid < kDim) so[tid] = acc;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    // Thread t merges element split * (64 / S) + t / S from peer t % S;
    // the S lanes of an element are adjacent, so shuffles reduce them.
    constexpr int kShare = kDim / S;
    if (tid < kDim) {
      const int peer = tid % S, e = split * kShare + tid / S;
      const float* pm = cluster.map_shared_rank(&s_m, peer);
      const float* pl = cluster.map_shared_rank(&s_l, peer);
      const float* po = cluster.map_shared_rank(so, peer);
      const float m = *pm, l = *pl, o = po[e];
      float mx = m;
      for (int off = S / 2; off > 0; off >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float w = __expf(m - mx);
      float den = w * l, num = w * o;
      for (int off = S / 2; off > 0; off >>= 1) {
        den += __shfl_xor_sync(0xffffffffu, den, off);
        num += __shfl_xor_sync(0xffffffffu, num, off);
      }
      if (peer == 0) x[h * kDim + e] = num / den;
    }
    cluster.sync();  // every peer's reads of this block's shared memory are done
    return;
  }
  if (tid < kDim) p.o[((size_t)h * S + split) * kDim + tid] = acc;
  if (tid == 0) p.m[h * S + split] = s_m, p.l[h * S + split] = s_l;
  if (kMode == kNone) return;
  __shared__ unsigned s_last;
  __syncthreads();
  if (tid == 0) {
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                 : "=r"(before)
                 : "l"(p.count + h)
                 : "memory");
    s_last = before == S - 1;
    if (s_last) p.count[h] = 0u;
  }
  __syncthreads();
  if (!s_last || tid >= kDim) return;
  float mx = -INFINITY;
  for (int s = 0; s < S; ++s) mx = fmaxf(mx, __ldcg(p.m + h * S + s));
  float den = 0.f, num = 0.f;
  for (int s = 0; s < S; ++s) {
    const float w = __expf(__ldcg(p.m + h * S + s) - mx);
    den += w * __ldcg(p.l + h * S + s);
    num += w * __ldcg(p.o + ((size_t)h * S + s) * kDim + tid);
  }
  x[h * kDim + tid] = num / den;
}

// 768 -> 768, a warp per output. kMerge: x is merged from the attention's
// partials by every block (into shared memory) before the product.
template <bool kMerge>
__global__ void __launch_bounds__(256)
    projection(const __half* __restrict__ w, const float* x, Partials p, float* y) {
  const int lane = threadIdx.x & 31, n = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const uint4* row = reinterpret_cast<const uint4*>(w + (size_t)n * kModel);
  for (int i = 0; i < 3; ++i) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + lane + 32 * i));
  wait_prior();
  let_next();
  __shared__ float sx[kModel];
  if (kMerge) {
    for (int e = threadIdx.x; e < kModel; e += 256) {
      const int h = e / kDim, d = e % kDim;
      float m[kSplits], mx = -INFINITY;
#pragma unroll
      for (int s = 0; s < kSplits; ++s) {
        m[s] = __ldcg(p.m + h * kSplits + s);
        mx = fmaxf(mx, m[s]);
      }
      float den = 0.f, num = 0.f;
#pragma unroll
      for (int s = 0; s < kSplits; ++s) {
        const float wgt = __expf(m[s] - mx);
        den += wgt * __ldcg(p.l + h * kSplits + s);
        num += wgt * __ldcg(p.o + ((size_t)h * kSplits + s) * kDim + d);
      }
      sx[e] = num / den;
    }
  } else {
    for (int e = threadIdx.x; e < kModel; e += 256) sx[e] = x[e];
  }
  __syncthreads();
  float s = 0.f;
  for (int i = 0; i < 3; ++i) {
    const uint4 r = __ldg(row + lane + 32 * i);
    const __half* hv = reinterpret_cast<const __half*>(&r);
    const int k0 = (lane + 32 * i) * 8;
    for (int e = 0; e < 8; ++e) s += __half2float(hv[e]) * sx[k0 + e];
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) y[n] = s;
}

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t cache = (size_t)kHeads * kSlots * kDim, weight = (size_t)kModel * kModel;
  __half *k, *v, *w;
  CHECK(cudaMalloc(&k, kLayers * cache * sizeof(__half)));
  CHECK(cudaMalloc(&v, kLayers * cache * sizeof(__half)));
  CHECK(cudaMalloc(&w, kLayers * weight * sizeof(__half)));
  fill<<<264, 256, 0, s>>>(k, kLayers * cache, 1, 1.f);
  fill<<<264, 256, 0, s>>>(v, kLayers * cache, 2, 1.f);
  fill<<<264, 256, 0, s>>>(w, kLayers * weight, 3, 1.f);
  float *ys, *x;
  CHECK(cudaMalloc(&ys, (kLayers + 1) * kModel * sizeof(float)));
  CHECK(cudaMalloc(&x, kModel * sizeof(float)));
  std::vector<float> q0(kModel);
  for (int i = 0; i < kModel; ++i) q0[i] = std::sin(0.37f * i);
  CHECK(cudaMemcpy(ys, q0.data(), kModel * sizeof(float), cudaMemcpyHostToDevice));
  Partials p{};
  CHECK(cudaMalloc(&p.o, (size_t)kHeads * kSplits * kDim * sizeof(float)));
  CHECK(cudaMalloc(&p.m, kHeads * kSplits * sizeof(float)));
  CHECK(cudaMalloc(&p.l, kHeads * kSplits * sizeof(float)));
  CHECK(cudaMalloc(&p.count, kHeads * sizeof(unsigned)));
  CHECK(cudaMemset(p.count, 0, kHeads * sizeof(unsigned)));
  cudaLaunchAttribute early{};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  auto launch = [&](auto kernel, dim3 grid, dim3 block, auto... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = s;
    cfg.attrs = &early;
    cfg.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
  };
  struct Form {
    const char* name;
    void (*attn)(const float*, const __half*, const __half*, Partials, float*);
    bool merge;  // the projection merges the partials
    int splits, cluster;
  };
  const Form forms[] = {
      {"16 splits, merged by the attention's last block", attention<16, kLastBlock>, false, 16, 0},
      {"16 splits, merged in the projection's prologue", attention<16, kNone>, true, 16, 0},
      {"8 splits, merged by the attention's last block", attention<8, kLastBlock>, false, 8, 0},
      {"8 splits, merged across a cluster of 8", attention<8, kCluster>, false, 8, 8},
      {"16 splits, merged across a cluster of 16", attention<16, kCluster>, false, 16, 16},
  };
  CHECK(cudaFuncSetAttribute(attention<16, kCluster>,
                             cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  std::vector<std::vector<float>> outputs;
  for (const Form& f : forms) {
    cudaLaunchAttribute attrs[2] = {early, {}};
    attrs[1].id = cudaLaunchAttributeClusterDimension;
    attrs[1].val.clusterDim.x = f.cluster;
    attrs[1].val.clusterDim.y = 1;
    attrs[1].val.clusterDim.z = 1;
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int l = 0; l < kLayers; ++l) {
      const float* q = ys + (size_t)l * kModel;
      const __half* kl = k + l * cache;
      const __half* vl = v + l * cache;
      float* y = ys + (size_t)(l + 1) * kModel;
      const __half* wl = w + l * weight;
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(f.splits, kHeads);
      cfg.blockDim = dim3(128);
      cfg.stream = s;
      cfg.attrs = attrs;
      cfg.numAttrs = f.cluster ? 2 : 1;
      CHECK(cudaLaunchKernelEx(&cfg, f.attn, q, kl, vl, p, x));
      if (f.merge) {
        launch(projection<true>, dim3(kModel / kWarps), dim3(256), wl, (const float*)x, p, y);
      } else {
        launch(projection<false>, dim3(kModel / kWarps), dim3(256), wl, (const float*)x, p, y);
      }
    }
    CHECK(cudaStreamEndCapture(s, &g));
    const float us = replay_us(g, s, 200);
    std::printf("%-52s %8.2f us per graph, %6.3f us per layer\n", f.name, us, us / kLayers);
    outputs.emplace_back(kModel);
    CHECK(cudaMemcpy(outputs.back().data(), ys + (size_t)kLayers * kModel, kModel * sizeof(float),
                     cudaMemcpyDeviceToHost));
  }
  double diff = 0, scale = 0;
  for (const std::vector<float>& out : outputs) {
    for (int i = 0; i < kModel; ++i) {
      diff = std::fmax(diff, std::fabs(out[i] - outputs[0][i]));
      scale = std::fmax(scale, std::fabs(outputs[0][i]));
    }
  }
  std::printf("largest difference from the first form's output: %g (largest output %g)\n", diff,
              scale);
  return 0;
}
