// Launch of a reduction group's generated kernel (Note [CUDA reduction ABI]).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "jit/codegen_cuda/kernel_loader.h"
#include "jit/codegen_cuda/launch_cuda.h"
#include "jit/codegen_cuda/reduce_plan.h"
#include "jit/ir/iteration.h"
#include "kiln/logging.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/launch_record.h"

namespace kiln::jit::cuda {
namespace {

std::atomic<int64_t> g_runs{0};

}  // namespace

int64_t cuda_reductions_run() {
  return g_runs.load();
}

bool run_reduction_cuda(const ReductionGroup& g) {
  if (g.epilogue.outputs.empty() || !g.epilogue.outputs[0].device().is_cuda()) return false;
  const Device device = g.epilogue.outputs[0].device();
  const int sms = kiln::cuda::device_properties(device.index()).multiProcessorCount;
  ReducePlan plan;
  std::string why;
  if (!plan_reduction(g, sms, &plan, &why)) {
    KILN_LOG(Fusion, "reduction group runs node by node on CUDA: ", why);
    return false;
  }
  const ReduceSpec& spec = plan.spec;
  KILN_LOG(Fusion, "cuda reduction ", row_op_name(g.op), ": ", plan.rows, " rows of ", plan.n, ", ",
           spec.threads, " lanes per row, ", spec.per_thread, " values per lane on chip, ",
           spec.vec, " per load, ", plan.splits, " blocks per row");
  // Kernel (compiled or found) before anything is written.
  cudaKernel_t fn = load_kernel(
      reduce_name(spec), [&] { return reduce_source(spec); }, device.index());
  for (size_t k = 0; k < plan.tensors.size(); ++k) {
    if (plan.outputs[k]) ensure_memory(plan.tensors[k]);
  }
  if (plan.rows > 0 && !(is_row_normalization(g.op) && plan.n == 0)) {
    kiln::cuda::DeviceGuard guard(device.index());
    cudaStream_t stream = kiln::cuda::raw(kiln::cuda::Stream::current(device));
    // A split row's partials and counters: from the caching allocator, freed
    // (stream-ordered) when `workspace` goes out of scope after the launch.
    Tensor workspace;
    if (spec.split) {
      const size_t bytes = reduce_workspace_bytes(plan);
      workspace = empty_tensor({static_cast<int64_t>((bytes + 7) / 8)}, kFloat64, device);
      char* base = static_cast<char*>(workspace.data_ptr());
      KILN_CUDA_CHECK_DEVICE(cudaMemsetAsync(base + reduce_counter_offset(plan), 0,
                                             bytes - reduce_counter_offset(plan), stream),
                             device.index());
    }
    std::vector<int64_t> args =
        reduce_args(plan, workspace.defined() ? workspace.data_ptr() : nullptr);
    void* params[] = {args.data()};
    const int block = reduce_block_size(spec);
    const int64_t per_block = block / spec.threads;
    const int64_t blocks =
        std::min<int64_t>((plan.rows + per_block - 1) / per_block, int64_t{1} << 30);
    KILN_CUDA_CHECK_DEVICE(
        launch_generated(reinterpret_cast<const void*>(fn),
                         dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(plan.splits)),
                         dim3(block), 0, params, stream, device.index()),
        device.index());
    const size_t arg_bytes = args.size() * sizeof(int64_t);
    kiln::cuda::note_launch(stream, reinterpret_cast<const void*>(fn),
                            dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(plan.splits)),
                            dim3(block), 0, params, &arg_bytes, 1);
    record_launch();
    for (size_t k = 0; k < plan.tensors.size(); ++k) {
      if (plan.outputs[k]) plan.tensors[k].impl()->bump_version();
    }
  }
  g_runs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace kiln::jit::cuda
