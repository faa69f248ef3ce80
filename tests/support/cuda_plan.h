#pragma once

// Plans this thread's pending trace as on CUDA, without a GPU, for the golden
// tests of CUDA-only passes.

#include <string>
#include <vector>

#include "jit/plan/pipeline.h"
#include "jit/record/trace_buffer.h"

namespace kiln::testing {

// The passes see only the nodes' device, so a CPU trace whose nodes are
// marked cuda gets the CUDA plan. Takes this thread's trace, returns that
// plan, and runs the rewritten nodes on the CPU (whose kernels compute what
// the fused CUDA ones do), so every tensor of the trace is then real.
inline std::string plan_as_cuda_then_run() {
  jit::TraceBuffer& trace = jit::TraceBuffer::current();
  const PendingValue* marker = trace.marker();
  std::vector<jit::Node> nodes = trace.take_nodes();
  for (jit::Node& n : nodes) n.device = Device::cuda();
  std::string described = jit::describe_plan(nodes);
  for (jit::Node& n : nodes) n.device = Device::cpu();
  (void)jit::run_trace(std::move(nodes), marker);
  return described;
}

}  // namespace kiln::testing
