// Stubs for builds without the CUDA toolkit (Note [CUDA sources]): one for
// every function the headers below declare, so that tests of the CUDA code
// generator link (and skip) in such a build too.

#include "jit/codegen_cuda/device_timer.h"
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
std::string pointwise_prelude() {
  no_cuda("cuda codegen");
}
std::string device_load(DType, const std::string&, const std::string&) {
  no_cuda("cuda codegen");
}
void emit_pointwise_body(std::ostream&, const PointwiseKernel&, const std::string&,
                         const std::function<std::string(size_t)>&,
                         const std::function<std::string(size_t, const std::string&)>&) {
  no_cuda("cuda codegen");
}
bool run_pointwise_cuda(const FusedGroup&) {
  return false;
}
struct KernelDiscovery::Impl {};
KernelDiscovery::KernelDiscovery() : impl_(std::make_unique<Impl>()) {}
KernelDiscovery::~KernelDiscovery() = default;
void KernelDiscovery::stop() {}
size_t KernelDiscovery::build_kept() {
  return 0;
}
size_t KernelDiscovery::kept() const {
  return 0;
}
bool parallel_build_enabled() {
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
std::vector<int64_t> reduce_args(const ReducePlan&, void*) {
  no_cuda("cuda codegen");
}
size_t reduce_workspace_bytes(const ReducePlan&) {
  no_cuda("cuda codegen");
}
size_t reduce_counter_offset(const ReducePlan&) {
  no_cuda("cuda codegen");
}
int reduce_vector_width(const ReduceSpec&) {
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
double device_us_per_call(Device, int, const std::function<void()>&) {
  no_cuda("device timer");
}

}  // namespace kiln::jit::cuda
