// The kernels that stand for memcpy and memset nodes in captured graphs
// (Note [Kernel-only graphs]), and for small host values (Note [Host values
// under capture]), compile to SASS with NVRTC. Needs the toolkit,
// not a GPU; their results are checked by the GraphReplay suite on a GPU.

#include <gtest/gtest.h>

#include <string>

#include "graphs/graph.h"
#include "jit/codegen_cuda/nvrtc.h"
#include "runtime/cuda/cuda_runtime.h"

namespace {

TEST(GraphNodeKernels, CompileForHopperAndAmpere) {
  if (!kiln::cuda::built()) GTEST_SKIP() << "kiln was built without the CUDA toolkit (no NVRTC)";
  const std::string source = kiln::graphs::node_kernels_source();
  ASSERT_NE(source.find("kiln_graph_copy"), std::string::npos);
  ASSERT_NE(source.find("kiln_graph_fill"), std::string::npos);
  ASSERT_NE(source.find("kiln_graph_put"), std::string::npos);
  ASSERT_NE(source.find("kiln_graph_put_large"), std::string::npos);
  for (int arch : {80, 90}) {
    SCOPED_TRACE("sm_" + std::to_string(arch));
    EXPECT_FALSE(kiln::jit::cuda::nvrtc_compile(source, "kiln_graph_nodes", arch).image.empty());
  }
}

}  // namespace
