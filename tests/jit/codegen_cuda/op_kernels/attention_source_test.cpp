// The fused attention kernels' sources (every variant) compile to SASS with
// NVRTC for sm_80 as well as sm_90. Their inline PTX (cp.async, ldmatrix,
// mma.sync) is what differs between architectures, so each variant is built
// for both: CudaOpsSource.EveryOpKernelCompilesForHopperAndAmpere compiles
// every op kernel sample, these included, for sm_90, and this test adds
// sm_80 for each (each build takes about half a second of one core). This
// needs the toolkit, not a GPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "jit/codegen_cuda/nvrtc.h"
#include "jit/codegen_cuda/op_kernels/op_sources.h"
#include "runtime/cuda/cuda_runtime.h"

namespace {

namespace kc = kiln::jit::cuda;

kc::NamedSources attention_sources() {
  kc::NamedSources out;
  for (auto& s : kc::op_source_samples()) {
    if (s.first.rfind("kiln_attn_", 0) == 0) out.push_back(std::move(s));
  }
  return out;
}

TEST(AttentionSource, EveryVariantCompilesForAmpere) {
  if (!kiln::cuda::built()) GTEST_SKIP() << "kiln was built without the CUDA toolkit (no NVRTC)";
  const kc::NamedSources sources = attention_sources();
  // Prefill: 2 dtypes x 2 head dims x 6 mask kinds x 2 forms (Note [Prefill keys split over
  // warps]); decode: 3 dtypes x 2 head dims x 5 row counts, and the two-stage form of
  // those up to 8 rows (Note [Decode tiles in flight]), and at one row without
  // the prefetch (Note [Decode cache prefetched early]), then without the
  // early loads too (Note [Decode loads side by side]), and at one row with
  // the keys taken by warps, in one and two stages (Note [Decode keys by warp]).
  ASSERT_EQ(sources.size(), 48u + 30u + 24u + 12u + 6u + 6u);
  struct Job {
    size_t source;
    int arch;
  };
  std::vector<Job> jobs;
  for (size_t i = 0; i < sources.size(); ++i) jobs.push_back({i, 80});
  std::vector<std::string> failures(jobs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t j; (j = next.fetch_add(1)) < jobs.size();) {
      const auto& [name, src] = sources[jobs[j].source];
      try {
        kc::CompiledKernel ck = kc::nvrtc_compile(src, name, jobs[j].arch);
        if (ck.is_ptx || ck.image.size() <= 1000u) failures[j] = "no SASS image";
      } catch (const kiln::Error& e) {
        failures[j] = e.what() + std::string("\nsource:\n") + src;
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t) {
    threads.emplace_back(work);
  }
  for (std::thread& t : threads) t.join();
  for (size_t j = 0; j < jobs.size(); ++j) {
    EXPECT_TRUE(failures[j].empty())
        << sources[jobs[j].source].first << " sm_" << jobs[j].arch << ": " << failures[j];
  }
}

TEST(AttentionSource, VariantsSpellTheirChoices) {
  if (!kiln::cuda::built()) GTEST_SKIP() << "kiln was built without the CUDA toolkit (no NVRTC)";
  std::vector<std::string> names;
  for (const auto& [name, src] : attention_sources()) {
    names.push_back(name);
    // Tensor cores in the prefill kernels, the device-side position in both
    // position-reading variants, no toolkit header anywhere.
    if (name.rfind("kiln_attn_fwd_", 0) == 0) {
      EXPECT_NE(src.find("mma.sync.aligned.m16n8k16.row.col.f32"), std::string::npos) << name;
    }
    if (name.find("causalpos") != std::string::npos || name.rfind("kiln_attn_dec_", 0) == 0) {
      EXPECT_NE(src.find("pos["), std::string::npos) << name;
    }
    EXPECT_EQ(src.find("#include"), std::string::npos) << name;
    // Note [Decode keys by warp]: each key's weight reaches the warp's lanes
    // by a shuffle, and the warps' rows meet once, in shared memory.
    if (name.rfind("kiln_attn_dec_", 0) == 0) {
      const bool by_warp = name.find("_wk") != std::string::npos;
      EXPECT_EQ(src.find("__shfl_sync(0xffffffffu, e,") != std::string::npos, by_warp) << name;
      EXPECT_EQ(src.find("s_wacc[warp]") != std::string::npos, by_warp) << name;
    }
    // Note [Prefill keys split over warps]: the split form combines its warps at the end.
    if (name.rfind("kiln_attn_fwd_", 0) == 0) {
      const bool split = name.size() > 3 && name.compare(name.size() - 3, 3, "_sk") == 0;
      EXPECT_EQ(src.find("cm[w * 16 + r]") != std::string::npos, split) << name;
    }
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  for (const char* want :
       {"kiln_attn_fwd_f16_d64_causal", "kiln_attn_fwd_bf16_d128_ma_f32",
        "kiln_attn_fwd_f16_d128_causalpos", "kiln_attn_fwd_bf16_d64_mb",
        "kiln_attn_fwd_f16_d64_causal_sk", "kiln_attn_fwd_bf16_d128_mb_sk",
        "kiln_attn_dec_f16_d64_r1", "kiln_attn_dec_f32_d128_r16", "kiln_attn_dec_f16_d64_r1_p2",
        "kiln_attn_dec_f32_d128_r8_p2", "kiln_attn_dec_f16_d64_r1_p2_np_nl",
        "kiln_attn_dec_f16_d64_r1_p2_wk", "kiln_attn_dec_f32_d128_r1_wk"}) {
    EXPECT_TRUE(std::binary_search(names.begin(), names.end(), std::string(want))) << want;
  }
}

// Note [Decode loads side by side]: the first tile's copies go out before
// the barrier that publishes the query rows, unless the variant says not to.
TEST(AttentionSource, DecodeIssuesItsFirstTileBeforeTheBarrier) {
  if (!kiln::cuda::built()) GTEST_SKIP() << "kiln was built without the CUDA toolkit (no NVRTC)";
  int seen = 0;
  for (const auto& [name, src] : attention_sources()) {
    if (name.rfind("kiln_attn_dec_", 0) != 0) continue;
    const size_t body = src.find("extern \"C\" __global__");
    ASSERT_NE(body, std::string::npos) << name;
    const size_t copy = src.find("kiln_cp16(skb", body),
                 barrier = src.find("__syncthreads()", body);
    ASSERT_NE(copy, std::string::npos) << name;
    ASSERT_NE(barrier, std::string::npos) << name;
    const bool late = name.size() > 3 && name.compare(name.size() - 3, 3, "_nl") == 0;
    EXPECT_EQ(copy < barrier, !late) << name;
    // The last block's first partials load before the (max, sum) loads.
    EXPECT_EQ(src.find("x0[u] = u < ns ? __ldcg(") != std::string::npos, !late) << name;
    ++seen;
  }
  EXPECT_GT(seen, 0);
}

}  // namespace
