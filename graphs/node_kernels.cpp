// Copies and fills as kernels (Note [Kernel-only graphs]).

#include "graphs/node_kernels.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "graphs/graph.h"
#include "jit/codegen_cuda/device_prelude.h"
#include "jit/codegen_cuda/kernel_loader.h"
#include "kiln/error.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/launch_record.h"

namespace kiln::graphs {
namespace {

constexpr unsigned kThreads = 256;
constexpr uint64_t kMaxBlocks = 4096;  // grid-stride loops cover the rest

// The copy and the fill walk rows of `width` bytes (`width` elements for the fill)
// with a grid-stride loop, so a grid sized for one unit stays correct after
// replay picks a narrower one.
const char* kSource = R"(
struct alignas(16) kiln_v16 { unsigned long long a, b; };

extern "C" __global__ void kiln_graph_copy(unsigned long long dst, unsigned long long src,
    unsigned long long width, unsigned long long height, unsigned long long dst_pitch,
    unsigned long long src_pitch, unsigned long long unit) {
  kiln_grid_enter();
  const unsigned long long per_row = width / unit, n = per_row * height;
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += step) {
    const unsigned long long r = i / per_row, c = (i - r * per_row) * unit;
    unsigned char* d = (unsigned char*)(dst + r * dst_pitch + c);
    const unsigned char* s = (const unsigned char*)(src + r * src_pitch + c);
    switch (unit) {
      case 16: *(kiln_v16*)d = *(const kiln_v16*)s; break;
      case 8: *(unsigned long long*)d = *(const unsigned long long*)s; break;
      case 4: *(unsigned*)d = *(const unsigned*)s; break;
      case 2: *(unsigned short*)d = *(const unsigned short*)s; break;
      default: *d = *s;
    }
  }
}

extern "C" __global__ void kiln_graph_fill(unsigned long long dst, unsigned long long value,
    unsigned long long elem, unsigned long long width, unsigned long long height,
    unsigned long long pitch) {
  kiln_grid_enter();
  const unsigned long long n = width * height;
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += step) {
    const unsigned long long r = i / width, c = i - r * width;
    unsigned char* p = (unsigned char*)(dst + r * pitch + c * elem);
    switch (elem) {
      case 4: *(unsigned*)p = (unsigned)value; break;
      case 2: *(unsigned short*)p = (unsigned short)value; break;
      default: *p = (unsigned char)value;
    }
  }
}

// Note [Host values under capture]: the bytes a host to device copy moved,
// held in the node's parameters.
extern "C" __global__ void kiln_graph_put(unsigned long long dst, unsigned long long bytes,
    unsigned long long w0, unsigned long long w1, unsigned long long w2, unsigned long long w3,
    unsigned long long w4, unsigned long long w5, unsigned long long w6, unsigned long long w7) {
  kiln_grid_enter();
  const unsigned long long w[8] = {w0, w1, w2, w3, w4, w5, w6, w7};
  const unsigned char* v = (const unsigned char*)w;
  for (unsigned long long i = threadIdx.x; i < bytes; i += blockDim.x) {
    ((unsigned char*)dst)[i] = v[i];
  }
}

// The same for up to 4080 bytes, its words one struct.
struct kiln_put_words { unsigned long long dst, bytes, value[510]; };
extern "C" __global__ void kiln_graph_put_large(const __grid_constant__ kiln_put_words a) {
  kiln_grid_enter();
  const unsigned char* v = (const unsigned char*)a.value;
  for (unsigned long long i = threadIdx.x; i < a.bytes; i += blockDim.x) {
    ((unsigned char*)a.dst)[i] = v[i];
  }
}
)";

const void* kernel(const char* name, int device) {
  // One source holds every kernel; the loader keys its caches by name.
  return reinterpret_cast<const void*>(jit::cuda::load_kernel(
      name, [] { return node_kernels_source(); }, device));
}

dim3 grid_for(uint64_t n) {
  return dim3(
      static_cast<unsigned>(std::clamp<uint64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks)));
}

uint64_t word(const void* p) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
}

}  // namespace

std::string node_kernels_source() {
  // The prelude brings kiln_grid_enter (Note [Early launch]).
  return std::string(jit::cuda::kDevicePrelude) + kSource;
}

uint64_t copy_unit(const uint64_t* w) {
  uint64_t bits = w[kCopyDst] | w[kCopySrc] | w[kCopyWidth];
  if (w[kCopyHeight] > 1) bits |= w[kCopyDstPitch] | w[kCopySrcPitch];
  for (uint64_t u : {16, 8, 4, 2}) {
    if (bits % u == 0) return u;
  }
  return 1;
}

NodeKernel copy_kernel(int device, void* dst, const void* src, size_t width, size_t height,
                       size_t dst_pitch, size_t src_pitch) {
  NodeKernel k;
  k.func = kernel("kiln_graph_copy", device);
  k.words.assign(kCopyWords, 0);
  k.words[kCopyDst] = word(dst);
  k.words[kCopySrc] = word(src);
  k.words[kCopyWidth] = width;
  k.words[kCopyHeight] = height;
  k.words[kCopyDstPitch] = height > 1 ? dst_pitch : width;
  k.words[kCopySrcPitch] = height > 1 ? src_pitch : width;
  k.words[kCopyUnit] = copy_unit(k.words.data());
  k.grid = grid_for(width / k.words[kCopyUnit] * height);
  k.block = dim3(kThreads);
  return k;
}

static_assert(kiln::cuda::kHostValueBytes == (kPutLargeWords - kPutValue) * 8,
              "kiln_graph_put_large holds kHostValueBytes");

NodeKernel put_kernel(int device, void* dst, const void* src, size_t bytes) {
  KILN_INTERNAL_ASSERT(bytes <= kiln::cuda::kHostValueBytes, "a put node of ", bytes, " bytes");
  const bool large = bytes > (kPutWords - kPutValue) * 8;
  NodeKernel k;
  k.func = kernel(large ? "kiln_graph_put_large" : "kiln_graph_put", device);
  k.words.assign(large ? kPutLargeWords : kPutWords, 0);
  k.words[kPutDst] = word(dst);
  k.words[kPutBytes] = bytes;
  std::memcpy(&k.words[kPutValue], src, bytes);
  k.grid = dim3(1);
  k.block = dim3(large ? kThreads : 64);
  k.one_parameter = large;
  return k;
}

NodeKernel fill_kernel(int device, const cudaMemsetParams& p) {
  KILN_INTERNAL_ASSERT(p.elementSize == 1 || p.elementSize == 2 || p.elementSize == 4,
                       "a memset node of ", p.elementSize, "-byte elements");
  NodeKernel k;
  k.func = kernel("kiln_graph_fill", device);
  const size_t height = std::max<size_t>(p.height, 1);
  k.words = {word(p.dst), p.value, p.elementSize,
             p.width,     height,  height > 1 ? p.pitch : p.width * p.elementSize};
  k.grid = grid_for(static_cast<uint64_t>(p.width) * height);
  k.block = dim3(kThreads);
  return k;
}

bool copy_node_kernel(int device, const cudaMemcpy3DParms& p, NodeKernel* out) {
  if (p.srcArray || p.dstArray || p.srcPos.x || p.srcPos.y || p.srcPos.z || p.dstPos.x ||
      p.dstPos.y || p.dstPos.z || p.extent.depth > 1 || p.extent.width == 0) {
    return false;
  }
  const void* ends[] = {p.srcPtr.ptr, p.dstPtr.ptr};
  for (const void* ptr : ends) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (a.type != cudaMemoryTypeDevice || a.device != device) return false;
  }
  const size_t height = std::max<size_t>(p.extent.height, 1);
  *out = copy_kernel(device, p.dstPtr.ptr, p.srcPtr.ptr, p.extent.width, height, p.dstPtr.pitch,
                     p.srcPtr.pitch);
  return true;
}

}  // namespace kiln::graphs
