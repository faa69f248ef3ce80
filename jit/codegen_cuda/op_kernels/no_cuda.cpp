// Stubs for builds without the CUDA toolkit: no op kernel sources to offer,
// and the skinny-matmul generator's host side throws (its tests skip).

#include "jit/codegen_cuda/op_kernels/attention.h"
#include "jit/codegen_cuda/op_kernels/gemv.h"
#include "jit/codegen_cuda/op_kernels/op_sources.h"
#include "kiln/error.h"

namespace kiln::jit::cuda {

namespace {
[[noreturn]] void no_cuda() {
  KILN_FAIL("[cuda codegen] kiln was built without CUDA: expected a cpu device, got a cuda one");
}
}  // namespace

void set_prefill_form(PrefillForm) {}  // no prefill kernel to choose
NamedSources op_source_samples() {
  no_cuda();
}
GemvSpec gemv_spec(DType, int64_t, int64_t, int, bool, bool, int, bool, bool) {
  no_cuda();
}
int gemv_vector(DType) {
  no_cuda();
}
void gemv_widen(GemvSpec&) {
  no_cuda();
}
void gemv_deepen(GemvSpec&, int64_t, int) {
  no_cuda();
}
void gemv_take_mma(GemvSpec&) {
  no_cuda();
}
void gemv_keep_x(GemvSpec&, int64_t, int64_t, int) {
  no_cuda();
}
void gemv_norm_smem(GemvSpec&, int64_t) {
  no_cuda();
}
void gemv_fold_norm(GemvSpec&, int64_t, int64_t, int) {
  no_cuda();
}
void gemv_pipe(GemvSpec&, int64_t, int) {
  no_cuda();
}
bool gemv_stream(GemvSpec&, int64_t, int64_t) {
  no_cuda();
}
bool gemv_set_streaming(bool) {
  return false;  // no product to stream
}
size_t gemv_shared_bytes(const GemvSpec&, int64_t) {
  no_cuda();
}
bool gemv_preferred(DType, int64_t, int64_t, int64_t, int) {
  no_cuda();
}
int gemv_advice(DType, int64_t, int64_t, int64_t, bool, int, int) {
  no_cuda();
}
bool gemv_uses_mma(DType, int64_t, int, int64_t) {
  no_cuda();
}
int64_t gemv_outputs_per_block(const GemvSpec&) {
  no_cuda();
}
std::string gemv_name(const GemvSpec&) {
  no_cuda();
}
std::string gemv_source(const GemvSpec&) {
  no_cuda();
}
NamedSources gemv_source_samples() {
  no_cuda();
}

}  // namespace kiln::jit::cuda
