// Whether a decode step's attention should be its own kernel, or the tail of
// the QKV product before it: the last of a head's product blocks to finish
// (an atomic per head) attends over that head's whole cache, whose rows every
// product block of the head prefetched into L2 before its wait. A decode
// attention of its own adds about 5.9 us to a GPT-2 layer at position 512
// (perf/RESULTS.md, nineteenth session) where a one-key attention adds 2.6:
// the splits, their merge and the kernel boundary. Not part of the build: a
// probe, compiled by hand with
//   nvcc -O3 -std=c++17 -arch=sm_90 -o qkv_attention perf/probes/qkv_attention.cu
// One layer: x (768 float) -> QKV product (2304 x 768 float16; q kept in
// float, the new k and v written into the float16 cache at the position) ->
// attention of one query row over GPT-2's 12 heads of 64 -> the 768x768
// projection, whose output is the next layer's x. 12 layers per graph, each
// with its own weights and cache; every kernel launched early, its weight
// rows prefetched into L2 before the wait. POS (default 512) and SLOTS
// (default 1024) set the position and the cache's length; the position is
// read from device memory, as kiln's kernels read it. Forms:
//   none: QKV -> projection (no attention: the floor the others add to)
//   split: QKV -> split attention (16 splits per head, merged by the head's
//          last block: kiln's form) -> projection
//   tail: QKV with the attention in its tail -> projection
//   cluster: QKV and attention in one kernel, a cluster of CLUSTER (default
//          8) blocks per head: each block computes 24 of the head's 192
//          q, k, v outputs, the cluster shares them through distributed
//          shared memory, each block attends over 1/CLUSTER of the keys
//          (prefetched into L2 before the wait), and the partials are
//          merged through distributed shared memory -> projection
//   cluster+proj: the same, and each block then multiplies the head's
//          output by its 96 columns of the projection; the last head to
//          finish a column slice (an atomic per slice) sums the 12 heads'
//          partials in head order: one kernel per layer
// Prints each form's time per layer and the largest difference between
// each attention form's output and the split form's.
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe.h"

constexpr int kHeads = 12, kDim = 64, kModel = kHeads * kDim, kQkv = 3 * kModel, kLayers = 12;
constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kSplits = 16;
constexpr int kMaxKeys = 4096;
constexpr int kBlocksPerHead = 3 * kDim / kWarps;  // 24 product blocks write a head's q, k, v
#ifndef UNROLL
#define UNROLL 8
#endif
constexpr int kUnroll = UNROLL;  // loads in flight per thread in the tail

struct Cache {
  __half* k;  // [heads][slots][dim]
  __half* v;
  int slots;
};

__device__ __forceinline__ int load_relaxed(const int* p) {
  int v;
  asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Whether this block is the last of `blocks` to arrive at `*counter` (then
// reset to zero for the next launch): every thread of the block gets the
// answer. Thread 0's release-acquire increment follows the block's barrier,
// so the block's writes before the call are ordered before it, and the last
// block's reads after the call see every block's.
__device__ __forceinline__ bool last_to_arrive(unsigned* counter, unsigned blocks) {
  __shared__ unsigned s_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                 : "=r"(before)
                 : "l"(counter)
                 : "memory");
    s_last = before == blocks - 1;
    if (s_last) *counter = 0u;
  }
  __syncthreads();
  return s_last != 0;
}

// By one warp: sp[0, n) becomes exp(sp - max), and lane 0 stores the max
// and the sum of the exponentials (-inf and 0 for an empty slice).
__device__ __forceinline__ void slice_softmax(float* sp, int n, float& m, float& l) {
  const int lane = threadIdx.x & 31;
  float mx = -INFINITY;
  for (int j = lane; j < n; j += 32) mx = fmaxf(mx, sp[j]);
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.f;
  for (int j = lane; j < n; j += 32) {
    const float e = __expf(sp[j] - mx);
    sp[j] = e;
    sum += e;
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) m = mx, l = sum;
}

// A 16-byte load kept in program order with the other asm statements, so a
// batch of them is in flight before the first is used.
__device__ __forceinline__ uint4 load16(const void* p) {
  uint4 r;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

__device__ __forceinline__ float dot8(const uint4& r, const float* x) {
  const __half2* h = reinterpret_cast<const __half2*>(&r);
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 f = __half22float2(h[e]);
    s += f.x * x[2 * e] + f.y * x[2 * e + 1];
  }
  return s;
}

// A warp's dot product of its weight row (768 float16, three 16-byte
// vectors per lane) with x, which the block first copies to `sx`; every
// lane gets the sum.
__device__ __forceinline__ float row_dot(const uint4* row, const float* x, float* sx) {
  const int lane = threadIdx.x & 31;
  for (int e = threadIdx.x; e < kModel; e += kThreads) sx[e] = x[e];
  __syncthreads();
  float s = 0.f;
  for (int i = 0; i < 3; ++i) s += dot8(__ldg(row + lane + 32 * i), sx + (lane + 32 * i) * 8);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

// Rows j0, j0 + stride, ... (kUnroll of them) of a head's cache, this
// thread's 16 bytes `part` of each; past the end, the last row again (the
// loads stay in flight unpredicated; the caller masks them).
__device__ __forceinline__ void load_rows(const __half* rows, int j0, int stride, int n, int part,
                                          uint4 (&r)[kUnroll]) {
#pragma unroll
  for (int i = 0; i < kUnroll; ++i) {
    const int j = min(j0 + stride * i, n - 1);
    r[i] = load16(reinterpret_cast<const uint4*>(rows + (size_t)j * kDim) + part);
  }
}

// Attention of head h's query over keys [0, n) of its cache, by one block of
// kThreads: thread t takes the 8 dims (t % 8) * 8.. of keys t / 8 + 32 i,
// kUnroll keys at a time, for the scores and again for P V.
__device__ void attend(int h, const float* q, const Cache& c, int n, float* out) {
  __shared__ float sq[kDim], sp[kMaxKeys], red[kThreads / 8][kDim];
  __shared__ float s_max, s_sum;
  const int tid = threadIdx.x, g = tid >> 3, part = tid & 7;
  const __half* kh = c.k + (size_t)h * c.slots * kDim;
  const __half* vh = c.v + (size_t)h * c.slots * kDim;
  if (tid < kDim) sq[tid] = __ldcg(q + h * kDim + tid);
  __syncthreads();
  float qr[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) qr[e] = sq[part * 8 + e];
  constexpr int kStride = kThreads / 8;  // 32 keys per row of the block
  for (int j0 = 0; j0 < n; j0 += kStride * kUnroll) {
    uint4 r[kUnroll];
    load_rows(kh, j0 + g, kStride, n, part, r);
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) {
      float s = dot8(r[i], qr);
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      s += __shfl_xor_sync(0xffffffffu, s, 4);
      const int j = j0 + g + kStride * i;
      if (part == 0 && j < n) sp[j] = s;
    }
  }
  __syncthreads();
  if (tid < 32) {
    float mx = -INFINITY;
    for (int j = tid; j < n; j += 32) mx = fmaxf(mx, sp[j]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (tid == 0) s_max = mx;
  }
  __syncthreads();
  float sum = 0.f;
  for (int j = tid; j < n; j += kThreads) {
    const float e = __expf(sp[j] - s_max);
    sp[j] = e;
    sum += e;
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if ((tid & 31) == 0) red[0][tid >> 5] = sum;
  __syncthreads();
  if (tid == 0) {
    float t = 0.f;
    for (int w = 0; w < kWarps; ++w) t += red[0][w];
    s_sum = t;
  }
  __syncthreads();
  float acc[8] = {};
  for (int j0 = 0; j0 < n; j0 += kStride * kUnroll) {
    uint4 r[kUnroll];
    load_rows(vh, j0 + g, kStride, n, part, r);
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) {
      const int j = j0 + g + kStride * i;
      const float p = j < n ? sp[j] : 0.f;
      const __half2* hv = reinterpret_cast<const __half2*>(&r[i]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = __half22float2(hv[e]);
        acc[2 * e] += p * f.x;
        acc[2 * e + 1] += p * f.y;
      }
    }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) red[g][part * 8 + e] = acc[e];
  __syncthreads();
  if (tid < kDim) {
    float t = 0.f;
    for (int r = 0; r < kStride; ++r) t += red[r][tid];
    out[h * kDim + tid] = t / s_sum;
  }
}

// out = W x for W [2304][768]: a warp per output; q (scaled by 1/8) to `q`,
// the new k and v to the cache at the position. kTail: the head's last block
// then attends (`count` zero between launches).
// At least one block per SM: without it ptxas holds the tail to about 40
// registers and issues its loads a few at a time.
template <bool kTail>
__global__ void __launch_bounds__(kThreads, 1)
    qkv(const __half* __restrict__ w, const float* x, const int* pos, float* q, Cache c,
        unsigned* count, float* out) {
  const int tid = threadIdx.x, lane = tid & 31, n = blockIdx.x * kWarps + (tid >> 5);
  const uint4* row = reinterpret_cast<const uint4*>(w + (size_t)n * kModel);
  for (int i = 0; i < 3; ++i) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + lane + 32 * i));
  const int section = blockIdx.x / (kModel / kWarps);  // 0 q, 1 k, 2 v
  const int head = (blockIdx.x % (kModel / kWarps)) / (kDim / kWarps);
  if (kTail) {
    // This block's share of the head's cache rows (128 bytes each), at the
    // position as read before the wait (a hint only).
    const int share = section * (kDim / kWarps) + blockIdx.x % (kDim / kWarps);
    const int seen = min(load_relaxed(pos) + 1, c.slots);
    for (int j = share + kBlocksPerHead * (tid >> 1); j < seen;
         j += kBlocksPerHead * kThreads / 2) {
      const __half* base = (tid & 1 ? c.v : c.k) + ((size_t)head * c.slots + j) * kDim;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(base));
    }
  }
  wait_prior();
  let_next();
  __shared__ float sx[kModel];
  const float s = row_dot(row, x, sx);
  const int p = *pos;
  if (lane == 0) {
    const int col = n % kModel, d = col % kDim;
    if (section == 0) {
      q[col] = s * 0.125f;
    } else {
      __half* dst = (section == 1 ? c.k : c.v) + ((size_t)head * c.slots + p) * kDim + d;
      *dst = __float2half(s);
    }
    if (kTail) __threadfence();
  }
  if (!kTail) return;
  if (last_to_arrive(count + head, kBlocksPerHead)) attend(head, q, c, p + 1, out);
}

struct Partials {
  float* o;         // [heads][splits][dim]
  float* m;         // [heads][splits]
  float* l;         // [heads][splits]
  unsigned* count;  // [heads], zero between launches
};

// Block (split, head), 128 threads: scores of its keys (a warp per key), the
// slice's softmax, P V, the partials, an atomic, and in the head's last block
// the merge (perf/probes/decode_combine.cu's kLastBlock form).
__global__ void __launch_bounds__(128)
    split_attention(const float* q, Cache c, const int* pos, Partials p, float* x) {
  const int split = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const __half* kh = c.k + (size_t)h * c.slots * kDim;
  const __half* vh = c.v + (size_t)h * c.slots * kDim;
  {
    const int seen = min(load_relaxed(pos) + 1, c.slots), per = (seen + kSplits - 1) / kSplits;
    for (int j = split * per + tid; j < min(seen, split * per + per); j += 128) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(kh + (size_t)j * kDim));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(vh + (size_t)j * kDim));
    }
  }
  wait_prior();
  let_next();
  const int seen = *pos + 1, per = (seen + kSplits - 1) / kSplits;
  const int k0 = min(seen, split * per), k1 = min(seen, k0 + per);
  __shared__ float sq[kDim], sp[kMaxKeys / kSplits + 1];
  __shared__ float s_m, s_l;
  if (tid < kDim) sq[tid] = q[h * kDim + tid];
  __syncthreads();
  for (int j = k0 + warp; j < k1; j += 4) {
    const __half2 kv = reinterpret_cast<const __half2*>(kh + (size_t)j * kDim)[lane];
    float s = __low2float(kv) * sq[2 * lane] + __high2float(kv) * sq[2 * lane + 1];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) sp[j - k0] = s;
  }
  __syncthreads();
  if (warp == 0) slice_softmax(sp, k1 - k0, s_m, s_l);
  __syncthreads();
  float acc = 0.f;
  if (tid < kDim) {
    for (int j = k0; j < k1; ++j) acc += sp[j - k0] * __half2float(vh[(size_t)j * kDim + tid]);
  }
  if (tid < kDim) p.o[((size_t)h * kSplits + split) * kDim + tid] = acc;
  if (tid == 0) p.m[h * kSplits + split] = s_m, p.l[h * kSplits + split] = s_l;
  if (!last_to_arrive(p.count + h, kSplits) || tid >= kDim) return;
  float mx = -INFINITY;
  for (int s = 0; s < kSplits; ++s) {
    if (__ldcg(p.l + h * kSplits + s) > 0.f) mx = fmaxf(mx, __ldcg(p.m + h * kSplits + s));
  }
  float den = 0.f, num = 0.f;
  for (int s = 0; s < kSplits; ++s) {
    const float l = __ldcg(p.l + h * kSplits + s);
    if (l == 0.f) continue;  // an empty split (fewer keys than splits)
    const float wgt = __expf(__ldcg(p.m + h * kSplits + s) - mx);
    den += wgt * l;
    num += wgt * __ldcg(p.o + ((size_t)h * kSplits + s) * kDim + tid);
  }
  x[h * kDim + tid] = num / den;
}

// 768 -> 768, a warp per output: the next layer's x.
__global__ void __launch_bounds__(kThreads)
    projection(const __half* __restrict__ w, const float* x, float* y) {
  const int tid = threadIdx.x, lane = tid & 31, n = blockIdx.x * kWarps + (tid >> 5);
  const uint4* row = reinterpret_cast<const uint4*>(w + (size_t)n * kModel);
  for (int i = 0; i < 3; ++i) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + lane + 32 * i));
  wait_prior();
  let_next();
  __shared__ float sx[kModel];
  const float s = row_dot(row, x, sx);
  if (lane == 0) y[n] = s;
}

// --- The cluster forms -------------------------------------------------------------------

namespace cg = cooperative_groups;
#ifndef CLUSTER
#define CLUSTER 8
#endif
constexpr int kCluster = CLUSTER;
constexpr int kOwn = 3 * kDim / kCluster;     // q, k, v outputs per block
constexpr int kOwnPerWarp = kOwn / kWarps;    // rows per warp
constexpr int kProjCols = kModel / kCluster;  // projection columns per block
constexpr int kProjPerWarp = kProjCols / kWarps;
static_assert(kOwn % kWarps == 0 && kProjCols % kWarps == 0, "cluster size");

struct ProjScratch {
  float* part;      // [heads][kModel]
  unsigned* count;  // [kCluster], zero between launches
};

__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

template <bool kProj>
__global__ void __launch_bounds__(kThreads, 1)
    cluster_layer(const __half* __restrict__ w, const float* x, const int* pos, Cache c,
                  const __half* __restrict__ wp, float* att, ProjScratch ps, float* y) {
  cg::cluster_group cluster = cg::this_cluster();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int r = static_cast<int>(cluster.block_rank()), h = blockIdx.x / kCluster;
  __shared__ float sx[kModel], own[kOwn], qkv[3 * kDim], sp[kMaxKeys / kCluster + 2];
  __shared__ float red[kWarps][kDim], so[kDim], head_out[kDim];
  __shared__ float s_m, s_l;
  const __half* kh = c.k + (size_t)h * c.slots * kDim;
  const __half* vh = c.v + (size_t)h * c.slots * kDim;
  // Before the wait: this block's weight rows and its share of the cache
  // (at the position as read now, a hint) on their way into L2.
  int rows[kOwnPerWarp];
#pragma unroll
  for (int i = 0; i < kOwnPerWarp; ++i) {
    const int o = r * kOwn + warp * kOwnPerWarp + i, section = o / kDim;
    rows[i] = section * kModel + h * kDim + o % kDim;
    const uint4* row = reinterpret_cast<const uint4*>(w + (size_t)rows[i] * kModel);
    for (int j = 0; j < 3; ++j) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + lane + 32 * j));
  }
  {
    const int old = min(load_relaxed(pos), c.slots), per = (old + kCluster - 1) / kCluster;
    for (int j = r * per + (tid >> 1); j < min(old, r * per + per); j += kThreads / 2) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"((tid & 1 ? vh : kh) + (size_t)j * kDim));
    }
    if (kProj && tid < kProjCols) {
      const __half* row = wp + (size_t)(r * kProjCols + tid) * kModel + h * kDim;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(row));
    }
  }
  wait_prior();
  let_next();
  for (int e = tid; e < kModel; e += kThreads) sx[e] = x[e];
  __syncthreads();
  const int p = *pos;
#pragma unroll
  for (int i = 0; i < kOwnPerWarp; ++i) {
    const uint4* row = reinterpret_cast<const uint4*>(w + (size_t)rows[i] * kModel);
    float s = 0.f;
    for (int j = 0; j < 3; ++j) s += dot8(__ldg(row + lane + 32 * j), sx + (lane + 32 * j) * 8);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const int o = r * kOwn + warp * kOwnPerWarp + i, section = o / kDim, d = o % kDim;
    if (lane == 0) {
      if (section == 0) {
        own[warp * kOwnPerWarp + i] = s * 0.125f;
      } else {
        const __half hs = __float2half(s);  // attended as the cache holds it
        own[warp * kOwnPerWarp + i] = __half2float(hs);
        (section == 1 ? c.k : c.v)[((size_t)h * c.slots + p) * kDim + d] = hs;
      }
    }
  }
  cluster.sync();
  for (int t = tid; t < 3 * kDim; t += kThreads) {
    qkv[t] = *cluster.map_shared_rank(&own[t % kOwn], t / kOwn);
  }
  __syncthreads();
  // Keys [0, p) from the cache, split over the cluster; the new key p (in
  // qkv) is the last block's.
  const int per = (p + kCluster - 1) / kCluster;
  const int k0 = min(p, r * per), k1 = min(p, k0 + per);
  const int count = k1 - k0 + (r == kCluster - 1 ? 1 : 0);
  for (int jj = warp; jj < count; jj += kWarps) {
    const int j = k0 + jj;
    float2 kv;
    if (j < k1) {
      kv = __half22float2(reinterpret_cast<const __half2*>(kh + (size_t)j * kDim)[lane]);
    } else {
      kv = make_float2(qkv[kDim + 2 * lane], qkv[kDim + 2 * lane + 1]);
    }
    float s = kv.x * qkv[2 * lane] + kv.y * qkv[2 * lane + 1];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) sp[jj] = s;
  }
  __syncthreads();
  if (warp == 0) slice_softmax(sp, count, s_m, s_l);
  __syncthreads();
  {
    float2 acc = make_float2(0.f, 0.f);
    for (int jj = warp; jj < count; jj += kWarps) {
      const int j = k0 + jj;
      float2 vv;
      if (j < k1) {
        vv = __half22float2(reinterpret_cast<const __half2*>(vh + (size_t)j * kDim)[lane]);
      } else {
        vv = make_float2(qkv[2 * kDim + 2 * lane], qkv[2 * kDim + 2 * lane + 1]);
      }
      acc.x += sp[jj] * vv.x;
      acc.y += sp[jj] * vv.y;
    }
    red[warp][2 * lane] = acc.x;
    red[warp][2 * lane + 1] = acc.y;
  }
  __syncthreads();
  if (tid < kDim) {
    float t = 0.f;
    for (int g = 0; g < kWarps; ++g) t += red[g][tid];
    so[tid] = t;
  }
  cluster.sync();
  // The merge: every block (each needs the head's output for its columns of
  // the projection), or only the first.
  if ((kProj || r == 0) && tid < kDim) {
    float mx = -INFINITY;
    for (int b = 0; b < kCluster; ++b) {
      if (*cluster.map_shared_rank(&s_l, b) > 0.f)
        mx = fmaxf(mx, *cluster.map_shared_rank(&s_m, b));
    }
    float den = 0.f, num = 0.f;
    for (int b = 0; b < kCluster; ++b) {
      const float l = *cluster.map_shared_rank(&s_l, b);
      if (l == 0.f) continue;
      const float wgt = __expf(*cluster.map_shared_rank(&s_m, b) - mx);
      den += wgt * l;
      num += wgt * *cluster.map_shared_rank(&so[tid], b);
    }
    head_out[tid] = num / den;
    if (!kProj) att[h * kDim + tid] = num / den;
  }
  cluster_arrive();  // this block's shared memory read by the others until the wait below
  if (kProj) {
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kProjPerWarp; ++i) {
      const int col = r * kProjCols + warp * kProjPerWarp + i;
      const float2 wv = __half22float2(
          reinterpret_cast<const __half2*>(wp + (size_t)col * kModel + h * kDim)[lane]);
      float s = wv.x * head_out[2 * lane] + wv.y * head_out[2 * lane + 1];
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0) ps.part[(size_t)h * kModel + col] = s;
    }
    if (last_to_arrive(ps.count + r, kHeads) && tid < kProjCols) {
      const int col = r * kProjCols + tid;
      float t = 0.f;
      for (int g = 0; g < kHeads; ++g) t += __ldcg(ps.part + (size_t)g * kModel + col);
      y[col] = t;
    }
  }
  cluster_wait();
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

int main() {
  const int slots = env_int("SLOTS", 1024), position = env_int("POS", 512);
  if (slots > kMaxKeys || position < 0 || position >= slots) {
    std::fprintf(stderr, "need 0 <= POS < SLOTS <= %d\n", kMaxKeys);
    return 1;
  }
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t cache = (size_t)kHeads * slots * kDim;
  const size_t wq = (size_t)kQkv * kModel, wp = (size_t)kModel * kModel;
  __half *k, *v, *w_qkv, *w_proj;
  CHECK(cudaMalloc(&k, kLayers * cache * sizeof(__half)));
  CHECK(cudaMalloc(&v, kLayers * cache * sizeof(__half)));
  CHECK(cudaMalloc(&w_qkv, kLayers * wq * sizeof(__half)));
  CHECK(cudaMalloc(&w_proj, kLayers * wp * sizeof(__half)));
  // Weights of scale 1/8 keep x's spread from layer to layer (768 inputs).
  fill<<<264, 256, 0, s>>>(k, kLayers * cache, 1, 2.f);
  fill<<<264, 256, 0, s>>>(v, kLayers * cache, 2, 2.f);
  fill<<<264, 256, 0, s>>>(w_qkv, kLayers * wq, 3, 0.125f);
  fill<<<264, 256, 0, s>>>(w_proj, kLayers * wp, 4, 0.125f);
  float *xs, *q, *att;
  CHECK(cudaMalloc(&xs, (kLayers + 1) * kModel * sizeof(float)));
  CHECK(cudaMalloc(&q, kModel * sizeof(float)));
  CHECK(cudaMalloc(&att, kModel * sizeof(float)));
  std::vector<float> x0(kModel);
  for (int i = 0; i < kModel; ++i) x0[i] = std::sin(0.37f * i);
  CHECK(cudaMemcpy(xs, x0.data(), kModel * sizeof(float), cudaMemcpyHostToDevice));
  int* pos;
  CHECK(cudaMalloc(&pos, sizeof(int)));
  CHECK(cudaMemcpy(pos, &position, sizeof(int), cudaMemcpyHostToDevice));
  unsigned* heads;
  CHECK(cudaMalloc(&heads, kHeads * sizeof(unsigned)));
  CHECK(cudaMemset(heads, 0, kHeads * sizeof(unsigned)));
  Partials p{};
  CHECK(cudaMalloc(&p.o, (size_t)kHeads * kSplits * kDim * sizeof(float)));
  CHECK(cudaMalloc(&p.m, kHeads * kSplits * sizeof(float)));
  CHECK(cudaMalloc(&p.l, kHeads * kSplits * sizeof(float)));
  CHECK(cudaMalloc(&p.count, kHeads * sizeof(unsigned)));
  CHECK(cudaMemset(p.count, 0, kHeads * sizeof(unsigned)));
  ProjScratch ps{};
  CHECK(cudaMalloc(&ps.part, (size_t)kHeads * kModel * sizeof(float)));
  CHECK(cudaMalloc(&ps.count, kCluster * sizeof(unsigned)));
  CHECK(cudaMemset(ps.count, 0, kCluster * sizeof(unsigned)));
  cudaLaunchAttribute attrs[2]{};
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = 1;
  attrs[1].id = cudaLaunchAttributeClusterDimension;
  attrs[1].val.clusterDim.x = kCluster;
  attrs[1].val.clusterDim.y = 1;
  attrs[1].val.clusterDim.z = 1;
  auto launch_in = [&](int nattrs, auto kernel, dim3 grid, dim3 block, auto... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = s;
    cfg.attrs = attrs;
    cfg.numAttrs = nattrs;
    CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
  };
  auto launch = [&](auto kernel, dim3 grid, dim3 block, auto... args) {
    launch_in(1, kernel, grid, block, args...);
  };
  enum Form { kNoAttention, kSplit, kTail, kCluster1, kClusterProj };
  const char* names[] = {"none: QKV -> projection", "split: QKV -> attention -> projection",
                         "tail: QKV + attention -> projection",
                         "cluster: QKV + attention -> projection",
                         "cluster+proj: QKV + attention + projection"};
  std::vector<std::vector<float>> outputs;
  const int reps = env_int("REPS", 200);
  for (int round = 0; round < 2; ++round) {
    for (int f = kNoAttention; f <= kClusterProj; ++f) {
      cudaGraph_t g;
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int l = 0; l < kLayers; ++l) {
        const float* x = xs + (size_t)l * kModel;
        float* y = xs + (size_t)(l + 1) * kModel;
        const Cache c{k + l * cache, v + l * cache, slots};
        const __half* wl = w_qkv + l * wq;
        const dim3 grid(kQkv / kWarps), block(kThreads);
        if (f == kCluster1 || f == kClusterProj) {
          const dim3 cgrid(kHeads * kCluster);
          if (f == kCluster1) {
            launch_in(2, cluster_layer<false>, cgrid, block, wl, x, (const int*)pos, c,
                      (const __half*)(w_proj + l * wp), att, ps, y);
            launch(projection, dim3(kModel / kWarps), block, w_proj + l * wp, (const float*)att, y);
          } else {
            launch_in(2, cluster_layer<true>, cgrid, block, wl, x, (const int*)pos, c,
                      (const __half*)(w_proj + l * wp), att, ps, y);
          }
          continue;
        }
        if (f == kTail) {
          launch(qkv<true>, grid, block, wl, x, (const int*)pos, q, c, heads, att);
        } else {
          launch(qkv<false>, grid, block, wl, x, (const int*)pos, q, c, heads, att);
        }
        if (f == kSplit) {
          launch(split_attention, dim3(kSplits, kHeads), dim3(128), (const float*)q, c,
                 (const int*)pos, p, att);
        }
        // Without attention the projection reads q (the same bytes, read
        // after the product as the attention's output would be).
        launch(projection, dim3(kModel / kWarps), block, w_proj + l * wp,
               (const float*)(f == kNoAttention ? q : att), y);
      }
      CHECK(cudaStreamEndCapture(s, &g));
      const float us = replay_us(g, s, reps);
      std::printf("%-40s %8.2f us per graph, %6.3f us per layer\n", names[f], us, us / kLayers);
      if (round == 0 && f != kNoAttention) {
        outputs.emplace_back(kModel);
        CHECK(cudaMemcpy(outputs.back().data(), xs + (size_t)kLayers * kModel,
                         kModel * sizeof(float), cudaMemcpyDeviceToHost));
      }
    }
  }
  for (size_t f = 1; f < outputs.size(); ++f) {
    double diff = 0, scale = 0;
    for (int i = 0; i < kModel; ++i) {
      diff = std::fmax(diff, std::fabs(outputs[f][i] - outputs[0][i]));
      scale = std::fmax(scale, std::fabs(outputs[0][i]));
    }
    std::printf("slots %d, position %d: largest difference split vs %s %g (largest output %g)\n",
                slots, position, names[f + 1], diff, scale);
  }
  return 0;
}
