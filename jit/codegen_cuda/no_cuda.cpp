// Stubs for builds without the CUDA toolkit.

#include "jit/codegen_cuda/launch_cuda.h"
#include "jit/codegen_cuda/nvrtc.h"
#include "jit/codegen_cuda/pointwise_source.h"
#include "jit/codegen_cuda/reduce_plan.h"
#include "jit/codegen_cuda/reduce_source.h"
#include "kiln/error.h"

namespace kiln::jit::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  KILN_FAIL("[", what, "] kiln was built without CUDA: expected a cpu device, got a cuda one");
}
}  // namespace

std::string pointwise_name(const PointwiseSpec&) {
  no_cuda("cuda codegen");
}
std::string pointwise_source(const PointwiseSpec&) {
  no_cuda("cuda codegen");
}
CompiledKernel nvrtc_compile(const std::string&, const std::string&, int) {
  no_cuda("nvrtc");
}
int nvrtc_version() {
  no_cuda("nvrtc");
}
int vector_width(const PointwiseKernel&) {
  no_cuda("cuda codegen");
}
bool run_pointwise_cuda(const FusedGroup&) {
  return false;
}
bool run_reduction_cuda(const ReductionGroup&) {
  return false;
}
int64_t cuda_reductions_run() {
  return 0;
}
int reduce_operand_count(const ReductionKernel&) {
  no_cuda("cuda codegen");
}
int reduce_block_size(const ReduceSpec&) {
  no_cuda("cuda codegen");
}
bool plan_reduction(const ReductionGroup&, int, ReducePlan*, std::string*) {
  no_cuda("cuda codegen");
}
std::vector<int64_t> reduce_args(const ReducePlan&) {
  no_cuda("cuda codegen");
}
std::string reduce_name(const ReduceSpec&) {
  no_cuda("cuda codegen");
}
std::string reduce_source(const ReduceSpec&) {
  no_cuda("cuda codegen");
}
CudaKernelStats cuda_kernel_stats() {
  return {};
}

}  // namespace kiln::jit::cuda
