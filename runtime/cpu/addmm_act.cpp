// addmm_act(bias, mat1, mat2, act) = act(bias + mat1 @ mat2) on the CPU and
// for Meta: addmm, then the activation in place, through the ordinary ops, so
// its checks and numerics are exactly those of the unfused form. The CUDA
// kernel fuses the activation into cuBLASLt's epilogue (Note [Matmul epilogues]).

#include "kiln/dispatch.h"
#include "kiln/ops.h"

namespace kiln::cpu {
namespace {

Tensor addmm_act(const Tensor& bias, const Tensor& mat1, const Tensor& mat2, std::string_view act) {
  KILN_CHECK(act == "none" || act == "relu" || act == "gelu_tanh",
             "[addmm_act] expected act to be one of 'none', 'relu', 'gelu_tanh', got '", act, "'");
  Tensor r = kiln::addmm(bias, mat1, mat2);
  if (act == "relu") kiln::relu_(r);
  if (act == "gelu_tanh") kiln::gelu_(r, "tanh");
  return r;
}

}  // namespace

KILN_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("addmm_act", &addmm_act);
}
KILN_LIBRARY_IMPL(kiln, Meta, m) {
  m.impl("addmm_act", &addmm_act);
}

}  // namespace kiln::cpu
