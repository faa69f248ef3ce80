// A GPT-2 block on CUDA in lazy mode: the plan the epilogue pass and fusion
// give it (products absorbing bias, GELU and residual adds), its result
// against the eager CPU block on the same float16 weights, and the kernels
// one layer launches (issue goal: at most 7). Skips without a GPU; the same
// plan is checked without one in tests/jit/passes/matmul_epilogue_test.cpp.

#include <gtest/gtest.h>

#include <string>

#include "jit/codegen_cuda/launch_cuda.h"
#include "jit/record/trace_buffer.h"
#include "kiln/kiln.h"
#include "runtime/cuda/blas_lt.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/testing.h"

namespace kiln {
namespace {

using testing::random_tensor;
using testing::to_cuda;

// Generated kernels launched and cuBLASLt calls made so far.
int64_t kernels() {
  const cuda::LtCacheStats lt = cuda::lt_cache_stats();
  return jit::cuda::cuda_kernel_stats().launches + lt.hits + lt.misses;
}

struct Models {
  nn::GPT2 cpu, gpu;
};

// The same float16 weights on the CPU and on CUDA (random() rounds the same
// float32 draws).
Models models(int64_t layers) {
  nn::GPT2Config c;
  c.n_layer = layers;
  c.vocab = 64;
  c.n_positions = 64;
  return {nn::GPT2::random(c, kFloat16, Device::cpu(), 3),
          nn::GPT2::random(c, kFloat16, Device::cuda(), 3)};
}

class Gpt2LayerCuda : public ::testing::Test {
 protected:
  void SetUp() override { jit::flush(); }
  void TearDown() override { jit::flush(); }
};

TEST_F(Gpt2LayerCuda, PlanAndResultMatchEagerCpu) {
  KILN_REQUIRE_CUDA();
  Models m = models(1);
  const int64_t heads = m.cpu.config().n_head;
  for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 1}, {1, 17}, {3, 9}}) {
    SCOPED_TRACE("batch " + std::to_string(b) + " tokens " + std::to_string(t));
    Tensor x = random_tensor({b, t, 768}, kFloat16, "contiguous", 7 * b + t, -1, 1);
    Tensor expected;
    {
      EagerGuard eager;
      expected = m.cpu.blocks[0].forward(x, heads);
    }
    Tensor xc = to_cuda(x);
    jit::flush();  // the input's copy runs first: the trace below is the block's alone
    Tensor got = m.gpu.blocks[0].forward(xc, heads);
    // At T > 1 the attention writes merged heads (Note [Merged heads]); at one token the
    // merge is a view.
    const std::string attn =
        t > 1 ? "extern[attention_merged_heads] " : "extern[scaled_dot_product_attention] ";
    // Up to 16 rows the LayerNorms are the products' prologues (Note [Norm prologues]).
    const bool few = b * t <= 16;
    const std::string ln = few ? "" : "reduce[layer_norm -> 1 out] ";
    EXPECT_EQ(jit::TraceBuffer::current().describe_pending(),
              ln + (few ? "extern[linear_act] " : "extern[linear] ") + attn +
                  "extern[linear_act] " + ln + "extern[linear_act] extern[linear_act]");
    EXPECT_TENSOR_CLOSE_TOL(got.cpu(), expected, 2e-2, 2e-2);
  }
}

// Kernels per layer: 2 LayerNorms, 4 products, attention (writing merged
// heads at T > 1, Note [Merged heads]: no copy); at one token of one row the
// LayerNorms are the skinny products' prologues.
TEST_F(Gpt2LayerCuda, KernelsPerLayer) {
  KILN_REQUIRE_CUDA();
  Models m = models(2);
  for (auto [b, t, per_layer] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 1, 5}, {1, 128, 7}, {8, 128, 7}}) {
    SCOPED_TRACE("batch " + std::to_string(b) + " tokens " + std::to_string(t));
    Tensor x = to_cuda(random_tensor({b, t, 768}, kFloat16, "contiguous", 1, -1, 1));
    Tensor y = m.gpu.forward_hidden(x);  // warm: kernels compiled, algorithms chosen
    sync();
    const int64_t before = kernels();
    y = m.gpu.forward_hidden(x);
    sync();
    // Two layers and the final LayerNorm.
    EXPECT_EQ(kernels() - before, 2 * per_layer + 1);
  }
}

// A decode step: the same products with B rows (the skinny kernel, with the
// LayerNorms as prologues of the QKV and FC products), the two KV-cache
// writes and kv_cache_attention. Checked against the eager CPU step, and
// counted: 5, the cache writes inside the attention kernel (Note [Cache
// writes in the decode kernel]). At 8 rows the same 5 on sm_80 and later,
// where every GPT-2 product takes the skinny kernel's tensor-core form
// (Note [Tensor-core skinny default]).
TEST_F(Gpt2LayerCuda, DecodeStep) {
  KILN_REQUIRE_CUDA();
  Models m = models(1);
  const int64_t heads = m.cpu.config().n_head;
  int major = 0, minor = 0;
  cuda::device_capability(0, &major, &minor);
  for (int64_t b : {1, 4, 8}) {
    SCOPED_TRACE("batch " + std::to_string(b));
    Tensor x = random_tensor({b, 1, 768}, kFloat16, "contiguous", 11 + b, -1, 1);
    Tensor kc = random_tensor({b, heads, 32, 64}, kFloat16, "contiguous", 2, -1, 1);
    Tensor vc = random_tensor({b, heads, 32, 64}, kFloat16, "contiguous", 3, -1, 1);
    Tensor pos = full({1}, 20, TensorOptions(kInt64));
    Tensor expected, kc_e = kc.clone(), vc_e = vc.clone();
    {
      EagerGuard eager;
      expected = m.cpu.blocks[0].forward_decode(x, heads, kc_e, vc_e, pos);
    }
    Tensor dx = to_cuda(x), dk = to_cuda(kc), dv = to_cuda(vc), dp = to_cuda(pos);
    Tensor got = m.gpu.blocks[0].forward_decode(dx, heads, dk, dv, dp);
    EXPECT_TENSOR_CLOSE_TOL(got.cpu(), expected, 2e-2, 2e-2);
    EXPECT_TENSOR_CLOSE_TOL(dk.cpu(), kc_e, 1e-2, 1e-2);
    sync();
    const int64_t before = kernels();
    got = m.gpu.blocks[0].forward_decode(dx, heads, dk, dv, dp);
    sync();
    if (b <= 4 || major >= 8) {
      EXPECT_EQ(kernels() - before, 5);
    }
  }
}

}  // namespace
}  // namespace kiln
