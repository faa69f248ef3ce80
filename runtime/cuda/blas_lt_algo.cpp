#include "runtime/cuda/blas_lt_algo.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/logging.h"
#include "runtime/core/env.h"
#include "runtime/core/hooks.h"
#include "runtime/cuda/blas_lt.h"
#include "runtime/cuda/device_guard.h"

namespace kiln::cuda {
namespace {

struct AlgoKeyHash {
  size_t operator()(const AlgoKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct AlgoCache {
  std::mutex mu;
  std::unordered_map<AlgoKey, AlgoEntry, AlgoKeyHash> entries;
  std::atomic<int64_t> hits{0}, misses{0}, disk_hits{0};
  std::atomic<int64_t> miss_ns{0};
};

AlgoCache& algo_cache() {
  static auto* cache = new AlgoCache();  // leaked: used until exit
  return *cache;
}

// KILN_LT_ALGO_INDEX=i (0..15) takes the heuristic's (i+1)-th answer instead
// of its first (its last when it gives fewer), for every problem: run beside
// the default it surveys whether another of cuBLASLt's algorithms is faster
// for kiln's problems (perf/RESULTS.md, fifteenth session). -1, the default,
// takes the first.
int algo_index() {
  static const int index = static_cast<int>(env_int("KILN_LT_ALGO_INDEX", -1, 15).value_or(-1));
  return index;
}

// Note [cuBLASLt algorithm disk cache]
// A heuristic query costs from under a millisecond to over 100 ms (the first
// queries of a process for skinny shapes), and its answer is the same in the
// next process: cublasLt.h documents cublasLtMatmulAlgo_t as trivially
// serializable for use with the same cuBLAS version. Choices are therefore kept
// in the persistent cache (Note [Persistent cache hook]) under a key naming the
// library version, the device's name and compute capability and the problem
// (AlgoKey without the device index). A restored algorithm is still checked
// against the problem with cublasLtMatmulAlgoCheck before use; one that fails
// the check is asked for again and replaced. "No algorithm" is kept too.
std::string disk_key(const AlgoKey& key, int device) {
  const cudaDeviceProp& prop = device_properties(device);
  std::ostringstream k;
  k << "cublaslt-algo-2|" << cublasLtGetVersion() << "|" << prop.name << "|sm" << prop.major
    << prop.minor;
  for (size_t i = 1; i < key.size(); ++i) k << "|" << key[i];
  if (algo_index() > 0) k << "|ai" << algo_index();
  return k.str();
}

constexpr size_t kAlgoBytes = sizeof(cublasLtMatmulAlgo_t);

void save_algo(const std::string& disk, const AlgoEntry& e) {
  std::vector<char> payload(1 + kAlgoBytes + sizeof(uint64_t));
  payload[0] = e.found ? 1 : 0;
  std::memcpy(payload.data() + 1, &e.algo, kAlgoBytes);
  const uint64_t ws = e.workspace;
  std::memcpy(payload.data() + 1 + kAlgoBytes, &ws, sizeof ws);
  persistent_store(disk, payload);
}

std::optional<AlgoEntry> restore_algo(const std::string& disk, const AlgoQuery& q) {
  std::optional<std::vector<char>> payload = persistent_load(disk);
  if (!payload || payload->size() != 1 + kAlgoBytes + sizeof(uint64_t)) return std::nullopt;
  AlgoEntry e;
  e.found = (*payload)[0] != 0;
  if (!e.found) return e;
  std::memcpy(&e.algo, payload->data() + 1, kAlgoBytes);
  cublasLtMatmulHeuristicResult_t check{};
  if (cublasLtMatmulAlgoCheck(q.handle, q.desc, q.a, q.b, q.d, q.d, &e.algo, &check) !=
          CUBLAS_STATUS_SUCCESS ||
      check.workspaceSize > q.workspace_bytes) {
    KILN_LOG(Perf, "cuBLASLt: a stored algorithm failed its check; asking the heuristic again");
    return std::nullopt;
  }
  e.workspace = check.workspaceSize;
  return e;
}

// All of cuBLASLt's split-k reductions (cublasLtReductionScheme_t's mask).
constexpr uint32_t kAnyReduction = CUBLASLT_REDUCTION_SCHEME_MASK;

// The heuristic's answer for `q` among algorithms whose split-k reduction
// `reductions` allows (0: k is not split); found == false when it has none.
AlgoEntry ask_heuristic(const AlgoQuery& q, int device, uint32_t reductions) {
  Preference pref(device);
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(q.workspace_bytes));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(q.align_a));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(q.align_b));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(q.align_d));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(q.align_d));
  if (reductions != kAnyReduction) pref.set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions);
  cublasLtMatmulHeuristicResult_t results[16] = {};
  const int want = std::max(1, algo_index() + 1);
  int count = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(q.handle, q.desc, q.a, q.b, q.d, q.d,
                                                           pref.pref, want, results, &count);
  // NOT_SUPPORTED is an answer (no algorithm), not a failure.
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
    detail::fail_cublas(st, "cublasLtMatmulAlgoGetHeuristic(...)", __FILE__, __LINE__, device);
  }
  AlgoEntry entry;
  if (st == CUBLAS_STATUS_SUCCESS && count > 0) {
    const cublasLtMatmulHeuristicResult_t& result = results[std::min(count, want) - 1];
    entry.found = true;
    entry.algo = result.algo;
    entry.workspace = result.workspaceSize;
  }
  return entry;
}

uint32_t algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint32_t value = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof value, &written) !=
      CUBLAS_STATUS_SUCCESS)
    return 0;
  return value;
}

// Note [Split k rounds once]
// An algorithm that splits k sums its partials in a second step, which also
// applies the epilogue and beta * C. For 16-bit data (Note [Sums rounded
// once]) two kinds of split round more than once:
//   - partials summed in the output type (the in-place and output-type
//     reduction schemes) round every partial: such an answer is replaced by
//     the heuristic's answer among splits with float32 partials;
//   - on an H200 with cuBLASLt 13, a bfloat16 product of 15 rows, 6 columns
//     and k = 8 or 16 with the bias epilogue split k (algorithm 23) and
//     returned some outputs rounded before the bias, float32 partials or not
//     (perf/RESULTS.md, thirty-fourth session). Where k is at most
//     kShortK, a split answer with a bias, an activation or C is replaced by
//     the heuristic's unsplit answer: four k steps of a 64-wide tile leave a
//     split nothing to gain. At longer k the split stays: there it is what
//     fills the GPU (m 32, n 1024, k 4096: 10.2 µs split, 32.8 unsplit, the
//     thirty-fifth session's probe), and the splits with float32 partials
//     measured there (algorithm 66, the bias epilogue and C) round once
//     (`MatmulCuda.SixteenBitSumsRoundOnce`, k up to 4096).
// A replacement is logged; where the heuristic has none, the split stays.
constexpr int64_t kShortK = 256;

AlgoEntry resplit_if_needed(const AlgoEntry& first, const AlgoQuery& q, int device) {
  if (algo_config(first.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) <= 1) return first;
  const uint32_t scheme = algo_config(first.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
  uint32_t allowed;
  if (q.epilogue_or_c && q.k <= kShortK)
    allowed = CUBLASLT_REDUCTION_SCHEME_NONE;
  else if (scheme != CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
    allowed = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  else
    return first;
  AlgoEntry again = ask_heuristic(q, device, allowed);
  KILN_LOG(
      Perf, "cuBLASLt: the heuristic's answer splits k = ", q.k, " (reduction scheme ", scheme,
      "); ", again.found ? "took its " : "it has no ",
      allowed == CUBLASLT_REDUCTION_SCHEME_NONE ? "unsplit answer" : "answer with float32 partials",
      " (Note [Split k rounds once])");
  return again.found ? again : first;
}

}  // namespace

AlgoEntry find_algorithm(const AlgoKey& key, int device, const AlgoQuery& q) {
  AlgoCache& cache = algo_cache();
  AlgoEntry entry;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.entries.find(key);
    if (it != cache.entries.end()) {
      entry = it->second;
      cached = true;
    }
  }
  if (cached) {
    cache.hits.fetch_add(1, std::memory_order_relaxed);
  } else {
    cache.misses.fetch_add(1, std::memory_order_relaxed);
    const auto t0 = std::chrono::steady_clock::now();
    wait_for_warmup(device);
    const std::string stored_key = disk_key(key, device);
    std::optional<AlgoEntry> restored = restore_algo(stored_key, q);
    if (restored) {
      entry = *restored;
      cache.disk_hits.fetch_add(1, std::memory_order_relaxed);
    } else {
      entry = ask_heuristic(q, device, kAnyReduction);
      if (entry.found && q.round_once) entry = resplit_if_needed(entry, q, device);
      save_algo(stored_key, entry);
    }
    cache.miss_ns.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count(),
        std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(cache.mu);
    cache.entries.emplace(key, entry);
  }
  return entry;
}

LtCacheStats lt_cache_stats() {
  AlgoCache& c = algo_cache();
  return {c.hits.load(), c.misses.load(), c.disk_hits.load(),
          static_cast<double>(c.miss_ns.load()) / 1e6};
}

}  // namespace kiln::cuda
