#include "jit/codegen_cuda/launch_cuda.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "jit/codegen_cuda/kernel_loader.h"
#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "jit/codegen_cuda/pointwise_source.h"
#include "jit/ir/iteration.h"
#include "kiln/logging.h"
#include "runtime/core/env.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/launch_record.h"

namespace kiln::jit::cuda {
namespace {

constexpr int kBlock = 256;

// Launches of pointwise kernels; compiles and loads are the loader's (Note [Kernel loader]).
std::atomic<int64_t> g_launches{0};

// The kernel named by `spec` on `device`, compiled or read from disk once.
cudaKernel_t get_kernel(const PointwiseSpec& spec, int device) {
  return load_kernel(
      pointwise_name(spec), [&] { return pointwise_source(spec); }, device);
}

// Blocks per SM the grid is capped at, each thread then looping over several
// vectors; 0, the default, launches one thread per vector (measured on an
// H200, 64Mi fp32 axpy8: capped at 8 blocks/SM 85.4% of copy bandwidth, 32:
// 89.0%, uncapped: 92.7%, perf/RESULTS.md). KILN_CUDA_POINTWISE_BLOCKS_PER_SM
// overrides it for tuning.
int blocks_per_sm() {
  // 0, the default, leaves the count uncapped.
  static const int n =
      static_cast<int>(env_int("KILN_CUDA_POINTWISE_BLOCKS_PER_SM", 0, 1 << 16).value_or(0));
  return n;
}

}  // namespace

CudaKernelStats cuda_kernel_stats() {
  const KernelLoaderStats l = kernel_loader_stats();
  CudaKernelStats s;
  s.launches = g_launches.load(std::memory_order_relaxed);
  s.compiled = l.compiled;
  s.disk_hits = l.disk_hits;
  s.compile_ms = l.compile_ms;
  s.ready_ms = l.ready_ms;
  s.launches += l.launches;
  return s;
}

namespace {

// What a launch of one group worked out (Note [Launch memo]): valid while the
// operands keep the device and geometry they had and the dense ones stay
// aligned for the vector width.
struct PointwiseMemo : LaunchMemo {
  int device = -1;
  OperandGeometry operands;
  std::vector<size_t> align;  // per operand: bytes a pointer must be a multiple of
  std::vector<size_t> slot;   // per operand: its pointer's index in `args`
  std::vector<int64_t> args;  // the KilnArgs words, pointers refreshed per launch
  cudaKernel_t kernel = nullptr;
  unsigned blocks = 0;
  bool flag = false;  // the zero-divisor flag is the last word
  bool empty = false;
};

template <typename F>
void for_each_operand(const FusedGroup& g, F&& f) {
  size_t o = 0;
  for (const Tensor& t : g.outputs) f(o++, t);
  for (const Tensor& t : g.inputs) f(o++, t);
}

// The memo still describes `g`'s operands (all on `device`, checked by the caller).
bool memo_holds(const PointwiseMemo& m, const FusedGroup& g, const Device& device) {
  return m.device == device.index() && m.operands.matches(g);
}

void put_pointer(std::vector<int64_t>& args, size_t slot, const void* p) {
  int64_t bits;
  std::memcpy(&bits, &p, sizeof p);
  args[slot] = bits;
}

void launch(const PointwiseMemo& m, const FusedGroup& g, const Device& device,
            std::vector<int64_t>& args) {
  kiln::cuda::DeviceGuard guard(device.index());
  cudaStream_t stream = kiln::cuda::raw(kiln::cuda::Stream::current(device));
  // Note [CUDA integer division by zero].
  std::optional<DeviceErrorFlag> flag;
  if (m.flag) {
    flag.emplace(device,
                 "ZeroDivisionError: integer division or remainder by zero on " + device.str());
    put_pointer(args, args.size() - 1, flag->ptr());
  }
  void* params[] = {args.data()};
  KILN_CUDA_CHECK_DEVICE(launch_generated(reinterpret_cast<const void*>(m.kernel), dim3(m.blocks),
                                          dim3(kBlock), 0, params, stream, device.index()),
                         device.index());
  const size_t arg_bytes = args.size() * sizeof(int64_t);
  kiln::cuda::note_launch(stream, reinterpret_cast<const void*>(m.kernel), dim3(m.blocks),
                          dim3(kBlock), 0, params, &arg_bytes, 1);
  g_launches.fetch_add(1, std::memory_order_relaxed);
  for (const Tensor& t : g.outputs) t.impl()->bump_version();
  if (flag) flag->check();
}

// Works out the launch of `g` from scratch; nullptr when the group must run
// node by node.
std::unique_ptr<PointwiseMemo> plan_launch(const FusedGroup& g, const Device& device) {
  const PointwiseKernel& k = g.kernel;
  std::vector<Tensor> ops = g.outputs;
  ops.insert(ops.end(), g.inputs.begin(), g.inputs.end());
  const int nout = static_cast<int>(g.outputs.size());
  Iteration it = coalesce(g.shape, ops, nout);
  if (it.sizes.size() > static_cast<size_t>(kMaxDims)) {
    KILN_LOG(Fusion, "CUDA group runs node by node: ", it.sizes.size(), " dims after merging");
    return nullptr;
  }
  auto m = std::make_unique<PointwiseMemo>();
  m->device = device.index();
  const int nd = static_cast<int>(it.sizes.size());
  PointwiseSpec spec{&k};
  int64_t max_offset = it.numel;
  for (size_t o = 0; o < ops.size(); ++o) {
    // Dense: the operand's elements in iteration order; Scalar: one element.
    bool dense = true, scalar = true;
    int64_t expect = 1;
    for (int d = nd - 1; d >= 0; --d) {
      dense = dense && it.strides[o][d] == expect;
      scalar = scalar && it.strides[o][d] == 0;
      expect *= it.sizes[d];
      max_offset = std::max(max_offset, it.strides[o][d] * it.sizes[d]);
    }
    spec.layouts.push_back(scalar && o >= static_cast<size_t>(nout) ? Layout::Scalar
                           : dense                                  ? Layout::Dense
                                                                    : Layout::Strided);
  }
  m->operands.record(g);
  spec.ndim = nd;
  // Room for one grid stride past the last offset (Note [CUDA pointwise ABI]):
  // an uncapped grid's stride is about the element count itself.
  spec.index32 = max_offset < (int64_t{1} << 30) - (int64_t{1} << 20);
  // Vector accesses where every operand's vectors stay aligned (Note [CUDA
  // pointwise kernel shape]): Dense operands with aligned pointers, Strided
  // ones dense along the innermost dim with their other strides multiples of
  // the width, that dim's size a multiple of it.
  const int width = vector_width(k);
  bool vectorize = width > 1;
  for (size_t o = 0; o < ops.size() && vectorize; ++o) {
    if (spec.layouts[o] != Layout::Strided) continue;
    vectorize = it.sizes[nd - 1] % width == 0 && it.strides[o][nd - 1] == 1;
    for (int d = 0; d + 1 < nd && vectorize; ++d) vectorize = it.strides[o][d] % width == 0;
  }
  m->align.assign(ops.size(), 1);
  for (size_t o = 0; o < ops.size() && vectorize; ++o) {
    const auto address = reinterpret_cast<uintptr_t>(ops[o].data_ptr());
    const size_t bytes = static_cast<size_t>(width) * itemsize(ops[o].dtype());
    if (spec.layouts[o] != Layout::Scalar && address % bytes != 0) vectorize = false;
    if (spec.layouts[o] != Layout::Scalar) m->align[o] = bytes;
  }
  if (!vectorize) m->align.assign(ops.size(), 1);
  spec.vec = vectorize ? width : 1;
  m->empty = it.numel == 0;
  if (m->empty) return m;
  m->kernel = get_kernel(spec, device.index());

  // The argument struct, laid out as the generated KilnArgs (all 8-byte fields).
  m->args.push_back(it.numel);
  for (int d = 0; d < kMaxDims; ++d) m->args.push_back(d < nd ? it.sizes[d] : 1);
  for (size_t o = 0; o < ops.size(); ++o) {
    m->slot.push_back(m->args.size());
    m->args.push_back(0);
    if (spec.layouts[o] == Layout::Strided) {
      for (int d = 0; d < kMaxDims; ++d) m->args.push_back(d < nd ? it.strides[o][d] : 0);
    }
  }
  // Note [Numbers as kernel arguments]: this group's values, in argument order.
  for (const Instr& in : k.body) {
    if (in.op == Prim::Param) m->args.push_back(param_word(in));
  }
  m->flag = divides_integers(k);
  if (m->flag) m->args.push_back(0);
  const cudaDeviceProp& prop = kiln::cuda::device_properties(device.index());
  const int64_t work = std::max<int64_t>(1, it.numel / spec.vec);
  int64_t blocks = std::min<int64_t>((work + kBlock - 1) / kBlock, int64_t{1} << 30);
  if (blocks_per_sm() > 0) {
    blocks =
        std::min<int64_t>(blocks, static_cast<int64_t>(prop.multiProcessorCount) * blocks_per_sm());
  }
  m->blocks = static_cast<unsigned>(blocks);
  return m;
}

}  // namespace

bool run_pointwise_cuda(const FusedGroup& g) {
  const Device device = g.outputs.at(0).device();
  bool same_device = true;
  for_each_operand(
      g, [&](size_t, const Tensor& t) { same_device = same_device && t.device() == device; });
  if (!same_device) return false;
  for (const Tensor& t : g.outputs) ensure_memory(t);
  // Note [Kernels compiled side by side]: while kernels are kept, the one
  // planned may be a placeholder, which the group's memo must not keep.
  const bool keeping = keeping_kernels();
  std::unique_ptr<PointwiseMemo> once;
  auto* m = keeping ? nullptr : dynamic_cast<PointwiseMemo*>(g.launch.memo.get());
  if (!m || !memo_holds(*m, g, device)) {
    std::unique_ptr<PointwiseMemo> fresh = plan_launch(g, device);
    if (!fresh) return false;
    m = fresh.get();
    if (keeping) {
      once = std::move(fresh);
    } else {
      g.launch.memo = std::move(fresh);
    }
  }
  if (m->empty) return true;
  // Fresh pointers; a dense operand that lost its alignment works the launch out again.
  std::vector<int64_t>& args = m->args;
  bool aligned = true;
  for_each_operand(g, [&](size_t o, const Tensor& t) {
    const void* p = t.data_ptr();
    aligned = aligned && reinterpret_cast<uintptr_t>(p) % m->align[o] == 0;
    put_pointer(args, m->slot[o], p);
  });
  if (!aligned) {
    g.launch.memo = plan_launch(g, device);
    m = static_cast<PointwiseMemo*>(g.launch.memo.get());
    for_each_operand(
        g, [&](size_t o, const Tensor& t) { put_pointer(m->args, m->slot[o], t.data_ptr()); });
  }
  launch(*m, g, device, m->args);
  return true;
}

}  // namespace kiln::jit::cuda
