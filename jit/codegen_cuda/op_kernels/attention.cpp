// scaled_dot_product_attention and kv_cache_attention on CUDA, inference
// only. float16/bfloat16 with head dims 64 and 128 take the fused kernels
// (Note [Fused attention] in attention.h); kv_cache_attention with a few rows
// per key/value head takes the split decode kernel (float32 too). The rest
// runs as two matmuls through the public op (cuBLASLt) around the generated
// scaled, masked, causal softmax (Note [Softmax kernel]). As the CPU kernel:
// float16 and bfloat16 inputs compute in float32 and round once at the end; a
// row whose keys are all masked out is NaN. Shapes and errors come from the
// Meta kernel.

#include "jit/codegen_cuda/op_kernels/attention.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <vector>

#include "jit/codegen_cuda/op_kernels/op_sources.h"
#include "jit/codegen_cuda/op_kernels/op_support.h"
#include "jit/codegen_cuda/op_kernels/softmax.h"
#include "kiln/dispatch.h"
#include "kiln/ops.h"
#include "runtime/core/tensor_utils.h"
#include "runtime/cuda/cuda_runtime.h"
#include "runtime/cuda/device_guard.h"

namespace kiln::jit::cuda {
namespace {

// [..., Hkv, S, E] -> [..., Hkv * group, S, E], each head repeated `group`
// times in a row (repeat_interleave), for the unfused path.
Tensor repeat_heads(const Tensor& t, int64_t group) {
  if (group == 1) return t;
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  const size_t h = sizes.size() - 3;
  std::vector<int64_t> merged = sizes;
  merged[h] *= group;
  sizes.insert(sizes.begin() + static_cast<std::ptrdiff_t>(h) + 1, group);
  return t.unsqueeze(static_cast<int64_t>(h) + 1).expand(sizes).reshape(merged);
}

void fill_zero(const Tensor& out) {
  kiln::cuda::DeviceGuard guard(out.device().index());
  cudaStream_t stream = kiln::cuda::raw(kiln::cuda::Stream::current(out.device()));
  KILN_CUDA_CHECK_DEVICE(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), stream),
                         out.device().index());
  out.impl()->bump_version();
}

// The unfused path: q @ k^T, the softmax kernel, @ v, in float32 (float64 for float64).
Tensor unfused(const Tensor& result, const Tensor& q, const Tensor& k, const Tensor& v,
               const std::optional<Tensor>& attn_mask, bool is_causal, double sc) {
  const DType ct = q.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor qc = dense(q, ct), kc = dense(k, ct), vc = dense(v, ct);
  Tensor scores = dense(kiln::matmul(qc, kc.transpose(-2, -1)));
  Tensor probs = attention_softmax(scores, sc, attn_mask, is_causal);
  Tensor out = kiln::matmul(probs, vc);
  if (out.dtype() == result.dtype() && out.sizes() == result.sizes()) return out;
  copy_into_cuda(result, out.expand(result.sizes()));
  return result;
}

// Note [Few-row attention]
// Attention of a few query rows (a prompt of one token: gpt2 at (1, 1)) has
// nothing for the prefill kernel's 64-row tiles to do: on an H200 it took
// 5.7 us a layer for one row and one key, most of it fixed cost. When q, k
// and v are [B, H, L, E] with unbroadcast batch dims, no mask, and the rows
// per kv head fit the decode kernel (kDecodeMaxRows), the decode kernel
// runs instead, with its position a constant: 0 for causal attention (row i
// sees keys j <= i, PyTorch's top-left alignment), S - 1 otherwise (every key).
bool few_rows(const Tensor& q, const Tensor& k, const Tensor& v,
              const std::optional<Tensor>& attn_mask, int64_t group) {
  return !attn_mask && q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.size(0) == q.size(0) &&
         v.size(0) == q.size(0) && v.size(1) == k.size(1) && v.size(2) == k.size(2) &&
         k.size(1) * group == q.size(1) &&
         decode_supported(q.dtype(), q.size(3), v.size(3), group * q.size(2));
}

void run_few_rows(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                  bool is_causal, double sc) {
  run_decode_attention(out, q, k, v, Tensor(), sc, is_causal ? 0 : k.size(2) - 1);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const std::optional<Tensor>& attn_mask, double dropout_p,
                                    bool is_causal, std::optional<double> scale, bool enable_gqa) {
  const char* op = "scaled_dot_product_attention";
  Tensor meta = kiln::scaled_dot_product_attention(
      meta_of(q), meta_of(k), meta_of(v), meta_of(attn_mask), is_causal, scale, enable_gqa);
  KILN_CHECK(dropout_p == 0.0, "[", op,
             "] expected dropout_p == 0 (kiln's attention is for inference), got ", dropout_p);
  check_device(k, q.device(), op, "key");
  check_device(v, q.device(), op, "value");
  if (attn_mask) check_device(*attn_mask, q.device(), op, "attn_mask");
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor result = empty_tensor(meta.sizes(), q.dtype(), q.device());
  if (result.numel() == 0) return result;
  if (k.size(-2) == 0) {  // no keys: an empty sum, as the CPU kernel's product gives
    fill_zero(result);
    return result;
  }
  // The same rule as the Meta kernel (Note [Grouped-query attention as a batch dim]).
  const bool gqa =
      enable_gqa && q.dim() >= 3 && k.dim() >= 3 && v.dim() >= 3 && q.size(-3) > k.size(-3);
  const int64_t group = gqa ? q.size(-3) / k.size(-3) : 1;
  if (few_rows(q, k, v, attn_mask, group)) {
    run_few_rows(result, q, k, v, is_causal, sc);
    return result;
  }
  if (prefill_supported(q.dtype(), q.size(-1), v.size(-1))) {
    run_prefill_attention(result, q, k, v, attn_mask, is_causal, Tensor(), sc, group);
    return result;
  }
  return unfused(result, q, repeat_heads(k, group), repeat_heads(v, group), attn_mask, is_causal,
                 sc);
}

// Note [Merged heads]
// A multi-head block reads attention's output [B, H, T, D] as [B, T, H * D]:
// transpose(1, 2).reshape(...) copies it, a kernel of its own that reads and
// writes the whole output again. On CUDA the trace pass fold_merged_heads
// (jit/passes/merged_heads.h) turns sdpa + that copy into
// attention_merged_heads, whose result [..., T, H, D] the prefill kernel
// writes directly through a transposed view (its output row stride H * D
// instead of D), so the reshape after it is a view. Other attention (the
// unfused path, float32) writes its usual output and copies it, as before.
Tensor attention_merged_heads(const Tensor& q, const Tensor& k, const Tensor& v,
                              const std::optional<Tensor>& attn_mask, double dropout_p,
                              bool is_causal, std::optional<double> scale, bool enable_gqa) {
  const char* op = "attention_merged_heads";
  Tensor meta = kiln::scaled_dot_product_attention(
      meta_of(q), meta_of(k), meta_of(v), meta_of(attn_mask), is_causal, scale, enable_gqa);
  KILN_CHECK(meta.dim() >= 3, "[", op,
             "] expected an output with a heads dim (at least 3 dims), got shape ", meta.sizes());
  std::vector<int64_t> sizes(meta.sizes().begin(), meta.sizes().end());
  std::swap(sizes[sizes.size() - 3], sizes[sizes.size() - 2]);
  Tensor result = empty_tensor(sizes, q.dtype(), q.device());
  const Tensor heads = result.transpose(-3, -2);  // [..., H, L, Ev] over result's memory
  const bool gqa =
      enable_gqa && q.dim() >= 3 && k.dim() >= 3 && v.dim() >= 3 && q.size(-3) > k.size(-3);
  if (dropout_p == 0.0 && result.numel() > 0 && k.size(-2) > 0 && k.device() == q.device() &&
      v.device() == q.device() && (!attn_mask || attn_mask->device() == q.device()) &&
      prefill_supported(q.dtype(), q.size(-1), v.size(-1)) && prefill_writes(heads)) {
    const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    const int64_t group = gqa ? q.size(-3) / k.size(-3) : 1;
    // One row per head: [B, H, 1, E] in merged order is contiguous.
    if (q.size(-2) == 1 && heads.is_contiguous() && few_rows(q, k, v, attn_mask, group)) {
      run_few_rows(heads, q, k, v, is_causal, sc);
      return result;
    }
    run_prefill_attention(heads, q, k, v, attn_mask, is_causal, Tensor(), sc, group);
    return result;
  }
  // Every error, and every other case, as scaled_dot_product_attention's.
  Tensor a =
      scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa);
  if (result.numel() > 0) copy_into_cuda(heads, a);
  return result;
}

// Note [Cache positions in range]: what a position outside [0, S - L] raises.
std::string position_error(int64_t S, int64_t L) {
  return "[kv_cache_attention] expected cache_position in [0, S - L] = [0, " +
         std::to_string(S - L) + "] (S = " + std::to_string(S) +
         " cache slots, L = " + std::to_string(L) + " query rows), got {}";
}

Tensor kv_cache_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos,
                          std::optional<double> scale) {
  const char* op = "kv_cache_attention";
  Tensor meta = kiln::kv_cache_attention(meta_of(q), meta_of(k), meta_of(v), meta_of(pos), scale);
  check_device(k, q.device(), op, "key_cache");
  check_device(v, q.device(), op, "value_cache");
  check_device(pos, q.device(), op, "cache_position");
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor result = empty_tensor(meta.sizes(), q.dtype(), q.device());
  if (result.numel() == 0) return result;
  const int64_t L = q.size(2), S = k.size(2), group = q.size(1) / k.size(1);
  if (S == 0) {
    fill_zero(result);
    return result;
  }
  // Note [Cache positions in range]: the fused kernels flag a position
  // outside [0, S - L] (the meta twin checked L <= S).
  const bool decode = decode_supported(q.dtype(), q.size(3), v.size(3), group * L);
  if (decode || prefill_supported(q.dtype(), q.size(3), v.size(3))) {
    const DeviceErrorFlag flag(q.device(), position_error(S, L));
    if (decode) {
      run_decode_attention(result, q, k, v, pos, sc, 0, nullptr, flag.ptr());
    } else {
      run_prefill_attention(result, q, k, v, std::nullopt, true, pos, sc, group, flag.ptr());
    }
    flag.check();
    return result;
  }
  // The unfused path reads the position only through the mask, so it is
  // checked first (a position out of range used to give a result here).
  check_values_in_range(pos, 0, S - L, position_error(S, L));
  // keep[b, 0, i, j] = j - i <= pos[b], built on the device from the position.
  const TensorOptions i64 = TensorOptions(kInt64).device(q.device());
  Tensor rel = kiln::arange(S, i64).view({1, 1, 1, S}) - kiln::arange(L, i64).view({1, 1, L, 1});
  Tensor keep = kiln::le(rel, pos.reshape({-1, 1, 1, 1}));
  return unfused(result, q, repeat_heads(k, group), repeat_heads(v, group), keep, false, sc);
}

// Note [Cache writes in the decode kernel]: the writes and the attention in
// one decode kernel where it takes them, else the three ops as recorded.
Tensor kv_cache_attention_write(const Tensor& q, const Tensor& kc, const Tensor& vc,
                                const Tensor& pos, const Tensor& k, const Tensor& v,
                                std::optional<double> scale) {
  const char* op = "kv_cache_attention_write";
  Tensor km = meta_of(kc), vm = meta_of(vc);
  kiln::index_copy_(km, 2, meta_of(pos).reshape({-1}), meta_of(k));
  kiln::index_copy_(vm, 2, meta_of(pos).reshape({-1}), meta_of(v));
  Tensor meta = kiln::kv_cache_attention(meta_of(q), km, vm, meta_of(pos), scale);
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&kc, "key_cache"},
                                {&vc, "value_cache"},
                                {&pos, "cache_position"},
                                {&k, "key"},
                                {&v, "value"}}) {
    check_device(*t, q.device(), op, name);
  }
  const int64_t es = static_cast<int64_t>(q.element_size());
  const int64_t S = kc.size(2), group = q.size(1) / kc.size(1);
  const bool fused =
      pos.numel() == 1 && q.size(2) == 1 && k.size(2) == 1 && v.size(2) == 1 && S > 0 &&
      k.dtype() == q.dtype() && v.dtype() == q.dtype() && kc.dtype() == q.dtype() &&
      vc.dtype() == q.dtype() && decode_supported(q.dtype(), q.size(3), vc.size(3), group) &&
      aligned_operand(kc, 16 / es).is_same(kc) && aligned_operand(vc, 16 / es).is_same(vc);
  if (!fused) {
    Tensor kw = kc, vw = vc;
    kiln::index_copy_(kw, 2, pos.reshape({-1}), k);
    kiln::index_copy_(vw, 2, pos.reshape({-1}), v);
    return kiln::kv_cache_attention(q, kc, vc, pos, scale);
  }
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor result = empty_tensor(meta.sizes(), q.dtype(), q.device());
  const DeviceErrorFlag flag(q.device(),
                             "[index_copy_] index {} is out of bounds for dimension 2 "
                             "with size " +
                                 std::to_string(S));
  DecodeWrite w{aligned_operand(k, 16 / es), aligned_operand(v, 16 / es), flag.ptr()};
  run_decode_attention(result, q, kc, vc, pos, sc, 0, &w);
  flag.check();
  return result;
}

}  // namespace

NamedSources attention_source_samples() {
  NamedSources out = prefill_source_samples();
  for (auto& s : decode_source_samples()) out.push_back(std::move(s));
  return out;
}

KILN_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("scaled_dot_product_attention", &scaled_dot_product_attention);
  m.impl("kv_cache_attention", &kv_cache_attention);
  m.impl("attention_merged_heads", &attention_merged_heads);
  m.impl("kv_cache_attention_write", &kv_cache_attention_write);
}

}  // namespace kiln::jit::cuda
