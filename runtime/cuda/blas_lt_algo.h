#pragma once

// cuBLASLt's algorithm choices: asked once per problem and kept, in this
// process and across processes (Note [cuBLASLt algorithm disk cache]).

#include <array>
#include <cstdint>

#include "runtime/cuda/blas_lt_impl.h"

namespace kiln::cuda {

// Everything the algorithm choice depends on: problem, layouts, types,
// epilogue, alignments, workspace and device (the device index first).
using AlgoKey = std::array<int64_t, 24>;

struct AlgoEntry {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;  // bytes the algorithm needs
};

// What a lookup that misses asks cuBLASLt about: the call's descriptors, the
// scratch it may use and the alignments of its pointers.
struct AlgoQuery {
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, d;
  size_t workspace_bytes;
  int64_t align_a, align_b, align_d;
  // 16-bit data, whose sums must be rounded once (Note [Split k rounds once]).
  bool round_once;
  // The epilogue adds a bias or applies an activation, or beta * C is read.
  bool epilogue_or_c;
  int64_t k;  // the length of each sum
};

// The algorithm for `key` on `device`, or found == false when cuBLASLt has
// none: from this process's cache, else from the disk cache (checked against
// the problem), else from cuBLASLt's heuristic (then kept in both). Misses
// wait for the device's warm-up (Note [cuBLASLt warm-up]).
AlgoEntry find_algorithm(const AlgoKey& key, int device, const AlgoQuery& query);

}  // namespace kiln::cuda
