#pragma once

// How a reduction group maps onto its generated CUDA kernel (Note [CUDA
// reduction ABI]): dims split into kept and reduced, ordered by the first
// loaded input's strides and merged; each operand's walk; the schedule (Note
// [CUDA reduction schedules for groups]); the argument words. Host logic
// only: no device is touched, so tests check it without a GPU.

#include <cstdint>
#include <string>
#include <vector>

#include "jit/codegen_cuda/reduce_source.h"
#include "jit/passes/fusion.h"

namespace kiln::jit::cuda {

struct ReducePlan {
  ReductionKernel kernel;
  ReduceSpec spec;                      // spec.kernel points at `kernel`: a plan is not copied
  std::vector<Tensor> tensors;          // operands in ABI order
  std::vector<bool> outputs;            // per operand
  std::vector<int64_t> ksizes, rsizes;  // merged kept / reduced sizes
  std::vector<std::vector<int64_t>> kst, rst;  // per operand, strides over them
  int64_t rows = 1, n = 1;
  double eps = 0;
  int64_t correction = 0;
  int64_t splits = 1;  // blocks per row (spec.split), each over `chunk` elements
  int64_t chunk = 0;
  size_t words = 0;  // 8-byte argument words

  ReducePlan() = default;
  ReducePlan(const ReducePlan&) = delete;
  ReducePlan& operator=(const ReducePlan&) = delete;
};

// Fills `plan` for `group` on a device with `sm_count` multiprocessors, or
// returns false with the reason in `why` (the group then runs node by node).
bool plan_reduction(const ReductionGroup& group, int sm_count, ReducePlan* plan, std::string* why);
// The kernel's argument struct as 8-byte words (reads the operands' data
// pointers); `workspace` is the split kernel's partials and counters.
std::vector<int64_t> reduce_args(const ReducePlan& plan, void* workspace = nullptr);
// Bytes of workspace a split plan needs (partials, then a counter per row); 0 unsplit.
size_t reduce_workspace_bytes(const ReducePlan& plan);
size_t reduce_counter_offset(const ReducePlan& plan);

}  // namespace kiln::jit::cuda
